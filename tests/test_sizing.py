"""The block size chosen from f's cost (``code.block_size: auto``, :mod:`gcc_dask.sizing`)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.sizing import (
    MAX_BLOCK_SIZE, MIN_BATCHES, TARGET_SHARD_S, FCost, batches_in_flight, choose_block_size, time_f,
)


def _choose(cost, n=10_000_000, k=8, row_bytes=128, **kw):
    return choose_block_size(cost, num_samples=n, group_size=k, row_bytes=row_bytes, **kw)


def test_a_slow_f_gets_smaller_blocks_than_a_fast_one():
    fast, slow = _choose(1e-6), _choose(1e-3)
    assert slow.block_size < fast.block_size
    # f's time per shard near the target (the power of two at or below TARGET / cost)
    assert TARGET_SHARD_S / 2 < slow.block_size * 1e-3 <= TARGET_SHARD_S
    assert slow.block_size == 64 and "0.1 s of f per shard" in slow.reason


@pytest.mark.parametrize(("kw", "block", "bound"), [
    ({"n": 4096}, 128, "at least 4 batches"),  # 4096 / (8 * 4)
    ({"row_bytes": 3136}, 4096, "MiB of samples per batch"),  # 128 MiB / (8 * 3136) = 5349 -> 4096
    ({"cost": 0.0, "row_bytes": 16}, 262144, "the largest block size"),
], ids=["data", "memory", "cap"])
def test_the_bounds_of_the_choice(kw, block, bound):
    cost = kw.pop("cost", 1e-9)
    choice = _choose(cost, **kw)
    assert choice.block_size == block and bound in choice.reason
    assert choice.block_size <= MAX_BLOCK_SIZE


def test_blocks_line_up_with_the_chunks():
    # 200,000 rows in chunks of 10,000, a cheap f: the bound (4 batches: 6,250) is rounded up to one chunk, so
    # each shard of uncoded or replication reads one whole chunk of its own (3 batches: 80,000, 80,000, 40,000)
    choice = _choose(5e-7, n=200_000, chunks=10_000)
    assert choice.block_size == 10_000 and "rounded up to whole chunks of 10000" in choice.reason
    # 2,000,000 rows in chunks of 100,000: one chunk a block, each chunk decompressed once (it was half a chunk
    # when the largest block size was 65,536: every chunk read twice, by two shards)
    big = _choose(5.2e-7, n=2_000_000, chunks=100_000)
    assert big.block_size == 100_000 and "rounded up to whole chunks of 100000" in big.reason
    # a chunk the bound cannot reach: a divisor of it (0.1 s of f is 192,307 rows: a quarter of the chunk)
    part = _choose(5.2e-7, n=20_000_000, chunks=400_000, row_bytes=32)
    assert part.block_size == 100_000 and "aligned with chunks of 400000" in part.reason
    # several chunks per shard: a whole number of them, rounded down
    assert _choose(1.7e-5, n=100_000, chunks=512, row_bytes=3136).block_size == 3072  # 4 batches: 3,125
    # a batch shorter than a chunk: a whole number of batches fills each chunk
    small = _choose(1e-3, n=200_000, chunks=1200)
    assert small.block_size == 75 and 1200 % (8 * small.block_size) == 0
    # never rounded up past the memory bound: 8 x 120,000 rows of 256 bytes is over 128 MiB
    mem = _choose(1e-9, n=10_000_000, chunks=120_000, row_bytes=256)
    assert mem.block_size == 60_000 and 8 * mem.block_size * 256 <= 128 * 2**20
    # a fixed batch dimension of the model: B is a multiple of it
    assert _choose(1e-3, multiple=24).block_size % 24 == 0
    odd = _choose(5e-7, n=200_000, chunks=10_000, multiple=3)
    assert odd.block_size % 3 == 0 and "not lined up with chunks of 10000" in odd.reason


def test_batches_in_flight_follow_the_batch_bytes():
    assert batches_in_flight(64, 8, 128, 16) == 16
    assert batches_in_flight(65536, 8, 256, 16) == 4  # 128 MiB batches: 512 MiB in flight
    assert batches_in_flight(65536, 8, 4096, 16) == 2  # never below 2
    assert batches_in_flight(65536, 8, 4096, 1) == 1  # never above the configured number
    assert _choose(0.0, row_bytes=128).max_in_flight == 4  # 128 MiB batches (B = 131,072 rows of 128 bytes)


@pytest.mark.parametrize(("cost", "kw", "match"), [
    (-1.0, {}, "seconds_per_row"),
    (float("nan"), {}, "seconds_per_row"),
    (1e-6, {"k": 0}, "group_size"),
    (1e-6, {"row_bytes": 0}, "row_bytes"),
], ids=["negative", "nan", "k", "row-bytes"])
def test_bad_arguments_name_themselves(cost, kw, match):
    with pytest.raises(ValueError, match=match):
        _choose(cost, **kw)


def test_time_f_doubles_the_rows_until_a_call_is_long_enough():
    calls = []
    ticks = iter(np.arange(0, 100, 0.001))  # a simulated clock: every reading 1 ms later

    def clock():
        return float(next(ticks))

    def f(x):
        calls.append(len(x))
        return x

    cost = time_f(f, lambda a, b: np.zeros((b - a, 3)), 1000, clock=clock)
    # each timed call reads the clock twice, 1 ms apart: never PROBE_S long, so it runs to the cap, and the
    # last, short call is timed twice more
    assert calls == [64, 64, 128, 256, 512, 1000, 1000, 1000]
    assert cost.rows == 1000 and cost.seconds == pytest.approx(0.001)


def test_time_f_keeps_the_fastest_of_the_last_calls_on_a_busy_machine():
    """The first call on the last rows was preempted (30 ms by the clock, for 1 ms of f): the fastest of the
    three is f's cost, not the preempted one (a busy machine chose blocks 16-80x too small)."""
    spent = iter([0.001, 0.03, 0.001, 0.002])  # the warm-up is not timed; 64 rows: 1 ms; 128 rows: 30, 1, 2 ms

    def f(x):
        return x

    now = [0.0]
    reads = []

    def clock():
        reads.append(now[0])
        if len(reads) % 2 == 0:  # the end of a timed call: advance by that call's time
            now[0] += next(spent)
        return now[0]

    cost = time_f(f, lambda a, b: np.zeros((b - a, 3)), 128, clock=clock)
    assert cost.rows == 128 and cost.seconds == pytest.approx(0.001)


