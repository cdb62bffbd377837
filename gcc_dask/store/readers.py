"""Reading a run store back: :func:`open_scheme`, :func:`open_run` (xarray), :func:`check_writable`."""

from __future__ import annotations

import os
import uuid
from typing import Any

from gcc_dask.errors import StoreError

from .layout import INPUTS, _is_consolidated, _local, _open_root


# ---------------------------------------------------------------------------------------- readers
#: a store chunk (a batch's rows) up to this many bytes is read once per block of the dataset-order result that
#: needs it, rather than once and rechunked (:func:`read_in_dataset_order`): 200,000 rows of 3 floats in store
#: chunks of 80,000 (960 KB) and blocks of 10,000 came back in 105 ms against 130 ms through the rechunk, on a
#: cluster of 2 worker processes; at 2,000,000 rows (store chunks of 9.6 MB, blocks of 100,000) the rechunk
#: was faster, 193 ms against 309 ms
DIRECT_READ_BYTES = 2 * 2**20


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

    # a store composed as_stored holds the dataset's own order: its sample coordinate (8 bytes a sample, 16 MB
    # at 2,000,000 rows) need not be read and checked to put nothing back in place
    order = None if root.attrs.get("composition") == "as_stored" else RunStore(path).sample_index()
    if not lazy:
        values = arr[...]
        if order is None:
            return values
        out = values.copy()
        out[order] = values
        return out
    import dask.array as da
    import numpy as np

    if order is not None:
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size, dtype=order.dtype)
    if order is None or not (inverse != np.arange(order.size)).any():
        # the store's rows are the dataset's: one task per store chunk (a batch) reads it once, and the rechunk
        # cuts it into the blocks asked for. Blocks read straight from the store with chunks finer than its own
        # decompressed each store chunk once per block (a batch of 8 input chunks: 8 times)
        whole = da.from_zarr(arr)
        if chunks is None or tuple(int(c) for c in chunks) == tuple(whole.chunks[0]):
            return whole
        want = (tuple(int(c) for c in chunks), *((n,) for n in arr.shape[1:]))
        if arr.nbytes // max(1, arr.nchunks) <= DIRECT_READ_BYTES:
            # small store chunks: each block reads its rows straight from the store (a store chunk decompressed
            # once per block that needs it), one task a block instead of the rechunk's split and merge tasks
            return da.from_zarr(arr, chunks=want)
        return whole.rechunk(want)
    segments = _closed_segments(order, int(arr.chunks[0]))
    row_bytes = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    if max(b - a for a, b in segments) * row_bytes <= MAX_SEGMENT_BYTES:
        # a composition moves a sample only within its window, and a chunked source's windows hold whole batches
        # (store chunks): each run of store chunks that holds its own samples is read once (one task per store
        # chunk), put back in dataset order in memory, and cut into the blocks asked for
        rest = tuple((n,) for n in arr.shape[1:])
        seg_sizes = tuple(b - a for a, b in segments)
        local = np.concatenate([order[a:b] - a for a, b in segments])
        local = local.astype(np.int32 if order.size < 2**31 else np.int64)
        whole = da.from_zarr(arr).rechunk((seg_sizes, *rest))
        local = local.reshape(-1, *((1,) * (arr.ndim - 1)))  # one column, broadcast along the output axes
        back = da.map_blocks(_unpermuted, whole, da.from_array(local, chunks=(seg_sizes, *(((1,),) * (arr.ndim - 1))),
                                                               name=False),
                             dtype=arr.dtype, meta=np.empty((0,) * arr.ndim, dtype=arr.dtype))
        want = tuple(int(c) for c in chunks) if chunks is not None else whole.chunks[0]
        return back if want == back.chunks[0] else back.rechunk((want, *rest))
    # samples moved across long runs of the store (a source without chunks, whose windows need not hold whole
    # batches): each output block reads its rows from the store chunks that hold them, one task per block
    sizes = tuple(int(c) for c in chunks) if chunks is not None else tuple(int(c) for c in arr.chunks[:1])
    if chunks is None:
        sizes = tuple(min(sizes[0], order.size - s) for s in range(0, order.size, sizes[0]))
    small = inverse.astype(np.int32) if order.size < 2**31 else inverse
    index = da.from_array(small, chunks=(sizes,), name=False)
    return da.map_blocks(_rows_at, index, arr, dtype=arr.dtype, chunks=(sizes, *((n,) for n in arr.shape[1:])),
                         new_axis=list(range(1, arr.ndim)), meta=np.empty((0,) * arr.ndim, dtype=arr.dtype))


#: the largest run of store rows :func:`read_in_dataset_order` reorders in one task (bytes of the array's rows)
MAX_SEGMENT_BYTES = 256 * 2**20


def _closed_segments(order, step: int) -> list[tuple[int, int]]:
    """The shortest runs ``[a, b)`` of store rows, cut at multiples of `step` (the store's chunk), that hold the
    dataset rows ``a .. b - 1`` and no other: the store rows of each run can be put back in dataset order on
    their own. `order` is the dataset index of each store row (a permutation)."""
    import numpy as np

    n = int(order.size)
    top = np.maximum.accumulate(order)
    cuts = [0] + [c for c in range(step, n, step) if top[c - 1] == c - 1] + [n]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _unpermuted(rows, local):
    """Store rows `rows` of one closed run in dataset order: row ``local[i]`` of the result is ``rows[i]``."""
    import numpy as np

    out = np.empty_like(rows)
    out[np.asarray(local, dtype=np.int64).ravel()] = rows
    return out


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

