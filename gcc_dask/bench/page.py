"""The ``page`` section of the pipeline bench: what the run's dashboard page costs a run, side by side.

The same pipeline (``pipelines/smoke.yaml``: LeNet-5 on MNIST, 4 schemes, blocks of 2 samples, 56 shard tasks a
batch, without injected latency, so that the run's orchestration is all there is to slow down: the worst case
for the page) runs on one cluster with its dashboard in three modes, interleaved
(:func:`~gcc_dask.bench.rounds.interleaved_rounds`: off, published, off, open, off, ...), after a warm-up of each:

``off``
    ``GCC_DASK_RUN_PAGE=off`` and no plugin on the scheduler: a run on a scheduler that never saw the page.
``published``
    The run attaches and publishes (the scheduler plugin follows every transition, the driver sends its
    events), nobody has the page open.
``open``
    As ``published``, and a viewer holds the page open for the whole run: a Bokeh client session in a process
    of its own at the lowest CPU priority (the document a browser gets, over the same websocket; its own CPU
    is not counted), which the page redraws for.

Each round gives a throughput ratio (the two ``off`` runs beside it over the mode's run: above 1 the page
costs nothing measurable) and a CPU ratio (driver, scheduler and workers' CPU seconds per run, the same way).
On a loaded machine both swing by far more than the 2% they are held to, so the section also reads the page's
own accounts of the time it took on the scheduler's thread (its hooks on the run's shard transitions, the
driver's events, the redraws of the open page, by the wall clock: :attr:`~gcc_dask.dashboard.plugin.
DashboardPlugin.cpu`), as a share of the run's CPU.
The viewer also says when its document changed: from that, how long after the run's start (its ``start``
event: the first batch's clock) the page showed the run, its first shard, and its first batch done; and the page
notes when its redraw first sent each (:attr:`~gcc_dask.dashboard.state.RunState.shown`: the viewer, at the
lowest priority on a loaded machine, may take its time to read them).
BENCHMARKS.md, section 'The run page's cost', has the figures.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from gcc_dask.bench.processes import _cpu_s, _worker_pids
from gcc_dask.bench.report import Table, Target
from gcc_dask.bench.rounds import interleaved_rounds, ratio_summary

__all__ = ["MODES", "PAGE_COST_MIN", "FIRST_BATCH_MAX_S", "page_section", "shown_times"]

#: the modes measured against ``off``, in the order they alternate with it
MODES = ("published", "open")
#: the issue's targets: throughput with the page open at least 98% of the page off's; the first batch on the page
#: within 2 s of the run's start
PAGE_COST_MIN = 0.98
FIRST_BATCH_MAX_S = 2.0

_FINISHED = re.compile(r"<p>(\d+)(?: of \d+)? batches finished")

#: the viewer: the page's document over its websocket, one JSON line per change (time, header, shards drawn)
_VIEWER = r"""
import json, sys, time
from bokeh.client import pull_session
s = pull_session(url=sys.argv[1])
doc = s.document
header = doc.get_model_by_name("gcc-header")
shards = [doc.get_model_by_name(n) for n in ("gcc-shards", "gcc-shards-live")]
def say(*_):
    n = sum(len(s.data["start"]) for s in shards if s is not None)
    print(json.dumps({"t": time.time(), "header": header.text, "shards": n}), flush=True)
