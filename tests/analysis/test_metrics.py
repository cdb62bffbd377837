"""Metric aggregation over sweep stores with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from gcc_dask.analysis.metrics import comparison_table, format_pm, sweep_table
from gcc_dask.analysis.stores import open_sweep, store_kind
from gcc_dask.errors import StoreError

from analysis_helpers import synthetic_sweep


def test_sweep_table_means_stds_and_undecodable(tmp_path):
    # trial t has MSE (t + 1)·N⁻²; trial 3 of gcc at N = 80 is undecodable
    def mse(scheme, K, N, s, t):
        if scheme == "gcc" and N == 80 and t == 3:
            return np.nan
        return (t + 1) * N**-2.0

    ds = open_sweep(synthetic_sweep(tmp_path / "s.zarr", mse, N=(40, 80), S=(1,)))
    table = sweep_table(ds).set_index(["scheme", "num_workers"])
    vals = np.arange(1, 5) * 40**-2.0
    assert table.loc[("bacc", 40), "mse_mean"] == pytest.approx(vals.mean())
    assert table.loc[("bacc", 40), "mse_std"] == pytest.approx(vals.std())
    assert table.loc[("bacc", 40), "rmse_mean"] == pytest.approx(np.sqrt(vals).mean())
    assert table.loc[("gcc", 80), "mse_mean"] == pytest.approx((np.arange(1, 4) * 80**-2.0).mean())
    assert table.loc[("gcc", 80), "undecodable_frac"] == pytest.approx(0.25)
    assert table.loc[("gcc", 40), "undecodable_frac"] == 0
    assert table.loc[("gcc", 80), "trials"] == 4


def test_comparison_table_formats_mean_pm_std(tmp_path):
    ds = open_sweep(synthetic_sweep(tmp_path / "c.zarr", lambda sc, K, N, s, t: 4.0 if t % 2 else 16.0,
                                    N=(16,), S=(4,), rel_acc=lambda sc, K, N, s, t: 0.5 + 0.25 * (t % 2)))
    comp = comparison_table(ds)
    row = comp.loc[(10, 16, 12)]  # (K, N, |F| = N - S)
    assert row["rmse:gcc"] == "3.000 ± 1.000"
    assert row["rel_acc:bacc"] == "0.625 ± 0.125"


def test_format_pm():
    assert format_pm(0.5, 0.25) == "0.500 ± 0.250"
    assert format_pm(1.2e-6, 3e-7, sci=True) == "1.20e-06 ± 3.00e-07"
    assert format_pm(float("nan"), 0.0) == "—"


def test_store_kind_and_open_sweep_refuse_other_paths(tmp_path, power_law_store):
    assert store_kind(power_law_store) == "sweep"
    with pytest.raises(StoreError, match="does not exist"):
        store_kind(tmp_path / "missing.zarr")
    import zarr

    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    with pytest.raises(StoreError, match="expected a gcc-dask run, sweep or frontier store"):
        open_sweep(tmp_path / "plain.zarr")
