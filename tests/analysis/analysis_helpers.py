"""Synthetic sweep stores with known answers (no cluster needed)."""

from __future__ import annotations

import numpy as np
import xarray as xr


def synthetic_sweep(path, mse_fn, *, schemes=("gcc", "bacc"), K=(10,), N=(40, 80, 160, 320), S=(1, 2),
                    trials=4, sdim="S", rel_acc=None, attrs=None):
    """Write a sweep store whose per-trial MSE is ``mse_fn(scheme, K, N, s, trial)`` (NaN allowed)."""
    shape = (len(schemes), len(K), len(N), len(S), trials)
    mse = np.empty(shape)
    for idx in np.ndindex(*shape):
        i, a, b, c, t = idx
        mse[idx] = mse_fn(schemes[i], K[a], N[b], S[c], t)
    dims = ("scheme", "num_inputs", "num_workers", sdim, "trial")
    data = {
        "mse": (dims, mse),
        "decodable_frac": (dims, np.where(np.isfinite(mse), 1.0, 0.0)),
        "n_received": (dims, np.broadcast_to(np.array(N)[None, None, :, None, None], shape).astype(np.int32)),
        "status": (dims[:4], np.ones(shape[:4], np.int8)),
        "coincident_points": (dims[:3], np.zeros(shape[:3], np.int32)),
    }
    if rel_acc is not None:
        ra = np.empty(shape)
        for idx in np.ndindex(*shape):
            i, a, b, c, t = idx
            ra[idx] = rel_acc(schemes[i], K[a], N[b], S[c], t)
        data["rel_acc"] = (dims, ra)
    coords = {"scheme": np.array(schemes, dtype=object), "code": ("scheme", np.array(schemes, dtype=object)),
              "num_inputs": np.array(K), "num_workers": np.array(N), sdim: np.array(S), "trial": np.arange(trials)}
    base = {"gcc_dask_sweep": 1, "name": "synthetic", "function": "synthetic", "straggler_model":
            "fixed_count" if sdim == "S" else "bernoulli", "straggler_dim": sdim, "pattern": "random",
            "config": {"code": {"points": "chebyshev"}}, "status": "complete", "skipped": []}
    xr.Dataset(data, coords=coords, attrs={**base, **(attrs or {})}).to_zarr(str(path), mode="w", consolidated=False)
    return path
