"""The frontier: received sets, paired per-group scores against a direct NumPy computation, the Dask job, the
store, the table of cells and its paired differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask import metrics
from gcc_dask.analysis.frontier import cluster_mean, frontier_cells, frontier_table, open_frontier, plot_frontier
from gcc_dask.errors import ConfigError, StoreError
from gcc_dask.frontier import (
    all_sets, contiguous_sets, load_frontier_config, random_sets, run_frontier, score_sets, summarize_scores,
)


def test_all_sets_are_every_straggler_set_once():
    sets = all_sets(7, 3)
    assert sets.shape == (math.comb(7, 3), 7) and (sets.sum(axis=1) == 4).all()
    assert len({row.tobytes() for row in sets}) == sets.shape[0]
    windows = contiguous_sets(7, 3)
    assert windows.shape == (5, 7)
    assert [np.flatnonzero(~w).tolist() for w in windows[:2]] == [[0, 1, 2], [1, 2, 3]]
    exact, exhaustive = random_sets(16, 4, exhaustive_limit=2000, draws=10, seed=0)
    assert exhaustive and exact.shape[0] == 1820
    drawn, exhaustive = random_sets(16, 4, exhaustive_limit=100, draws=10, seed=0)
    assert not exhaustive and drawn.shape == (10, 16) and (drawn.sum(axis=1) == 12).all()
    np.testing.assert_array_equal(drawn, random_sets(16, 4, exhaustive_limit=100, draws=10, seed=0)[0])


@pytest.mark.parametrize(("name", "params"), [("gcc", {}), ("bacc", {}),
                                              ("replication", {"fill": "linear"}), ("replication", {})])
def test_group_scores_equal_a_direct_computation(name, params):
    """Every group decoded on its own with code.decode, scored with gcc_dask.metrics, averaged over every set:
    the same numbers as the stacked evaluation (and the worst set per group is the minimum)."""
    K, N, G = 4, 6, 5
    code = gd.make_code(name, num_inputs=K, num_workers=N, **params)
    rng = np.random.default_rng(1)
    W = rng.normal(size=(5, 3))
    f = lambda x: np.tanh(x @ W.T)  # noqa: E731  R^3 -> R^5
    X = rng.normal(size=(G, K, 3))
    ref = np.stack([f(X[g]) for g in range(G)])
    Y = np.stack([f(code.encode(X[g])) for g in range(G)])
    sets = all_sets(N, 2)
    got = summarize_scores(score_sets(code, Y, ref, sets))
    worst = summarize_scores(score_sets(code, Y, ref, sets), worst=True)
    rel = np.zeros((G, len(sets)))
    mse = np.zeros((G, len(sets)))
    for g in range(G):
        for m, s in enumerate(sets):
            r = np.flatnonzero(s)
            est = code.decode(Y[g][r], r)
            rel[g, m] = metrics.rel_acc(est, ref[g])
            mse[g, m] = metrics.mse(est, ref[g])
    np.testing.assert_allclose(got["rel_acc"], rel.mean(axis=1))
    np.testing.assert_allclose(got["mse"], np.nanmean(mse, axis=1))
    np.testing.assert_allclose(worst["rel_acc"], rel.min(axis=1))
    np.testing.assert_allclose(worst["mse"], np.nanmax(mse, axis=1))


def _poly_cfg(tmp_path, **over):
    cfg = {"kind": "frontier", "name": "poly", "function": {"kind": "polynomial", "coeffs": [0.0, 0.0, 1.0]},
           "num_inputs": 4, "groups": 12, "ratios": [1, 1.5, 2], "stragglers": {"S": [1]},
           "candidates": "default", "store": {"path": str(tmp_path / "poly.zarr")}, "run": {"progress": False}}
    cfg.update(over)
    return cfg


def test_frontier_on_a_polynomial(client, tmp_path):
    """x² (degree 2) at K = 4: LCC needs (K - 1)·2 + 1 = 7 results, so at N = 8 with S = 1 it is exact, as is
    full replication; the table of cells pairs the best coded and the best cheap estimator per group."""
    res = run_frontier(_poly_cfg(tmp_path), client=client)
    ds = open_frontier(res.path)
    assert set(ds.dims) == {"candidate", "S", "pattern", "group", "position"}
    assert ds.attrs["metric"] == "mse" and ds.sizes["group"] == 12
    assert {"lcc@8", "replication/none@8", "gcc@6", "replication/linear@4"} <= set(ds["candidate"].values)
    assert "lcc@6" not in set(ds["candidate"].values)  # below its recovery threshold + 1: skipped
    sel = ds.sel(S=1, pattern="random")
    assert float(sel["mse"].sel(candidate="lcc@8").max()) < 1e-12  # exact up to rounding
    assert float(sel["mse"].sel(candidate="replication/none@8").max()) == 0.0
    assert (ds["exhaustive"].values == 1).all()
    cells = res.cells
    row = cells[(cells.N == 6) & (cells.pattern == "random")].iloc[0]
    coded = ds["mse"].sel(candidate=f"{row.coded}@6", S=1, pattern="random").values
    cheap = ds["mse"].sel(candidate=f"{row.cheap}@6", S=1, pattern="random").values
    d = coded - cheap
    assert row["diff"] == pytest.approx(d.mean()) and row["diff_se"] == pytest.approx(d.std(ddof=1) / np.sqrt(12))
    table = frontier_table(ds)
    mean, se, n = cluster_mean(ds["mse"].sel(candidate="gcc@6", S=1, pattern="worst").values)
    hit = table[(table.candidate == "gcc@6") & (table.pattern == "worst")].iloc[0]
    assert (hit["mse"], hit["mse_se"], hit["groups"]) == pytest.approx((mean, se, n))
    png = plot_frontier(ds, tmp_path / "f.png")
    assert png.stat().st_size > 1000
    # the same data, other straggler counts: the coded outputs are reused from the store, no overwrite needed
    again = run_frontier(_poly_cfg(tmp_path, stragglers={"S": [1, 2]}), client=client)
    assert open_frontier(again.path).sizes["S"] == 2
    with pytest.raises(StoreError, match="a frontier of other data"):
        run_frontier(_poly_cfg(tmp_path, groups=10), client=client)


@pytest.mark.parametrize(("over", "match"), [
    ({"ratios": [1, 1.1]}, r"^ratios: got \[1.0, 1.1\]; expected ratios giving distinct N"),
    ({"stragglers": {"S": [4]}}, r"^stragglers.S: got \[4\]; expected values below the smallest N = 4"),
    ({"groups": None}, r"^groups: got None; expected the number of groups"),
    ({"stragglers": {"S": [1], "patterns": ["random", "nope"]}}, r"^stragglers.patterns.1: got 'nope'"),
], ids=["same-n", "s-too-large", "no-groups", "bad-pattern"])
def test_bad_frontier_files_are_one_line(tmp_path, over, match):
    with pytest.raises(ConfigError, match=match) as info:
        load_frontier_config(_poly_cfg(tmp_path, **over))
    assert "\n" not in str(info.value)


def test_the_cli_runs_a_frontier_file_and_reports_it(tmp_path):
    """`gcc-dask sweep` on a file with `kind: frontier` runs the frontier and prints its cells; `gcc-dask report`
    writes the cells, the estimators and one figure per straggler pattern."""
    import yaml
    from click.testing import CliRunner

    from gcc_dask.cli import main

    cfg = _poly_cfg(tmp_path, cluster={"n_workers": 1, "threads_per_worker": 2, "processes": False})
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(cfg))
    run = CliRunner().invoke(main, ["sweep", str(tmp_path / "f.yaml"), "--out", str(tmp_path / "f.zarr")])
    assert run.exit_code == 0, run.output
    assert "random stragglers:" in run.output and "| verdict" in run.output
    rep = CliRunner().invoke(main, ["report", str(tmp_path / "f.zarr"), "--out", str(tmp_path / "rep")])
    assert rep.exit_code == 0, rep.output
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## worst stragglers" in text and "Where coding wins and where it does not" in text
    assert {p.name for p in (tmp_path / "rep" / "figures").iterdir()} == {
        "frontier_random.png", "frontier_contiguous.png", "frontier_worst.png"}


def test_results_section_and_the_training_choice(client, tmp_path):
    """RESULTS.md's frontier section from the stores it finds, and the coded estimator chosen on one store
    (training) judged on another (held out) against the held-out store's best cheap one, paired."""
    from gcc_dask.analysis.results_frontier import chosen_on_training, frontier_section

    runs = tmp_path / "runs"
    test = run_frontier(_poly_cfg(tmp_path, name="frontier-polynomial", store={"path": str(runs / "frontier-polynomial.zarr")}),
                        client=client)
    train = run_frontier(_poly_cfg(tmp_path, seed=5, store={"path": str(tmp_path / "train.zarr")}), client=client)
    tr, te = open_frontier(train.path), open_frontier(test.path)
    chosen = chosen_on_training(tr, te)
    assert set(chosen["N"]) == {4, 6, 8} and (chosen["S"] == 1).all()
    row = chosen[chosen["N"] == 6].iloc[0]
    a = te["mse"].sel(candidate=f"{row.coded}@6", S=1, pattern="random").values
    b = te["mse"].sel(candidate=f"{row.cheap}@6", S=1, pattern="random").values
    assert row["diff"] == pytest.approx((a - b).mean())
    md, missing, counts = frontier_section(runs, tmp_path / "figs", tmp_path / "figs")
    text = "\n".join(md)
    assert "### 1 + x + x²" in text and "Where coding wins and where it does not" in text
    assert (tmp_path / "figs" / "frontier-polynomial.png").is_file()
    assert any("frontier-mnist.zarr" in m for m in missing) and "frontier-polynomial" in counts
