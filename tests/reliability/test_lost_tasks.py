"""A batch's non-shard tasks lost with their worker are submitted again; the store is as if nothing died.

Shards are erasures when their worker dies, but a batch's reference and decode tasks are deterministic,
and losing one must not fail the batch (status 4 is final: a resume never redoes it). Here a task "dies"
by raising ``KilledWorker``, exactly what the driver sees when a worker dies under it (the task and
everything downstream err with it), at a chosen place: the reference write of batch 1, the decoded write
of batch 2, and the read of batch 3 (which happens in a shard, so that shard is an erasure). The real
thing, with SIGKILLed worker processes, is in ``test_worker_death.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import gcc_dask as gd
import gcc_dask.pipeline
from rel_helpers import DyingArray, DyingSink, arm, assert_stores_equal, read_group, synthetic_config

K, N, BATCHES = 4, 8, 6
DATA = np.random.default_rng(5).random((K * BATCHES, 6)).astype(np.float32)


def _config(path, array, **sections):
    cfg = synthetic_config(path, batches=BATCHES, k=K, n=N, schemes=("gcc", "uncoded"), **sections)
    cfg["source"] = {"kind": "array", "array": array}
    return cfg


@pytest.fixture(scope="module")
def clean(client, tmp_path_factory):
    return gd.run_pipeline(_config(tmp_path_factory.mktemp("clean") / "clean.zarr", DATA), client=client)


def test_lost_reference_and_decode_are_redone(client, tmp_path, clean, monkeypatch):
    monkeypatch.setattr(gcc_dask.pipeline, "StoreSink", DyingSink)
    arm(("inputs", 1), ("decoded", "gcc", 2))
    run = gd.run_pipeline(_config(tmp_path / "dying.zarr", DATA), client=client)
    assert run.status == "complete"
    gcc = read_group(run.path, "gcc")
    assert (gcc["status"] == 1).all() and not gcc["failed"].any()
    assert (read_group(run.path, "inputs", ("status",))["status"] == 1).all()
    assert np.isfinite(gcc["mse"]).all()  # batch 1's reference was recomputed, so its MSE is known
    assert_stores_equal(clean.path, run.path, ["gcc", "uncoded"])


def test_a_read_lost_in_a_shard_is_one_erasure(client, tmp_path):
    """Shards read (and encode) their batch on their worker: a read that dies with its worker erases the
    one shard that made it; the worker's next shard reads again, and every other batch is untouched."""
    no_ref = {"run": {"reference": False}}
    clean = gd.run_pipeline(_config(tmp_path / "clean.zarr", DATA, **no_ref), client=client)
    arm(("load", 3))
    run = gd.run_pipeline(_config(tmp_path / "lost-read.zarr", DyingArray(DATA, K), **no_ref), client=client)
    assert run.status == "complete"
    names = ("decoded", "status", "received", "failed")
    got = {s: read_group(run.path, s, names) for s in ("gcc", "uncoded")}
    want = {s: read_group(clean.path, s, names) for s in ("gcc", "uncoded")}
    assert sum(int(g["failed"][3].sum()) for g in got.values()) == 1  # exactly one shard, of batch 3
    for s in got:
        assert (got[s]["status"] > 0).all()
        for name in ("status", "received", "failed"):
            np.testing.assert_array_equal(np.delete(got[s][name], 3, axis=0), np.delete(want[s][name], 3, axis=0))
        rows = np.s_[3 * K : 4 * K]
        np.testing.assert_array_equal(np.delete(got[s]["decoded"], rows, axis=0),
                                      np.delete(want[s]["decoded"], rows, axis=0))


class _ChunkedDyingArray(DyingArray):
    """The same array in chunks of one batch: a chunked source, whose batches are read by a task of their own that
    the batch's coded shards take (docs/pipeline.rst, 'Reads that follow the chunks')."""

    @property
    def chunks(self):
        return ((self.batch_size,) * (self.shape[0] // self.batch_size), (self.shape[1],))


def test_a_batch_read_lost_with_its_worker_is_read_again_elsewhere(client, tmp_path):
    """From a chunked source, on two workers, each batch is read once, by a task that gcc's shards take: that
    read dies with its worker (batch 3), so every one of the batch's shards would fail with it; gcc's batch runs
    again instead, with a read elsewhere, and the store is as if nothing died (no erasure, the same draws)."""
    def config(path):
        cfg = synthetic_config(path, batches=BATCHES, k=K, n=N, schemes=("gcc",), run={"reference": False})
        cfg["source"] = {"kind": "array", "array": _ChunkedDyingArray(DATA, K)}
        return cfg

    clean = gd.run_pipeline(config(tmp_path / "clean.zarr"), client=client)
    arm(("load", 3))
    run = gd.run_pipeline(config(tmp_path / "lost-read.zarr"), client=client)
    assert run.status == "complete"
    names = ("decoded", "status", "received", "failed")
    got, want = read_group(run.path, "gcc", names), read_group(clean.path, "gcc", names)
    assert (got["status"] == 1).all() and not got["failed"].any()
    for name in names:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_a_record_lost_after_its_decode_finished_is_decoded_again(client, tmp_path, clean, monkeypatch):
    """The worker holding a finished decode's record (scored against the reference) dies before the driver
    fetches it, and Dask cannot recompute it (here: the fetch fails for batch 4, twice). The driver decodes
    the same kept shards again instead of writing the batch off as failed (status 4)."""
    from distributed import KilledWorker

    from rel_helpers import GoneWorker

    real_gather = client.gather
    failures = []

    def gather(futures, *args, **kwargs):
        keys = [str(f.key) for f in futures]
        if any(k.startswith("score-b4-gcc-") and "-a1-" not in k for k in keys) and len(failures) < 2:
            failures.append(keys)
            raise KilledWorker("decode-b4-gcc", GoneWorker(), 0)
        return real_gather(futures, *args, **kwargs)

    monkeypatch.setattr(client, "gather", gather)
    run = gd.run_pipeline(_config(tmp_path / "lost-record.zarr", DATA), client=client)
    assert len(failures) == 2 and run.status == "complete"
    assert (read_group(run.path, "gcc", ("status",))["status"] == 1).all()
    assert_stores_equal(clean.path, run.path, ["gcc", "uncoded"])
