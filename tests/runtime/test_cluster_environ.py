"""The embedded cluster's worker processes get glibc malloc settings that keep batch-sized blocks in the heap
(gcc_dask.runtime.cluster.MALLOC_ENVIRON), unless the user's Dask config sets them."""

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


def test_the_worker_processes_see_them():
    with connect(ClusterSpec(n_workers=1, threads_per_worker=1, processes=True)) as client:
        seen = list(client.run(_malloc_env).values())
    assert seen == [{k: str(v) for k, v in MALLOC_ENVIRON.items()}]
