"""The ``speculative`` scheme: Spark's rule for backup copies (pure), the code, the config, and runs on a real
LocalCluster (a persistently slow worker; injected hangs on the virtual clock) whose results equal uncoded's
and whose backups go to the late shards only."""

from __future__ import annotations

import math

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.errors import ConfigError
from gcc_dask.pipeline import build_codes, build_plans, composition_policy
from gcc_dask.runtime.cutoff import Speculation, backup_schedule, backup_threshold, backup_time, backups_due
from gcc_dask.stragglers import latency_model_from_config

INF = math.inf


# ------------------------------------------------------------------------------------------ the rule
@pytest.mark.parametrize(("first", "rule", "expected"), [
    ([1.0, 1.0, 1.2, 1.0, INF, INF, 1.1, 0.9], Speculation(), 1.5),  # 6 of 8 in (floor 0.75·8): 1.5 × median 1
    ([1.0, 1.0, 1.0, 1.0, INF, INF, INF, INF], Speculation(), INF),  # 4 of 8: fewer than 6, wait
    ([0.01, 0.01, 0.01, INF], Speculation(), 0.1),  # never earlier than min_runtime
    ([1.0, 2.0, 3.0, INF], Speculation(), 3.0),  # 1.5 × 2 = 3: the third result's own time
    ([1.0, 1.0, 4.0, INF], Speculation(multiplier=3.0), 4.0),  # 3 × 1: before 4.0 but after the 2nd result
    ([1.0, 1.0, INF, INF, INF, INF, INF, INF, INF, INF], Speculation(quantile=0.2, multiplier=2.0), 2.0),
    ([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, INF], Speculation(quantile=0.9, multiplier=3.0), 3.0),  # floor(7.2) = 7
    ([INF, INF], Speculation(quantile=0.1), INF),  # max(floor(0.2), 1) = 1 result needed
    ([0.5, np.nan], Speculation(quantile=0.1, multiplier=1.0, min_runtime=0.0), 0.5),  # NaN: no result
], ids=["classic", "too-few", "min-runtime", "at-an-arrival", "multiplier-3", "quantile-0.2", "spark-current",
        "none-in", "nan"])
def test_backup_time_is_sparks_rule(first, rule, expected):
    assert backup_time(np.array(first), rule) == pytest.approx(expected)


def _launch(k: int, copies: int = 1, **launched) -> np.ndarray:
    """Launch times (copies + 1, k): originals at 0, the backups given as {'c<copy>_<input>': time}."""
    launch = np.full((copies + 1, k), INF)
    launch[0] = 0.0
    for key, t in launched.items():
        c, i = key[1:].split("_")
        launch[int(c), int(i)] = t
    return launch


def test_backups_go_to_inputs_without_a_result_or_a_backup():
    first = np.array([1.0, 1.0, 1.0, INF, INF, 1.0, 1.0, 1.0])  # 6 of 8 in at 1 s: due at 1.5 s
    none = np.zeros((2, 8), dtype=bool)
    due, wake = backups_due(first, _launch(8), none, now=1.49, rule=Speculation())
    assert due.tolist() == [] and wake == pytest.approx(1.5)
    assert backups_due(first, _launch(8), none, now=1.5, rule=Speculation())[0].tolist() == [3, 4]
    due, wake = backups_due(first, _launch(8, c1_4=1.5), none, now=2.0, rule=Speculation())
    assert due.tolist() == [3] and wake == INF  # input 4 has its one copy: nothing more can come due
    failed = none.copy()
    failed[0, 4] = True  # a failed original gets its backup at once, whatever the rule says
    early = np.array([1.0, INF, INF, INF, INF, INF, INF, INF])
    assert backups_due(early, _launch(8), failed, now=0.0, rule=Speculation())[0].tolist() == [4]
    with pytest.raises(ValueError, match=r"launch and failed: got shapes \(8,\) and \(8,\); expected \(2, 8\)"):
        backups_due(first, np.zeros(8), np.zeros(8, dtype=bool), now=0.0, rule=Speculation())


