"""The embedded cluster's worker processes get glibc malloc settings that keep batch-sized blocks in the heap
(gcc_dask.runtime.cluster.MALLOC_ENVIRON), unless the user's Dask config or environment sets them."""

from __future__ import annotations

import os

import dask

from gcc_dask.runtime.cluster import MALLOC_ENVIRON, ClusterSpec, connect, worker_environ


def test_defaults_replace_dasks_trim_threshold_and_keep_the_rest():
    env = worker_environ()
    assert env["MALLOC_MMAP_THRESHOLD_"] == 32 << 20
    assert env["MALLOC_TRIM_THRESHOLD_"] == 64 << 20  # Dask's 65536 counts as not set
    assert env["OMP_NUM_THREADS"] == 1  # Dask's own entries are kept


def test_a_users_own_settings_win():
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": 1 << 20,
                          "distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": "4194304"}):
        env = worker_environ()
    assert env["MALLOC_TRIM_THRESHOLD_"] == 1 << 20
    assert env["MALLOC_MMAP_THRESHOLD_"] == "4194304"


def _malloc_env() -> dict:
    return {k: os.environ.get(k) for k in MALLOC_ENVIRON}


def _workers_see() -> list[dict]:
    with connect(ClusterSpec(n_workers=1, threads_per_worker=1, processes=True)) as client:
        return list(client.run(_malloc_env).values())


def test_the_worker_processes_see_them_even_after_a_cluster_of_dasks_defaults(monkeypatch):
    """A nanny of Dask's defaults leaves ``MALLOC_TRIM_THRESHOLD_=65536`` in this process's environment (it copies
    its pre-spawn environment there), which later nannies prefer to the config: the embedded cluster replaces
    that leftover."""
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert _workers_see() == [{k: str(v) for k, v in MALLOC_ENVIRON.items()}]


def test_a_value_in_the_users_environment_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "2097152")
    assert _workers_see() == [{"MALLOC_MMAP_THRESHOLD_": "2097152", "MALLOC_TRIM_THRESHOLD_": "1048576"}]


def test_an_in_process_cluster_runs_the_blas_on_one_thread_while_it_lives():
    """Workers that are threads of this process share its BLAS: one thread a call while the cluster lives (what a
    worker process gets from its nanny), the user's setting back after."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from gcc_dask.runtime.cluster import ClusterSpec, connect

    def threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    with threadpool_limits(2, user_api="blas"):
        with connect(ClusterSpec(n_workers=1, threads_per_worker=2, processes=False), None) as client:
            assert threads() and set(threads()) == {1}
            assert set(client.submit(threads, pure=False).result()) == {1}  # in a worker thread too
        assert set(threads()) == {2}
