"""The ``tree`` composition: a k-d tree on the principal components, each leaf chained (gcc_dask.composition)."""

from __future__ import annotations

import numpy as np
import pytest

from gcc_dask.composition import chain_order, compose, tree_order
from gcc_dask.composition_cache import CompositionCache
from gcc_dask.composition_similarity import _chain_pools, _kd_leaves
from gcc_dask.config import load_config
from gcc_dask.errors import ConfigError
from gcc_dask.sources import make_source


def _clustered(n=2000, d=16, clusters=20, seed=0):
    """n samples around `clusters` separated centres, interleaved (sample i belongs to cluster i % clusters)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(clusters, d))
    x = centres[np.arange(n) % clusters] + rng.normal(scale=1.0, size=(n, d))
    return x.astype(np.float32), (np.arange(n) % clusters).astype(np.int64)


def _within_group_distance(x, layout, k):
    """The mean distance between the samples of a full group of K and their group's mean."""
    order = layout.sample_index()
    full = (len(order) // k) * k
    groups = x[order[:full]].reshape(-1, k, x.shape[1]).astype(np.float64)
    return float(np.linalg.norm(groups - groups.mean(axis=1, keepdims=True), axis=2).mean())


@pytest.mark.parametrize("n,k,window,leaf", [(2000, 8, 512, 64), (203, 8, 64, 20), (7, 8, 4, 3), (1, 3, 5, 1),
                                             (1000, 1, 10_000, 37)],
                         ids=["windows", "short-last-group", "fewer-than-K", "one-sample", "K-1-odd-leaf"])
def test_tree_is_a_permutation_and_deterministic_for_a_seed(n, k, window, leaf):
    x, _ = _clustered(n)
    src = make_source("array", array=x)
    a = compose(src, group_size=k, block_size=3, policy="tree", window=window, leaf=leaf, seed=5).sample_index()
    b = compose(src, group_size=k, block_size=3, policy="tree", window=window, leaf=leaf, seed=5).sample_index()
    assert a.dtype == np.int64 and a.shape == (n,)
    np.testing.assert_array_equal(np.sort(a), np.arange(n))
    np.testing.assert_array_equal(a, b)


def test_tree_groups_are_tighter_than_random():
    """On clustered inputs (20 clusters, interleaved) a tree group's samples sit close to their mean: less than
    half the spread of a random group's (15.2 against 6.6 here; the similarity chain's, 4.8)."""
    x, _ = _clustered()
    src = make_source("array", array=x)
    spread = {p: _within_group_distance(x, compose(src, group_size=8, block_size=4, policy=p, window=2000,
                                                   leaf=64), 8)
              for p in ("random", "tree")}
    assert spread["tree"] < 0.5 * spread["random"], spread


def test_leaves_hold_whole_groups():
    """Every leaf holds at most `leaf` samples rounded up to whole groups, and every leaf but the last a multiple
    of K (the last one holds the short last group), so no group straddles two leaves."""
    rng = np.random.default_rng(1)
    f = rng.integers(-20, 20, size=(1003, 5)).astype(np.float32)  # a short last group of 3
    leaves = _kd_leaves(f, 104, 8)  # leaf 100 rounded up to 13 groups of 8
    assert all(leaf.size <= 104 for leaf in leaves) and len(leaves) > 1
    assert all(leaf.size % 8 == 0 for leaf in leaves[:-1]) and leaves[-1].size % 8 == 1003 % 8
    np.testing.assert_array_equal(np.sort(np.concatenate(leaves)), np.arange(1003))


def test_the_pools_chained_in_lockstep_are_each_the_greedy_chain():
    """Chained together, step by step, each pool's chain is the first `steps` samples of its own greedy chain
    (:func:`chain_order`, ties and all: integer features with duplicates), and the rest are the samples it did
    not visit."""
    rng = np.random.default_rng(2)
    f = rng.integers(-6, 6, size=(700, 4)).astype(np.float32)  # many exact ties
    pools = [np.sort(rng.choice(700, size, replace=False)) for size in (300, 1, 64, 250, 0)]
    steps = np.array([225, 1, 64, 100, 0])
    chains, rest = _chain_pools(f, pools, steps)
    for pool, step, chain, left in zip(pools, steps, chains, rest):
        np.testing.assert_array_equal(chain, pool[chain_order(f[pool])][:step])
        np.testing.assert_array_equal(np.sort(np.concatenate([chain, left])), pool)
        assert np.all(np.diff(left) > 0)


def test_a_leaf_as_large_as_the_window_is_the_similarity_chain():
    x, _ = _clustered(300)
    src = make_source("array", array=x)
    np.testing.assert_array_equal(compose(src, group_size=8, policy="tree", window=128, leaf=128).sample_index(),
                                  compose(src, group_size=8, policy="similarity", window=128).sample_index())


def test_the_tree_splits_the_widest_component_at_the_median():
    """Two well-separated halves along the second feature (the wider one): the first split sends each half to
    one side, the lower half first."""
    rng = np.random.default_rng(2)
    f = rng.normal(size=(64, 2)).astype(np.float32)
    f[:, 1] += np.where(np.arange(64) % 2 == 0, -50.0, 50.0)
    lower, upper = _kd_leaves(f, 32, 8)
    np.testing.assert_array_equal(lower, np.arange(0, 64, 2))
    np.testing.assert_array_equal(upper, np.arange(1, 64, 2))
    # the leaves' chains come first (whole groups, half of each leaf), then the chain of their leftovers
    order = tree_order(f, leaf=32, group_size=8)
    assert set(order[:16]) < set(lower) and set(order[16:32]) < set(upper)


def _counting():
    calls = {}

    def run(func, items, *shared):
        calls[func.__name__] = calls.get(func.__name__, 0) + len(items)
        return [func(*shared, item) for item in items]
    return run, calls


def test_leaf_is_in_the_cache_key(tmp_path):
    """A second tree composition with the same leaf is reused from the cache; another leaf composes again (and
    gives that leaf's order); the chain's entries are keyed as before, whatever leaf."""
    x, _ = _clustered(512)
    cache = CompositionCache(tmp_path)

    def run(**kw):
        mapper, calls = _counting()
        order = compose(make_source("array", array=x), group_size=8, block_size=4, window=128, map_windows=mapper,
                        cache=cache, **kw).sample_index()
        return order, calls

    first, calls = run(policy="tree", leaf=32)
    assert calls == {"_window_chain": 4}
    again, calls = run(policy="tree", leaf=32)
    assert calls == {"_window_digest": 4}
    np.testing.assert_array_equal(again, first)
    other, calls = run(policy="tree", leaf=64)
    assert calls == {"_window_chain": 4}
    np.testing.assert_array_equal(other, compose(make_source("array", array=x), group_size=8, block_size=4,
                                                 window=128, policy="tree", leaf=64).sample_index())
    assert not np.array_equal(other, first)
    run(policy="similarity", leaf=32)
    _, calls = run(policy="similarity", leaf=64)
    assert calls == {"_window_digest": 4}  # leaf is not a parameter of the chain


@pytest.mark.parametrize(("leaf", "match"), [(0, "composition.leaf: got 0"),
                                             (65_537, r"composition.leaf: got 65537; expected an integer from 1")])
def test_compose_rejects_a_bad_leaf(leaf, match):
    x, _ = _clustered(16)
    with pytest.raises(ConfigError, match=match):
        compose(make_source("array", array=x), group_size=8, policy="tree", leaf=leaf)


def test_the_config_takes_the_tree_and_its_leaf():
    base = {"source": {"kind": "synthetic", "num_samples": 64, "shape": [4]},
            "workload": {"kind": "analytic", "name": "xsinx"},
            "code": {"num_inputs": 8, "num_workers": 12}, "schemes": ["gcc"]}
    cfg = load_config({**base, "composition": {"policy": "tree", "leaf": 512}}, check_paths=False)
    assert cfg.composition.policy == "tree" and cfg.composition.leaf == 512
    assert load_config(base, check_paths=False).composition.leaf == 256
    with pytest.raises(ConfigError, match=r"^composition.leaf: got -4; expected a number greater than or equal"):
        load_config({**base, "composition": {"policy": "tree", "leaf": -4}}, check_paths=False)


def test_a_store_made_before_leaf_existed_resumes_at_its_default():
    """``composition.leaf`` is an added key: a store whose resolved config lacks it resumes under a config that
    leaves it at its default (the same fingerprint), not under one that sets another leaf."""
    base = {"source": {"kind": "synthetic", "num_samples": 64, "shape": [4]},
            "workload": {"kind": "analytic", "name": "xsinx"},
            "code": {"num_inputs": 8, "num_workers": 12}, "schemes": ["gcc"], "composition": {"policy": "tree"}}
    cfg = load_config(base, check_paths=False)
    stored = cfg.resolved()
    del stored["composition"]["leaf"]
    assert "leaf" not in cfg.resolved_for(stored)["composition"]
    other = load_config({**base, "composition": {"policy": "tree", "leaf": 512}}, check_paths=False)
    assert other.resolved_for(stored)["composition"]["leaf"] == 512
    assert other.fingerprint(stored) != cfg.fingerprint(stored)


def test_sweeps_and_frontiers_take_the_tree():
    """Every place that lists the policies lists ``tree``: a sweep's scheme, a frontier, the composition."""
    import typing

    from gcc_dask.composition import POLICIES
    from gcc_dask.config.coding import CompositionConfig
    from gcc_dask.frontier.config import FrontierConfig
    from gcc_dask.sweep_sections import SchemeSpec

    assert SchemeSpec(label="g", code="gcc", composition="tree").composition == "tree"
    assert set(typing.get_args(FrontierConfig.model_fields["composition"].annotation)) == set(POLICIES)
    # and a run's, with auto (the similarity chain or the tree, by f's cost: tests/test_composition_auto.py)
    assert set(typing.get_args(CompositionConfig.model_fields["policy"].annotation)) == {*POLICIES, "auto"}


def _kd_leaves_node_by_node(f, cap, unit):
    """The k-d tree's leaves split one node at a time (the definition :func:`_kd_leaves` batches by level): each
    node on the component of largest variance among SPLIT_SAMPLE to twice as many of its samples, evenly spaced
    in its ascending list (all of them in a smaller node)."""
    from gcc_dask.composition_similarity import SPLIT_SAMPLE

    leaves, stack = [], [np.arange(f.shape[0], dtype=np.int64)]
    while stack:
        idx = stack.pop()
        if idx.size <= cap:
            leaves.append(idx)
            continue
        sub = f[idx]
        dim = int(np.argmax(f[idx[::max(1, idx.size // SPLIT_SAMPLE)]].var(axis=0, dtype=np.float64)))
        m = unit * max(1, (idx.size // unit) // 2)
        part = np.argsort(sub[:, dim], kind="stable")
        stack += [np.sort(idx[part[m:]]), np.sort(idx[part[:m]])]
    return leaves


@pytest.mark.parametrize("n,cap,unit", [(8192, 64, 8), (1003, 104, 8), (777, 24, 3), (5, 8, 8)])
def test_leaves_split_level_by_level_are_those_split_node_by_node(n, cap, unit):
    """Splitting all the nodes of a level together gives the leaves of splitting each node on its own, in the
    tree's order, for nodes of equal and of unequal sizes (features without ties, so that the median is one)."""
    f = np.random.default_rng(n).normal(size=(n, 6)).astype(np.float32) * np.arange(1, 7, dtype=np.float32)
    got, want = _kd_leaves(f, cap, unit), _kd_leaves_node_by_node(f, cap, unit)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
