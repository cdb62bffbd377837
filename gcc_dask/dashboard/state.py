"""What the run's dashboard page knows: the state of the coded runs on one scheduler, kept in memory (pure).

Fed from two sides (docs/dashboard.rst):

* the driver's events (:func:`gcc_dask.dashboard.publish`): a run started (its schemes, N, the results its
  cutoff needs), batches submitted, a cutoff that fired (the kept shards), a batch done (one short record per
  scheme: status, batch latency, metrics), the run ended;
* the scheduler's task transitions of the run's shard keys ``eval-b{batch}-w{shard}-{scheme}{suffix}-{token}``:
  which Dask worker ran each shard, from when to when, and whether it ended with a result, an error, or was
  cancelled while running (a straggler cut off). A key's suffix says what the copy is: ``-b`` a backup copy of
  a late shard, ``-p`` a spare run again at the batch's priority, ``-q<n>`` a shard run again off a quiet
  worker; a speculative scheme's shard ``w >= K`` is a backup copy too.

A sweep (``gcc-dask sweep``) is a run of another kind (its start event says ``"what": "sweep"``): its batches are
the sweep's tasks (a grid cell and a block of trials, every scheme on the same draws), keyed
``sweep-b{task}-K{K}-N{N}-s{s}-t{trial}-{token}``; each task is one bar of the worker x time view, and its done
event gives each scheme's metric over the task's trials.

The driver also says which Dask workers went quiet (missed their heartbeats, :mod:`gcc_dask.runtime.liveness`)
and when they came back or were ended (``quiet`` events): the page marks them on the worker x time view.

No Dask, no Bokeh here: :class:`DashboardState` takes plain values (times are ``time.time()`` seconds) and
:meth:`DashboardState.snapshot` returns plain data, which the page draws and ``state.json`` serves.
"""

from __future__ import annotations

import collections
import math
import re
from dataclasses import dataclass, field

__all__ = ["DashboardState", "RunState", "parse_shard_key", "parse_sweep_key"]

#: runs kept per scheduler (the oldest finished one goes first)
MAX_RUNS = 8
#: shard intervals kept per run for the worker x time view (the most recent ones)
MAX_SHARDS = 4000
#: finished batches whose latency is kept per scheme (for p50 / p99)
MAX_LATENCIES = 5000

_KEY = re.compile(r"^eval-b(\d+)-w(\d+)-(.+)-([^-]+)$")
_SWEEP_KEY = re.compile(r"^sweep-b(\d+)-.*-([^-]+)$")
#: the prefixes of the keys the state follows (a run's shards, a sweep's tasks)
PREFIXES = ("eval-b", "sweep-b")
#: quiet spells kept per run
MAX_QUIET = 200
#: a sweep's tasks in flight listed in a snapshot (those running first)
MAX_TASK_ROWS = 256


def parse_sweep_key(key: str) -> tuple[int, str] | None:
    """``(task, token)`` of a sweep task's key, or None for another key.

    >>> parse_sweep_key("sweep-b12-K8-N16-s0-t20-1a2b")
    (12, '1a2b')
    """
    m = _SWEEP_KEY.match(key)
    return None if m is None else (int(m.group(1)), m.group(2))


def parse_shard_key(key: str, schemes) -> tuple[int, int, str, str, str] | None:
    """``(batch, shard, scheme, suffix, token)`` of a shard key, or None for another key.

    `schemes` are the run's scheme names: the longest that starts the middle part is the scheme, the rest is the
    suffix (``-r1`` a rerun, ``-b`` a backup copy, ``-p`` a promoted spare, ``-q2`` a rescue).

    >>> parse_shard_key("eval-b3-w7-gcc-r1-b-1a2b", ["gcc"])
    (3, 7, 'gcc', '-r1-b', '1a2b')
    """
    m = _KEY.match(key)
    if m is None:
        return None
    middle = m.group(3)
    for name in sorted(schemes, key=len, reverse=True):
        if middle == name or middle.startswith(name + "-"):
            return int(m.group(1)), int(m.group(2)), name, middle[len(name):], m.group(4)
    return None


def _copy_kind(suffix: str) -> str:
    """``"backup"``, ``"spare"`` (run again at the batch's priority), ``"rescue"`` or ``"regular"``."""
    if not suffix:
        return "regular"
    parts = suffix.split("-")
    if "b" in parts:
        return "backup"
    if "p" in parts:
        return "spare"
    if any(p.startswith("q") and p[1:].isdigit() for p in parts):
        return "rescue"
    return "regular"


