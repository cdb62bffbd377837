"""Reports on sweep and run stores; the accuracy-against-deadline analysis; the CLI commands."""

from __future__ import annotations

import math

import numpy as np
import pytest
from analysis_helpers import synthetic_sweep
from click.testing import CliRunner

import gcc_dask as gd
from gcc_dask.analysis.deadline import deadline_curve, latency_cdf, latency_table
from gcc_dask.analysis.report import make_report
from gcc_dask.cli import main
from gcc_dask.store import RunStore

PNG = b"\x89PNG\r\n\x1a\n"


def _check_files(rep, expected):
    names = {str(p.relative_to(rep.out_dir)) for p in rep.files}
    assert names == expected
    for p in rep.files:
        assert p.is_file() and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == PNG
            assert f"]({p.relative_to(rep.out_dir)})" in rep.markdown  # every figure is in the report


# ------------------------------------------------------------------------------------ sweep stores
def test_sweep_report_writes_every_promised_file(tmp_path):
    store = synthetic_sweep(tmp_path / "s.zarr", lambda sc, K, N, s, t: (t + 1) * s**3 * N**-3.0,
                            rel_acc=lambda sc, K, N, s, t: 0.9)
    rep = make_report(store, tmp_path / "out", n_boot=100)
    _check_files(rep, {"report.md", "cells.csv", "rates.csv", "comparison.csv", "figures/mse_vs_n_K10.png",
                       "figures/mse_vs_S_K10.png", "figures/rel_acc_vs_n_K10.png"})
    assert "slope" in rep.markdown and "−3.0" not in rep.markdown  # tables use ASCII numbers
    rates = (tmp_path / "out" / "rates.csv").read_text()
    assert "-3.0" in rates


def test_bernoulli_sweep_report_uses_p(tmp_path):
    store = synthetic_sweep(tmp_path / "b.zarr", lambda sc, K, N, p, t: N**-3.0, S=(0.1, 0.3), sdim="p")
    rep = make_report(store, n_boot=50)
    assert rep.out_dir == tmp_path / "b-report"
    _check_files(rep, {"report.md", "cells.csv", "rates.csv", "figures/mse_vs_n_K10.png",
                       "figures/mse_vs_p_K10.png"})


def test_report_of_a_real_small_sweep(client, tmp_path):
    from gcc_dask.sweep import run_sweep

    cfg = {"function": {"kind": "smooth", "dim": 2, "out_dim": 3}, "schemes": ["gcc", "bacc"],
           "code": {"num_inputs": [4], "num_workers": [9, 17]},
           "stragglers": {"model": "fixed_count", "S": [1], "pattern": "contiguous"}, "trials": 2,
           "run": {"progress": False}}
    res = run_sweep(cfg, client=client, out=tmp_path / "real.zarr")
    rep = make_report(res.path, n_boot=50)
    _check_files(rep, {"report.md", "cells.csv", "rates.csv", "comparison.csv", "figures/mse_vs_n_K4.png",
                       "figures/mse_vs_S_K4.png", "figures/rel_acc_vs_n_K4.png"})


