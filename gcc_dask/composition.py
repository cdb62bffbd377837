"""Which samples are coded together, and in which order: the composition of coding groups, and the batch layout.

The batch model (docs/pipeline.rst, section 'Batches, groups and blocks'):

* a **group** is K samples coded together; position k of the group sits on the data point α_k (α ascending);
* a **block** stacks B groups: coded input n of a batch is the (B, ...) array of the n-th coded sample of
  each of its groups, so one shard task evaluates f once on B samples;
* a **batch** is one block: K·B samples, N shard tasks, one cutoff, one decode, one chunk of the store.

The run's samples sit in *slots*: batch b owns slots ``[b·K·B, (b+1)·K·B)`` (one chunk of the store), and
within a batch of G groups the slots are position-major: local slot ``j`` holds position ``k = j // G`` of
group ``g = j % G``. So the batch's samples in slot order, reshaped to ``(K, G, ...)``, are the encoder's
input as they are (no copy), and the G samples of one position are contiguous: an uncoded or replicated
shard reads only its own block. A composition is the permutation ``order`` of the dataset's sample indices
over the slots (slot s holds sample ``order[s]``; the store's ``sample`` coordinate). Only the last batch
can hold fewer than K·B samples; its groups then lack their last positions, and the encode pads each short
group by repeating the group's last sample (:meth:`BatchLayout.to_blocks`; the padded outputs are dropped).

Policies (:func:`compose`), all deterministic for a seed and all blind to labels and to f:

``as_stored``
    the source's own order in the slots (slot s holds sample s): group g of a batch holds the samples
    ``G`` apart, starting at the batch's g-th.
``random``
    a seeded random permutation.
``pc1``
    sorted by the first principal component of the inputs; consecutive K samples form a group.
``similarity``
    a greedy nearest-neighbour chain over the inputs' leading principal components, cut into consecutive
    groups of K: similar inputs are coded together, and each group is ordered along the chain, so coded inputs
    (mixtures of neighbours on the chain) stay near the data. The chain runs within *windows* of consecutive
    samples (cost O(window · n · dims)) whose chains are concatenated, so a large source is never loaded
    whole: each window is read, projected and chained on its own (a Dask task each, when the pipeline
    passes a ``map_windows``). With a chunked source (a compressed Zarr array) the windows hold whole
    batches and whole chunks (:func:`window_unit`), so a batch's samples come from the few chunks of its
    window.

A policy's sequence (groups as consecutive runs) is put into slots by :meth:`BatchLayout.from_sequence`.
Pure NumPy: nothing here imports Dask, Zarr or the coding schemes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask._blas import one_blas_thread
from gcc_dask.composition_cache import CompositionCache, cache_key, window_digest
from gcc_dask.errors import ConfigError, SourceError
from gcc_dask.limits import MAX_FIT_SAMPLES, MAX_WINDOW

__all__ = [
    "POLICIES",
    "BatchLayout",
    "Projection",
    "chain_order",
    "compose",
    "fit_projection",
    "serial_map",
    "window_bounds",
    "window_unit",
]

POLICIES = ("as_stored", "random", "pc1", "similarity")
#: Samples per window of the ``similarity`` chain (rounded up to a multiple of K).
DEFAULT_WINDOW = 8192
#: Principal components the ``similarity`` and ``pc1`` policies compare samples on.
DEFAULT_DIMS = 32
#: Samples the principal components are fitted on (spread evenly over the dataset).
DEFAULT_FIT_SAMPLES = 4096


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name}: got {value!r}; expected an integer >= 1")
    return int(value)


# ------------------------------------------------------------------------------------------ the layout
@dataclass(frozen=True)
class BatchLayout:
    """Where every sample of a run sits: slots, batches, groups and positions (see the module docs).

    Parameters
    ----------
    num_samples : int
        n, samples in the run (>= 1).
    group_size : int
        K, samples per coding group (the code's ``num_inputs``).
    block_size : int
        B, groups per batch (one shard evaluates f on B samples at once).
    order : ndarray of int64, shape (n,), or None
        ``order[s]`` is the dataset index of the sample in slot s (a permutation of ``range(n)``); None means
        the identity (``as_stored``).

    Raises
    ------
    ConfigError
        A size below 1, or an ``order`` that is not a permutation of ``range(num_samples)``.
    """

    num_samples: int
    group_size: int
    block_size: int = 1
    order: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("num_samples", "group_size", "block_size"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        if self.order is not None:
            order = permutation_or_raise("order", self.order, self.num_samples, ConfigError)
            order.setflags(write=False)
            object.__setattr__(self, "order", order)

    @classmethod
    def from_sequence(cls, sequence: np.ndarray | None, group_size: int, block_size: int,
                      num_samples: int | None = None) -> BatchLayout:
        """The layout whose groups are consecutive runs of `sequence` (a composition policy's output).

        Batch b takes the ``b``-th run of K·B samples of the sequence; its G groups take consecutive runs of
        it, group g as many samples as it has slots (K, or fewer in a short last batch), in position order.
        ``sequence=None`` is the identity *sequence* (consecutive K samples form a group).
        """
        n = int(num_samples if sequence is None else len(sequence))
        seq = np.arange(n, dtype=np.int64) if sequence is None else np.asarray(sequence, dtype=np.int64)
        shell = cls(n, group_size, block_size)
        order = np.empty(n, dtype=np.int64)
        for b in range(shell.num_batches):
            start, stop = shell.batch_slots(b)
            g = shell.batch_groups(b)
            local = np.arange(stop - start)
            # slot j is position j // g of group j % g; within the batch, group-major order of the slots
            slot_of_rank = np.lexsort((local // g, local % g))
            order[start + slot_of_rank] = seq[start:stop]
        return cls(n, group_size, block_size, order)

    @property
    def batch_samples(self) -> int:
        """K·B, the slots of a full batch."""
        return self.group_size * self.block_size

    @property
    def num_batches(self) -> int:
        return -(-self.num_samples // self.batch_samples)

    @property
    def num_groups(self) -> int:
        return sum(self.batch_groups(b) for b in range(self.num_batches)) if self.num_batches else 0

    def batch_slots(self, batch: int) -> tuple[int, int]:
        """``[start, stop)`` slots of `batch` (``stop - start`` <= K·B; the last batch may be short)."""
        if not 0 <= batch < self.num_batches:
            raise ConfigError(f"batch: got {batch!r}; expected an integer in [0, {self.num_batches})")
        start = batch * self.batch_samples
        return start, min(start + self.batch_samples, self.num_samples)

    def batch_groups(self, batch: int) -> int:
        """G, the groups in `batch`: B, or fewer in a short last batch."""
        start, stop = self.batch_slots(batch)
        return -(-(stop - start) // self.group_size)

    def samples(self, batch: int) -> np.ndarray:
        """Dataset indices of the samples of `batch`, in slot order, int64 of shape (stop - start,)."""
        start, stop = self.batch_slots(batch)
        if self.order is None:
            return np.arange(start, stop, dtype=np.int64)
        return self.order[start:stop]

    def position_samples(self, batch: int, position: int) -> np.ndarray:
        """Dataset indices of position `position` of every group of `batch`, int64 of shape (G,): the block
        that an uncoded (or replicated) shard evaluates. A group without that position repeats its last one."""
        if not 0 <= position < self.group_size:
            raise ConfigError(f"position: got {position!r}; expected an integer in [0, {self.group_size})")
        samples = self.samples(batch)
        g = self.batch_groups(batch)
        local = _block_rows(samples.size, self.group_size)[position * g:(position + 1) * g]
        return samples[local]

    def sample_index(self) -> np.ndarray:
        """The dataset index of every slot, int64 of shape (n,) (the store's ``sample`` coordinate)."""
        return np.arange(self.num_samples, dtype=np.int64) if self.order is None else self.order

    def group_of_slot(self) -> tuple[np.ndarray, np.ndarray]:
        """(group, position) of every slot: int64 and int32 arrays of shape (n,); groups numbered over the run."""
        group = np.empty(self.num_samples, dtype=np.int64)
        position = np.empty(self.num_samples, dtype=np.int32)
        first = 0
        for b in range(self.num_batches):
            start, stop = self.batch_slots(b)
            g = self.batch_groups(b)
            local = np.arange(stop - start)
            group[start:stop] = first + local % g
            position[start:stop] = local // g
            first += g
        return group, position

    def to_blocks(self, x: np.ndarray) -> np.ndarray:
        """A batch's samples in slot order, ``(n_b, *shape)``, as the encoder's input ``(K, G, *shape)``.

        ``blocks[k, g]`` is position k of group g: a reshape (a view) for a full batch. In a short batch
        (`n_b` < K·B, G = ceil(n_b / K)) a group's missing positions repeat its last sample;
        :meth:`from_blocks` drops their outputs.
        """
        k, n_b = self.group_size, x.shape[0]
        if n_b % k:
            x = x[_block_rows(n_b, k)]
        return x.reshape((k, -(-n_b // k), *x.shape[1:]))

    @staticmethod
    def from_blocks(y: Any, n_real: int) -> Any:
        """The inverse of :meth:`to_blocks` on outputs: ``(K, G, *out)`` -> ``(n_real, *out)`` in slot order.

        Works on NumPy and CuPy arrays alike (``reshape`` only).
        """
        k, g = y.shape[0], y.shape[1]
        return y.reshape((k * g, *y.shape[2:]))[:n_real]


def _block_rows(n_b: int, k: int) -> np.ndarray:
    """For a batch of `n_b` samples in slot order, the row read for each of the K·G entries of its blocks:
    the identity for a full batch; in a short one a missing position repeats the group's previous one."""
    g = -(-n_b // k)
    rows = np.arange(k * g)
    for j in range(n_b, rows.size):
        rows[j] = rows[j - g]
    return rows


def is_permutation(order: Any) -> bool:
    """True if `order` is a 1-D integer array holding each of 0..n-1 exactly once (n = its length): one bool
    per entry, no sorted copy (a million-sample layout is checked without two more 8 MB arrays)."""
    order = np.asarray(order)
    if order.ndim != 1 or order.dtype.kind not in "iu":
        return False
    n = order.size
    if n and (order.min() < 0 or order.max() >= n):
        return False
    seen = np.zeros(n, dtype=bool)
    seen[order] = True
    return bool(seen.all())


def permutation_or_raise(name: str, values: Any, n: int, error: type[Exception]) -> np.ndarray:
    """`values` as an int64 array if it is a permutation of ``range(n)``, else `error` with one line that names
    `name`, what is wrong (the shape, a non-integer dtype, the first value out of range or repeated) and what
    is valid."""
    want = f"expected a permutation of range({n}) (integers, each once)"
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise error(f"{name}: {want}; got an array of shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise error(f"{name}: {want}; got dtype {arr.dtype} (cast integral values with .astype('int64'))")
    arr = arr.astype(np.int64, copy=False)
    if not is_permutation(arr):
        bad = np.flatnonzero((arr < 0) | (arr >= n))
        if bad.size:
            raise error(f"{name}: {want}; got {int(arr[bad[0]])} at position {int(bad[0])}")
        _, first, counts = np.unique(arr, return_index=True, return_counts=True)
        dup = int(np.flatnonzero(counts > 1)[0])
        raise error(f"{name}: {want}; got {int(arr[first[dup]])} more than once (first at position "
                    f"{int(first[dup])})")
    return arr


# ----------------------------------------------------------------------------------- features (PCA)
@dataclass(frozen=True)
class Projection:
    """A linear projection of flattened samples onto their leading principal components.

    ``features(x) = (x.reshape(n, -1) - mean) @ components.T``, computed in float32 (grouping needs no more):
    shape (n, dims).
    """

    mean: np.ndarray  # (d,) float64
    components: np.ndarray  # (dims, d) float64, orthonormal rows, by decreasing variance

    def features(self, x: np.ndarray) -> np.ndarray:
        """The projection of samples `x` of shape ``(n, *shape)``: float32 of shape (n, dims)."""
        flat = _finite_flat(x, np.float32)
        return (flat - self.mean.astype(np.float32)) @ self.components.T.astype(np.float32)


def _finite_flat(x: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """Samples flattened to rows of `dtype`, NaN/Inf read as 0: a non-finite input is grouped anyhow, and the
    encode of its batch reports it (``run.nan_policy``)."""
    flat = np.asarray(x, dtype=dtype).reshape(x.shape[0], -1)
    return flat if np.isfinite(flat).all() else np.nan_to_num(flat, nan=0.0, posinf=0.0, neginf=0.0)


def fit_projection(x: np.ndarray, dims: int = DEFAULT_DIMS, seed: int = 0) -> Projection:
    """Principal components of `x` (m samples, any shape) by a randomized SVD.

    The range of the centred data is found with a seeded Gaussian test matrix, two power iterations and
    oversampling by 10 (Halko, Martinsson, Tropp, SIAM Review 53(2), 2011, Algorithms 4.4 and 5.1): exact
    up to rounding when ``dims + 10 >= min(m, d)``, and O(m·d·dims) instead of an SVD's O(m·d·min(m, d)).

    Parameters
    ----------
    x : ndarray of shape ``(m, *shape)``
        The samples to fit on (m >= 1), any real dtype.
    dims : int
        Components to keep (fewer when ``min(m, d)`` is smaller).
    seed : int
        Seeds the test matrix.

    Returns
    -------
    Projection
    """
    flat = _finite_flat(x)
    mean = flat.mean(axis=0)
    a = flat - mean
    m, d = a.shape
    r = max(1, min(int(dims), m, d))
    p = min(r + 10, m, d)
    g = np.random.default_rng([int(seed), 0xC0DE]).standard_normal((d, p))
    q, _ = np.linalg.qr(a @ g)
    for _ in range(2):  # power iterations sharpen the spectrum's decay
        q, _ = np.linalg.qr(a.T @ q)
        q, _ = np.linalg.qr(a @ q)
    _, _, vt = np.linalg.svd(q.T @ a, full_matrices=False)
    comps = vt[:r]
    # a sign convention, so that the same data give the same components on every machine
    signs = np.sign(comps[np.arange(r), np.argmax(np.abs(comps), axis=1)])
    comps = comps * np.where(signs == 0, 1.0, signs)[:, None]
    return Projection(mean=mean, components=np.ascontiguousarray(comps))


# ---------------------------------------------------------------------------------------- the chain
def chain_order(features: np.ndarray) -> np.ndarray:
    """A greedy nearest-neighbour chain through `features`: a permutation of ``range(len(features))``.

    Starts at the sample with the smallest first feature (an extreme of the first principal component) and
    repeatedly steps to the nearest sample not visited yet (squared Euclidean distance; ties to the lowest
    index). O(n² · dims) time, O(n · dims) memory: the visited samples are dropped from the search whenever
    they make up a quarter of it, which saves about 40% of the work of searching all n at every step.

    A step is one pass over the features stored dimension by dimension (dims, n), into a buffer kept for the
    whole chain: 1.5x faster than the same step over rows of samples with a new array each time (8,192 MNIST
    features: 0.16 s against 0.25 s on one core), and the same chains on MNIST's and Fashion-MNIST's splits
    (data with exact duplicates can break their ties otherwise: 10 of 100,000 slots of the tiled bench data).

    Parameters
    ----------
    features : ndarray of shape (n, dims), float (compared in float32)

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    f = np.ascontiguousarray(features, dtype=np.float32)  # float32 halves the memory traffic of each step
    n = f.shape[0]
    order = np.empty(n, dtype=np.int64)
    if n == 0:
        return order
    ids = np.arange(n, dtype=np.int64)  # the sample of each column still searched (ascending: ties stay lowest)
    left = np.einsum("ij,ij->i", f, f)  # ||f_i||²; inf once visited
    cur = int(np.argmin(f[:, 0])) if f.shape[1] else 0  # a column of the arrays searched
    two_ft = np.ascontiguousarray((2.0 * f).T)  # (dims, n)
    dist = np.empty(n, dtype=np.float32)
    visited = 0  # columns of the arrays searched that are visited already
    for i in range(n):
        order[i] = ids[cur]
        left[cur] = np.inf
        visited += 1
        if i + 1 == n:
            break
        here = two_ft[:, cur] * np.float32(0.5)  # f_cur exactly (halving is exact in binary floating point)
        if 4 * visited >= ids.size and ids.size > 64:
            keep = np.isfinite(left)
            ids, left, two_ft = ids[keep], left[keep], np.ascontiguousarray(two_ft[:, keep])
            dist = dist[:ids.size]
            visited = 0
        # ||f_j - f_cur||² - ||f_cur||² = ||f_j||² - 2 f_j·f_cur: the same argmin
        np.dot(here, two_ft, out=dist)
        np.subtract(left, dist, out=dist)
        cur = int(dist.argmin())
    return order


def window_unit(group_size: int, block_size: int = 1, chunks: int | None = None, window: int = 0) -> int:
    """What the windows of :func:`compose` are a multiple of: K for a source without chunks; for a chunked
    source (:attr:`gcc_dask.sources.Source.chunks` = c) whole batches of K·B samples and, when the least common
    multiple of K·B and c is no longer than `window` (or one batch), whole chunks too.

    Windows that hold whole batches give every batch its samples from one window; windows that hold whole
    chunks too keep a chunk's samples in one window, so a worker reads a batch's chunks once and no batch of
    another window needs them (docs/pipeline.rst, section 'Reads that follow the chunks').

    Examples
    --------
    >>> window_unit(8, 512, chunks=512, window=8192)
    4096
    >>> window_unit(8, 512, chunks=1000, window=8192)  # lcm(4096, 1000) = 512,000 samples: batches only
    4096
    >>> window_unit(8, 512)
    8
    """
    k = _positive("group_size", group_size)
    if chunks is None:
        return k
    batch = k * _positive("block_size", block_size)
    both = math.lcm(batch, _positive("chunks", chunks))
    return both if both <= max(int(window), batch) else batch


def window_bounds(num_samples: int, window: int, group_size: int, unit: int | None = None) -> list[tuple[int, int]]:
    """``[start, stop)`` of the chain's windows: `window` rounded up to a multiple of `unit` (default K; see
    :func:`window_unit`), the last one short.

    A group never straddles two windows (windows hold whole groups; with a chunked source whole batches and,
    where it fits, whole chunks).
    """
    u = group_size if unit is None else int(unit)
    w = max(u, -(-int(window) // u) * u)
    return [(s, min(s + w, num_samples)) for s in range(0, num_samples, w)]


#: the largest squared feature norm the chain accepts: its distances ``||f_j||² - 2 f_j·f_cur`` then stay finite
#: in float32
_MAX_NORM2 = float(np.finfo(np.float32).max) / 4


def _checked_features(source: Any, projection: Projection, x: np.ndarray, index: np.ndarray | int) -> np.ndarray:
    """``projection.features(x)`` of samples `x` (dataset indices `index`, or ``index + arange(len(x))`` for an
    int), refused with one :class:`~gcc_dask.errors.SourceError` line naming the source and a sample whose
    features (or their squared norm, which the chain compares) overflow float32: such a sample cannot be
    compared with the others, and the chain would not be a permutation. The one named holds the largest value
    of those that overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = projection.features(x)
        f64 = f.astype(np.float64)
        norm2 = np.einsum("ij,ij->i", f64, f64)
    bad = ~np.isfinite(f).all(axis=1) | ~(norm2 <= _MAX_NORM2)
    if bad.any():
        with np.errstate(invalid="ignore"):
            flat = np.abs(np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1))
        top = np.where(np.isfinite(flat), flat, 0.0).max(axis=1, initial=0.0)
        i = int(np.flatnonzero(bad)[np.argmax(top[bad])])
        at = int(index[i]) if isinstance(index, np.ndarray) else int(index) + i
        raise SourceError(f"source: got values up to {top[i]:.3g} in sample {at} of "
                          f"{getattr(source, 'name', 'the source')!r}, too large to compose (its principal-component "
                          "features overflow float32); expected data on a scale the composition can compare: "
                          "scale the data (standardise it, say), or set composition.policy: random or as_stored")
    return f


def _window_chain(source: Any, projection: Projection, piece: int, bounds: tuple[int, int]
                  ) -> tuple[np.ndarray, str]:
    """Read one window of `source`, project it and chain it: dataset indices in chain order (int64), and the
    window's :func:`~gcc_dask.composition_cache.window_digest`.

    A window longer than `piece` samples (one that holds a whole batch longer than ``composition.window``) is
    chained in consecutive pieces of `piece` samples, concatenated: the chain's cost per sample stays that of
    ``composition.window``, whatever the batch size."""
    start, stop = bounds
    x, _ = source.read(start, stop)
    f = _checked_features(source, projection, x, start)
    if f.shape[0] <= piece:
        return start + chain_order(f), window_digest(x)
    chains = [start + p + chain_order(f[p:p + piece]) for p in range(0, f.shape[0], piece)]
    return np.concatenate(chains), window_digest(x)


def _window_pc1(source: Any, projection: Projection, bounds: tuple[int, int]) -> tuple[np.ndarray, str]:
    """The first principal component of one window's samples, float64 of shape (stop - start,), and the
    window's digest."""
    start, stop = bounds
    x, _ = source.read(start, stop)
    return _checked_features(source, projection, x, start)[:, 0], window_digest(x)


def _window_digest(source: Any, bounds: tuple[int, int]) -> str:
    """The :func:`~gcc_dask.composition_cache.window_digest` of one window of `source` (a cache check)."""
    x, _ = source.read(*bounds)
    return window_digest(x)


def serial_map(func: Callable, items: Sequence, *shared: Any) -> list:
    """``[func(*shared, item) for item in items]``: the default ``map_windows`` of :func:`compose`."""
    return [func(*shared, item) for item in items]


# ------------------------------------------------------------------------------------------ compose
def compose(
    source: Any,
    *,
    group_size: int,
    block_size: int = 1,
    policy: str = "similarity",
    seed: int = 0,
    window: int = DEFAULT_WINDOW,
    dims: int = DEFAULT_DIMS,
    fit_samples: int = DEFAULT_FIT_SAMPLES,
    map_windows: Callable[..., list] | None = None,
    run_task: Callable[..., Any] | None = None,
    cache: CompositionCache | None = None,
    say: Callable[[str], None] | None = None,
) -> np.ndarray | None:
    """Compose a source's samples into coding groups and batches: a :class:`BatchLayout`.

    Parameters
    ----------
    source : gcc_dask.sources.Source
        Read with ``read(start, stop)`` (windows) and ``take(indices)`` (the PCA fit); labels are never used.
    group_size : int
        K.
    block_size : int
        B, groups per batch.
    policy : {"as_stored", "random", "pc1", "similarity"}
        See the module docs.
    seed : int
        Seeds ``random`` and the randomized PCA.
    window : int
        Samples per window of the ``similarity`` chain and of the ``pc1`` reads (1 to
        :data:`~gcc_dask.limits.MAX_WINDOW`; rounded up to a multiple of :func:`window_unit`: K, or for a source
        with :attr:`~gcc_dask.sources.Source.chunks` whole batches and, where they fit, whole chunks).
    dims : int
        Principal components compared (>= 1).
    fit_samples : int
        Samples the principal components are fitted on, spread evenly over the source (1 to
        :data:`~gcc_dask.limits.MAX_FIT_SAMPLES`).
    map_windows : callable, optional
        ``map_windows(func, items, *shared) -> [func(*shared, item) for item in items]``, e.g. running each
        window as a Dask task (the pipeline's :func:`gcc_dask.runtime.cluster.map_on_cluster`); default:
        :func:`serial_map`, one window after the other in this process.
    run_task : callable, optional
        ``run_task(func, *args) -> func(*args)``, where the principal components are fitted (reading
        `fit_samples` samples), e.g. as one Dask task, for a source that is read on the workers only (a dask
        array: its ``remote`` attribute); default: in this process.
    cache : gcc_dask.composition_cache.CompositionCache, optional
        Where a ``similarity`` or ``pc1`` composition is kept, keyed by these parameters and checked against
        the windows' content: a second call over the same data reads and digests the windows (through
        `map_windows`) instead of composing them.
    say : callable, optional
        ``say(line)`` is told when the composition came from `cache`.

    Returns
    -------
    BatchLayout
        Its ``order`` is None for ``as_stored`` (the identity).

    Raises
    ------
    ConfigError
        An unknown policy, a parameter below 1, or a window or fit size above its bound.
    SourceError
        Samples too large to compare (their features overflow; the message names the source and the sample).
    """
    if policy not in POLICIES:
        raise ConfigError(f"composition.policy: got {policy!r}; expected one of {', '.join(POLICIES)}")
    for name, value in (("group_size", group_size), ("block_size", block_size), ("composition.window", window),
                        ("composition.dims", dims), ("composition.fit_samples", fit_samples)):
        _positive(name, value)
    for name, value, limit in (("composition.window", window, MAX_WINDOW),
                               ("composition.fit_samples", fit_samples, MAX_FIT_SAMPLES)):
        if int(value) > limit:
            raise ConfigError(f"{name}: got {value!r}; expected an integer from 1 to {limit:,} (samples read at once)")
    n = int(source.num_samples)
    if policy == "as_stored":
        return BatchLayout(n, group_size, block_size)
    if policy == "random":
        sequence = np.random.default_rng([int(seed), 0x5EED]).permutation(n).astype(np.int64)
        return BatchLayout.from_sequence(sequence, group_size, block_size)
    chunks = getattr(source, "chunks", None)
    bounds = composition_items(n, window, group_size, window_unit(group_size, block_size, chunks, window), policy,
                               chunks)
    piece = _piece(window, group_size)
    run = map_windows or serial_map
    key = None
    if cache is not None:
        key = cache_key(policy=policy, n=n, group_size=int(group_size), block_size=int(block_size),
                        bounds=[list(b) for b in bounds], window=int(window), dims=int(dims),
                        fit_samples=int(fit_samples), seed=int(seed), shape=list(source.sample_shape),
                        dtype=str(source.dtype), source=getattr(source, "name", ""))
        entry = cache.load(key, n)
        if entry is not None and tuple(run(_window_digest, bounds, source)) == entry.digests:
            if say is not None:
                say(f"composition: the same data and parameters were composed before; reused from {cache.folder}")
            return BatchLayout.from_sequence(entry.sequence, group_size, block_size)
    with one_blas_thread():
        projection = (run_task or _call)(_fit_on, source, _fit_indices(n, int(fit_samples)), int(dims), int(seed))
        if policy == "pc1":
            parts = run(_window_pc1, bounds, source, projection)
            sequence = np.argsort(np.concatenate([p for p, _ in parts]), kind="stable").astype(np.int64)
        else:
            parts = run(_window_chain, bounds, source, projection, piece)
            sequence = np.concatenate([p for p, _ in parts]).astype(np.int64)
    if cache is not None:
        cache.save(key, sequence, tuple(d for _, d in parts))
    return BatchLayout.from_sequence(sequence, group_size, block_size)



def _call(func: Callable[..., Any], *args: Any) -> Any:
    return func(*args)


def _fit_on(source: Any, indices: np.ndarray, dims: int, seed: int) -> Projection:
    """The projection fitted on the samples at `indices` (read with ``source.take``); refused with one line when
    an extreme sample among them spoils it for all (:func:`_checked_features`)."""
    x_fit, _ = source.take(indices)
    with np.errstate(over="ignore", invalid="ignore"):
        projection = fit_projection(x_fit, dims=dims, seed=seed)
    _checked_features(source, projection, x_fit, indices)
    return projection


def _fit_indices(n: int, fit_samples: int, runs: int = 32) -> np.ndarray:
    """The samples the projection is fitted on: `runs` contiguous runs spread evenly over the dataset (cheap
    slices for any source), `fit_samples` in all, or everything when the dataset is that small."""
    if n <= fit_samples:
        return np.arange(n, dtype=np.int64)
    runs = min(runs, fit_samples)
    length = fit_samples // runs
    starts = np.linspace(0, n - length, runs).round().astype(np.int64)
    return np.unique((starts[:, None] + np.arange(length)[None, :]).ravel())


def _piece(window: int, group_size: int) -> int:
    """The longest run of samples one chain goes through: `window` rounded up to whole groups of `group_size`."""
    return -(-int(window) // int(group_size)) * int(group_size)


#: a task of the chain over a chunked source holds at least this many of its chunks (a piece that cut chunks
#: finer would decompress each of them once per piece)
CHUNKS_PER_TASK = 4


def composition_items(num_samples: int, window: int, group_size: int, unit: int | None = None,
                      policy: str = "similarity", chunks: int | None = None) -> list[tuple[int, int]]:
    """``[start, stop)`` of each task of :func:`compose`: the windows (:func:`window_bounds`), and for the
    ``similarity`` chain each window cut into runs of whole pieces of `window` samples (whole groups), so that the
    workers share the chaining evenly when a window holds a batch longer than `window`: one piece a task, or for a
    source with `chunks` (samples per chunk) as many pieces as hold :data:`CHUNKS_PER_TASK` chunks. The chains are
    those of chaining each window's pieces in turn (:func:`_window_chain`)."""
    bounds = window_bounds(num_samples, window, group_size, unit)
    if policy != "similarity":
        return bounds
    piece = _piece(window, group_size)
    run = piece * max(1, -(-CHUNKS_PER_TASK * int(chunks) // piece)) if chunks else piece
    return [(s, min(s + run, stop)) for start, stop in bounds for s in range(start, stop, run)]
