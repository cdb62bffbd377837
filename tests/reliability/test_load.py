"""Load: a long run (250 batches) with bounded driver memory, nothing left on the cluster, bounded caches.

Synthetic inputs and an analytic f keep each batch cheap, so the run exercises the driver loop, the
scheduler and the store rather than the model. K = 2 inputs coded into N = 10 shards, the first 6 kept:
the received sets vary over C(10, 6) = 210 possibilities; the workers' decoder caches are shrunk to 32
entries for the run (in-process workers rebuild the codes from this module), so they must evict.
"""

from __future__ import annotations

import threading
import time

import dask
import numpy as np
import psutil
import pytest
from distributed import Client, LocalCluster

import gcc_dask as gd
import gcc_dask.coding.base
import gcc_dask.coding.gcc
from gcc_dask.runtime.executor import BatchRunner
from rel_helpers import read_group, synthetic_config

pytestmark = pytest.mark.slow

BATCHES = 250
K, N, S = 2, 10, 4
CACHE = 32


def _cache_sizes(dask_worker):
    """(decoder cache, gcc's auxiliary cache) entries of the run's codes on one worker."""
    out = {}
    for name, plugin in dask_worker.plugins.items():
        if name.startswith("gcc-dask-") and hasattr(plugin, "codes"):
            for scheme, code in plugin.codes.items():
                out[scheme] = (code._lookup.cache_info().currsize, code._aux.cache_info().currsize)
    return out


class Sampler(threading.Thread):
    """Samples the driver's RSS and the workers' decoder caches while the run goes on."""

    def __init__(self, client):
        super().__init__(daemon=True)
        self.client, self.stop = client, threading.Event()
        self.rss: list[tuple[float, int]] = []
        self.caches: list[tuple[int, int]] = []

    def run(self):
        proc = psutil.Process()
        t0 = time.monotonic()
        while not self.stop.is_set():
            self.rss.append((time.monotonic() - t0, proc.memory_info().rss))
            try:
                sizes = self.client.run(_cache_sizes)
                self.caches.extend(v for per_worker in sizes.values() for v in per_worker.values())
            except Exception:  # pragma: no cover - the plugin is being (un)registered
                pass
            self.stop.wait(0.5)


@pytest.fixture
def small_logs_client():
    """An in-process cluster whose bounded logs are short (distributed keeps the last N messages of each
    comm and transition, and N log records: 1,000 and 10,000 by default), so that they fill up at once
    and whatever else grows with the number of batches shows."""
    logs = {"distributed.admin.low-level-log-length": 20, "distributed.admin.log-length": 50}
    with dask.config.set(logs), LocalCluster(n_workers=2, threads_per_worker=8, processes=False,
                                             dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as c:
        yield c


def test_long_run_is_bounded_and_leaves_nothing_behind(small_logs_client, tmp_path, monkeypatch):
    client = small_logs_client
    monkeypatch.setattr(gcc_dask.coding.base, "DECODER_CACHE_SIZE", CACHE)
    def config(path, batches):
        return synthetic_config(
            path, batches=batches, k=K, n=N, shape=(4,),
            stragglers={"shift": "1ms", "scale": "1ms"}, cutoff={"stragglers": S, "deadline": "1s"},
            run={"max_batches_in_flight": 16, "progress": False, "reference": False},
        )

    gd.run_pipeline(config(tmp_path / "warm.zarr", 50), client=client)  # warm-up
    cfg = config(tmp_path / "load.zarr", BATCHES)
    kept = []
    real_run = BatchRunner.run

    def run_and_count(self, *args, **kwargs):
        out = real_run(self, *args, **kwargs)
        kept.append(len(out))
        return out

    monkeypatch.setattr(BatchRunner, "run", run_and_count)
    sampler = Sampler(client)
    sampler.start()
    t0 = time.perf_counter()
    try:
        run = gd.run_pipeline(cfg, client=client)
    finally:
        sampler.stop.set()
        sampler.join(timeout=30)
    wall = time.perf_counter() - t0
    assert run.status == "complete"
    gcc = read_group(run.path, "gcc", ("status", "received", "n_received"))
    assert gcc["status"].shape == (BATCHES,) and (gcc["status"] == 1).all()
    distinct = len({row.tobytes() for row in gcc["received"]})

    # nothing left on the scheduler: every future released, no scattered data, no stray tasks
    deadline = time.monotonic() + 10
    while (left := client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == 0

    # the decoder caches fill up to their bound and no further, with more distinct received sets than that
    assert distinct > 2 * CACHE
    assert sampler.caches and max(c[0] for c in sampler.caches) == CACHE
    assert max(c[1] for c in sampler.caches) <= gcc_dask.coding.gcc.AUX_CACHE_SIZE

    # the driver keeps no per-batch list: the runner hands each batch's records to the store writer and
    # keeps none (it used to return all of them: O(batches) memory on the driver)
    assert kept == [0]

    # memory of the driver (and of the in-process scheduler and workers): after a warm-up run, RSS grows
    # by less than 24 MiB over 250 batches (measured: ~12 MiB, mostly the workers' decoder caches filling)
    rss = np.array([r for _, r in sampler.rss]) / 2**20
    growth = rss.max() - rss[0]
    print(f"{BATCHES} batches in {wall:.1f} s; {distinct} distinct received sets; decoder cache max "
          f"{max(c[0] for c in sampler.caches)} (bound {CACHE}); RSS {rss[0]:.0f} -> {rss.max():.0f} MiB "
          f"(+{growth:.1f} MiB)")
    assert growth < 24
