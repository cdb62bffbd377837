"""The ``kd`` composition: the ``tree`` policy's k-d tree grown down to leaves of one group of K, no chain
(gcc_dask.composition_similarity.kd_order)."""

from __future__ import annotations

import numpy as np
import pytest

from gcc_dask.composition import compose
from gcc_dask.composition_similarity import _kd_leaves, kd_order
from gcc_dask.sources import make_source


def _clustered(n=2000, d=16, clusters=20, seed=0):
    """n samples around `clusters` separated centres, interleaved (sample i belongs to cluster i % clusters)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(clusters, d))
    return (centres[np.arange(n) % clusters] + rng.normal(size=(n, d))).astype(np.float32)


@pytest.mark.parametrize("n,k", [(8192, 8), (1003, 8), (777, 3), (7, 8), (1, 4), (0, 8)])
def test_kd_groups_are_the_leaves_of_the_tree_each_sorted_along_its_widest_feature(n, k):
    """A permutation whose consecutive runs of K are the k-d tree's leaves of one group (in the tree's order,
    the short last group last), each full group's samples in ascending order of its feature of largest
    variance."""
    f = np.random.default_rng(n).normal(size=(n, 5)).astype(np.float32) * np.arange(1, 6, dtype=np.float32)
    order = kd_order(f, k)
    assert order.dtype == np.int64 and order.shape == (n,)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    if n == 0:
        return
    leaves = _kd_leaves(f, k, k)
    starts = np.cumsum([0] + [leaf.size for leaf in leaves])
    for leaf, a, b in zip(leaves, starts[:-1], starts[1:]):
        np.testing.assert_array_equal(np.sort(order[a:b]), leaf)
        if leaf.size == k and n > k:
            col = f[order[a:b]][:, int(np.argmax(f[leaf].var(axis=0)))]
            assert np.all(np.diff(col) >= 0)


def test_kd_groups_are_tighter_than_random_and_compose_is_deterministic():
    """On clustered inputs (20 clusters, interleaved) a kd group's samples sit close to their mean, less than
    half the spread of a random group's; the same call gives the same order."""
    x = _clustered()
    src = make_source("array", array=x)

    def spread(policy):
        order = compose(src, group_size=8, block_size=4, policy=policy, window=2000).sample_index()
        groups = x[order[:2000]].reshape(-1, 8, x.shape[1]).astype(np.float64)
        return float(np.linalg.norm(groups - groups.mean(axis=1, keepdims=True), axis=2).mean()), order

    (kd, a), (rand, _) = spread("kd"), spread("random")
    assert kd < 0.5 * rand, (kd, rand)
    np.testing.assert_array_equal(a, spread("kd")[1])


def test_kd_is_not_the_tree():
    """The tree chains its leaves, kd does not: different orders, each a permutation (and so different cache
    entries: the policy is in the key)."""
    x = _clustered(512)
    src = make_source("array", array=x)
    kd = compose(src, group_size=8, block_size=4, policy="kd", window=512).sample_index()
    tree = compose(src, group_size=8, block_size=4, policy="tree", window=512, leaf=64).sample_index()
    assert not np.array_equal(kd, tree)
    np.testing.assert_array_equal(np.sort(kd), np.arange(512))
