"""An array in memory as a source: NumPy, dask, Zarr or anything array-like (what :func:`gcc_dask.coded_map`
is given), read in chunk-aligned slices.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from gcc_dask.errors import ConfigError, SourceError
from gcc_dask.sources.base import Source, _check_all_labels, _check_limit, register_source


# ------------------------------------------------------------------------------------ in-memory arrays
def _regular_chunk(chunks: Any) -> int | None:
    """The sample-axis chunk length of an array's ``chunks`` (Zarr: a tuple of ints; dask: a tuple of tuples),
    when regular (all equal but a shorter last one); else None."""
    if not chunks:
        return None
    first = chunks[0]
    if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
        return int(first) if first > 0 else None
    try:
        sizes = [int(c) for c in first]
    except (TypeError, ValueError):
        return None
    if not sizes or sizes[0] < 1 or any(c != sizes[0] for c in sizes[:-1]) or sizes[-1] > sizes[0]:
        return None
    return sizes[0]


@register_source("array")
class ArraySource(Source):
    """An in-memory NumPy array or a dask array (programmatic use only; not from YAML).

    Parameters: ``array`` (shape (num_samples, ...); ``data`` is an alias), ``labels`` (optional,
    (num_samples,)), ``name``, ``limit``.

    A NumPy array travels whole with the run, to every Dask worker once. A dask array travels as its task
    graph and is read where a batch is needed, block by block: :meth:`read` and :meth:`take` compute only the
    blocks that hold the asked samples, each once, with the synchronous scheduler in the calling process (a
    Dask worker, in a run: never a task of its own on the cluster, so a busy cluster cannot wait on itself).
    ``remote`` is then true, and the pipeline reads nothing of it on the driver (the first-sample check of f
    and the composition run as tasks on the cluster).

    :attr:`chunks`: None for a NumPy array; the chunk length along the sample axis of a dask (or Zarr)
    array whose chunks there are regular (all equal but a shorter last one), else None. With a chunk reader
    (a pipeline's worker passes one), :meth:`take` reads through it, so that a worker computes each block of
    a batch's samples once for all the batch's shards.
    """

    def __init__(self, array: Any = None, labels: Any = None, name: str = "array",
                 limit: int | None = None, *, data: Any = None) -> None:
        if (array is None) == (data is None):
            raise ConfigError("source.array: expected exactly one in-memory array (array= or data=)")
        data = array if data is None else data
        if not hasattr(data, "shape") or not hasattr(data, "dtype"):
            data = np.asarray(data)
        if len(data.shape) < 1:
            raise SourceError("source.data: got a 0-d array; expected shape (num_samples, ...)")
        if _is_dask(data) and any(np.isnan(c) for c in data.shape):
            raise SourceError(f"source.array: got a dask array of unknown shape {data.shape}; expected known "
                              "chunk sizes along every axis (call .compute_chunk_sizes() first)")
        if labels is not None:
            if not hasattr(labels, "compute"):
                labels = np.asarray(labels)
            if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
                raise SourceError(f"source.labels: got shape {labels.shape}; expected "
                                  f"({data.shape[0]},), one per sample")
            _check_all_labels(str(name), labels)
        self.data, self.labels = data, labels
        #: read on the Dask workers only (a dask array), never on the driver
        self.remote = _is_dask(data) or _is_dask(labels)
        self._finish(str(name), int(data.shape[0]), data.shape[1:], data.dtype, labels is not None,
                     _check_limit(limit), {"kind": "array", "name": str(name)})
        self._chunk_len = _regular_chunk(getattr(data, "chunks", None))

    @property
    def chunks(self) -> int | None:
        return self._chunk_len

    def _read(self, start: int, stop: int) -> tuple[Any, Any]:
        def get(a: Any) -> Any:
            stored = _from_zarr_alone(a)
            if stored is not None:  # dask.array.from_zarr(z) as it is: a slice of z, without a dask graph run
                return np.asarray(stored[start:stop])
            part = a[start:stop]
            return part.compute(scheduler="sync") if _is_dask(part) else part

        return get(self.data), None if self.labels is None else get(self.labels)

    def stored_files(self) -> list[str]:
        """As :meth:`Source.stored_files`: the folder of the local Zarr array that the array is, whole and as
        stored (a Zarr array, or ``dask.array.from_zarr`` of one with no other operation in its graph); empty for
        anything else (a NumPy array, a dask array computed from a Zarr array, a store that is not a local
        folder)."""
        folder = _local_zarr_folder(self.data)
        return [] if folder is None else [folder]

    def data_folders(self) -> list[str]:
        """As :meth:`Source.data_folders`: the local folders of the Zarr arrays that the array (or its labels)
        reads, a ``zarr.Array`` or the Zarr arrays in a dask array's graph (``dask.array.from_zarr``, whatever
        operations follow)."""
        return list(dict.fromkeys([*_zarr_folders(self.data),
                                   *([] if self.labels is None else _zarr_folders(self.labels))]))

    def take(self, indices: Any, chunk: Callable | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """As :meth:`Source.take`; on a dask array without a chunk reader, one selection of the sorted indices,
        so that each block that holds some of them is computed once (a composed batch spans many short runs
        of samples)."""
        if not self.remote or (chunk is not None and self.chunks is not None):
            return super().take(indices, chunk)
        idx = np.asarray(indices)
        if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
            return super().take(indices)  # its checks, and the empty case
        idx = idx.astype(np.int64, copy=False)
        if idx.min() < 0 or idx.max() >= self.num_samples:
            return super().take(indices)  # raises its InvalidInputError
        order = np.argsort(idx, kind="stable")
        wanted = idx[order]

        def get(a: Any) -> Any:
            part = a[wanted]
            part = part.compute(scheduler="sync") if _is_dask(part) else np.asarray(part)
            out = np.empty_like(part)
            out[order] = part
            return out

        X = np.asarray(get(self.data), dtype=self.dtype).reshape((idx.size, *self.sample_shape))
        y = None if self.labels is None else np.asarray(get(self.labels), dtype=np.int64).reshape(idx.size)
        return X, y


def _is_dask(a: Any) -> bool:
    """A dask collection (``dask.is_dask_collection``, without importing dask for NumPy input)."""
    return a is not None and callable(getattr(a, "__dask_graph__", None)) and a.__dask_graph__() is not None


def _from_zarr_alone(a: Any) -> Any:
    """The ``zarr.Array`` that the dask array `a` is, when its graph is ``dask.array.from_zarr``'s alone (the
    array's own key, ``original-<name>``, and ``(name, i, ...)`` getters) over the whole of one, of the same
    dtype; None for anything else. Its slices are the dask array's, read without running a graph (about 2.5
    ms less a chunk of 10,000 rows of 32 floats, half the read)."""
    if not _is_dask(a):
        return None
    name = str(getattr(a, "name", ""))
    if not name.startswith("from-zarr-"):
        return None
    graph = dict(a.__dask_graph__())
    original = graph.get(f"original-{name}")
    if any(k != f"original-{name}" and not (isinstance(k, tuple) and k and k[0] == name) for k in graph):
        return None  # another operation on the Zarr array's blocks
    if original is None or type(original).__module__.split(".")[0] != "zarr" \
            or tuple(getattr(original, "shape", ())) != tuple(a.shape) or getattr(original, "dtype", None) != a.dtype:
        return None
    return original


def _local_zarr_folder(a: Any) -> str | None:
    """The local folder of the Zarr array that `a` is: a ``zarr.Array`` in a local store, or a dask array whose
    graph is ``dask.array.from_zarr``'s alone over the whole of one (:func:`_from_zarr_alone`). None for
    anything else."""
    if _is_dask(a):
        a = _from_zarr_alone(a)
        if a is None:
            return None
    return _zarr_array_folder(a)


def _zarr_folders(a: Any) -> list[str]:
    """The local folders of every Zarr array that `a` reads: `a` itself (a ``zarr.Array``), or the Zarr arrays
    in a dask array's graph (``dask.array.from_zarr``'s, or ``xarray.open_zarr``'s under its lazy wrappers,
    whatever operations follow), in the graph's order."""
    values = a.__dask_graph__().values() if _is_dask(a) else [a]
    folders = (_zarr_array_folder(_under_xarray(v)) for v in values)
    return list(dict.fromkeys(f for f in folders if f is not None))


