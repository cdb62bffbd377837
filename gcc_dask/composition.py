"""Which samples are coded together, and in which order: the composition of coding groups, and the batch layout.

The batch model (docs/pipeline.rst, section 'Batches, groups and blocks'):

* a **group** is K samples coded together; position k of the group sits on the data point α_k (α ascending);
* a **block** stacks B groups: coded input n of a batch is the (B, ...) array of the n-th coded sample of
  each of its groups, so one shard task evaluates f once on B samples;
* a **batch** is one block: K·B samples, N shard tasks, one cutoff, one decode, one chunk of the store.

A composition is a permutation ``order`` of the dataset's sample indices. The run's *slot* s holds sample
``order[s]``; group g is slots ``[g·K, (g+1)·K)`` (position k = slot g·K + k) and batch b is slots
``[b·K·B, (b+1)·K·B)``. Only the last group of a dataset can be short (its encode pads it by repeating its
last sample) and only the last batch can hold fewer than B groups. :class:`BatchLayout` turns a slot into
(batch, group, position) and back; it is computed once and stored with the run, so a resume reuses it.

Policies (:func:`compose`), all deterministic for a seed and all blind to labels and to f:

``as_stored``
    the source's own order (slot s holds sample s).
``random``
    a seeded random permutation.
``pc1``
    sorted by the first principal component of the inputs.
``similarity``
    a greedy nearest-neighbour chain over the inputs' leading principal components, cut into consecutive
    groups of K: similar inputs are coded together, and each group is ordered along the chain, so coded inputs
    (mixtures of neighbours on the chain) stay near the data. The chain runs within *windows* of consecutive
    samples (cost O(window · n · dims)) whose chains are concatenated, so a large source is never loaded
    whole: each window is read, projected and chained on its own (a Dask task each, when the pipeline
    passes a ``map_windows``).

Pure NumPy: nothing here imports Dask, Zarr or the coding schemes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask.errors import ConfigError

__all__ = [
    "POLICIES",
    "BatchLayout",
    "Projection",
    "chain_order",
    "compose",
    "fit_projection",
    "serial_map",
    "window_bounds",
]

POLICIES = ("as_stored", "random", "pc1", "similarity")
#: Samples per window of the ``similarity`` chain (rounded up to a multiple of K).
DEFAULT_WINDOW = 8192
#: Principal components the ``similarity`` and ``pc1`` policies compare samples on.
DEFAULT_DIMS = 32
#: Samples the principal components are fitted on (spread evenly over the dataset).
DEFAULT_FIT_SAMPLES = 4096


# ------------------------------------------------------------------------------------------ the layout
@dataclass(frozen=True)
class BatchLayout:
    """Where every sample of a run sits: slot -> (batch, group, position), and the batches' samples.

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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name}: got {value!r}; expected an integer >= 1")
            object.__setattr__(self, name, int(value))
        if self.order is not None:
            order = np.asarray(self.order, dtype=np.int64)
            if order.shape != (self.num_samples,) or not _is_permutation(order):
                raise ConfigError(f"order: expected a permutation of range({self.num_samples}); got an array "
                                  f"of shape {order.shape}")
            order.setflags(write=False)
            object.__setattr__(self, "order", order)

    @property
    def batch_samples(self) -> int:
        """K·B, the slots of a full batch."""
        return self.group_size * self.block_size

    @property
    def num_batches(self) -> int:
        return -(-self.num_samples // self.batch_samples)

    @property
    def num_groups(self) -> int:
        return -(-self.num_samples // self.group_size)

    def batch_slots(self, batch: int) -> tuple[int, int]:
        """``[start, stop)`` slots of `batch` (``stop - start`` <= K·B; the last batch may be short)."""
        if not 0 <= batch < self.num_batches:
            raise ConfigError(f"batch: got {batch!r}; expected an integer in [0, {self.num_batches})")
        start = batch * self.batch_samples
        return start, min(start + self.batch_samples, self.num_samples)

    def batch_groups(self, batch: int) -> int:
        """Groups in `batch`: B, or fewer in a short last batch."""
        start, stop = self.batch_slots(batch)
        return -(-(stop - start) // self.group_size)

    def samples(self, batch: int) -> np.ndarray:
        """Dataset indices of the samples of `batch`, in slot order, int64 of shape (stop - start,)."""
        start, stop = self.batch_slots(batch)
        if self.order is None:
            return np.arange(start, stop, dtype=np.int64)
        return self.order[start:stop]

    def sample_index(self) -> np.ndarray:
        """The dataset index of every slot, int64 of shape (n,) (the store's ``sample`` coordinate)."""
        return np.arange(self.num_samples, dtype=np.int64) if self.order is None else self.order

    def group_of_slot(self) -> tuple[np.ndarray, np.ndarray]:
        """(group, position) of every slot: int64 and int32 arrays of shape (n,)."""
        s = np.arange(self.num_samples, dtype=np.int64)
        return s // self.group_size, (s % self.group_size).astype(np.int32)

    def to_blocks(self, x: np.ndarray) -> np.ndarray:
        """A batch's samples in slot order, ``(n_b, *shape)``, as the encoder's input ``(K, G, *shape)``.

        ``blocks[k, g]`` is position k of group g; a short last group is padded by repeating its last
        sample (the padded outputs are dropped by :meth:`from_blocks`).
        """
        k = self.group_size
        n_b = x.shape[0]
        g = -(-n_b // k)
        if g * k > n_b:
            x = np.concatenate([x, np.repeat(x[-1:], g * k - n_b, axis=0)])
        return np.swapaxes(x.reshape((g, k, *x.shape[1:])), 0, 1)

    @staticmethod
    def from_blocks(y: Any, n_real: int) -> Any:
        """The inverse of :meth:`to_blocks` on outputs: ``(K, G, *out)`` -> ``(n_real, *out)`` in slot order.

        Works on NumPy and CuPy arrays alike (``swapaxes``/``reshape`` only).
        """
        k, g = y.shape[0], y.shape[1]
        return y.swapaxes(0, 1).reshape((g * k, *y.shape[2:]))[:n_real]


def _is_permutation(order: np.ndarray) -> bool:
    n = order.size
    if n and (order.min() < 0 or order.max() >= n):
        return False
    seen = np.zeros(n, dtype=bool)
    seen[order] = True
    return bool(seen.all())


# ----------------------------------------------------------------------------------- features (PCA)
@dataclass(frozen=True)
class Projection:
    """A linear projection of flattened samples onto their leading principal components.

    ``features(x) = (x.reshape(n, -1) - mean) @ components.T``: float64 of shape (n, dims).
    """

    mean: np.ndarray  # (d,) float64
    components: np.ndarray  # (dims, d) float64, orthonormal rows, by decreasing variance

    def features(self, x: np.ndarray) -> np.ndarray:
        return (_finite_flat(x) - self.mean) @ self.components.T


def _finite_flat(x: np.ndarray) -> np.ndarray:
    """Samples flattened to float64 rows, NaN/Inf read as 0: a non-finite input is grouped anyhow, and the
    encode of its batch reports it (``run.nan_policy``)."""
    flat = np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)
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
    index). O(n² · dims) time, O(n · dims) memory.

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
    left = np.einsum("ij,ij->i", f, f)  # ||f_i||²; inf once visited
    cur = int(np.argmin(f[:, 0])) if f.shape[1] else 0
    two_f = 2.0 * f
    for i in range(n):
        order[i] = cur
        left[cur] = np.inf
        if i + 1 < n:
            # ||f_j - f_cur||² - ||f_cur||² = ||f_j||² - 2 f_j·f_cur: the same argmin
            cur = int(np.argmin(left - two_f @ f[cur]))
    return order


def window_bounds(num_samples: int, window: int, group_size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of the chain's windows: `window` rounded up to a multiple of K, the last one short.

    A group never straddles two windows (windows hold whole groups).
    """
    w = max(group_size, -(-int(window) // group_size) * group_size)
    return [(s, min(s + w, num_samples)) for s in range(0, num_samples, w)]


def _window_chain(source: Any, projection: Projection, bounds: tuple[int, int]) -> np.ndarray:
    """Read one window of `source`, project it and chain it: dataset indices in chain order (int64)."""
    start, stop = bounds
    x, _ = source.read(start, stop)
    return start + chain_order(projection.features(x))


def _window_pc1(source: Any, projection: Projection, bounds: tuple[int, int]) -> np.ndarray:
    """The first principal component of one window's samples, float64 of shape (stop - start,)."""
    start, stop = bounds
    x, _ = source.read(start, stop)
    return projection.features(x)[:, 0]


def serial_map(func: Callable, items: Sequence, *shared: Any) -> list:
    """``[func(*shared, item) for item in items]``: the default ``map_windows`` of :func:`compose`."""
    return [func(*shared, item) for item in items]


# ------------------------------------------------------------------------------------------ compose
def compose(
    source: Any,
    *,
    group_size: int,
    policy: str = "similarity",
    seed: int = 0,
    window: int = DEFAULT_WINDOW,
    dims: int = DEFAULT_DIMS,
    fit_samples: int = DEFAULT_FIT_SAMPLES,
    map_windows: Callable[..., list] | None = None,
) -> np.ndarray | None:
    """Compose a source's samples into coding groups: the permutation ``order`` of :class:`BatchLayout`.

    Parameters
    ----------
    source : gcc_dask.sources.Source
        Read with ``read(start, stop)`` (windows) and ``take(indices)`` (the PCA fit); labels are never used.
    group_size : int
        K.
    policy : {"as_stored", "random", "pc1", "similarity"}
        See the module docs.
    seed : int
        Seeds ``random`` and the randomized PCA.
    window : int
        Samples per window of the ``similarity`` chain and of the ``pc1`` reads (>= 1; rounded up to a
        multiple of K).
    dims : int
        Principal components compared (>= 1).
    fit_samples : int
        Samples the principal components are fitted on, spread evenly over the source (>= 1).
    map_windows : callable, optional
        ``map_windows(func, items, *shared) -> [func(*shared, item) for item in items]``, e.g. running each
        window as a Dask task (the pipeline's :func:`gcc_dask.runtime.cluster.map_on_cluster`); default:
        :func:`serial_map`, one window after the other in this process.

    Returns
    -------
    ndarray of int64, shape (num_samples,), or None
        None for ``as_stored`` (the identity).

    Raises
    ------
    ConfigError
        An unknown policy or a parameter below 1.
    """
    if policy not in POLICIES:
        raise ConfigError(f"composition.policy: got {policy!r}; expected one of {', '.join(POLICIES)}")
    for name, value in (("group_size", group_size), ("composition.window", window), ("composition.dims", dims),
                        ("composition.fit_samples", fit_samples)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"{name}: got {value!r}; expected an integer >= 1")
    n = int(source.num_samples)
    if policy == "as_stored":
        return None
    if policy == "random":
        return np.random.default_rng([int(seed), 0x5EED]).permutation(n).astype(np.int64)
    fit_idx = np.unique(np.linspace(0, n - 1, min(n, int(fit_samples))).round().astype(np.int64))
    x_fit, _ = source.take(fit_idx)
    projection = fit_projection(x_fit, dims=dims, seed=seed)
    bounds = window_bounds(n, window, group_size)
    run = map_windows or serial_map
    if policy == "pc1":
        pc1 = np.concatenate(run(_window_pc1, bounds, source, projection))
        return np.argsort(pc1, kind="stable").astype(np.int64)
    return np.concatenate(run(_window_chain, bounds, source, projection)).astype(np.int64)


def num_windows(num_samples: int, window: int, group_size: int) -> int:
    """How many windows :func:`compose` reads for `num_samples` samples."""
    return len(window_bounds(num_samples, window, group_size))
