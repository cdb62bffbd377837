"""Composition policies and the batch layout: permutations, determinism, no labels, blocks and short batches."""

from __future__ import annotations

import numpy as np
import pytest

from gcc_dask.composition import (
    POLICIES,
    BatchLayout,
    chain_order,
    compose,
    fit_projection,
    serial_map,
    window_bounds,
)
from gcc_dask.errors import ConfigError
from gcc_dask.sources import make_source


def _clustered(n=203, d=12, seed=0):
    """n samples around 5 well-separated centres, interleaved (sample i belongs to cluster i % 5)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=10.0, size=(5, d))
    x = centres[np.arange(n) % 5] + rng.normal(scale=0.1, size=(n, d))
    return x.astype(np.float32), (np.arange(n) % 5).astype(np.int64)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("n,k,window", [(203, 8, 64), (64, 8, 1000), (7, 8, 4), (1, 3, 5)],
                         ids=["short-last-group", "one-window", "fewer-than-K", "one-sample"])
def test_every_policy_is_a_permutation(policy, n, k, window):
    x, y = _clustered(n)
    order = compose(make_source("array", array=x, labels=y), group_size=k, policy=policy, window=window)
    if policy == "as_stored":
        assert order is None
        return
    assert order.dtype == np.int64 and order.shape == (n,)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))


@pytest.mark.parametrize("policy", ["random", "pc1", "similarity"])
def test_deterministic_for_a_seed(policy):
    x, y = _clustered()
    src = make_source("array", array=x)
    a = compose(src, group_size=8, policy=policy, seed=3, window=64)
    b = compose(src, group_size=8, policy=policy, seed=3, window=64)
    np.testing.assert_array_equal(a, b)
    if policy == "random":
        assert not np.array_equal(a, compose(src, group_size=8, policy=policy, seed=4))


@pytest.mark.parametrize("policy", POLICIES)
def test_no_policy_reads_labels(policy):
    """Shuffled labels, same composition: the policies see the inputs only."""
    x, y = _clustered()
    shuffled = np.random.default_rng(1).permutation(y)
    a = compose(make_source("array", array=x, labels=y), group_size=8, policy=policy, window=64)
    b = compose(make_source("array", array=x, labels=shuffled), group_size=8, policy=policy, window=64)
    assert (a is None and b is None) or np.array_equal(a, b)


def test_similarity_groups_samples_of_one_cluster():
    """On clustered inputs every similarity group (but the few that straddle two clusters) is pure, where
    the stored order mixes all five clusters in every group."""
    x, y = _clustered(n=400)
    order = compose(make_source("array", array=x, labels=y), group_size=8, policy="similarity")
    groups = y[order].reshape(-1, 8)
    pure = np.mean([len(set(g)) == 1 for g in groups])
    assert pure >= 0.9, pure
    assert np.mean([len(set(g)) == 1 for g in y.reshape(-1, 8)]) == 0.0


def test_chain_visits_a_line_in_order():
    t = np.random.default_rng(0).permutation(50).astype(np.float64)
    order = chain_order(t[:, None])
    np.testing.assert_array_equal(t[order], np.arange(50))  # from the smallest value, one step at a time


def test_windows_hold_whole_groups():
    bounds = window_bounds(100, 30, 8)
    assert bounds[0] == (0, 32) and bounds[-1][1] == 100
    assert all((stop - start) % 8 == 0 for start, stop in bounds[:-1])


def test_window_chains_run_through_the_given_map():
    """The pipeline maps windows as Dask tasks: compose must give the same order through any map."""
    x, _ = _clustered()
    src = make_source("array", array=x)
    calls = []

    def recording_map(func, items, *shared):
        calls.append(len(items))
        return serial_map(func, items, *shared)

    a = compose(src, group_size=8, policy="similarity", window=64, map_windows=recording_map)
    np.testing.assert_array_equal(a, compose(src, group_size=8, policy="similarity", window=64))
    assert calls == [4]


def test_projection_matches_an_exact_pca():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 20)) @ rng.normal(size=(20, 20))
    proj = fit_projection(x, dims=5)
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    # the same subspace: |cos| of the principal angles is 1
    cosines = np.linalg.svd(proj.components @ vt[:5].T, compute_uv=False)
    np.testing.assert_allclose(cosines, 1.0, atol=1e-8)


def test_non_finite_inputs_are_grouped_not_fatal():
    x, _ = _clustered()
    x[5, 0] = np.nan
    order = compose(make_source("array", array=x), group_size=8, policy="similarity", window=64)
    np.testing.assert_array_equal(np.sort(order), np.arange(x.shape[0]))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"policy": "nearest"}, "composition.policy: got 'nearest'"),
    ({"window": 0}, "composition.window: got 0"),
    ({"dims": -1}, "composition.dims: got -1"),
], ids=["unknown-policy", "zero-window", "negative-dims"])
def test_compose_rejects(kwargs, match):
    x, _ = _clustered(n=16)
    with pytest.raises(ConfigError, match=match):
        compose(make_source("array", array=x), group_size=8, **kwargs)


# ------------------------------------------------------------------------------------------ the layout
def test_layout_maps_slots_to_batches_groups_and_positions():
    lay = BatchLayout(num_samples=100, group_size=8, block_size=4)
    assert lay.batch_samples == 32 and lay.num_batches == 4 and lay.num_groups == 13
    assert lay.batch_slots(3) == (96, 100) and lay.batch_groups(3) == 1 and lay.batch_groups(0) == 4
    group, position = lay.group_of_slot()
    assert group[41] == 5 and position[41] == 1


def test_blocks_round_trip_with_a_short_last_group():
    lay = BatchLayout(num_samples=27, group_size=4, block_size=2)
    x = np.arange(27 * 3, dtype=np.float32).reshape(27, 3)
    for b in range(lay.num_batches):
        start, stop = lay.batch_slots(b)
        blocks = lay.to_blocks(x[start:stop])  # (K, G, 3)
        assert blocks.shape[0] == 4
        # position k of group g is slot g·K + k; the short last group repeats its last sample
        np.testing.assert_array_equal(blocks[1, 0], x[start + 1])
        np.testing.assert_array_equal(BatchLayout.from_blocks(blocks, stop - start), x[start:stop])
    last = lay.to_blocks(x[24:27])
    np.testing.assert_array_equal(last[3, 0], x[26])


def test_layout_samples_follow_the_order():
    order = np.random.default_rng(0).permutation(20)
    lay = BatchLayout(20, 4, 2, order)
    np.testing.assert_array_equal(np.concatenate([lay.samples(b) for b in range(lay.num_batches)]), order)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_samples": 10, "group_size": 0}, "group_size: got 0"),
    ({"num_samples": 10, "group_size": 2, "block_size": 0}, "block_size: got 0"),
    ({"num_samples": 3, "group_size": 2, "order": [0, 0, 1]}, "permutation of range"),
], ids=["zero-K", "zero-B", "not-a-permutation"])
def test_layout_rejects(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        BatchLayout(**kwargs)


# ------------------------------------------------------------------------------------------ Source.take
@pytest.mark.parametrize("indices", [[5, 1, 3], list(range(10, 20)), [0, 200, 100, 150], []],
                         ids=["scattered", "contiguous", "far-apart", "empty"])
def test_take_reads_rows_in_the_given_order(indices):
    x, y = _clustered()
    src = make_source("array", array=x, labels=y)
    got, labels = src.take(np.asarray(indices, dtype=np.int64))
    np.testing.assert_array_equal(got, x[indices])
    np.testing.assert_array_equal(labels, y[indices])


def test_take_rejects_out_of_range():
    from gcc_dask.errors import InvalidInputError

    src = make_source("array", array=np.zeros((4, 2)))
    with pytest.raises(InvalidInputError, match=r"expected indices in \[0, 4\)"):
        src.take([0, 4])
