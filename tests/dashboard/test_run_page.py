"""The run's page on the Dask dashboard: listed among the individual plots and served, with the run's data,
while a run goes on, on the embedded cluster and on a separately started scheduler (docs/dashboard.rst)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gcc_dask as gd
from page_helpers import SLOW, base_of, batches_done, document_of, get, in_thread, page_summary, wait_for_run

SMOKE = "pipelines/smoke.yaml"
PAGE = "/individual-gcc-dask"
BIN = Path(sys.executable).parent


def _check_page_during_run(base: str, run: dict, name: str) -> None:
    """What the page serves while `run` (a state that shows a finished batch) goes on."""
    status, plots = get(base + "/individual-plots.json")
    assert status == 200
    assert json.loads(plots)["Individual Gcc Dask"] == PAGE
    status, body = get(base + PAGE)
    assert status == 200
    summary = page_summary(body)
    assert summary["token"] == run["token"]
    assert (summary["name"], summary["status"], summary["batches"], summary["metric"]) == (name, "running", 6, "rel_acc")
    schemes = {s["scheme"]: s for s in summary["schemes"]}
    assert sorted(schemes) == ["gcc", "uncoded"]
    assert (schemes["gcc"]["N"], schemes["gcc"]["needed"]) == (16, 12)  # N - S with S = 4
    assert (schemes["uncoded"]["N"], schemes["uncoded"]["needed"]) == (8, 8)
    assert all(s["done"] >= 1 for s in schemes.values())
    doc = document_of(base + PAGE)  # the document a browser gets over its websocket
    assert "<td>gcc</td><td>16</td><td>12</td>" in doc["gcc-schemes"]  # scheme, N, N - S
    assert "<td>uncoded</td><td>8</td><td>8</td>" in doc["gcc-schemes"]
    assert f"gcc-dask run <b>{name}</b>" in doc["gcc-header"]
    assert doc["gcc-shards"] >= 20  # at least the first batch's 12 kept gcc shards and its 8 uncoded ones


@pytest.mark.slow
def test_the_page_of_a_run_on_the_embedded_cluster(tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    lines: list[str] = []
    job, outcome = in_thread(lambda: gd.run_pipeline(SMOKE, out=tmp_path / "run.zarr", overrides=SLOW,
                                                     echo=lines.append))
    try:
        deadline = time.monotonic() + 120
        while job.is_alive() and time.monotonic() < deadline and not any(x.startswith("gcc-dask run page:") for x in lines):
            time.sleep(0.05)
        dashboard = next(x for x in lines if x.startswith("dask dashboard: ")).split()[2]
        base = base_of(dashboard)
        # the run prints the page's link right after the dashboard's
        assert lines[lines.index(next(x for x in lines if x.startswith("dask dashboard: "))) + 1] == \
            f"gcc-dask run page: {base}{PAGE}"
        run = wait_for_run(base, lambda r: batches_done(r) >= 1, alive=job.is_alive)
        assert run is not None, outcome.get("error")
        _check_page_during_run(base, run, "smoke")
    finally:
        job.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].status == "complete"


@pytest.fixture
def outside_scheduler(tmp_path):
    """A `dask scheduler` with its dashboard and one `dask worker`, started as a user would (other processes);
    yields ``(address, dashboard base URL)``."""
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        while not sched_file.exists() and procs[0].poll() is None:  # (no time bound: pytest-timeout ends a hang)
            time.sleep(0.2)
        info = json.loads(sched_file.read_text())
        procs.append(subprocess.Popen([str(BIN / "dask"), "worker", info["address"], "--nthreads", "16",
                                       "--no-dashboard", "--nworkers", "1", "--memory-limit", "2GiB"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield info["address"], f"http://127.0.0.1:{info['services']['dashboard']}"
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


@pytest.mark.slow
def test_the_page_of_a_cli_run_on_a_separately_started_scheduler(outside_scheduler, tmp_path):
    address, base = outside_scheduler
    args = [str(BIN / "gcc-dask"), "run", SMOKE, "--scheduler", address, "--out", str(tmp_path / "remote.zarr")]
    for o in SLOW:
        args += ["--set", o]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run = wait_for_run(base, lambda r: batches_done(r) >= 1, alive=lambda: proc.poll() is None)
        assert run is not None, proc.poll()
        _check_page_during_run(base, run, "smoke")
    finally:
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert f"gcc-dask run page: {base}{PAGE}" in out.splitlines()
    # the run is over: its page stays, idle, with the whole run
    status, body = get(base + PAGE)
    summary = page_summary(body)
    assert (status, summary["token"], summary["status"]) == (200, run["token"], "complete")
    assert [s["done"] for s in summary["schemes"]] == [6, 6]
    assert all(s["in_flight"] == 0 for s in summary["schemes"])


def test_a_sweep_publishes_to_the_page(client, tmp_path):
    """``gcc-dask sweep`` (run_sweep) prints the page's link and publishes as a run does: its tasks by worker,
    each scheme's tasks done and metric; the page stays with the whole sweep once it is over."""
    from gcc_dask.sweep import run_sweep

    cfg = {"name": "page-sweep", "function": {"kind": "xsinx"}, "schemes": ["gcc", "bacc"],
           "code": {"num_inputs": [6], "num_workers": [13, 25]},
           "stragglers": {"model": "fixed_count", "S": [1, 2], "pattern": "random"}, "trials": 3,
           "run": {"progress": False, "trials_per_task": 2}}
    lines: list[str] = []
    res = run_sweep(cfg, client=client, out=tmp_path / "s.zarr", echo=lines.append)
    assert res.status == "complete"
    base = base_of(client.dashboard_link)
    assert f"gcc-dask run page: {base}{PAGE}" in lines
    status, body = get(base + "/gcc-dask/state.json")
    run = json.loads(body)["runs"][-1]
    assert (status, run["what"], run["name"], run["status"], run["batches"], run["metric"]) == \
        (200, "sweep", "page-sweep", "complete", 8, "mse")  # 4 cells x 2 blocks of trials; x sin x: one output
    schemes = {s["scheme"]: s for s in run["schemes"]}
    assert sorted(schemes) == ["bacc", "gcc"]
    assert all(s["done"] == 8 and s["in_flight"] == 0 and s["grid"] == "K 6; N 13, 25; S 1, 2"
               for s in schemes.values())
    assert all(s["metric"] is not None and s["metric"] >= 0 for s in schemes.values())
    assert sorted(r["batch"] for r in run["shards"]) == list(range(8))  # a bar per task, on the worker that ran it
    assert all(r["outcome"] == "kept" and r["worker"].startswith(("tcp://", "inproc://")) for r in run["shards"])
    doc = document_of(base + PAGE)
    assert "gcc-dask sweep <b>page-sweep</b>" in doc["gcc-header"] and "8 of 8 tasks finished" in doc["gcc-header"]
    assert "<td>K 6; N 13, 25; S 1, 2</td>" in doc["gcc-schemes"]