def test_a_late_backup_gets_the_next_copy_up_to_copies():
    """copies = 2: a backup launched at L is late in its turn at L + the rule's time; a third is never due."""
    rule = Speculation(copies=2)
    first = np.array([1.0, 1.0, 1.0, INF, INF, 1.0, 1.0, 1.0])  # the rule's time: 1.5 s
    none = np.zeros((3, 8), dtype=bool)
    launch = _launch(8, 2, c1_3=1.5, c1_4=1.5)
    due, wake = backups_due(first, launch, none, now=2.99, rule=rule)
    assert due.tolist() == [] and wake == pytest.approx(3.0)
    assert backups_due(first, launch, none, now=3.0, rule=rule)[0].tolist() == [3, 4]
    launch = _launch(8, 2, c1_3=1.5, c1_4=1.5, c2_3=3.0, c2_4=3.0)
    due, wake = backups_due(first, launch, none, now=99.0, rule=rule)  # both copies out: nothing more
    assert due.tolist() == [] and wake == INF
    failed = none.copy()
    failed[:2, 3] = True  # its original and first backup failed: the second copy at once
    launch = _launch(8, 2, c1_3=1.5)
    assert backups_due(first, launch, failed, now=1.6, rule=rule)[0].tolist() == [3, 4]


def test_later_copies_wait_the_threshold_not_the_rules_time():
    """The rule fires at the 6th result (1.0 s), its threshold is max(1.5 × median 0.03, 0.1) = 0.1 s: a first
    backup at 1.0 s that has no result by 1.1 s gets the second copy, on both clocks."""
    rule = Speculation(copies=2)
    first = np.array([0.03] * 5 + [1.0, INF, INF])
    assert backup_time(first, rule) == pytest.approx(1.0) and backup_threshold(first, rule) == pytest.approx(0.1)
    none = np.zeros((3, 8), dtype=bool)
    due, wake = backups_due(first, _launch(8, 2, c1_6=1.0, c1_7=1.0), none, now=1.05, rule=rule)
    assert due.tolist() == [] and wake == pytest.approx(1.1)
    draws = np.array([[0.03] * 5 + [1.0, 5.0, 5.0], [9.0] * 8, [0.03] * 8])
    launch, arrival = backup_schedule(draws, rule)
    assert launch[1, 6:].tolist() == [1.0, 1.0] and launch[2, 6:] == pytest.approx([1.1, 1.1])
    assert arrival[2, 6:] == pytest.approx([1.13, 1.13])


def test_the_virtual_schedule_launches_what_the_rule_and_the_failures_say():
    rule = Speculation(copies=2)
    draws = np.array([[1.0] * 6 + [20.0, 20.0],  # T = 1.5, threshold 1.5
                      [1.0] * 6 + [20.0, 0.5],  # input 6's first backup hangs too
                      [1.0] * 8])
    launch, arrival = backup_schedule(draws, rule)
    assert launch[1].tolist() == [INF] * 6 + [1.5, 1.5]
    assert launch[2].tolist() == [INF] * 6 + [3.0, INF]  # input 7's backup arrived at 2.0 < 3.0
    assert arrival[:, 6].tolist() == [20.0, 21.5, 4.0] and arrival[:, 7].tolist() == [20.0, 2.0, INF]
    one, _ = backup_schedule(draws[:2], Speculation())  # Spark's single copy
    assert one[1].tolist() == launch[1].tolist()
    never, _ = backup_schedule(np.vstack([np.full(8, INF), draws[1:]]), rule)  # no result: the rule never fires
    assert not np.isfinite(never[1:]).any()
    # failures known: an original failed at 0.5 gets its backup then, and that backup, hung, the next one 1.5 s
    # later; a first backup that failed is no arrival, so its hung original still gets the second copy
    failed = np.zeros((3, 8), dtype=bool)
    failed[0, 0] = True
    hung = draws.copy()
    hung[0, 0], hung[1, 0] = 0.5, 30.0
    hung[1, 6] = 0.2  # input 6's first backup fails 0.2 s after its launch at 1.5
    failed[1, 6] = True
    launch, arrival = backup_schedule(hung, rule, failed=failed)
    assert launch[:, 0].tolist() == [0.0, 0.5, 2.0] and arrival[2, 0] == pytest.approx(3.0)
    assert launch[:, 6].tolist() == [0.0, 1.5, 3.0] and arrival[2, 6] == pytest.approx(4.0)
    with pytest.raises(ValueError, match=r"draws: got shape \(2, 8\); expected \(3, K\)"):
        backup_schedule(draws[:2], rule)
    with pytest.raises(ValueError, match=r"failed: got shape \(2, 8\); expected \(3, 8\)"):
        backup_schedule(draws, rule, failed=failed[:2])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"quantile": 0.0}, "speculation.quantile: got 0.0"), ({"multiplier": 0.5}, "speculation.multiplier: got 0.5"),
    ({"min_runtime": -1.0}, "speculation.min_runtime: got -1.0"),
    ({"copies": 0}, r"speculation.copies: got 0; expected an integer in \[1, 8\]"),
    ({"copies": 1.5}, r"speculation.copies: got 1.5; expected an integer in \[1, 8\]"),
    ({"quantile": "0.5"}, r"speculation.quantile: got '0.5'; expected a finite number"),
    ({"quantile": None}, r"speculation.quantile: got None; expected a finite number"),
    ({"multiplier": float("nan")}, r"speculation.multiplier: got nan; expected a finite number"),
], ids=["quantile", "multiplier", "min-runtime", "copies-0", "copies-float", "quantile-str", "quantile-none",
        "multiplier-nan"])
