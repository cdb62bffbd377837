"""The figures: axes from the plotted data's limits, legends off the curves, identical curves drawn once, steps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import synthetic_sweep

from gcc_dask.analysis import plots
from gcc_dask.analysis.deadline import deadline_curve
from gcc_dask.analysis.stores import open_sweep
from gcc_dask.store import RunStore


def _mse(scheme, K, N, s, t):
    """gcc: a power law; replication: exactly 0 (all copies in) except at the smallest N; lcc: exact everywhere."""
    if scheme == "gcc":
        return 0.5 * s**3 * N**-3.0 * (1 + 0.1 * t)
    if scheme == "replication":
        return 2.0 if N == 40 else 0.0
    return 1e-31


@pytest.fixture
def sweep_with_zeros(tmp_path):
    return open_sweep(synthetic_sweep(tmp_path / "z.zarr", _mse, schemes=("gcc", "replication", "lcc")))


def _drawn(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # lay the figure out, legends included, as saving it does
    return fig


def test_exact_zeros_do_not_stretch_the_log_axis(sweep_with_zeros):
    fig = _drawn(plots.plot_mse_vs_n(sweep_with_zeros, n_boot=50))
    for ax in fig.axes[:2]:
        lo, hi = ax.get_ylim()
        positive = [v for line in ax.get_lines() for v in np.asarray(line.get_ydata(), float) if v > 0]
        assert lo >= min(positive) / 2 and hi <= max(positive) * 2  # the drawn data's range, padded
        assert lo > 1e-12  # not 1e-315 from replication's zeros nor 1e-31 from lcc's rounding
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.startswith("replication (") and "MSE < 1e-20 at N = 80, 160, 320" in t for t in labels)
        assert "lcc (exact: MSE < 1e-20, not drawn)" in labels


def test_mse_vs_s_axis_from_positive_values(sweep_with_zeros):
    fig = _drawn(plots.plot_mse_vs_s(sweep_with_zeros))
    for ax in fig.axes[:3]:
        assert ax.get_ylim()[0] > 1e-12


def test_legends_sit_below_the_panels(sweep_with_zeros):
    fig = _drawn(plots.plot_mse_vs_n(sweep_with_zeros, n_boot=50))
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:2]:
        legend = ax.get_legend().get_window_extent(renderer)
        axes = ax.get_window_extent(renderer)
        assert legend.y1 < axes.y0  # wholly below the axes: it covers no curve
    width, height = fig.get_size_inches()
    assert height > plots._PANEL[1]  # the figure grew to hold the legends, the axes kept their size


def test_identical_curves_are_drawn_once_with_every_name():
    curve = pd.DataFrame({
        "scheme": ["gcc"] * 3 + ["bacc"] * 3 + ["uncoded"] * 3,
        "deadline_s": [0.02, 0.04, 1.0] * 3,
        "rel_acc": [0.5, 0.99, 0.99, 0.6, 0.98, 0.98, 0.1, 0.8, 1.0],
        "received_mean": [6, 12, 12, 6, 12, 12, 2, 7, 8],
        "basis": ["all batches, re-decoded"] * 9,
    })
    fig = _drawn(plots.plot_deadline(curve))
    right = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert right == ["gcc = bacc (the same)", "uncoded"]
    left = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert left == ["gcc", "bacc", "uncoded"]
    uncoded = [line for line in fig.axes[0].get_lines() if line.get_label() == "uncoded"][0]
    assert uncoded.get_drawstyle() == "steps-post"  # flat until the next result, not a straight ramp
    assert uncoded.get_color() == [line for line in fig.axes[1].get_lines()
                                   if line.get_label() == "uncoded"][0].get_color()  # one colour per scheme


def _two_scheme_run(path):
    """gcc and bacc with the same latencies (cutoff at 0.03 s), uncoded waiting for a hang until 1.0 s."""
    store = RunStore.create(path, config_resolved={"name": "two"}, fingerprint="x",
                            schemes={"gcc": 4, "bacc": 4, "uncoded": 2}, num_samples=4, batch_size=2,
                            output_shape=(1,), has_labels=False, has_reference=True, seed=0, dtype="float64")
    for b in range(2):
        ref = np.arange(2.0 * b, 2.0 * b + 2)[:, None]
        store.write_inputs(b, reference=ref)
        for scheme in ("gcc", "bacc"):
            store.write_batch(scheme, b, decoded=ref, received_mask=np.array([1, 1, 1, 0], bool),
                              latency_s=np.array([0.01, 0.02, 0.03, math.nan]), cutoff_s=0.03, status=1)
        store.write_batch("uncoded", b, decoded=ref, received_mask=np.array([1, 1], bool),
                          latency_s=np.array([0.02, 0.99 + 0.005 * b]), cutoff_s=0.99 + 0.005 * b, status=1)
    store.finish()
    return path


def test_deadline_grid_has_the_steps_of_a_sparse_tail(tmp_path):
    path = _two_scheme_run(tmp_path / "run.zarr")
    curve = deadline_curve(path, recompute=False)
    grid = np.unique(curve["deadline_s"])
    assert 0.99 in grid.round(6)  # the first hung result's arrival is a grid point: the step is where it is
    uncoded = curve[curve["scheme"] == "uncoded"].set_index("deadline_s")["received_mean"]
    assert uncoded.loc[grid[(grid > 0.03) & (grid < 0.99)]].eq(1.0).all()  # flat until the hang arrives


def test_identical_latency_cdfs_are_one_curve(tmp_path):
    path = _two_scheme_run(tmp_path / "run.zarr")
    fig = _drawn(plots.plot_latency_cdf(path))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["gcc = bacc (the same)", "uncoded"]
