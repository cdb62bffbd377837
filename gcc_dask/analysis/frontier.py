"""The frontier's tables and figure, read from a frontier store only (docs/frontier.rst).

Every statistic takes the groups as clusters: a group's score is its mean over the cell's received sets (or its
worst set), the cell's value is the mean over the G groups, and its standard error is
``std(per-group scores, ddof=1) / sqrt(G)``. Two estimators of one cell are compared *paired*: the standard
error of their difference is that of the per-group differences, far smaller than either one's own when they
fail on the same hard groups.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["CODED", "CHEAP", "MSE_ROUNDING", "cluster_mean", "frontier_cells", "frontier_table", "open_frontier",
           "paired_difference", "plot_frontier"]

#: codes that mix inputs (the coded estimators) and the cheap ones (copies and fills)
CODED = ("gcc", "letcc", "bacc", "bspline", "lcc")
CHEAP = ("replication", "uncoded")
#: MSE differences below this are rounding (an exact decoder's MSE is 1e-14 or so, not 0): a tie
MSE_ROUNDING = 1e-12


def open_frontier(path: str | os.PathLike):
    """The frontier store as an :class:`xarray.Dataset` (loaded).

    Raises
    ------
    gcc_dask.errors.StoreError
        `path` is not a readable frontier store.
    """
    import xarray as xr

    from gcc_dask.errors import StoreError

    path = Path(os.fspath(path)).expanduser()
    try:
        # read here, without dask: Dask's default client (maybe not the run's) would otherwise do the reads
        ds = xr.open_zarr(str(path), consolidated=False, chunks=None).load()
    except Exception as e:
        raise StoreError(f"store: cannot read frontier store {str(path)!r}: {type(e).__name__}: {e}") from None
    if ds.attrs.get("gcc_dask_frontier") != 1:
        raise StoreError(f"store: got {str(path)!r}; expected a gcc-dask frontier store")
    return ds


def cluster_mean(values: np.ndarray) -> tuple[float, float, int]:
    """Mean over groups, its standard error with groups as clusters, and the number of groups used (finite).

    Parameters
    ----------
    values : array of shape (G,)
        One score per group.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan"), 0
    se = float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(v.mean()), se, int(v.size)


def paired_difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the per-group difference ``a − b`` (groups where both are finite)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mean, se, _ = cluster_mean(d)
    return mean, se


def frontier_table(ds) -> pd.DataFrame:
    """One row per (candidate, S, pattern): its N, N/K, code, and the mean ± SE of rel_acc (an f with several
    outputs only), mse and decodable_frac over the groups; for an f with one output, ``rel_rmse`` too (√ of
    the mean MSE over the mean ‖f‖² of the groups' outputs: the relative RMSE)."""
    names = [n for n in ("rel_acc", "mse", "decodable_frac") if n in ds]
    ref_ms = float(ds.attrs.get("reference_mean_square", np.nan))
    rows = []
    for i, cand in enumerate(ds["candidate"].values):
        for j, s in enumerate(ds["S"].values):
            for p, pattern in enumerate(ds["pattern"].values):
                row = {"candidate": str(cand), "estimator": str(ds["estimator"].values[i]),
                       "code": str(ds["code"].values[i]), "ratio": float(ds["ratio"].values[i]),
                       "N": int(ds["num_workers"].values[i]), "S": int(s), "pattern": str(pattern),
                       "exhaustive": bool(ds["exhaustive"].values[i, j])}
                for name in names:
                    mean, se, n = cluster_mean(ds[name].values[i, j, p])
                    row[name], row[f"{name}_se"] = mean, se
                if "rel_acc" not in ds and ref_ms > 0:
                    row["rel_rmse"] = float(np.sqrt(row["mse"] / ref_ms))
                row["groups"] = n
                if np.isfinite(row.get("rel_acc", np.nan)) or np.isfinite(row["mse"]):
                    rows.append(row)
    return pd.DataFrame(rows)