def test_speculation_rejects_bad_values(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Speculation(**kwargs)


# ------------------------------------------------------------------------------------- code and config
def test_the_speculative_code_is_replication_with_two_copies():
    code = gd.make_code("speculative", num_inputs=4, num_workers=8)
    assert "speculative" in gd.list_codes() and code.selection and code.backup_of(1) == 5
    assert [code.selected_input(w) for w in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    y = np.arange(8.0)[:, None] * 10
    received = np.array([0, 5, 2, 7])  # inputs 1 and 3 from their backups
    np.testing.assert_array_equal(code.decode(y[received], received).ravel(), [0, 50, 20, 70])
    with pytest.raises(ConfigError, match=r"num_workers must be \(copies \+ 1\) \* num_inputs for code "
                       r"'speculative' .*got num_workers=6, num_inputs=4. Use num_workers=8"):
        gd.make_code("speculative", num_inputs=4, num_workers=6)
    assert gd.make_code("speculative", num_inputs=4, num_workers=36).copies == 8  # the most speculation.copies allows
    with pytest.raises(ConfigError, match=r"1 to 8 backup copies of each\); got num_workers=40, num_inputs=4"):
        gd.make_code("speculative", num_inputs=4, num_workers=40)
    three = gd.make_code("speculative", num_inputs=4, num_workers=12)  # two backup copies of each input
    assert three.copies == 2 and three.backup_of(1, copy=2) == 9 and three.recovery_threshold == 10
    np.testing.assert_array_equal(three.decode((np.arange(12.0)[:, None] * 10)[[8, 5, 2, 11]],
                                               np.array([8, 5, 2, 11])).ravel(), [80, 50, 20, 110])
    with pytest.raises(ConfigError, match=r"copy: got 3; expected a backup copy in \[1, 2\]"):
        three.backup_of(0, copy=3)


def _cfg(**extra):
    cfg = {"source": {"kind": "synthetic", "num_samples": 64, "shape": [3]},
           "workload": {"kind": "callable", "name": "numpy:tanh"},
           "code": {"num_inputs": 8, "num_workers": 12, "block_size": 2},
           "schemes": ["speculative", {"label": "spec-spark", "code": "speculative",
                                       "params": {"quantile": 0.9, "multiplier": 3.0}}, "uncoded"]}
    cfg.update(extra)
    return cfg


def test_config_runs_speculative_on_2k_with_its_rule():
    default = load_config(_cfg())  # two backup copies by default (measured: BENCHMARKS.md, the tail section)
    assert default.speculation.copies == 2 and [default.workers_for(s) for s in default.schemes] == [24, 24, 8]
    cfg = load_config(_cfg(speculation={"min_runtime": "50ms", "copies": 1}))  # Spark's one copy
    assert [cfg.workers_for(s) for s in cfg.schemes] == [16, 16, 8]
    assert cfg.stop_of("speculative") == "recovery" and composition_policy(cfg) == "as_stored"
    plans = {p.name: p for p in build_plans(cfg, build_codes(cfg))}
    assert plans["speculative"].speculation == Speculation(0.75, 1.5, 0.05)
    assert plans["spec-spark"].speculation == Speculation(0.9, 3.0, 0.05)
    assert plans["speculative"].policy.groups == tuple(n % 8 for n in range(16))
    assert plans["speculative"].regular(lazy=True).tolist() == [True] * 8 + [False] * 8
    assert plans["uncoded"].speculation is None
    two = load_config(_cfg(speculation={"copies": 2}))  # a second backup copy: N = 3K
    assert [two.workers_for(s) for s in two.schemes] == [24, 24, 8]
    plans = {p.name: p for p in build_plans(two, build_codes(two))}
    assert plans["speculative"].speculation.copies == 2 and plans["speculative"].num_inputs == 8
    assert plans["speculative"].policy.groups == tuple(n % 8 for n in range(24))
    assert plans["speculative"].regular(lazy=False).tolist() == [True] * 8 + [False] * 16


@pytest.mark.parametrize(("extra", "match"), [
    ({"speculation": {"quantile": 1.5}}, "speculation.quantile: got 1.5"),
    ({"speculation": {"multiplier": 0.5}}, "speculation.multiplier: got 0.5"),
    ({"speculation": {"copies": 0}}, "speculation.copies: got 0"),
    ({"schemes": [{"label": "s", "code": "speculative", "params": {"num_workers": 12}}]},
     "schemes.s.params.num_workers: got 12; expected no such parameter for code 'speculative'"),
], ids=["quantile", "multiplier", "copies", "num-workers"])
def test_config_rejects_bad_speculation(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_cfg(**extra))


# ----------------------------------------------------------------------------------- on a cluster
def _run_cfg(path, schemes, workload, samples=128, **extra):
    cfg = {"name": "spec", "source": {"kind": "synthetic", "num_samples": samples, "shape": [3], "seed": 4},
           "workload": workload, "code": {"num_inputs": 8, "num_workers": 16, "block_size": 4},
           "schemes": schemes, "store": {"path": str(path)}, "run": {"progress": False}}
    cfg.update(extra)
    return cfg


def test_speculative_with_a_slow_worker_backs_up_its_shards_only(tmp_path):
    """Four workers, one of them 30 s late on every speculative shard: the originals placed on it are late, get
    backups (on the next worker), and the backups win; the estimates are uncoded's, bit for bit. A fast worker's
    shard that a busy machine holds past the rule's 300 ms is late too and may get a copy (on 2 cores loaded by a
    second test process, one batch had 4 backups): that the rule picks those alone is the simulated clock's
    to show (test_batch_machine.py and the backups_due tests above), not a real cluster's. The slow worker used
    to be 1.5 s late on every shard: a busy machine (2 busy loops and three cluster tests beside it) made a backup
    slower than that, so an original won; 30 s late only on speculative's shards (uncoded, which waits for every
    result, is not slowed), and cancelled when its backup wins, it cannot, and the test takes no longer."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=4, threads_per_worker=8, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        slow = workers[1]
        workload = {"kind": "callable", "name": "run_helpers:slow_on",
                    "params": {"kwargs": {"address": slow, "seconds": 30.0, "scheme": "speculative"}}}
        # 2 batches of 32 samples, one at a time (each waits for the slow worker's originals or their backups)
        run = gd.run_pipeline(_run_cfg(tmp_path / "run.zarr", ["speculative", "uncoded"], workload, samples=64,
                                       speculation={"multiplier": 2.0, "min_runtime": "300ms"},
                                       run={"progress": False, "max_batches_in_flight": 1}), client=client)
    assert run.status == "complete"
    root = zarr.open_group(run.path, mode="r")
    np.testing.assert_array_equal(root["speculative/decoded"][:], root["uncoded/decoded"][:])
    x, _ = gd.sources.make_source("synthetic", num_samples=64, shape=[3], seed=4).read(0, 64)
    np.testing.assert_allclose(root["uncoded/decoded"][:].reshape(64, -1), np.tanh(x), rtol=1e-6)
    backups = root["speculative/n_backups"][:]
    received = root["speculative/received"][:]
    assert backups.size == 2  # both batches checked below
    for b in range(backups.size):
        late = [k for k in range(8) if (b + k) % 4 == 1]  # the originals placed on the slow worker
        assert len(late) == 2 and backups[b] >= 2, (b, backups)
        assert received[b, [8 + k for k in late]].all() and not received[b, late].any()  # the backups won
        on_time = [k for k in range(8) if k not in late]
        assert (received[b, on_time] | received[b, [8 + k for k in on_time]]).all()  # one copy of each
    assert (root["uncoded/n_backups"][:] == 0).all()
    assert run.summary.loc["speculative", "mean_backups"] == backups.mean() >= 2.0


def test_a_second_copy_backs_up_a_backup_that_lands_on_a_slow_worker(tmp_path):
    """copies = 2, four workers, two neighbours slow on every shard: an original on the first slow worker has
    its first backup on the second (late too) and its second backup on a fast worker, which wins; the
    estimates are uncoded's, bit for bit. A shard is late after max(1 s, the median time of the results in),
    and the slow workers take 5 s: the second backup is launched at twice that time, before the original
    finishes, while the median stays under 2 s (with multiplier 2 and 3 s slow workers, four busy processes
    beside the suite made the median of the fast shards 0.75 s or more, and an original finished before its
    second copy was due: 4 backups). A fast worker's shard that a busy machine holds past that time is late too
    and gets its copy, as the rule says: the backups are at least the 6 of the slow workers' originals, not
    exactly 6 (the exact counts of the rule with copies = 2 are the simulated clock's, test_batch_machine.py
    and the tests of backups_due above). The slow workers are 30 s late, only on speculative's shards (uncoded,
    which waits for every result, is not slowed), and cancelled when a copy wins: no busy machine lets an
    original or a first backup there win, and the test takes no longer."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=4, threads_per_worker=8, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        workload = {"kind": "callable", "name": "run_helpers:slow_on",
                    "params": {"kwargs": {"address": workers[1:3], "seconds": 30.0, "scheme": "speculative"}}}
        run = gd.run_pipeline(_run_cfg(tmp_path / "run.zarr", ["speculative", "uncoded"], workload, samples=64,
                                       speculation={"quantile": 0.5, "multiplier": 1.0, "min_runtime": "1s",
                                                    "copies": 2},
                                       run={"progress": False, "max_batches_in_flight": 1}), client=client)
    assert run.status == "complete"
    root = zarr.open_group(run.path, mode="r")
    np.testing.assert_array_equal(root["speculative/decoded"][:], root["uncoded/decoded"][:])
    assert root["speculative/received"].shape[1] == 24
    backups, received = root["speculative/n_backups"][:], root["speculative/received"][:]
    assert backups.size == 2  # both batches checked below
    for b in range(backups.size):
        slot = lambda k, c: (b + k + c) % 4  # noqa: E731 - the worker of copy c of input k (round robin)
        twice = [k for k in range(8) if slot(k, 0) == 1]  # original and first backup both on slow workers
        once = [k for k in range(8) if slot(k, 0) == 2]  # the first backup on a fast worker
        assert 2 * len(twice) + len(once) == 6 and backups[b] >= 6, (b, backups)
        assert received[b, [16 + k for k in twice]].all() and received[b, [8 + k for k in once]].all()
        assert not received[b, twice + once].any()
    mean = run.summary.loc["speculative", "mean_backups"]
    assert mean == backups.mean() and mean >= 6.0
    from gcc_dask.analysis.summary import format_summary

    printed = format_summary(run.summary).splitlines()  # what gcc-dask run prints: the backups said under it
    assert printed[-1] == f"speculative: {mean:.3g} backup copies a batch (mean)" and len(printed) == 5