def test_time_f_stops_at_a_long_call():
    calls = []

    def f(x):
        calls.append(len(x))
        time.sleep(0.05)  # one call is already longer than 2 × PROBE_S: not timed again
        return x

    cost = time_f(f, lambda a, b: np.zeros((b - a, 3)), 10_000)
    assert calls == [64, 64] and cost.rows == 64 and cost.seconds >= 0.05


def _slow(x):
    time.sleep(1e-3 * len(x))  # 1 ms per row: blocks of at most 100 rows
    return np.tanh(x[:, :2])


def _fast(x):
    return np.tanh(x[:, :2])


def test_a_run_stores_the_block_size_it_chose_and_a_users_wins(tmp_path, client):
    x = np.random.default_rng(0).normal(size=(4096, 4)).astype("float32")
    kw = dict(schemes=("uncoded",), client=client, composition={"policy": "as_stored"})
    fast = gd.coded_map(_fast, x, out=tmp_path / "fast.zarr", **kw)
    slow = gd.coded_map(_slow, x, out=tmp_path / "slow.zarr", **kw)
    mine = gd.coded_map(_fast, x, out=tmp_path / "mine.zarr", code={"num_inputs": 8, "num_workers": 16,
                                                                    "block_size": 16}, **kw)
    attrs = {name: dict(zarr.open_group(str(tmp_path / f"{name}.zarr"), mode="r").attrs)
             for name in ("fast", "slow", "mine")}
    assert attrs["fast"]["block_size"] == 4096 // (8 * MIN_BATCHES)  # bounded by the data
    assert attrs["slow"]["block_size"] <= 64 < attrs["fast"]["block_size"]
    assert attrs["mine"]["block_size"] == 16 and attrs["mine"]["block_size_reason"] == "code.block_size"
    assert attrs["slow"]["block_size_reason"].startswith("auto: f took")
    for res in (fast, slow, mine):
        np.testing.assert_allclose(res.estimates, _fast(x), rtol=1e-6)
    # a resume keeps the stored block size, whatever f's cost is now
    again = gd.coded_map(_slow, x, out=tmp_path / "slow.zarr", **kw)
    assert zarr.open_group(str(tmp_path / "slow.zarr"), mode="r").attrs["block_size"] == attrs["slow"]["block_size"]
    assert again.run.wall_s == 0.0
    assert again.summary.attrs["block_size"] == attrs["slow"]["block_size"]
    assert again.summary.attrs["block_size_reason"] == attrs["slow"]["block_size_reason"]