def _better(metric: str) -> int:
    return 1 if metric == "rel_acc" else -1  # rel_acc: higher is better; mse: lower


def frontier_cells(ds, tie_se: float = 2.0) -> pd.DataFrame:
    """One row per frontier cell (N, S, pattern): the best estimator, the best coded one, the best cheap one,
    and the paired difference coded − cheap.

    The metric is the store's (``rel_acc`` for a classifier, ``mse`` otherwise). With the MSE, an estimator
    that leaves outputs without an estimate (replication without a fill) is not a candidate: its MSE over the
    outputs it kept says nothing of those it lost. ``verdict`` is ``coded`` or ``cheap`` when the paired
    difference is more than `tie_se` standard errors (and, for the MSE, more than the rounding of an exact
    decoder, :data:`MSE_ROUNDING`) from 0 in that one's favour, else ``tie``. Columns: ``ratio``, ``N``, ``S``, ``pattern``, ``metric``, ``best``, ``best_value``,
    ``best_se``, ``coded``, ``coded_value``, ``coded_se``, ``cheap``, ``cheap_value``, ``cheap_se``,
    ``diff``, ``diff_se``, ``verdict``, ``groups``, ``exhaustive``.
    """
    metric = ds.attrs.get("metric", "rel_acc")
    sign = _better(metric)
    codes = ds["code"].values
    ns = ds["num_workers"].values
    rows = []
    for N in sorted(set(int(n) for n in ns)):
        in_cell = np.flatnonzero(ns == N)
        for j, s in enumerate(ds["S"].values):
            for p, pattern in enumerate(ds["pattern"].values):
                vals = {int(i): ds[metric].values[i, j, p] for i in in_cell}
                if metric == "mse":  # every output estimated, or no candidate
                    vals = {i: v for i, v in vals.items()
                            if np.nanmean(ds["decodable_frac"].values[i, j, p]) >= 1.0 - 1e-12}
                means = {i: cluster_mean(v) for i, v in vals.items()}
                means = {i: m for i, m in means.items() if np.isfinite(m[0])}
                if not means:
                    continue

                def best_of(pool):
                    pool = [i for i in pool if i in means]
                    return max(pool, key=lambda i: sign * means[i][0]) if pool else None

                best = best_of(means)
                coded = best_of([i for i in means if codes[i] in CODED])
                cheap = best_of([i for i in means if codes[i] in CHEAP])
                row = {"ratio": float(ds["ratio"].values[best]), "N": N, "S": int(s), "pattern": str(pattern),
                       "metric": metric, "best": str(ds["estimator"].values[best]),
                       "best_value": means[best][0], "best_se": means[best][1], "groups": means[best][2],
                       "exhaustive": bool(ds["exhaustive"].values[best, j])}
                for name, i in (("coded", coded), ("cheap", cheap)):
                    row[name] = None if i is None else str(ds["estimator"].values[i])
                    row[f"{name}_value"] = np.nan if i is None else means[i][0]
                    row[f"{name}_se"] = np.nan if i is None else means[i][1]
                if coded is not None and cheap is not None:
                    d, se = paired_difference(vals[coded], vals[cheap])
                    row["diff"], row["diff_se"] = d, se
                    margin = sign * d
                    bound = tie_se * (se if np.isfinite(se) else 0.0) + (MSE_ROUNDING if metric == "mse" else 0.0)
                    row["verdict"] = "coded" if margin > bound else "cheap" if margin < -bound else "tie"
                else:
                    row["diff"], row["diff_se"], row["verdict"] = np.nan, np.nan, None
                rows.append(row)
    return pd.DataFrame(rows)


