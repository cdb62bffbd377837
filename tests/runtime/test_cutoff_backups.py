"""``cutoff.backups``: a shard a cutoff scheme cannot do without, late by Spark's rule, gets one backup copy
on another worker (gcc_dask.runtime.late_shards.late_shards_due; batch_machine.BatchMachine._back_up_late). The rule alone, then
runs on a real LocalCluster with one persistently slow worker that holds more of a batch's shards than its
spare covers."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.pipeline import build_codes, build_plans
from gcc_dask.runtime.backups import Speculation
from gcc_dask.runtime.late_shards import first_copy, late_shards_due

INF = math.inf
SLOW_S = 3.0  # the slow worker's delay on every shard


def _mask(n, ws):
    return np.isin(np.arange(n), ws)


def test_only_the_shards_the_cutoff_cannot_do_without_get_a_copy():
    """Needed 8 of 10: 6 in by 0.2 s (5 regular, spare 8); shards 5-7 on a slow worker; spare 9 not in."""
    arr = np.array([0.2] * 5 + [INF] * 3 + [0.2, INF])
    awaited, none = _mask(10, [5, 6, 7]), np.zeros(10, dtype=bool)
    spare, rule = _mask(10, [9]), Speculation()
    # 6 results, 3 late and the spare late too (from the batch start): 2 short once 1.5 x 0.2 = 0.3 s is past
    due, wake = late_shards_due(arr, np.zeros(10), awaited, none, spare, 8, 0.29, rule)
    assert due.tolist() == [] and wake == pytest.approx(0.3)
    due, wake = late_shards_due(arr, np.zeros(10), awaited, none, spare, 8, 0.31, rule)
    assert due.tolist() == [5, 6] and wake == INF
    # a shard with a copy already counts as coming, so only one more
    assert late_shards_due(arr, np.zeros(10), awaited, _mask(10, [5]), spare, 8, 1.0, rule)[0].tolist() == [6]
    # 7 in: only one short, one copy
    seven = np.where(_mask(10, [9]), 0.2, arr)
    assert late_shards_due(seven, np.zeros(10), awaited, none, none, 8, 1.0, rule)[0].tolist() == [5]
    # a promoted spare (7) launched at 0.5 s is late only at 0.5 + 0.3; until then it counts as coming
    launch = np.where(_mask(10, [7]), 0.5, 0.0)
    due, wake = late_shards_due(arr, launch, awaited, none, none, 8, 0.6, rule)
    assert due.tolist() == [5] and wake == pytest.approx(0.8)
    launch[5] = 0.55  # launched last of the three: the two before get the copies
    assert late_shards_due(arr, launch, awaited, none, none, 8, 0.9, rule)[0].tolist() == [6, 7]
    # enough results in: no copy, however late the others
    eight = np.where(_mask(10, [5, 9]), 0.2, arr)
    assert late_shards_due(eight, np.zeros(10), _mask(10, [6, 7]), none, none, 8, 9.0, rule)[0].tolist() == []
    # Spark's quantile: floor(0.75 x 8) = 6 results first
    few = np.array([0.2] * 5 + [INF] * 5)
    assert late_shards_due(few, np.zeros(10), awaited, none, none, 8, 9.0, rule) == (pytest.approx([]), INF)
    assert late_shards_due(few, np.zeros(10), awaited, none, none, 8, 9.0, Speculation(quantile=0.5))[0].size == 3
    with pytest.raises(ValueError, match="expected one shape"):
        late_shards_due(arr, np.zeros(9), awaited, none, none, 8, 1.0, rule)


def test_of_a_shard_and_its_copy_the_first_result_wins_and_a_failure_waits_for_the_other():
    """The rule alone (late_shards.first_copy); the runner carrying it out is tested below."""
    assert [first_copy("finished", other) for other in ("pending", "finished", "error")] == ["won"] * 3
    assert [first_copy(status, "pending") for status in ("error", "lost", "cancelled")] == ["wait"] * 3
    assert first_copy("error", "finished") == "wait"  # its result is on its way: its own report decides
    assert [first_copy("error", other) for other in ("error", "lost", "cancelled")] == ["erased"] * 3


def _cfg(path, workload, backups: bool, num_samples: int = 64):
    return {"name": "backups", "source": {"kind": "synthetic", "num_samples": num_samples, "shape": [3], "seed": 4},
            "workload": workload, "code": {"num_inputs": 4, "num_workers": 8, "block_size": 4},
            "schemes": ["gcc"], "cutoff": {"stragglers": 1, "backups": backups},
            "speculation": {"min_runtime": "300ms"},
            "store": {"path": str(path)}, "run": {"progress": False, "max_batches_in_flight": 1}}


def test_the_plans_carry_the_rule_only_for_cutoff_schemes_on_the_wall_clock(tmp_path):
    workload = {"kind": "analytic", "name": "smooth"}
    cfg = load_config(_cfg(tmp_path / "a.zarr", workload, True) | {"schemes": ["gcc", "uncoded", "speculative"]})
    plans = {p.name: p for p in build_plans(cfg, build_codes(cfg))}
    assert plans["gcc"].backups == Speculation(quantile=0.5, min_runtime=0.3)
    assert plans["uncoded"].backups is None and plans["speculative"].backups is None
    off = load_config(_cfg(tmp_path / "b.zarr", workload, False))
    assert build_plans(off, build_codes(off))[0].backups is None
    virtual = load_config(_cfg(tmp_path / "c.zarr", workload, True) | {"stragglers": {"model": "shifted_exponential"}})
    assert build_plans(virtual, build_codes(virtual))[0].backups is None


def test_a_slow_worker_holding_more_than_the_spares_no_longer_holds_the_batch(tmp_path):
    """gcc N = 8, K = 4, S = 1 on 3 workers, one of them holding every shard it runs (until the test lets them
    go: a worker slower than any timeout): round-robin puts 2 or 3 of a batch's 7 regular shards on it, more
    than its one spare covers. With backups every batch decodes from N - S results while the held shards are
    still held, with one copy or two (never more than it holds); without (that worker 3 s late on every shard),
    every batch waits for them. Events, not durations: the run with backups completes only if no batch waited
    for the held shards, however busy the machine."""
    import run_helpers
    from distributed import Client, LocalCluster

    run_helpers.GATE.clear()
    run_helpers.HELD.update(held=0, let_through=0)
    stop = threading.Event()

    def safety_net():  # a broken rule fails the test (the gate opens, the run ends) instead of hanging it
        if not stop.wait(300):
            run_helpers.GATE.set()

    net = threading.Thread(target=safety_net, daemon=True)
    net.start()
    try:
        with LocalCluster(n_workers=3, threads_per_worker=4, processes=False, dashboard_address=":0",
                          silence_logs=40) as cluster, Client(cluster) as client:
            workers = sorted(client.scheduler_info()["workers"])
            held = {"kind": "callable", "name": "run_helpers:held_on", "params": {"kwargs": {"address": workers[1]}}}
            on = gd.run_pipeline(_cfg(tmp_path / "on.zarr", held, True), client=client)
            opened = run_helpers.GATE.is_set()
            run_helpers.GATE.set()  # the held shards (cancelled, or about to be) go
            slow = {"kind": "callable", "name": "run_helpers:slow_on",
                    "params": {"kwargs": {"address": workers[1], "seconds": SLOW_S}}}
            off = gd.run_pipeline(_cfg(tmp_path / "off.zarr", slow, False, num_samples=32), client=client)
    finally:
        stop.set()
        run_helpers.GATE.set()
    assert not opened, "a batch waited for the held shards: the run ended only when the safety net opened the gate"
    assert run_helpers.HELD["held"] >= 1 and run_helpers.HELD["let_through"] == 0, run_helpers.HELD
    assert on.status == off.status == "complete"
    root = zarr.open_group(on.path, mode="r")
    assert (root["gcc/status"][:] == 1).all()
    assert (root["gcc/n_received"][:] == 7).all()
    assert np.isfinite(root["gcc/batch_latency_s"][:]).all(), root["gcc/batch_latency_s"][:]
    backups = root["gcc/n_backups"][:]
    assert ((backups >= 1) & (backups <= 3)).all(), backups
    assert np.isfinite(root["gcc/decoded"][:]).all()
    assert on.summary.loc["gcc", "mean_backups"] == backups.mean()
    # without backups a batch waits for a slow shard: a lower bound, which a busy machine only makes longer
    waited = zarr.open_group(off.path, mode="r")
    assert (waited["gcc/batch_latency_s"][:] >= SLOW_S).all() and (waited["gcc/n_backups"][:] == 0).all()


class _Future:
    def __init__(self, status: str) -> None:
        self.status = status


def _runner_with_a_copy():
    """A BatchRunner reduced to what reports touch: one gcc batch of 4 shards, shard 1 with a backup copy."""
    from gcc_dask.runtime.cutoff import CutoffPolicy
    from gcc_dask.runtime.executor import BatchRunner, SchemePlan, _BatchState, _SchemeState

    plan = SchemePlan(name="gcc", num_workers=4, policy=CutoffPolicy(num_workers=4, wait_for=3))
    s = _SchemeState(plan=plan, start_wall=0.0, start_mono=0.0, delays=None)
    original, copy = _Future("pending"), _Future("pending")
    s.shards = [_Future("pending"), original, _Future("pending"), _Future("pending")]
    s.backup = {1: copy}
    s.backed[1] = True
    runner = object.__new__(BatchRunner)
    runner._inflight = {0: _BatchState(batch=0, n_real=4, reference=None, schemes={"gcc": s})}
    cancelled: list = []
    runner._cancel = cancelled.extend
    runner._maybe_cut = lambda state, s: INF
    runner._maybe_promote = lambda state, s: None
    return runner, s, original, copy, cancelled


def test_the_first_copy_to_arrive_wins_and_the_other_is_cancelled():
    runner, s, original, copy, cancelled = _runner_with_a_copy()
    copy.status = "finished"
    runner._on_shard(0.5, 0, "gcc", 1, copy, "finished")
    assert s.shards[1] is copy and cancelled == [original] and not s.backup
    assert s.known[1] and not s.failed[1] and s.arrivals[1] == 0.5
    original.status = "finished"
    runner._on_shard(0.9, 0, "gcc", 1, original, "finished")  # the cancelled original's late report: ignored
    assert s.arrivals[1] == 0.5 and s.shards[1] is copy


def test_a_failed_copy_leaves_the_other_even_when_its_result_is_still_on_its_way():
    """The copy's error reaches the driver just before the original's result, which has finished already on
    the client (its report is queued): the shard is not an erasure, the original's result is (a breaker's
    race: the batch fell short of its cutoff)."""
    runner, s, original, copy, cancelled = _runner_with_a_copy()
    copy.status, original.status = "error", "finished"
    runner._on_shard(0.50, 0, "gcc", 1, copy, "error")
    assert not s.known[1] and not s.failed[1] and s.shards[1] is original and not s.backup
    runner._on_shard(0.51, 0, "gcc", 1, original, "finished")
    assert s.known[1] and not s.failed[1] and s.arrivals[1] == 0.51 and cancelled == []


def test_a_shard_is_an_erasure_only_when_both_copies_failed():
    runner, s, original, copy, _ = _runner_with_a_copy()
    original.status = "error"  # the original first, the copy still running
    runner._on_shard(0.3, 0, "gcc", 1, original, "error")
    assert not s.failed[1] and s.shards[1] is copy
    copy.status = "error"
    runner._on_shard(0.6, 0, "gcc", 1, copy, "error")
    assert s.known[1] and s.failed[1]


def test_the_copies_of_one_round_spread_over_the_faster_half_of_the_workers():
    """Six workers round-robin (shard v of batch 0 on worker v): results from a, d and c, in that order. The
    copies of shard 1 go, one after the other, to the faster half of them (a, d), never to its own worker (b)
    nor to the last to report (c). (All copies of a round went to one worker once: a breaker's finding.)"""
    runner, s, *_ = _runner_with_a_copy()

    class Workers:
        @staticmethod
        def refresh():
            return ["a", "b", "c", "d", "e", "f"]

    runner._workers = Workers()
    state = runner._inflight[0]
    s.known[:] = False
    s.arrivals[:] = INF
    for v, t in ((0, 0.1), (2, 0.3), (3, 0.2)):
        s.known[v], s.arrivals[v] = True, t
    assert [runner._backup_place(state, s, 1, n)["workers"] for n in range(3)] == [["a"], ["d"], ["a"]]
