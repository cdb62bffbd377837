"""What an open run page sends as the run goes on (gcc_dask.dashboard.page): its document built on a state fed by
hand, its redraws called as Bokeh's periodic callback would, and every change the document would send to the
browser recorded (one websocket message each). No cluster, no server."""

from __future__ import annotations

import time
import types

import pytest

from gcc_dask.dashboard import page
from gcc_dask.dashboard.names import PLUGIN_NAME
from gcc_dask.dashboard.state import DashboardState

TOKEN = "1a2b3c4d"
T0 = 1000.0  # the run's start (time.time() seconds): a running shard is drawn up to now, long after


def _state() -> DashboardState:
    st = DashboardState()
    st.event({"kind": "start", "run": TOKEN, "t": T0, "batches": 3, "metric": "rel_acc",
              "schemes": {"gcc": {"N": 4, "K": 2, "needed": 3}, "uncoded": {"N": 2, "K": 2, "needed": 2}}}, T0)
    st.event({"kind": "submit", "run": TOKEN, "work": [[0, ["gcc", "uncoded"]], [1, ["gcc", "uncoded"]]]}, T0)
    return st


class _Page:
    """The page's document on `st`, with each change it would send recorded as ``(kind, model name)``."""

    def __init__(self, st: DashboardState, monkeypatch, threads: int = 2) -> None:
        from bokeh.document import Document

        monkeypatch.setattr(page, "REDRAW_S", 0.0)  # every look at a moved state redraws
        plugin = types.SimpleNamespace(state=st, cpu={"redraws_s": 0.0, "redraws": 0})
        workers = {w: types.SimpleNamespace(nthreads=threads) for w in ("w1", "w2")}
        self.scheduler = types.SimpleNamespace(plugins={PLUGIN_NAME: plugin}, workers=workers)
        self.doc = Document()
        page.make_document(self.doc, self.scheduler)
        self.sent: list[tuple[str, str]] = []
        self.doc.on_change(lambda e: self.sent.append((type(e).__name__, _name(e))))
        self.look = self.doc.session_callbacks[0].callback

    def redraw(self) -> list[tuple[str, str]]:
        """One look at the state (a redraw if it moved); what it sent."""
        n = len(self.sent)
        self.look()
        return self.sent[n:]

    def rows(self, name: str) -> list[tuple]:
        """The rows of a shard data source: ``(batch, shard, scheme, copy, outcome, start, stop, y)`` by code."""
        data = self.doc.get_model_by_name(name).data
        cols = ("batch", "shard", "scheme", "copy", "outcome", "start", "stop", "y")
        return list(zip(*(list(data[c]) for c in cols)))


def _name(event) -> str:
    model = getattr(event, "model", None)
    return (getattr(model, "name", None) or getattr(event, "attr", "")) if model is not None else ""


def _shard(st, batch, w, scheme, finish, worker="w1", at=0.0, start=None, stop=None, suffix=""):
    st.transition(f"eval-b{batch}-w{w}-{scheme}{suffix}-{TOKEN}", finish, worker, T0 + at,
                  None if start is None else T0 + start, None if stop is None else T0 + stop)


OUT = {name: i for i, name in enumerate(page.OUTCOMES)}
GCC, UNCODED = 0, 1


