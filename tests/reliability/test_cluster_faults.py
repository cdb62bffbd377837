"""Faults of a whole cluster: every worker of an external cluster killed and replaced by new ones.

The shards of a batch are placed on workers (a loose restriction, docs/pipeline.rst, section 'Slots and
placement'); when no worker is left, the scheduler parks them as ``no-worker`` and later gives them only to a
worker their restriction names, never to a new one. The run used to wait forever after "N Dask worker(s)
back; the run goes on"; it now runs the batches in flight again on the new workers and completes.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import yaml
import zarr

from rel_helpers import cli, status, subprocess_env, synthetic_config

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
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        first = workers()
        procs += first
        store, pipe = tmp_path / "run.zarr", tmp_path / "pipe.yaml"
        batches = 60
        cfg = synthetic_config(store, batches=batches, k=4, n=12, schemes=["gcc", "uncoded"],
                               cluster={"scheduler_file": str(sched_file), "connect_timeout": "60s",
                                        "processes": None, "n_workers": None, "threads_per_worker": None},
                               stragglers={"shift": "50ms", "scale": "20ms"},
                               cutoff={"stragglers": 4, "deadline": "1s"}, run={"max_batches_in_flight": 4})
        pipe.write_text(yaml.safe_dump(cfg))
        run = subprocess.Popen(cli("run", str(pipe), "--no-progress"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        procs.append(run)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None:
            try:
                if (status(store, "gcc") > 0).sum() >= 5:
                    break
            except Exception:
                pass
            time.sleep(0.1)
        assert run.poll() is None, run.communicate()
        for w in first:  # every worker tree (nanny and worker process), at once
            _kill_tree(w)
        time.sleep(1.0)
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
