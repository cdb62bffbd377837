"""Array files as sources: a Zarr array (a store, or one array of a group) and a ``.npy`` file (memory-mapped,
opened once per process), with optional labels; each process reopens them lazily from their paths.
"""

from __future__ import annotations

from abc import abstractmethod
import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from gcc_dask.errors import SourceError
from gcc_dask.sources.base import Source, _check_all_labels, _check_limit, _existing, register_source


# ------------------------------------------------------------------------------ file-backed arrays
class _ArrayFileSource(Source):
    """Common code of the Zarr and ``.npy`` sources: lazily opened handles, never pickled."""

    def _setup(self, name: str, arr: Any, labels: Any, limit: Any, params: dict[str, Any],
               dtype: Any) -> None:
        if arr.ndim < 1:
            raise SourceError(f"source: got a 0-d array in {name!r}; expected shape (num_samples, ...)")
        if labels is not None and (labels.ndim != 1 or labels.shape[0] != arr.shape[0]):
            raise SourceError(f"source.labels: got shape {labels.shape} for the labels of {name!r}; expected "
                              f"({arr.shape[0]},), one per sample")
        _check_all_labels(name, labels)
        self._finish(name, arr.shape[0], arr.shape[1:], arr.dtype if dtype is None else dtype,
                     labels is not None, _check_limit(limit), params)

    def _read(self, start: int, stop: int) -> tuple[Any, Any]:
        if getattr(self, "_h", None) is None:
            self._h = self._open()
        arr, labels = self._h
        return np.asarray(arr[start:stop]), None if labels is None else np.asarray(labels[start:stop])

    @abstractmethod
    def _open(self) -> tuple[Any, Any]:
        """The (array, labels or None) pair to slice, opened once per process."""


@register_source("zarr")
class ZarrSource(_ArrayFileSource):
    """A Zarr array, read one slice at a time (``zarr.open_array``; never loaded whole).

    Parameters: ``path`` (a store path or URL), ``array`` (the array's path inside the store; None when
    ``path`` is the array itself), ``labels`` (optional path of a 1-D label array in the same store),
    ``dtype`` (cast on read; default the array's), ``limit``. The first axis indexes samples.

    :attr:`chunks` is the array's chunk length along that axis (the inner chunks of a sharded array): Zarr
    decodes a whole chunk to read any sample of it.
    """

    _fresh_reads = True  # zarr decodes every read into a new array

    def __init__(self, path: str | os.PathLike, array: str | None = None, labels: str | None = None,
                 dtype: Any = None, limit: int | None = None) -> None:
        self.path = _existing(path, "Zarr store")
        self.array, self.labels = array, labels
        self._h = arr, lab = self._open()
        self._setup(f"zarr:{self.path}" + (f"/{array}" if array else ""), arr, lab, limit,
                    {"kind": "zarr", "path": self.path, "array": array, "labels": labels,
                     "dtype": None if dtype is None else np.dtype(dtype).name}, dtype)
        self._chunk_len = int(arr.chunks[0]) if arr.ndim else None

    @property
    def chunks(self) -> int | None:
        return self._chunk_len

    def files(self) -> list[str]:
        if "://" in self.path:
            return []  # a remote store: its content is not fingerprinted
        return [os.path.join(self.path, self.array)] if self.array else [self.path]

    def label_files(self) -> list[str]:
        """As :meth:`Source.label_files`: the folder of the local ``labels`` array, unless it lies within the data
        array's folder (already in :meth:`files`); empty for a remote store or without labels."""
        if self.labels is None or "://" in self.path:
            return []
        folder = os.path.join(self.path, self.labels)
        data = os.path.join(self.path, self.array) if self.array else self.path
        inside = os.path.commonpath([os.path.abspath(folder), os.path.abspath(data)]) == os.path.abspath(data)
        return [] if inside else [folder]

    def _open(self) -> tuple[Any, Any]:
        import zarr

        def one(component: str | None) -> Any:
            try:
                return zarr.open_array(store=self.path, path=component or "", mode="r")
            except Exception as exc:
                raise SourceError(f"source: got Zarr array {component or ''!r} in store {self.path!r}, which "
                                  f"cannot be opened ({type(exc).__name__}: {exc}); expected an existing Zarr "
                                  "array") from exc

        return one(self.array), None if self.labels is None else one(self.labels)


#: the ``.npy`` files memory-mapped in this process, by (absolute path, inode, mtime, size), at most
#: ``_NPY_KEEP`` of them (each holds a file descriptor)
_NPY_OPEN: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
_NPY_LOCK = threading.Lock()
_NPY_KEEP = 32


def _load_npy(path: str) -> np.ndarray:
    """``np.load(path, mmap_mode="r")``, once per file and process, under a lock.

    NumPy parses a ``.npy`` header with ``ast.literal_eval``, which is not thread-safe on CPython 3.11
    (``SystemError: AST constructor recursion depth mismatch`` when a worker's threads open a file at
    once). The memory map is shared by every reader in the process; a file replaced or rewritten since
    (another inode, mtime or size) is opened anew.

    Raises
    ------
    OSError, ValueError
        As :func:`numpy.load`.
    """
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_ino, st.st_mtime_ns, st.st_size)
    with _NPY_LOCK:
        arr = _NPY_OPEN.get(key)
        if arr is None:
            arr = _NPY_OPEN[key] = np.load(path, mmap_mode="r", allow_pickle=False)
            while len(_NPY_OPEN) > _NPY_KEEP:
                _NPY_OPEN.popitem(last=False)
        else:
            _NPY_OPEN.move_to_end(key)
        return arr


@register_source("npy")
class NpySource(_ArrayFileSource):
    """A ``.npy`` file, memory-mapped (``np.load(mmap_mode="r")``) and read in slices.

    Parameters: ``path``, ``labels`` (optional path of a 1-D ``.npy`` of labels), ``dtype`` (cast on
    read), ``limit``. The first axis indexes samples. :attr:`chunks` is None: a memory map reads any
    slice at the cost of its own pages.
    """

    def __init__(self, path: str | os.PathLike, labels: str | os.PathLike | None = None,
                 dtype: Any = None, limit: int | None = None) -> None:
        self.path = _existing(path, ".npy file")
        self.labels = None if labels is None else _existing(labels, ".npy labels file")
        self._h = arr, lab = self._open()
        self._setup(f"npy:{self.path}", arr, lab, limit,
                    {"kind": "npy", "path": self.path, "labels": self.labels,
                     "dtype": None if dtype is None else np.dtype(dtype).name}, dtype)

    def files(self) -> list[str]:
        return [self.path] + ([self.labels] if self.labels else [])

    def _open(self) -> tuple[Any, Any]:
        def one(p: str) -> Any:
            try:
                return _load_npy(p)  # once per process: np.load's header parser is not thread-safe
            except (OSError, ValueError) as exc:
                raise SourceError(f"source: got {p!r}, which cannot be read as a .npy file ({exc}); expected a "
                                  "file written by numpy.save") from exc

        return one(self.path), None if self.labels is None else one(self.labels)
