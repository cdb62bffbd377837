"""The driver's bookkeeping of the batches in flight (gcc_dask.runtime.inflight) on plain states: futures are stand-ins
with a key and a status, the machine is driven by events with a simulated clock. No cluster, nothing sleeps."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from gcc_dask.runtime import inflight
from gcc_dask.runtime.cutoff import Speculation
from gcc_dask.runtime.inflight import (checks_data, decode_meta, final, finished, hand_over, inputs_again, late_report,
                                       leftovers, loop_timeout, lost_kept, not_kept, overtaken_by, scheme_futures,
                                       selects, settle_copy, split_fetch, take, task_report, unrecorded,
                                       waiting_for_turn, wall_clock_cutoffs)
from gcc_dask.runtime.plans import MAX_ATTEMPTS
from inflight_helpers import Fut, batch as _batch, cut as _cut, plan as _plan, scheme as _scheme


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(inflight).failed == 0


def test_the_loop_takes_at_most_what_is_free_and_knows_when_the_work_ran_out():
    todo = iter([(0, ["gcc"]), (1, ["gcc"]), (2, ["gcc"])])
    assert take(todo, 2) == ([(0, ["gcc"]), (1, ["gcc"])], False)
    assert take(todo, 0) == ([], False)  # (nothing free: nothing taken, nothing learnt)
    assert take(todo, 2) == ([(2, ["gcc"])], True)


def test_the_loop_waits_for_the_earliest_wake_up_at_most_its_longest_wait():
    assert loop_timeout(math.inf, 10.0, 0.5) == 0.5
    assert loop_timeout(10.125, 10.0, 0.5) == 0.125
    assert loop_timeout(12.0, 10.0, 0.5) == 0.5
    assert loop_timeout(9.0, 10.0, 0.5) == 0.0  # (overdue: look at once)


def test_only_undecided_schemes_on_the_wall_clock_are_looked_at_and_each_when_reached():
    wall, virtual, cut, done = _scheme(), _scheme(_plan("v"), virtual=True), _scheme(_plan("c")), _scheme(_plan("d"))
    cut.decode = Fut("decode")
    done.machine.fail("gone")
    states = [_batch(0, gcc=wall, v=virtual), _batch(1, c=cut, d=done)]
    assert [(st.batch, s.plan.name) for st, s in wall_clock_cutoffs(states)] == [(0, "gcc")]
    # lazy: a scheme cut by the loop's action on an earlier one is no longer looked at
    later = _scheme(_plan("later"))
    seen = []
    for st, s in wall_clock_cutoffs([_batch(0, gcc=wall), _batch(1, later=later)]):
        seen.append(s.plan.name)
        later.decode = Fut("decode")
    assert seen == ["gcc"]


def test_a_report_counts_once_from_the_shard_or_its_copy_before_the_cutoff():
    s = _scheme()
    assert not late_report(s, 3, s.shards[3])
    assert late_report(s, 3, Fut("a resubmitted scheme's first attempt"))
    s.backup[3] = copy = Fut("eval-w3-gcc-b")
    assert not late_report(s, 3, copy)
    s.machine.shard_finished(3, 0.1)
    assert late_report(s, 3, s.shards[3])  # its outcome is known
    s2 = _scheme()
    _cut(s2)
    s2.decode = Fut("decode")
    assert late_report(s2, 7, s2.shards[7])  # decided


@pytest.mark.parametrize(("reporter", "status", "other_status", "outcome", "stands"), [
    ("copy", "finished", "pending", "won", "copy"),
    ("shard", "finished", "pending", "won", "shard"),
    ("copy", "error", "pending", "wait", "shard"),
    ("shard", "lost", "finished", "wait", "copy"),
    ("copy", "error", "error", "erased", "shard"),
], ids=["copy-first", "shard-first", "copy-failed", "shard-lost-copy-done", "both-failed"])
def test_of_a_shard_and_its_copy_the_first_result_stands_for_it(reporter, status, other_status, outcome, stands):
    s = _scheme()
    shard, copy = s.shards[2], Fut("copy")
    s.backup[2] = copy
    fut, other = (copy, shard) if reporter == "copy" else (shard, copy)
    other.status = other_status
    assert settle_copy(s, 2, fut, status) == (outcome, other)
    assert s.shards[2] is {"shard": shard, "copy": copy}[stands] and 2 not in s.backup


def test_a_decode_score_or_labels_report_counts_only_for_the_current_task_of_a_scheme_not_done():
    s = _scheme()
    _cut(s)
    old, s.decode = Fut("decode-a0"), Fut("decode-a1")
    st = _batch(5, gcc=s)
    inflight = {5: st}
    assert task_report(inflight, 5, "gcc", s.decode, "decode") == (st, s)
    assert task_report(inflight, 5, "gcc", old, "decode") is None  # submitted again since
    assert task_report(inflight, 6, "gcc", s.decode, "decode") is None  # not in flight
    s.score = Fut("score")
    assert task_report(inflight, 5, "gcc", s.decode, "decode") is None  # being scored: the score decides
    assert task_report(inflight, 5, "gcc", s.score, "score") == (st, s)
    s.machine.decode_finished()
    assert task_report(inflight, 5, "gcc", s.score, "score") is None  # done
    st.labels = Fut("labels", "error")
    assert task_report(inflight, 5, "", st.labels, "labels") == (st, None)
    st.labels.status = "finished"
    assert task_report(inflight, 5, "", st.labels, "labels") is None  # written: nothing to do
    assert task_report(inflight, 5, "", Fut("labels-a1", "error"), "labels") is None


def test_the_cutoff_cancels_what_it_does_not_keep_and_every_copy():
    s = _scheme()
    s.shards[7] = None  # (a lazy spare never submitted)
    s.backup[5] = copy = Fut("copy-5")
    _cut(s, arrived=[0, 1, 2, 3, 4, 6])
    assert s.received == [0, 1, 2, 3, 4, 6]
    assert not_kept(s) == [s.shards[5], copy] and s.backup == {}


def test_the_decode_is_told_its_cutoff_the_latencies_and_for_a_cut_the_copies():
    s = _scheme(start_wall=123.5)
    failed = np.zeros(8, dtype=bool)
    meta = decode_meta(s, 1, 0.6, None, failed, output_size=10, score=True)
    assert meta == {"status": 1, "cutoff_s": 0.6, "latency_s": None, "failed": failed, "batch_start": 123.5,
                    "output_size": 10, "score": True}
    assert decode_meta(s, 2, 1.0, None, failed, 10, False, backups=3)["backups"] == 3


def test_the_batches_before_the_one_cut_are_overtaken_and_the_waiting_ones_listed_by_seq():
    plan = _plan(backups=Speculation())
    a, b, c = _scheme(plan), _scheme(plan), _scheme(plan)
    states = [_batch(4, seq=0, gcc=a), _batch(7, seq=1, gcc=b), _batch(9, seq=2, gcc=c), _batch(11, seq=3)]
    assert [(st.batch, s is x) for (st, s), x in zip(overtaken_by(states, "gcc", 2), (a, b))] == [(4, True),
                                                                                                   (7, True)]
    assert overtaken_by(states, "bacc", 3) == []
    assert waiting_for_turn(states, "gcc") == {0: a, 1: b, 2: c}
    _cut(a)  # cut: it no longer waits
    assert waiting_for_turn(states, "gcc") == {1: b, 2: c}
    assert waiting_for_turn(states, "uncoded") == {}


class Code:
    """A stand-in for a coding scheme: a selection scheme's worker n evaluates input n mod 4."""

    def __init__(self, selection: bool) -> None:
        self.selection = selection

    def selected_input(self, worker: int) -> int | None:
        return worker % 4 if self.selection else None


