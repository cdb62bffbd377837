"""Faults of a real cluster beyond a worker's death: a frozen worker, and every worker killed and replaced.

- A worker process stopped with SIGSTOP (frozen, or swapping hard) kept its connections open: nothing erred,
  and the run stalled for as long as it was stopped (a batch whose reference, decode, score or record sat on
  it, or whose shards the virtual clock waited for, held the window). It is now ended once it has sent no
  heartbeat for ``cluster.unresponsive_after`` (docs/pipeline.rst, section 'Unresponsive workers'): batches
  go on finishing while it is stopped, and its shards are erasures.
- The shards of a batch are placed on workers (a loose restriction, docs/pipeline.rst, section 'Slots and
  placement'); when no worker is left, the scheduler parks them as ``no-worker`` and later gives them only to
  a worker their restriction names, never to a new one. The run used to wait forever after "N Dask
  worker(s) back; the run goes on"; it now runs the batches in flight again on the new workers (their reads,
  references and labels too) and completes.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
import yaml
import zarr

import gcc_dask as gd
from rel_helpers import cli, read_group, status, subprocess_env, synthetic_config, wait_for_batches

pytestmark = pytest.mark.slow  # an external scheduler, four `dask worker` trees and a run: ~40-90 s on 2 busy cores


def _kill_tree(proc) -> None:
    try:
        tree = psutil.Process(proc.pid)
        victims = tree.children(recursive=True) + [tree]
    except psutil.NoSuchProcess:
        return
    for p in victims:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait()


def _wait_until_no_worker(sched_file) -> None:
    """Wait until the scheduler lists no worker (an event, not a duration: it has noticed that every worker is
    gone; no time bound here, pytest-timeout ends a hang)."""
    from distributed import Client

    with Client(scheduler_file=str(sched_file), timeout="60s", set_as_default=False) as client:
        while client.scheduler_info(n_workers=-1)["workers"]:
            time.sleep(0.05)


def test_every_worker_killed_and_replaced_the_run_goes_on(tmp_path):
    env = subprocess_env()
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--no-dashboard",
                               "--scheduler-file", str(sched_file), "--port", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]

    def workers(n=2):
        return [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                  str(sched_file), "--nthreads", "16", "--no-dashboard"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env) for _ in range(n)]

    try:
        while not sched_file.exists() and procs[0].poll() is None:  # (no time bound: pytest-timeout ends a hang)
            time.sleep(0.1)
        first = workers()
        procs += first
        store, pipe, data = tmp_path / "run.zarr", tmp_path / "pipe.yaml", tmp_path / "data.zarr"
        batches = 60
        # a chunked source: each batch has one read, which its coded shards and its reference take (it was placed on
        # a worker killed below, and has to be read again on the new ones)
        x = np.random.default_rng(3).random((batches * 4, 6), dtype=np.float32)
        zarr.open_group(str(data), mode="w").create_array("x", shape=x.shape, chunks=(16, 6), dtype="float32")[:] = x
        cfg = synthetic_config(store, batches=batches, k=4, n=12, schemes=["gcc", "uncoded"],
                               source={"kind": "zarr", "path": str(data), "array": "x"},
                               cluster={"scheduler_file": str(sched_file), "connect_timeout": "60s",
                                        "processes": None, "n_workers": None, "threads_per_worker": None},
                               stragglers={"shift": "50ms", "scale": "20ms"},
                               cutoff={"stragglers": 4, "deadline": "1s"}, run={"max_batches_in_flight": 4})
        pipe.write_text(yaml.safe_dump(cfg))
        run = subprocess.Popen(cli("run", str(pipe), "--no-progress"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        procs.append(run)
        wait_for_batches(store, run, 5)
        assert run.poll() is None, run.communicate()
        for w in first:  # every worker tree (nanny and worker process), at once
            _kill_tree(w)
        _wait_until_no_worker(sched_file)  # the new ones replace them: none of the old ones is seen beside them
        procs += workers()
        out, err = run.communicate(timeout=300)  # it used to wait forever here
        assert run.returncode == 0, (run.returncode, out[-2000:], err)
        assert "every Dask worker was replaced" in out, out
        root = zarr.open_group(str(store), mode="r")
        assert root.attrs["status"] == "complete"
        for scheme in ("gcc", "uncoded", "inputs"):
            assert (root[f"{scheme}/status"][:] > 0).all(), scheme
        assert np.isfinite(root["inputs/reference"][:]).all()
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                _kill_tree(p)


SHARD_KEY = re.compile(r"^eval-b(\d+)-w(\d+)-(gcc|uncoded)-[0-9a-f]+$")


def test_a_frozen_worker_is_ended_and_batches_go_on_finishing(tmp_path):
    """One of 3 worker processes is SIGSTOPped mid-run for 12 s or until the run ends, on the virtual clock (the
    case that waited longest: the cutoff waits for every shard whose drawn latency is below it). Batches go on
    finishing while it is stopped (none did: the same number of batches was done at the SIGSTOP and at the
    SIGCONT); the run completes, every batch done, and the store's erasures are counted (those of the shards it was
    running depend on the machine's speed: rescued elsewhere or no longer needed, a shard is no erasure)."""
    # shards sleep 300-700 ms (virtual clock), so that the stopped worker always holds running shards that
    # the cutoffs of the batches in flight wait for
    path = tmp_path / "frozen.zarr"
    cfg = synthetic_config(path, batches=40, k=4, n=12, schemes=("gcc", "uncoded"),
                           stragglers={"shift": "300ms", "scale": "100ms"},
                           cutoff={"stragglers": 4, "deadline": "5s", "on_shortfall": "decode"},
                           cluster={"unresponsive_after": "3s"}, run={"max_batches_in_flight": 4})
    log: dict = {}
    said: list[str] = []
    stop = threading.Event()

    def freeze(client):
        while not stop.is_set() and (not path.exists() or _done(path) < 10):
            time.sleep(0.05)
        busy = {w: [str(k) for k in keys if SHARD_KEY.match(str(k))] for w, keys in client.processing().items()}
        address = max(busy, key=lambda w: len(busy[w]))
        pid = client.run(os.getpid, workers=[address])[address]
        os.kill(pid, signal.SIGSTOP)
        log.update(address=address, shards=busy[address], done_at_stop=_done(path))
        stop.wait(12.0)
        log["done_at_cont"] = _done(path)
        try:
            os.kill(pid, signal.SIGCONT)
            log["still_alive"] = True
        except ProcessLookupError:  # ended by the run: its nanny started another worker
            log["still_alive"] = False

    with _three_worker_processes(16) as client:
        thread = threading.Thread(target=freeze, args=(client,), daemon=True)
        thread.start()
        try:
            result = gd.run_pipeline(cfg, client=client, echo=said.append)
        finally:
            stop.set()
            thread.join(timeout=60)
    print({k: v for k, v in log.items() if k != "shards"}, len(log.get("shards", ())), "shards on it")
    assert result.status == "complete"
    ended = [line for line in said if "sent no heartbeat" in line]
    assert len(ended) == 1 and f"Dask worker {log['address']} sent no heartbeat" in ended[0], said  # that one only
    assert log["still_alive"] is False
    # batches went on finishing while the worker was stopped
    assert log["done_at_cont"] - log["done_at_stop"] >= 5, log
    # the shards it was running are erasures (the only worker that died: every erasure of the run is one of
    # its shards; a batch whose decode ran on it was run again from its shards, keeping the same set)
    failed = {s: read_group(path, s, ("failed",))["failed"] for s in ("gcc", "uncoded")}
    erased = [key for key in log["shards"] if failed[SHARD_KEY.match(key).group(3)][
        int(SHARD_KEY.match(key).group(1)), int(SHARD_KEY.match(key).group(2))]]
    print(f"{len(erased)} of the {len(log['shards'])} shards running on it at the SIGSTOP are erasures; "
          f"{sum(int(f.sum()) for f in failed.values())} erasures in all")
    # (how many of them are erasures depends on the machine's speed: a shard the cutoff no longer needed, or one that a
    # quiet-worker rescue ran again elsewhere first, is not one; four busy processes beside the suite once made
    # none of 4 an erasure. The events asserted are the worker's end, the batches finished meanwhile and below,
    # every batch done, those that waited on it included.)
    for scheme in ("gcc", "uncoded"):
        assert (status(path, scheme) > 0).all()


