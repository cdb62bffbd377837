"""``cutoff.backups``: a shard a cutoff scheme cannot do without, late by Spark's rule, gets one backup copy
on another worker (gcc_dask.runtime.cutoff.late_shards_due; BatchRunner._back_up_late). The rule alone, then
runs on a real LocalCluster with one persistently slow worker that holds more of a batch's shards than its
spare covers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.pipeline import build_codes, build_plans
from gcc_dask.runtime.cutoff import Speculation, late_shards_due

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
    """gcc N = 8, K = 4, S = 1 on 3 workers, one of them 3 s late on every shard: round-robin puts 2 or 3 of a
    batch's 7 regular shards on it, more than its one spare covers. With backups every batch decodes from
    N - S results well before the slow shards end, with one copy or two (never more than it holds); without,
    every batch waits for them."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=3, threads_per_worker=4, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        workload = {"kind": "callable", "name": "run_helpers:slow_on",
                    "params": {"kwargs": {"address": workers[1], "seconds": SLOW_S}}}
        on = gd.run_pipeline(_cfg(tmp_path / "on.zarr", workload, True), client=client)
        off = gd.run_pipeline(_cfg(tmp_path / "off.zarr", workload, False, num_samples=32), client=client)
    assert on.status == off.status == "complete"
    root = zarr.open_group(on.path, mode="r")
    assert (root["gcc/status"][:] == 1).all()
    assert (root["gcc/n_received"][:] == 7).all()
    assert (root["gcc/batch_latency_s"][:] < SLOW_S).all(), root["gcc/batch_latency_s"][:]
    backups = root["gcc/n_backups"][:]
    assert ((backups >= 1) & (backups <= 3)).all(), backups
    assert np.isfinite(root["gcc/decoded"][:]).all()
    assert on.summary.loc["gcc", "mean_backups"] == backups.mean()
    waited = zarr.open_group(off.path, mode="r")
    assert (waited["gcc/batch_latency_s"][:] >= SLOW_S).all() and (waited["gcc/n_backups"][:] == 0).all()
