"""The run page's shard view, from a finished store: each shard of each batch, its latency and its fate.

The live page (docs/dashboard.rst) draws shards by Dask worker and wall-clock time. A store keeps less: per
scheme, batch and *coded* shard n (the store's ``worker`` dimension) the shard's latency from the batch start
(``latency_s``; on the virtual clock the injected latency of the kept shards only), whether the cutoff kept it
(``received``), whether it failed (``failed``), and per batch the cutoff time and the backup copies launched
(``n_backups``). It records neither which Dask worker ran a shard nor when a batch started, so this figure is
by coded shard and batch, not by Dask worker and time.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["plot_shard_view", "shard_outcomes"]

#: what a (batch, shard) cell shows, by code
KEPT, NOT_KEPT, LATE, FAILED, PENDING = 0, 1, 2, 3, 4
_NAMES = {NOT_KEPT: "not kept (cut at the cutoff)", LATE: "arrived after the cutoff", FAILED: "failed (erasure)",
          PENDING: "batch not run"}
_COLORS = {NOT_KEPT: "#d9d9d9", LATE: "#E69F00", FAILED: "#000000", PENDING: "#ffffff"}


def shard_outcomes(ds) -> tuple[np.ndarray, np.ndarray]:
    """``(outcome, latency)``, each (batch, shard): the outcome codes (:data:`KEPT` ...) and the latency (s) of
    the kept shards (NaN elsewhere), from one scheme's dataset (``xr.open_zarr(path, group=scheme)``)."""
    received = ds["received"].values.astype(bool)
    failed = ds["failed"].values.astype(bool) if "failed" in ds else np.zeros_like(received)
    latency = ds["latency_s"].values.astype(float)
    status = ds["status"].values
    out = np.full(received.shape, NOT_KEPT, dtype=np.int8)
    out[~received & np.isfinite(latency)] = LATE
    out[received] = KEPT
    out[failed] = FAILED
    out[status == 0] = PENDING
    return out, np.where(out == KEPT, latency, np.nan)


def plot_shard_view(path: str | os.PathLike, max_batches: int = 200):
    """One panel per scheme: batches across, coded shards up; a kept shard coloured by its latency, the others by
    their fate (not kept, late, failed); a triangle over each batch that launched backup copies. The first
    `max_batches` batches are drawn."""
    import xarray as xr
    from matplotlib.colors import ListedColormap

    from gcc_dask.analysis.plots import _figure, _labels, _run_name
    from gcc_dask.analysis.stores import root_attrs

    path = os.fspath(path)
    schemes = list(root_attrs(path)["schemes"])
    fig, axes = _figure(len(schemes))
    fates = ListedColormap([_COLORS[c] for c in (NOT_KEPT, LATE, FAILED, PENDING)])
    for ax, scheme in zip(axes, schemes):
        ds = xr.open_zarr(path, group=scheme, consolidated=False, chunks=None).isel(
            batch=slice(0, max_batches))
        outcome, latency = shard_outcomes(ds)
        nb, nw = outcome.shape
        extent = (-0.5, nb - 0.5, -0.5, nw - 0.5)
        other = np.ma.masked_where(outcome == KEPT, outcome - 1)
        ax.imshow(other.T, cmap=fates, vmin=0, vmax=3, origin="lower", aspect="auto", extent=extent,
                  interpolation="nearest")
        im = ax.imshow(np.ma.masked_invalid(latency).T, cmap="viridis", origin="lower", aspect="auto",
                       extent=extent, interpolation="nearest")
        fig.colorbar(im, ax=ax, label="latency of a kept shard (s)", shrink=0.85)
        backups = ds["n_backups"].values if "n_backups" in ds else np.zeros(nb)
        marked = np.flatnonzero(backups > 0)
        if marked.size:
            ax.scatter(marked, np.full(marked.size, nw - 0.5), marker="v", s=28, color="#CC79A7",
                       edgecolor="black", linewidth=0.5, clip_on=False, zorder=3, label="backup copies launched")
        for code in (NOT_KEPT, LATE, FAILED):
            if (outcome == code).any():
                ax.scatter([], [], marker="s", s=40, color=_COLORS[code], edgecolor="#777777", label=_NAMES[code])
        _labels(ax, f"{scheme} (N = {nw})", "batch", "coded shard n")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.suptitle(f"Shards by batch: {_run_name(path)}", fontsize=13)
    return fig