def _quantile(values, q: float) -> float:
    """The `q` quantile of `values` (linear interpolation, as numpy's default); NaN for none."""
    xs = sorted(v for v in values if v == v)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class _Flight:
    """A scheme's batch in flight: its shards' results so far and its cutoff once it fired."""

    num_workers: int
    needed: int
    num_inputs: int
    speculative: bool
    arrived: set = field(default_factory=set)  # shard indices with a result
    failed: set = field(default_factory=set)
    promoted: int = 0
    backups: int = 0
    cutoff_s: float = math.nan
    kept: list | None = None  # the shards the cutoff kept, once it fired
    status: int = 0

    @property
    def received(self) -> int:
        """Results in hand that count toward the cutoff (a speculative scheme: inputs with a copy back)."""
        if self.speculative:
            return len({w % self.num_inputs for w in self.arrived})
        return len(self.arrived)


@dataclass
class _Scheme:
    name: str
    num_workers: int
    num_inputs: int
    needed: int
    speculative: bool
    grid: str = ""  # a sweep's scheme: the grid it runs on (its N and S or p vary by cell)
    done: int = 0
    failed: int = 0
    undecodable: int = 0
    backups: int = 0
    metric_sum: float = 0.0
    metric_n: int = 0
    latencies: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_LATENCIES))


