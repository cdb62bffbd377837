"""Aggregate the metrics (docs/concepts.rst, section 'Metrics') over sweep stores (per grid cell) and run stores (per scheme).

Per-trial values come from the stores: ``mse`` (the paper's loss, a mean over the K outputs of the squared
error summed over output coordinates), ``rmse = √mse`` per trial, ``rel_acc`` (argmax agreement with f),
``accuracy`` (argmax = label). Aggregates are the mean and the standard deviation (ddof = 0) over trials
(sweeps) or batches (runs). Undecodable trials (MSE NaN) are left out of the MSE statistics and counted
in ``undecodable_frac``; they count as wrong in RelAcc/accuracy (a missing answer is not a right one).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd

from gcc_dask.analysis.stores import names_corrupt_chunks

__all__ = ["comparison_table", "format_pm", "run_table", "straggler_dim", "sweep_table"]

_STAT_VARS = ("mse", "rmse", "rel_acc", "accuracy", "decodable_frac")


def straggler_dim(ds) -> str:
    """The straggler dimension of a sweep Dataset: ``"S"`` or ``"p"``."""
    for dim in ("S", "p"):
        if dim in ds.dims:
            return dim
    raise ValueError(f"not a sweep Dataset: no 'S' or 'p' dimension among {list(ds.dims)}")


def _nanstats(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells
        return np.nanmean(a, axis=-1), np.nanstd(a, axis=-1)


def sweep_table(ds) -> pd.DataFrame:
    """One row per run (scheme, num_inputs, num_workers, S|p) cell of a sweep Dataset.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`gcc_dask.analysis.stores.open_sweep`.

    Returns
    -------
    pandas.DataFrame
        Columns ``scheme, code, num_inputs, num_workers, S|p, trials, mse_mean, mse_std, mse_median,
        rmse_mean, rmse_std, [rel_acc_mean, rel_acc_std], [accuracy_mean, accuracy_std,
        accuracy_uncoded], [rel_rmse_*, r2_*, max_abs_err_* (mean and std) for an f with one output], decodable_frac_mean, undecodable_frac, n_received_mean, [exhaustive_frac],
        coincident_points``. Cells that are pending or skipped are left out.
    """
    sdim = straggler_dim(ds)
    status = ds["status"].values
    mse = ds["mse"].values
    ran = ds["n_received"].values >= 0
    cols: dict[str, np.ndarray] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cols["trials"] = ran.sum(axis=-1)
        cols["mse_mean"], cols["mse_std"] = _nanstats(mse)
        cols["mse_median"] = np.nanmedian(mse, axis=-1)
        cols["rmse_mean"], cols["rmse_std"] = _nanstats(np.sqrt(mse))
        for name in ("rel_acc", "accuracy", "rel_rmse", "r2", "max_abs_err"):
            if name in ds:
                cols[f"{name}_mean"], cols[f"{name}_std"] = _nanstats(ds[name].values)
        cols["decodable_frac_mean"] = _nanstats(ds["decodable_frac"].values)[0]
        cols["undecodable_frac"] = np.where(cols["trials"] > 0, (ran & np.isnan(mse)).sum(-1)
                                            / np.maximum(cols["trials"], 1), np.nan)
        cols["n_received_mean"] = np.where(ran, ds["n_received"].values, np.nan).sum(-1) / np.maximum(
            cols["trials"], 1)
        if "search_exhaustive" in ds:
            ex = ds["search_exhaustive"].values
            cols["exhaustive_frac"] = (ex == 1).sum(-1) / np.maximum((ex >= 0).sum(-1), 1)
    rows = []
    schemes, codes = list(ds["scheme"].values), list(ds["code"].values)
    K, N, S = ds["num_inputs"].values, ds["num_workers"].values, ds[sdim].values
    acc_u = ds["accuracy_uncoded"].values if "accuracy_uncoded" in ds else None
    coinc = ds["coincident_points"].values
    for idx in zip(*np.nonzero(status == 1)):
        i, a, b, c = idx
        row = {"scheme": str(schemes[i]), "code": str(codes[i]), "num_inputs": int(K[a]),
               "num_workers": int(N[b]), sdim: S[c].item()}
        row.update({name: v[idx].item() for name, v in cols.items()})
        if acc_u is not None:
            row["accuracy_uncoded"] = float(np.nanmean(acc_u[a])) if np.isfinite(acc_u[a]).any() else np.nan
        row["coincident_points"] = int(coinc[i, a, b])
        rows.append(row)
    return pd.DataFrame(rows)


def format_pm(mean: float, std: float, digits: int = 3, sci: bool = False) -> str:
    """``"mean ± std"`` (``"—"`` for NaN), fixed-point or scientific."""
    if not np.isfinite(mean):
        return "—"
    fmt = f"{{:.{digits - 1}e}}" if sci else f"{{:.{digits}f}}"
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def comparison_table(ds, *, metrics: tuple[str, ...] = ("rmse", "rel_acc")) -> pd.DataFrame:
    """The LeTCC/BACC-style table: rows ``(K, N, |F|)``, one ``"mean ± std"`` column per scheme and metric.

    ``|F|`` is ``N − S`` for fixed-count stragglers, else the mean received count (``p`` is shown too).
    Cells a scheme cannot run (e.g. replication with N not a multiple of K) show ``"—"``.

    Returns
    -------
    pandas.DataFrame
        Index (num_inputs, num_workers, F[, p]); columns ``"<metric>:<scheme>"`` (strings).
    """
    table = sweep_table(ds)
    sdim = straggler_dim(ds)
    if table.empty:
        return pd.DataFrame()
    if sdim == "S":
        table["F"] = table["num_workers"] - table["S"]
        keys = ["num_inputs", "num_workers", "F"]
    else:
        keys = ["num_inputs", "num_workers", "p"]
    out = {}
    for metric in metrics:
        if f"{metric}_mean" not in table:
            continue
        for scheme in dict.fromkeys(table["scheme"]):
            sub = table[table["scheme"] == scheme].set_index(keys)
            out[f"{metric}:{scheme}"] = {
                k: format_pm(r[f"{metric}_mean"], r[f"{metric}_std"]) for k, r in sub.iterrows()}
    result = pd.DataFrame(out).fillna("—")
    result.index.names = keys
    return result.sort_index()


@names_corrupt_chunks
def run_table(path: str | os.PathLike) -> pd.DataFrame:
    """Per-scheme table of a pipeline run store: :func:`~gcc_dask.analysis.summary.summarize_run` plus
    the spread over batches of the per-batch metrics.

    Adds ``mse_mean``, ``mse_std``, ``rmse_mean``, ``rmse_std``, and for a classifier (the summary's
    ``output_kind``) ``rel_acc_mean``, ``rel_acc_std`` (over decoded batches; per-batch RMSE is √ of the batch
    MSE). A regression gets no RelAcc columns: the store's per-batch ``rel_acc`` of a single-output f is
    an argmax of one value, always 1 for a decoded row.

    Raises
    ------
    StoreError
        If `path` is not a readable run store.
    """
    import xarray as xr

    from gcc_dask.analysis.summary import summarize_run

    summary = summarize_run(os.fspath(path))
    names = ("mse", "rel_acc") if summary.attrs.get("output_kind") == "classifier" else ("mse",)
    extra = {}
    for scheme in summary.index:
        ds = xr.open_zarr(os.fspath(path), group=scheme, consolidated=False, chunks=None)
        done = np.isin(ds["status"].values, (1, 2))
        row = {}
        for name in names:
            v = ds[name].values[done] if name in ds else np.array([])
            row[f"{name}_mean"], row[f"{name}_std"] = _nanstats(v[None]) if v.size else (np.nan, np.nan)
            if name == "mse":
                row["rmse_mean"], row["rmse_std"] = _nanstats(np.sqrt(v)[None]) if v.size else (np.nan, np.nan)
        extra[scheme] = {k: float(np.asarray(v).squeeze()) for k, v in row.items()}
    table = summary.join(pd.DataFrame.from_dict(extra, orient="index"))
    table.attrs.update(summary.attrs)
    return table