def test_speculative_on_the_virtual_clock_backs_up_what_the_draws_say(client, tmp_path):
    """Hangs drawn per (seed, batch, worker): the backups each batch launched are the rule's on the drawn
    latencies of its originals, and the estimates are uncoded's."""
    strag = {"model": "shifted_exponential", "shift": "10ms", "scale": "10ms", "hang_prob": 0.15,
             "hang_delay": "1s", "seed": 3}
    workload = {"kind": "callable", "name": "numpy:tanh"}
    run = gd.run_pipeline(_run_cfg(tmp_path / "run.zarr", ["speculative", "uncoded"], workload,
                                   stragglers=strag, speculation={"copies": 1}), client=client)  # Spark's one copy
    root = zarr.open_group(run.path, mode="r")
    np.testing.assert_array_equal(root["speculative/decoded"][:], root["uncoded/decoded"][:])
    model = latency_model_from_config(strag)
    want = []
    for b in range(root["speculative/n_backups"].shape[0]):
        d = model.latencies(3, b, 16)
        want.append(int((d[:8] > backup_time(d[:8], Speculation())).sum()))
    np.testing.assert_array_equal(root["speculative/n_backups"][:], want)
    assert sum(want) > 0  # the draws hang some shards: the test sees backups
    # the run's report gives the mean backups a batch, beside the other per-scheme figures
    from gcc_dask.analysis.report import make_report

    md = make_report(run.path, tmp_path / "report").markdown
    table = md[md.index("## Per scheme"):md.index("## Latency percentiles")]
    header = next(line for line in table.splitlines() if line.startswith("|"))
    assert "mean_backups" in header
    row = next(line for line in table.splitlines() if line.startswith("| speculative"))
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    assert float(cells["mean_backups"]) == pytest.approx(np.mean(want), rel=1e-3)


