"""Metrics by what f returns (issue 37, item 1): a classifier's outputs get RelAcc and accuracy, one value per
sample gets the relative RMSE, R² and the largest error, and never a RelAcc (the argmax of one value is 0)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gcc_dask import metrics
from gcc_dask.analysis import summary as summary_mod
from gcc_dask.analysis.metrics import run_table
from gcc_dask.analysis.report import make_report
from gcc_dask.analysis.summary import format_summary, summarize_run
from gcc_dask.store import RunStore

K, BATCHES = 4, 3


def _run_store(path, reference, decoded, labels=None, status=(1, 1, 1)):
    """One scheme ``gcc`` (N = 6), batches of K = 4 samples; `decoded` and `reference` of shape (12, *out)."""
    out = reference.shape[1:]
    store = RunStore.create(path, config_resolved={"name": "kinds"}, fingerprint="x", schemes={"gcc": 6},
                            num_samples=K * BATCHES, batch_size=K, output_shape=out, has_labels=labels is not None,
                            has_reference=True, seed=0, dtype="float64")
    for b in range(BATCHES):
        rows = slice(b * K, (b + 1) * K)
        store.write_inputs(b, reference=reference[rows], labels=None if labels is None else labels[rows])
        store.write_batch("gcc", b, decoded=decoded[rows], received_mask=np.ones(6, bool),
                          latency_s=np.full(6, 0.1), cutoff_s=0.1, status=status[b])
    store.finish()
    return path


def _regression(path):
    ref = np.array([1.0, -2.0, 3.0, 0.5, 2.0, -1.0, 4.0, 0.0, 1.5, 2.5, -0.5, 3.5])[:, None]
    err = np.array([0.1, -0.2, 0.0, 0.3, 0.0, 0.1, -0.4, 0.2, 0.0, 0.1, 0.2, -0.1])[:, None]
    dec = ref + err
    dec[5] = np.nan  # a sample without an estimate: left out of every error, counted as missing
    return _run_store(path, ref, dec), ref, dec


# ------------------------------------------------------------------------------------------ gcc_dask.metrics
def test_output_kind_from_the_output_shape():
    assert metrics.output_kind((10,)) == "classifier"
    assert metrics.output_kind((2,)) == "classifier"
    assert metrics.output_kind((1,)) == "regression"
    assert metrics.output_kind(()) == "regression"
    assert metrics.output_kind((1, 1)) == "regression"


def test_relative_rmse_r2_and_largest_error_by_hand():
    ref = np.array([[1.0], [2.0], [3.0], [4.0], [9.0]])
    est = np.array([[1.5], [2.0], [2.0], [4.0], [np.nan]])  # the last row is left out
    # errors 0.5, 0, -1, 0 over f = 1, 2, 3, 4: Σe² = 1.25, Σf² = 30, Σ(f - 2.5)² = 5
    assert metrics.relative_rmse(est, ref) == pytest.approx(math.sqrt(1.25 / 30))
    assert metrics.r2(est, ref) == pytest.approx(1 - 1.25 / 5)
    assert metrics.max_abs_error(est, ref) == pytest.approx(1.0)
    assert metrics.relative_rmse(ref, ref) == 0.0 and metrics.r2(ref, ref) == 1.0
    assert metrics.r2(np.full_like(ref, 3.8), ref) == pytest.approx(0.0)  # f's own mean scores R² = 0
    nothing = np.full_like(ref, np.nan)
    assert math.isnan(metrics.relative_rmse(nothing, ref)) and math.isnan(metrics.r2(nothing, ref))
    assert math.isnan(metrics.max_abs_error(nothing, ref))
    assert math.isnan(metrics.relative_rmse(ref * 0, ref * 0))  # f is 0 there: no scale to compare with


# ------------------------------------------------------------------------------------- the run summary
def test_single_output_summary_has_relative_errors_and_no_relacc(tmp_path):
    path, ref, dec = _regression(tmp_path / "reg.zarr")
    s = summarize_run(str(path))
    assert s.attrs["output_kind"] == "regression" and s.loc["gcc", "output_kind"] == "regression"
    for absent in ("rel_acc", "accuracy", "accuracy_uncoded"):
        assert absent not in s.columns
    row = s.loc["gcc"]
    ok = ~np.isnan(dec[:, 0])
    e, r = dec[ok, 0] - ref[ok, 0], ref[ok, 0]
    assert row["rmse"] == pytest.approx(math.sqrt(np.mean(e**2)))
    assert row["rel_rmse"] == pytest.approx(math.sqrt(np.sum(e**2) / np.sum(r**2)))
    assert row["r2"] == pytest.approx(1 - np.sum(e**2) / np.sum((r - r.mean()) ** 2))
    assert row["max_abs_err"] == pytest.approx(0.4)
    assert row["missing"] == 1
    text = format_summary(s)
    assert "rel_acc" not in text and "acc " not in text
    header = text.splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")][:5] == ["scheme", "N", "rel_rmse", "r2", "max_err"]
    assert "output_kind regression (one value per sample, or set)" in text and "no RelAcc" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_regression_metrics_pool_block_by_block(tmp_path, monkeypatch):
    """Read one batch at a time (the bounded-memory path of a long run): the same figures as in one block, with
    f's values far from 0 (the merged variance of R² has no cancellation)."""
    ref = 1e6 + np.linspace(-1.0, 1.0, K * BATCHES)[:, None]
    dec = ref + np.linspace(0.0, 0.2, K * BATCHES)[:, None] ** 2
    path = _run_store(tmp_path / "far.zarr", ref, dec)
    whole = summarize_run(str(path)).loc["gcc"]
    monkeypatch.setattr(summary_mod, "SUMMARY_ROWS", 1)
    pieces = summarize_run(str(path)).loc["gcc"]
    assert pieces["r2"] == pytest.approx(metrics.r2(dec, ref), rel=1e-9)
    for name in ("rel_rmse", "r2", "max_abs_err", "rmse"):
        assert pieces[name] == pytest.approx(whole[name], rel=1e-9)