# -------------------------------------------------------------------------------------- run stores
@pytest.fixture(scope="module")
def smoke_run(client, tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "smoke.zarr"
    return gd.run_pipeline("pipelines/smoke.yaml", client=client, out=out, overrides=["run.progress=false"])


def test_run_report_writes_every_promised_file(smoke_run, tmp_path):
    rep = make_report(smoke_run.path, tmp_path / "rep")
    _check_files(rep, {"report.md", "summary.csv", "latency.csv", "deadline.csv", "figures/latency_cdf.png",
                       "figures/deadline.png", "figures/shards.png"})
    assert "![shards by batch](figures/shards.png)" in rep.markdown
    assert "mean_backups" not in rep.markdown  # no speculative scheme in the run: no backups column
    assert rep.left_out is None and "- note:" not in rep.markdown  # a reference and labels: nothing left out
    # the per-scheme table counts the samples left without an estimate and those filled from neighbours, as the
    # summary does (a run that lost estimates showed none of it in the report)
    header = rep.markdown.split("## Per scheme")[1].split("\n\n")[1].splitlines()[0]
    cells = [c.strip() for c in header.split("|")]
    assert cells.index("failed") < cells.index("missing") < cells.index("filled") < cells.index("mean_received")


def test_a_report_of_a_coded_map_store_says_in_one_line_what_it_left_out(client, tmp_path):
    """coded_map stores no uncoded reference (run.reference: false) and an array X has no labels: the report
    showed NaN columns and an empty deadline table without a word. It leaves them out and says so in one line,
    in report.md and on the command line."""
    X = np.random.default_rng(0).random((128, 4)).astype(np.float32)
    res = gd.coded_map(lambda b: np.tanh(b[:, :3]), X, client=client, out=tmp_path / "cm.zarr",
                       code={"num_inputs": 4, "num_workers": 8, "block_size": 8}, cutoff={"stragglers": 2})
    out = CliRunner().invoke(main, ["report", res.store, "--out", str(tmp_path / "r"), "--no-recompute"])
    assert out.exit_code == 0, out.output
    said = [line for line in out.output.splitlines() if line.startswith("note: ")]
    assert said == ["note: no uncoded reference in this store (run.reference: false): the errors against f (rel_acc, "
                    "rmse, rel_rmse, r2, max_abs_err, rmse_mean, rmse_std, rel_acc_std) and the "
                    "accuracy-against-deadline table are left out (run.reference: true stores f of every sample); no "
                    "labels in this store (its source has none): accuracy and accuracy_uncoded are left out"]
    text = (tmp_path / "r" / "report.md").read_text()
    assert f"- {said[0]}" in text
    table = text.split("## Per scheme")[1].split("##")[0]
    assert "| gcc " in table and not any(c in table for c in ("rel_acc", "accuracy", "rmse", "r2"))
    assert "_(left out: no uncoded reference in this store; the figure shows the results in by each deadline)_" \
        in text
    with_ref = gd.coded_map(lambda b: np.tanh(b[:, :3]), X, client=client, out=tmp_path / "ref.zarr",
                            code={"num_inputs": 4, "num_workers": 8, "block_size": 8}, cutoff={"stragglers": 2},
                            run={"reference": True})
    rep = make_report(with_ref.store, tmp_path / "r2", recompute=False)  # labels alone are missing
    assert rep.left_out == ("no labels in this store (its source has none): accuracy and accuracy_uncoded are "
                            "left out")
    assert "rel_acc" in rep.markdown.split("## Per scheme")[1].split("##")[0]


def test_deadline_curve_ends_at_the_recorded_results(smoke_run):
    curve = deadline_curve(smoke_run.path)
    assert curve.attrs["mode"] == "recompute"
    assert curve.attrs["recompute_max_abs_diff"] < 1e-3  # offline f reproduces the stored estimates
    summary = smoke_run.summary
    for scheme, sub in curve.groupby("scheme"):
        sub = sub.sort_values("deadline_s")
        assert np.all(np.diff(sub["complete_frac"]) >= 0) and np.all(np.diff(sub["received_mean"]) >= 0)
        last = sub.iloc[-1]
        assert last["complete_frac"] == 1.0
        assert last["rel_acc"] == pytest.approx(summary.loc[scheme, "rel_acc"])
        assert last["received_mean"] == pytest.approx(summary.loc[scheme, "mean_received"])
    assert set(latency_table(smoke_run.path).index) == set(summary.index)
    cdf = latency_cdf(smoke_run.path)
    assert cdf.groupby("scheme")["cdf"].max().eq(1.0).all()


def _synthetic_run(path):
    """One scheme, N = 4, K = 2, 3 batches; decoded = reference + (b + 1), so batch b has MSE (b + 1)²."""
    store = RunStore.create(path, config_resolved={"name": "synthetic"}, fingerprint="x", schemes={"gcc": 4},
                            num_samples=6, batch_size=2, output_shape=(1,), has_labels=False,
                            has_reference=True, seed=0, dtype="float64")
    nan = math.nan
    table = [([0, 1, 2], [0.1, 0.2, 0.3, nan], 0.3, 1), ([0, 1, 2, 3], [0.05, 0.4, 0.5, 0.6], 0.6, 1),
             ([1, 3], [nan, 0.2, nan, 0.9], 0.9, 2)]
    for b, (recv, lat, cut, status) in enumerate(table):
        ref = np.arange(2.0 * b, 2.0 * b + 2)[:, None]
        store.write_inputs(b, reference=ref)
        mask = np.isin(np.arange(4), recv)
        store.write_batch("gcc", b, decoded=ref + (b + 1), received_mask=mask, latency_s=np.array(lat),
                          cutoff_s=cut, status=status)
    store.finish()
    return path


def test_deadline_curve_store_only_on_known_arrivals(tmp_path):
    path = _synthetic_run(tmp_path / "run.zarr")
    curve = deadline_curve(path, [0.25, 0.3, 0.6, 1.0], recompute=False).set_index("deadline_s")
    assert curve.attrs["mode"] == "store-only" and curve["basis"].eq("complete batches only").all()
    assert curve["complete_frac"].tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert curve["received_mean"].tolist() == pytest.approx([4 / 3, 5 / 3, 8 / 3, 3])
    assert math.isnan(curve.loc[0.25, "mse"])
    assert curve.loc[0.3, "mse"] == pytest.approx(1.0)
    assert curve.loc[0.6, "mse"] == pytest.approx(2.5)
    assert curve.loc[1.0, "mse"] == pytest.approx(14 / 3)
    rep = make_report(path, tmp_path / "rep", recompute=False)  # f cannot be rebuilt: store-only report
    assert "store-only" in rep.markdown


def _summarize(path):
    from gcc_dask.analysis.summary import summarize_run

    return summarize_run(str(path))


DAMAGED = [
    ("gcc/decoded/c/1/0", _summarize,
     r"its array 'gcc/decoded' has a damaged chunk c/1/0 \(sample 2-3, batch 1, output 0\) that cannot be read "
     r"\(ValueError: Stored and computed checksum do not match"),  # crc32c, checked before zstd decompresses
    ("gcc/status/c/0", _summarize,
     r"its array 'gcc/status' has a damaged chunk c/0 \(batches 0-2\)"),
    ("inputs/reference/c/2/0", lambda p: deadline_curve(p, recompute=False),
     r"its array 'inputs/reference' has a damaged chunk c/2/0 \(sample 4-5, batch 2, output 0\)"),
    ("gcc/latency_s/c/0/0", latency_table, r"its array 'gcc/latency_s' has a damaged chunk c/0/0 \(batches 0-2, "
                                           r"worker 0-3\)"),
    ("gcc/cutoff_s/c/0", lambda p: make_report(p, p.parent / "rep", recompute=False),
     r"its array 'gcc/cutoff_s' has a damaged chunk c/0 \(batches 0-2\)"),
]


@pytest.mark.parametrize(("chunk", "read", "match"), DAMAGED,
                         ids=["decoded-summary", "status-summary", "reference-deadline", "latency-table", "report"])
def test_damaged_chunk_names_store_array_and_batch(tmp_path, chunk, read, match):
    from gcc_dask.errors import StoreError

    path = _synthetic_run(tmp_path / "run.zarr")
    (path / chunk).write_bytes(np.random.default_rng(0).bytes(64))
    with pytest.raises(StoreError, match=match) as info:
        read(path)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"store path: got {str(path)!r}; ")
    assert text.endswith(f"restore {str(path / chunk)!r} from a copy, or rerun into a new store")


