"""The command line: `run` against a separately started scheduler, `info`, and one-line user errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zarr

BIN = Path(sys.executable).parent
GCC_DASK = [str(BIN / "gcc-dask")]
DASK = str(BIN / "dask")


@pytest.fixture
def scheduler(tmp_path):
    """A `dask scheduler` and one `dask worker`, started as a user would, on loopback."""
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(sched_file)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        while not sched_file.exists() and procs[0].poll() is None:  # (no time bound: pytest-timeout ends a hang)
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        procs.append(subprocess.Popen([DASK, "worker", address, "--nthreads", "8", "--no-dashboard",
                                       "--nworkers", "1", "--memory-limit", "2GiB"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


@pytest.mark.slow
def test_run_against_a_separately_started_scheduler(scheduler, tmp_path):
    out = tmp_path / "remote.zarr"
    res = subprocess.run(GCC_DASK + ["run", "pipelines/smoke.yaml", "--scheduler", scheduler, "--out", str(out),
                                     "--set", "run.limit_batches=3", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "gcc" in res.stdout and "rel_acc" in res.stdout
    root = zarr.open_group(str(out), mode="r")
    assert (root["gcc/status"][:3] > 0).all()
    assert root.attrs["status"] == "incomplete"  # limit_batches=3 of 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "pipelines/does-not-exist.yaml"], "does-not-exist.yaml"),
        (["run", "pipelines/smoke.yaml", "--set", "code.num_inputs=0"], "code.num_inputs"),
        (["run", "pipelines/smoke.yaml", "--set", "cutoff.stragglers=99"], "cutoff.stragglers"),
        (["run", "pipelines/smoke.yaml", "--set", "gcc.lambda_dec=-1"], "gcc.lambda_dec"),
        (["run", "pipelines/smoke.yaml", "--set", "nonsense.key=1"], "nonsense"),
    ],
    ids=["missing-file", "zero-inputs", "too-many-stragglers", "negative-lambda", "unknown-key"],
)
def test_user_errors_are_one_line_with_exit_status_2(args, message):
    res = subprocess.run(GCC_DASK + args, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in res.stderr


def test_unreachable_scheduler_fails_fast_with_one_line(tmp_path):
    res = subprocess.run(GCC_DASK + ["run", "pipelines/smoke.yaml", "--scheduler", "tcp://127.0.0.1:9",
                                     "--out", str(tmp_path / "x.zarr"), "--set", "cluster.connect_timeout=2s"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "cannot reach the Dask scheduler" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_info_prints_versions_and_the_target_cluster():
    res = subprocess.run(GCC_DASK + ["info"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    assert "zarr" in res.stdout and "gpu" in res.stdout and "LocalCluster" in res.stdout


def test_report_on_a_missing_store_is_one_line():
    res = subprocess.run(GCC_DASK + ["report", "runs/nope.zarr"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines == [f"gcc-dask: error: store path: got {str(Path('runs/nope.zarr').absolute())!r}; it does not "
                     "exist (expected a gcc-dask run, sweep or frontier store)"]
    assert "Usage:" not in res.stderr


def test_performance_report_of_a_run(tmp_path):
    report = tmp_path / "perf" / "smoke.html"
    res = subprocess.run(GCC_DASK + ["run", "pipelines/smoke.yaml", "--out", str(tmp_path / "s.zarr"), "--no-progress",
                                     "--set", "run.limit_batches=2", "--performance-report", str(report)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"performance report: {report}" in res.stdout
    assert "it closes when the run ends" in res.stdout  # the embedded cluster's dashboard is said to be short-lived
    text = report.read_text()
    assert "Dask Performance Report" in text and "Task Stream" in text
    _assert_offline(text)


def _assert_offline(html: str) -> None:
    """Bokeh's JavaScript is inline: no script or stylesheet is loaded from the network (the favicon may be)."""
    assert not re.findall(r"""<script[^>]*\bsrc\s*=\s*["']?(?:https?:)?//""", html, flags=re.I)
    stylesheets = re.findall(r"<link[^>]*>", html, flags=re.I)
    assert not [s for s in stylesheets if "stylesheet" in s and re.search(r"href\s*=\s*[\"']?(?:https?:)?//", s)]
    assert "Bokeh" in html and html.count("<script") >= 2  # the library itself, and the plots