def test_time_f_reads_the_samples_once():
    """A chunked, compressed source decompresses its first chunk once for the whole probe, not once per timed
    call (at 2,000,000 rows in chunks of 100,000 the reads were most of a 0.24 s probe)."""
    calls = []

    def read(a, b):
        calls.append((a, b))
        return np.zeros((b - a, 3))

    cost = time_f(lambda x: x.sum(axis=1), read, 1000)
    assert calls == [(0, 1000)] and cost.rows == 1000


def test_the_probe_reads_the_first_samples_once_and_no_more_than_its_bytes(monkeypatch):
    """The model's check (sample 0) and f's timing share one read of the source's first samples (a compressed
    chunked source decoded its first chunk twice), and large samples are read no more than
    :data:`~gcc_dask.sizing.PROBE_MAX_BYTES` of them (8,192 images of 224 x 224 x 3 float32 were 4.9 GB)."""
    from gcc_dask import sizing
    from gcc_dask.inputs import _probe_model
    from gcc_dask.sources import make_source
    from gcc_dask.workloads import make_workload

    reads = []
    cls = type(make_source("array", array=np.ones((2, 3), np.float32)))
    original = cls._read
    monkeypatch.setattr(cls, "_read", lambda s, a, b: reads.append((a, b)) or original(s, a, b))
    for shape, rows in (((32,), sizing.PROBE_MAX_ROWS), ((3, 224, 224), sizing.PROBE_MAX_BYTES // (3 * 224 * 224 * 4))):
        source = make_source("array", array=np.ones((20_000 if len(shape) == 1 else 64, *shape), np.float32))
        assert type(source) is cls
        reads.clear()
        out, cost = _probe_model(make_workload("callable", function=lambda x: x.reshape(len(x), -1)[:, :2]), source,
                                 timed=True)
        assert reads == [(0, rows)] and out == (2,) and 1 <= cost.rows <= rows
        reads.clear()
        assert _probe_model(make_workload("callable", function=lambda x: x.reshape(len(x), -1)[:, :2]), source)[1] is None
        assert reads == [(0, 1)]
    assert sizing.probe_rows(10) == 10 and sizing.probe_rows(10**6, 10**12) == 1


@pytest.mark.parametrize("damaged,timed", [(0, False), (0, True), (3, True)])
def test_a_damaged_chunk_among_the_probed_samples_is_one_source_error_line(tmp_path, damaged, timed):
    """A compressed chunk that cannot be decoded (numcodecs' zstd raises RuntimeError) among the samples the probe
    reads: sample 0's chunk, or a later one that only the timing's read (the first samples, read once) reaches, is
    one SourceError line naming the source, not a bare RuntimeError out of zarr."""
    import zarr

    from gcc_dask.errors import SourceError
    from gcc_dask.inputs import _probe_model
    from gcc_dask.sources import make_source
    from gcc_dask.workloads import make_workload

    path = tmp_path / "a.zarr"
    z = zarr.open_array(str(path), mode="w", shape=(400, 5), chunks=(50, 5), dtype="float32")
    z[:] = np.random.default_rng(0).normal(size=(400, 5)).astype(np.float32)
    chunk = path / "c" / str(damaged) / "0"
    data = bytearray(chunk.read_bytes())
    data[4:] = bytes(b ^ 0x5A for b in data[4:])
    chunk.write_bytes(bytes(data))
    source = make_source("zarr", path=str(path))
    with pytest.raises(SourceError, match=r"^source: got .*cannot be read \(RuntimeError: .*\)") as err:
        _probe_model(make_workload("callable", function=lambda x: x[:, :2]), source, timed=timed)
    assert "\n" not in str(err.value)