@contextlib.contextmanager
def _three_worker_processes(threads: int):
    """A client of 3 local worker processes (with nannies) whose scheduler never re-runs a task lost with its
    worker (an erasure stays one)."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(n_workers=3, threads_per_worker=threads, processes=True, dashboard_address=":0",
                               silence_logs=50)
    with cluster, Client(cluster) as client:
        yield client


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP); a process that is gone counts as stopped (nothing to wait for)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return True


def _window(victim: int, item: int) -> tuple[int, int]:
    """A composition window's stand-in: 0.2 s of work, then ``(this process's id, item * 10)``.

    On any process but worker process `victim`, the window first waits until `victim` is stopped (SIGSTOP), with
    no time bound (a run that never stops it hangs, and pytest-timeout ends the test): no window finishes
    elsewhere before the victim has been frozen, so a window finishes on the victim first, however busy the
    machine. (Before, this wait gave up after 180 s, and a loaded run could then finish every window elsewhere.)"""
    if os.getpid() != victim:
        while not _stopped(victim):
            time.sleep(0.01)
    time.sleep(0.2)
    return os.getpid(), item * 10


def _map_windows_while(client, victim: int) -> tuple[dict, bool]:
    """Run ``map_on_cluster`` over 12 :func:`_window` items and wait for its return or its error, with no time
    bound (a hang is ended by pytest-timeout), while worker process `victim` is (or gets) SIGSTOPped; then SIGCONT
    it. Returns ``({"out": the map's values} or {"error": what it raised}, whether the victim was stopped when
    the map returned)``: the map returns only once it no longer waits for the victim, so the victim is still
    stopped then, unless it was never stopped at all. (Before, the wait for the map was bounded by 180 s, and a
    bound is what a busy machine passes.)"""
    from gcc_dask.runtime.cluster import map_on_cluster

    box: dict = {}

    def run() -> None:
        try:
            box["out"] = map_on_cluster(client, _window, range(12), victim)
        except BaseException as e:  # shown by the test's assertion
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        thread.join()  # the map's return (it used to wait as long as the worker stayed frozen)
        stopped = psutil.Process(victim).status() == psutil.STATUS_STOPPED
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
    return box, stopped


def test_the_composition_s_windows_finish_while_a_worker_is_frozen():
    """One of 3 worker processes is SIGSTOPped before the windows are submitted, and stays stopped: the
    windows the scheduler gave it get backup copies on the other two (Spark's rule), and the map returns,
    complete and in order, while it is still frozen. Before, the composition waited for it (6.9 s against 1.4
    s for a 100,000-image source with a 6 s freeze)."""
    with _three_worker_processes(2) as client:
        pids = client.run(os.getpid)
        victim = pids[sorted(pids)[0]]
        os.kill(victim, signal.SIGSTOP)
        box, stopped = _map_windows_while(client, victim)
    assert "out" in box, box
    assert stopped  # it returned while the victim was still frozen
    out = box["out"]
    assert [value for _, value in out] == [i * 10 for i in range(12)]
    assert victim not in {pid for pid, _ in out}


class _FreezeWhenItFinishes:
    """A scheduler plugin that SIGSTOPs worker process `pid` (at `address`) the moment the scheduler learns that a
    task of `prefix` finished there: before the client hears of it, so the client's fetch of that result meets a
    frozen worker (the window that froze between its end and its fetch)."""

    name = "gcc-dask-test-freeze-when-it-finishes"

    def __init__(self, address: str, pid: int, prefix: str) -> None:
        self.address, self.pid, self.prefix, self.frozen = address, pid, prefix, False

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if self.frozen or finish != "memory" or not str(key).startswith(self.prefix):
            return
        ts = self.scheduler.tasks.get(key)
        if ts is not None and any(ws.address == self.address for ws in ts.who_has):
            os.kill(self.pid, signal.SIGSTOP)
            self.frozen = True


def test_a_window_finished_on_a_worker_that_froze_before_its_result_was_fetched_runs_again_elsewhere():
    """One of 3 worker processes is SIGSTOPped as its first window finishes, before the driver fetches that
    window's result, and stays stopped: the fetch gives up after three heartbeats, the window runs again on
    another worker, and the map returns, complete and in order, while the worker is still frozen. Before, the
    fetch waited for as long as the worker stayed frozen. The windows on the other workers wait for the freeze
    (:func:`_window`), so that a window finishes on the victim whatever the machine's load."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    plugin_type = type("FreezeWhenItFinishes", (_FreezeWhenItFinishes, SchedulerPlugin), {})
    with _three_worker_processes(2) as client:
        pids = client.run(os.getpid)
        address = sorted(pids)[0]
        victim = pids[address]

        def add(dask_scheduler, p):  # runs on the scheduler
            p.scheduler = dask_scheduler
            dask_scheduler.add_plugin(p)

        client.run_on_scheduler(add, p=plugin_type(address, victim, "_returning_errors"))
        box, stopped = _map_windows_while(client, victim)
    assert "out" in box, box
    assert stopped, "the map returned, but the victim is not stopped: the plugin never froze it"
    out = box["out"]
    assert [value for _, value in out] == [i * 10 for i in range(12)]
    assert victim not in {pid for pid, _ in out}  # its finished window's result came from another copy


def test_a_worker_frozen_before_the_run_is_not_waited_for(tmp_path):
    """One of 3 worker processes is SIGSTOPped before the run and stays stopped until it has returned
    (``cluster.unresponsive_after`` far beyond the run: it is never ended). The set-up's calls to every
    worker (the store's reachability check, the plugin's registration) stop waiting for it once it has missed
    3 heartbeats, the run says it starts without it, no shard goes there, and the run completes, exact for
    ``uncoded``, while it is still frozen. Before, the run waited for as long as the worker stayed frozen."""
    path = tmp_path / "frozen.zarr"
    cfg = synthetic_config(path, batches=12, k=4, schemes=("uncoded", "gcc"), composition="similarity",
                           stragglers={"shift": "20ms", "scale": "10ms", "clock": "wall"},
                           cluster={"unresponsive_after": "120s"}, run={"max_batches_in_flight": 4})
    said: list[str] = []
    box: dict = {}
    with _three_worker_processes(4) as client:
        pids = client.run(os.getpid)
        address = sorted(pids)[0]
        victim = pids[address]
        os.kill(victim, signal.SIGSTOP)
        thread = threading.Thread(target=lambda: box.update(result=gd.run_pipeline(cfg, client=client,
                                                                                   echo=said.append)),
                                  daemon=True)
        try:
            thread.start()
            thread.join()  # the run's return (no time bound: pytest-timeout ends a hang)
            returned_while_frozen = psutil.Process(victim).status() == psutil.STATUS_STOPPED
        finally:
            os.kill(victim, signal.SIGCONT)
            thread.join(timeout=60)
    assert returned_while_frozen, said
    assert box["result"].status == "complete"
    starts = [line for line in said if "the run starts without it" in line]
    assert len(starts) == 1 and address in starts[0], said
    assert not [line for line in said if "sent no heartbeat" in line], said  # never ended
    uncoded = read_group(path, "uncoded", ("decoded", "status"))
    reference = read_group(path, "inputs", ("reference",))["reference"]
    assert (uncoded["status"] == 1).all() and (status(path, "gcc") > 0).all()
    np.testing.assert_allclose(uncoded["decoded"], reference, rtol=1e-5, atol=1e-6)


def test_the_shards_a_cutoff_needs_from_a_quiet_worker_run_again_elsewhere(tmp_path):
    """gcc with N = 8, K = 4 and S = 1 on 3 worker processes: a batch's 7 regular shards go round-robin, so the
    worker frozen mid-run holds 2 or 3 of them, more than its one spare covers; no deadline, and
    ``unresponsive_after`` far beyond the run. Once the worker is quiet, the shards a batch cannot do without
    run again on the other two, and the run completes while it is still frozen. Before, such a batch waited
    for the worker to resume or be ended."""
    path = tmp_path / "short.zarr"
    cfg = synthetic_config(path, batches=40, k=4, n=8, schemes=("gcc",),
                           stragglers={"shift": "200ms", "scale": "10ms", "clock": "wall"},
                           cutoff={"stragglers": 1, "deadline": None, "backups": False},  # (the rescue alone)
                           cluster={"unresponsive_after": "120s"}, run={"max_batches_in_flight": 4})
    said: list[str] = []
    log: dict = {}
    box: dict = {}
    stop = threading.Event()

    def freeze(client):
        _freeze_the_busiest(client, path, ("gcc",), 6, stop, log)

    with _three_worker_processes(8) as client:
        freezer = threading.Thread(target=freeze, args=(client,), daemon=True)
        run = threading.Thread(target=lambda: box.update(result=gd.run_pipeline(cfg, client=client,
                                                                                echo=said.append)),
                               daemon=True)
        try:
            freezer.start()
            run.start()
            run.join()  # the run's return (no time bound: pytest-timeout ends a hang)
            # (_stopped: a worker process gone meanwhile counts as stopped: once, idle, it was gone by then)
            returned_while_frozen = "pid" in log and _stopped(log["pid"])
        finally:
            stop.set()
            if "pid" in log:
                os.kill(log["pid"], signal.SIGCONT)
            run.join(timeout=60)
    assert returned_while_frozen, (log, said)
    assert box["result"].status == "complete"
    # (on 2 busy cores another worker may look quiet for a moment too: a shard or two run again, no more)
    rescued = [line for line in said if "missed 3 heartbeats" in line and log["address"] in line]
    assert len(rescued) == 1 and "runs again on the other workers" in rescued[0], said  # said once a run
    assert (status(path, "gcc") == 1).all()


def _freeze_the_busiest(client, path, schemes, after: int, stop: threading.Event, log: dict) -> None:
    """Once `after` batches of `schemes` are done, SIGSTOP the worker process running the most tasks; note
    its address, pid and the batches done then in `log`."""
    while not stop.is_set() and (not path.exists() or _done(path, schemes) < after):
        time.sleep(0.02)
    if stop.is_set():
        return
    busy = {w: len(keys) for w, keys in client.processing().items()}
    address = max(busy, key=busy.get)
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGSTOP)
    log.update(address=address, pid=pid, done_at_stop=_done(path, schemes))


def _done(path, schemes=("gcc", "uncoded")) -> int:
    try:
        return int(min((status(path, s) > 0).sum() for s in schemes))
    except Exception:  # being created
        return 0


def test_what_waits_for_a_quiet_worker_runs_again_elsewhere_and_the_run_ends_while_it_is_frozen(tmp_path):
    """One of 3 worker processes is SIGSTOPped mid-run and stays stopped until the run has returned, with
    ``cluster.unresponsive_after`` far beyond the run: it is never ended. Once it has missed 3 heartbeats it
    is quiet: what the batches wait for there (uncoded's shards and decodes, speculative's kept results, the
    labels) runs again on the other two, and the run completes, exact, while the worker is still frozen.
    Before, the batches that needed it waited until it resumed or was ended."""
    path = tmp_path / "quiet.zarr"
    cfg = synthetic_config(path, batches=60, k=4, schemes=("uncoded", "speculative"),
                           stragglers={"shift": "100ms", "scale": "20ms", "clock": "wall"},
                           cluster={"unresponsive_after": "120s"}, run={"max_batches_in_flight": 4})
    said: list[str] = []
    log: dict = {}
    stop = threading.Event()

    def freeze(client):
        _freeze_the_busiest(client, path, ("uncoded", "speculative"), 8, stop, log)

    with _three_worker_processes(8) as client:
        thread = threading.Thread(target=freeze, args=(client,), daemon=True)
        thread.start()
        try:
            result = gd.run_pipeline(cfg, client=client, echo=said.append)
            thread.join(timeout=60)
            still_frozen = _stopped(log["pid"])
        finally:
            stop.set()
            if "pid" in log:
                os.kill(log["pid"], signal.SIGCONT)
    assert "address" in log and log["done_at_stop"] < 60, log
    assert result.status == "complete"
    assert still_frozen  # the run ended while the worker was stopped
    assert not [line for line in said if "sent no heartbeat" in line], said  # never ended
    reruns = [line for line in said if "missed 3 heartbeats" in line]
    # (on 2 busy cores another worker may look quiet for a moment too: its line says so, and what ran again is exact)
    assert any(log["address"] in line for line in reruns), said
    assert all("runs again on the other workers" in line for line in reruns), said
    uncoded = read_group(path, "uncoded", ("decoded", "status"))
    speculative = read_group(path, "speculative", ("decoded", "status"))
    reference = read_group(path, "inputs", ("reference",))["reference"]
    assert (uncoded["status"] == 1).all() and (speculative["status"] == 1).all()
    # exact: speculative's copies are uncoded's shards, bit for bit; both are f of the same blocks (the reference
    # evaluates whole batches at once: the last bits may differ)
    np.testing.assert_array_equal(speculative["decoded"], uncoded["decoded"])
    np.testing.assert_allclose(uncoded["decoded"], reference, rtol=1e-5, atol=1e-6)


# ------------------------------------------------- issue 35, case 5: every worker lost while the samples are composed
def _held_window(item: int) -> int:
    """A composition window's stand-in that is still out when its worker closes: it returns `item` only once its
    (in-process) worker can no longer report it, its stream to the scheduler closed. An event, not a duration:
    before, the window slept 0.5 s (the single task 3 s), and a busy machine could take longer to close the
    workers, so that the windows finished first."""
    from distributed import get_worker

    worker = get_worker()
    while not worker.batched_stream.closed():  # (pytest-timeout ends a hang)
        time.sleep(0.01)
    return item


@pytest.mark.parametrize("wait", ["map_on_cluster", "run_on_cluster"])
def test_every_worker_closed_while_composing_ends_the_wait_with_one_line(wait):
    """Every worker of a LocalCluster closed while the composition's windows (or its one task) are out: the
    wait ends with one ClusterError line. It used to loop on ``distributed.wait`` for ever (no output after 150 s
    of a 120,000-sample composition), the tasks waiting in the scheduler's ``no-worker`` state."""
    import dask
    from distributed import Client, LocalCluster

    from gcc_dask.runtime.cluster import map_on_cluster, run_on_cluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                               silence_logs=50)
    with cluster, Client(cluster) as client:
        box: dict = {}

        def composing() -> None:
            try:
                if wait == "map_on_cluster":
                    box["out"] = map_on_cluster(client, _held_window, list(range(40)), worker_timeout=1.0,
                                                what="composing the samples")
                else:
                    box["out"] = run_on_cluster(client, _held_window, 0, worker_timeout=1.0,
                                                what="composing the samples")
            except BaseException as e:  # noqa: BLE001 - what the driver would print
                box["error"] = e

        thread = threading.Thread(target=composing, daemon=True)
        thread.start()
        while not client.processing() or not any(client.processing().values()):  # (pytest-timeout ends a hang)
            time.sleep(0.05)
        for worker in list(cluster.workers.values()):
            cluster.sync(worker.close)  # closed, not retired: their tasks go back to the scheduler
        thread.join()  # (it used to wait for ever; pytest-timeout ends a hang)
    error = box.get("error")
    assert isinstance(error, gd.errors.ClusterError), box
    line = str(error)
    assert "\n" not in line and "composing the samples" in line, line
    assert ("every Dask worker was lost" in line or "died" in line) and "run the same command again" in line, line


