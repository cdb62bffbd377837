"""Which samples are coded together, and in which order: the composition of coding groups, and the batch layout.

The batch model (groups, blocks, batches) and the slots the samples sit in are
:class:`~gcc_dask.batch_layout.BatchLayout`'s (:mod:`gcc_dask.batch_layout`; docs/pipeline.rst, section 'Batches,
groups and blocks'). A composition is the permutation ``order`` of the dataset's sample indices over the slots
(slot s holds sample ``order[s]``; the store's ``sample`` coordinate).

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
``tree``
    the same windows (and pieces) as ``similarity``, each split by a k-d tree on the inputs' leading principal
    components into leaves of at most ``leaf`` samples (whole groups), each leaf ordered by the greedy chain
    until half of it is left, the leftovers of neighbouring leaves chained together up the tree
    (:func:`~gcc_dask.composition_similarity.tree_order`): O(leaf · dims) work per sample, whatever the
    window, so a window can be large and cheap. Its groups are looser than the chain's over the same window.
``kd``
    the same windows and pieces, each split by the same k-d tree down to leaves of one group of K, with no
    chain, each group's samples sorted along its widest component
    (:func:`~gcc_dask.composition_similarity.kd_order`): O(dims · log(window / K)) work per sample, about a
    microsecond, for an f that costs about as little. Its groups are looser than the tree's.

A policy's sequence (groups as consecutive runs) is put into slots by
:meth:`~gcc_dask.batch_layout.BatchLayout.from_sequence`. The features, the chain and the tree of ``pc1``,
``similarity`` and ``tree`` are :mod:`gcc_dask.composition_similarity`'s. Pure NumPy: nothing here imports Dask,
Zarr or the coding schemes.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask._blas import one_blas_thread
from gcc_dask._digest import files_state
from gcc_dask.batch_layout import BatchLayout, _positive, is_permutation, permutation_or_raise  # noqa: F401
from gcc_dask.composition_cache import CompositionCache, cache_key, window_digest
from gcc_dask.composition_similarity import (  # noqa: F401
    DEFAULT_DIMS,
    DEFAULT_LEAF,
    Projection,
    chain_order,
    fit_projection,
    kd_order,
    tree_order,
)
from gcc_dask.errors import ConfigError, SourceError
from gcc_dask.limits import MAX_FIT_SAMPLES, MAX_WINDOW

# BatchLayout, is_permutation and permutation_or_raise (batch_layout), Projection, fit_projection, chain_order,
# tree_order, DEFAULT_DIMS and DEFAULT_LEAF (composition_similarity) are importable from here too
__all__ = [
    "AUTO_CHAIN_MIN_SECONDS_PER_ROW",
    "COMPOSED",
    "POLICIES",
    "auto_composition",
    "compose",
    "composition_key",
    "serial_map",
    "window_bounds",
    "window_unit",
]

POLICIES = ("as_stored", "random", "pc1", "similarity", "tree", "kd")
#: the policies that order each window in pieces of ``window`` samples (:func:`composition_items`)
ORDERED = ("similarity", "tree", "kd")


#: the policies that read and project the windows: a pass over the data, kept in the composition cache
COMPOSED = ("pc1", *ORDERED)
#: Samples per window of the ``similarity`` chain and the ``tree`` (rounded up to a multiple of K).
DEFAULT_WINDOW = 8192
#: Samples the principal components are fitted on (spread evenly over the dataset).
DEFAULT_FIT_SAMPLES = 4096


#: ``composition.policy: auto`` chains (``similarity``) when f costs at least this many seconds a sample, and
#: takes the ``tree`` below it: the chain costs about 10-20 µs a sample on one core (windows of 8,192, 32
#: components), the tree 2-5 µs with groups almost as close, so for a cheaper f the chain would cost the run
#: several times f itself (docs/pipeline.rst, section 'Composition')
AUTO_CHAIN_MIN_SECONDS_PER_ROW = 5e-6
#: ... and the ``tree`` from this many seconds a sample, ``kd`` (about 0.7 µs a sample, looser groups) below it
AUTO_TREE_MIN_SECONDS_PER_ROW = 2e-6


def auto_composition(seconds_per_row: float | None, num_samples: int | None = None,
                     window: int = DEFAULT_WINDOW) -> str:
    """The policy ``composition.policy: auto`` takes for an f of `seconds_per_row` (its measured cost a sample,
    :attr:`~gcc_dask.sizing.FCost.seconds_per_row`; None: not measured) over `num_samples` samples:
    ``similarity`` from :data:`AUTO_CHAIN_MIN_SECONDS_PER_ROW` up, when not measured, and for a source of at
    most one `window` (chained in a fraction of a second, whatever f costs); otherwise ``tree`` from
    :data:`AUTO_TREE_MIN_SECONDS_PER_ROW` up and ``kd`` below: the composition costs about what f does, or less.

    Examples
    --------
    >>> auto_composition(25e-6, 200_000), auto_composition(3e-6, 200_000), auto_composition(0.5e-6, 200_000)
    ('similarity', 'tree', 'kd')
    >>> auto_composition(None, 200_000), auto_composition(0.5e-6, 8192)
    ('similarity', 'similarity')
    """
    if seconds_per_row is None or seconds_per_row >= AUTO_CHAIN_MIN_SECONDS_PER_ROW:
        return "similarity"
    if num_samples is not None and num_samples <= window:
        return "similarity"
    return "tree" if seconds_per_row >= AUTO_TREE_MIN_SECONDS_PER_ROW else "kd"


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
        # in float32: below _MAX_NORM2 neither a square nor the sum overflows, and a NaN or Inf feature makes
        # the norm NaN or Inf, so this one comparison refuses both (a pass in float64 cost 0.3 µs a sample)
        norm2 = np.einsum("ij,ij->i", f, f)
    bad = ~(norm2 <= _MAX_NORM2)
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


def _window_chain(source: Any, projection: Projection, piece: int, order: Callable[[np.ndarray], np.ndarray],
                  bounds: tuple[int, int]) -> tuple[np.ndarray, str]:
    """Read one window of `source`, project it and order it with `order` (:func:`chain_order` for ``similarity``,
    :func:`tree_order` for ``tree``): dataset indices in that order (int64), and the window's
    :func:`~gcc_dask.composition_cache.window_digest`.

    A window longer than `piece` samples (one that holds a whole batch longer than ``composition.window``) is
    ordered in consecutive pieces of `piece` samples, concatenated: the chain's cost per sample stays that of
    ``composition.window``, whatever the batch size."""
    start, stop = bounds
    x, _ = source.read(start, stop)
    f = _checked_features(source, projection, x, start)
    if f.shape[0] <= piece:
        return start + order(f), window_digest(x)
    chains = [start + p + order(f[p:p + piece]) for p in range(0, f.shape[0], piece)]
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
    leaf: int = DEFAULT_LEAF,
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
    policy : {"as_stored", "random", "pc1", "similarity", "tree", "kd"}
        See the module docs.
    seed : int
        Seeds ``random`` and the randomized PCA.
    window : int
        Samples per window of the ``similarity`` chain and the ``tree``, and of the ``pc1`` reads (1 to
        :data:`~gcc_dask.limits.MAX_WINDOW`; rounded up to a multiple of :func:`window_unit`: K, or for a source
        with :attr:`~gcc_dask.sources.Source.chunks` whole batches and, where they fit, whole chunks).
    dims : int
        Principal components compared (>= 1).
    fit_samples : int
        Samples the principal components are fitted on, spread evenly over the source (1 to
        :data:`~gcc_dask.limits.MAX_FIT_SAMPLES`).
    leaf : int
        Most samples per leaf of the ``tree`` policy (1 to :data:`~gcc_dask.limits.MAX_WINDOW`; rounded up to
        whole groups of K): its work per sample is O(leaf · dims). Ignored by the other policies.
    map_windows : callable, optional
        ``map_windows(func, items, *shared) -> [func(*shared, item) for item in items]``, e.g. running each
        window as a Dask task (the pipeline's :func:`gcc_dask.runtime.cluster.map_on_cluster`); default:
        :func:`serial_map`, one window after the other in this process.
    run_task : callable, optional
        ``run_task(func, *args) -> func(*args)``, where the principal components are fitted (reading
        `fit_samples` samples), e.g. as one Dask task, for a source that is read on the workers only (a dask
        array: its ``remote`` attribute); default: in this process.
    cache : gcc_dask.composition_cache.CompositionCache, optional
        Where a ``similarity``, ``tree`` or ``pc1`` composition is kept, keyed by these parameters (`leaf` too for
        ``tree``) and checked against the windows' content: a second call over the same data reads and digests
        the windows (through `map_windows`) instead of composing them.
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
                        ("composition.dims", dims), ("composition.fit_samples", fit_samples),
                        ("composition.leaf", leaf)):
        _positive(name, value)
    for name, value, limit in (("composition.window", window, MAX_WINDOW),
                               ("composition.fit_samples", fit_samples, MAX_FIT_SAMPLES),
                               ("composition.leaf", leaf, MAX_WINDOW)):
        if int(value) > limit:
            raise ConfigError(f"{name}: got {value!r}; expected an integer from 1 to {limit:,} (samples read at once)")
    n = int(source.num_samples)
    if policy == "as_stored":
        return BatchLayout(n, group_size, block_size)
    if policy == "random":
        sequence = np.random.default_rng([int(seed), 0x5EED]).permutation(n).astype(np.int64)
        return BatchLayout.from_sequence(sequence, group_size, block_size)
    bounds = _bounds(source, group_size, block_size, policy, window)
    piece = _piece(window, group_size)
    run = map_windows or serial_map
    key = None
    stored = None
    if cache is not None:
        key = composition_key(source, group_size=group_size, block_size=block_size, policy=policy, seed=seed,
                              window=window, dims=dims, fit_samples=fit_samples, leaf=leaf)
        entry = cache.load(key, n)
        stored = _stored_state(source)
        if entry is not None and entry.files and stored is not None and stored[0] == entry.files:
            if say is not None:
                say(f"composition: the same data (its files unchanged) and parameters were composed before; "
                    f"reused from {cache.folder}")
            return BatchLayout.from_sequence(entry.sequence, group_size, block_size)
        if entry is not None:
            started = time.time_ns()
            if tuple(run(_window_digest, bounds, source)) == entry.digests:
                if say is not None:
                    say("composition: the same data and parameters were composed before; reused from "
                        f"{cache.folder}")
                files = _vouched(stored, _stored_state(source), started)
                if files:  # the next run checks the files, not the samples
                    cache.save(key, entry.sequence, entry.digests, files)
                return BatchLayout.from_sequence(entry.sequence, group_size, block_size)
    started = time.time_ns()
    with one_blas_thread():
        fit = _fit_indices(n, int(fit_samples), chunks=getattr(source, "chunks", None))
        projection = (run_task or _call)(_fit_on, source, fit, int(dims), int(seed))
        if policy == "pc1":
            parts = run(_window_pc1, bounds, source, projection)
            sequence = np.argsort(np.concatenate([p for p, _ in parts]), kind="stable").astype(np.int64)
        else:
            order = {"similarity": chain_order,
                     "tree": functools.partial(tree_order, leaf=int(leaf), group_size=int(group_size)),
                     "kd": functools.partial(kd_order, group_size=int(group_size))}[policy]
            parts = run(_window_chain, bounds, source, projection, piece, order)
            sequence = np.concatenate([p for p, _ in parts]).astype(np.int64)
    if cache is not None:
        cache.save(key, sequence, tuple(d for _, d in parts), _vouched(stored, _stored_state(source), started))
    return BatchLayout.from_sequence(sequence, group_size, block_size)


#: files modified this close before a read (or after it) are not vouched for by their sizes and times: the file
#: system's timestamps are that coarse at worst (git's 'racily clean' files), so a rewrite could keep both
RACY_MARGIN_NS = 2_000_000_000


def _stored_state(source: Any) -> tuple[str, int] | None:
    """:func:`~gcc_dask._digest.files_state` of the source's :meth:`~gcc_dask.sources.Source.stored_files`; None
    when it names none or they cannot be read."""
    files = getattr(source, "stored_files", list)()
    if not files:
        return None
    try:
        return files_state(files)
    except OSError:
        return None


def _vouched(before: tuple[str, int] | None, after: tuple[str, int] | None, read_at_ns: int) -> str:
    """The files digest an entry keeps: the state of the stored files when it was the same before and after the
    samples were read (from `read_at_ns`) and its newest file was older than the read by
    :data:`RACY_MARGIN_NS`; else ``""`` (the next run checks the samples)."""
    if before is None or before != after or before[1] >= read_at_ns - RACY_MARGIN_NS:
        return ""
    return before[0]



def _bounds(source: Any, group_size: int, block_size: int, policy: str, window: int) -> list[tuple[int, int]]:
    """The windows (or, for ``pc1``, the read items) :func:`compose` works on."""
    chunks = getattr(source, "chunks", None)
    unit = window_unit(group_size, block_size, chunks, window)
    return composition_items(int(source.num_samples), window, group_size, unit, policy, chunks)


def composition_key(source: Any, *, group_size: int, block_size: int, policy: str, seed: int = 0,
                    window: int = DEFAULT_WINDOW, dims: int = DEFAULT_DIMS,
                    fit_samples: int = DEFAULT_FIT_SAMPLES, leaf: int = DEFAULT_LEAF) -> str:
    """The :class:`~gcc_dask.composition_cache.CompositionCache` key of :func:`compose`'s ``similarity``, ``tree``,
    ``kd`` or ``pc1`` composition of `source` with these parameters (the same arguments; nothing of the source is read:
    an entry found under it is still checked against the windows' content). `leaf` is in the key of ``tree``
    only (the other policies ignore it, and keep the keys they had)."""
    bounds = _bounds(source, group_size, block_size, policy, window)
    return cache_key(policy=policy, n=int(source.num_samples), group_size=int(group_size),
                     block_size=int(block_size), bounds=[list(b) for b in bounds], window=int(window),
                     dims=int(dims), fit_samples=int(fit_samples), seed=int(seed),
                     shape=list(source.sample_shape), dtype=str(source.dtype), source=getattr(source, "name", ""),
                     **({"leaf": int(leaf)} if policy == "tree" else {}))


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


def _fit_indices(n: int, fit_samples: int, runs: int = 32, chunks: int | None = None) -> np.ndarray:
    """The samples the projection is fitted on: `runs` contiguous runs spread evenly over the dataset (cheap
    slices for any source), `fit_samples` in all, or everything when the dataset is that small.

    For a source with `chunks` (samples per chunk, a compressed Zarr array) the runs lie in at most
    :data:`FIT_CHUNKS` whole chunks spread evenly over it, as many runs spread over each: runs spread over
    the whole source would decompress every chunk of it for a few thousand samples (2,000,000 rows of 32 floats
    in chunks of 100,000: 20 chunks, 1.5 s of one worker while the others wait for the projection)."""
    if n <= fit_samples:
        return np.arange(n, dtype=np.int64)
    runs = min(runs, fit_samples)
    length = fit_samples // runs
    c = int(chunks) if chunks else 0
    few = min(FIT_CHUNKS, runs)  # chunks picked: fewer for fewer runs than FIT_CHUNKS
    per = runs // few  # runs in each chunk picked: `few` * `per` <= `runs`, so at most fit_samples in all
    if c >= per * length and n // c > FIT_CHUNKS:  # whole chunks picked (a short last one is left out)
        picked = np.linspace(0, n // c - 1, few).round().astype(np.int64)
        starts = (picked[:, None] * c + np.linspace(0, c - length, per).round()[None, :]).ravel().astype(np.int64)
    else:
        starts = np.linspace(0, n - length, runs).round().astype(np.int64)
    return np.unique((starts[:, None] + np.arange(length)[None, :]).ravel())


#: the most chunks of a chunked source the projection's samples are read from (:func:`_fit_indices`)
FIT_CHUNKS = 8


def _piece(window: int, group_size: int) -> int:
    """The longest run of samples one chain goes through: `window` rounded up to whole groups of `group_size`."""
    return -(-int(window) // int(group_size)) * int(group_size)


#: a task of the chain over a chunked source holds at least this many of its chunks (a piece that cut chunks
#: finer would decompress each of them once per piece)
CHUNKS_PER_TASK = 4


def composition_items(num_samples: int, window: int, group_size: int, unit: int | None = None,
                      policy: str = "similarity", chunks: int | None = None) -> list[tuple[int, int]]:
    """``[start, stop)`` of each task of :func:`compose`: the windows (:func:`window_bounds`), and for the
    ``similarity`` chain and the ``tree`` each window cut into runs of whole pieces of `window` samples (whole
    groups), so that the workers share the ordering evenly when a window holds a batch longer than `window`: one
    piece a task, or for a source with `chunks` (samples per chunk) as many pieces as hold
    :data:`CHUNKS_PER_TASK` chunks. The orders are those of ordering each window's pieces in turn
    (:func:`_window_chain`)."""
    bounds = window_bounds(num_samples, window, group_size, unit)
    if policy not in ORDERED:
        return bounds
    piece = _piece(window, group_size)
    run = piece * max(1, -(-CHUNKS_PER_TASK * int(chunks) // piece)) if chunks else piece
    return [(s, min(s + run, stop)) for start, stop in bounds for s in range(start, stop, run)]
