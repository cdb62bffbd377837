"""The run's plugin on the workers (gcc_dask.runtime.registration) on a threaded LocalCluster: registered on every
worker, confirmed on the workers a registration left out, a worker's set-up error raised on the driver, removed.
A frozen worker left out is tested on worker processes (tests/reliability/test_cluster_faults.py,
``test_a_worker_frozen_before_the_run_is_not_waited_for``)."""

from __future__ import annotations

import threading

import pytest
from distributed.diagnostics.plugin import WorkerPlugin

from gcc_dask.runtime.registration import confirm_when_ready, register, unregister


class _Plugin(WorkerPlugin):
    """A stand-in for the run's plugin: its set-up loads ``fn`` (None when `fails`: that raises)."""

    def __init__(self, name: str, fails: bool = False) -> None:
        self.name, self.fails, self.fn = name, fails, None

    def setup(self, worker) -> None:
        if self.fails:
            raise RuntimeError("f could not be loaded here")
        self.fn = len


def _plugins(client, name: str) -> dict:
    return client.run(lambda dask_worker: name in dask_worker.plugins)


def test_the_plugin_reaches_every_worker_and_is_removed(client):
    name = "gcc-dask-test-registration"
    workers = sorted(client.scheduler_info()["workers"])
    # (on a busy machine a worker may miss its heartbeats and be left out: the registration there goes on in a
    # thread of its own, and the confirmation waits for it)
    left_out = register(client, _Plugin(name), set())
    try:
        assert left_out <= set(workers)
        ready: list[str] = []
        lock = threading.Lock()

        def on_ready(addresses):
            with lock:
                ready.extend(addresses)

        for thread in confirm_when_ready(client, name, workers, on_ready):
            thread.join()  # each returns once its worker has answered (pytest-timeout ends a hang)
        assert sorted(ready) == workers
        assert set(_plugins(client, name).values()) == {True}
    finally:
        unregister(client, name)
    assert set(_plugins(client, name).values()) == {False}


def test_a_set_up_that_failed_on_a_worker_is_raised_and_that_worker_is_not_confirmed(client):
    name = "gcc-dask-test-registration-fails"
    try:
        with pytest.raises(RuntimeError, match="f could not be loaded here"):
            register(client, _Plugin(name, fails=True), set())
        ready: list[str] = []
        for thread in confirm_when_ready(client, name, sorted(client.scheduler_info()["workers"]), ready.extend):
            thread.join()
        assert ready == []  # given up: no shards go there
    finally:
        unregister(client, name)