class RunState:
    """One run: its schemes' counters, its batches in flight, and its recent shard intervals."""

    def __init__(self, token: str, t0: float, info: dict) -> None:
        self.token = token
        self.t0 = float(t0)
        self.name = str(info.get("name") or token)
        self.store = info.get("store")
        self.total = info.get("batches")
        self.metric = info.get("metric", "rel_acc")
        self.what = "sweep" if info.get("what") == "sweep" else "run"
        self.status = "running"
        self.ended: float | None = None
        self.first_done_s = math.nan  # seconds from the start to the driver's first batch done
        #: seconds from the start to the first redraw of an open page that showed the run, its first shard, its
        #: first batch finished (set by the page, :mod:`gcc_dask.dashboard.page`)
        self.shown: dict[str, float] = {}
        self.version = 0  # counts the changes: a page redraws only when it moved
        self.schemes: dict[str, _Scheme] = {}
        for name, s in (info.get("schemes") or {}).items():
            self.schemes[name] = _Scheme(name, int(s["N"]), int(s.get("K", s["N"])), int(s["needed"]),
                                         bool(s.get("speculative", False)), str(s.get("grid") or ""))
        self.tasks: dict[int, dict] = {}  # a sweep's tasks not done: their cell, and the worker running them
        self._task_s: dict[int, float] = {}  # a sweep's finished tasks' seconds on their worker (until done)
        self.quiet: dict[str, dict] = {}  # worker -> its quiet spell under way
        self.quiet_spells: collections.deque = collections.deque(maxlen=MAX_QUIET)  # every spell, from / to
        self._ended: set[str] = set()  # workers the run ended as unresponsive
        self.flights: dict[tuple[int, str], _Flight] = {}
        self.shards: collections.deque = collections.deque(maxlen=MAX_SHARDS)
        #: shard records appended to :attr:`shards` so far (the oldest leave the deque): a page streams those
        #: it has not drawn yet
        self.appended = 0
        self._open: dict[str, dict] = {}  # key -> its shard interval, while the task runs
        self._by_batch: dict[tuple[int, str], list[dict]] = {}  # the intervals of a batch in flight
        self._finished: set[tuple[int, str]] = set()  # (batch, scheme) done: a late shard opens no flight
        self._finished_tasks: set[int] = set()  # a sweep's tasks done
        self._middles: dict[str, tuple[str, str] | None] = {}  # a shard key's middle -> (scheme, suffix)

    def parse(self, key: str) -> tuple[int, int, str, str, str] | None:
        """:func:`parse_shard_key` of one of this run's keys, its scheme and suffix looked up once per distinct
        middle part (a run has a few: its schemes, and their reruns, backups, spares and rescues)."""
        m = _KEY.match(key)
        if m is None:
            return None
        middle = m.group(3)
        split = self._middles.get(middle, False)
        if split is False:
            names = sorted(self.schemes, key=len, reverse=True)
            split = next(((n, middle[len(n):]) for n in names if middle == n or middle.startswith(n + "-")), None)
            if len(self._middles) < 1024:
                self._middles[middle] = split
        return None if split is None else (int(m.group(1)), int(m.group(2)), split[0], split[1], m.group(4))

    # -- driver events --------------------------------------------------------------------------
    def meta(self, info: dict) -> None:
        for k in ("name", "store"):
            if info.get(k):
                setattr(self, k, str(info[k]))
        if info.get("batches") is not None:
            self.total = int(info["batches"])

    def submitted(self, batches, schemes, cells=None) -> None:
        if self.what == "sweep":  # one task for every scheme
            for i, b in enumerate(batches):
                if int(b) not in self._finished_tasks:
                    info = self.tasks.setdefault(int(b), {"cell": "", "worker": None, "start": None})
                    info["cell"] = str(cells[i]) if cells else info["cell"]
            return
        for b in batches:
            for name in schemes or self.schemes:
                s = self.schemes.get(name)
                if s is not None and (int(b), name) not in self._finished:
                    self.flights.setdefault((int(b), name), _Flight(s.num_workers, s.needed, s.num_inputs,
                                                                    s.speculative))

    def cutoff(self, batch: int, scheme: str, kept, cutoff_s: float, status: int) -> None:
        f = self.flights.get((int(batch), scheme))
        if f is None:
            return
        f.kept, f.cutoff_s, f.status = sorted(int(w) for w in kept), float(cutoff_s), int(status)
        self._mark(batch, scheme, f.kept, final=False)

    def done(self, batch: int, records: list[dict]) -> None:
        if self.what == "sweep":
            self.tasks.pop(int(batch), None)
            self._finished_tasks.add(int(batch))
            took = self._task_s.pop(int(batch), math.nan)  # the task's seconds on its worker
            records = [dict(r, batch_latency_s=took) if r.get("batch_latency_s") is None else r for r in records]
        for r in records:
            s = self.schemes.get(r.get("scheme"))
            if s is None:
                continue
            status = int(r.get("status", 0))
            if status in (1, 2):
                s.done += 1
            elif status == 3:
                s.undecodable += 1
            else:
                s.failed += 1
            s.backups += int(r.get("backups", 0) or 0)
            lat = r.get("batch_latency_s")
            if lat is not None and lat == lat:
                s.latencies.append(float(lat))
            value = r.get(self.metric)
            if value is not None and value == value:
                s.metric_sum += float(value)
                s.metric_n += 1
            if self.what == "sweep":
                continue
            self._mark(batch, s.name, r.get("received"), final=True)
            self.flights.pop((int(batch), s.name), None)
            self._by_batch.pop((int(batch), s.name), None)
            self._finished.add((int(batch), s.name))

    def end(self, status: str, t: float) -> None:
        self.status = str(status)
        self.ended = float(t)
        self.flights.clear()
        self._by_batch.clear()
        self.tasks.clear()
        self.went_quiet([], [], t)
        for rec in self._open.values():  # still running when the run ended: cut
            rec["stop"] = max(rec["start"], self.ended - self.t0)
            rec["outcome"] = "cut"
        self._open.clear()

    def went_quiet(self, quiet, ended, t: float) -> None:
        """The workers quiet now (missed their heartbeats: no new shards, what waits on them runs elsewhere), and
        those the run ended as unresponsive; a spell ends when a worker is no longer in `quiet`."""
        at = float(t) - self.t0
        gone = {str(w) for w in ended} - self._ended
        self._ended |= gone
        now = {str(w) for w in quiet} - self._ended
        for w in now | gone:
            if w not in self.quiet:
                spell = {"worker": w, "from": at, "to": math.nan, "ended": False}
                self.quiet[w] = spell
                self.quiet_spells.append(spell)
            if w in gone:
                self.quiet[w]["ended"] = True
        for w in list(self.quiet):
            if w not in now and w not in gone:
                self.quiet.pop(w)["to"] = at
            elif w in gone:  # ended: its spell closes, the worker is gone
                self.quiet.pop(w)["to"] = at

    def _mark(self, batch: int, scheme: str, kept, final: bool) -> None:
        """The shards of a batch with a result: ``kept`` by its cutoff, or ``late`` (a result not used)."""
        if kept is None:
            return
        keep = {int(w) for w in kept}
        for rec in self._by_batch.get((int(batch), scheme), ()):
            if rec["outcome"] in ("arrived", "kept", "late"):
                rec["outcome"] = "kept" if rec["shard"] in keep and rec["outcome"] != "late" else "late"
            elif rec["outcome"] == "running" and final:
                rec["outcome"] = "cut"

    # -- scheduler transitions ------------------------------------------------------------------
    def task_transition(self, key: str, task: int, finish: str, worker: str | None, now: float,
                        start: float | None = None, stop: float | None = None) -> None:
        """A sweep's task changed state: a bar of the worker x time view (kept once it returned its result)."""
        if finish == "processing":
            rec = {"batch": task, "scheme": "", "shard": 0, "worker": worker or "?", "start": now - self.t0,
                   "stop": math.nan, "outcome": "running", "copy": "regular"}
            self._open[key] = rec
            self.shards.append(rec)
            self.appended += 1
            if task not in self._finished_tasks:  # (its submit event may come after it started)
                info = self.tasks.setdefault(task, {"cell": "", "worker": None, "start": None})
                info["worker"], info["start"] = rec["worker"], rec["start"]
            return
        rec = self._open.pop(key, None)
        if rec is None:
            return
        if start is not None and stop is not None:
            rec["start"], rec["stop"] = start - self.t0, stop - self.t0
        else:
            rec["stop"] = now - self.t0
        if worker:
            rec["worker"] = worker
        rec["outcome"] = {"memory": "kept", "erred": "failed"}.get(finish, "cut")
        info = self.tasks.get(task)
        if info is not None:
            info["worker"] = None
        if finish == "memory" and task not in self._finished_tasks:
            self._task_s[task] = rec["stop"] - rec["start"]

    def transition(self, key: str, parsed: tuple, finish: str, worker: str | None, now: float,
                   start: float | None = None, stop: float | None = None) -> None:
        batch, w, scheme, suffix, _ = parsed
        s = self.schemes.get(scheme)
        if s is None:
            return
        f = self.flights.get((batch, scheme))
        if f is None and (batch, scheme) not in self._finished:  # its shards ran before the submit event came
            self.submitted([batch], [scheme])
            f = self.flights.get((batch, scheme))
        if finish == "processing":
            kind = _copy_kind(suffix)
            if s.speculative and w >= s.num_inputs:
                kind = "backup"
            rec = {"batch": batch, "scheme": scheme, "shard": w, "worker": worker or "?", "start": now - self.t0,
                   "stop": math.nan, "outcome": "running", "copy": kind}
            self._open[key] = rec
            self.shards.append(rec)
            self.appended += 1
            self._by_batch.setdefault((batch, scheme), []).append(rec)
            if f is not None:
                if kind == "backup":
                    f.backups += 1
                elif kind == "spare":
                    f.promoted += 1
            return
        rec = self._open.pop(key, None)
        if rec is None:
            return
        if start is not None and stop is not None:  # the worker's own times of the call
            rec["start"], rec["stop"] = start - self.t0, stop - self.t0
        else:
            rec["stop"] = now - self.t0
        if worker:
            rec["worker"] = worker
        if finish == "memory":
            late = f is None or f.kept is not None  # after the cutoff fired (or the batch was done)
            rec["outcome"] = "late" if late else "arrived"
            if f is not None:
                f.arrived.add(w)
        elif finish == "erred":
            rec["outcome"] = "failed"
            if f is not None:
                f.failed.add(w)
        else:  # released or forgotten while running: cancelled (a straggler cut, or a spare let go)
            rec["outcome"] = "cut"

    # -- what the page draws --------------------------------------------------------------------
    def snapshot(self, now: float, max_shards: int | None = None, shards: bool = True) -> dict:
        """The run as plain data (the page's and ``state.json``'s); its shard intervals (the most recent
        `max_shards`, a running one drawn up to `now`) unless `shards` is False (an empty list: the page streams
        them from :attr:`shards` itself)."""
        schemes = []
        for s in self.schemes.values():
            inflight = sum(1 for (_, name) in self.flights if name == s.name) if self.what == "run" else len(self.tasks)
            schemes.append({"grid": s.grid,
                "scheme": s.name, "N": s.num_workers, "K": s.num_inputs, "needed": s.needed, "done": s.done,
                "in_flight": inflight, "failed": s.failed, "undecodable": s.undecodable, "backups": s.backups,
                "p50_s": _quantile(s.latencies, 0.5), "p99_s": _quantile(s.latencies, 0.99),
                "metric": s.metric_sum / s.metric_n if s.metric_n else math.nan,
            })
        flights = []
        for (b, name), f in sorted(self.flights.items()):
            flights.append({"batch": b, "scheme": name, "received": f.received, "needed": f.needed,
                            "N": f.num_workers, "failed": len(f.failed), "cut": f.kept is not None,
                            "cutoff_s": f.cutoff_s, "kept": len(f.kept) if f.kept is not None else 0,
                            "spares": max(0, f.num_workers - f.needed) if not f.speculative else 0,
                            "promoted": f.promoted, "backups": f.backups})
        if self.what == "sweep":  # the tasks running first, then those waiting, each by task (the first ones)
            order = sorted(self.tasks.items(), key=lambda kv: (kv[1]["worker"] is None, kv[0]))[:MAX_TASK_ROWS]
            for i, info in order:
                flights.append({"batch": i, "scheme": "all", "cell": info["cell"], "worker": info["worker"],
                                "running": info["worker"] is not None, "received": 0, "needed": 1, "N": 1,
                                "failed": 0, "cut": False, "cutoff_s": math.nan, "kept": 0, "spares": 0,
                                "promoted": 0, "backups": 0})
        recs = (list(self.shards)[-max_shards:] if max_shards else list(self.shards)) if shards else []
        t_now = (self.ended if self.ended is not None else now) - self.t0
        quiet = [dict(q, to=t_now) if q["to"] != q["to"] else dict(q) for q in self.quiet_spells]
        return {
            "token": self.token, "version": self.version, "what": self.what, "name": self.name, "store": self.store,
            "status": self.status, "quiet": quiet, "quiet_now": sorted(self.quiet),
            "batches": self.total, "metric": self.metric, "started": self.t0, "elapsed_s": t_now,
            "first_done_s": self.first_done_s, "shown": dict(self.shown),
            "schemes": schemes, "in_flight": flights,
            # (the records themselves, but for a running shard: a copy drawn up to now)
            "shards": [r if r["stop"] == r["stop"] else dict(r, stop=t_now) for r in recs],
        }


