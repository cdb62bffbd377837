"""The report's shard view (gcc_dask.analysis.shard_view): each (batch, shard)'s fate, read from a store's arrays."""

from __future__ import annotations

import numpy as np
import xarray as xr

from gcc_dask.analysis.shard_view import FAILED, KEPT, LATE, NOT_KEPT, PENDING, shard_outcomes


def test_shard_outcomes_from_a_schemes_arrays():
    nan = np.nan
    ds = xr.Dataset({
        "received": (("batch", "worker"), [[True, False, False, True], [True, True, False, False],
                                           [False] * 4]),
        "failed": (("batch", "worker"), [[False, False, True, False], [False] * 4, [False] * 4]),
        "latency_s": (("batch", "worker"), [[0.1, nan, nan, 0.2], [0.3, 0.1, 0.9, nan], [nan] * 4]),
        "status": (("batch",), [1, 2, 0]),
    })
    outcome, latency = shard_outcomes(ds)
    assert outcome.tolist() == [[KEPT, NOT_KEPT, FAILED, KEPT], [KEPT, KEPT, LATE, NOT_KEPT], [PENDING] * 4]
    np.testing.assert_array_equal(latency, [[0.1, nan, nan, 0.2], [0.3, 0.1, nan, nan], [nan] * 4])