def _under_xarray(v: Any) -> Any:
    """The array that xarray's lazy wrappers hold, `v` itself for anything else: ``xarray.open_zarr`` puts a
    ``zarr.Array`` in its dask graph under ``ImplicitToExplicitIndexingAdapter``, ``CopyOnWriteArray``,
    ``LazilyIndexedArray`` and ``ZarrArrayWrapper`` (their ``array`` or ``_array``), where the inputs digest did
    not see it: a resume over the Zarr store rewritten in place mixed old rows with new ones."""
    for _ in range(16):  # wrappers nest a few deep; a cycle would stop here
        if type(v).__module__.split(".")[0] != "xarray":
            return v
        inner = getattr(v, "array", None)
        inner = getattr(v, "_array", None) if inner is None else inner
        if inner is None:
            return v
        v = inner
    return v


def _zarr_array_folder(a: Any) -> str | None:
    """The local folder of a ``zarr.Array`` in a local store; None for anything else."""
    if type(a).__module__.split(".")[0] != "zarr" or not hasattr(a, "store"):
        return None
    store = a.store
    root = getattr(store, "root", None)  # zarr.storage.LocalStore
    if root is None:
        fs = getattr(store, "fs", None)  # zarr.storage.FsspecStore over the local file system
        protocol = getattr(fs, "protocol", ())
        protocol = (protocol,) if isinstance(protocol, str) else tuple(protocol or ())
        if not {"file", "local"} & set(protocol) or not isinstance(getattr(store, "path", None), str):
            return None
        root = store.path
    folder = os.path.join(os.fspath(root), str(getattr(a, "path", "") or "").strip("/"))
    return os.path.abspath(folder) if os.path.isdir(folder) else None
