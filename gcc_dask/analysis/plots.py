"""Figures for sweep and run stores (matplotlib, no pyplot: Agg when saved, inline in Jupyter).

Every function returns a :class:`matplotlib.figure.Figure` (shown inline by Jupyter when it is a cell's
value; written with :func:`save`). Axis labels carry units: N in workers, times in seconds, MSE in the
squared units of f's output.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from gcc_dask.analysis.metrics import straggler_dim
from gcc_dask.analysis.rates import fit_rate, reference_bernoulli, reference_worst_case

__all__ = ["plot_deadline", "plot_latency_cdf", "plot_metric_vs_n", "plot_mse_vs_n", "plot_mse_vs_s", "save"]

_PANEL = (4.0, 3.2)
_MARKERS = "osD^v<>ph*"
_STYLES = ("-", "--", "-.", ":")
_MSE_LABEL = "MSE (mean over trials, output units²)"


def _figure(ncols: int, nrows: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_PANEL[0] * ncols, _PANEL[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes.ravel()


def save(fig, path: str | os.PathLike, *, dpi: int = 90) -> Path:
    """Write `fig` as a PNG (small: ~90 dpi) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path


def _sval(sdim: str, s) -> str:
    return f"S = {int(s)}" if sdim == "S" else f"p = {float(s):g}"


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _n_ticks(ax, N) -> None:
    """Label the x axis at the grid's N values (plain integers, also on log axes)."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xticks([int(n) for n in N], [str(int(n)) for n in N])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _done_mse(ds) -> np.ndarray:
    return np.where((ds["status"].values == 1)[..., None], ds["mse"].values, np.nan)


def _nanmean(a, axis=-1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis=axis)


def _k_index(ds, num_inputs) -> int:
    K = list(ds["num_inputs"].values)
    if num_inputs is None:
        return 0
    if num_inputs not in K:
        raise ValueError(f"num_inputs: got {num_inputs!r}; expected one of {K}")
    return K.index(num_inputs)


def plot_mse_vs_n(ds, *, num_inputs: int | None = None, references: bool = True, n_boot: int = 1000):
    """MSE against N on log-log axes: one panel per S (or p), one line per scheme, fitted slope in the legend.

    The dashed grey line has the shape of the GCC bound, ``S³N⁻³`` (fixed-count stragglers) or
    ``log³_{1/p}(N)·N⁻³`` (independent straggling), through the first scheme's MSE at the smallest N
    (arXiv:2608.28910); the shaded band spans the 25th–75th percentile over trials.
    """
    ds = ds.load()
    sdim, a = straggler_dim(ds), _k_index(ds, num_inputs)
    N, svals, mse = ds["num_workers"].values, ds[sdim].values, _done_mse(ds)
    fig, axes = _figure(len(svals))
    for c, (ax, s) in enumerate(zip(axes, svals)):
        anchor = None
        for i, scheme in enumerate(ds["scheme"].values):
            m = mse[i, a, :, c, :]
            ran = np.isfinite(m).any(axis=1)
            if not ran.any():
                continue
            mean = _nanmean(m[ran])
            fit = fit_rate(N[ran], m[ran], n_boot=n_boot)
            line = ax.loglog(N[ran], mean, marker=_MARKERS[i % len(_MARKERS)], label=f"{scheme} ({fit.label()})")[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, hi = np.nanpercentile(m[ran], [25, 75], axis=1)
            ax.fill_between(N[ran], np.maximum(lo, 1e-300), np.maximum(hi, 1e-300), color=line.get_color(), alpha=0.15)
            if anchor is None and np.isfinite(mean[0]) and mean[0] > 0:
                anchor = (float(N[ran][0]), float(mean[0]))
        if references and anchor is not None:
            grid = np.geomspace(N.min(), N.max(), 50)
            if sdim == "S":
                ref, lab = reference_worst_case(grid, int(s), anchor=anchor), "∝ S³N⁻³ (bound)"
            elif 0 < s < 1:
                ref, lab = reference_bernoulli(grid, float(s), anchor=anchor), "∝ log³₁/ₚ(N)·N⁻³ (bound)"
            else:
                ref = None
            if ref is not None:
                ax.loglog(grid, ref, "--", color="0.5", lw=1, label=lab)
        ax.set_title(f"{_sval(sdim, s)}, K = {int(ds['num_inputs'].values[a])}")
        _n_ticks(ax, N)
        ax.set_xlabel("number of workers N")
        ax.set_ylabel(_MSE_LABEL)
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
    fig.suptitle(f"MSE vs N — {ds.attrs.get('function', '')}", fontsize=9)
    return fig


def plot_mse_vs_s(ds, *, num_inputs: int | None = None, num_workers=None):
    """MSE against S (or p) at fixed N: one panel per N (default: smallest, middle, largest), line per scheme."""
    ds = ds.load()
    sdim, a = straggler_dim(ds), _k_index(ds, num_inputs)
    N = list(ds["num_workers"].values)
    if num_workers is None:
        picks = sorted({N[0], N[len(N) // 2], N[-1]})
    else:
        picks = [num_workers] if np.isscalar(num_workers) else list(num_workers)
    mse = _done_mse(ds)
    svals = ds[sdim].values
    fig, axes = _figure(len(picks))
    for ax, n in zip(axes, picks):
        b = N.index(n)
        for i, scheme in enumerate(ds["scheme"].values):
            mean = _nanmean(mse[i, a, b])
            if np.isfinite(mean).any():
                ax.semilogy(svals, mean, marker=_MARKERS[i % len(_MARKERS)], label=str(scheme))
        ax.set_title(f"N = {n}, K = {int(ds['num_inputs'].values[a])}")
        ax.set_xticks([v.item() for v in svals])
        ax.set_xlabel("stragglers S (workers)" if sdim == "S" else "straggling probability p")
        ax.set_ylabel(_MSE_LABEL)
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
    return fig


def plot_metric_vs_n(ds, metric: str = "rel_acc", *, num_inputs: int | None = None):
    """A fraction-valued metric (``rel_acc`` or ``accuracy``) against N, one line per scheme.

    Points are means over trials, error bars the standard error of the mean (std / √trials); schemes are
    offset slightly along N so that the bars stay readable.
    """
    ds = ds.load()
    sdim, a = straggler_dim(ds), _k_index(ds, num_inputs)
    if metric not in ds:
        raise ValueError(f"metric: got {metric!r}; expected one of the store's variables {list(ds.data_vars)}")
    vals = np.where((ds["status"].values == 1)[..., None], ds[metric].values, np.nan)
    N, svals = ds["num_workers"].values, ds[sdim].values
    fig, axes = _figure(len(svals))
    n_s = ds.sizes["scheme"]
    for c, (ax, s) in enumerate(zip(axes, svals)):
        for i, scheme in enumerate(ds["scheme"].values):
            v = vals[i, a, :, c, :]
            ran = np.isfinite(v).any(axis=1)
            if ran.any():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    count = np.isfinite(v[ran]).sum(1)
                    sem = np.nanstd(v[ran], 1) / np.sqrt(np.maximum(count, 1))
                    shift = 1 + 0.006 * (i - (n_s - 1) / 2)
                    ax.errorbar(N[ran] * shift, np.nanmean(v[ran], 1), yerr=sem, capsize=2,
                                marker=_MARKERS[i % len(_MARKERS)], ls=_STYLES[i % len(_STYLES)], label=str(scheme))
        ax.set_title(f"{_sval(sdim, s)}, K = {int(ds['num_inputs'].values[a])} (bars: s.e.m.)")
        _n_ticks(ax, N)
        ax.set_xlabel("number of workers N")
        ax.set_ylabel({"rel_acc": "RelAcc (fraction with argmax = f's)",
                       "accuracy": "accuracy (fraction with argmax = label)"}.get(metric, metric))
        ax.grid(True, alpha=0.3)
        _legend(ax)
    return fig


def plot_latency_cdf(path: str | os.PathLike):
    """CDFs per scheme of a run store's cutoff time and batch latency (seconds from the batch start)."""
    from gcc_dask.analysis.deadline import latency_cdf

    fig, axes = _figure(2)
    for ax, var, title in zip(axes, ("cutoff_s", "batch_latency_s"),
                              ("cutoff", "decoded and written")):
        cdf = latency_cdf(path, variable=var)
        for i, (scheme, sub) in enumerate(cdf.groupby("scheme", sort=False)):
            if len(sub):
                x = np.concatenate([sub["seconds"].values[:1], sub["seconds"].values])
                y = np.concatenate([[0.0], sub["cdf"].values])
                ax.step(x, y, where="post", ls=_STYLES[i % len(_STYLES)], label=str(scheme))
        ax.set_xscale("log")
        ax.set_xlabel(f"batch start → {title} (s)")
        ax.set_ylabel("fraction of batches")
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
    return fig


def plot_deadline(curve):
    """Accuracy against deadline (from :func:`gcc_dask.analysis.deadline.deadline_curve`).

    Left: RelAcc (or MSE when f has one output) per scheme; right: the mean number of results available
    at the deadline. The x axis is the deadline in seconds from the batch start.
    """
    fig, axes = _figure(2)
    use_rel = "rel_acc" in curve and curve["rel_acc"].notna().any()
    for i, (scheme, sub) in enumerate(curve.groupby("scheme", sort=False)):
        style = {"marker": ".", "ls": _STYLES[i % len(_STYLES)], "label": str(scheme)}
        if use_rel:
            axes[0].plot(sub["deadline_s"], sub["rel_acc"], **style)
        else:
            axes[0].semilogy(sub["deadline_s"], sub["mse"], **style)
        axes[1].plot(sub["deadline_s"], sub["received_mean"], **style)
    basis = curve["basis"].iloc[0] if len(curve) else ""
    axes[0].set_ylabel("RelAcc (fraction with argmax = f's)" if use_rel else "MSE (output units²)")
    axes[0].set_title(f"accuracy if the deadline were d ({basis})", fontsize=8)
    axes[1].set_ylabel("results available at d (workers, mean)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("deadline d (s from batch start)")
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
    return fig