def _paired_to_cheap(ds, metric: str, pattern: str) -> pd.DataFrame:
    """Every candidate minus the best cheap estimator of its cell (N, S), paired over groups: mean and SE."""
    sign = _better(metric)
    p = list(ds["pattern"].values).index(pattern)
    codes, ns = ds["code"].values, ds["num_workers"].values
    rows = []
    for j, s in enumerate(ds["S"].values):
        for N in sorted(set(int(n) for n in ns)):
            cell = np.flatnonzero(ns == N)
            vals = {int(i): ds[metric].values[i, j, p] for i in cell}
            cheap = [i for i in vals if codes[i] in CHEAP and np.isfinite(cluster_mean(vals[i])[0])]
            if not cheap:
                continue
            best = max(cheap, key=lambda i: sign * cluster_mean(vals[i])[0])
            for i, v in vals.items():
                d, se = paired_difference(v, vals[best])
                if np.isfinite(d):
                    rows.append({"estimator": str(ds["estimator"].values[i]), "code": str(codes[i]), "S": int(s),
                                 "ratio": float(ds["ratio"].values[i]), "diff": d, "diff_se": se})
    return pd.DataFrame(rows)


def plot_frontier(ds, path: str | os.PathLike, pattern: str = "random") -> Path:
    """Two rows of panels, one panel per S, against N/K, for one straggler `pattern`: on top RelAcc (or MSE),
    one line per estimator; below, each estimator minus the best cheap estimator of its cell, paired over the
    groups (above 0: better). Error bars are ±1 standard error (groups as clusters); coded estimators are solid
    lines, cheap ones dashed. The legend sits outside the panels."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    table = frontier_table(ds)
    table = table[table["pattern"] == pattern]
    metric = ds.attrs.get("metric", "rel_acc")
    paired = _paired_to_cheap(ds, metric, pattern)
    S_values = sorted(table["S"].unique())
    fig, axes = plt.subplots(2, len(S_values), figsize=(3.6 * len(S_values) + 2.6, 6.6), squeeze=False,
                             sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    estimators = list(dict.fromkeys(table["estimator"]))
    style = {}
    for i, est in enumerate(estimators):
        code = table[table["estimator"] == est]["code"].iloc[0]
        style[est] = {"color": colors[i % len(colors)], "ls": "-" if code in CODED else "--",
                      "marker": "o" if code in CODED else "s"}
    for col, s in enumerate(S_values):
        top, bottom = axes[0][col], axes[1][col]
        cell = table[table["S"] == s]
        for est, rows in cell.groupby("estimator", sort=False):
            rows = rows.sort_values("ratio")
            top.errorbar(rows["ratio"], rows[metric], yerr=rows[f"{metric}_se"], label=est, capsize=2, ms=4,
                         **style[est])
        if not paired.empty:
            diff = paired[paired["S"] == s]
            for est, rows in diff.groupby("estimator", sort=False):
                rows = rows.sort_values("ratio")
                bottom.errorbar(rows["ratio"], rows["diff"], yerr=rows["diff_se"], capsize=2, ms=4, **style[est])
            spread = diff["diff"].abs()
            spread = spread[spread < spread.quantile(0.75) * 4 + 1e-12] if len(spread) > 4 else spread
            lim = float(spread.max()) * 1.3 if len(spread) and spread.max() > 0 else 1.0
            bottom.set_ylim(-lim, lim)
        bottom.axhline(0, color="k", lw=0.8)
        top.set_title(f"S = {s}")
        bottom.set_xlabel("N / K")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
        if metric == "mse":
            vals = cell[metric][cell[metric] > 0]
            if len(vals):
                top.set_yscale("log")
                top.set_ylim(vals.min() / 2, vals.max() * 2)
    axes[0][0].set_ylabel("RelAcc" if metric == "rel_acc" else "MSE")
    axes[1][0].set_ylabel(f"minus the best cheap one\n({'higher' if metric == 'rel_acc' else 'lower'} is better)")
    seen: dict = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="center right", fontsize=8, frameon=False)
    fig.suptitle(f"{ds.attrs.get('name', 'frontier')}: {pattern} stragglers, K = {ds.attrs.get('num_inputs')}, "
                 f"{int(ds.sizes['group'])} groups (±1 SE)")
    fig.tight_layout(rect=(0, 0, 1 - 2.4 / fig.get_figwidth(), 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
