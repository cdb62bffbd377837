"""Worker death: shards lost with their worker are erasures, never re-run; every batch still gets a status.

A real process cluster (``LocalCluster(processes=True)``, nannies, ``allowed-failures: 0`` as the embedded
cluster sets it) whose worker processes are SIGKILLed while shards are running. Coded batches with at
least N - S survivors decode from them at once; the run completes; the store holds every batch exactly
once and agrees with an uninterrupted run wherever no shard was lost. Nannies restart the killed workers
and the scheduler hands them the run's plugin again.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter

import dask
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.pipeline import build_codes
from gcc_dask.sources import make_source
from gcc_dask.stragglers import latency_model_from_config
from gcc_dask.workloads import make_workload
from rel_helpers import ExecLog, read_group, synthetic_config

pytestmark = pytest.mark.slow  # a process cluster (3 nannies) and two runs: ~30-60 s on 2 busy cores

K, N, S = 4, 12, 4
BATCHES = 24


def _config(path):
    # shards sleep 300-700 ms (virtual clock) so that a kill always finds some running
    return synthetic_config(
        path, batches=BATCHES, k=K, n=N, schemes=("gcc", "uncoded"),
        stragglers={"shift": "300ms", "scale": "100ms"},
        cutoff={"stragglers": S, "deadline": "5s", "on_shortfall": "decode"},
        run={"max_batches_in_flight": 4, "progress": False},
    )


def _kill_workers(client, stop: threading.Event, log: dict, count: int = 2) -> None:
    """SIGKILL `count` worker processes, each while it runs shards, 1.5 s apart (longer than a batch
    lives, so no batch loses shards to both); then check that the restarted workers got the plugin."""
    while len(log["kills"]) < count and not stop.is_set():
        try:
            busy = {w: [k for k in keys if str(k).startswith("eval-")] for w, keys in client.processing().items()}
        except Exception:  # pragma: no cover - the client is closing
            return
        victims = [w for w, keys in busy.items() if len(keys) >= 2 and w not in {a for a, _ in log["kills"]}]
        if not victims:
            time.sleep(0.02)
            continue
        addr = victims[0]
        pid = client.run(os.getpid, workers=[addr])[addr]
        os.kill(pid, signal.SIGKILL)
        log["kills"].append((addr, len(busy[addr])))
        log["assigned"].append(busy[addr])  # the shards the dead worker held (running or about to)
        stop.wait(1.5)
    # the nannies restart the workers: the scheduler must hand the new ones the run's plugin
    while not stop.is_set():
        workers = client.scheduler_info(n_workers=-1)["workers"]
        if len(workers) == 3 and not set(workers) & {a for a, _ in log["kills"]}:
            plugins = client.run(lambda dask_worker: sorted(dask_worker.plugins))
            log["plugin"] = {w: any(p.startswith("gcc-dask-") for p in ps) for w, ps in plugins.items()}
            return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """The pipeline on a 3-process cluster, two of whose workers are SIGKILLed mid-run."""
    path = tmp_path_factory.mktemp("kill") / "killed.zarr"
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(n_workers=3, threads_per_worker=16, processes=True, dashboard_address=":0",
                               silence_logs=50)
    exec_log = ExecLog(path.parent / "executions.txt")
    log: dict = {"kills": [], "assigned": [], "plugin": None, "warnings": []}
    stop = threading.Event()
    handler = logging.Handler()
    handler.emit = lambda record: log["warnings"].append(record.getMessage())
    executor_log = logging.getLogger("gcc_dask.runtime.executor")
    executor_log.addHandler(handler)
    with cluster, Client(cluster) as client:
        client.register_plugin(exec_log, name=exec_log.name)  # handed to restarted workers too
        killer = threading.Thread(target=_kill_workers, args=(client, stop, log), daemon=True)
        killer.start()
        t0 = time.perf_counter()
        result = gd.run_pipeline(_config(path), client=client)
        log["run_s"] = time.perf_counter() - t0
        stop.set()
        killer.join(timeout=30)
    executor_log.removeHandler(handler)
    return {"result": result, "runs": exec_log.executions(), "path": path, **log}


@pytest.fixture(scope="module")
def clean_run(client, tmp_path_factory):
    """The same pipeline on the session cluster, nothing killed."""
    return gd.run_pipeline(_config(tmp_path_factory.mktemp("clean") / "clean.zarr"), client=client)


def test_run_completes_and_every_batch_has_a_status(killed_run):
    res = killed_run["result"]
    print(f"run {killed_run['run_s']:.1f} s; kills (worker, shards running):", killed_run["kills"])
    print("driver warnings:", *killed_run["warnings"], sep="\n  ")
    assert len(killed_run["kills"]) == 2
    assert res.status == "complete"
    root = zarr.open_group(str(res.path), mode="r")
    assert root.attrs["status"] == "complete"
    for scheme in ("gcc", "uncoded", "inputs"):
        status = root[f"{scheme}/status"][:]
        assert status.shape == (BATCHES,) and (status > 0).all(), (scheme, status)
        assert (status != 4).all(), (scheme, status)  # no batch failed: lost non-shard tasks were redone
    assert (root["inputs/status"][:] == 1).all()  # every reference written once the run is done


def test_restarted_workers_get_the_run_plugin(killed_run):
    """Checked mid-run, once both killed workers are back: all three hold the run's plugin."""
    assert killed_run["plugin"] is not None and len(killed_run["plugin"]) == 3
    assert all(killed_run["plugin"].values())


