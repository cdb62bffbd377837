"""Shared fixtures: hypothesis profiles, the ``gpu`` marker, and one LocalCluster per session."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", deadline=None, max_examples=25)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# every test composes what it composes (none reads a composition an earlier test or run left in the user's cache);
# the cache's own tests turn it on in a folder of their own (tests/test_composition_cache.py)
os.environ["GCC_DASK_CACHE"] = "off"

# the suite starts a few hundred Python processes (CLI runs and their clusters' workers), each of which imports
# gcc_dask: without a bytecode cache each compiles it again (0.7 s of CPU a process; some container images set
# PYTHONDONTWRITEBYTECODE, this project's CI machine among them). The tests cache it as Python does by default, in
# __pycache__ folders beside the sources (ignored by git); processes started from here inherit the setting
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    import sys

    sys.dont_write_bytecode = False

# every cluster the tests start in this process runs without the workers' statistical profiler, as the embedded
# cluster does (gcc_dask.runtime.cluster): on Python 3.11 its sys._current_frames() every 10 ms holds the
# interpreter's thread-list lock while a garbage collection can run a gc callback (hypothesis registers one) that
# lets another thread take the GIL; a thread then started (a store write's pool) waits for that lock with the
# GIL held, and the test process hangs for good, pytest-timeout included (CPython gh-106883; seen once in
# test_pipeline's tilde test on a loaded machine, gdb: Worker.trigger_profile -> _PyThread_CurrentFrames ->
# gc callback -> take_gil, against new_threadstate -> HEAD_LOCK)
import dask  # noqa: E402

dask.config.set({"distributed.worker.profile.enabled": False})


def gpu_available() -> bool:
    """True only if CuPy imports *and* a device call succeeds (``import cupy`` alone proves nothing)."""
    try:
        import cupy

        cupy.zeros(1).sum().item()
        return True
    except Exception:
        return False


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's option (``--dist loadfile``): tests/suite_order.py
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    from suite_order import longest_first  # (tests/suite_order.py: the long files first)

    longest_first(items)
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def client():
    """A threaded-worker LocalCluster client shared by the whole session (no dashboard).

    Its scheduler never re-runs a lost task (``allowed-failures: 0``), as the embedded cluster of a run: a
    run on a cluster that would re-run lost shards warns (tests/test_coded_map.py shows the warning)."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=8, processes=False, dashboard_address=":0", silence_logs=40
        )
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="session")
def process_client():
    """A LocalCluster of 2 worker processes (4 threads each) shared by the tests that need real processes: what is
    pickled reaches the workers as bytes, and the driver's own process can be told apart from theirs."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=4, processes=True, dashboard_address=":0",
                               silence_logs=40)
    c = Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()