def test_a_redraw_streams_the_shards_drawn_for_good_and_sends_the_live_ones_whole(monkeypatch):
    st = _state()
    p = _Page(st, monkeypatch)
    assert p.rows("gcc-shards") == [] and p.rows("gcc-shards-live") == []
    # batch 0's gcc shards start on w1 (two threads: lanes 0 to 3 with the spare lanes), one uncoded on w2
    for w in range(3):
        _shard(st, 0, w, "gcc", "processing", at=0.1 * w)
    _shard(st, 0, 0, "uncoded", "processing", worker="w2", at=0.1)
    sent = p.redraw()
    assert ("ColumnDataChangedEvent", "gcc-shards-live") in sent
    assert not [e for e in sent if e[1] == "gcc-shards"]  # nothing drawn for good yet: nothing sent for it
    live = p.rows("gcc-shards-live")
    assert [(b, s, sc, o, start, y) for b, s, sc, _, o, start, _, y in live] == [
        (0, 0, GCC, OUT["running"], pytest.approx(0.0), 0.0), (0, 1, GCC, OUT["running"], pytest.approx(0.1), 1.0),
        (0, 2, GCC, OUT["running"], pytest.approx(0.2), 2.0),
        (0, 0, UNCODED, OUT["running"], pytest.approx(0.1), 5.0)]  # w2's lanes after w1's 4 and a free one
    assert all(stop > 100 for *_, stop, _ in live)  # running: drawn up to now

    # the gcc shards end, the cutoff keeps 0 and 1, batch 0 of gcc is done: its rows are drawn for good, once
    _shard(st, 0, 0, "gcc", "memory", at=0.5, start=0.05, stop=0.4)
    _shard(st, 0, 1, "gcc", "memory", at=0.6, start=0.15, stop=0.5)
    st.event({"kind": "cutoff", "run": TOKEN, "batch": 0, "scheme": "gcc", "kept": [0, 1], "cutoff_s": 0.6,
              "status": 1}, T0 + 0.6)
    _shard(st, 0, 2, "gcc", "released", at=0.7)
    st.event({"kind": "done", "run": TOKEN, "batch": 0, "t": T0 + 0.8, "records": [
        {"scheme": "gcc", "status": 1, "batch_latency_s": 0.8, "rel_acc": 1.0, "received": [0, 1]}]}, T0 + 0.8)
    sent = p.redraw()
    assert [e for e in sent if e[1].startswith("gcc-shards")] == [
        ("ColumnsStreamedEvent", "gcc-shards"), ("ColumnDataChangedEvent", "gcc-shards-live")]
    assert p.rows("gcc-shards") == [
        (0, 0, GCC, 0, OUT["kept"], pytest.approx(0.05), pytest.approx(0.4), 0.0),
        (0, 1, GCC, 0, OUT["kept"], pytest.approx(0.15), pytest.approx(0.5), 1.0),
        (0, 2, GCC, 0, OUT["cut"], pytest.approx(0.2), pytest.approx(0.7), 2.0)]
    assert [(b, s, sc) for b, s, sc, *_ in p.rows("gcc-shards-live")] == [(0, 0, UNCODED)]

    # a new shard takes the lowest lane of its worker free at its start (lane 0: its shard ended at 0.4)
    _shard(st, 1, 0, "gcc", "processing", at=0.9)
    _shard(st, 1, 3, "gcc", "processing", at=0.9, suffix="-b")  # a backup copy: drawn with a marker
    sent = p.redraw()
    assert not [e for e in sent if e[1] == "gcc-shards"]
    live = p.rows("gcc-shards-live")
    assert [(b, s, sc, c, y) for b, s, sc, c, _, _, _, y in live] == [
        (0, 0, UNCODED, 0, 5.0), (1, 0, GCC, 0, 0.0), (1, 3, GCC, 1, 1.0)]
    assert list(p.doc.get_model_by_name("gcc-shards-live").data["mark"]) == [0.0, 0.0, 1.0]


def test_a_look_at_a_state_that_did_not_move_sends_nothing_and_a_redraw_sends_only_what_changed(monkeypatch):
    st = _state()
    _shard(st, 0, 0, "gcc", "processing", at=0.1)
    _shard(st, 0, 0, "gcc", "memory", at=0.3, start=0.1, stop=0.2)
    p = _Page(st, monkeypatch)
    assert p.redraw() == []  # the document was built on this very state
    st.event({"kind": "end", "run": TOKEN, "status": "complete", "t": T0 + 1.0}, T0 + 1.0)
    sent = p.redraw()
    assert ("ModelChangedEvent", "gcc-header") in sent
    before = {name: p.rows(name) for name in ("gcc-shards", "gcc-shards-live")}
    assert p.redraw() == []  # nothing moved: nothing sent
    # it moved (another meta event), but nothing the page shows changed: nothing sent, the sources untouched
    st.event({"kind": "meta", "run": TOKEN, "batches": 3}, T0 + 2.0)
    assert p.redraw() == []
    assert {name: p.rows(name) for name in before} == before
    assert before["gcc-shards"] == [(0, 0, GCC, 0, OUT["arrived"], pytest.approx(0.1), pytest.approx(0.2), 0.0)]


