"""The run's page (a Bokeh document, served by the scheduler's dashboard at ``/individual-gcc-dask``).

What it shows, for the run started last on the scheduler (docs/dashboard.rst):

* per scheme: N and the results its cutoff needs (N - S), batches done, in flight and failed, batch latency
  p50/p99, the metric so far (RelAcc, or MSE for an f with one output per sample);
* per batch in flight: results received against N - S, whether its cutoff fired (and when), its spares, the
  spares run again at its priority, and backup copies launched;
* a worker x time view: one bar per shard on the Dask worker that ran it, coloured by outcome (kept by the
  cutoff, arrived late, cut while running: a straggler, failed, running), backup copies and spares run again
  marked with a triangle, a quiet worker's spell a band across its lanes.

A sweep's page shows its tasks instead of batches (no cutoff, so no bars of results against N - S).

The page looks at the plugin's state four times a second and redraws when it moved, at most once a second but
at once for a :func:`milestone` (the run, its first shard, its first batch done, a worker gone quiet). A redraw
sets only what changed, and sends the worker x time view as :class:`ShardRows` keeps it: the shards drawn for
good streamed once each, those still live (running, or of a batch in flight) sent whole, all of them again only
for another run or at the run's end. The HTML it is served in also holds the run's summary
(``<script id="gcc-dask-state" type="application/json">``), for readers without JavaScript.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import time

from gcc_dask.dashboard.names import PLUGIN_NAME

__all__ = ["make_document", "OUTCOMES"]

#: the outcomes of a shard, and their colours (colour-blind safe, Okabe-Ito)
OUTCOMES = {"kept": "#009E73", "late": "#E69F00", "cut": "#D55E00", "failed": "#000000", "running": "#56B4E9",
            "arrived": "#0072B2"}
#: shard bars drawn at most (the most recent)
MAX_BARS = 2000
#: batches in flight drawn at most (per scheme and batch, the oldest)
MAX_FLIGHTS = 32
#: milliseconds between two looks at the run's state (a redraw only when it moved)
INTERVAL_MS = 250
#: seconds between two redraws, but for a change the page shows at once: another run, its status, its first shard,
#: its first batch finished, a worker gone quiet or back
REDRAW_S = 1.0

_TEMPLATE = """{% extends "file.html.jinja" %}
{% block contents %}
<script id="gcc-dask-state" type="application/json">{{ gcc_dask_state }}</script>
{{ super() }}
{% endblock %}
"""


def _fmt(x, spec: str = ".3g", none: str = "-") -> str:
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _plugin_state(scheduler):
    from gcc_dask.dashboard.names import PLUGIN_NAME

    plugin = scheduler.plugins.get(PLUGIN_NAME)
    return None if plugin is None else plugin.state


def _latest(scheduler) -> dict | None:
    state = _plugin_state(scheduler)
    run = None if state is None else state.latest()
    return None if run is None else run.snapshot(time.time(), MAX_BARS)


def _sweep(snap: dict | None) -> bool:
    return snap is not None and snap.get("what") == "sweep"


def _header(snap: dict | None) -> str:
    if snap is None:
        return "<h3>gcc-dask</h3><p>No gcc-dask run on this scheduler yet.</p>"
    total = snap["batches"]
    if _sweep(snap):  # every task runs every scheme: the tasks finished are those that left the flight
        done = (total or 0) - max((s["in_flight"] for s in snap["schemes"]), default=0) if total else 0
    else:
        done = max((s["done"] + s["failed"] + s["undecodable"] for s in snap["schemes"]), default=0)
    of = f" of {total}" if total else ""
    what, unit = ("sweep", "tasks") if _sweep(snap) else ("run", "batches")
    store = f" &middot; store <code>{html.escape(str(snap['store']))}</code>" if snap.get("store") else ""
    quiet = snap.get("quiet_now") or []
    said = (f" &middot; <b style=\"color:#CC79A7\">quiet: {html.escape(', '.join(quiet))}</b>" if quiet else "")
    return (f"<h3>gcc-dask {what} <b>{html.escape(snap['name'])}</b> &middot; {html.escape(snap['status'])}</h3>"
            f"<p>{done}{of} {unit} finished &middot; {snap['elapsed_s']:.1f} s{store}{said}</p>")


_TABLE_STYLE = ("<style>table.gcc{border-collapse:collapse;font:13px sans-serif;margin:4px 0}"
                "table.gcc th,table.gcc td{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}"
                "table.gcc th:first-child,table.gcc td:first-child{text-align:left}</style>")


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f'{_TABLE_STYLE}<table class="gcc"><tr>{head}</tr>{body}</table>'


def scheme_table(snap: dict | None) -> str:
    """Per scheme: N, N - S, batches done, in flight and failed, batch latency p50/p99, the metric so far (a
    sweep's: the grid, tasks done and in flight, task seconds p50/p99 on their worker, the metric so far)."""
    rows = snap["schemes"] if snap else []
    metric = "RelAcc" if snap is None or snap["metric"] == "rel_acc" else "MSE"
    if _sweep(snap):
        return _table(["scheme", "grid", "tasks done", "in flight", "undecodable", "task p50 (s)", "task p99 (s)",
                       f"{metric} so far"],
                      [[r["scheme"], r.get("grid", ""), r["done"], r["in_flight"], r["failed"] + r["undecodable"],
                        _fmt(r["p50_s"]), _fmt(r["p99_s"]), _fmt(r["metric"], ".4g")] for r in rows])
    return _table(["scheme", "N", "N - S", "done", "in flight", "failed", "latency p50 (s)", "latency p99 (s)",
                   f"{metric} so far", "backups"],
                  [[r["scheme"], r["N"], r["needed"], r["done"], r["in_flight"], r["failed"] + r["undecodable"],
                    _fmt(r["p50_s"]), _fmt(r["p99_s"]), _fmt(r["metric"], ".4g"), r["backups"]] for r in rows])


def flight_table(snap: dict | None) -> str:
    """Per batch in flight and scheme: results received against N - S, its cutoff, spares and backups (the oldest
    :data:`MAX_FLIGHTS`)."""
    rows = snap["in_flight"][:MAX_FLIGHTS] if snap else []
    if _sweep(snap):
        return _table(["task", "cell", "worker"], [[r["batch"], r.get("cell", ""), r.get("worker") or "waiting"]
                                                   for r in rows])
    return _table(["batch", "scheme", "received", "N - S", "N", "cutoff", "spares", "spares run again", "backups",
                   "failed"],
                  [[r["batch"], r["scheme"], r["received"], r["needed"], r["N"],
                    f"{r['cutoff_s']:.3g} s" if r["cut"] and math.isfinite(r["cutoff_s"]) else "waiting",
                    r["spares"], r["promoted"], r["backups"], r["failed"]] for r in rows])


def _flight_columns(snap: dict | None) -> dict:
    rows = snap["in_flight"][:MAX_FLIGHTS] if snap and not _sweep(snap) else []
    return {
        "label": [f"b{r['batch']} {r['scheme']}" for r in rows], "batch": [r["batch"] for r in rows],
        "scheme": [r["scheme"] for r in rows], "received": [r["received"] for r in rows],
        "needed": [r["needed"] for r in rows], "N": [r["N"] for r in rows], "failed": [r["failed"] for r in rows],
        "cutoff": [f"{r['cutoff_s']:.3g} s" if r["cut"] and math.isfinite(r["cutoff_s"]) else "waiting"
                   for r in rows],
        "spares": [r["spares"] for r in rows], "promoted": [r["promoted"] for r in rows],
        "backups": [r["backups"] for r in rows],
    }


def lanes(rows: list[dict], workers=(), spans: dict | None = None) -> tuple[list[float], dict[float, str]]:
    """A row of the worker x time view for each shard: the shards of one worker that overlap in time (its threads)
    on lanes of their own, one lane above the other, a free lane's space between two workers. `workers` get a
    lane though they ran none of `rows` (a quiet worker). Returns each shard's y, and each worker's label at the
    middle of its lanes; fills `spans` (when given) with each worker's ``(bottom, top)``."""
    y, labels, blocks = _lanes(rows, workers)
    if spans is not None:
        spans.update(_spans(blocks))
    return y, labels


def _spans(blocks: dict[str, tuple[int, int]]) -> dict[str, tuple[float, float]]:
    """Each worker's ``(bottom, top)`` on the y axis, from its block of lanes ``(base, count)``."""
    return {w: (base - 0.45, base + count - 0.55) for w, (base, count) in blocks.items()}


def _lanes(rows: list[dict], workers=(), room: dict | None = None):
    """:func:`lanes`, with each worker's block of lanes ``(base, count)``; a worker's block has at least
    ``room[worker]`` lanes (room for the shards it runs next, drawn without moving the other workers')."""
    import heapq

    y = [0.0] * len(rows)
    labels: dict[float, str] = {}
    blocks: dict[str, tuple[int, int]] = {}
    by_worker: dict[str, list[int]] = {w: [] for w in workers}
    for i, r in enumerate(rows):
        by_worker.setdefault(r["worker"], []).append(i)
    base = 0
    for worker in sorted(by_worker):
        busy: list[tuple[float, int]] = []  # (stop, lane) of the lanes in use
        free: list[int] = []  # lanes free again, lowest first
        count = 0
        for i in sorted(by_worker[worker], key=lambda i: rows[i]["start"]):
            while busy and busy[0][0] <= rows[i]["start"]:
                heapq.heappush(free, heapq.heappop(busy)[1])
            lane = heapq.heappop(free) if free else count
            count = max(count, lane + 1)
            heapq.heappush(busy, (rows[i]["stop"], lane))
            y[i] = float(base + lane)
        count = max(count, 1, (room or {}).get(worker, 1))
        labels[base + (count - 1) / 2] = worker
        blocks[worker] = (base, count)
        base += count + 1
    return y, labels, blocks


_OUTCOME_CODE = {name: i for i, name in enumerate(OUTCOMES)}
_COPY_CODE = {"regular": 0, "backup": 1, "spare": 2, "rescue": 3}


def _row_columns(rows: list[dict], y, schemes: dict[str, int]) -> dict:
    """The columns of the worker x time view for `rows` (shard records, a running one drawn up to now) at `y`:
    all numbers (Bokeh sends arrays as binary buffers; lists of strings cost it ten times more): outcome, copy and
    scheme as codes (:data:`OUTCOMES`, ``_COPY_CODE``, the scheme's index in the run, -1 for none); ``mark`` 1 for
    a shard drawn with a marker (a backup copy, a spare run again, a rescue), else 0."""
    import numpy as np

    start = np.array([r["start"] for r in rows], dtype=float)
    stop = np.array([r["stop"] for r in rows], dtype=float)
    copy = np.array([_COPY_CODE.get(r["copy"], 0) for r in rows], dtype=np.int32)
    return {
        "y": np.array(y, dtype=float), "start": start, "stop": stop, "duration": stop - start,
        "outcome": np.array([_OUTCOME_CODE.get(r["outcome"], 0) for r in rows], dtype=np.int32),
        "copy": copy, "mark": (copy != 0).astype(float),
        "scheme": np.array([schemes.get(r["scheme"], -1) for r in rows], dtype=np.int32),
        "batch": np.array([r["batch"] for r in rows], dtype=np.int64),
        "shard": np.array([r["shard"] for r in rows], dtype=np.int64),
    }


def _scheme_index(snap: dict | None) -> dict[str, int]:
    return {s["scheme"]: i for i, s in enumerate(snap["schemes"])} if snap else {}


def _shard_columns(snap: dict | None, spans: dict | None = None) -> tuple[dict, dict[float, str]]:
    """The columns of the shards of `snap` (:func:`_row_columns`), and the worker labels of the y axis
    (:func:`lanes`, which fills `spans`)."""
    rows = snap["shards"] if snap else []
    y, labels = lanes(rows, {q["worker"] for q in snap.get("quiet", ())} if snap else (), spans)
    return _row_columns(rows, y, _scheme_index(snap)), labels


#: lanes a worker's block keeps beyond its threads (a shard queued on it runs on the scheduler's clock too)
SPARE_LANES = 2


class ShardRows:
    """The rows of the worker x time view, kept in step with one run's shard records between redraws, in two
    data sources: the rows drawn for good (``done``: a shard that ended, whose batch is done, which no later
    transition changes), streamed once each (the oldest rolled over past `max_rows`), and the rows still live
    (``live``: running, or of a batch in flight, whose outcome its cutoff may still mark), sent whole at each
    redraw (a few hundred rows at most: the shards of the batches in flight). All the rows are drawn anew only
    for another run, at the run's end (on as few lanes as fit), or when a new shard has no lane on its worker
    without moving the others' (a new worker, its lanes all busy, a shard moved to another worker).

    A worker's lanes form a block (:func:`lanes`) of at least its threads (`threads`, a worker's address to its
    number of threads, 0 unknown) and :data:`SPARE_LANES` more; a new shard takes the lowest lane of its worker
    whose last shard ended before it started, and keeps it.
    """

    def __init__(self, max_rows: int = MAX_BARS, threads=lambda worker: 0) -> None:
        self.max_rows = int(max_rows)
        self.threads = threads
        self.run = None  # the RunState drawn (a run started again under its token is another)
        self.status: str | None = None  # its status when all its rows were last drawn
        self.appended = 0  # the run's shard records seen (RunState.appended at the last sync)
        self.done = 0  # rows streamed to the done source since it was last set whole
        self.live: list[dict] = []  # the live rows' records, by when they were seen
        self.y: dict[int, tuple] = {}  # id of a live row's record -> its y and the worker of that lane
        self.sent_live: tuple | None = None  # the live rows as last sent
        self.blocks: dict[str, tuple[int, int]] = {}  # worker -> (base, count) of its lanes
        self.last: dict[str, list] = {}  # worker -> the record last put on each of its lanes (None: free)
        self.room: dict[str, int] = {}  # worker -> lanes its block keeps at least
        self.labels: dict[float, str] = {}  # the y axis: the worker at the middle of its lanes

    @property
    def spans(self) -> dict[str, tuple[float, float]]:
        """Each worker's ``(bottom, top)`` on the y axis."""
        return _spans(self.blocks)

    @staticmethod
    def _final(run, rec: dict, running: set[int]) -> bool:
        """Whether a shard's row is drawn for good: it ended, is not running (a cut shard runs until released),
        and its batch is not in flight (a cutoff or the batch's end marks its outcome)."""
        return (rec["outcome"] != "running" and id(rec) not in running
                and (rec["batch"], rec["scheme"]) not in run.flights)

    def sync(self, run, snap: dict | None) -> dict:
        """What to send for `run` (a :class:`~gcc_dask.dashboard.state.RunState` or None) and its `snap` (its
        snapshot, without shards): a dict with ``done`` (the done source's columns, set whole) or ``more`` (its
        new rows, to stream), and ``live`` (the live source's columns, set whole); each only when it changed."""
        if run is None or snap is None:
            if self.run is None and self.done == 0 and not self.live:
                return {}
            return self._full(None, None)
        if run is not self.run or (run.status != "running" and self.status == "running"):
            return self._full(run, snap)  # another run; or the run is over: its shards drawn on as few lanes as fit
        fresh = run.appended - self.appended
        quiet = {q["worker"] for q in snap.get("quiet", ())}
        if not 0 <= fresh <= min(len(run.shards), self.max_rows) or not quiet <= set(self.blocks):
            return self._full(run, snap)  # records this view never saw left the run's deque; a quiet worker's lane
        new = list(itertools.islice(reversed(run.shards), fresh))[::-1] if fresh else []
        for rec in new:
            lane = self._lane(rec)
            if lane is None:  # its worker is new, or has no lane free: room for more, and all drawn again
                block = self.blocks.get(rec["worker"])
                if block is not None:  # (twice its lanes: a run's few first redraws find its workers' room)
                    self.room[rec["worker"]] = 2 * block[1]
                return self._full(run, snap)
            self.y[id(rec)] = (lane, rec["worker"])
        self.appended = run.appended
        running = {id(r) for r in run._open.values()}
        out: dict = {}
        finals, live = [], []
        for rec in self.live + new:
            (finals if self._final(run, rec, running) else live).append(rec)
        if any(rec["worker"] != self.y[id(rec)][1] for rec in live + finals):
            return self._full(run, snap)  # a shard moved to another worker (its lane is elsewhere)
        schemes = _scheme_index(snap)
        t_now = snap["elapsed_s"]
        if finals:
            out["more"] = _row_columns(finals, [self.y.pop(id(r))[0] for r in finals], schemes)
            self.done += len(finals)
        self.live = live
        drawn = tuple((id(r), r["start"], r["stop"] if r["stop"] == r["stop"] else t_now, r["outcome"]) for r in live)
        if drawn != self.sent_live:
            out["live"] = _row_columns([dict(r, stop=d[2]) for r, d in zip(live, drawn)],
                                       [self.y[id(r)][0] for r in live], schemes)
            self.sent_live = drawn
        return out

    def _lane(self, rec: dict) -> float | None:
        """The y of a new shard's row: the lowest lane of its worker free at its start; None for none."""
        lasts = self.last.get(rec["worker"])
        if lasts is None:
            return None
        for lane, prev in enumerate(lasts):
            if prev is None or (prev["stop"] == prev["stop"] and prev["stop"] <= rec["start"]):
                lasts[lane] = rec
                return float(self.blocks[rec["worker"]][0] + lane)
        return None

    def _full(self, run, snap) -> dict:
        recs = [] if run is None else list(run.shards)[-self.max_rows:]
        t_now = snap["elapsed_s"] if snap else 0.0
        rows = [r if r["stop"] == r["stop"] else dict(r, stop=t_now) for r in recs]
        quiet = {q["worker"] for q in snap.get("quiet", ())} if snap else set()
        workers = quiet | {r["worker"] for r in rows}
        if run is not None and run.status != "running":  # drawn for good: as few lanes as fit
            room = {}
        else:  # (the room a worker needed in an earlier run too: a cluster's runs are alike)
            room = {w: max(self.room.get(w, 0), (self.threads(w) or 0) + SPARE_LANES) for w in workers}
        y, self.labels, self.blocks = _lanes(rows, quiet, room)
        self.room.update(room)
        self.last = {w: [None] * count for w, (_, count) in self.blocks.items()}
        for i in sorted(range(len(rows)), key=lambda i: rows[i]["start"]):
            w = rows[i]["worker"]
            self.last[w][int(y[i]) - self.blocks[w][0]] = recs[i]
        self.run = run
        self.status = None if run is None else run.status
        self.appended = 0 if run is None else run.appended
        running = set() if run is None else {id(r) for r in run._open.values()}
        final = [run is not None and self._final(run, r, running) for r in recs]
        schemes = _scheme_index(snap)
        self.live = [r for r, f in zip(recs, final) if not f]
        self.y = {id(r): (yi, r["worker"]) for r, yi, f in zip(recs, y, final) if not f}
        self.done = sum(final)
        live_rows = [row for row, f in zip(rows, final) if not f]
        self.sent_live = tuple((id(r), r["start"], row["stop"], r["outcome"]) for r, row in zip(self.live, live_rows))
        return {"done": _row_columns([row for row, f in zip(rows, final) if f], [yi for yi, f in zip(y, final) if f],
                                     schemes),
                "live": _row_columns(live_rows, [yi for yi, f in zip(y, final) if not f], schemes)}


def _axis_labels(labels: dict[float, str], quiet=()) -> dict:
    """The worker at each tick of the y axis, a quiet one's name followed by "(quiet)"."""
    ticks = sorted(labels)
    return {"tick": ticks, "label": [labels[t] + (" (quiet)" if labels[t] in quiet else "") for t in ticks]}


def quiet_columns(snap: dict | None, spans: dict[str, tuple[float, float]]) -> dict:
    """A band per quiet spell of a worker (``snap["quiet"]``), across that worker's lanes (`spans`, from
    :func:`lanes`), from when it went quiet to when it sent heartbeats again, was ended, or now."""
    rows = [q for q in (snap.get("quiet", []) if snap else []) if q["worker"] in spans]
    return {"left": [q["from"] for q in rows], "right": [max(q["to"], q["from"] + 0.05) for q in rows],
            "bottom": [spans[q["worker"]][0] for q in rows], "top": [spans[q["worker"]][1] for q in rows],
            "what": ["quiet, then ended" if q.get("ended") else "quiet" for q in rows]}


def _legend() -> str:
    """The worker x time view's legend (HTML: one legend for every redraw, nothing sent again)."""
    items = "".join(f'<span style="display:inline-block;width:12px;height:12px;background:{c};margin:0 4px 0 12px;'
                    f'vertical-align:middle"></span>{html.escape(name)}' for name, c in OUTCOMES.items())
    return (f'<div style="font:13px sans-serif">{items}<span style="margin:0 4px 0 12px;color:#CC79A7">&#9650;'
            "</span>backup copy, spare run again, or rescue"
            '<span style="display:inline-block;width:18px;height:12px;background:rgba(204,121,167,0.2);'
            'border:1px dashed #CC79A7;margin:0 4px 0 12px;vertical-align:middle"></span>worker quiet (missed its '
            "heartbeats: no new shards, what waits on it runs elsewhere)</div>")


def _timeline_title(snap: dict | None) -> str:
    what, one = ("a sweep's tasks", "task") if _sweep(snap) else ("shards", "shard")
    return f"{what} by Dask worker (a lane per {one} running at once) and time (s since the run started)"


def milestone(run) -> tuple:
    """What the page shows as soon as it changes (:data:`REDRAW_S` waits for nothing else): the run, its status,
    whether a shard of it started and a batch of it finished, the workers quiet now."""
    if run is None:
        return (None,)
    finished = any(s.done or s.failed or s.undecodable for s in run.schemes.values())
    return run.token, run.status, bool(run.shards), finished, tuple(sorted(run.quiet))


def summary_json(snap: dict | None) -> str:
    """The run's summary for the page's HTML (no NaN; ``</`` escaped for a script element)."""
    if snap is None:
        data: dict = {"run": None}
    else:
        data = {k: snap[k] for k in ("token", "name", "store", "status", "batches", "metric")}
        data["schemes"] = [{k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in s.items()}
                           for s in snap["schemes"]]
    return json.dumps(data).replace("</", "<\\/")


def _threads(scheduler):
    """A worker's address to its number of threads on `scheduler` (0 for one it does not know)."""
    def threads(worker: str) -> int:
        ws = getattr(scheduler, "workers", {}).get(worker)
        return int(getattr(ws, "nthreads", 0) or 0)

    return threads


def make_document(doc, scheduler) -> None:
    """Build the page's document for one browser session: the run's state looked at every :data:`INTERVAL_MS`,
    redrawn when it moved, at most once every :data:`REDRAW_S` but for a :func:`milestone`.

    A redraw sets only what changed (a Div's text, the bars of the batches in flight), and sends the worker x
    time view's rows as :class:`ShardRows` says: the new ones streamed, the changed cells patched; Bokeh sends
    each change as one websocket message, so a redraw sends a few small ones and a look at an unchanged run
    none."""
    from bokeh.core.templates import get_env
    from bokeh.layouts import column
    from bokeh.models import (ColumnDataSource, CustomJSHover, CustomJSTickFormatter, Div, FactorRange, FixedTicker,
                              HoverTool, LinearColorMapper)
    from bokeh.plotting import figure

    state0 = _plugin_state(scheduler)
    run0 = None if state0 is None else state0.latest()
    snap = None if run0 is None else run0.snapshot(time.time(), shards=False)
    header = Div(text="", sizing_mode="stretch_width", name="gcc-header")
    schemes = Div(text="", sizing_mode="stretch_width", name="gcc-schemes")
    flights = ColumnDataSource(_flight_columns(None), name="gcc-flights")
    bars = figure(title="batches in flight: results received against the cutoff's N - S", height=220,
                  sizing_mode="stretch_width", y_range=FactorRange(factors=["-"]), x_axis_label="results",
                  tools="", toolbar_location=None, name="gcc-flights-figure")
    bars.hbar(y="label", right="N", height=0.7, source=flights, fill_color="#eeeeee", line_color="#bbbbbb")
    bars.hbar(y="label", right="received", height=0.7, source=flights, fill_color="#0072B2", line_color=None)
    bars.scatter(x="needed", y="label", source=flights, marker="dash", size=22, angle=math.pi / 2,
                 line_color="#D55E00", line_width=3)
    bars.add_tools(HoverTool(tooltips=[("batch", "@batch"), ("scheme", "@scheme"), ("received", "@received / @needed"),
                                       ("N", "@N"), ("cutoff", "@cutoff"), ("spares", "@spares"),
                                       ("spares run again", "@promoted"), ("backups", "@backups"),
                                       ("failed", "@failed")]))
    in_flight = Div(text="", sizing_mode="stretch_width", name="gcc-in-flight")

    view = ShardRows(MAX_BARS, _threads(scheduler))
    shards = ColumnDataSource(_row_columns([], [], {}), name="gcc-shards")  # drawn for good, streamed
    live = ColumnDataSource(_row_columns([], [], {}), name="gcc-shards-live")  # running or in flight, sent whole
    quiet = ColumnDataSource(quiet_columns(None, {}), name="gcc-quiet")
    axis = ColumnDataSource(_axis_labels({}), name="gcc-workers")
    timeline = figure(title=_timeline_title(snap), height=380, sizing_mode="stretch_width", x_axis_label="seconds",
                      tools="xpan,xwheel_zoom,reset", name="gcc-timeline")
    ticker = FixedTicker(ticks=[])
    timeline.yaxis.ticker = ticker
    # the worker at each tick, read from a data source (a label dict keyed by float ticks would not round-trip)
    timeline.yaxis.formatter = CustomJSTickFormatter(
        args={"axis": axis}, code="const i = axis.data.tick.indexOf(tick); return i < 0 ? '' : axis.data.label[i];")
    timeline.ygrid.visible = False
    colors = LinearColorMapper(palette=list(OUTCOMES.values()), low=-0.5, high=len(OUTCOMES) - 0.5)
    timeline.quad(left="left", right="right", bottom="bottom", top="top", source=quiet, fill_color="#CC79A7",
                  fill_alpha=0.2, line_color="#CC79A7", line_dash="dashed")  # beneath the shards
    shard_bars = []
    for source in (shards, live):
        shard_bars.append(timeline.hbar(y="y", left="start", right="stop", height=0.8, source=source,
                                        line_color="white", line_width=0.5,
                                        fill_color={"field": "outcome", "transform": colors}))
        # a marker on backup copies, spares run again, rescues (mark 1; the other shards' 0: not drawn)
        timeline.scatter(x="stop", y="y", source=source, marker="triangle", size=9, fill_color="#CC79A7",
                         line_color="black", fill_alpha="mark", line_alpha="mark")
    names = CustomJSHover(args={"names": []}, code="return names[value] || '';")
    timeline.add_tools(HoverTool(
        renderers=shard_bars,
        tooltips=[("batch", "@batch"), ("scheme", "@scheme{custom}"), ("shard", "@shard"),
                  ("outcome", "@outcome{custom}"), ("copy", "@copy{custom}"), ("seconds", "@duration{0.000}")],
        formatters={"@scheme": names,
                    "@outcome": CustomJSHover(args={"names": list(OUTCOMES)}, code="return names[value];"),
                    "@copy": CustomJSHover(args={"names": list(_COPY_CODE)}, code="return names[value];")}))
    legend = Div(text=_legend(), sizing_mode="stretch_width")

    def draw(run, s) -> None:
        """Set what changed since the last draw (a model set to an equal value sends nothing)."""
        header.text = _header(s)
        schemes.text = scheme_table(s)
        f = _flight_columns(s)
        if f != dict(flights.data):
            flights.data = f
        in_flight.text = flight_table(s)
        bars.y_range.factors = list(reversed(f["label"])) or ["-"]
        bars.visible = not _sweep(s)  # (a sweep's tasks have no cutoff)
        timeline.title.text = _timeline_title(s)
        change = view.sync(run, s)
        if "more" in change:
            shards.stream(change["more"], rollover=view.max_rows)
        for source, key in ((shards, "done"), (live, "live")):
            if key in change and (len(change[key]["y"]) or len(source.data["y"])):  # (empty stays empty)
                source.data = change[key]
        spans = view.spans
        q = quiet_columns(s, spans)
        if q != dict(quiet.data):
            quiet.data = q
        a = _axis_labels(view.labels, s.get("quiet_now", ()) if s else ())
        if a != dict(axis.data):
            axis.data = a
        ticker.ticks = a["tick"]
        scheme_names = [r["scheme"] for r in s["schemes"]] if s else []
        if names.args.get("names") != scheme_names:
            names.args = {"names": scheme_names}

    draw(run0, snap)
    shown = [None if snap is None else (snap["token"], snap["version"]), milestone(run0), time.monotonic()]

    def update() -> None:
        session = getattr(doc.session_context, "_session", None)
        if session is not None and getattr(session, "connection_count", 1) == 0:
            return  # the page was closed: nothing drawn until Bokeh lets the session go (15 s)
        state = _plugin_state(scheduler)
        run = None if state is None else state.latest()
        if (run is None and shown[0] is None) or (run is not None and shown[0] == (run.token, run.version)):
            return  # nothing moved: nothing to redraw, nothing sent
        mark = milestone(run)
        if mark == shown[1] and time.monotonic() - shown[2] < REDRAW_S:
            return  # it moved, but the last redraw is recent and nothing that is shown at once changed
        t0 = time.perf_counter()  # (not thread_time: a system call; see DashboardPlugin.cpu)
        doc.hold("combine")  # (changes to one property of one model sent as one)
        try:
            redraw(run, mark)
        finally:
            doc.unhold()
            plugin = scheduler.plugins.get(PLUGIN_NAME)
            if plugin is not None and hasattr(plugin, "cpu"):
                plugin.cpu["redraws_s"] += time.perf_counter() - t0
                plugin.cpu["redraws"] += 1

    def redraw(run, mark) -> None:
        s = None if run is None else run.snapshot(time.time(), shards=False)
        if run is not None:  # when a page first showed the run, its first shard, its first batch (the bench reads it)
            for what, flag in (("run", True), ("first_shard", mark[2]), ("first_batch", mark[3])):
                if flag and what not in run.shown:
                    run.shown[what] = time.time() - run.t0
        shown[:] = [None if s is None else (s["token"], s["version"]), mark, time.monotonic()]
        draw(run, s)

    doc.add_periodic_callback(update, INTERVAL_MS)
    doc.title = "gcc-dask run" if snap is None else f"gcc-dask {'sweep' if _sweep(snap) else 'run'} {snap['name']}"
    doc.template = get_env().from_string(_TEMPLATE)
    doc.template_variables["gcc_dask_state"] = summary_json(snap)
    doc.add_root(column(header, schemes, bars, in_flight, legend, timeline, sizing_mode="stretch_width",
                        name="gcc-dask"))
