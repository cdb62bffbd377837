"""Determinism: the virtual clock makes runs reproducible whatever the cluster; the wall clock is recorded.

With injected straggling, which shards count as arrived is decided by the seeded latency draws
(docs/pipeline.rst, section 'Straggler injection'), so the same config and seed give bitwise-identical stores on
CPU whatever the number of Dask workers, threads or batches in flight. With real latencies
(``stragglers.model: none``) the kept sets depend on the machine, and the store records them: decoding the
recorded sets again reproduces the stored estimates exactly (float32 bit for bit).
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from run_helpers import direct_decode, stored_layout
from distributed import Client, LocalCluster

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.pipeline import build_codes
from gcc_dask.sources import make_source
from gcc_dask.workloads import make_workload
from rel_helpers import SMOKE, assert_stores_equal, read_group

SCHEMES = ["gcc", "bacc", "replication", "uncoded"]


def _run(client, out, *overrides):
    return gd.run_pipeline(SMOKE, client=client, out=out, overrides=["run.progress=false", *overrides])


@pytest.fixture(scope="module")
def reference_run(client, tmp_path_factory):
    """The smoke pipeline (8 MNIST batches through LeNet-5, four schemes) on the session cluster."""
    return _run(client, tmp_path_factory.mktemp("det") / "ref.zarr")


@pytest.mark.parametrize(("n_workers", "threads", "in_flight"), [(1, 16, 8), (3, 4, 1)],
                         ids=["1-worker-8-in-flight", "3-workers-serial"])
# 3 workers of 4 threads hold 12 of a batch's 16 shards at once: the run says so; the virtual clock's store is the
# same whatever the threads, which is what this test shows
@pytest.mark.filterwarnings("ignore:a batch has up to N = :RuntimeWarning")
def test_virtual_clock_store_is_identical_on_any_cluster(reference_run, tmp_path, n_workers, threads, in_flight):
    with LocalCluster(n_workers=n_workers, threads_per_worker=threads, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as other:
        run = _run(other, tmp_path / "other.zarr", f"run.max_batches_in_flight={in_flight}")
    assert run.status == reference_run.status == "complete"
    assert_stores_equal(reference_run.path, run.path, SCHEMES)
    # the draws really straggle: every gcc batch left stragglers out
    assert (read_group(run.path, "gcc")["n_received"] < 16).all()


def _worker_inputs(cfg):
    src = cfg.source.model_dump(exclude_none=True)
    source = make_source(src.pop("kind"), **src)
    wl = cfg.workload.model_dump(exclude_none=True)
    f = make_workload(wl.pop("kind"), base_dir=cfg.base_dir, path=wl["path"]).load()
    return source, f


def test_wall_clock_store_records_received_sets_that_redecode_exactly(client, tmp_path):
    """stragglers.model: none -> the cutoff runs on the wall clock; decode(recorded F) == stored decoded."""
    run = _run(client, tmp_path / "wall.zarr", "stragglers.model=none", "cutoff.deadline=null")
    assert run.status == "complete"
    cfg = load_config(SMOKE, ["stragglers.model=none", "cutoff.deadline=null"])
    codes = build_codes(cfg)
    source, f = _worker_inputs(cfg)
    layout = stored_layout(run.path)
    root = zarr.open_group(str(run.path), mode="r")
    compared = 0
    for scheme in SCHEMES:
        decoded = root[f"{scheme}/decoded"][:]
        assert (root[f"{scheme}/status"][:] == 1).all()
        for b in range(layout.num_batches):
            # as the workers do: the stored composition's blocks, f on one coded block at a time
            again = direct_decode(run.path, scheme, b, codes[scheme], f, source).astype(np.float32)
            start, stop = layout.batch_slots(b)
            np.testing.assert_array_equal(again, decoded[start:stop], err_msg=f"{scheme} batch {b}")
            compared += 1
    assert compared == 4 * 8
