"""Reads that follow the chunks: sources say their chunking, ``take`` reads each chunk once, compositions of a
chunked source use windows of whole batches and chunks, and a worker reads each chunk of a batch's samples at
most once per batch (counted on an instrumented source), on its own and in a real pipeline run."""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.coding import make_code
from gcc_dask.composition import compose, is_permutation, window_bounds, window_unit
from gcc_dask.errors import InvalidInputError
from gcc_dask.runtime.tasks import RunPlugin
from gcc_dask.sources import ZarrSource, make_source

CHUNK = 16


def _zarr(path, n=512, chunk=CHUNK, shape=(1, 3, 3), seed=0, labels=True, **kwargs):
    x = np.random.default_rng(seed).random((n, *shape), dtype=np.float32)
    root = zarr.open_group(str(path), mode="w")
    root.create_array("x", shape=x.shape, chunks=(chunk, *shape), dtype="float32", **kwargs)[:] = x
    y = np.arange(n, dtype=np.int64) % 10
    if labels:
        root.create_array("y", shape=(n,), chunks=(chunk,), dtype="int64")[:] = y
    return x, y


class _Reads:
    """Counts ZarrSource._read calls: (who, start, stop) -> calls; `who` from `label()` at the time of the read."""

    def __init__(self, monkeypatch, label=lambda: None):
        self.calls: collections.Counter = collections.Counter()
        self.lock = threading.Lock()
        original = ZarrSource._read

        def counting(src, start, stop):
            who = label()
            with self.lock:
                self.calls[(who, start, stop)] += 1
            return original(src, start, stop)

        monkeypatch.setattr(ZarrSource, "_read", counting)


# ------------------------------------------------------------------------------------------ chunking
def test_sources_say_their_chunking(tmp_path):
    import dask.array as da

    _zarr(tmp_path / "a.zarr")
    assert make_source("zarr", path=str(tmp_path / "a.zarr"), array="x").chunks == CHUNK
    sharded = tmp_path / "s.zarr"
    zarr.create_array(store=str(sharded), shape=(100, 2), chunks=(10, 2), shards=(50, 2), dtype="float32")[:] = 1.0
    assert make_source("zarr", path=str(sharded)).chunks == 10  # the inner chunks: the unit Zarr decodes
    np.save(tmp_path / "a.npy", np.zeros((20, 3), dtype=np.float32))
    assert make_source("npy", path=str(tmp_path / "a.npy")).chunks is None
    assert make_source("array", array=np.zeros((20, 3), dtype=np.float32)).chunks is None
    assert make_source("array", array=da.zeros((100, 3), chunks=30)).chunks == 30
    assert make_source("array", array=da.zeros((100, 3), chunks=((40, 20, 40), (3,)))).chunks is None
    assert make_source("mnist", split="test").chunks is None
    assert make_source("synthetic", num_samples=10, shape=[2]).chunks is None
    src = make_source("zarr", path=str(tmp_path / "a.zarr"), array="x", limit=40)
    assert src.chunks == CHUNK and src.num_chunks() == 3


def test_read_chunk_reads_one_whole_chunk_and_refuses_others(tmp_path):
    x, y = _zarr(tmp_path / "a.zarr", n=40)
    src = make_source("zarr", path=str(tmp_path / "a.zarr"), array="x", labels="y")
    xc, yc = src.read_chunk(2)  # the last chunk is short: samples 32..39
    np.testing.assert_array_equal(xc, x[32:40])
    np.testing.assert_array_equal(yc, y[32:40])
    with pytest.raises(InvalidInputError, match=r"read_chunk\(index=3\).*expected an integer in \[0, 3\)"):
        src.read_chunk(3)
    with pytest.raises(InvalidInputError, match=r"chunked source \(chunks=None\)"):
        make_source("synthetic", num_samples=10, shape=[2]).read_chunk(0)


