"""The cutoff keeps its promise under real stragglers and faults.

- the deadline fires on time on both clocks, with the uncoded reference on (the decode never waits for it);
- every worker lost: one line and exit 2 in bounded time (``cluster.connect_timeout``), and a rerun resumes;
- the external scheduler lost: one line and exit 2, the store marked failed, and a rerun resumes;
- a store that cannot be written stops the run with one line, and failed batches are retried on resume;
- more shards than worker threads: the run says so at start.

Ctrl-C and SIGTERM of ``gcc-dask run`` on a process cluster (one line, exit 130 or 143, the store marked
interrupted, the same command resumes) are test_stop_signals.py's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
import zarr

import gcc_dask as gd
from rel_helpers import cli, status, subprocess_env, synthetic_config, wait_for_batches


#: how long each call of :func:`sleepy` (and each shard's injected latency on the virtual clock) takes: a decode
#: that waited for one cannot have a latency below it, whatever the machine's load
SHARD_S = 3.0


def sleepy(X):
    """f that takes SHARD_S per call (a real straggler: it computes, it does not sleep cooperatively)."""
    time.sleep(SHARD_S)
    X = np.asarray(X)
    return X * np.sin(X)


# --------------------------------------------------------------------------------- deadline on time
@pytest.fixture(scope="module")
def roomy_client():
    """Threads for every shard in flight: a shard whose f is running keeps its thread when cancelled (f is
    not interrupted), so the decode must not queue behind them (docs/pipeline.rst, section 'Slots and
    placement')."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=32, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as c:
        yield c


@pytest.mark.parametrize("clock", ["wall", "virtual"])
def test_deadline_fires_on_time_with_the_reference_on(roomy_client, tmp_path, clock):
    """Every shard takes SHARD_S = 3 s (f itself on the wall clock; the injected latency on the virtual clock), the
    deadline is 0.5 s and the reference is on: each batch is cut at the deadline (undecodable: nothing had
    arrived), and its decode is written well before any shard or the reference could have finished."""
    client = roomy_client
    if clock == "wall":
        sections = {"workload": {"kind": "callable", "name": "test_cutoff_promise:sleepy"},
                    "stragglers": {"model": "none"}}
    else:
        sections = {"stragglers": {"model": "shifted_exponential", "shift": f"{SHARD_S:g}s", "scale": "10ms",
                                   "seed": 1}}
    cfg = synthetic_config(tmp_path / f"{clock}.zarr", batches=3, k=4, n=8, cutoff={"deadline": "500ms"},
                           run={"reference": True, "max_batches_in_flight": 3}, **sections)
    run = gd.run_pipeline(cfg, client=client)
    root = zarr.open_group(str(run.path), mode="r")
    np.testing.assert_allclose(root["gcc/cutoff_s"][:], 0.5)
    assert (root["gcc/status"][:] == 3).all()  # cut at the deadline with no result: undecodable
    assert (root["gcc/n_received"][:] == 0).all()
    latency = root["gcc/batch_latency_s"][:]
    # not the shards' SHARD_S, nor the reference's: a decode that waited for one could not be below it (the bound
    # is the shards' own sleep, 6 deadlines, not a guess at how fast the machine decodes)
    assert (latency < SHARD_S).all(), latency
    assert (root["inputs/status"][:] == 1).all()  # the reference was still computed and written, later


# ------------------------------------------------------------------------------------ workers lost
@pytest.mark.slow
def test_losing_every_worker_ends_in_bounded_time_with_one_line(tmp_path):
    env = subprocess_env()
    sched_file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--no-dashboard",
                                  "--scheduler-file", str(sched_file), "--port", "0"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    worker = None
    try:
        while not sched_file.exists() and scheduler.poll() is None:  # (no time bound: pytest-timeout ends a hang)
            time.sleep(0.1)
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                   str(sched_file), "--no-nanny", "--nthreads", "8", "--no-dashboard"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        store = tmp_path / "run.zarr"
        pipe = tmp_path / "pipe.yaml"
        cfg = synthetic_config(store, batches=200, k=4, n=8,
                               cluster={"scheduler_file": str(sched_file), "connect_timeout": "3s",
                                        "processes": None, "n_workers": None, "threads_per_worker": None},
                               stragglers={"shift": "50ms", "scale": "20ms"}, run={"max_batches_in_flight": 2})
        pipe.write_text(yaml.safe_dump(cfg))
        proc = subprocess.Popen(cli("run", str(pipe), "--no-progress"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        wait_for_batches(store, proc, 3)
        worker.kill()  # the only worker, without a nanny: nothing comes back
        out, err = proc.communicate(timeout=300)  # a hang fails here (a bound on a hang, not on a duration)
        assert proc.returncode == 2, (proc.returncode, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "every Dask worker was lost" in lines[0], err
        assert "every Dask worker is gone" in out  # it said so while it waited
        done = int((status(store, "gcc") > 0).sum())
        assert done >= 3
        # workers back: the same command resumes and completes
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                   str(sched_file), "--nthreads", "8", "--no-dashboard"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        again = subprocess.run(cli("run", str(pipe), "--no-progress", "--set", "run.limit_batches=20"),
                               capture_output=True, text=True, timeout=300, env=env)
        assert again.returncode == 0, again.stderr
        assert f"{done} of 20" in again.stdout or "of 20 batches already done" in again.stdout
    finally:
        for p in (worker, scheduler):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_losing_the_scheduler_ends_with_one_line_and_a_rerun_resumes(tmp_path):
    """The external scheduler is SIGKILLed mid-run: one ClusterError line and exit status 2 (it used to be a
    traceback of ClosedClientError and exit status 1), the store marked failed with the batches finished
    before; with a scheduler back, the same command resumes."""
    env = subprocess_env()
    sched_file = tmp_path / "scheduler.json"

    def start_cluster():
        if sched_file.exists():
            sched_file.unlink()
        scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--no-dashboard",
                                      "--scheduler-file", str(sched_file), "--port", "0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        while not sched_file.exists() and scheduler.poll() is None:  # (no time bound: pytest-timeout ends a hang)
            time.sleep(0.1)
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                   str(sched_file), "--nthreads", "8", "--no-dashboard"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        return [scheduler, worker]

    procs = start_cluster()
    try:
        store, pipe = tmp_path / "run.zarr", tmp_path / "pipe.yaml"
        cfg = synthetic_config(store, batches=200, k=4, n=8,
                               cluster={"scheduler_file": str(sched_file), "connect_timeout": "3s",
                                        "processes": None, "n_workers": None, "threads_per_worker": None},
                               stragglers={"shift": "50ms", "scale": "20ms"}, run={"max_batches_in_flight": 2})
        pipe.write_text(yaml.safe_dump(cfg))
        proc = subprocess.Popen(cli("run", str(pipe), "--no-progress"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        wait_for_batches(store, proc, 3)
        procs[0].kill()  # the scheduler
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (proc.returncode, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "cluster: lost the connection to the Dask scheduler at" in lines[0], err
        assert "run the same command again to resume" in lines[0]
        assert zarr.open_group(str(store), mode="r").attrs["status"] == "failed"
        done = int((status(store, "gcc") > 0).sum())
        assert done >= 3
        for p in procs:
            p.kill()
            p.wait()
        procs = start_cluster()
        again = subprocess.run(cli("run", str(pipe), "--no-progress", "--set", "run.limit_batches=20"),
                               capture_output=True, text=True, timeout=300, env=env)
        assert again.returncode == 0, again.stderr
        assert "resuming" in again.stdout and (status(store, "gcc")[:20] > 0).all()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# ------------------------------------------------------------------------ storage errors and retries
def test_an_unwritable_chunk_stops_the_run_with_one_line_and_the_rerun_retries(client, tmp_path):
    """A file where batch 3's chunk folder should be: the run stops with one StoreError line naming the
    array and the batch; once the obstacle is gone, the same run resumes and completes."""
    path = tmp_path / "run.zarr"
    cfg = synthetic_config(path, batches=8, k=4, n=8, run={"max_batches_in_flight": 1, "limit_batches": 1})
    gd.run_pipeline(cfg, client=client)  # creates the store, batch 0 done
    obstacle = path / "gcc" / "decoded" / "c" / "3"
    obstacle.parent.mkdir(parents=True, exist_ok=True)
    obstacle.write_text("not a chunk folder")
    cfg["run"] = {**cfg["run"], "limit_batches": None}
    with pytest.raises(gd.errors.StoreError, match=r"cannot write gcc/decoded of batch 3 .*run the same command"):
        gd.run_pipeline(cfg, client=client)
    assert zarr.open_group(str(path), mode="r").attrs["status"] == "failed"
    assert status(path, "gcc")[3] == 0  # not written off as done
    obstacle.unlink()
    again = gd.run_pipeline(cfg, client=client)
    assert again.status == "complete" and (status(path, "gcc") > 0).all()


@pytest.mark.parametrize("array", ["reference", "labels"])
def test_an_unwritable_reference_stops_the_run_and_the_batch_is_redone(client, tmp_path, array):
    """A file where batch 3's inputs/reference (or, without a reference, inputs/labels) chunk folder should be:
    the run stops with the one StoreError line (it used to end 'complete' with batch 3's reference, MSE and
    RelAcc NaN, and a rerun found every batch done); once the obstacle is gone, the same run redoes batch 3
    and equals an undisturbed run."""
    from rel_helpers import assert_stores_equal

    path = tmp_path / "run.zarr"
    data = np.random.default_rng(1).random((32, 6)).astype(np.float32)
    cfg = synthetic_config(path, batches=8, k=4, n=8, schemes=["gcc", "uncoded"],
                           source={"kind": "array", "array": data, "labels": np.arange(32) % 3},
                           run={"max_batches_in_flight": 2, "limit_batches": 1, "reference": array == "reference"})
    gd.run_pipeline(cfg, client=client)  # creates the store, batch 0 done
    obstacle = path / "inputs" / array / "c" / "3"  # the reference's chunk is a folder (c/3/0), the labels' a file
    if array == "reference":
        obstacle.parent.mkdir(parents=True, exist_ok=True)
        obstacle.write_text("not a chunk folder")
    else:
        (obstacle / "not-a-chunk").mkdir(parents=True)
    cfg["run"] = {**cfg["run"], "limit_batches": None}
    with pytest.raises(gd.errors.StoreError, match=rf"cannot write inputs/\w+(, inputs/\w+)? of batch 3 .*run the "
                                                   rf"same command again"):
        gd.run_pipeline(cfg, client=client)
    root = zarr.open_group(str(path), mode="r")
    assert root.attrs["status"] == "failed" and root["inputs/status"][3] == 0
    shutil.rmtree(obstacle) if obstacle.is_dir() else obstacle.unlink()
    again = gd.run_pipeline(cfg, client=client)
    assert again.status == "complete"
    root = zarr.open_group(str(path), mode="r")
    assert (root["inputs/status"][:] == 1).all()
    np.testing.assert_array_equal(root["inputs/labels"][:], np.arange(32) % 3)
    if array == "reference":
        assert np.isfinite(root["inputs/reference"][:]).all()
        assert np.isfinite(root["gcc/mse"][:]).all() and np.isfinite(root["uncoded/rel_acc"][:]).all()
    clean = gd.run_pipeline({**cfg, "store": {"path": str(tmp_path / "clean.zarr")}}, client=client)
    assert_stores_equal(path, clean.path, ["gcc", "uncoded"])


def test_a_batch_whose_reference_is_missing_is_pending_work(client, tmp_path):
    """A store whose batch 2 has every scheme's status but no reference (as runs before this check left it):
    the resume runs batch 2 again, for every scheme, and only it; the run was 'incomplete' until then."""
    path = tmp_path / "run.zarr"
    cfg = synthetic_config(path, batches=4, k=4, n=8, schemes=["gcc", "uncoded"])
    gd.run_pipeline(cfg, client=client)
    root = zarr.open_group(str(path), mode="r+", use_consolidated=False)
    want = {name: root[name][:].copy() for name in ("inputs/reference", "gcc/mse", "uncoded/rel_acc")}
    before = root["gcc/batch_latency_s"][:].copy()
    root["inputs/status"][2] = 0
    root["inputs/reference"][8:12] = np.nan
    root["gcc/mse"][2] = np.nan
    said = []
    again = gd.run_pipeline(cfg, client=client, echo=said.append)
    assert any("3 of 4 batches already done" in line for line in said), said
    assert again.status == "complete"
    root = zarr.open_group(str(path), mode="r")
    for name, values in want.items():
        np.testing.assert_array_equal(root[name][:], values, err_msg=name)
    after = root["gcc/batch_latency_s"][:]
    np.testing.assert_array_equal(np.delete(after, 2), np.delete(before, 2))  # the others were not recomputed
    assert after[2] != before[2]


def test_failed_batches_are_retried_on_resume(client, tmp_path):
    from gcc_dask.store import RunStore

    path = tmp_path / "run.zarr"
    cfg = synthetic_config(path, batches=4, k=4, n=8)
    gd.run_pipeline(cfg, client=client)
    store = RunStore.open(path)
    store.write_records("gcc", [{"batch": 2, "received_mask": np.zeros(8, bool), "latency_s": np.full(8, np.nan),
                                 "cutoff_s": np.nan, "status": 4}])
    before = zarr.open_group(str(path), mode="r")["gcc/batch_latency_s"][:].copy()
    again = gd.run_pipeline(cfg, client=client)
    after = zarr.open_group(str(path), mode="r")
    assert again.status == "complete" and after["gcc/status"][2] in (1, 2)
    np.testing.assert_array_equal(np.delete(after["gcc/batch_latency_s"][:], 2), np.delete(before, 2))


def test_more_shards_than_worker_threads_is_said_at_start(tmp_path):
    from distributed import Client, LocalCluster

    said = []
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as c:
        gd.run_pipeline(synthetic_config(tmp_path / "run.zarr", batches=2, k=4, n=8), client=c, echo=said.append)
    assert any("up to N = 8 shards but the cluster has 2 worker threads" in line for line in said), said


# ------------------------------------------------------------------------------------------- noise
@pytest.mark.slow
def test_bad_data_mid_run_prints_one_line_and_no_worker_tracebacks(tmp_path):
    """NaN in a later batch, on a process cluster: every shard of that batch fails (an erasure each) and
    the run stops; stderr holds the one line naming the batch, not the workers' "Compute Failed" blocks."""
    x = np.random.default_rng(0).random((256, 6)).astype("float32")
    x[200, 3] = np.nan
    np.save(tmp_path / "x.npy", x)
    pipe = tmp_path / "pipe.yaml"
    cfg = synthetic_config(tmp_path / "run.zarr", batches=4, k=4, n=8, block=16, schemes=["gcc", "uncoded"],
                           source={"kind": "npy", "path": str(tmp_path / "x.npy")},
                           cluster={"processes": True, "n_workers": 2, "threads_per_worker": 4})
    pipe.write_text(yaml.safe_dump(cfg))
    out = subprocess.run(cli("run", str(pipe), "--no-progress"), capture_output=True, text=True, timeout=300,
                         env=subprocess_env())
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds NaN or Inf" in lines[0] and "batch 3" in lines[0], out.stderr
