"""Fixtures of the analysis tests: synthetic stores with known answers."""

from __future__ import annotations

import pytest
from analysis_helpers import synthetic_sweep


@pytest.fixture
def power_law_store(tmp_path):
    """MSE exactly 0.5·S³·N⁻³ for gcc and 2·N⁻¹ for bacc, in every trial."""

    def mse(scheme, K, N, s, t):
        return 0.5 * s**3 * N**-3.0 if scheme == "gcc" else 2.0 / N

    return synthetic_sweep(tmp_path / "power.zarr", mse)