doc.on_change(say)
say()
(getattr(s, "loop_until_closed", None) or s._loop_until_closed)()
"""


class _Viewer:
    """The page held open by a Bokeh client in another process (nice 19 once open, with `nice`); its document's
    changes, timed."""

    def __init__(self, url: str, timeout: float = 900.0, nice: bool = True) -> None:
        self.lines: list[dict] = []
        self.proc = subprocess.Popen([sys.executable, "-c", _VIEWER, url], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self._opened = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True, name="gcc-dask-bench-viewer")
        self._reader.start()
        # until its first line or its end; `timeout` only keeps a viewer that hangs from holding the bench for ever
        deadline = time.monotonic() + timeout
        while not self._opened.wait(0.5):
            if self.proc.poll() is not None:
                self._reader.join(5)  # its last lines read
                if self._opened.is_set():
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                code = self.proc.poll()
                self.close()
                why = f"it exited with code {code}" if code is not None else f"not within {timeout:.0f} s"
                raise RuntimeError(f"bench page: the viewer could not open {url} ({why})")
        # nice 19 once open, for the runs it watches (a viewer is another machine's browser): started at nice 19,
        # four busy processes beside it left it without CPU to import Bokeh for 15 minutes
        if nice and hasattr(os, "setpriority"):
            try:
                os.setpriority(os.PRIO_PROCESS, self.proc.pid, 19)
            except OSError:  # pragma: no cover - it ended in between
                pass

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                continue
            self._opened.set()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_s(self) -> float:
        """The CPU seconds the viewer has used so far (on the same cores as the run: not in the run's CPU)."""
        import psutil

        try:
            t = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:  # pragma: no cover - gone already
            return math.nan
        return t.user + t.system

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a viewer stuck in a read
            self.proc.kill()
        self._reader.join(timeout=5)


def shown_times(lines: list[dict], started: float) -> dict[str, float]:
    """From a viewer's timed document changes (``t``, ``header``, ``shards``), the seconds after `started` (the
    run's start event, ``time.time()``) at which the page first showed the run (its header names it), a shard of
    it, and a batch of it finished; NaN for what it never showed. Changes before `started` are the earlier
    run's."""
    out = {"run_shown_s": math.nan, "first_shard_shown_s": math.nan, "first_batch_shown_s": math.nan}
    for ln in lines:
        if ln["t"] < started or "gcc-dask run <b>" not in ln["header"]:
            continue
        dt = ln["t"] - started
        if math.isnan(out["run_shown_s"]):
            out["run_shown_s"] = dt
        if ln["shards"] > 0 and math.isnan(out["first_shard_shown_s"]):
            out["first_shard_shown_s"] = dt
        m = _FINISHED.search(ln["header"])
        if m and int(m.group(1)) >= 1 and math.isnan(out["first_batch_shown_s"]):
            out["first_batch_shown_s"] = dt
    return out


def _state(client) -> dict:
    """The scheduler's ``/gcc-dask/state.json``."""
    from gcc_dask.dashboard import page_url
    from gcc_dask.dashboard.names import PAGE, STATE_JSON

    url = page_url(client)[: -len(PAGE)] + STATE_JSON
    with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - the local scheduler's dashboard
        return json.loads(resp.read())


def _page_cpu(dask_scheduler=None) -> dict:
    """The seconds the page has cost so far on the scheduler's thread (:attr:`~gcc_dask.dashboard.plugin.
    DashboardPlugin.cpu`; zeros without the plugin)."""
    from gcc_dask.dashboard.names import PLUGIN_NAME

    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return dict(getattr(plugin, "cpu", None) or {"transitions_s": 0.0, "events_s": 0.0, "redraws_s": 0.0})


def _page_sessions(dask_scheduler=None) -> list[str]:
    """The ids of the run page's Bokeh sessions (runs on the scheduler)."""
    from gcc_dask.dashboard.mount import _bokeh_server
    from gcc_dask.dashboard.names import PAGE

    server = _bokeh_server(dask_scheduler)
    return [] if server is None or PAGE not in server.app_paths else [s.id for s in server.get_sessions(PAGE)]


async def _let_closed_pages_go(dask_scheduler=None, keep=(), timeout: float = 20.0) -> int:
    """Have Bokeh discard the run page's sessions but those in `keep` (ids: pages open before the viewer) now
    that no viewer holds them, and wait until it has (runs on the scheduler; the sessions let go). A session's
    discard destroys its document, which runs a full ``gc.collect()`` on the scheduler's event loop (0.2 s in
    the bench's process); Bokeh does it 15 s after the page closed (its unused-session lifetime), inside a later
    run of the bench: here it is done between runs."""
    import asyncio

    from gcc_dask.dashboard.mount import _bokeh_server
    from gcc_dask.dashboard.names import PAGE

    server = _bokeh_server(dask_scheduler)
    if server is None or PAGE not in server.app_paths:
        return 0
    deadline = time.monotonic() + timeout
    gone = 0
    while time.monotonic() < deadline:
        sessions = [s for s in server.get_sessions(PAGE) if s.id not in keep]
        if not sessions:
            return gone
        for session in sessions:
            if session.connection_count == 0 and not session.expiration_requested:
                session.request_expiration()  # (discarded at Bokeh's next look: every 0.5 s on a Dask dashboard)
                gone += 1
        await asyncio.sleep(0.1)
    return gone


def _remove_page(client) -> None:
    """No run page on the scheduler: the plugin removed (its state with it), and this client publishes nothing."""
    from gcc_dask.dashboard.names import PLUGIN_NAME

    def gone(dask_scheduler=None):
        dask_scheduler.plugins.pop(PLUGIN_NAME, None)

    client.run_on_scheduler(gone)


def page_section(client, work: Path, quick: bool, say, smoke: str) -> tuple[list[Table], list[Target], list[str]]:
    """Run the section (see the module docs) on `client`, whose scheduler serves a dashboard; `smoke` is the path
    of ``pipelines/smoke.yaml``.

    Returns
    -------
    list of Table
        ``page``: one row per figure (the throughput and CPU ratios of each mode to ``off``: mean, standard
        error, median, min, max over the rounds; the page's own CPU on the scheduler, from the plugin's
        accounts (:attr:`~gcc_dask.dashboard.plugin.DashboardPlugin.cpu`), as a share of the run's; the seconds
        after the run's start at which the open page showed the run, its first shard and its first batch done).
        ``page_rounds``: one row per run of a mode (its seconds, samples/s, CPU, the ``off`` runs beside it, the
        ratios, the page's own CPU by part, what the viewer saw).
    list of Target
        The open page's throughput ratio against :data:`PAGE_COST_MIN`; the slowest round's first batch sent to
        the open page (the redraw that showed it) against :data:`FIRST_BATCH_MAX_S`; the open page's own CPU
        (median share of the run's) against the same 2%.
    list of str
        Notes.
    """
    from gcc_dask.dashboard import attach
    from gcc_dask.pipeline import run_pipeline

    samples = 32 if quick else 512
    rounds = 1 if quick else 10
    overrides = ["run.progress=false", f"source.limit={samples}", "stragglers.model=none", "store.overwrite=true",
                 "run.max_batches_in_flight=4"]
    pids = _worker_pids(client)
    before = os.environ.get("GCC_DASK_RUN_PAGE")
    seen: dict[str, list[dict]] = {m: [] for m in MODES}
    url = None

    def run(mode: str) -> dict:
        nonlocal url
        os.environ["GCC_DASK_RUN_PAGE"] = "off" if mode == "off" else "on"
        if mode == "off":
            _remove_page(client)
        else:
            url = attach(client)  # (the run attaches too: here so that the viewer has a page to open first)
        keep = client.run_on_scheduler(_page_sessions) if mode == "open" and url else []
        viewer = _Viewer(url, nice=not quick) if mode == "open" and url else None  # (quick: the tests, not timed)
        alive, seen_cpu = False, math.nan
        try:
            p0 = client.run_on_scheduler(_page_cpu)
            v0 = viewer.cpu_s() if viewer is not None else math.nan
            c0, d0, t0 = _cpu_s(pids), time.process_time(), time.perf_counter()
            run_pipeline(smoke, client=client, out=work / f"page-{mode}-{time.time_ns()}.zarr",
                               overrides=overrides)
            wall = time.perf_counter() - t0
            driver = time.process_time() - d0
            cpu = driver + _cpu_s(pids) - c0
            p1 = client.run_on_scheduler(_page_cpu)
            alive = viewer is not None and viewer.alive  # (held the page open through the run)
            seen_cpu = viewer.cpu_s() - v0 if viewer is not None else math.nan
        finally:
            if viewer is not None:
                viewer.close()
                client.run_on_scheduler(_let_closed_pages_go, keep=keep)  # (its gc.collect() out of the runs timed)
        row = {"job_wall_s": wall, "cpu_s": cpu, "driver_cpu_s": driver,
               **{k: p1.get(k, 0.0) - p0.get(k, 0.0) for k in ("transitions_s", "events_s", "redraws_s")}}
        if mode != "off":
            runs = _state(client)["runs"]
            row["started"] = runs[-1]["started"] if runs else math.nan
            first_done = runs[-1].get("first_done_s") if runs else None
            row["first_batch_done_s"] = math.nan if first_done is None else first_done
            sent = (runs[-1].get("shown") or {}) if runs else {}
            row["first_batch_sent_s"] = sent.get("first_batch", math.nan) if mode == "open" else math.nan
            row.update(shown_times(viewer.lines, row["started"]) if viewer is not None else {})
            row["viewer_alive"] = alive
            row["viewer_cpu_s"] = seen_cpu
            seen[mode].append(row)
        return row

    try:
        if url is None and attach(client) is None:
            raise RuntimeError("bench page: the cluster's scheduler serves no dashboard (start it with a "
                               "dashboard_address), so there is no run page to measure")
        for mode in (("open",) if quick else ("off", *MODES)):  # warm-up: the model on the workers, the page
            run(mode)
        for rows in seen.values():
            rows.clear()
        cpu_off: list[float] = []

        def off() -> float:
            got = run("off")
            cpu_off.append(got["cpu_s"])
            return got["job_wall_s"]

        got = interleaved_rounds(off, {m: (lambda m=m: run(m)) for m in MODES}, rounds)
    finally:
        if before is None:
            os.environ.pop("GCC_DASK_RUN_PAGE", None)
        else:
            os.environ["GCC_DASK_RUN_PAGE"] = before
    rows_out: list[dict] = []
    per_round: list[dict] = []
    index = {m: 0 for m in MODES}
    for k, r in enumerate(got):  # the off runs beside run k are cpu_off[k] and cpu_off[k + 1]
        mode = r["contender"]
        extra = seen[mode][index[mode]]
        index[mode] += 1
        cpu = extra["cpu_s"]
        per_round.append({
            "mode": mode, "round": r["round"], "run_s": r["job_wall_s"], "samples_per_s": samples / r["job_wall_s"],
            "off_before_s": r["plain_before_s"], "off_after_s": r["plain_after_s"], "vs_off": r["vs_plain_map"],
            "cpu_ms_per_sample": cpu / samples * 1e3,
            "cpu_vs_off": (cpu_off[k] + cpu_off[k + 1]) / 2 / cpu if cpu > 0 else math.nan,
            "driver_cpu_s": extra["driver_cpu_s"],
            "page_transitions_ms": extra["transitions_s"] * 1e3, "page_events_ms": extra["events_s"] * 1e3,
            "page_redraws_ms": extra["redraws_s"] * 1e3,
            "page_cpu_pct": 100 * (extra["transitions_s"] + extra["events_s"] + extra["redraws_s"]) / cpu
            if cpu > 0 else math.nan,
            "run_shown_s": extra.get("run_shown_s", math.nan),
            "first_shard_shown_s": extra.get("first_shard_shown_s", math.nan),
            "first_batch_shown_s": extra.get("first_batch_shown_s", math.nan),
            "first_batch_done_s": extra.get("first_batch_done_s", math.nan),
            "first_batch_sent_s": extra.get("first_batch_sent_s", math.nan),
            "first_batch_lag_s": extra.get("first_batch_sent_s", math.nan) - extra.get("first_batch_done_s", math.nan),
            "viewer_alive": extra.get("viewer_alive", False),
            "viewer_cpu_pct": 100 * extra.get("viewer_cpu_s", math.nan) / cpu if cpu > 0 else math.nan,
        })
    for mode in MODES:
        mine = [r for r in per_round if r["mode"] == mode]
        for what, col in (("throughput / off", "vs_off"), ("CPU per run, off / mode", "cpu_vs_off")):
            st = ratio_summary([r[col] for r in mine])
            rows_out.append({"mode": mode, "figure": what, "unit": "x", **st})
    for mode in MODES:
        mine = np.array([r["page_cpu_pct"] for r in per_round if r["mode"] == mode], dtype=float)
        rows_out.append({"mode": mode, "figure": "the page's own CPU, % of the run's (driver and workers)", "unit": "%",
                         "n": int(mine.size), "mean": float(mine.mean()),
                         "se": float(mine.std(ddof=1) / math.sqrt(mine.size)) if mine.size > 1 else math.nan,
                         "median": float(np.median(mine)), "min": float(mine.min()), "max": float(mine.max())})
    opened = [r for r in per_round if r["mode"] == "open"]
    xs = np.array([r["viewer_cpu_pct"] for r in opened], dtype=float)
    xs = xs[np.isfinite(xs)]
    rows_out.append({"mode": "open", "figure": "the viewer's CPU (its own process, the same cores), % of the run's",
                     "unit": "%", "n": int(xs.size), "mean": float(xs.mean()) if xs.size else math.nan,
                     "se": float(xs.std(ddof=1) / math.sqrt(xs.size)) if xs.size > 1 else math.nan,
                     "median": float(np.median(xs)) if xs.size else math.nan,
                     "min": float(xs.min()) if xs.size else math.nan, "max": float(xs.max()) if xs.size else math.nan})
    for col, what in (("run_shown_s", "the run on the page, s after the run's start"),
                      ("first_shard_shown_s", "its first shard on the page, s after the run's start"),
                      ("first_batch_done_s", "its first batch done on the driver, s after the run's start"),
                      ("first_batch_lag_s", "its first batch sent to the page, s after the driver had it"),
                      ("first_batch_sent_s", "its first batch sent to the page, s after the run's start"),
                      ("first_batch_shown_s", "its first batch done on the page, s after the run's start")):
        xs = np.array([r[col] for r in opened], dtype=float)
        ok = xs[np.isfinite(xs)]
        rows_out.append({"mode": "open", "figure": what, "unit": "s", "n": int(ok.size),
                         "mean": float(ok.mean()) if ok.size else math.nan,
                         "se": float(ok.std(ddof=1) / math.sqrt(ok.size)) if ok.size > 1 else math.nan,
                         "median": float(np.median(ok)) if ok.size else math.nan,
                         "min": float(ok.min()) if ok.size else math.nan,
                         "max": float(ok.max()) if ok.size else math.nan})
    cost = next(r for r in rows_out if r["mode"] == "open" and r["figure"] == "throughput / off")
    own = next(r for r in rows_out if r["mode"] == "open" and r["unit"] == "%")
    first = next(r for r in rows_out if r["figure"].startswith("its first batch sent to the page, s after the run"))
    seen_by = rows_out[-1]
    targets = [
        Target("run page open: throughput / page off (smoke pipeline, no stragglers)", cost["mean"], PAGE_COST_MIN,
               ">=", "x", f"+- {cost['se']:.3f} (s.e., {cost['n']} rounds); median {cost['median']:.3f}"),
        Target("run page: first batch sent to the open page, s after the run's start (slowest round)", first["max"],
               FIRST_BATCH_MAX_S, "<=", "s", f"median {first['median']:.2f} s over {first['n']} rounds; the viewer "
               f"(nice 19) had it {seen_by['median']:.2f} s after the start (median), {seen_by['max']:.2f} s at most"),
        Target("run page open: its own CPU on the scheduler, % of the run's CPU (median)", own["median"],
               100 * (1 - PAGE_COST_MIN), "<=", "%", f"max {own['max']:.2f}% over {own['n']} rounds (the plugin's "
               "accounts: shard transitions, events, redraws)"),
    ]
    say(f"  page: open / off {cost['mean']:.3f} +- {cost['se']:.3f}; its own CPU {own['median']:.2f}% of the run's; "
        f"first batch sent to the page {first['median']:.2f} s (max {first['max']:.2f} s) after the run's start")
    notes = [f"Run page: pipelines/smoke.yaml on {samples} digits without injected latency ({samples // 16} batches of "
             f"56 shard tasks), 4 batches in flight; {rounds} round(s) of off, published, off, open, off, after a "
             "warm-up of each. The viewer is a Bokeh client session (nice 19) in a process of its own, whose CPU is "
             "not counted; every open round's viewer held the page through its run: "
             f"{all(r['viewer_alive'] for r in opened)}."]
    tables = [Table("page", "The run page's cost: the same run with the page off, published, and open", rows_out,
                    "ratio = mean of the two off runs beside it / the mode's run (throughput: above 1 the page cost "
                    "nothing measurable); times: from the run's start event (the first batch's clock) to the "
                    "viewer's document showing it"),
              Table("page_rounds", "The run page's cost, round by round", per_round)]
    return tables, targets, notes
