"""Reading a run store back: :func:`open_scheme`, :func:`open_run` (xarray), :func:`check_writable`."""

from __future__ import annotations

import os
import uuid
from typing import Any

from gcc_dask.errors import StoreError

from .layout import INPUTS, _is_consolidated, _local, _open_root


# ---------------------------------------------------------------------------------------- readers
def store_path(path: str | os.PathLike) -> str:
    """The absolute path a store at `path` is written to and read from: ``~`` expanded, symbolic links and
    ``..`` resolved (``"~/nope/../s.zarr"`` is ``"<home>/s.zarr"``, whether or not ``nope`` exists).

    Raises
    ------
    StoreError
        For a URL (only local and shared-filesystem paths are supported).
    """
    return str(_local(path))


def open_scheme(path: str | os.PathLike, scheme: str, *, inputs: bool = False, **kwargs: Any):
    """Open one scheme group as an :class:`xarray.Dataset` (lazy, dask-backed).

    Parameters
    ----------
    inputs : bool
        Also attach ``labels`` (sample,) and ``reference`` (sample, output) from the inputs group.
    **kwargs
        Passed to :func:`xarray.open_zarr`.
    """
    import xarray as xr

    path = _local(path)
    root = _open_root(path, mode="r")
    if scheme not in root.attrs["schemes"] and scheme != INPUTS:
        raise StoreError(f"scheme: got {scheme!r}; expected one of {sorted(root.attrs['schemes'])}")
    kwargs.setdefault("consolidated", _is_consolidated(path))
    ds = xr.open_zarr(str(path), group=scheme, **kwargs)
    if inputs and scheme != INPUTS:
        extra = xr.open_zarr(str(path), group=INPUTS, **kwargs).drop_vars("status")
        extra = extra.drop_vars([c for c in extra.coords if c not in extra.dims])  # the same as ds's
        ds = ds.merge(extra, compat="override", join="exact")
    return ds


def open_run(path: str | os.PathLike, **kwargs: Any):
    """Open a run store as an :class:`xarray.DataTree` (root attrs, ``/inputs`` and one node per scheme).

    Falls back to a ``dict`` of group name -> Dataset where xarray has no DataTree.
    `kwargs` are passed to :func:`xarray.open_datatree` (``engine="zarr"``).

    Raises
    ------
    StoreError
        If `path` is missing or not a gcc-dask store.
    """
    import xarray as xr

    path = _local(path)
    root = _open_root(path, mode="r")
    kwargs.setdefault("consolidated", _is_consolidated(path))
    if hasattr(xr, "open_datatree"):
        return xr.open_datatree(str(path), engine="zarr", **kwargs)
    return {name: xr.open_zarr(str(path), group=name, **kwargs)
            for name in (INPUTS, *root.attrs["schemes"])}


def read_in_dataset_order(path: str | os.PathLike, group: str, name: str = "decoded", *, lazy: bool = False,
                          chunks: Any = None):
    """A ``sample`` array of a run store (``<scheme>/decoded``, ``inputs/reference``) in the dataset's own
    order: row i is sample i of the source, whatever the composition put where.

    The store holds samples in composition order (similar samples together), indexed by the ``sample``
    coordinate (docs/store.rst); this undoes that permutation.

    Parameters
    ----------
    path : str or os.PathLike
        A run store.
    group, name : str
        The array: a scheme and ``"decoded"``, or ``"inputs"`` and ``"reference"``.
    lazy : bool
        Return a dask array that reads the store when computed (``dask.array.from_zarr``, chunked as the
        store, one chunk per batch), instead of reading it now into NumPy.
    chunks : tuple of int, optional
        With `lazy`: the chunks of the result along ``sample`` (e.g. those of the input array); the other
        axes keep one chunk.

    Returns
    -------
    numpy.ndarray or dask.array.Array
        Shape ``(num_samples, *output_shape)``; float32 for ``decoded`` (NaN where a batch was undecodable).

    Raises
    ------
    StoreError
        If `path` is not a run store or has no such array.
    """
    root = _open_root(_local(path), mode="r")
    try:
        arr = root[group][name]
    except KeyError:
        raise StoreError(f"store {str(path)!r}: no array {group}/{name} (schemes: "
                         f"{sorted(root.attrs['schemes'])})") from None
    from .run_store import RunStore

    order = RunStore(path).sample_index()
    if not lazy:
        values = arr[...]
        out = values.copy()
        out[order] = values
        return out
    import dask.array as da
    import numpy as np

    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size, dtype=order.dtype)
    if not (inverse != np.arange(order.size)).any():
        # the store's rows are the dataset's: each block of the result reads its rows from the store (one task
        # per block, no rechunk layer: a store chunk holds a batch, a few hundred KB to a few MB compressed)
        return da.from_zarr(arr, chunks=(tuple(chunks) if chunks is not None else arr.chunks[0], *arr.shape[1:]))
    # each output block reads its rows from the few store chunks that hold them (a composition moves a sample
    # only within its window): one task per block, no shuffle of the whole array
    sizes = tuple(int(c) for c in chunks) if chunks is not None else tuple(int(c) for c in arr.chunks[:1])
    if chunks is None:
        sizes = tuple(min(sizes[0], order.size - s) for s in range(0, order.size, sizes[0]))
    small = inverse.astype(np.int32) if order.size < 2**31 else inverse
    index = da.from_array(small, chunks=(sizes,), name=False)
    return da.map_blocks(_rows_at, index, arr, dtype=arr.dtype, chunks=(sizes, *((n,) for n in arr.shape[1:])),
                         new_axis=list(range(1, arr.ndim)), meta=np.empty((0,) * arr.ndim, dtype=arr.dtype))


def _rows_at(index, arr):
    """Rows `index` (1-D integers, any order) of the Zarr array `arr`, in that order: one orthogonal read of the
    sorted rows (only the chunks that hold them are read)."""
    import numpy as np

    index = np.asarray(index, dtype=np.int64)
    if index.size == 0:
        return np.empty((0, *arr.shape[1:]), dtype=arr.dtype)
    sort = np.argsort(index, kind="stable")
    rows = np.asarray(arr.oindex[index[sort]])
    out = np.empty_like(rows)
    out[sort] = rows
    return out


def check_writable(path: str | os.PathLike, *, must_exist: bool = False) -> str:
    """Check that this process can create files at `path` (run it on every worker).

    Writes and removes a small probe file in `path` (or, when `path` does not exist yet, in its
    nearest existing parent directory).

    Parameters
    ----------
    must_exist : bool
        Also require `path` itself to exist (a worker checking a store the driver just created:
        a worker on another machine without the shared filesystem fails here).

    Returns
    -------
    str
        The absolute path.

    Raises
    ------
    StoreError
        If the path is missing (with `must_exist`) or not writable.
    """
    target = _local(path)
    if target.exists() and not target.is_dir():
        raise StoreError(f"store path: got {str(target)!r}; it is a file, expected a directory")
    if must_exist and not target.is_dir():
        raise StoreError(f"store path: got {str(target)!r}; it does not exist on this machine (the "
                         "store path must be on a filesystem shared by the driver and every worker)")
    probe_dir = target
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    probe = probe_dir / f".gcc-dask-probe-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StoreError(f"store path: got {str(target)!r}; expected a path this process can write "
                         f"({type(exc).__name__}: {exc.strerror or exc})") from None
    return str(target)

