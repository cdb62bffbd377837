"""Open gcc-dask stores for analysis: pipeline run stores and sweep stores, told apart by their attrs.

A *run store* (``gcc-dask run``, :mod:`gcc_dask.store`) has one group per scheme with per-batch arrays;
a *sweep store* (``gcc-dask sweep``, :mod:`gcc_dask.sweep`) is one flat Dataset over
(scheme, num_inputs, num_workers, S|p, trial). Analysis reads stores only (it never imports the runtime).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Literal

from gcc_dask.errors import StoreError

__all__ = ["open_sweep", "root_attrs", "store_kind"]

RUN_MARKER = "gcc_dask_store"
SWEEP_MARKER = "gcc_dask_sweep"


def _meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        what = "does not exist" if not path.exists() else "is not a Zarr v3 store"
        raise StoreError(f"store path: got {str(path)!r}; it {what} (expected a gcc-dask run or sweep "
                         "store)") from None


def root_attrs(path: str | os.PathLike) -> dict[str, Any]:
    """The root attributes of a Zarr v3 store (read from its ``zarr.json``, no Zarr import).

    Raises
    ------
    StoreError
        If `path` is not a Zarr v3 store.
    """
    return dict(_meta(Path(os.fspath(path)).expanduser()).get("attributes") or {})


def store_kind(path: str | os.PathLike) -> Literal["run", "sweep"]:
    """``"run"`` for a pipeline run store, ``"sweep"`` for a sweep store.

    Raises
    ------
    StoreError
        If `path` is neither.
    """
    attrs = root_attrs(path)
    if attrs.get(SWEEP_MARKER) == 1:
        return "sweep"
    if attrs.get(RUN_MARKER) is not None:
        return "run"
    raise StoreError(f"store path: got {os.fspath(path)!r}; expected a gcc-dask run or sweep store (the "
                     "root attributes name neither)")


def _consolidated(path: Path) -> bool:
    return bool(_meta(path).get("consolidated_metadata"))


def open_sweep(path: str | os.PathLike):
    """Open a sweep store as a lazy :class:`xarray.Dataset` with string ``scheme``/``code`` coordinates.

    Dimensions: ``scheme``, ``num_inputs``, ``num_workers``, ``S`` (fixed-count stragglers) or ``p``
    (independent straggling), ``trial``. See :mod:`gcc_dask.sweep` for the variables.

    Raises
    ------
    StoreError
        If `path` is not a gcc-dask sweep store.
    """
    import numpy as np
    import xarray as xr

    path = Path(os.fspath(path)).expanduser().absolute()
    if store_kind(path) != "sweep":
        raise StoreError(f"store path: got {str(path)!r}, a run store; expected a sweep store (use the run "
                         "analysis functions for run stores)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_zarr(str(path), consolidated=_consolidated(path))
    return ds.assign_coords(scheme=np.asarray(ds["scheme"].values, dtype=object).astype(str),
                            code=("scheme", np.asarray(ds["code"].values, dtype=object).astype(str)))
