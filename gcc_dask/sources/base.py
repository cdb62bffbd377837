"""The source interface and its registry: :class:`Source` (slicing, limits, reads in any order, labels
checked), :func:`register_source`, :func:`make_source`, :func:`list_sources`, and the checks every kind shares.

The kinds live beside it (:mod:`gcc_dask.sources.images`, :mod:`gcc_dask.sources.files`,
:mod:`gcc_dask.sources.synthetic`, :mod:`gcc_dask.sources.arrays`); :mod:`gcc_dask.sources` imports them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import os
from typing import Any, Callable, Iterator

import numpy as np

from gcc_dask.errors import ConfigError, InvalidInputError, SourceError

__all__ = ["Source", "list_sources", "make_source", "register_source"]


_SOURCES: dict[str, type["Source"]] = {}
_SPLITS = ("all", "train", "test")


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
        SourceError
            If the samples cannot be decoded (a damaged compressed chunk, a failed checksum, a dask block that
            raises): one line naming the source and the samples.
        """
        ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, stop))
        if not ok or not 0 <= start <= stop <= self.num_samples:
            raise InvalidInputError(
                f"read(start={start!r}, stop={stop!r}) on {self.name!r}: expected integers with "
                f"0 <= start <= stop <= num_samples={self.num_samples}")
        return self._read_checked(int(start), int(stop), fresh=True)

    def _read_checked(self, start: int, stop: int, fresh: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`read` of checked bounds; with ``fresh=False`` X may be a read-only view of the source's own
        memory (an in-memory source's cache), for a caller that only gathers from it (:meth:`take`: copying
        a window of MNIST digits before picking a batch out of it was as costly as LeNet-5 on the batch)."""
        try:
            X, y = self._read(int(start), int(stop))
        except (RuntimeError, ValueError) as e:  # data that cannot be decoded: a damaged compressed chunk (numcodecs'
            # zstd and blosc raise RuntimeError, a failed checksum ValueError), an absurd shape, a dask block that
            # raises. The batch's own error (a run stops on it with this line), not a lost result to decode around
            what = f"sample {start}" if stop - start == 1 else f"samples {start}-{stop - 1}"
            text = str(e).splitlines()[0] if str(e) else ""
            raise SourceError(f"source: got {self.name!r}, whose {what} cannot be read ({type(e).__name__}: {text}); "
                              "expected a readable source: check its shape and files") from None
        if fresh and not (self._fresh_reads and isinstance(X, np.ndarray) and X.flags.writeable):
            X = np.array(X, dtype=self.dtype, copy=True)
        X = np.asarray(X, dtype=self.dtype).reshape((stop - start, *self.sample_shape))
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

    def prepare(self) -> None:
        """Load what every read of this source shares, once per process: a dataset decoded whole into memory
        (the bundled image sets), so that the first read costs what the others do. The run's workers call it
        when they load f, before any batch is timed. Default: nothing (a chunked or memory-mapped source reads
        what it is asked for).

        Raises
        ------
        SourceError
            The data cannot be read.
        """

    def files(self) -> list[str]:
        """Local files (or Zarr directories) this source reads: their content goes into a run's fingerprint,
        so a resume refuses data that changed. Empty for generated and in-memory sources."""
        return []

    def data_folders(self) -> list[str]:
        """Local Zarr folders that an in-memory source reads (a dask array's graph can read Zarr arrays that its
        fingerprint names only by their paths): their state goes into a run's inputs digest beside
        :meth:`files`, so a resume refuses data rewritten in place. Empty by default."""
        return []

    def label_files(self) -> list[str]:
        """Local label arrays this source reads that :meth:`files` leaves out (a Zarr source's ``labels`` array):
        their state goes into a run's inputs digest beside :meth:`files` (stores made since they count have a
        ``label_files`` attribute), so a resume refuses labels rewritten in place. Empty by default (an ``.npy``
        source's labels file is among its :meth:`files`)."""
        return []

    def stored_files(self) -> list[str]:
        """Local files (or Zarr folders) whose bytes are exactly the samples this source reads, with nothing
        computed on them: while they do not change (their sizes and modification times), neither do the samples.
        The composition cache (:mod:`gcc_dask.composition_cache`) checks them instead of reading every window
        again. Empty by default (a source that transforms what it reads, or reads no local file); an array source
        names the local Zarr array that a ``dask.array.from_zarr`` array (or a Zarr array) reads as it is."""
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
            if chunk is None and self.whole_chunks(idx):  # one read, straight into one fresh array: no gather
                return self.read(int(idx[0]), int(idx[-1]) + 1)
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
            X, y = self._read_checked(start, int(run[-1]) + 1, fresh=False)  # gathered below: a fresh array
            xs.append(X[run - start])
            ys.append(None if y is None else y[run - start])
        return _unsort(order, xs, ys)

    def whole_chunks(self, indices: Any) -> bool:
        """Whether `indices` are whole chunks of this chunked source, in order: the consecutive samples from the
        first of a chunk to the last of a chunk (a block of the stored order as long as some chunks). Reading
        them reads nothing else, so a caller that holds chunks for other reads (:meth:`take`'s `chunk`) need
        not hold these. False for a source without chunks, or for no indices.

        Parameters
        ----------
        indices : array-like of int, shape (m,)
        """
        c = self.chunks
        idx = np.asarray(indices)
        if c is None or idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
            return False
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        return (lo % c == 0 and (hi % c == 0 or hi == self.num_samples) and hi - lo == idx.size
                and bool((np.diff(idx) == 1).all()))

    def _take_chunks(self, idx: np.ndarray, chunk: Callable) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`take` of a chunked source: each chunk of `idx` read once (through `chunk`), and its samples
        copied once, straight into place (a slice where they are consecutive: a batch in the stored order
        costs one copy of its samples)."""
        c = int(self.chunks)
        ascending = bool((np.diff(idx) >= 0).all())
        ids = idx // c
        if ascending:
            order = np.arange(idx.size)
        else:  # grouped by chunk, in their own order within one: a radix sort of the chunk numbers when they
            # fit 16 bits (5 ms for 800,000 samples, against 80-100 ms for sorting the indices themselves)
            order = np.argsort(ids.astype(np.uint16) if int(ids.max()) < 1 << 16 else ids, kind="stable")
            ids = ids[order]
        sorted_idx = idx if ascending else idx[order]
        bounds = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), idx.size]
        X = y = None
        for a, b in zip(bounds[:-1], bounds[1:]):
            i = int(ids[a])
            Xc, yc = chunk(i)
            rows = sorted_idx[a:b] - i * c
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            # consecutive samples (strictly ascending over as many rows as they are): a slice, no gather; a
            # repeated sample ([0, 0, 2]) spans as many rows and is no slice
            consecutive = ascending and hi - lo == b - a and (b - a < 2 or bool((np.diff(rows) > 0).all()))
            pick = slice(lo, hi) if consecutive else rows
            if X is None:
                X = np.empty((idx.size, *Xc.shape[1:]), dtype=Xc.dtype)
                y = None if yc is None else np.empty(idx.size, dtype=np.int64)
            where = slice(a, b) if ascending else order[a:b]
            X[where] = Xc[pick] if isinstance(pick, slice) else np.take(Xc, pick, axis=0)
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
