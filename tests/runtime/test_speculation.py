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
from gcc_dask.runtime.cutoff import Speculation, backup_time, backups_due
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


def test_backups_go_to_inputs_without_a_result_or_a_backup():
    first = np.array([1.0, 1.0, 1.0, INF, INF, 1.0, 1.0, 1.0])  # 6 of 8 in at 1 s: due at 1.5 s
    none = np.zeros(8, dtype=bool)
    assert backups_due(first, none, none, now=1.49, rule=Speculation()).tolist() == []
    assert backups_due(first, none, none, now=1.5, rule=Speculation()).tolist() == [3, 4]
    launched = none.copy()
    launched[4] = True
    assert backups_due(first, launched, none, now=2.0, rule=Speculation()).tolist() == [3]
    failed = none.copy()
    failed[4] = True  # a failed original gets its backup at once, whatever the rule says
    early = np.array([1.0, INF, INF, INF, INF, INF, INF, INF])
    assert backups_due(early, none, failed, now=0.0, rule=Speculation()).tolist() == [4]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"quantile": 0.0}, "speculation.quantile: got 0.0"), ({"multiplier": 0.5}, "speculation.multiplier: got 0.5"),
    ({"min_runtime": -1.0}, "speculation.min_runtime: got -1.0"),
], ids=["quantile", "multiplier", "min-runtime"])
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
    with pytest.raises(ConfigError, match=r"num_workers must be 2 \* num_inputs for code 'speculative'"):
        gd.make_code("speculative", num_inputs=4, num_workers=6)


def _cfg(**extra):
    cfg = {"source": {"kind": "synthetic", "num_samples": 64, "shape": [3]},
           "workload": {"kind": "callable", "name": "numpy:tanh"},
           "code": {"num_inputs": 8, "num_workers": 12, "block_size": 2},
           "schemes": ["speculative", {"label": "spec-spark", "code": "speculative",
                                       "params": {"quantile": 0.9, "multiplier": 3.0}}, "uncoded"]}
    cfg.update(extra)
    return cfg


def test_config_runs_speculative_on_2k_with_its_rule():
    cfg = load_config(_cfg(speculation={"min_runtime": "50ms"}))
    assert [cfg.workers_for(s) for s in cfg.schemes] == [16, 16, 8]
    assert cfg.stop_of("speculative") == "recovery" and composition_policy(cfg) == "as_stored"
    plans = {p.name: p for p in build_plans(cfg, build_codes(cfg))}
    assert plans["speculative"].speculation == Speculation(0.75, 1.5, 0.05)
    assert plans["spec-spark"].speculation == Speculation(0.9, 3.0, 0.05)
    assert plans["speculative"].policy.groups == tuple(n % 8 for n in range(16))
    assert plans["speculative"].regular(lazy=True).tolist() == [True] * 8 + [False] * 8
    assert plans["uncoded"].speculation is None


@pytest.mark.parametrize(("extra", "match"), [
    ({"speculation": {"quantile": 1.5}}, "speculation.quantile: got 1.5"),
    ({"speculation": {"multiplier": 0.5}}, "speculation.multiplier: got 0.5"),
    ({"schemes": [{"label": "s", "code": "speculative", "params": {"num_workers": 12}}]},
     "schemes.s.params.num_workers: got 12; expected no such parameter for code 'speculative'"),
], ids=["quantile", "multiplier", "num-workers"])
def test_config_rejects_bad_speculation(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_cfg(**extra))


# ----------------------------------------------------------------------------------- on a cluster
def _run_cfg(path, schemes, workload, **extra):
    cfg = {"name": "spec", "source": {"kind": "synthetic", "num_samples": 128, "shape": [3], "seed": 4},
           "workload": workload, "code": {"num_inputs": 8, "num_workers": 16, "block_size": 4},
           "schemes": schemes, "store": {"path": str(path)}, "run": {"progress": False}}
    cfg.update(extra)
    return cfg


def test_speculative_with_a_slow_worker_backs_up_its_shards_only(tmp_path):
    """Four workers, one of them 1.5 s late on every shard: the originals placed on it are the late ones, and
    they alone get backups (on the next worker); the estimates are uncoded's, bit for bit."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=4, threads_per_worker=8, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        slow = workers[1]
        workload = {"kind": "callable", "name": "run_helpers:slow_on",
                    "params": {"kwargs": {"address": slow, "seconds": 1.5}}}
        run = gd.run_pipeline(_run_cfg(tmp_path / "run.zarr", ["speculative", "uncoded"], workload,
                                       speculation={"multiplier": 2.0, "min_runtime": "300ms"},
                                       run={"progress": False, "max_batches_in_flight": 1}), client=client)
    assert run.status == "complete"
    root = zarr.open_group(run.path, mode="r")
    np.testing.assert_array_equal(root["speculative/decoded"][:], root["uncoded/decoded"][:])
    x, _ = gd.sources.make_source("synthetic", num_samples=128, shape=[3], seed=4).read(0, 128)
    np.testing.assert_allclose(root["uncoded/decoded"][:].reshape(128, -1), np.tanh(x), rtol=1e-6)
    backups = root["speculative/n_backups"][:]
    received = root["speculative/received"][:]
    for b in range(backups.size):
        late = [k for k in range(8) if (b + k) % 4 == 1]  # the originals placed on the slow worker
        assert backups[b] == len(late) == 2, (b, backups)
        assert received[b, [8 + k for k in late]].all() and not received[b, late].any()  # the backups won
        on_time = [k for k in range(8) if k not in late]
        assert received[b, on_time].all() and not received[b, [8 + k for k in on_time]].any()
    assert (root["uncoded/n_backups"][:] == 0).all()
    assert run.summary.loc["speculative", "mean_backups"] == 2.0


def test_speculative_on_the_virtual_clock_backs_up_what_the_draws_say(client, tmp_path):
    """Hangs drawn per (seed, batch, worker): the backups each batch launched are the rule's on the drawn
    latencies of its originals, and the estimates are uncoded's."""
    strag = {"model": "shifted_exponential", "shift": "10ms", "scale": "10ms", "hang_prob": 0.15,
             "hang_delay": "1s", "seed": 3}
    workload = {"kind": "callable", "name": "numpy:tanh"}
    run = gd.run_pipeline(_run_cfg(tmp_path / "run.zarr", ["speculative", "uncoded"], workload,
                                   stragglers=strag), client=client)
    root = zarr.open_group(run.path, mode="r")
    np.testing.assert_array_equal(root["speculative/decoded"][:], root["uncoded/decoded"][:])
    model = latency_model_from_config(strag)
    want = []
    for b in range(root["speculative/n_backups"].shape[0]):
        d = model.latencies(3, b, 16)
        want.append(int((d[:8] > backup_time(d[:8], Speculation())).sum()))
    np.testing.assert_array_equal(root["speculative/n_backups"][:], want)
    assert sum(want) > 0  # the draws hang some shards: the test sees backups


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
