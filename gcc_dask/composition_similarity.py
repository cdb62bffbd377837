"""What the ``pc1``, ``similarity`` and ``tree`` compositions compare samples on, and the orders they cut into groups.

:func:`fit_projection` fits a :class:`Projection` onto the samples' leading principal components (a randomized
SVD); :func:`chain_order` is the greedy nearest-neighbour chain through their features that the ``similarity``
policy cuts into groups (:func:`gcc_dask.composition.compose`), O(n) work per sample; :func:`tree_order` is the
``tree`` policy's: a k-d tree on the features into leaves of about ``leaf`` samples, each leaf chained, so that
its work per sample is O(leaf), whatever n; :func:`kd_order` is the ``kd`` policy's: the same tree down to
leaves of one group, no chain. Pure NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DEFAULT_DIMS", "DEFAULT_LEAF", "Projection", "chain_order", "fit_projection", "kd_order", "tree_order"]

#: Principal components the ``similarity``, ``tree`` and ``pc1`` policies compare samples on.
DEFAULT_DIMS = 32
#: Samples (at most, rounded up to whole groups) per leaf of the ``tree`` policy's k-d tree.
DEFAULT_LEAF = 256


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


def tree_order(features: np.ndarray, leaf: int = DEFAULT_LEAF, group_size: int = 1) -> np.ndarray:
    """A k-d tree through `features` into leaves of at most `leaf` samples, each leaf ordered by the greedy
    nearest-neighbour chain (:func:`chain_order`'s), the chains' tails carried up the tree: a permutation of
    ``range(len(features))``.

    A node of more than `leaf` samples (rounded up to whole groups of `group_size`, at least one group) is split
    on the feature of largest variance among its samples, at the median rounded to whole groups: its lower
    ⌊g/2⌋ of g whole groups go first, the rest after. Each leaf is chained, but only until :data:`TAIL` of its
    samples (whole groups) are left: those, the samples a greedy chain leaves behind and picks up last with long
    jumps, join the leftovers of the next leaf in the tree's order, and each such pool is chained in turn the same
    way, up to one pool of what is left, chained to its end. The sequence is the leaves' chains in the tree's
    order, then each level's, the last pool's last (it holds the short last group, if any), so no group of
    `group_size` consecutive entries straddles two chains.

    Splitting costs O(dims · log(n / leaf)) per sample and chaining O(leaf · dims): at :data:`TAIL` = 1/2 each
    level's pools are as long as a leaf and hold half the samples of the level below, so the work per sample does
    not grow with n (at most twice that of chaining the leaves alone). The pools of a level are chained together,
    step by step in lockstep (one matrix product per step for all of them), the visited samples dropped from the
    search as in :func:`chain_order`. Carrying the tails raised gcc's RelAcc on the 5,000 MNIST digits (LeNet-5,
    K = N = 8, S = 4 random stragglers, leaf 256) from 0.9018 (each leaf chained to its end) to 0.9069 (TAIL
    1/4) and 0.9130 (1/2); the chain through the whole window gives 0.9316.

    Parameters
    ----------
    features : ndarray of shape (n, dims), float (compared in float32)
    leaf : int
        Most samples per leaf (>= 1; rounded up to a multiple of `group_size`).
    group_size : int
        K: every chain but the last holds whole groups of K consecutive entries.

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    f = _features(features)
    if f.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    unit = max(1, int(group_size))
    cap = max(unit, -(-int(leaf) // unit) * unit)
    pools = _kd_leaves(f, cap, unit)
    parts: list[np.ndarray] = []
    while True:
        sizes = np.array([p.size for p in pools], dtype=np.int64)
        if len(pools) == 1:
            steps = sizes
        else:  # whole groups chained; TAIL of the samples (whole groups, and a short group's) left over
            steps = unit * ((sizes - unit * np.floor(sizes * TAIL / unit).astype(np.int64)) // unit)
        chains, rest = _chain_pools(f, pools, steps)
        parts += chains
        if len(pools) == 1:
            break
        pools = [np.sort(np.concatenate(rest[i:i + 2])) for i in range(0, len(rest), 2)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _features(features: np.ndarray) -> np.ndarray:
    """`features` as contiguous float32 of shape (n, dims); ValueError for any other number of axes."""
    f = np.ascontiguousarray(features, dtype=np.float32)
    if f.ndim != 2:
        raise ValueError(f"features: got shape {f.shape}; expected (n, dims)")
    return f


#: the share of a pool of :func:`tree_order` (a leaf, or the leftovers of two) left over to the next level (see
#: its docstring: 1/2 grouped better than 1/4 or 0 on the MNIST and Fashion-MNIST frontiers)
TAIL = 0.5


def kd_order(features: np.ndarray, group_size: int = 1) -> np.ndarray:
    """A balanced k-d tree through `features` down to leaves of one group of `group_size` samples, the leaves in
    the tree's order (lower half first): a permutation of ``range(len(features))`` whose consecutive runs of K are
    the leaves. The ``kd`` policy's order.

    The tree of :func:`tree_order` (each node split on the feature of largest variance among its samples, at the
    median rounded to whole groups) grown until every leaf holds one group, with no chain, and each group's
    samples sorted along its own feature of largest variance: O(dims · log(n / K))
    work per sample (its splits compare the variances on a few dozen samples of each node, :func:`_split`), about
    0.7 µs a sample for 32 components in windows of 8,192 on one core against 4-5 µs for :func:`tree_order` at
    leaf 256. Its groups are looser than the tree's: on 81,920 rows of 32 normal
    floats through a small MLP (gcc, K = 8, N = 16, 12 of 16 results a batch drawn at random, two draws)
    RelAcc 0.966 and 0.962 against 0.973 and 0.970 for ``tree`` and 0.957 and 0.955 for random groups.

    Parameters
    ----------
    features : ndarray of shape (n, dims), float (compared in float32)
    group_size : int
        K: every leaf but the last holds K samples (the last one the short last group, if any).

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    f = _features(features)
    if f.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    unit = max(1, int(group_size))
    leaves = _kd_leaves(f, unit, unit)
    if f.shape[1] == 0 or len(leaves) == 1:
        return np.concatenate(leaves)
    # each group ordered along its own feature of largest variance, so that neighbouring positions α_k hold
    # neighbouring samples (as the chain orders a group along its path)
    full = np.stack(leaves[:-1] if leaves[-1].size != unit else leaves)  # (groups, K)
    sub = f[full]
    dim = np.argmax(sub.var(axis=1), axis=1)
    col = np.take_along_axis(sub, dim[:, None, None], axis=2)[:, :, 0]
    ordered = np.take_along_axis(full, np.argsort(col, axis=1, kind="stable"), axis=1).ravel()
    return np.concatenate([ordered, leaves[-1]]) if leaves[-1].size != unit else ordered


def _kd_leaves(f: np.ndarray, cap: int, unit: int) -> list[np.ndarray]:
    """The leaves of :func:`tree_order`'s k-d tree, in the tree's order (lower half first): sample indices
    (int64, ascending).

    Built level by level: the nodes of a level that hold the same number of samples (at most two sizes, a
    node's halves differing by at most one group) are split together, one batched variance, argpartition and
    sort for all of them, so the work per sample is O(dims) a level with no Python loop over the nodes (a piece
    of 8,192 samples into leaves of 64: 1 ms against 11 ms node by node). While every node of a level has the
    same size (a piece of K·2^j samples) the level is one array of nodes, not a list of them."""
    n = f.shape[0]
    if n <= cap or f.shape[1] == 0:
        return [np.arange(n, dtype=np.int64)]
    level = np.arange(n, dtype=np.int64)[None, :]  # (nodes, size): every node of the level the same size
    while level.shape[1] > cap and level.shape[1] % (2 * unit) == 0:
        lower, upper = _split(f, level, unit)
        level = np.stack([lower, upper], axis=1).reshape(2 * level.shape[0], -1)
    nodes: list[np.ndarray] = list(level)  # left to right: the tree's order
    while True:
        open_ = [i for i, idx in enumerate(nodes) if idx.size > cap]
        if not open_:
            return nodes
        halves: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for size in sorted({nodes[i].size for i in open_}):
            which = [i for i in open_ if nodes[i].size == size]
            lower, upper = _split(f, np.stack([nodes[i] for i in which]), unit)
            halves.update({i: (lower[j], upper[j]) for j, i in enumerate(which)})
        nodes = [part for i, idx in enumerate(nodes) for part in (halves[i] if i in halves else (idx,))]


#: the samples of a node the k-d tree's split compares the features' variances on (:func:`_split`)
SPLIT_SAMPLE = 64


def _split(f: np.ndarray, idx: np.ndarray, unit: int) -> tuple[np.ndarray, np.ndarray]:
    """Split each node of `idx` (nodes, size), its samples' indices ascending, on the feature of largest variance
    (among :data:`SPLIT_SAMPLE` to twice as many of its samples, evenly spaced in its list; all of them in a
    smaller node) at the median rounded to whole groups of `unit`: its lower and upper halves, ``(nodes, m)``
    and ``(nodes, size - m)``, each row ascending."""
    size = idx.shape[1]
    # the variances on at most SPLIT_SAMPLE of each node's samples, evenly spaced in its (ascending) list: the
    # widest component of a node of thousands is plain from a few dozen, and reading every sample's every
    # component at every level was most of the tree's cost
    step = max(1, size // SPLIT_SAMPLE)
    sub = f[idx[:, ::step]]  # (nodes, <= 2 * SPLIT_SAMPLE, dims)
    n = np.float32(sub.shape[1])
    mean = sub.sum(axis=1, dtype=np.float32) / n
    spread = np.einsum("nij,nij->nj", sub, sub) / n - mean * mean  # the variances
    dim = np.argmax(spread, axis=1)  # ties to the first (leading) component
    col = f[idx, dim[:, None]]  # (nodes, size): the chosen component of every sample
    m = unit * max(1, (size // unit) // 2)  # whole groups below; 1 <= m < size
    part = np.argpartition(col, m - 1, axis=1, kind="introselect")
    moved = np.take_along_axis(idx, part, axis=1)
    return np.sort(moved[:, :m], axis=1), np.sort(moved[:, m:], axis=1)


def _chain_pools(f: np.ndarray, pools: list[np.ndarray], steps: np.ndarray
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The first ``steps[i]`` samples of :func:`chain_order` through the features of each pool (dataset indices,
    ascending), computed for all pools at once: ``(chains, rest)``, each pool's chain (dataset indices, int64)
    and the samples it did not visit (ascending).

    The pools are padded to the longest (a padded column is never a candidate: its squared norm is inf) and
    stacked (pools, dims, columns); each step takes every pool's current sample, one batched product gives its
    distances to the pool's columns, and the argmin of each row is the pool's next sample (ties to the lowest
    column, and the columns stay in ascending sample order)."""
    sizes = np.array([p.size for p in pools], dtype=np.int64)
    upto = np.minimum(np.asarray(steps, dtype=np.int64), sizes)
    npool, width, last = len(pools), max(1, int(sizes.max())), int(upto.max())
    ids = np.full((npool, width), -1, dtype=np.int64)  # the pool's sample of each column (-1: padding)
    for i, p in enumerate(pools):
        ids[i, :p.size] = p
    pad = ids < 0
    ft = f[np.where(pad, 0, ids)]  # (pools, width, dims)
    ft[pad] = 0.0
    left = np.einsum("lwd,lwd->lw", ft, ft)  # ||f_j||²; inf once visited or padding
    left[pad] = np.inf
    two_ft = np.ascontiguousarray(2.0 * ft.transpose(0, 2, 1))  # (pools, dims, width)
    rows = np.arange(npool)
    first = np.where(pad, np.inf, ft[:, :, 0]) if f.shape[1] else np.where(pad, np.inf, 0.0)
    cur = np.argmin(first, axis=1)
    order = np.empty((npool, last), dtype=np.int64)
    visited = 0
    for step in range(last):
        order[:, step] = ids[rows, cur]
        going = step < upto  # a pool whose chain has ended keeps its samples unvisited
        left[rows[going], cur[going]] = np.inf
        visited += 1
        if step + 1 == last:
            break
        here = two_ft[rows, :, cur] * np.float32(0.5)  # (pools, dims): f_cur exactly
        if 4 * visited >= left.shape[1] and left.shape[1] > 64:
            keep = np.isfinite(left)  # visited and padding dropped; the pools' columns stay ascending
            cols = np.argsort(~keep, axis=1, kind="stable")[:, :max(1, int(keep.sum(axis=1).max()))]
            ids, left = np.take_along_axis(ids, cols, axis=1), np.take_along_axis(left, cols, axis=1)
            two_ft = np.ascontiguousarray(np.take_along_axis(two_ft, cols[:, None, :], axis=2))
            visited = 0
        dist = np.matmul(here[:, None, :], two_ft)[:, 0, :]  # 2 f_j·f_cur, (pools, width)
        np.subtract(left, dist, out=dist)
        cur = np.argmin(dist, axis=1)
    chains = [order[i, :upto[i]] for i in range(npool)]
    rest = [np.sort(ids[i][np.isfinite(left[i])]) for i in range(npool)]
    return chains, rest
