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
import gcc_dask.composition as comp
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
    layout = compose(make_source("array", array=x, labels=y), group_size=k, block_size=3, policy=policy,
                     window=window)
    if policy == "as_stored":
        assert layout.order is None
    order = layout.sample_index()
    assert order.dtype == np.int64 and order.shape == (n,)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    # every sample in exactly one (group, position); groups of K but the last batch's, each position once
    group, position = layout.group_of_slot()
    pairs = set(zip(group.tolist(), position.tolist()))
    assert len(pairs) == n and (position < k).all()


@pytest.mark.parametrize("policy", ["random", "pc1", "similarity"])
def test_deterministic_for_a_seed(policy):
    x, y = _clustered()
    src = make_source("array", array=x)
    a = compose(src, group_size=8, policy=policy, seed=3, window=64).order
    b = compose(src, group_size=8, policy=policy, seed=3, window=64).order
    np.testing.assert_array_equal(a, b)
    if policy == "random":
        assert not np.array_equal(a, compose(src, group_size=8, policy=policy, seed=4).order)


@pytest.mark.parametrize("policy", POLICIES)
def test_no_policy_reads_labels(policy):
    """Shuffled labels, same composition: the policies see the inputs only."""
    x, y = _clustered()
    shuffled = np.random.default_rng(1).permutation(y)
    a = compose(make_source("array", array=x, labels=y), group_size=8, policy=policy, window=64)
    b = compose(make_source("array", array=x, labels=shuffled), group_size=8, policy=policy, window=64)
    np.testing.assert_array_equal(a.sample_index(), b.sample_index())


def test_similarity_groups_samples_of_one_cluster():
    """On clustered inputs every similarity group (but the few that straddle two clusters) is pure, where
    the stored order mixes all five clusters in every group."""
    x, y = _clustered(n=400)
    def purity(layout):
        group, _ = layout.group_of_slot()
        labels = y[layout.sample_index()]
        return np.mean([len(set(labels[group == g])) == 1 for g in np.unique(group)])

    src = make_source("array", array=x, labels=y)
    assert purity(compose(src, group_size=8, block_size=4, policy="similarity")) >= 0.9
    assert purity(compose(src, group_size=8, block_size=4, policy="as_stored")) == 0.0


def test_chain_visits_a_line_in_order():
    t = np.random.default_rng(0).permutation(50).astype(np.float64)
    order = chain_order(t[:, None])
    np.testing.assert_array_equal(t[order], np.arange(50))  # from the smallest value, one step at a time


def _greedy_chain(f: np.ndarray) -> np.ndarray:
    """The greedy nearest-neighbour chain by its definition: float64 distances to every sample not visited."""
    left = list(range(len(f)))
    cur = int(np.argmin(f[:, 0]))
    order = [cur]
    left.remove(cur)
    while left:
        d = ((f[left] - f[cur]) ** 2).sum(axis=1)
        cur = left[int(np.argmin(d))]  # ties to the lowest index (left stays ascending)
        order.append(cur)
        left.remove(cur)
    return np.array(order)


@pytest.mark.parametrize("n", [1, 2, 65, 300])
def test_chain_is_the_greedy_nearest_neighbour_chain_through_its_compactions(n):
    """Against the definition, on integer-valued features (every distance exact in float32, so the two agree
    exactly), with exact duplicates for ties; n = 300 drops the visited samples from the search several times."""
    rng = np.random.default_rng(n)
    f = rng.integers(-20, 20, size=(n, 4)).astype(np.float32)
    if n > 2:
        f[n // 2] = f[n // 3]  # a duplicate: its tie goes to the lower index
    np.testing.assert_array_equal(chain_order(f), _greedy_chain(f.astype(np.float64)))


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
    np.testing.assert_array_equal(a.order, compose(src, group_size=8, policy="similarity", window=64).order)
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
    order = compose(make_source("array", array=x), group_size=8, policy="similarity", window=64).order
    np.testing.assert_array_equal(np.sort(order), np.arange(x.shape[0]))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"policy": "nearest"}, "composition.policy: got 'nearest'"),
    ({"window": 0}, "composition.window: got 0"),
    ({"dims": -1}, "composition.dims: got -1"),
    ({"window": 10**9}, r"composition.window: got 1000000000; expected an integer from 1 to 65,536"),
    ({"fit_samples": 65_537}, r"composition.fit_samples: got 65537; expected an integer from 1 to 65,536"),
], ids=["unknown-policy", "zero-window", "negative-dims", "window-1e9", "fit-samples-above-bound"])
def test_compose_rejects(kwargs, match):
    x, _ = _clustered(n=16)
    with pytest.raises(ConfigError, match=match):
        compose(make_source("array", array=x), group_size=8, **kwargs)


