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

No Dask, no Bokeh here: :class:`DashboardState` takes plain values (times are ``time.time()`` seconds) and
:meth:`DashboardState.snapshot` returns plain data, which the page draws and ``state.json`` serves.
"""

from __future__ import annotations

import collections
import math
import re
from dataclasses import dataclass, field

__all__ = ["DashboardState", "RunState", "parse_shard_key"]

#: runs kept per scheduler (the oldest finished one goes first)
MAX_RUNS = 8
#: shard intervals kept per run for the worker x time view (the most recent ones)
MAX_SHARDS = 4000
#: finished batches whose latency is kept per scheme (for p50 / p99)
MAX_LATENCIES = 5000

_KEY = re.compile(r"^eval-b(\d+)-w(\d+)-(.+)-([^-]+)$")


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
        self.status = "running"
        self.ended: float | None = None
        self.version = 0  # counts the changes: a page redraws only when it moved
        self.schemes: dict[str, _Scheme] = {}
        for name, s in (info.get("schemes") or {}).items():
            self.schemes[name] = _Scheme(name, int(s["N"]), int(s.get("K", s["N"])), int(s["needed"]),
                                         bool(s.get("speculative", False)))
        self.flights: dict[tuple[int, str], _Flight] = {}
        self.shards: collections.deque = collections.deque(maxlen=MAX_SHARDS)
        self._open: dict[str, dict] = {}  # key -> its shard interval, while the task runs
        self._by_batch: dict[tuple[int, str], list[dict]] = {}  # the intervals of a batch in flight
        self._finished: set[tuple[int, str]] = set()  # (batch, scheme) done: a late shard opens no flight

    # -- driver events --------------------------------------------------------------------------
    def meta(self, info: dict) -> None:
        for k in ("name", "store"):
            if info.get(k):
                setattr(self, k, str(info[k]))
        if info.get("batches") is not None:
            self.total = int(info["batches"])

    def submitted(self, batches, schemes) -> None:
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
            self._mark(batch, s.name, r.get("received"), final=True)
            self.flights.pop((int(batch), s.name), None)
            self._by_batch.pop((int(batch), s.name), None)
            self._finished.add((int(batch), s.name))

    def end(self, status: str, t: float) -> None:
        self.status = str(status)
        self.ended = float(t)
        self.flights.clear()
        self._by_batch.clear()
        for rec in self._open.values():  # still running when the run ended: cut
            rec["stop"] = max(rec["start"], self.ended - self.t0)
            rec["outcome"] = "cut"
        self._open.clear()

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
    def snapshot(self, now: float, max_shards: int | None = None) -> dict:
        schemes = []
        for s in self.schemes.values():
            inflight = sum(1 for (_, name) in self.flights if name == s.name)
            schemes.append({
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
        shards = list(self.shards)[-max_shards:] if max_shards else list(self.shards)
        t_now = (self.ended if self.ended is not None else now) - self.t0
        return {
            "token": self.token, "version": self.version, "name": self.name, "store": self.store, "status": self.status,
            "batches": self.total, "metric": self.metric, "started": self.t0, "elapsed_s": t_now,
            "schemes": schemes, "in_flight": flights,
            # (the records themselves, but for a running shard: a copy drawn up to now)
            "shards": [r if r["stop"] == r["stop"] else dict(r, stop=t_now) for r in shards],
        }


class DashboardState:
    """Every run on one scheduler, by token (the most recent :data:`MAX_RUNS`)."""

    def __init__(self) -> None:
        self.runs: dict[str, RunState] = {}
        self._meta: dict[str, dict] = {}  # meta events of runs not started yet (the driver sends them first)

    def event(self, ev: dict, now: float) -> None:
        """Apply one driver event (``kind``: start, meta, submit, cutoff, done, end)."""
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
            for batch, schemes in ev.get("work", ()):
                run.submitted([batch], schemes)
        elif kind == "cutoff":
            run.cutoff(ev["batch"], ev["scheme"], ev.get("kept", ()), ev.get("cutoff_s", math.nan),
                       ev.get("status", 0))
        elif kind == "done":
            run.done(ev["batch"], ev.get("records", ()))
        elif kind == "end":
            run.end(ev.get("status", "complete"), t)

    def transition(self, key, finish: str, worker: str | None, now: float, start: float | None = None,
                   stop: float | None = None) -> None:
        """A task of some run changed state (only shard keys of a known run are kept)."""
        if not self.runs or type(key) is not str or not key.startswith("eval-b"):
            return
        run = self.runs.get(key.rsplit("-", 1)[-1])
        if run is None or run.status != "running":
            return
        parsed = parse_shard_key(key, run.schemes)
        if parsed is not None:
            run.version += 1
            run.transition(key, parsed, finish, worker, now, start, stop)

    def latest(self) -> RunState | None:
        """The run started last (the page shows it)."""
        return max(self.runs.values(), key=lambda r: r.t0, default=None)

    def snapshot(self, now: float, max_shards: int | None = None) -> dict:
        return {"runs": [r.snapshot(now, max_shards) for r in sorted(self.runs.values(), key=lambda r: r.t0)]}