def test_two_copies_on_the_virtual_clock_follow_the_schedule(client, tmp_path):
    """copies = 2 with hangs of probability 0.3: each batch launched the backups of
    :func:`backup_schedule` on its draws (some second copies among them), and the estimates are uncoded's."""
    strag = {"model": "shifted_exponential", "shift": "10ms", "scale": "10ms", "hang_prob": 0.3,
             "hang_delay": "1s", "seed": 5}
    workload = {"kind": "callable", "name": "numpy:tanh"}
    run = gd.run_pipeline(_run_cfg(tmp_path / "run.zarr", ["speculative", "uncoded"], workload,
                                   stragglers=strag, speculation={"copies": 2}), client=client)
    root = zarr.open_group(run.path, mode="r")
    np.testing.assert_array_equal(root["speculative/decoded"][:], root["uncoded/decoded"][:])
    model = latency_model_from_config(strag)
    want, second = [], 0
    for b in range(root["speculative/n_backups"].shape[0]):
        d = model.latencies(5, b, 24)
        launch, arrival = backup_schedule(d.reshape(3, 8), Speculation(copies=2))
        want.append(int(np.isfinite(launch[1:]).sum()))
        second += int(np.isfinite(launch[2]).sum())
        winner = arrival.argmin(axis=0)  # the copy of each input that arrived first is the one received
        got = root["speculative/received"][b].reshape(3, 8)
        assert got[winner, np.arange(8)].all() and (got.sum(axis=0) == 1).all()  # and no other copy of it
    assert (root["speculative/n_received"][:] == 8).all()
    np.testing.assert_array_equal(root["speculative/n_backups"][:], want)
    assert second > 0  # some first backups hung too: the test sees second copies