def test_the_shards_drawn_for_good_roll_over_past_the_most_rows_drawn(monkeypatch):
    monkeypatch.setattr(page, "MAX_BARS", 4)
    st = _state()
    p = _Page(st, monkeypatch)
    for batch in range(3):  # three batches of the uncoded scheme, each done: 6 shards drawn for good, 4 kept
        st.event({"kind": "submit", "run": TOKEN, "work": [[batch, ["uncoded"]]]}, T0)
        for w in range(2):
            _shard(st, batch, w, "uncoded", "processing", worker="w2", at=batch + 0.1 * w)
            _shard(st, batch, w, "uncoded", "memory", worker="w2", at=batch + 0.5, start=batch + 0.1 * w,
                   stop=batch + 0.4)
        st.event({"kind": "done", "run": TOKEN, "batch": batch, "records": [
            {"scheme": "uncoded", "status": 1, "batch_latency_s": 0.5, "received": [0, 1]}]}, T0 + batch + 0.5)
        sent = p.redraw()
        if batch:  # (the first: a worker the view has no lanes for yet, drawn anew)
            assert [e for e in sent if e[1].startswith("gcc-shards")] == [("ColumnsStreamedEvent", "gcc-shards")]
    assert [(b, s) for b, s, *_ in p.rows("gcc-shards")] == [(1, 0), (1, 1), (2, 0), (2, 1)]  # the last 4
    assert p.rows("gcc-shards-live") == []


def test_another_run_and_the_end_of_a_run_draw_all_its_shards_anew_on_as_few_lanes_as_fit(monkeypatch):
    st = _state()
    p = _Page(st, monkeypatch, threads=4)  # a block of 6 lanes on w1 while the run goes on
    for w in range(2):
        _shard(st, 0, w, "uncoded", "processing", at=0.1)
    p.redraw()
    assert [y for *_, y in p.rows("gcc-shards-live")] == [0.0, 1.0]
    assert p.doc.get_model_by_name("gcc-workers").data["tick"] == [2.5]  # the middle of w1's 6 lanes
    _shard(st, 0, 0, "uncoded", "memory", at=0.5, start=0.1, stop=0.4)
    _shard(st, 0, 1, "uncoded", "memory", at=0.5, start=0.1, stop=0.45)
    st.event({"kind": "end", "run": TOKEN, "status": "complete", "t": T0 + 1.0}, T0 + 1.0)
    sent = p.redraw()
    assert [e for e in sent if e[1].startswith("gcc-shards")] == [
        ("ColumnDataChangedEvent", "gcc-shards"), ("ColumnDataChangedEvent", "gcc-shards-live")]
    assert [(b, s, o, y) for b, s, _, _, o, _, _, y in p.rows("gcc-shards")] == [
        (0, 0, OUT["arrived"], 0.0), (0, 1, OUT["arrived"], 1.0)]
    assert p.rows("gcc-shards-live") == []
    assert p.doc.get_model_by_name("gcc-workers").data["tick"] == [0.5]  # two lanes: as many as it used

    # another run (under the same token: its start event again): its rows replace the last run's
    st.event({"kind": "start", "run": TOKEN, "t": T0 + 10, "batches": 1, "metric": "rel_acc",
              "schemes": {"uncoded": {"N": 2, "K": 2, "needed": 2}}}, T0 + 10)
    _shard(st, 0, 0, "uncoded", "processing", worker="w2", at=10.1)
    p.redraw()
    assert p.rows("gcc-shards") == []
    assert [(b, s, sc, o) for b, s, sc, _, o, *_ in p.rows("gcc-shards-live")] == [(0, 0, 0, OUT["running"])]