def test_take_reads_each_chunk_of_the_samples_once(tmp_path, monkeypatch):
    x, y = _zarr(tmp_path / "a.zarr")
    src = make_source("zarr", path=str(tmp_path / "a.zarr"), array="x", labels="y")
    reads = _Reads(monkeypatch)
    idx = np.random.default_rng(1).permutation(512)[:100]  # scattered over most of the 32 chunks
    got_x, got_y = src.take(idx)
    np.testing.assert_array_equal(got_x, x[idx])
    np.testing.assert_array_equal(got_y, y[idx])
    wanted = {int(i) // CHUNK for i in idx}
    assert sorted(reads.calls) == sorted((None, c * CHUNK, (c + 1) * CHUNK) for c in wanted)
    assert set(reads.calls.values()) == {1}
    # through a caller's chunk reader (what a worker passes): nothing read but through it
    asked = []

    def chunk(i):
        asked.append(i)
        return src.read_chunk(i)

    reads.calls.clear()
    np.testing.assert_array_equal(src.take(idx, chunk)[0], x[idx])
    assert sorted(asked) == sorted(wanted) and sum(reads.calls.values()) == len(wanted)
    # any order, repeats, a run of consecutive samples (copied as a slice), and a chunk's last samples
    for odd in (idx[::-1], np.repeat(idx[:5], 3), np.arange(40, 90), np.array([511, 0, 511])):
        got_x, got_y = src.take(odd)
        np.testing.assert_array_equal(got_x, x[odd])
        np.testing.assert_array_equal(got_y, y[odd])
    # a repeat and a gap in ascending order span as many rows as a run of consecutive samples: [0, 0, 2] was
    # copied as the slice 0:3 (samples 0, 1, 2) without a word
    rng = np.random.default_rng(2)
    cases = [np.array([0, 0, 2]), np.array([16, 16, 18, 40, 41, 41, 43])]
    cases += [np.sort(rng.integers(0, 64, size=12)) for _ in range(20)] + [rng.integers(0, 512, size=50)
                                                                          for _ in range(20)]
    for odd in cases:
        got_x, got_y = src.take(odd, src.read_chunk)
        np.testing.assert_array_equal(got_x, x[odd])
        np.testing.assert_array_equal(got_y, y[odd])


# ---------------------------------------------------------------------------------- composition windows
def test_window_unit_holds_whole_batches_and_chunks():
    assert window_unit(8, 512, chunks=512, window=8192) == 4096
    assert window_unit(8, 4, chunks=48, window=200) == 96  # lcm(32, 48)
    assert window_unit(8, 4, chunks=1000, window=200) == 32  # lcm too long: whole batches only
    assert window_unit(8, 4, chunks=None, window=200) == 8  # no chunks: whole groups, as before
    assert window_bounds(250, 100, 8, unit=96) == [(0, 192), (192, 250)]


@pytest.mark.parametrize("policy", ["similarity", "pc1"])
def test_chunk_aligned_composition_is_a_label_blind_permutation(tmp_path, policy):
    x, y = _zarr(tmp_path / "a.zarr", n=600)
    root = zarr.open_group(str(tmp_path / "a.zarr"), mode="r+")
    root.create_array("y2", shape=(600,), chunks=(CHUNK,), dtype="int64")[:] = np.random.default_rng(5).permutation(y)
    k, b = 4, 6  # batches of 24 samples; chunks of 16: windows of lcm = 48 samples, rounded up from 100 to 144
    kw = dict(group_size=k, block_size=b, policy=policy, window=100, seed=3)
    layout = compose(make_source("zarr", path=str(tmp_path / "a.zarr"), array="x", labels="y"), **kw)
    other = compose(make_source("zarr", path=str(tmp_path / "a.zarr"), array="x", labels="y2"), **kw)
    assert is_permutation(layout.order)
    np.testing.assert_array_equal(layout.order, other.order)  # labels never used
    if policy == "similarity":
        for batch in range(layout.num_batches):  # every batch from one window of whole chunks
            s = layout.samples(batch)
            assert np.unique(s // 144).size == 1, batch
    # and on a source without chunks, the windows are what they were (multiples of K)
    plain = compose(make_source("array", array=x), **kw)
    assert is_permutation(plain.order)


# ------------------------------------------------------------------------------- the worker's reads
def test_a_worker_reads_each_chunk_of_a_batch_once(tmp_path, monkeypatch):
    """Every shard of every scheme of every batch, from 8 threads at once (as a worker runs them), and the
    batch load: each chunk is decoded once by the worker, and each shard gets the samples it would read
    alone."""
    x, _ = _zarr(tmp_path / "a.zarr", n=512)
    src = make_source("zarr", path=str(tmp_path / "a.zarr"), array="x")
    layout = compose(src, group_size=8, block_size=8, policy="similarity", window=128)
    codes = {"uncoded": make_code("uncoded", num_inputs=8, num_workers=8),
             "replication": make_code("replication", num_inputs=8, num_workers=16),
             "gcc": make_code("gcc", num_inputs=8, num_workers=16)}
    plugin = RunPlugin("run-t0k3n", None, codes, src, None, layout, cache_batches=layout.num_batches)
    reads = _Reads(monkeypatch)
    jobs = [(b, s, w) for b in range(layout.num_batches) for s, c in codes.items() for w in range(c.num_workers)]
    jobs += [(b, "load", -1) for b in range(layout.num_batches)]
    np.random.default_rng(0).shuffle(jobs)

    def run(job):
        b, s, w = job
        return plugin.load(b).x if s == "load" else plugin.shard_input(b, s, w)

    with ThreadPoolExecutor(8) as pool:
        out = dict(zip(jobs, pool.map(run, jobs)))
    assert max(reads.calls.values()) == 1 and len(reads.calls) == src.num_chunks()
    for (b, s, w), got in out.items():
        if s == "load":
            np.testing.assert_array_equal(got, x[layout.samples(b)])
        elif s in ("uncoded", "replication"):
            np.testing.assert_array_equal(got, x[layout.position_samples(b, codes[s].selected_input(w))])
        else:
            want = codes[s].encode(layout.to_blocks(x[layout.samples(b)]), workers=[w])[0]
            np.testing.assert_array_equal(got, want)


def test_a_batch_reads_only_its_own_chunks_and_keeps_them(tmp_path, monkeypatch):
    """An uncoded shard of an as-stored batch reads the chunk of its own block; a gcc shard the batch's chunks,
    no more (never its window's), and a second shard of the batch on the worker reads nothing."""
    _zarr(tmp_path / "a.zarr", n=512)
    src = make_source("zarr", path=str(tmp_path / "a.zarr"), array="x")
    layout = compose(src, group_size=4, block_size=CHUNK, policy="as_stored")  # a block = one chunk
    codes = {"uncoded": make_code("uncoded", num_inputs=4, num_workers=4),
             "gcc": make_code("gcc", num_inputs=4, num_workers=8)}
    plugin = RunPlugin("run-t0k3n", None, codes, src, None, layout, cache_batches=2)
    reads = _Reads(monkeypatch)
    plugin.shard_input(3, "uncoded", 2)  # batch 3 = chunks 12..15; position 2 = chunk 14
    assert list(reads.calls) == [(None, 14 * CHUNK, 15 * CHUNK)]
    plugin.shard_input(3, "gcc", 5)
    plugin.shard_input(3, "gcc", 0)
    plugin.shard_input(3, "uncoded", 0)
    assert sorted(reads.calls) == [(None, c * CHUNK, (c + 1) * CHUNK) for c in range(12, 16)]
    assert set(reads.calls.values()) == {1}



def test_a_block_that_one_shard_alone_reads_is_read_fresh_and_kept_by_nobody(tmp_path, monkeypatch):
    """uncoded (or speculative) alone, a block as long as a chunk: the shard reads its chunk straight into its
    block (one read of that chunk, no gather) and the worker keeps neither the chunk nor the block (a worker that
    kept them faulted in fresh memory for every array f allocated); with replication beside it, every position
    is read by several shards, so the block is kept and read once per worker, as before."""
    _zarr(tmp_path / "a.zarr", n=512)
    src = make_source("zarr", path=str(tmp_path / "a.zarr"), array="x")
    layout = compose(src, group_size=4, block_size=CHUNK, policy="as_stored")
    alone = RunPlugin("run-t0k3n", None, {"uncoded": make_code("uncoded", num_inputs=4, num_workers=4)}, src, None,
                      layout, cache_batches=2)
    want = src.read(14 * CHUNK, 15 * CHUNK)[0]  # batch 3 = chunks 12..15; position 2 = chunk 14
    reads = _Reads(monkeypatch)
    x = alone.shard_input(3, "uncoded", 2)
    np.testing.assert_array_equal(x, want)
    assert reads.calls == {(None, 14 * CHUNK, 15 * CHUNK): 1}
    assert not alone._batches and not len(alone._chunk_pool)  # nothing kept
    x[:] = -1  # the shard's own array: nothing the worker reads again
    np.testing.assert_array_equal(alone.shard_input(3, "uncoded", 2), want)

    # speculative's backup copies run only when late, on another worker: its blocks are read alone too
    spec = RunPlugin("run-t0k3n", None, {"speculative": make_code("speculative", num_inputs=4, num_workers=12)},
                     src, None, layout, cache_batches=2)
    reads.calls.clear()
    np.testing.assert_array_equal(spec.shard_input(3, "speculative", 6), want)  # copy 1 of position 2
    assert reads.calls == {(None, 14 * CHUNK, 15 * CHUNK): 1} and not spec._batches

    replication = make_code("replication", num_inputs=4, num_workers=8)
    shared = RunPlugin("run-t0k3n", None, {"uncoded": make_code("uncoded", num_inputs=4, num_workers=4),
                                           "replication": replication}, src, None, layout, cache_batches=2)
    reads.calls.clear()
    a = shared.shard_input(3, "uncoded", 2)
    b = shared.shard_input(3, "replication", next(w for w in range(8) if replication.selected_input(w) == 2))
    assert reads.calls == {(None, 14 * CHUNK, 15 * CHUNK): 1} and "position-2" in shared._batches[3]
    assert a is b


def test_take_of_whole_chunks_reads_them_as_one_slice(tmp_path, monkeypatch):
    """``take`` of consecutive samples from a chunk's first to a chunk's last, without a chunk reader: one read
    of those samples (no gather); the same values as the gather through a reader that holds chunks."""
    _zarr(tmp_path / "a.zarr", n=100)  # 7 chunks, the last of 4 samples
    src = make_source("zarr", path=str(tmp_path / "a.zarr"), array="x")
    assert src.whole_chunks(np.arange(16, 48)) and src.whole_chunks(np.arange(96, 100))
    assert src.whole_chunks(np.arange(80, 100))
    for idx in (np.arange(16, 47), np.arange(17, 48), np.arange(16, 48)[::-1], np.array([16, 16, 17]),
                np.arange(0, 0), np.arange(16, 48).reshape(2, -1), np.arange(16, 48) * 1.0):
        assert not src.whole_chunks(idx), idx
    assert not make_source("array", array=np.zeros((64, 3), np.float32)).whole_chunks(np.arange(16))
    reads = _Reads(monkeypatch)
    X, y = src.take(np.arange(16, 48))
    assert list(reads.calls) == [(None, 16, 48)]
    X2, y2 = src.take(np.arange(16, 48), src.read_chunk)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)


# ---------------------------------------------------------------------------------- a real pipeline
def _cfg(path, data, schemes, **extra):
    cfg = {
        "name": "chunked",
        "source": {"kind": "zarr", "path": str(data), "array": "x", "labels": "y"},
        "workload": {"kind": "callable", "name": "numpy:tanh"},
        "code": {"num_inputs": 4, "num_workers": 8, "block_size": 8},
        "composition": {"policy": "similarity", "window": 64},
        "schemes": schemes,
        "cutoff": {"stragglers": 2},
        "store": {"path": str(path)},
        "run": {"progress": False, "max_batches_in_flight": 4},
    }
    cfg.update(extra)
    return cfg


def test_a_pipeline_reads_each_chunk_once_per_worker_and_resumes(client, tmp_path, monkeypatch):
    """gcc and uncoded on a chunked Zarr source with the similarity composition, on the session's cluster: every
    read inside a shard or reference task is a whole chunk, read at most once per worker; uncoded equals f on
    the stored composition's samples; a limited run resumed keeps its composition."""
    from distributed import get_worker
    from distributed.worker import thread_state

    x, _ = _zarr(tmp_path / "data.zarr", n=400)

    def in_task():
        key = getattr(thread_state, "key", None)
        if not isinstance(key, str) or not key.startswith(("eval-", "reference-")):
            return None
        return get_worker().address

    reads = _Reads(monkeypatch, in_task)
    path = tmp_path / "run.zarr"
    first = gd.run_pipeline(_cfg(path, tmp_path / "data.zarr", ["gcc", "uncoded"], run={
        "progress": False, "max_batches_in_flight": 4, "limit_batches": 5}), client=client)
    assert first.status == "incomplete"
    order = zarr.open_group(str(path), mode="r")["inputs/sample"][:]
    runs = [dict(reads.calls)]
    reads.calls.clear()
    done = gd.run_pipeline(_cfg(path, tmp_path / "data.zarr", ["gcc", "uncoded"]), client=client)
    runs.append(dict(reads.calls))
    assert done.status == "complete"
    root = zarr.open_group(str(path), mode="r")
    np.testing.assert_array_equal(root["inputs/sample"][:], order)  # the resume kept the composition
    assert is_permutation(order) and not np.array_equal(order, np.arange(400))
    assert root.attrs["composition"] == "similarity"
    for calls in runs:
        in_tasks = {k: v for k, v in calls.items() if k[0] is not None}
        assert in_tasks and max(in_tasks.values()) == 1  # each chunk at most once per worker, in each run
        assert all(start % CHUNK == 0 and stop - start == CHUNK for _, start, stop in in_tasks)
    decoded = root["uncoded/decoded"][:]
    np.testing.assert_allclose(decoded.reshape(400, -1), np.tanh(x[order]).reshape(400, -1), rtol=1e-6)


def test_a_run_of_exact_schemes_only_keeps_the_stored_order(client, tmp_path):
    """uncoded alone: any composition gives the same estimates, so the run reads the samples as stored."""
    x, _ = _zarr(tmp_path / "data.zarr", n=100)
    run = gd.run_pipeline(_cfg(tmp_path / "run.zarr", tmp_path / "data.zarr", ["uncoded"]), client=client)
    root = zarr.open_group(str(run.path), mode="r")
    assert root.attrs["composition"] == "as_stored"
    np.testing.assert_array_equal(root["inputs/sample"][:], np.arange(100))
    np.testing.assert_allclose(root["uncoded/decoded"][:].reshape(100, -1), np.tanh(x).reshape(100, -1), rtol=1e-6)


def _naive_chain(features):
    """The chain as first written: search every sample at every step (the reference for chain_order)."""
    f = np.ascontiguousarray(features, dtype=np.float32)
    n = f.shape[0]
    order = np.empty(n, dtype=np.int64)
    left = np.einsum("ij,ij->i", f, f)
    cur = int(np.argmin(f[:, 0]))
    for i in range(n):
        order[i] = cur
        left[cur] = np.inf
        if i + 1 < n:
            cur = int(np.argmin(left - 2.0 * f @ f[cur]))
    return order


@pytest.mark.parametrize("n", [1, 2, 65, 300, 1000])
def test_the_chain_that_drops_visited_samples_is_the_same_chain(n):
    from gcc_dask.composition import chain_order

    f = np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)
    got = chain_order(f)
    assert is_permutation(got)
    np.testing.assert_array_equal(got, _naive_chain(f))
    ties = np.repeat(np.arange(n // 2 + 1, dtype=np.float32), 2)[:n, None]  # pairs of equal samples
    np.testing.assert_array_equal(chain_order(ties), _naive_chain(ties))


def test_a_dask_array_source_takes_through_a_workers_chunk_reader():
    """A dask array is read block by block: through a worker's chunk reader each block of the samples is asked
    for once; without one, as before (one selection)."""
    import dask.array as da

    x = np.random.default_rng(2).random((100, 3), dtype=np.float32)
    src = make_source("array", array=da.from_array(x, chunks=30))
    assert src.remote and src.chunks == 30
    idx = np.array([95, 3, 31, 4, 61, 62, 0])
    asked = []

    def chunk(i):
        asked.append(i)
        return src.read_chunk(i)

    np.testing.assert_array_equal(src.take(idx, chunk)[0], x[idx])
    assert sorted(asked) == [0, 1, 2, 3]
    np.testing.assert_array_equal(src.take(idx)[0], x[idx])


def test_a_batch_is_read_once_for_all_its_coded_shards(client, tmp_path, monkeypatch):
    """gcc on a chunked Zarr source, on the session's two workers: each batch is read by one task (``load-``),
    which reads each chunk of its window once (a window of 64 samples holds two batches of 32, from its 4 chunks
    of 16), and no shard reads anything; the estimates are bit for bit those of the same run on one worker,
    whose shards read the batch themselves."""
    from distributed import Client, LocalCluster, get_worker
    from distributed.worker import thread_state

    _zarr(tmp_path / "data.zarr", n=512)

    def in_task():
        key = getattr(thread_state, "key", None)
        if not isinstance(key, str) or not key.startswith(("eval-", "load-")):
            return None
        return key, get_worker().address

    reads = _Reads(monkeypatch, in_task)
    cfg = _cfg(tmp_path / "two.zarr", tmp_path / "data.zarr", ["gcc"], cutoff={"stragglers": 0})
    assert gd.run_pipeline(cfg, client=client).status == "complete"
    in_tasks = {k: v for k, v in reads.calls.items() if k[0] is not None}
    assert {who[0].split("-")[0] for who, _, _ in in_tasks} == {"load"}  # the shards read nothing
    assert set(in_tasks.values()) == {1}  # each chunk once per batch
    loads = collections.defaultdict(set)
    for (key, _), start, stop in in_tasks:
        loads[int(key.split("-")[1][1:])].add((start, stop))
    assert sorted(loads) == list(range(16))  # one read for each batch of 32 samples
    for batch, chunks in loads.items():
        window = batch // 2 * 64
        assert chunks == {(s, s + CHUNK) for s in range(window, window + 64, CHUNK)}
    assert len({who[1] for who, _, _ in in_tasks}) == 2  # the reads are spread over both workers
    with LocalCluster(n_workers=1, threads_per_worker=8, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as one:
        cfg = _cfg(tmp_path / "one.zarr", tmp_path / "data.zarr", ["gcc"], cutoff={"stragglers": 0})
        assert gd.run_pipeline(cfg, client=one).status == "complete"
    two, one = (zarr.open_group(str(tmp_path / f"{n}.zarr"), mode="r") for n in ("two", "one"))
    np.testing.assert_array_equal(two["inputs/sample"][:], one["inputs/sample"][:])
    np.testing.assert_array_equal(two["gcc/received"][:], one["gcc/received"][:])
    np.testing.assert_array_equal(two["gcc/decoded"][:], one["gcc/decoded"][:])