def test_shards_lost_with_their_worker_are_erasures_never_rerun(killed_run):
    """No erased gcc shard ever started executing twice: once on the worker that died under it, or never (it
    was still queued on that worker). Uncoded keeps every result, so its decode is submitted with its shards
    (docs/pipeline.rst, section 'Decode'): a shard that had finished on a worker that then died is computed
    again by Dask for that decode, as in a plain Dask job, and is an erasure only if that second run dies
    too."""
    gcc = read_group(killed_run["path"], "gcc")
    unc = read_group(killed_run["path"], "uncoded")
    failed = gcc["failed"].sum() + unc["failed"].sum()
    print(f"erasures: gcc {gcc['failed'].sum()} shards in {(gcc['n_failed'] > 0).sum()} batches, "
          f"uncoded {unc['failed'].sum()} in {(unc['n_failed'] > 0).sum()}")
    assert failed >= 2
    runs = killed_run["runs"]
    for scheme, g, most in (("gcc", gcc, 1), ("uncoded", unc, 2)):
        for b, w in zip(*np.nonzero(g["failed"])):
            keys = [k for k in runs if k.startswith(f"eval-b{b}-w{w}-{scheme}-")]
            assert all(runs[k] <= most for k in keys), (scheme, b, w, {k: runs[k] for k in keys})
    assert not (gcc["received"] & gcc["failed"]).any()


def test_batches_with_enough_survivors_decode_without_retry(killed_run):
    """Each kill takes at most ~N/3 shards of a batch (shards are spread over the workers), so every gcc
    batch keeps >= N - S survivors and decodes at the wait_for rule (status 1), from the first N - S
    survivors in latency order."""
    gcc = read_group(killed_run["path"], "gcc")
    cfg = load_config(_config(killed_run["path"]))
    model = latency_model_from_config(cfg.stragglers.model_dump(), strict=False)
    survivors = N - gcc["n_failed"]
    for b in range(BATCHES):
        if survivors[b] < N - S:
            continue
        assert gcc["status"][b] == 1
        delays = model.latencies(cfg.seed, b, N)
        alive = [w for w in np.argsort(delays, kind="stable") if not gcc["failed"][b, w]]
        np.testing.assert_array_equal(np.flatnonzero(gcc["received"][b]), np.sort(alive[: N - S]))
    # some batches did lose shards and still decoded at once
    assert ((gcc["n_failed"] > 0) & (gcc["status"] == 1)).any()