def test_a_worker_with_no_lane_free_gets_more_room_and_the_view_is_drawn_anew(monkeypatch):
    st = _state()
    p = _Page(st, monkeypatch, threads=1)  # w1: 1 thread + 2 spare lanes
    for w in range(3):
        _shard(st, 0, w, "gcc", "processing", at=0.1)
    p.redraw()
    assert [y for *_, y in p.rows("gcc-shards-live")] == [0.0, 1.0, 2.0]
    _shard(st, 0, 3, "gcc", "processing", at=0.2)  # a fourth at once: no lane free on w1
    sent = p.redraw()
    assert ("ColumnDataChangedEvent", "gcc-shards-live") in sent
    assert [y for *_, y in p.rows("gcc-shards-live")] == [0.0, 1.0, 2.0, 3.0]
    assert p.doc.get_model_by_name("gcc-workers").data["tick"] == [2.5]  # w1's block now 6 lanes (twice 3)
    # every row of a worker on a lane of its own while they overlap in time
    ys = [y for *_, y in p.rows("gcc-shards-live")]
    assert len(set(ys)) == len(ys)


def test_the_page_of_a_sweep_streams_its_tasks(monkeypatch):
    from gcc_dask.dashboard.driver import sweep_start_event

    st = DashboardState()
    st.event(dict(sweep_start_event("s1", ["gcc"], "K 8; N 16; S 0", 2, "mse"), t=T0), T0)
    p = _Page(st, monkeypatch)
    st.transition("sweep-b0-K8-N16-s0-t0-s1", "processing", "w1", T0 + 0.1)
    p.redraw()
    assert [(b, o) for b, _, _, _, o, *_ in p.rows("gcc-shards-live")] == [(0, OUT["running"])]
    st.transition("sweep-b0-K8-N16-s0-t0-s1", "memory", "w1", T0 + 0.5, T0 + 0.1, T0 + 0.4)
    sent = p.redraw()
    assert ("ColumnsStreamedEvent", "gcc-shards") in sent
    assert [(b, o, start, stop) for b, _, _, _, o, start, stop, _ in p.rows("gcc-shards")] == [
        (0, OUT["kept"], pytest.approx(0.1), pytest.approx(0.4))]
    assert p.rows("gcc-shards-live") == []


def test_the_page_costs_its_redraws_in_the_plugins_accounts(monkeypatch):
    st = _state()
    p = _Page(st, monkeypatch)
    _shard(st, 0, 0, "gcc", "processing", at=0.1)
    p.redraw()
    p.redraw()  # nothing moved: no redraw counted
    assert p.scheduler.plugins[PLUGIN_NAME].cpu["redraws"] == 1
    assert time.time() > T0


def test_the_plugin_times_its_hooks_and_events_by_the_wall_clock_never_the_threads_cpu_clock(monkeypatch):
    """Reading the thread's CPU clock is a system call (15 us a call on average on the scheduler's thread in a
    smoke run): the hook on a run's shard transitions (thousands a run) and the driver's events are timed by
    the wall clock."""
    from gcc_dask.dashboard import plugin as plugin_module
    from gcc_dask.dashboard.plugin import DashboardPlugin

    reads = {"cpu": 0, "wall": 0}

    def thread_time():  # pragma: no cover - never called
        reads["cpu"] += 1
        return 0.0

    def perf_counter():
        reads["wall"] += 1
        return reads["wall"] * 1e-3  # each read 1 ms after the last

    monkeypatch.setattr(plugin_module.time, "thread_time", thread_time)
    monkeypatch.setattr(plugin_module.time, "perf_counter", perf_counter)
    p = DashboardPlugin()
    p.state = _state()
    for w in range(4):
        p.transition(f"eval-b0-w{w}-gcc-{TOKEN}", "waiting", "processing")
    p.transition("some-other-task", "waiting", "processing")  # not a shard: not counted, not timed
    assert (p.cpu["transitions"], reads) == (4, {"cpu": 0, "wall": 8})
    assert p.cpu["transitions_s"] == pytest.approx(4e-3)  # 1 ms each
    assert len(p.state.latest().shards) == 4
    p.events([{"kind": "meta", "run": TOKEN, "name": "smoke"}])  # the driver's events: the same
    assert (p.cpu["events"], p.cpu["events_s"], reads) == (1, pytest.approx(1e-3), {"cpu": 0, "wall": 10})
