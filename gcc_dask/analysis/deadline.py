"""Latency and accuracy-against-deadline from a pipeline run store (``gcc-dask run``).

**What the store can answer.** For each scheme and batch the store records the cutoff time ``cutoff_s``,
the received set F and, for every received worker, its arrival time ``latency_s`` (the injected latency on
the virtual clock, or the measured one on the wall clock). If the deadline had been ``d`` instead:

* a batch whose cutoff fired at ``cutoff_s ≤ d`` would have been cut the same way: its recorded result
  stands (``complete_frac`` counts these batches);
* a batch cut later would have been decoded at ``d`` from ``F_d = {w ∈ F : latency_s[w] ≤ d}``: every
  worker that had arrived by ``d`` was kept, so ``F_d`` is exact, read from the store.

The store keeps the decoded outputs, not the N worker outputs, so the MSE/RelAcc of decoding ``F_d``
cannot be read back. ``recompute=True`` re-evaluates f offline on the batch's coded inputs (the store's
config names the source, the workload and each scheme's code parameters; everything is deterministic)
and decodes ``F_d`` exactly as the run would have; a consistency check re-decodes the recorded F and
compares it with the stored estimates (``attrs["recompute_max_abs_diff"]``). Without it (``recompute=
False``, or when f cannot be rebuilt) the metrics cover the complete batches only, which estimates the
accuracy of the recorded cutoff rule, not of deadline d: the ``basis`` column says which one a row is.
The curve cannot show gains from waiting *longer* than the run did (late workers were cancelled).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pandas as pd

from gcc_dask import metrics
from gcc_dask.analysis.stores import names_corrupt_chunks
from gcc_dask.composition import BatchLayout
from gcc_dask.errors import GccDaskError, NotEnoughResultsError

__all__ = ["deadline_curve", "deadline_table", "latency_cdf", "latency_table"]

_QUANTILES = (50, 90, 99)


def _open(path: str, scheme: str):
    import xarray as xr

    return xr.open_zarr(path, group=scheme, consolidated=False, chunks=None)


def _attrs(path: str) -> dict[str, Any]:
    from gcc_dask.analysis.stores import root_attrs

    return root_attrs(path)


def _done(ds) -> np.ndarray:
    return ds["status"].values > 0


@names_corrupt_chunks
def latency_cdf(path: str | os.PathLike, *, variable: str = "cutoff_s") -> pd.DataFrame:
    """Empirical CDF per scheme of a run's per-batch (or per-shard) times.

    Parameters
    ----------
    variable : {"cutoff_s", "batch_latency_s", "latency_s"}
        Cutoff time from the batch start, batch start to decode done, or received shards' arrival times.

    Returns
    -------
    pandas.DataFrame
        Columns ``scheme, seconds, cdf`` (``cdf`` = fraction of values ≤ ``seconds``), sorted per scheme.
    """
    path = os.fspath(path)
    rows = []
    for scheme in _attrs(path)["schemes"]:
        ds = _open(path, scheme)
        v = ds[variable].values[_done(ds)] if variable in ds else np.array([])
        v = np.sort(v[np.isfinite(v)].ravel())
        rows.append(pd.DataFrame({"scheme": scheme, "seconds": v, "cdf": np.arange(1, v.size + 1) / max(v.size, 1)}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["scheme", "seconds", "cdf"])


@names_corrupt_chunks
def latency_table(path: str | os.PathLike) -> pd.DataFrame:
    """Per scheme: p50/p90/p99 of the cutoff time, the batch latency and the received shards' latency (s).

    Returns
    -------
    pandas.DataFrame
        Index ``scheme``; columns ``cutoff_p50_s`` ... ``batch_p99_s`` ... ``shard_p99_s``, ``batches``.
    """
    path = os.fspath(path)
    out = {}
    for scheme in _attrs(path)["schemes"]:
        ds = _open(path, scheme)
        done = _done(ds)
        row: dict[str, float] = {"batches": int(done.sum())}
        for short, var in (("cutoff", "cutoff_s"), ("batch", "batch_latency_s"), ("shard", "latency_s")):
            v = ds[var].values[done] if var in ds else np.array([])
            v = v[np.isfinite(v)]
            for q in _QUANTILES:
                row[f"{short}_p{q}_s"] = float(np.percentile(v, q)) if v.size else np.nan
        out[scheme] = row
    df = pd.DataFrame.from_dict(out, orient="index")
    df.index.name = "scheme"
    return df


def _default_deadlines(path: str, n: int = 25) -> np.ndarray:
    vals = []
    for scheme in _attrs(path)["schemes"]:
        ds = _open(path, scheme)
        done = _done(ds)
        vals += [ds["latency_s"].values[done].ravel(), ds["cutoff_s"].values[done]]
    v = np.concatenate(vals) if vals else np.array([])
    v = v[np.isfinite(v)]
    if not v.size:
        return np.array([0.0])
    grid = np.unique(np.concatenate([np.quantile(v, np.linspace(0, 1, n)), [v.max()]]))
    # the curve moves only when a result arrives: where two grid points are far apart (more than 2x; the quantiles
    # skip a sparse tail such as hung workers), add the arrivals between them (at most 8 per gap), so that each
    # step of the curve sits where it really is
    arrivals = np.unique(v)
    extra = []
    for lo, hi in zip(grid[:-1], grid[1:]):
        if hi > 2 * lo:
            inside = arrivals[(arrivals > lo) & (arrivals < hi)]
            if inside.size > 8:
                inside = inside[np.unique(np.linspace(0, inside.size - 1, 8).round().astype(int))]
            extra.append(inside)
    return np.unique(np.concatenate([grid, *extra]))


class _Recomputer:
    """f, the source and the codes of a run, rebuilt from its attrs (for exact re-decoding)."""

    def __init__(self, attrs: dict[str, Any], path: str) -> None:
        from gcc_dask.coding import make_code
        from gcc_dask.sources import make_source
        from gcc_dask.workloads import make_workload

        cfg = attrs["config"]
        src = {k: v for k, v in cfg["source"].items() if v is not None}
        self.source = make_source(src.pop("kind"), **src)
        wl = {k: v for k, v in cfg["workload"].items() if v is not None}
        wl.update(wl.pop("params", None) or {})
        self.f = make_workload(wl.pop("kind"), **wl).load()
        import zarr

        order = np.asarray(zarr.open_group(path, mode="r")["inputs/sample"][:], dtype=np.int64)
        self.layout = BatchLayout(int(attrs["num_samples"]), int(attrs.get("num_inputs", attrs["batch_size"])),
                                  int(attrs.get("block_size", 1)), order)
        self.codes = {}
        for scheme in attrs["schemes"]:
            params = dict(_open(path, scheme).attrs.get("code") or {})
            if not params:
                raise GccDaskError(f"scheme {scheme!r} of {path!r} records no code parameters")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.codes[scheme] = make_code(scheme, **params)
        self._x: dict[int, np.ndarray] = {}

    def outputs(self, scheme: str, batch: int) -> np.ndarray:
        """f on every coded block of `batch` for `scheme`, one call per block as the shards do: (N, G, m)
        float64."""
        if batch not in self._x:
            x, _ = self.source.take(self.layout.samples(batch))
            self._x = {batch: self.layout.to_blocks(x)}  # (K, G, ...), the last group padded as the runtime does
        coded = self.codes[scheme].encode(self._x[batch])
        y = np.stack([np.asarray(self.f(coded[w]), dtype=np.float64) for w in range(coded.shape[0])])
        return y.reshape(y.shape[0], y.shape[1], -1)

    def decode(self, scheme: str, Y: np.ndarray, received: np.ndarray, n_real: int, m: int) -> np.ndarray:
        code = self.codes[scheme]
        if received.size < code.min_received:
            return np.full((n_real, m), np.nan)
        try:
            est = np.asarray(code.decode(Y[received], received), dtype=np.float64)
        except NotEnoughResultsError:
            return np.full((n_real, m), np.nan)
        return BatchLayout.from_blocks(est, n_real).reshape(n_real, m)


@names_corrupt_chunks
def deadline_curve(path: str | os.PathLike, deadlines=None, *, recompute: bool | str = "auto") -> pd.DataFrame:
    """What each deadline would have given: one row per (scheme, deadline) (see the module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        A run store.
    deadlines : array-like of float, optional
        Seconds from the batch start. Default: 25 quantiles of the recorded arrival and cutoff times.
    recompute : bool or "auto"
        Re-evaluate f offline to decode each deadline's received set exactly. ``"auto"``: when the run's
        source and workload can be rebuilt (else fall back to complete batches only).

    Returns
    -------
    pandas.DataFrame
        Columns ``scheme, deadline_s, complete_frac, received_mean, undecodable_frac, mse, rmse,
        rel_acc, accuracy, basis`` (``"all batches, re-decoded"`` or ``"complete batches only"``).
        ``attrs["recompute_max_abs_diff"]``: the consistency check's largest difference, or None.

    Raises
    ------
    StoreError
        If `path` is not a run store.
    """
    path = os.fspath(path)
    attrs = _attrs(path)
    if "schemes" not in attrs:
        from gcc_dask.errors import StoreError

        raise StoreError(f"store path: got {path!r}; expected a run store (gcc-dask run)")
    d_grid = _default_deadlines(path) if deadlines is None else np.sort(np.asarray(deadlines, dtype=np.float64))
    rec = None
    if recompute:
        try:
            rec = _Recomputer(attrs, path)
        except (GccDaskError, OSError, ImportError, KeyError, TypeError):
            if recompute is True:
                raise
    import xarray as xr

    inputs = xr.open_zarr(path, group="inputs", consolidated=False, chunks=None)
    ref = inputs["reference"].values if "reference" in inputs else None
    labels = inputs["labels"].values if "labels" in inputs else None
    k = int(attrs["batch_size"])
    rows, worst = [], 0.0
    for scheme in attrs["schemes"]:
        ds = _open(path, scheme)
        status, cut = ds["status"].values, ds["cutoff_s"].values
        recv, lat, decoded = ds["received"].values, ds["latency_s"].values, ds["decoded"].values
        batches = np.flatnonzero(status > 0)
        m = int(np.prod(decoded.shape[1:]))
        Ys = {}
        for d in d_grid:
            est_all, idx_all, sizes, undecodable = [], [], [], 0
            complete = cut[batches] <= d
            for b in batches:
                lo, hi = b * k, min((b + 1) * k, decoded.shape[0])
                F = np.flatnonzero(recv[b])
                if cut[b] > d:
                    F = F[lat[b, F] <= d]
                sizes.append(F.size)
                if cut[b] <= d:
                    est = decoded[lo:hi].reshape(hi - lo, m).astype(np.float64)
                elif rec is not None:
                    if b not in Ys:
                        Ys[b] = rec.outputs(scheme, b)
                        full = rec.decode(scheme, Ys[b], np.flatnonzero(recv[b]), hi - lo, m)
                        stored = decoded[lo:hi].reshape(hi - lo, m)
                        ok = np.isfinite(full) & np.isfinite(stored)
                        if ok.any():
                            worst = max(worst, float(np.max(np.abs(full[ok] - stored[ok]))))
                    est = rec.decode(scheme, Ys[b], F, hi - lo, m)
                else:
                    continue
                undecodable += not metrics.decodable_rows(est).any()
                est_all.append(est)
                idx_all.append(np.arange(lo, hi))
            row = {"scheme": scheme, "deadline_s": float(d), "complete_frac": float(complete.mean()) if batches.size else np.nan,
                   "received_mean": float(np.mean(sizes)) if sizes else np.nan,
                   "undecodable_frac": undecodable / len(est_all) if est_all else np.nan,
                   "basis": "all batches, re-decoded" if rec is not None else "complete batches only"}
            row.update(_scores(est_all, idx_all, ref, labels, m))
            rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["recompute_max_abs_diff"] = worst if rec is not None else None
    df.attrs["mode"] = "recompute" if rec is not None else "store-only"
    return df


def _scores(est_all: list, idx_all: list, ref, labels, m: int) -> dict[str, float]:
    out = {"mse": np.nan, "rmse": np.nan, "rel_acc": np.nan, "accuracy": np.nan}
    if not est_all:
        return out
    est, idx = np.concatenate(est_all), np.concatenate(idx_all)
    if ref is not None:
        r = ref[idx].reshape(idx.size, m)
        out["mse"] = metrics.mse(est, r)
        out["rmse"] = float(np.sqrt(out["mse"]))
        if m > 1:
            out["rel_acc"] = metrics.rel_acc(est, r)
    if labels is not None and m > 1:
        out["accuracy"] = metrics.accuracy(est, labels[idx])
    return out


def deadline_table(curve: pd.DataFrame, rows: int = 8) -> pd.DataFrame:
    """A few deadlines (rows, evenly spaced through `curve`'s) × schemes: RelAcc, or MSE when f has one output.

    `curve` is a :func:`deadline_curve` table; columns are named ``"rel_acc:<scheme>"`` (or ``"mse:..."``).
    """
    if curve.empty:
        return curve
    metric = "rel_acc" if curve["rel_acc"].notna().any() else "mse"
    d = sorted(curve["deadline_s"].unique())
    keep = [d[i] for i in sorted({round(j * (len(d) - 1) / max(rows - 1, 1)) for j in range(rows)})]
    sub = curve[curve["deadline_s"].isin(keep)]
    out = sub.pivot_table(index="deadline_s", columns="scheme", values=metric, sort=False)
    out.columns = [f"{metric}:{c}" for c in out.columns]
    return out
