"""Figures for sweep and run stores (matplotlib, no pyplot: Agg when saved, inline in Jupyter).

Every function returns a :class:`matplotlib.figure.Figure` (show it in Jupyter with
``IPython.display.display(fig)``; write it with :func:`save`, 150 dpi). The figures are sized for a report
read at a glance: panels of 5 × 4.4 inches (a two-panel figure is 10 inches wide), a title on every panel,
axis labels with units (N in workers, times in seconds, MSE in the squared units of f's output), legends
and tick labels at 9–10 pt, and tick locators whose labels cannot run into each other (plain-number
labels at 1, 2, 5 × 10^k on time axes, a linear axis when the data span less than a factor of 4).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from gcc_dask.analysis.metrics import straggler_dim
from gcc_dask.analysis.rates import EXACT_MSE, fit_rate, reference_bernoulli, reference_worst_case

__all__ = ["plot_deadline", "plot_latency_cdf", "plot_metric_vs_n", "plot_mse_vs_n", "plot_mse_vs_s", "save"]

_PANEL = (5.0, 4.4)  # inches per panel
_MIN_WIDTH = 7.0  # a one-panel figure is not narrower than this
_MARKERS = "osD^v<>ph*"
_STYLES = ("-", "--", "-.", ":")
_MSE_LABEL = "MSE (mean over trials, output units²)"
#: font sizes in points
_TITLE, _SUPTITLE, _LABEL, _TICKS, _LEGEND = 11.5, 13, 11, 10, 9


def _figure(panels: int):
    """A figure of `panels` panels, at most 3 per row (4 as 2 × 2); unused axes of the last row are hidden."""
    from matplotlib.figure import Figure

    ncols = panels if panels <= 3 else 2 if panels == 4 else 3
    nrows = -(-panels // ncols)
    width = max(_PANEL[0] * ncols, _MIN_WIDTH)
    fig = Figure(figsize=(width, _PANEL[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax in axes:
        ax.tick_params(labelsize=_TICKS)  # also applies to ticks created later, at draw time
    return fig, axes[:panels]


def _labels(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=_TITLE)
    ax.set_xlabel(xlabel, fontsize=_LABEL)
    ax.set_ylabel(ylabel, fontsize=_LABEL)


def save(fig, path: str | os.PathLike, *, dpi: int = 150) -> Path:
    """Write `fig` as a PNG (150 dpi: a two-panel figure is 1500 pixels wide) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path


def _sval(sdim: str, s) -> str:
    return f"S = {int(s)}" if sdim == "S" else f"p = {float(s):g}"


def _legend(ax, loc: str = "best") -> None:
    """The panel's legend below its axes, where it cannot cover a curve (one column, or two for short
    labels); the figure grows to keep the axes their size (:func:`_make_room`)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    ncol = 2 if len(labels) > 1 and max(len(t) for t in labels) <= 28 else 1
    ax.legend(handles, labels, fontsize=_LEGEND, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol,
              frameon=False, borderaxespad=0.0)
    ax._gcc_legend_rows = -(-len(labels) // ncol)  # read by _make_room


def _make_room(fig) -> None:
    """Grow the figure by the height of the tallest row of legends below the panels (0.19 in a line)."""
    rows = max((getattr(ax, "_gcc_legend_rows", 0) for ax in fig.axes), default=0)
    if rows:
        w, h = fig.get_size_inches()
        nrows = max(1, round(h / _PANEL[1]))
        fig.set_size_inches(w, h + nrows * (0.35 + 0.19 * rows))


def _log_limits(ax, values, pad: float = 1.6) -> tuple[float, float] | None:
    """Set a log y axis to the finite positive `values` (padded by a factor `pad`): an exact zero, which a
    log axis cannot show, never stretches it (matplotlib would clip it to ~1e-300). Returns the limits."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    if not v.size:
        return None
    lo, hi = float(v.min()) / pad, float(v.max()) * pad
    ax.set_ylim(lo, hi)
    return lo, hi