def test_classifier_summary_keeps_relacc_and_accuracy(tmp_path):
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(K * BATCHES, 3))
    dec = ref.copy()
    dec[0] = ref[0][::-1] * [1, 1, 1]  # the first sample's scores reversed: its argmax may change
    labels = np.argmax(ref, axis=1).astype(np.int64)
    path = _run_store(tmp_path / "cls.zarr", ref, dec, labels=labels)
    s = summarize_run(str(path))
    assert s.attrs["output_kind"] == "classifier"
    agree = np.mean(np.argmax(dec, 1) == np.argmax(ref, 1))
    assert s.loc["gcc", "rel_acc"] == pytest.approx(agree)
    assert s.loc["gcc", "accuracy"] == pytest.approx(agree) and s.loc["gcc", "accuracy_uncoded"] == 1.0
    for absent in ("rel_rmse", "r2", "max_abs_err"):
        assert absent not in s.columns
    text = format_summary(s)
    assert "rel_acc" in text and "regression" not in text


# ------------------------------------------------------------------------------------------ the report
def test_report_of_a_single_output_run_has_no_relacc(tmp_path):
    path, _, _ = _regression(tmp_path / "reg.zarr")
    table = run_table(path)
    assert not [c for c in table.columns if c.startswith("rel_acc")]
    assert table.loc["gcc", "rel_rmse"] == pytest.approx(summarize_run(str(path)).loc["gcc", "rel_rmse"])
    rep = make_report(path, tmp_path / "rep", recompute=False)
    csv = (tmp_path / "rep" / "summary.csv").read_text()
    assert "rel_acc" not in csv and "accuracy" not in csv and "rel_rmse" in csv and "max_abs_err" in csv
    per_scheme = rep.markdown.split("## Per scheme")[1].split("##")[0]
    assert "rel_acc" not in per_scheme and "rel_rmse" in per_scheme and "r2" in per_scheme
    assert "output kind: regression" in rep.markdown


@pytest.mark.parametrize("given, kind", [(None, "classifier"), ("auto", "classifier"),
                                         ("regression", "regression"), ("classifier", "classifier")])
def test_run_output_kind_scores_a_multi_output_regressor_by_its_error(tmp_path, given, kind):
    """A breaker's find: an f with 3 outputs that are not class scores was scored as a classifier (by the
    argmax), so estimates 0.4 off in relative RMSE were not flagged poor. ``run.output_kind: regression`` (the
    stored config's) scores them by the relative RMSE, and flags them; ``auto`` (or a store made before the
    key) infers from the shape as before."""
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(K * BATCHES, 3))
    ref[:, 0] += 10.0  # the argmax is the first output, which the estimates get right: RelAcc 1 as a classifier
    dec = ref + 3.0 * rng.normal(size=ref.shape)
    dec[:, 0] = ref[:, 0]
    path = _run_store(tmp_path / "multi.zarr", ref, dec)
    if given is not None:
        import zarr

        root = zarr.open_group(str(path), mode="r+")
        root.attrs["config"] = {**dict(root.attrs["config"]), "run": {"output_kind": given}}
    table = summarize_run(str(path))
    assert table.attrs["output_kind"] == kind and table.loc["gcc", "output_kind"] == kind
    if kind == "regression":
        rel = metrics.relative_rmse(dec, ref)
        assert table.loc["gcc", "rel_rmse"] == pytest.approx(rel) and "rel_acc" not in table.columns
        assert table.loc["gcc", "poor"].startswith("relative RMSE")
    else:
        assert table.loc["gcc", "rel_acc"] == 1.0 and table.loc["gcc", "poor"] == ""