def _composing(client) -> bool:
    """Whether a window of the composition (a task of ``map_on_cluster``) is running on a worker."""
    return any(str(key).startswith("_returning_errors") for keys in client.processing().values() for key in keys)


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["workers", "scheduler"])
def test_an_outside_cluster_lost_while_composing_is_one_line(tmp_path, killed):
    """Issue 35, cases 5 and 7: every worker process of an outside cluster (``dask scheduler``, ``dask worker``)
    SIGKILLed, or the scheduler, while ``gcc-dask run`` composes 120,000 samples in 120 windows. The run used to
    hang (the workers) or end with a 75-line traceback, ``RuntimeError: ConnectionPool is closed``, status 1 (the
    scheduler); now one line naming what was lost while composing, and status 2."""
    from distributed import Client

    env = {**subprocess_env(), "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((120_000, 6)).astype("float32"))
    file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--no-dashboard",
                                  "--scheduler-file", str(file), "--port", "0"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, env=env)
    workers = None
    try:
        while not file.exists():  # (no time bound: pytest-timeout ends a hang)
            assert scheduler.poll() is None, "the scheduler ended"
            time.sleep(0.1)
        workers = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                    str(file), "--nworkers", "2", "--nthreads", "1", "--no-dashboard"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        cfg = synthetic_config(tmp_path / "run.zarr", batches=10, k=4, n=8, block=2, schemes=["gcc"],
                               source={"kind": "npy", "path": str(tmp_path / "x.npy")}, composition="similarity",
                               cluster={"scheduler_file": str(file), "n_workers": None, "threads_per_worker": None,
                                        "processes": None, "connect_timeout": "5s"})
        cfg["composition"]["window"] = 1000
        (tmp_path / "pipe.yaml").write_text(yaml.safe_dump(cfg))
        with Client(scheduler_file=str(file), timeout="60s", set_as_default=False) as watch:
            # both workers joined before the run starts (an event: on a machine loaded by two test runs they took
            # more than the run's connect_timeout of 5 s to start, and the run ended with "no workers")
            watch.wait_for_workers(2)
            run = subprocess.Popen(cli("run", str(tmp_path / "pipe.yaml"), "--no-progress"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for line in run.stdout:  # the composition has begun
                if line.startswith("composing 120,000 samples"):
                    break
            # its windows are out on the workers (an event, not a duration: before, a sleep of 0.5 s, which a
            # busy machine can spend before the run submits them)
            while not _composing(watch):  # (no time bound: pytest-timeout ends a hang)
                assert run.poll() is None, run.communicate()
                time.sleep(0.02)
            _kill_tree(workers if killed == "workers" else scheduler)
        try:
            out, err = run.communicate(timeout=120)  # (the workers' case used to wait for ever)
        except subprocess.TimeoutExpired:
            run.kill()
            pytest.fail("the run did not end once its cluster was lost")
    finally:
        for proc in (workers, scheduler):
            if proc is not None:
                _kill_tree(proc)
    lines = [line for line in err.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1, err[-3000:]
    want = ("every Dask worker was lost while composing the samples" if killed == "workers"
            else "lost the connection to the Dask scheduler")
    assert want in lines[0] and "run the same command again" in lines[0], lines[0]