def test_a_death_erases_only_the_shards_placed_on_that_worker(killed_run):
    """Shards are spread over the live workers round-robin, so a death never erases all N shards of a batch.

    Without the spreading, the scheduler may put a whole batch on the worker with free threads, and one death
    erases all N. The placement is a preference (``allow_other_workers``, a worker list refreshed each second): while
    a killed worker restarts, the scheduler may put more than N/W shards on one worker (8 of 12 seen once with
    2 alive), so the bound asserted is "not all of them", and the counts are printed.

    For gcc (N = 12 shards a batch) the bound holds batch by batch. Uncoded's shards are not spread: a scheme that
    keeps every result gains nothing from it (any loss means a rerun), so the scheduler places them as a plain
    map's tasks (``BatchRunner._submit_scheme``), and all K = 4 of a batch on the worker killed next has been seen
    in CI (twice); their counts are printed, not bounded."""
    held_gcc = 0
    for i, keys in enumerate(killed_run["assigned"]):
        per_batch = Counter(k.split("-w")[0] + "-" + k.split("-")[3] for k in map(str, keys))
        print(f"kill {i}: shards per (batch, scheme) on the dead worker:", dict(per_batch))
        gcc = {batch_scheme: count for batch_scheme, count in per_batch.items() if batch_scheme.endswith("gcc")}
        held_gcc += bool(gcc)
        for batch_scheme, count in gcc.items():
            assert count < N, (i, batch_scheme, count)
    # at least one kill hit a worker holding gcc shards, so the bound is not vacuous (which kill does depends on
    # when it lands: on a busy machine a later kill may find only the last batches' uncoded shards there)
    assert held_gcc >= 1, killed_run["assigned"]
    recomputed = sum(1 for key, runs in killed_run["runs"].items() if runs > 1 and key.startswith("eval-"))
    print(f"shards executed twice: {recomputed} (finished, kept, then lost with their worker before the "
          f"decode fetched them: Dask recomputes those from lineage)")


def test_store_agrees_with_an_uninterrupted_run(killed_run, clean_run):
    """Batches that lost no shard are bitwise equal to the clean run; the others decode their survivors."""
    killed, clean = read_group(killed_run["path"], "gcc"), read_group(clean_run.path, "gcc")
    intact = killed["n_failed"] == 0
    assert intact.sum() >= BATCHES // 2
    for name in ("received", "latency_s", "cutoff_s", "status"):
        np.testing.assert_array_equal(killed[name][intact], clean[name][intact], err_msg=name)
    rows = np.repeat(intact, K)
    np.testing.assert_array_equal(killed["decoded"][rows], clean["decoded"][rows])
    # damaged batches: decoded == decode(f(encode(x))[F]) for the recorded survivors F
    cfg = load_config(_config(killed_run["path"]))
    code = build_codes(cfg)["gcc"]
    src = cfg.source.model_dump(exclude_none=True)
    source = make_source(src.pop("kind"), **src)
    wl = cfg.workload.model_dump(exclude_none=True)
    f = make_workload(wl.pop("kind"), **wl.pop("params"), **wl).load()
    for b in np.flatnonzero(~intact & np.isin(killed["status"], (1, 2))):
        x, _ = source.read(b * K, (b + 1) * K)
        idx = np.flatnonzero(killed["received"][b])
        # each shard encodes its own row, as the workers do (encode(X, workers=[w]))
        y = np.stack([np.asarray(f(code.encode(x, workers=[w])))[0] for w in idx])
        np.testing.assert_array_equal(killed["decoded"][b * K : (b + 1) * K],
                                      np.asarray(code.decode(y, idx)).astype(np.float32))
    ref = zarr.open_group(str(killed_run["path"]), mode="r")["inputs/reference"][:]
    np.testing.assert_array_equal(ref, zarr.open_group(str(clean_run.path), mode="r")["inputs/reference"][:])