# ------------------------------------------------------------------------------------------ the layout
def test_layout_maps_slots_to_batches_groups_and_positions():
    """Within a batch of G groups, local slot j is position j // G of group j % G (position-major)."""
    lay = BatchLayout(num_samples=100, group_size=8, block_size=4)
    assert lay.batch_samples == 32 and lay.num_batches == 4
    assert lay.batch_slots(3) == (96, 100) and lay.batch_groups(3) == 1 and lay.batch_groups(0) == 4
    assert lay.num_groups == 13
    group, position = lay.group_of_slot()
    assert group[41] == 4 + 41 % 4 and position[41] == (41 - 32) // 4
    np.testing.assert_array_equal(lay.position_samples(1, 2), np.arange(40, 44))  # contiguous: one read


def test_blocks_are_a_reshape_and_short_groups_repeat_their_last_sample():
    lay = BatchLayout(num_samples=27, group_size=4, block_size=2)
    x = np.arange(27 * 3, dtype=np.float32).reshape(27, 3)
    full = lay.to_blocks(x[0:8])
    assert full.shape == (4, 2, 3) and np.shares_memory(full, x)  # a view, no copy
    np.testing.assert_array_equal(full[1, 0], x[2])  # position 1 of group 0 is local slot 1·G + 0
    for b in range(lay.num_batches):
        start, stop = lay.batch_slots(b)
        blocks = lay.to_blocks(x[start:stop])
        np.testing.assert_array_equal(BatchLayout.from_blocks(blocks, stop - start), x[start:stop])
        for k in range(4):  # what an uncoded shard reads on its own is the same block
            np.testing.assert_array_equal(blocks[k], x[lay.position_samples(b, k)])
    last = lay.to_blocks(x[24:27])  # one group of 3: position 3 repeats position 2
    np.testing.assert_array_equal(last[3, 0], x[26])


def test_a_short_batch_keeps_chain_neighbours_in_one_group():
    """9 samples, K = 8: two groups of 5 and 4 sequence neighbours (never 8 + 1)."""
    lay = BatchLayout.from_sequence(np.arange(9)[::-1].copy(), group_size=8, block_size=4)
    group, position = lay.group_of_slot()
    members = [sorted(lay.order[group == g].tolist()) for g in range(2)]
    assert members == [[4, 5, 6, 7, 8], [0, 1, 2, 3]]
    for g in range(2):  # positions in sequence order
        idx = np.flatnonzero(group == g)
        assert list(lay.order[idx][np.argsort(position[idx])]) == sorted(members[g], reverse=True)


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


def test_take_from_memory_gathers_from_a_view_and_returns_fresh_rows(monkeypatch):
    """An in-memory source (MNIST's cache, an array) is not copied whole before a batch is picked out of it: the
    run is gathered from a view of the source's memory, and what comes back is fresh (writing to it changes
    neither the source nor a later take)."""
    from gcc_dask.sources.base import Source

    x, y = _clustered()
    src = make_source("array", array=x, labels=y)
    reads = []
    real = Source._read_checked

    def spy(self, start, stop, fresh):
        reads.append((start, stop, fresh))
        return real(self, start, stop, fresh)

    monkeypatch.setattr(Source, "_read_checked", spy)
    got, labels = src.take(np.array([40, 2, 30]))
    assert reads == [(2, 41, False)]  # one run (gaps of at most TAKE_GAP), gathered from a view
    np.testing.assert_array_equal(got, x[[40, 2, 30]])
    got[:] = -1.0
    labels[:] = -1
    np.testing.assert_array_equal(src.take(np.array([40, 2, 30]))[0], x[[40, 2, 30]])
    assert (src.read(2, 3)[0] == x[2:3]).all() and src.read(2, 3)[0].flags.writeable  # read stays fresh
    assert reads[-1] == (2, 3, True)