def _same_curves(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[tuple[list[str], np.ndarray, np.ndarray]]:
    """Group the curves ``{label: (x, y)}`` that are identical (the same x and, to 1e-12 relative, the same y),
    in first-seen order: drawn once, labelled with every name, instead of one hiding the others."""
    groups: list[tuple[list[str], np.ndarray, np.ndarray]] = []
    for name, (x, y) in curves.items():
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        for names, gx, gy in groups:
            if gx.shape == x.shape and np.array_equal(gx, x, equal_nan=True) and \
                    np.allclose(gy, y, rtol=1e-12, atol=0, equal_nan=True):
                names.append(name)
                break
        else:
            groups.append(([name], x, y))
    return groups


def _group_label(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{' = '.join(names)} (the same)"


def _seconds_axis(ax, values, axis: str = "x") -> None:
    """A time axis whose tick labels cannot collide: plain numbers at 1, 2, (3,) 5 × 10^k on a log scale,
    fewer per decade the more decades the data span, or a linear scale with at most 6 ticks when the data
    span less than 4×."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    which = ax.xaxis if axis == "x" else ax.yaxis
    set_scale = ax.set_xscale if axis == "x" else ax.set_yscale
    plain = FuncFormatter(lambda x, _pos: f"{x:g}")
    if v.size == 0 or v.max() / v.min() < 4:
        set_scale("linear")
        which.set_major_locator(MaxNLocator(nbins=6, min_n_ticks=3))
        return
    set_scale("log")
    decades = np.log10(v.max() / v.min())
    # at most ~8 labels of at most 6 characters over a 5-inch panel
    subs = (1.0, 2.0, 3.0, 5.0) if decades <= 1.2 else (1.0, 2.0, 5.0) if decades <= 2.5 else \
        (1.0, 3.0) if decades <= 4 else (1.0,)
    which.set_major_locator(LogLocator(base=10, subs=subs, numticks=10))
    which.set_major_formatter(plain)
    which.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10) * 1.0, numticks=10))
    which.set_minor_formatter(NullFormatter())


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


def _below_exact(N, mean) -> str:
    """The part of a legend label that says where a scheme's mean MSE is below EXACT_MSE (not drawn)."""
    exact = np.isfinite(mean) & (mean < EXACT_MSE)
    if not exact.any():
        return ""
    where = ", ".join(str(int(n)) for n in np.asarray(N)[exact])
    return f"; MSE < {EXACT_MSE:g} at N = {where}"


def plot_mse_vs_n(ds, *, num_inputs: int | None = None, references: bool = True, n_boot: int = 1000):
    """MSE against N on log-log axes: one panel per S (or p), one line per scheme, fitted slope in the legend.

    The dashed grey line has the shape of the GCC bound, ``S³N⁻³`` (fixed-count stragglers) or
    ``log³_{1/p}(N)·N⁻³`` (independent straggling), through the first inexact scheme's MSE at its smallest
    N (arXiv:2608.28910); the shaded band spans the 25th–75th percentile over trials. The y axis spans the
    plotted means and bands: a mean below ``EXACT_MSE`` (replication and LCC are exact when their results
    arrive: MSE 0) is not drawn, and the legend says at which N; the legends sit below the panels.
    """
    ds = ds.load()
    sdim, a = straggler_dim(ds), _k_index(ds, num_inputs)
    N, svals, mse = ds["num_workers"].values, ds[sdim].values, _done_mse(ds)
    fig, axes = _figure(len(svals))
    for c, (ax, s) in enumerate(zip(axes, svals)):
        anchor, shown, bands = None, [], []
        for i, scheme in enumerate(ds["scheme"].values):
            m = mse[i, a, :, c, :]
            ran = np.isfinite(m).any(axis=1)
            if not ran.any():
                continue
            mean = _nanmean(m[ran])
            if np.nanmax(mean) < EXACT_MSE:  # exact to rounding (LCC on a polynomial): no rate to fit
                label = f"{scheme} (exact: MSE < {EXACT_MSE:g}, not drawn)"
            else:
                label = f"{scheme} ({fit_rate(N[ran], m[ran], n_boot=n_boot).label()}{_below_exact(N[ran], mean)})"
            drawn = np.where(mean >= EXACT_MSE, mean, np.nan)
            line = ax.plot(N[ran], drawn, marker=_MARKERS[i % len(_MARKERS)], ls=_STYLES[i % len(_STYLES)],
                           label=label)[0]
            shown.append(drawn)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, hi = np.nanpercentile(m[ran], [25, 75], axis=1)
            keep = np.isfinite(drawn)
            if keep.sum() >= 2:  # a band of one point would be a vertical line
                bands.append((N[ran], lo, hi, keep, line.get_color()))
            if anchor is None and np.isfinite(mean[0]) and mean[0] > EXACT_MSE:  # not an exact scheme's rounding
                anchor = (float(N[ran][0]), float(mean[0]))
        ax.set_xscale("log")
        ax.set_yscale("log")
        band_values = [v for n, lo, hi, keep, _ in bands for v in (lo[keep], hi[keep])]
        limits = _log_limits(ax, np.concatenate([*shown, *band_values]) if shown else [])
        for n, lo, hi, keep, color in bands:  # clipped to the axis: a 25th percentile of 0 is the axis bottom
            bottom = limits[0] if limits else EXACT_MSE
            ax.fill_between(n, np.maximum(np.where(keep, lo, np.nan), bottom), np.maximum(np.where(keep, hi, np.nan),
                            bottom), color=color, alpha=0.15)
        if references and anchor is not None:
            grid = np.geomspace(N.min(), N.max(), 50)
            if sdim == "S":
                ref, lab = reference_worst_case(grid, int(s), anchor=anchor), "∝ S³N⁻³ (bound)"
            elif 0 < s < 1:
                ref, lab = reference_bernoulli(grid, float(s), anchor=anchor), "∝ log³₁/ₚ(N)·N⁻³ (bound)"
            else:
                ref = None
            if ref is not None:
                ax.plot(grid, ref, "--", color="0.5", lw=1, label=lab)
                if limits:  # the reference keeps to the data's range
                    ax.set_ylim(*limits)
        _labels(ax, f"{_sval(sdim, s)}, K = {int(ds['num_inputs'].values[a])}", "number of workers N",
                _MSE_LABEL)
        _n_ticks(ax, N)
        few_decades = limits is not None and limits[1] / limits[0] <= 1e3
        ax.grid(True, which="both" if few_decades else "major", alpha=0.3)  # minor lines crowd many decades
        _legend(ax)
    _make_room(fig)
    fig.suptitle(f"MSE against N: {ds.attrs.get('function', '')}", fontsize=_SUPTITLE)
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
        shown = []
        for i, scheme in enumerate(ds["scheme"].values):
            mean = _nanmean(mse[i, a, b])
            if np.isfinite(mean).any():
                exact = np.isfinite(mean) & (mean < EXACT_MSE)
                where = ", ".join(f"{v:g}" for v in np.asarray(svals, dtype=float)[exact])
                note = "" if not exact.any() else f" (MSE < {EXACT_MSE:g} at {sdim} = {where}, not drawn)"
                drawn = np.where(mean >= EXACT_MSE, mean, np.nan)
                ax.plot(svals, drawn, marker=_MARKERS[i % len(_MARKERS)], ls=_STYLES[i % len(_STYLES)],
                        label=f"{scheme}{note}")
                shown.append(drawn)
        ax.set_yscale("log")
        _log_limits(ax, np.concatenate(shown) if shown else [])
        _labels(ax, f"N = {n}, K = {int(ds['num_inputs'].values[a])}",
                "stragglers S (workers)" if sdim == "S" else "straggling probability p", _MSE_LABEL)
        ax.set_xticks([v.item() for v in svals])
        ax.grid(True, which="major", alpha=0.3)  # minor log gridlines crowd a panel spanning many decades
        _legend(ax)
    _make_room(fig)
    what = "stragglers S" if sdim == "S" else "straggling probability p"
    fig.suptitle(f"MSE against {what}: {ds.attrs.get('function', '')}", fontsize=_SUPTITLE)
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
        _labels(ax, f"{_sval(sdim, s)}, K = {int(ds['num_inputs'].values[a])} (bars: s.e.m.)",
                "number of workers N",
                {"rel_acc": "RelAcc (fraction with argmax = f's)",
                 "accuracy": "accuracy (fraction with argmax = label)"}.get(metric, metric))
        _n_ticks(ax, N)
        ax.grid(True, alpha=0.3)
        _legend(ax)
    _make_room(fig)
    name = {"rel_acc": "RelAcc", "accuracy": "Accuracy"}.get(metric, metric)
    fig.suptitle(f"{name} against N: {ds.attrs.get('function', '')}", fontsize=_SUPTITLE)
    return fig


def plot_latency_cdf(path: str | os.PathLike):
    """CDFs per scheme of a run store's cutoff time and batch latency (seconds from the batch start).

    Schemes whose CDFs are identical (every scheme that stops at the same cutoff on the same latency draws) are
    drawn once, labelled with every name, instead of one curve hiding the others."""
    from gcc_dask.analysis.deadline import latency_cdf

    fig, axes = _figure(2)
    panels = (("cutoff_s", "When the cutoff fired", "cutoff time (s after the batch start)"),
              ("batch_latency_s", "When the batch was decoded", "batch latency (s, submission to decode written)"))
    for ax, (var, title, xlabel) in zip(axes, panels):
        cdf = latency_cdf(path, variable=var)
        curves = {}
        for scheme, sub in cdf.groupby("scheme", sort=False):
            if len(sub):
                curves[str(scheme)] = (np.concatenate([sub["seconds"].values[:1], sub["seconds"].values]),
                                       np.concatenate([[0.0], sub["cdf"].values]))
        # schemes that stop at the same cutoff on the same latency draws have the same CDF: one curve, all names
        order = list(curves)
        for names, x, y in _same_curves(curves):
            i = order.index(names[0])  # a scheme keeps its colour and style in every panel
            ax.step(x, y, where="post", color=f"C{i}", ls=_STYLES[i % len(_STYLES)], lw=1.8,
                    label=_group_label(names))
        _seconds_axis(ax, cdf["seconds"].values)
        _labels(ax, title, xlabel, "fraction of batches (CDF)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
    _make_room(fig)
    fig.suptitle(f"Latency per batch: {_run_name(path)}", fontsize=_SUPTITLE)
    return fig


def _run_name(path) -> str:
    from gcc_dask.analysis.stores import root_attrs

    try:
        attrs = root_attrs(path)
    except Exception:  # a figure without a name is still a figure
        return Path(os.fspath(path)).name
    name = (attrs.get("config") or {}).get("name") or Path(os.fspath(path)).name
    k = attrs.get("num_inputs", attrs.get("batch_size", "?"))
    return (f"{name} ({attrs.get('num_batches', '?')} batches of {attrs.get('batch_size', '?')} samples, "
            f"K = {k}, B = {attrs.get('block_size', 1)})")


def plot_deadline(curve):
    """Accuracy against deadline (from :func:`gcc_dask.analysis.deadline.deadline_curve`).

    Left: RelAcc (or MSE when f has one output) per scheme; right: the mean number of results available
    at the deadline. The x axis is the deadline in seconds from the batch start. Drawn as steps (a value holds
    until the next grid point: the curve moves only when a result arrives); schemes with identical curves are
    drawn once, labelled with every name.
    """
    fig, axes = _figure(2)
    use_rel = "rel_acc" in curve and curve["rel_acc"].notna().any()
    metric = "rel_acc" if use_rel else "mse"
    for ax, column in ((axes[0], metric), (axes[1], "received_mean")):
        curves = {str(scheme): (sub["deadline_s"].values, sub[column].values)
                  for scheme, sub in curve.groupby("scheme", sort=False)}
        order = list(curves)
        for names, x, y in _same_curves(curves):
            i = order.index(names[0])  # a scheme keeps its colour and style in both panels
            # a step: the metric changes only when a result arrives, and the grid has a point at each jump
            ax.plot(x, y, color=f"C{i}", marker=_MARKERS[i % len(_MARKERS)], ms=4, ls=_STYLES[i % len(_STYLES)],
                    lw=1.6, drawstyle="steps-post", label=_group_label(names))
    if not use_rel:
        axes[0].set_yscale("log")
        _log_limits(axes[0], curve["mse"].values if len(curve) else [])
    basis = curve["basis"].iloc[0] if len(curve) else ""
    xlabel = "deadline d (s after the batch start)"
    _labels(axes[0], "RelAcc if the deadline were d" if use_rel else "MSE if the deadline were d", xlabel,
            "RelAcc (fraction with argmax = f's)" if use_rel else "MSE (output units²)")
    _labels(axes[1], "Results in by the deadline", xlabel, "results available at d (workers, mean)")
    for ax in axes:
        _seconds_axis(ax, curve["deadline_s"].values if len(curve) else [])
        ax.grid(True, which="both", alpha=0.3)
    _legend(axes[0])
    _legend(axes[1])
    _make_room(fig)
    fig.suptitle(f"Accuracy against deadline ({basis})" if basis else "Accuracy against deadline",
                 fontsize=_SUPTITLE)
    return fig