class DashboardState:
    """Every run on one scheduler, by token (the most recent :data:`MAX_RUNS`)."""

    def __init__(self) -> None:
        self.runs: dict[str, RunState] = {}
        self._meta: dict[str, dict] = {}  # meta events of runs not started yet (the driver sends them first)

    def event(self, ev: dict, now: float) -> None:
        """Apply one driver event (``kind``: start, meta, submit, cutoff, done, quiet, end)."""
        token = str(ev.get("run", ""))
        kind = ev.get("kind")
        t = float(ev.get("t", now))
        if kind == "start":
            self.runs.pop(token, None)
            self.runs[token] = RunState(token, t, ev)
            if token in self._meta:
                self.runs[token].meta(self._meta.pop(token))
            while len(self.runs) > MAX_RUNS:
                oldest = next((k for k, r in self.runs.items() if r.status != "running"), next(iter(self.runs)))
                del self.runs[oldest]
            return
        run = self.runs.get(token)
        if run is not None:
            run.version += 1
        if run is None:
            if kind == "meta":
                self._meta[token] = ev
                while len(self._meta) > MAX_RUNS:
                    del self._meta[next(iter(self._meta))]
            return
        if kind == "meta":
            run.meta(ev)
        elif kind == "submit":
            for item in ev.get("work", ()):
                batch, schemes = item[0], item[1]
                run.submitted([batch], schemes, item[2:3] or None)
        elif kind == "quiet":
            run.went_quiet(ev.get("workers", ()), ev.get("ended", ()), t)
        elif kind == "cutoff":
            run.cutoff(ev["batch"], ev["scheme"], ev.get("kept", ()), ev.get("cutoff_s", math.nan),
                       ev.get("status", 0))
        elif kind == "done":
            if run.first_done_s != run.first_done_s:
                run.first_done_s = t - run.t0
            run.done(ev["batch"], ev.get("records", ()))
        elif kind == "end":
            run.end(ev.get("status", "complete"), t)

    def transition(self, key, finish: str, worker: str | None, now: float, start: float | None = None,
                   stop: float | None = None) -> None:
        """A task of some run changed state (only shard keys of a known run are kept)."""
        if not self.runs or type(key) is not str or not key.startswith(PREFIXES):
            return
        run = self.runs.get(key.rsplit("-", 1)[-1])
        if run is None or run.status != "running":
            return
        if run.what == "sweep":
            task = parse_sweep_key(key)
            if task is not None:
                run.version += 1
                run.task_transition(key, task[0], finish, worker, now, start, stop)
            return
        parsed = run.parse(key)
        if parsed is not None:
            run.version += 1
            run.transition(key, parsed, finish, worker, now, start, stop)

    def latest(self) -> RunState | None:
        """The run started last (the page shows it)."""
        return max(self.runs.values(), key=lambda r: r.t0, default=None)

    def snapshot(self, now: float, max_shards: int | None = None) -> dict:
        return {"runs": [r.snapshot(now, max_shards) for r in sorted(self.runs.values(), key=lambda r: r.t0)]}