def test_a_cut_looks_for_bad_data_when_nothing_arrived_or_a_selection_scheme_lost_shards():
    uncoded, gcc = Code(selection=True), Code(selection=False)
    assert selects(uncoded) and not selects(gcc) and not selects(None)
    s = _scheme()
    assert not checks_data(s, uncoded)  # nothing failed
    s.machine.shard_failed(0, 0.0)
    s.machine.received = []
    assert checks_data(s, gcc) and checks_data(s, None)  # every shard that ran failed
    s.machine.received = [1, 2]
    assert not checks_data(s, gcc) and not checks_data(s, None) and checks_data(s, uncoded)


def test_the_kept_shards_lost_with_a_decode_s_worker_are_named():
    s = _scheme()
    _cut(s)
    s.shards[1].status, s.shards[4].status, s.shards[5].status = "lost", "error", "cancelled"
    assert lost_kept(s, killed=True) == [1, 4, 5]
    assert lost_kept(s, killed=False) == []  # (f raised in the decode: nothing lost)
    s.machine.direct = True
    assert lost_kept(s, killed=True) == []


def test_a_batch_s_inputs_run_again_only_when_lost_with_a_worker_and_attempts_are_left():
    assert inputs_again(True, 0) and inputs_again(True, MAX_ATTEMPTS - 2)
    assert not inputs_again(True, MAX_ATTEMPTS - 1) and not inputs_again(False, 0)


def test_a_record_comes_from_the_score_else_the_decode_and_only_schemes_without_one_are_fetched():
    s, t = _scheme(), _scheme(_plan("bacc"))
    s.decode, t.decode, t.score = Fut("decode-s"), Fut("decode-t"), Fut("score-t")
    assert final(s) is s.decode and final(t) is t.score
    t.result = {"scheme": "bacc"}
    u = _scheme(_plan("uncoded"))
    assert unrecorded([_batch(0, gcc=s, bacc=t), _batch(1, uncoded=u)]) == [s, u]


def test_a_fetch_given_up_sends_its_batches_back_in_flight_or_to_the_next_fetch_in_order():
    states = [_batch(b) for b in (3, 5, 8, 9)]
    back, ready = split_fetch(states, {8, 3})
    assert [st.batch for st in back] == [3, 8] and [st.batch for st in ready] == [5, 9]


def test_a_run_stopped_by_an_error_keeps_the_finished_batches_records():
    done, running = _scheme(), _scheme()
    done.machine.decode_finished()
    ready = [_batch(1)]
    kept = finished(ready, [_batch(2, gcc=done), _batch(3, gcc=running)])
    assert [st.batch for st in kept] == [1, 2] and len(ready) == 1  # (ready itself unchanged)
    given, results = [], []
    hand_over([(kept[0], [{"r": 1}]), (kept[1], [{"r": 2}])], lambda b, recs: given.append((b, recs)), results)
    assert given == [(1, [{"r": 1}]), (2, [{"r": 2}])] and results == []
    hand_over([(kept[0], [{"r": 1}, {"r": 3}])], None, results)
    assert results == [{"r": 1}, {"r": 3}]


def test_every_task_still_running_is_listed_for_the_cancel():
    s = _scheme()
    s.shards[6] = None
    s.backup[2] = copy = Fut("copy")
    s.decode = Fut("decode")
    assert scheme_futures(s) == [*(f for f in s.shards if f is not None), copy, s.decode]
    st = _batch(0, gcc=s)
    st.labels = Fut("labels")
    left = leftovers([st, _batch(1)])  # (a batch with no scheme yet leaves nothing)
    assert left == [*scheme_futures(s), st.reference, st.labels]