def test_take_rejects_out_of_range():
    from gcc_dask.errors import InvalidInputError

    src = make_source("array", array=np.zeros((4, 2)))
    with pytest.raises(InvalidInputError, match=r"expected indices in \[0, 4\)"):
        src.take([0, 4])


@pytest.mark.parametrize("policy", ["similarity", "pc1"])
@pytest.mark.parametrize("where", [0, 5], ids=["in-the-fit", "outside-the-fit"])
def test_samples_too_large_to_compose_are_named_in_one_line(policy, where):
    """A sample of 3e38 (near float32's largest) made the features overflow and the chain repeat samples: the
    run ended on an internal "order: expected a permutation" after several warnings. Now one SourceError line
    names the source and the sample, whether or not the sample is among those the projection is fitted on."""
    import warnings

    from gcc_dask.errors import SourceError

    x, _ = _clustered(n=256)
    x[where] = 3e38
    src = make_source("array", array=x, name="huge")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way
        with pytest.raises(SourceError, match=rf"^source: got values up to 3e\+38 in sample {where} of 'huge', too "
                                              r"large to compose .*composition.policy: random"):
            compose(src, group_size=8, policy=policy, window=64, fit_samples=32)
    x[where] = 1e3  # large but comparable: composed
    order = compose(make_source("array", array=x), group_size=8, policy=policy, window=64, fit_samples=32).order
    np.testing.assert_array_equal(np.sort(order), np.arange(256))


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_the_fit_and_the_windows_run_on_one_blas_thread_in_this_process(monkeypatch):
    """The composition's work in the driver's process runs with the BLAS on one thread (OpenBLAS's threads on its
    small matrices cost far more than they gain on busy cores); the setting is put back after."""
    import gcc_dask.composition as comp
    from threadpoolctl import threadpool_limits

    seen = {}
    fit, chain = comp._fit_on, comp._window_chain
    monkeypatch.setattr(comp, "_fit_on", lambda *a: (seen.setdefault("fit", _blas_threads()), fit(*a))[1])
    monkeypatch.setattr(comp, "_window_chain", lambda *a: (seen.setdefault("chain", _blas_threads()), chain(*a))[1])
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        layout = comp.compose(make_source("mnist", split="test", limit=64), group_size=8, block_size=2, window=32)
        assert _blas_threads() == before
    assert before and all(n == 2 for n in before)
    assert seen == {"fit": [1] * len(before), "chain": [1] * len(before)}
    assert np.array_equal(np.sort(layout.order), np.arange(64))


def test_a_window_that_holds_a_batch_longer_than_the_window_is_chained_in_pieces(tmp_path):
    """With a chunked source each window holds whole batches; a batch of K·B = 96 samples with
    ``composition.window`` 32 is chained in pieces of 32, so the chain's cost per sample is the window's."""
    import zarr

    import gcc_dask.composition as comp

    x, _ = _clustered(192)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=x.shape, chunks=(96, x.shape[1]), dtype=x.dtype)[:] = x
    source = make_source("zarr", path=str(tmp_path / "x.zarr"))
    assert source.chunks == 96
    layout = compose(source, group_size=8, block_size=12, policy="similarity", window=32)
    order = layout.sample_index()
    projection = comp._fit_on(source, comp._fit_indices(192, comp.DEFAULT_FIT_SAMPLES), comp.DEFAULT_DIMS, 0)
    features = projection.features(x)
    pieces = [p + chain_order(features[p:p + 32]) for p in range(0, 192, 32)]
    expected = np.concatenate(pieces)
    np.testing.assert_array_equal(order, BatchLayout.from_sequence(expected, 8, 12).sample_index())