def test_a_sweep_refuses_speculative_with_the_reason():
    from gcc_dask.sweep_config import load_sweep_config

    sweep = {"name": "s", "function": {"kind": "smooth", "dim": 2, "out_dim": 2}, "schemes": ["speculative"],
             "code": {"num_inputs": [4], "num_workers": [8]}, "stragglers": {"model": "bernoulli", "p": [0.1]},
             "store": {"path": "runs/s.zarr"}}
    with pytest.raises(ConfigError, match=r"schemes: got 'speculative'; .*speculative runs in a pipeline only"):
        load_sweep_config(sweep)


def test_records_of_a_store_without_the_backup_count_are_written(client, tmp_path):
    """A store made before ``n_backups`` existed is resumed: its records are written without the count."""
    import shutil

    cfg = _run_cfg(tmp_path / "run.zarr", ["speculative"], {"kind": "callable", "name": "numpy:tanh"},
                   run={"progress": False, "limit_batches": 1})
    gd.run_pipeline(cfg, client=client)
    shutil.rmtree(tmp_path / "run.zarr" / "speculative" / "n_backups")
    for meta in (tmp_path / "run.zarr").glob("zarr.json"):  # drop the consolidated entry of the array
        import json

        doc = json.loads(meta.read_text())
        entries = doc.get("consolidated_metadata", {}).get("metadata", {})
        entries.pop("speculative/n_backups", None)
        meta.write_text(json.dumps(doc))
    cfg["run"] = {"progress": False}
    run = gd.run_pipeline(cfg, client=client)
    assert run.status == "complete"
    root = zarr.open_group(run.path, mode="r", use_consolidated=False)
    assert "n_backups" not in root["speculative"] and (root["speculative/status"][:] == 1).all()
    assert math.isnan(run.summary.loc["speculative", "mean_backups"])
