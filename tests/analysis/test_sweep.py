"""The sweep runner: config validation, cell evaluation (paired draws, exactness), the store, resume."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from gcc_dask.errors import ConfigError, StoreError
from gcc_dask.sweep import evaluate_cell, run_sweep
from gcc_dask.sweep_config import load_sweep_config


def _cfg(**over):
    base = {"name": "t", "function": {"kind": "xsinx"}, "schemes": ["gcc", "bacc"],
            "code": {"num_inputs": [6], "num_workers": [13, 25]},
            "stragglers": {"model": "fixed_count", "S": [1, 2], "pattern": "random"}, "trials": 3,
            "run": {"progress": False}}
    base.update(over)
    return base


@pytest.mark.parametrize(("over", "match"), [
    ({"function": {"kind": "sinc"}}, r"function\.kind: got 'sinc'"),
    ({"function": {"kind": "xsinx", "source": {"kind": "mnist"}}}, "only 'dnn' has one"),
    ({"schemes": ["gcc", "gcc"]}, "distinct scheme labels"),
    ({"schemes": ["nope"]}, "a scheme name from"),
    ({"stragglers": {"model": "fixed_count", "p": [0.1]}}, r"stragglers\.S: got None"),
    ({"stragglers": {"model": "bernoulli", "p": [1.0]}}, r"stragglers\.p\.0: got 1\.0"),
    ({"stragglers": {"model": "bernoulli", "p": [0.1], "pattern": "contiguous"}}, "pattern"),
    ({"code": {"num_inputs": [6], "num_workers": [13, 13]}}, "distinct values"),
    ({"trials": 0}, r"trials: got 0; expected a number greater than or equal to 1"),
    ({"params": {"lcc": {"degree": 2}}}, r"params\.lcc"),
    ({"bogus": 1}, "unknown key 'bogus'"),
    # bounds no machine meets (gcc_dask.limits)
    ({"code": {"num_inputs": [6], "num_workers": [13, 100_000]}},
     r"^code\.num_workers\.1: got 100000; expected an integer from 1 to 65,536 \(one Dask task per worker"),
    ({"code": {"num_inputs": [100_000], "num_workers": [13]}},
     r"^code\.num_inputs\.0: got 100000; expected an integer from 1 to 65,536 \(inputs per batch\)$"),
    ({"code": {"num_inputs": [8192], "num_workers": [8192, 16384]}},
     r"^code\.num_workers: got \[8192, 16384\]; expected values with num_inputs \* num_workers <= 67,108,864: "
     r"here K = 8,192 and N = 16,384, so the \(N, K\) encoder matrix alone would take 1\.0 GiB$"),
    ({"stragglers": {"model": "fixed_count", "S": [1, 10**6]}},
     r"^stragglers\.S\.1: got 1000000; expected a number less than or equal to 65536$"),
    ({"trials": 10**9}, r"^trials: got 1000000000; expected a number less than or equal to 1000000$"),
    ({"run": {"trials_per_task": 10**9}}, r"^run\.trials_per_task: got 1000000000; expected a number less than"),
    ({"trials": 10**6, "stragglers": {"model": "fixed_count", "S": [1, 2, 3, 4, 5]}},
     r"^trials: got 1000000; expected a grid of at most 16,777,216 results per metric \(schemes x num_inputs x "
     r"num_workers x S x trials = 2 x 1 x 2 x 5 x 1000000 = 20,000,000\); use fewer trials or split the sweep$"),
    # a function no machine can hold (these raised MemoryError with a traceback)
    ({"function": {"kind": "smooth", "out_dim": 10**9}},
     r"^function\.out_dim: got 1000000000; expected a number less than or equal to 65536$"),
    ({"function": {"kind": "smooth", "dim": 65536, "hidden": 65536}},
     r"^function\.hidden: got 65536; expected a size whose weight matrix with the layer before it \(65,536\) "
     r"holds at most 67,108,864 entries$"),
    ({"function": {"kind": "xsinx", "dim": 10**9}}, r"^function\.dim: got 1000000000; expected a number less"),
], ids=["kind", "source-on-analytic", "duplicate", "unknown-scheme", "S-missing", "p-range", "pattern",
        "duplicate-N", "trials", "params-unlisted", "unknown-key", "N-1e5", "K-1e5", "encoder-1GiB", "S-1e6",
        "trials-1e9", "trials-per-task-1e9", "grid-2e7", "out_dim-1e9", "weights-2e32", "dim-1e9"])
def test_sweep_config_rejects(over, match):
    with pytest.raises(ConfigError, match=match):
        load_sweep_config(_cfg(**over))


@pytest.mark.parametrize(("over", "match"), [
    ({"schemes": ["gcc", "replication"], "params": {"replication": {"policies": 1}}},
     r"^params\.replication\.policies: got 1; expected a parameter of code 'replication': one of [\w, ]*\bfill\b"
     r"[\w, ]* \(num_inputs and num_workers come from code\)$"),
    ({"schemes": ["gcc", "replication"], "params": {"replication": {"blocksize": 3}}},
     r"^params\.replication\.blocksize: got 3; expected a parameter of code 'replication'"),
    ({"schemes": ["gcc", "replication"], "params": {"replication": {"ü": 3}}},
     r"^params\.replication\.ü: got 3; expected a parameter of code 'replication'"),
    ({"schemes": [{"label": "g", "code": "gcc", "params": {"kernal": "matern52"}}]},
     r"^schemes\[0\]\.params\.kernal: got 'matern52'; expected a parameter of code 'gcc': one of kernel, "),
], ids=["policies", "blocksize", "non-ascii", "spec-typo"])
def test_unknown_code_params_are_refused_before_anything_runs(tmp_path, over, match):
    """A parameter no code of its scheme takes used to skip every cell of that scheme: the sweep ran as if the
    scheme were absent. Now one line, before the store or a cluster exists."""
    with pytest.raises(ConfigError, match=match):
        run_sweep(_cfg(**over), out=tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_overrides_and_fingerprint():
    cfg = load_sweep_config(_cfg(), overrides=["trials=5", "stragglers.S=[1]"])
    assert cfg.trials == 5 and cfg.stragglers.values == [1]
    assert cfg.fingerprint() != load_sweep_config(_cfg()).fingerprint()
    moved = load_sweep_config(_cfg(store={"path": "elsewhere.zarr"}, run={"trials_per_task": 1}))
    assert moved.fingerprint() == load_sweep_config(_cfg()).fingerprint()  # not part of the results


def test_cells_share_data_and_received_sets_across_schemes():
    cfg = load_sweep_config(_cfg(schemes=["gcc", "letcc", "bacc"],
                                 stragglers={"model": "bernoulli", "p": [0.3]}))
    out = evaluate_cell(cfg, 6, 25, 0.3, range(4))
    assert (out["n_received"] == out["n_received"][0]).all()  # the same draw for every scheme
    np.testing.assert_allclose(out["mse"][0], out["mse"][1], rtol=1e-10)  # gcc default = LeTCC
    again = evaluate_cell(cfg, 6, 25, 0.3, [2, 3])
    np.testing.assert_array_equal(again["mse"], out["mse"][:, 2:])  # a function of the trial, not the block


def test_a_single_output_cell_has_relative_errors_by_hand_and_no_relacc():
    from gcc_dask.sweep import sample_function

    cfg = load_sweep_config(_cfg(schemes=["gcc"]))
    out = evaluate_cell(cfg, 6, 25, 2, range(2))
    assert np.isnan(out["rel_acc"]).all() and np.isfinite(out["rel_rmse"]).all()
    # by hand for trial 0: Σ_k ||f̂ − f||² = K·MSE, over Σ_k ||f||² of the same inputs
    fn = sample_function(cfg.function)
    X, _ = fn.sample(6, 0, cfg.seed, None)
    ref = np.asarray(fn.f(X))
    rel = np.sqrt(out["mse"][0, 0] * ref.shape[0] / np.sum(ref.astype(np.float64) ** 2))
    assert out["rel_rmse"][0, 0] == pytest.approx(rel, rel=1e-9)
    assert 0 < out["max_abs_err"][0, 0] and out["r2"][0, 0] <= 1


def test_lcc_is_exact_at_its_threshold_and_refuses_below():
    cfg = load_sweep_config(_cfg(function={"kind": "polynomial", "coeffs": [0.0, 1.0, 1.0]},
                                 schemes=["lcc", "bacc"], code={"num_inputs": [4], "num_workers": [9]}))
    ok = evaluate_cell(cfg, 4, 9, 2, range(3))  # threshold (K - 1)·2 + 1 = 7 = N - S
    assert (ok["mse"][0] < 1e-20).all() and (ok["decodable_frac"][0] == 1).all()
    assert (ok["mse"][1] > 1e-8).all()  # bacc is approximate
    short = evaluate_cell(cfg, 4, 9, 3, range(3))
    assert np.isnan(short["mse"][0]).all() and (short["decodable_frac"][0] == 0).all()


def test_adversary_is_per_scheme_and_never_beaten_by_random_sets():
    adv = load_sweep_config(_cfg(stragglers={"model": "fixed_count", "S": [2], "pattern": "adversarial"}))
    rnd = load_sweep_config(_cfg(stragglers={"model": "fixed_count", "S": [2], "pattern": "random"}))
    a, r = evaluate_cell(adv, 6, 13, 2, range(3)), evaluate_cell(rnd, 6, 13, 2, range(3))
    assert (a["search_exhaustive"] == 1).all()  # C(13, 2) = 78 sets: the true worst case
    assert (a["mse"] >= r["mse"] * (1 - 1e-9)).all()


def test_smooth_and_dnn_functions_record_rel_acc_and_accuracy():
    smooth = load_sweep_config(_cfg(function={"kind": "smooth", "dim": 3, "out_dim": 4}))
    out = evaluate_cell(smooth, 6, 25, 1, range(2))
    assert np.isfinite(out["rel_acc"]).all() and np.isnan(out["accuracy"]).all()
    dnn = load_sweep_config(_cfg(function={"kind": "dnn", "source": {"kind": "mnist", "split": "test", "limit": 64}},
                                 schemes=["gcc", "replication"]))
    out = evaluate_cell(dnn, 4, 8, 1, range(3))
    assert ((out["rel_acc"] >= 0) & (out["rel_acc"] <= 1)).all()
    assert np.isfinite(out["accuracy"]).all() and np.isfinite(out["accuracy_uncoded"]).all()
    assert (out["decodable_frac"][1] == 1).all()  # r = 2 copies: one straggler loses no input


def test_run_sweep_writes_a_tidy_store_and_resumes(client, tmp_path):
    cfg = _cfg(schemes=["gcc", "bacc", "replication"], run={"trials_per_task": 2, "progress": False})
    res = run_sweep(cfg, client=client, out=tmp_path / "s.zarr")
    assert res.status == "complete" and res.wall_s > 0
    ds = xr.open_zarr(res.path)
    assert dict(ds.sizes) == {"scheme": 3, "num_inputs": 1, "num_workers": 2, "S": 2, "trial": 3}
    assert ds["mse"].dims == ("scheme", "num_inputs", "num_workers", "S", "trial")
    assert list(ds["scheme"].values) == ["gcc", "bacc", "replication"]
    status = ds["status"].values
    assert (status == 1).all()  # replication runs at any N >= K (partial replication when N is not r·K)
    assert np.isfinite(ds["mse"].values[:2]).all()
    rep = ds["mse"].values[2]
    assert (rep[np.isfinite(rep)] == 0).all()  # exact where it decodes (a lost input has no estimate)
    assert ds.attrs["status"] == "complete" and not any("replication" in s for s in ds.attrs["skipped"])
    assert {"gcc", "bacc"} <= set(res.rates["scheme"])
    # x·sin x has one output per sample: relative RMSE, R² and the largest error, never a RelAcc
    assert "rel_acc" not in ds and {"rel_rmse", "r2", "max_abs_err"} <= set(ds.data_vars)
    assert "rel_acc_mean" not in res.summary and {"rel_rmse_mean", "r2_mean", "max_abs_err_mean"} <= set(res.summary)
    gcc = ds.sel(scheme="gcc")
    assert (gcc["max_abs_err"].values ** 2 <= 6 * gcc["mse"].values * (1 + 1e-9)).all()  # max² <= K·MSE
    again = run_sweep(cfg, client=client, out=tmp_path / "s.zarr")  # everything done: nothing runs
    assert again.wall_s == 0
    xr.testing.assert_equal(xr.open_zarr(again.path).load(), ds.load())
    with pytest.raises(StoreError, match="different configuration"):
        run_sweep({**cfg, "trials": 4}, client=client, out=tmp_path / "s.zarr")