def test_the_pieces_of_a_long_window_are_tasks_of_their_own():
    """``similarity`` maps one task per piece of ``composition.window`` samples (whole groups), never more than a
    window, so the workers share a window longer than ``window`` evenly; ``pc1`` keeps one task per window."""
    from gcc_dask.composition import composition_items

    # windows of whole batches of 96 samples (unit 96), composition.window 32: pieces of 32
    assert composition_items(250, 32, 8, unit=96) == [(0, 32), (32, 64), (64, 96), (96, 128), (128, 160),
                                                      (160, 192), (192, 224), (224, 250)]
    assert composition_items(250, 32, 8, unit=96, policy="pc1") == [(0, 96), (96, 192), (192, 250)]
    # a window of 30 rounds up to whole groups of 8 (32); the last window is short
    assert composition_items(100, 30, 8) == [(0, 32), (32, 64), (64, 96), (96, 100)]
    # chunks of 10: a task holds 4 chunks' worth of whole pieces (64 samples), never a piece per chunk
    assert composition_items(250, 32, 8, unit=96, chunks=10) == [(0, 64), (64, 96), (96, 160), (160, 192),
                                                                (192, 250)]
    seen = []

    def mapper(func, items, *shared):
        seen.append(list(items))
        return [func(*shared, item) for item in items]

    x, _ = _clustered(192)
    from gcc_dask.sources import ArraySource

    serial = compose(ArraySource(x), group_size=8, block_size=12, policy="similarity", window=32)
    mapped = compose(ArraySource(x), group_size=8, block_size=12, policy="similarity", window=32,
                     map_windows=mapper)
    assert seen == [[(0, 32), (32, 64), (64, 96), (96, 128), (128, 160), (160, 192)]]
    np.testing.assert_array_equal(serial.sample_index(), mapped.sample_index())


@pytest.mark.parametrize("n,chunk", [(2_000_000, 100_000), (2_000_050, 100_000), (9_005, 1_000)])
def test_the_projection_of_a_chunked_source_is_fitted_on_a_few_of_its_chunks(n, chunk):
    """fit_samples samples (ascending, in range) from FIT_CHUNKS whole chunks spread over the source, the first
    and the last whole one among them: not a few samples from every chunk, each decompressed whole."""
    idx = comp._fit_indices(n, comp.DEFAULT_FIT_SAMPLES, chunks=chunk)
    assert idx.size == comp.DEFAULT_FIT_SAMPLES and np.all(np.diff(idx) > 0) and idx.max() < n
    read = np.unique(idx // chunk)
    assert read.size == comp.FIT_CHUNKS and read[0] == 0 and read[-1] == n // chunk - 1


def test_a_source_with_few_or_small_chunks_is_fitted_on_runs_spread_over_it():
    """Chunks too few (at most FIT_CHUNKS) or too short for the runs: the runs spread over the whole source, as
    for a source without chunks."""
    for n, chunk in ((50_000, 10_000), (100_000, 130)):
        np.testing.assert_array_equal(comp._fit_indices(n, comp.DEFAULT_FIT_SAMPLES, chunks=chunk),
                                      comp._fit_indices(n, comp.DEFAULT_FIT_SAMPLES))


@pytest.mark.parametrize("fit_samples", [1, 2, 5, 7, 9, 15, 31, 33, 100])
def test_a_chunked_source_is_fitted_on_no_more_than_fit_samples(fit_samples):
    """However few fit_samples (fewer runs than FIT_CHUNKS, or not a multiple of them), a chunked source gives
    the projection at most that many samples, from at most FIT_CHUNKS of its chunks, as a source without chunks
    does: not a run in each of FIT_CHUNKS chunks whatever was asked."""
    n, chunk = 2_000_000, 100_000
    idx = comp._fit_indices(n, fit_samples, chunks=chunk)
    plain = comp._fit_indices(n, fit_samples)
    assert idx.size <= fit_samples and idx.size >= min(plain.size, comp.FIT_CHUNKS)
    assert np.all(np.diff(idx) > 0) and idx.max() < n
    assert np.unique(idx // chunk).size <= comp.FIT_CHUNKS


@pytest.mark.parametrize("n,k,b", [(1, 1, 1), (7, 4, 2), (8, 4, 2), (9, 4, 2), (100, 8, 3), (12345, 5, 7), (3, 8, 4)])
def test_group_of_slot_numbers_the_groups_of_every_batch_in_turn(n, k, b):
    """Slot j of a batch of G groups holds position j // G of its group j % G, groups numbered over the run;
    full batches broadcast, a short last batch (fewer groups) slot by slot."""
    layout = BatchLayout(n, k, b)
    group, position = layout.group_of_slot()
    first = 0
    for batch in range(layout.num_batches):
        start, stop = layout.batch_slots(batch)
        g = layout.batch_groups(batch)
        local = np.arange(stop - start)
        np.testing.assert_array_equal(group[start:stop], first + local % g)
        np.testing.assert_array_equal(position[start:stop], local // g)
        first += g
    assert group.dtype == np.int64 and position.dtype == np.int32