def test_performance_report_of_a_sweep(tmp_path):
    report = tmp_path / "sweep.html"
    res = subprocess.run(GCC_DASK + ["sweep", "pipelines/rate_worst_case.yaml", "--out", str(tmp_path / "s.zarr"),
                                     "--set", "code.num_workers=[39]", "--set", "stragglers.S=[1]", "--set", "trials=2",
                                     "--set", "cluster.processes=false", "--no-progress",
                                     "--performance-report", str(report)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Dask Performance Report" in report.read_text()
    _assert_offline(report.read_text())


@pytest.mark.parametrize("where", ["a-file/x", "/proc/gcc-dask-nope"], ids=["under-a-file", "unwritable"])
@pytest.mark.parametrize("command", [
    ["run", "pipelines/smoke.yaml", "--performance-report", "{p}.html"],
    ["report", "runs/does-not-matter.zarr", "--out", "{p}"],
    ["bench", "coding", "--quick", "--out", "{p}"],
    ["bench", "pipeline", "--quick", "--section", "checksums", "--out", "{p}"],
], ids=["run-performance-report", "report-out", "bench-coding-out", "bench-pipeline-out"])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, command, where):
    """One line naming the option and the path, exit status 2, before a cluster starts or a bench runs (they
    used to fail with a traceback once the work was done; a run's store then stayed 'running')."""
    (tmp_path / "a-file").write_text("")
    path = str(tmp_path / where) if not where.startswith("/") else where
    args = [a.replace("{p}", path) for a in command]
    res = subprocess.run(GCC_DASK + args + (["--out", str(tmp_path / "s.zarr")] if args[0] == "run" else []),
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    option = "--performance-report" if args[0] == "run" else "--out"
    shown = path + ".html" if args[0] == "run" else path
    assert len(lines) == 1 and lines[0].startswith(f"gcc-dask: error: {option}: got {shown!r}"), res.stderr
    if where == "a-file/x":
        assert f"({tmp_path / 'a-file'} is a file)" in lines[0]
    assert not (tmp_path / "s.zarr").exists()  # nothing ran


@pytest.mark.parametrize(("args", "line"), [
    (["bench", "coding", "--quick", "--section", "tail"],
     "gcc-dask: error: --section: got tail; expected no --section with bench coding"),
    (["bench", "pipeline", "--quick", "--gpu", "--section", "checksums"],
     "gcc-dask: error: --gpu: got it with bench pipeline; expected it with bench coding only"),
])
def test_bench_options_of_the_other_bench_are_refused(tmp_path, args, line):
    res = subprocess.run(GCC_DASK + args + ["--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().startswith(line), res.stderr
    assert not list(tmp_path.iterdir())  # no report: nothing ran


@pytest.mark.parametrize(("args", "line"), [
    (["--no-progress", "--set", "run.progress=maybe"],
     "gcc-dask: error: run.progress: got 'maybe'; expected true or false"),
    (["--overwrite", "--set", "store.overwrite=2"],
     "gcc-dask: error: store.overwrite: got '2'; expected true or false"),
])
def test_a_shortcut_does_not_hide_a_bad_value_of_its_key(tmp_path, args, line):
    res = subprocess.run(GCC_DASK + ["run", "pipelines/smoke.yaml", "--out", str(tmp_path / "s.zarr"), *args],
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 2 and res.stderr.strip() == line, res.stderr


def test_waits_left_pending_by_a_lost_scheduler_are_not_printed_after_the_one_line(tmp_path):
    """Issue 35, case 8: after a scheduler's death ended a run with its one line, asyncio printed "Task was destroyed
    but it is pending!" (and the task) for each wait the client left on its loop when collected at exit. A command
    that ends on a user error leaves only its line."""
    script = tmp_path / "lost.py"
    script.write_text(
        "import asyncio, gc, sys\n"
        "from gcc_dask.cli import _user_errors\n"
        "from gcc_dask.errors import ClusterError\n"
        "loop = asyncio.new_event_loop()\n"
        "async def forever():\n"
        "    await asyncio.Future()\n"
        "task = loop.create_task(forever())\n"
        "loop.run_until_complete(asyncio.sleep(0))\n"
        "@_user_errors\n"
        "def command():\n"
        "    raise ClusterError('cluster: lost the connection to the Dask scheduler')\n"
        "try:\n"
        "    command()\n"
        "finally:\n"
        "    loop.close()\n"
        "    del task\n"
        "    gc.collect()\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                                           os.environ.get("PYTHONPATH", "")])})
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and lines == ["gcc-dask: error: cluster: lost the connection to the Dask scheduler"], \
        res.stderr


def test_bench_offers_every_section_of_the_pipeline_bench():
    """``gcc-dask bench pipeline --section`` accepts each section the bench runs, and no other (the choices are
    written out in the CLI, which imports no bench module before it runs)."""
    from gcc_dask.bench.pipeline import SECTIONS
    from gcc_dask.cli import main

    option = next(p for p in main.commands["bench"].params if p.name == "sections")
    assert tuple(option.type.choices) == SECTIONS
