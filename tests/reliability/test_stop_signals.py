"""SIGTERM and Ctrl-C of ``gcc-dask run`` on an embedded process cluster: one line, a documented exit status
(130 for Ctrl-C, 143 for SIGTERM), the store marked ``interrupted``, every worker process ended, no leaked
semaphores; the same command resumes. A Ctrl-C or SIGTERM while the cluster starts stops the run too (Ctrl-C
used to be ignored there and the run went on to completion).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest
import yaml
import zarr

from rel_helpers import cli, status, subprocess_env, synthetic_config, wait_for_batches

pytestmark = pytest.mark.slow  # gcc-dask subprocesses with 2-3 worker processes each: ~30-90 s on 2 busy cores

LINES = {signal.SIGINT: "gcc-dask: interrupted; run the same command again to resume",
         signal.SIGTERM: "gcc-dask: terminated (SIGTERM); run the same command again to resume"}
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _pipeline(tmp_path, batches=60):
    store, pipe = tmp_path / "run.zarr", tmp_path / "pipe.yaml"
    cfg = synthetic_config(store, batches=batches, k=4, n=8, schemes=["gcc", "uncoded"],
                           cluster={"processes": True, "n_workers": 2, "threads_per_worker": 8},
                           stragglers={"shift": "100ms", "scale": "50ms"}, run={"max_batches_in_flight": 2})
    pipe.write_text(yaml.safe_dump(cfg))
    return store, pipe


def _start(pipe, env=None):
    # its own session, as a terminal's foreground job: Ctrl-C goes to the whole process group
    return subprocess.Popen(cli("run", str(pipe), "--no-progress"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env or subprocess_env(), start_new_session=True)


def _send(proc, signum):
    """Ctrl-C as a terminal sends it (to the process group); SIGTERM as a scheduler sends it (to the driver)."""
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)


def _workers(proc) -> list[psutil.Process]:
    """The driver's worker processes (multiprocessing spawns them; its resource tracker is not one)."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for kid in kids:
        try:
            if "spawn_main" in " ".join(kid.cmdline()):
                out.append(kid)
        except psutil.Error:
            pass
    return out


def _finish(proc, workers):
    try:
        out, err = proc.communicate(timeout=120)  # a hang fails here
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    gone, alive = psutil.wait_procs(workers, timeout=30)
    return out, err, alive


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_stops_with_one_line_and_the_rerun_resumes(tmp_path, signum):
    store, pipe = _pipeline(tmp_path)
    proc = _start(pipe)
    wait_for_batches(store, proc, 3)
    assert proc.poll() is None, proc.communicate()
    workers = _workers(proc)
    assert len(workers) >= 2
    _send(proc, signum)
    out, err, alive = _finish(proc, workers)
    assert proc.returncode == CODES[signum], (proc.returncode, err)
    # one line: no traceback, no worker's KeyboardInterrupt, no "leaked semaphore objects" warning
    assert [line for line in err.splitlines() if line.strip()] == [LINES[signum]], err
    assert zarr.open_group(str(store), mode="r").attrs["status"] == "interrupted"
    assert not alive, alive  # the embedded cluster's worker processes ended with the driver
    if signum == signal.SIGTERM:
        return  # the store is left as Ctrl-C leaves it ('interrupted', checked above): the SIGINT case resumes it
    # resumed up to batch 12 (run.limit_batches, which a resume may change): the 60 batches are there so that the
    # signal comes mid-run, whatever the machine's speed; running them all again proved nothing more
    again = subprocess.run(cli("run", str(pipe), "--no-progress", "--set", "run.limit_batches=12"),
                           capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert again.returncode == 0, again.stderr
    assert "resuming" in again.stdout and (status(store, "gcc")[:12] > 0).all()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_cluster_starts_stops_the_run(tmp_path, signum):
    """Each worker is held in its start (a preload, tests/reliability/slow_start.py) until the test lets it go
    on, and the signal is sent once a worker is held there: the cluster is still starting, whatever the
    machine's load. The run stops once the cluster has started (and closes it) instead of going on to
    completion; the workers, which start with both signals blocked, print nothing."""
    from slow_start import GATE_ENV

    store, pipe = _pipeline(tmp_path, batches=20)
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**subprocess_env(), "DASK_DISTRIBUTED__WORKER__PRELOAD": '["slow_start"]', GATE_ENV: str(gate)}
    proc = _start(pipe, env)
    try:
        while proc.poll() is None and not any(gate.glob("in-preload-*")):  # (no time bound: pytest-timeout)
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        workers = _workers(proc)  # a worker is in its preload: the cluster has not started
        _send(proc, signum)
    finally:
        (gate / "open").touch()  # the workers go on starting; the run stops once they have
    out, err, alive = _finish(proc, workers)
    assert proc.returncode == CODES[signum], (proc.returncode, out[-2000:], err)
    assert [line for line in err.splitlines() if line.strip()] == [LINES[signum]], err
    assert not alive, alive
    assert not store.exists()  # stopped before anything was computed


@pytest.mark.parametrize("where", ["_check_reachable", "RecordBuffer"])
# the run's small cluster has fewer threads than a batch has shards: the run says so, which the signal does not
# depend on (it comes before any batch)
@pytest.mark.filterwarnings("ignore:a batch has up to N = :RuntimeWarning")
def test_a_signal_while_the_batches_are_set_up_marks_the_store_interrupted(tmp_path, monkeypatch, where):
    """Issue 35, case 8: SIGTERM (a KeyboardInterrupt here, as the CLI raises it) that came after the store was
    made but before the batches ran (the workers' check of the store, the records' buffer) left it
    ``running`` (2 of 6 trials); it is marked ``interrupted`` wherever it comes."""
    import gcc_dask as gd
    from gcc_dask import pipeline

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    store, pipe = _pipeline(tmp_path, batches=4)
    cfg = yaml.safe_load(pipe.read_text())
    cfg["cluster"] = {"processes": False, "n_workers": 1, "threads_per_worker": 2}
    monkeypatch.setattr(pipeline, where, stop)
    with pytest.raises(KeyboardInterrupt):
        gd.run_pipeline(cfg)
    assert zarr.open_group(str(store), mode="r").attrs["status"] == "interrupted"
