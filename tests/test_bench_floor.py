"""The throughput floor of a coded scheme: its parts measured alone, and the bounds they imply."""

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.bench.floor import throughput_floor
from gcc_dask.errors import InvalidInputError
from gcc_dask.sources import make_source

K, B, C = 4, 8, 16  # K inputs, B samples per shard, chunks of C samples: a batch of 32 samples is 2 chunks


def _f(x):
    return np.tanh(x.reshape(len(x), -1) @ np.linspace(-1.0, 1.0, 12 * 3).reshape(12, 3))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    import zarr

    path = tmp_path_factory.mktemp("floor") / "x.zarr"
    arr = zarr.create_array(store=str(path), shape=(256, 12), chunks=(C, 12), dtype="float32")
    arr[:] = np.random.default_rng(0).standard_normal((256, 12)).astype(np.float32)
    return make_source("zarr", path=str(path))


@pytest.mark.parametrize("composes", [True, False])
def test_the_floor_is_the_plain_maps_cost_over_the_schemes_parts(source, composes):
    code = gd.make_code("gcc", num_inputs=K, num_workers=8)
    r = throughput_floor(source, _f, code, block=B, stopping_at=6, processes=3, composes=composes, repeats=3,
                         window=64)
    for name in ("chunk_read_s", "plain_read_s", "plain_f_s", "f_s", "encode_s", "read_s"):
        assert r[name] > 0, name
    # K plain tasks of B = 8 samples, each reading the one chunk of C = 16 that holds them; min(P, N - S)
    # processes each read a batch's worth (K·B / C) of chunks
    assert r["plain_read_s"] == pytest.approx(K * r["chunk_read_s"])
    assert r["read_s"] == pytest.approx(3 * (K * B / C) * r["chunk_read_s"])
    plain = r["plain_read_s"] + r["plain_f_s"]
    batches = r["f_s"] + r["encode_s"] + r["read_s"]
    assert r["floor_without_composition"] == pytest.approx(plain / batches)
    assert r["floor"] == pytest.approx(plain / (batches + r["composition_s"]))
    assert r["work_limit"] == pytest.approx(K / 6)
    if composes:
        assert r["composition_s"] > 0 and r["floor"] < r["floor_without_composition"]
    else:
        assert r["composition_s"] == 0 and r["floor"] == r["floor_without_composition"]


def test_reads_count_at_most_the_processes_that_run_a_shard(source):
    code = gd.make_code("gcc", num_inputs=K, num_workers=8)
    r = throughput_floor(source, _f, code, block=B, stopping_at=2, processes=5, composes=False, repeats=1)
    assert r["read_s"] == pytest.approx(2 * (K * B / C) * r["chunk_read_s"])  # 2 shards: 2 processes read


def _per_row(x):  # 1 ms a row: f's cost follows the rows it is given
    import time

    time.sleep(1e-3 * len(x))
    return x.reshape(len(x), -1)[:, :3]


def test_a_plain_task_reads_the_chunks_of_its_block_and_evaluates_f_on_all_of_it(source):
    """Blocks of B = 32 over chunks of C = 16: a plain task reads 2 chunks and runs f on 32 rows (not one
    chunk's 16); and f on its B rows costs about what a coded shard's call costs."""
    code = gd.make_code("gcc", num_inputs=K, num_workers=8)
    r = throughput_floor(source, _per_row, code, block=32, stopping_at=6, processes=2, composes=False, repeats=3)
    assert r["plain_read_s"] == pytest.approx(K * 2 * r["chunk_read_s"])
    assert r["plain_f_s"] == pytest.approx(K * 32e-3, rel=0.5)
    assert r["plain_f_s"] / K == pytest.approx(r["f_s"] / 6, rel=0.5)


def test_bad_arguments_name_themselves(source):
    code = gd.make_code("gcc", num_inputs=K, num_workers=8)
    with pytest.raises(InvalidInputError, match=r"stopping_at: got 9; expected an integer in \[1, 8\]"):
        throughput_floor(source, _f, code, block=B, stopping_at=9, processes=2)
    with pytest.raises(InvalidInputError, match="processes: got 0"):
        throughput_floor(source, _f, code, block=B, stopping_at=6, processes=0)
    flat = make_source("array", data=np.zeros((64, 12), np.float32))
    with pytest.raises(InvalidInputError, match="source: got .* which has no chunks"):
        throughput_floor(flat, _f, code, block=B, stopping_at=6, processes=2)
    with pytest.raises(InvalidInputError, match="source: got 'ndarray', which has no chunks"):
        throughput_floor(np.zeros((64, 12)), _f, code, block=B, stopping_at=6, processes=2)
    with pytest.raises(InvalidInputError, match="code: got NoneType; expected a coding scheme"):
        throughput_floor(source, _f, None, block=B, stopping_at=6, processes=2)
    with pytest.raises(InvalidInputError, match=r"repeats: got 0; expected an integer in \[1, inf\]"):
        throughput_floor(source, _f, code, block=B, stopping_at=6, processes=2, repeats=0)
    with pytest.raises(InvalidInputError, match="composes: got 'no'; expected True or False"):
        throughput_floor(source, _f, code, block=B, stopping_at=6, processes=2, composes="no")
    with pytest.raises(InvalidInputError, match="windw: not a keyword of the composition"):
        throughput_floor(source, _f, code, block=B, stopping_at=6, processes=2, windw=64)
    with pytest.raises(InvalidInputError, match=r"block: got 1000; a batch of K·B = 4000 samples .* at most 64"):
        throughput_floor(source, _f, code, block=1000, stopping_at=6, processes=2)
