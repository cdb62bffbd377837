"""Every straggler behaviour of a batch on its pure state machine (gcc_dask.runtime.batch_machine), with a simulated
clock: the test passes the time with each event, nothing sleeps, no cluster runs, and each test asserts the exact
actions the machine returns (docs/architecture.rst, section 'The batch machine')."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gcc_dask.runtime.batch_machine import (
    CUT,
    DONE,
    FAILED,
    WAITING,
    BackUp,
    BatchMachine,
    Copy,
    Cut,
    Decode,
    Fail,
    Promote,
    Redecode,
    Rescore,
    Rescue,
    Restart,
    Submit,
    Unscored,
    WatchShards,
)
from gcc_dask.runtime.cutoff import CutoffPolicy, Speculation
from gcc_dask.runtime.plans import SchemePlan

INF = math.inf


def _plan(n=8, wait_for=6, **kwargs) -> SchemePlan:
    policy = {k: kwargs.pop(k) for k in ("deadline", "min_results", "on_shortfall", "groups") if k in kwargs}
    return SchemePlan(name="gcc", num_workers=n, policy=CutoffPolicy(num_workers=n, wait_for=wait_for, **policy),
                      **kwargs)


def _machine(plan: SchemePlan, lazy: bool = False, **kwargs) -> BatchMachine:
    m = BatchMachine(plan, regular=plan.regular(lazy), **kwargs)
    m.start()
    return m


def test_the_batch_starts_with_every_shard_and_is_cut_at_n_minus_s():
    plan = _plan(n=8, wait_for=6)  # S = 2
    m = BatchMachine(plan, regular=plan.regular(False))
    assert m.start() == [Submit(tuple(range(8)), tuple(range(8)))]
    for w in range(5):
        assert m.shard_finished(w, 0.1 * (w + 1)) == []
    assert m.phase == WAITING
    assert m.shard_finished(7, 0.6) == [Cut((0, 1, 2, 3, 4, 7), 0.6, 1)]
    assert m.phase == CUT and m.received == [0, 1, 2, 3, 4, 7]
    # the stragglers' late reports change nothing
    assert m.shard_finished(5, 0.7) == [] and m.tick(0.8) == ([], INF)
    np.testing.assert_allclose(m.latency(), [0.1, 0.2, 0.3, 0.4, 0.5, np.nan, np.nan, 0.6])


def test_lazy_spares_start_below_the_batch_and_one_is_promoted_per_failed_regular_shard():
    plan = _plan(n=8, wait_for=6, order=(1, 6, 3, 4, 2, 5, 0, 7))
    m = BatchMachine(plan, regular=plan.regular(True))
    assert m.start() == [Submit(tuple(range(8)), (1, 2, 3, 4, 5, 6))]
    # a regular shard fails: an erasure, and the first spare in the plan's order runs at the batch's priority
    assert m.shard_failed(3, 0.05) == [Promote((0,))]
    assert m.failed[3] and m.known[3] and m.launch_s[0] == 0.05
    # the promoted spare fails too: the next one
    assert m.shard_failed(0, 0.1) == [Promote((7,))]
    assert m.promote(False, 0.2) == []  # nothing more is due


def test_an_overtaken_batch_promotes_a_spare_for_each_regular_result_it_lacks():
    plan = _plan(n=6, wait_for=4)
    m = _machine(plan, lazy=True)  # regular 0-3, spares 4 and 5
    for w in (0, 1):
        m.shard_finished(w, 0.1)
    assert m.promote(False, 0.3) == []
    assert m.promote(True, 0.3) == [Promote((4, 5))]
    assert m.promoted.tolist() == [False] * 4 + [True, True]
    assert m.promote(True, 0.4) == []  # promoted already


def test_a_lazy_batch_whose_regular_results_come_late_runs_no_spare_for_the_wait_alone():
    """On a busy machine every result may come late: time alone never brings a spare in (only a failure or a
    later batch's cutoff does), and the batch keeps exactly its regular shards."""
    plan = _plan(n=8, wait_for=5, order=(1, 6, 3, 4, 2, 5, 0, 7))
    m = BatchMachine(plan, regular=plan.regular(True))
    assert m.start() == [Submit(tuple(range(8)), (1, 2, 3, 4, 6))]  # spares 5, 0, 7 below every batch in flight
    for now, w in zip((0.1, 10.0, 100.0, 1000.0), (6, 1, 4, 3)):
        assert m.shard_finished(w, now) == []
        assert m.tick(now * 10) == ([], INF) and m.promote(False, now * 10) == []
    assert m.shard_finished(2, 1e5) == [Cut((1, 2, 3, 4, 6), 1e5, 1)]
    assert not m.promoted.any()


@pytest.mark.parametrize("first", ["spare", "regular"])
def test_an_overtaken_batch_keeps_the_first_of_its_late_regular_shard_and_the_spare_promoted_for_it(first):
    """A regular shard is late and a later batch reaches its cutoff first: one spare (the first in the plan's
    order) runs at the batch's priority for the one missing result, and the batch keeps whichever of the two
    reports first; being overtaken again brings no further spare."""
    plan = _plan(n=8, wait_for=5, order=(1, 6, 3, 4, 2, 5, 0, 7))
    m = _machine(plan, lazy=True)  # regular 1, 2, 3, 4, 6; spares 5, 0, 7
    for w in (1, 6, 3, 4):
        m.shard_finished(w, 0.1)
    assert m.promote(True, 0.5) == [Promote((5,))]
    assert m.promote(True, 0.6) == []
    late, other = (5, 2) if first == "spare" else (2, 5)
    assert m.shard_finished(late, 0.8) == [Cut(tuple(sorted((1, 3, 4, 6, late))), 0.8, 1)]
    assert m.shard_finished(other, 0.9) == []
    assert m.promoted.tolist() == [False] * 5 + [True, False, False]
    kept = np.isin(np.arange(8), m.received)
    assert not (kept & ~(m.regular | m.promoted)).any()  # a spare is kept only once promoted


def test_a_late_shard_is_backed_up_once_spark_s_rule_says_it_is_late():
    plan = _plan(n=5, wait_for=4, backups=Speculation())  # quantile 0.75, multiplier 1.5, min_runtime 0.1
    m = _machine(plan)
    assert m.wants_turn and m.take_turn(0.0) and not m.take_turn(0.05)
    for w in (0, 1, 2):
        assert m.shard_finished(w, 0.25) == []
    # 3 of the 4 needed results in, median 0.25 s: shards 3 and 4 are late at 1.5 × 0.25 = 0.375 s, and the cutoff
    # lacks one result: one copy, of the first
    assert m.tick(0.3) == ([], 0.375)
    assert m.tick(0.375) == ([BackUp((3,), 0)], INF)
    assert m.backed.tolist() == [False, False, False, True, False] and m.backups == 1
    assert m.tick(0.5) == ([], INF)  # one copy per shard, as many as the cutoff lacks
    assert m.shard_finished(3, 0.55) == [Cut((0, 1, 2, 3), 0.55, 1)]


def test_no_backup_of_a_late_shard_before_the_batch_s_turn():
    plan = _plan(n=5, wait_for=4, backups=Speculation())
    m = _machine(plan)
    for w in (0, 1, 2):
        m.shard_finished(w, 0.2)
    assert m.tick(1.0) == ([], INF)  # no turn yet: its shards may be queued behind an older batch's
    assert m.take_turn(1.0)
    assert m.tick(1.2) == ([], 1.3)  # launched no earlier than its turn: late at 1.0 + 0.3 s
    assert m.tick(1.3) == ([BackUp((3,), 0)], INF)


def test_a_speculative_plan_launches_a_first_then_a_second_copy_of_a_late_input():
    rule = Speculation(quantile=0.5, multiplier=2.0, min_runtime=0.0, copies=2)
    plan = _plan(n=6, wait_for=6, groups=(0, 1) * 3, speculation=rule)  # K = 2: shard c·2 + k is copy c of k
    m = BatchMachine(plan, regular=plan.regular(False))
    assert m.start() == [Submit((0, 1), (0, 1))]
    assert m.shard_finished(0, 0.1) == []  # input 0 in; input 1 late after 2 × 0.1 s
    assert m.tick(0.15) == ([], 0.2)
    assert m.tick(0.2) == ([Copy((3,))], 0.4)  # its first backup; the next once that one runs 0.2 s too
    assert m.tick(0.3) == ([], 0.4)
    assert m.tick(0.4) == ([Copy((5,))], INF)  # the second copy of the late backup
    assert m.backups == 2
    assert m.shard_finished(5, 0.45) == [Cut((0, 5), 0.45, 1)]  # the first copy of each input wins


def test_a_failed_copy_of_a_speculative_plan_brings_the_next_one_at_once():
    rule = Speculation(copies=1)
    plan = _plan(n=4, wait_for=4, groups=(0, 1) * 2, speculation=rule)
    m = _machine(plan)
    assert m.shard_failed(1, 0.05) == [Copy((3,))]
    assert m.shard_finished(0, 0.1) == []
    assert m.shard_finished(3, 0.2) == [Cut((0, 3), 0.2, 1)]


def test_the_virtual_clock_decides_on_the_drawn_latencies_whatever_the_time_of_the_reports():
    plan = _plan(n=4, wait_for=2)
    m = _machine(plan, delays=np.array([0.1, 0.5, 0.2, 0.9]), virtual=True)
    assert m.tick(0.0) == ([], INF)
    assert m.shard_finished(0, 7.0) == []  # arrived at its draw, 0.1 s
    assert m.shard_finished(2, 3.0) == [Cut((0, 2), 0.2, 1)]
    assert m.arrivals[0] == 0.1


def test_a_deadline_cuts_a_batch_short_of_its_results():
    plan = _plan(n=4, wait_for=4, deadline=1.0)
    m = _machine(plan)
    m.shard_finished(0, 0.1)
    m.shard_finished(1, 0.2)
    assert m.tick(0.5) == ([], 1.0)
    assert m.tick(1.0) == ([Cut((0, 1), 1.0, 2)], INF)


def test_a_failed_shard_is_an_erasure_decoded_around():
    plan = _plan(n=4, wait_for=3)
    m = _machine(plan)
    assert m.shard_failed(1, 0.1) == []  # eager: no spare to promote
    for w in (0, 2):
        assert m.shard_finished(w, 0.2) == []
    assert m.shard_finished(3, 0.3) == [Cut((0, 2, 3), 0.3, 1)]
    assert m.failed.tolist() == [False, True, False, False]


def test_a_batch_whose_shards_all_failed_is_cut_with_nothing_to_decode_and_fails():
    plan = _plan(n=3, wait_for=2, min_results=2, on_shortfall="fail")
    m = _machine(plan)
    assert m.shard_failed(0, 0.1) == [] and m.shard_failed(1, 0.1) == []
    (cut,) = m.shard_failed(2, 0.2)
    assert cut.received == () and cut.status == 4
    # its decode (of nothing) fails: no estimate
    assert m.decode_failed("NotEnoughResultsError()", killed=False) == [Fail("decode failed: NotEnoughResultsError()")]
    assert m.phase == FAILED


def test_a_decode_lost_with_its_worker_is_run_again_then_the_batch_fails():
    m = _machine(_plan(n=4, wait_for=2))
    m.shard_finished(0, 0.1)
    m.shard_finished(1, 0.2)
    assert m.decode_failed("KilledWorker()", killed=True) == [Redecode()]
    assert m.decode_failed("KilledWorker()", killed=True) == [Redecode()]
    assert m.attempt == 2
    assert m.decode_failed("KilledWorker()", killed=True) == [Fail("decode failed: KilledWorker()")]
    assert m.phase == FAILED


def test_a_decode_whose_kept_shards_were_lost_runs_the_batch_again():
    m = _machine(_plan(n=4, wait_for=2))
    m.shard_finished(0, 0.1)
    m.shard_finished(1, 0.2)
    assert m.decode_failed("KilledWorker()", killed=True, lost=[1]) == [Restart()]
    last = _machine(_plan(n=4, wait_for=2), restarts=2)  # the last run allowed: decode again instead
    last.shard_finished(0, 0.1)
    last.shard_finished(1, 0.2)
    assert last.decode_failed("KilledWorker()", killed=True, lost=[1]) == [Redecode()]


def test_a_decode_that_raised_fails_the_batch_at_once():
    m = _machine(_plan(n=4, wait_for=2))
    m.shard_finished(0, 0.1)
    m.shard_finished(1, 0.2)
    assert m.decode_failed("ValueError('bad shape')", killed=False) == [Fail("decode failed: ValueError('bad shape')")]


def test_a_scheme_that_keeps_every_result_is_decoded_with_its_shards_and_watches_them_when_that_fails():
    plan = SchemePlan(name="uncoded", num_workers=4, policy=CutoffPolicy(num_workers=4, wait_for=4))
    m = BatchMachine(plan, delays=np.array([0.1, 0.4, 0.2, 0.3]), virtual=True)
    assert m.start() == [Submit((0, 1, 2, 3), (0, 1, 2, 3)), Decode((0, 1, 2, 3), 0.4)]
    assert m.direct and m.phase == CUT and m.shard_finished(0, 0.1) == []
    assert m.decode_failed("RuntimeError('f raised on shard 2')", killed=False) == [WatchShards()]
    assert not m.direct and m.received is None and m.phase == WAITING
    for w in (0, 1, 3):
        m.shard_finished(w, 0.0)
    assert m.shard_failed(2, 0.0) == [Cut((0, 1, 3), 0.4, 2)]


def test_a_quiet_worker_s_shards_run_again_only_when_the_cutoff_cannot_do_without_them():
    plan = _plan(n=8, wait_for=6)
    m = _machine(plan, lazy=True)  # regular 0-5, spares 6 and 7
    for w in (0, 1, 2):
        m.shard_finished(w, 0.1)
    # 3 in hand + 0 awaited elsewhere + 2 spares: one short of 6
    assert m.short_of([3, 4, 5], 0.5) == [Rescue((3,), 1)]
    assert m.launch_s[3] == 0.5 and m.rescues == 1
    assert m.short_of([5], 0.6) == []  # 3 + 2 elsewhere + 2 spares: none short


def test_a_finished_record_is_done_and_a_failed_one_stays_failed():
    m = _machine(_plan(n=4, wait_for=2))
    m.shard_finished(0, 0.1)
    m.shard_finished(1, 0.1)
    m.decode_finished()
    assert m.phase == DONE
    f = _machine(_plan(n=4, wait_for=2))
    assert f.fail("lost") == Fail("lost")
    f.decode_finished()
    assert f.phase == FAILED


@pytest.mark.parametrize("virtual", [False, True], ids=["wall", "virtual"])
def test_the_machine_is_deterministic(virtual):
    def run():
        plan = _plan(n=8, wait_for=6, deadline=2.0)
        m = _machine(plan, lazy=not virtual, delays=np.linspace(0.1, 0.8, 8)[::-1].copy(), virtual=virtual)
        out = []
        for i, w in enumerate((7, 6, 5, 4, 3, 2)):
            out += m.shard_finished(w, 0.1 * (i + 1))
        return out

    assert run() == run() and len(run()) == 1 and isinstance(run()[0], Cut)


def test_a_score_lost_with_its_worker_is_made_again_and_one_without_a_reference_keeps_the_record():
    plan = _plan(n=4, wait_for=3)
    m = _machine(plan)
    for w in range(3):
        m.shard_finished(w, 0.1)
    assert m.score_failed(killed=True, decoded=True) == [Rescore()]  # the score or its reference died
    assert m.score_failed(killed=True, decoded=False) == [Redecode()]  # the decode's record died too
    assert m.attempt == 2
    assert m.score_failed(killed=True, decoded=True) == [Unscored()]  # MAX_ATTEMPTS tries in all
    assert _machine(plan).score_failed(killed=False, decoded=True) == [Unscored()]  # f raised on the reference
