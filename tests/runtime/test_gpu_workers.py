"""Workers that advertise ``GPU=1`` but cannot use a GPU (no CuPy here) are refused before any shard runs."""

from __future__ import annotations

import re

import pytest

import gcc_dask as gd
from gcc_dask.errors import ClusterError
from gcc_dask.runtime.cluster import check_gpu_workers, gpu_available

SMOKE = "pipelines/smoke.yaml"
LINE = re.compile(
    r"^cluster\.gpu: 2 of 2 workers advertise a GPU resource but cannot use it \(inproc://\S+, inproc://\S+: "
    r"ModuleNotFoundError: No module named 'cupy'\); install CuPy on those workers \(pip install -e \"\.\[gpu\]\"\) "
    r"or set cluster\.gpu: false to run on NumPy$"
)


@pytest.fixture(scope="module")
def gpu_client():
    """Two in-process workers that advertise GPU=1 on a machine without CuPy."""
    if gpu_available()[0]:
        pytest.skip("CuPy works here: the workers' GPU probe would pass")
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=8, processes=False, dashboard_address=":0",
                           silence_logs=40, resources={"GPU": 1})
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_check_gpu_workers_names_the_workers_and_the_fix(gpu_client, client):
    with pytest.raises(ClusterError) as info:
        check_gpu_workers(gpu_client)
    assert LINE.match(str(info.value)), str(info.value)
    assert check_gpu_workers(client) == []  # no worker advertises a GPU: nothing to check


@pytest.mark.parametrize("gpu", ["auto", "true"], ids=["gpu-auto", "gpu-true"])
def test_run_on_gpu_workers_without_cupy_is_refused(gpu_client, tmp_path, gpu):
    with pytest.raises(ClusterError) as info:
        gd.run_pipeline(SMOKE, client=gpu_client, out=tmp_path / "run.zarr",
                        overrides=[f"cluster.gpu={gpu}", "run.progress=false"])
    assert LINE.match(str(info.value)), str(info.value)


def test_gpu_false_runs_on_numpy_on_the_same_workers(gpu_client, tmp_path):
    run = gd.run_pipeline(SMOKE, client=gpu_client, out=tmp_path / "run.zarr",
                          overrides=["cluster.gpu=false", "run.progress=false"])
    assert run.status == "complete"
    assert (run.summary["decoded"] == run.summary["batches"]).all() and run.summary["failed"].eq(0).all()