def test_damaged_sweep_chunk_is_named_and_other_errors_pass_through(tmp_path):
    from gcc_dask.analysis.stores import names_corrupt_chunks
    from gcc_dask.errors import StoreError

    store = synthetic_sweep(tmp_path / "s.zarr", lambda sc, K, N, s, t: N**-3.0)
    with pytest.raises(ZeroDivisionError):  # a bug, not damage: unchanged
        names_corrupt_chunks(lambda p: 1 / 0)(store)
    (store / "mse" / "c" / "0" / "0" / "0" / "0" / "0").write_bytes(b"\x00" * 32)
    with pytest.raises(StoreError, match=r"its array 'mse' has a damaged chunk c/0/0/0/0/0 \(scheme 0-1, "
                                         r"num_inputs 0, num_workers 0-3, S 0-1, trial 0-3\)"):
        make_report(store, tmp_path / "rep")


# --------------------------------------------------------------------------------------------- CLI
def test_cli_report_and_user_errors(tmp_path):
    store = synthetic_sweep(tmp_path / "s.zarr", lambda sc, K, N, s, t: N**-3.0)
    runner = CliRunner()
    res = runner.invoke(main, ["report", str(store), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "report.md").is_file() and "figures/mse_vs_n_K10.png" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("function: {kind: xsinx}\nschemes: [gcc]\ncode: {num_inputs: [4], num_workers: [9]}\n"
                   "stragglers: {model: fixed_count, S: [1]}\ntrials: -1\n")
    res = runner.invoke(main, ["sweep", str(bad)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == ["gcc-dask: error: trials: got -1; expected a number greater "
                                               "than or equal to 1"]
    (tmp_path / "plain").mkdir()
    res = runner.invoke(main, ["report", str(tmp_path / "plain")])
    assert res.exit_code == 2 and "expected a gcc-dask run, sweep or frontier store" in res.output


# ------------------------------------------------------------------------------------- RESULTS.md
def test_results_page_from_stores_and_missing_ones(tmp_path):
    from gcc_dask.analysis.results import build_results

    runs = tmp_path / "runs"
    synthetic_sweep(runs / "rate_bernoulli.zarr", lambda sc, K, N, p, t: (1 + (sc == "bacc")) * N**-3.0,
                    schemes=("gcc", "bacc", "bspline"), S=(0.1, 0.3), sdim="p")
    page = build_results(runs, tmp_path / "RESULTS.md", tmp_path / "results" / "figures")
    text = page.read_text()
    assert "ends below bacc at the largest N: **yes**" in text
    assert "](results/figures/rate_bernoulli_mse_vs_n.png)" in text
    assert (tmp_path / "results" / "figures" / "rate_bernoulli_mse_vs_n.png").read_bytes()[:8] == PNG
    assert "## Missing stores" in text and "rate_worst_case.zarr" in text


def test_analysis_package_exports_lazily():
    import gcc_dask.analysis as ga

    assert callable(ga.make_report) and callable(ga.fit_rate)
    with pytest.raises(AttributeError):
        ga.nope  # noqa: B018


def test_the_report_of_an_unfinished_run_says_how_many_batches_are_done(client, tmp_path):
    """A breaker's find: the report of an interrupted (or limited) store said its status and nothing of how far it
    got (the pending batches were in summary.csv only). It now says, per scheme, how many batches are done, and that
    the same command resumes it; a finished run's report says nothing of the kind."""
    X = np.random.default_rng(0).random((128, 4)).astype(np.float32)
    kw = dict(client=client, code={"num_inputs": 4, "num_workers": 8, "block_size": 8}, cutoff={"stragglers": 2})
    part = gd.coded_map(lambda b: np.tanh(b[:, :3]), X, schemes=("gcc", "uncoded"), out=tmp_path / "part.zarr",
                        run={"limit_batches": 2}, **kw)
    text = make_report(part.store, tmp_path / "r", recompute=False).markdown
    assert "- not finished: gcc 2 of 4 batches done, uncoded 2 of 4 batches done (the same `gcc-dask run` " \
           "command resumes it)" in text
    full = gd.coded_map(lambda b: np.tanh(b[:, :3]), X, out=tmp_path / "full.zarr", **kw)
    assert "not finished" not in make_report(full.store, tmp_path / "r2", recompute=False).markdown
