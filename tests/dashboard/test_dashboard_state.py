"""The run page's state (gcc_dask.dashboard.state), fed events and transitions by hand: no cluster, no clock."""

from __future__ import annotations

import math

import pytest

from gcc_dask.dashboard.driver import page_url, record_summary, start_event
from gcc_dask.dashboard.state import MAX_RUNS, DashboardState, parse_shard_key

TOKEN = "1a2b3c4d"


@pytest.mark.parametrize(("key", "expected"), [
    ("eval-b3-w7-gcc-1a2b3c4d", (3, 7, "gcc", "", TOKEN)),
    ("eval-b3-w7-gcc-r1-b-1a2b3c4d", (3, 7, "gcc", "-r1-b", TOKEN)),
    ("eval-b0-w12-replication-p-1a2b3c4d", (0, 12, "replication", "-p", TOKEN)),
    ("eval-b2-w1-my-gcc-q2-1a2b3c4d", (2, 1, "my-gcc", "-q2", TOKEN)),  # the longest scheme name wins
    ("decode-b3-gcc-1a2b3c4d", None),
    ("eval-b3-w7-lcc-1a2b3c4d", None),  # not a scheme of the run
], ids=["plain", "rerun-backup", "promoted-spare", "dashed-scheme", "decode", "other-scheme"])
def test_parse_shard_key(key, expected):
    assert parse_shard_key(key, ["gcc", "my-gcc", "replication"]) == expected


class _Plan:
    def __init__(self, name, n, needed, speculation=None, k=None):
        self.name, self.num_workers, self.speculation = name, n, speculation
        self.num_inputs = k or n
        self._needed = needed

    def regular(self, lazy):
        import numpy as np

        mask = np.zeros(self.num_workers, dtype=bool)
        mask[:self._needed] = True
        return mask


def _state() -> DashboardState:
    st = DashboardState()
    ev = start_event(TOKEN, [_Plan("gcc", 4, 3), _Plan("speculative", 4, 2, speculation=object(), k=2)],
                     output_size=10, batches=5)
    st.event(dict(ev, t=100.0), now=100.0)
    st.event({"kind": "meta", "run": TOKEN, "name": "smoke", "store": "/runs/smoke.zarr"}, now=100.0)
    st.event({"kind": "submit", "run": TOKEN, "work": [[0, ["gcc", "speculative"]], [1, ["gcc"]]]}, now=100.0)
    return st


def _shard(st, key, finish, worker="w1", now=0.0, start=None, stop=None):
    st.transition(key, finish, worker, now, start, stop)


def test_a_batch_in_flight_counts_results_against_its_cutoff():
    st = _state()
    for w in range(4):
        _shard(st, f"eval-b0-w{w}-gcc-{TOKEN}", "processing", worker=f"w{w % 2}", now=100.0)
    for w in (0, 2):
        _shard(st, f"eval-b0-w{w}-gcc-{TOKEN}", "memory", worker=f"w{w % 2}", now=101.0, start=100.1, stop=100.9)
    _shard(st, f"eval-b0-w3-gcc-b-{TOKEN}", "processing", worker="w0", now=101.0)  # a backup of shard 3
    snap = st.latest().snapshot(now=102.0)
    flight = {(f["batch"], f["scheme"]): f for f in snap["in_flight"]}
    assert set(flight) == {(0, "gcc"), (0, "speculative"), (1, "gcc")}
    f = flight[(0, "gcc")]
    assert (f["received"], f["needed"], f["N"], f["cut"], f["spares"], f["backups"]) == (2, 3, 4, False, 1, 1)
    shards = [s for s in snap["shards"] if s["batch"] == 0]
    assert [(s["shard"], s["outcome"], s["copy"]) for s in shards] == [
        (0, "arrived", "regular"), (1, "running", "regular"), (2, "arrived", "regular"), (3, "running", "regular"),
        (3, "running", "backup")]
    assert shards[0]["start"] == pytest.approx(0.1) and shards[0]["stop"] == pytest.approx(0.9)  # the worker's times
    assert shards[1]["stop"] == pytest.approx(2.0)  # still running: drawn up to now

    # the cutoff keeps 0, 2 and the backup's result; shard 1 is cut, a result after the cutoff is late
    _shard(st, f"eval-b0-w3-gcc-b-{TOKEN}", "memory", now=101.5)
    st.event({"kind": "cutoff", "run": TOKEN, "batch": 0, "scheme": "gcc", "kept": [0, 2, 3], "cutoff_s": 1.5,
              "status": 1}, now=101.6)
    _shard(st, f"eval-b0-w1-gcc-{TOKEN}", "released", now=101.7)
    _shard(st, f"eval-b0-w3-gcc-{TOKEN}", "memory", now=101.8)
    snap = st.latest().snapshot(now=102.0)
    f = {(f["batch"], f["scheme"]): f for f in snap["in_flight"]}[(0, "gcc")]
    assert (f["cut"], f["cutoff_s"], f["kept"]) == (True, 1.5, 3)
    outcomes = [(s["shard"], s["copy"], s["outcome"]) for s in snap["shards"] if s["batch"] == 0]
    assert outcomes == [(0, "regular", "kept"), (1, "regular", "cut"), (2, "regular", "kept"),
                        (3, "regular", "late"), (3, "backup", "kept")]


def test_done_batches_give_counts_latency_quantiles_and_the_metric():
    st = _state()
    for batch, status, lat, acc in ((0, 1, 1.0, 1.0), (1, 2, 3.0, 0.5), (2, 4, 2.0, math.nan), (3, 3, 5.0, math.nan)):
        rec = {"scheme": "gcc", "status": status, "batch_latency_s": lat, "rel_acc": acc, "mse": 0.0,
               "received_mask": [True, False, True, True], "n_backups": 1}
        st.event({"kind": "done", "run": TOKEN, "batch": batch, "records": record_summary([rec])}, now=0.0)
    gcc = {s["scheme"]: s for s in st.latest().snapshot(now=0.0)["schemes"]}["gcc"]
    assert (gcc["done"], gcc["failed"], gcc["undecodable"], gcc["in_flight"], gcc["backups"]) == (2, 1, 1, 0, 4)
    assert gcc["p50_s"] == pytest.approx(2.5)
    assert gcc["p99_s"] == pytest.approx(4.94)
    assert gcc["metric"] == pytest.approx(0.75)  # RelAcc over the scored batches
    snap = st.latest().snapshot(now=0.0)
    assert (snap["name"], snap["store"], snap["batches"], snap["metric"]) == ("smoke", "/runs/smoke.zarr", 5, "rel_acc")
    # a shard of a finished batch opens no flight again
    _shard(st, f"eval-b1-w0-gcc-{TOKEN}", "processing")
    assert [(f["batch"], f["scheme"]) for f in st.latest().snapshot(now=0.0)["in_flight"]] == [(0, "speculative")]


def test_a_speculative_scheme_counts_inputs_and_its_copies_as_backups():
    st = _state()
    for w in (0, 1, 3):  # originals 0, 1; shard 3 is copy 1 of input 1
        _shard(st, f"eval-b0-w{w}-speculative-{TOKEN}", "processing")
    for w in (1, 3):
        _shard(st, f"eval-b0-w{w}-speculative-{TOKEN}", "memory")
    snap = st.latest().snapshot(now=0.0)
    f = {(f["batch"], f["scheme"]): f for f in snap["in_flight"]}[(0, "speculative")]
    assert (f["received"], f["needed"], f["backups"], f["spares"]) == (1, 2, 1, 0)
    assert [s["copy"] for s in snap["shards"]] == ["regular", "regular", "backup"]


def test_the_end_of_a_run_leaves_it_idle_and_unknown_keys_alone():
    st = _state()
    _shard(st, f"eval-b0-w0-gcc-{TOKEN}", "processing", now=100.0)
    st.event({"kind": "end", "run": TOKEN, "status": "complete", "t": 103.0}, now=103.0)
    snap = st.latest().snapshot(now=200.0)
    assert (snap["status"], snap["in_flight"], snap["elapsed_s"]) == ("complete", [], 3.0)
    assert [(s["outcome"], s["stop"]) for s in snap["shards"]] == [("cut", 3.0)]
    _shard(st, f"eval-b4-w0-gcc-{TOKEN}", "processing")  # after the end: not followed
    _shard(st, "eval-b0-w0-gcc-ffffffff", "processing")  # another run's key
    _shard(st, ("eval-b0-w0-gcc", 1), "processing")  # a tuple key
    assert len(st.latest().snapshot(now=0.0)["shards"]) == 1
    st.event({"kind": "cutoff", "run": "nope", "batch": 0, "scheme": "gcc"}, now=0.0)  # an unknown run


def test_only_the_most_recent_runs_are_kept():
    st = DashboardState()
    for i in range(MAX_RUNS + 3):
        st.event({"kind": "start", "run": f"r{i}", "t": float(i), "schemes": {}}, now=float(i))
        st.event({"kind": "end", "run": f"r{i}", "t": float(i)}, now=float(i))
    assert [r["token"] for r in st.snapshot(now=0.0)["runs"]] == [f"r{i}" for i in range(3, MAX_RUNS + 3)]
    assert st.latest().token == f"r{MAX_RUNS + 2}"


@pytest.mark.parametrize(("link", "expected"), [
    ("http://127.0.0.1:8787/status", "http://127.0.0.1:8787/individual-gcc-dask"),
    ("https://hub.example.org/user/me/proxy/8787/status", "https://hub.example.org/user/me/proxy/8787/individual-gcc-dask"),
    ("http://host:8787/", "http://host:8787/individual-gcc-dask"),
    (None, None),
], ids=["local", "jupyterhub-proxy", "no-status", "no-dashboard"])
def test_page_url_sits_beside_the_dashboard_link(link, expected):
    class FakeClient:
        dashboard_link = link

    assert page_url(FakeClient()) == expected


def test_lanes_put_overlapping_shards_of_a_worker_one_above_the_other():
    from gcc_dask.dashboard.page import lanes

    rows = [{"worker": "b", "start": 0.0, "stop": 2.0}, {"worker": "a", "start": 0.0, "stop": 1.0},
            {"worker": "a", "start": 0.5, "stop": 1.5}, {"worker": "a", "start": 1.0, "stop": 2.0}]
    y, labels = lanes(rows)
    assert y == [3.0, 0.0, 1.0, 0.0]  # a: two lanes (0, 1) as its 2nd shard overlaps the 1st, a free lane, then b
    assert labels == {0.5: "a", 3.0: "b"}


def test_gcc_dask_run_page_off_attaches_nothing_and_publishes_nothing(monkeypatch):
    from gcc_dask.dashboard import driver

    class FakeClient:
        dashboard_link = "http://127.0.0.1:8787/status"

        def scheduler_info(self, **kwargs):  # pragma: no cover - never asked when the page is off
            raise AssertionError("the scheduler was asked")

    client = FakeClient()
    monkeypatch.setattr(driver, "_publishers", {client: None})  # attached before
    monkeypatch.setenv("GCC_DASK_RUN_PAGE", "off")
    assert driver.attach(client) is None
    assert client not in driver._publishers
    driver.publish(client, {"kind": "end", "run": TOKEN})  # a no-op


def test_parse_sweep_key():
    from gcc_dask.dashboard.state import parse_sweep_key

    assert parse_sweep_key(f"sweep-b12-K8-N16-s0-t20-{TOKEN}") == (12, TOKEN)
    assert parse_sweep_key(f"eval-b3-w7-gcc-{TOKEN}") is None


def _sweep_state() -> DashboardState:
    from gcc_dask.dashboard.driver import sweep_start_event

    st = DashboardState()
    st.event(dict(sweep_start_event(TOKEN, ["gcc", "uncoded"], "K 8; N 16; S 0, 2", tasks=3, metric="mse"), t=100.0),
             now=100.0)
    cells = ["K=8 N=16 S=0 trials 0-4", "K=8 N=16 S=2 trials 0-4", "K=8 N=16 S=2 trials 5-9"]
    st.event({"kind": "submit", "run": TOKEN, "work": [[i, ["gcc", "uncoded"], c] for i, c in enumerate(cells)]},
             now=100.0)
    return st


def test_a_sweep_shows_its_tasks_by_worker_and_each_schemes_metric_so_far():
    from gcc_dask.dashboard import page

    st = _sweep_state()
    _shard(st, f"sweep-b1-K8-N16-s1-t0-{TOKEN}", "processing", worker="w2", now=100.5)
    _shard(st, f"sweep-b0-K8-N16-s0-t0-{TOKEN}", "processing", worker="w1", now=100.5)
    snap = st.latest().snapshot(now=101.0)
    assert snap["what"] == "sweep"
    # the tasks running first (by task), then those waiting
    assert [(f["batch"], f["worker"], f["cell"]) for f in snap["in_flight"]] == [
        (0, "w1", "K=8 N=16 S=0 trials 0-4"), (1, "w2", "K=8 N=16 S=2 trials 0-4"),
        (2, None, "K=8 N=16 S=2 trials 5-9")]
    _shard(st, f"sweep-b0-K8-N16-s0-t0-{TOKEN}", "memory", worker="w1", now=101.5, start=100.6, stop=101.4)
    st.event({"kind": "done", "run": TOKEN, "batch": 0, "records": [
        {"scheme": "gcc", "status": 1, "batch_latency_s": None, "mse": 0.5},
        {"scheme": "uncoded", "status": 3, "batch_latency_s": None, "mse": math.nan}]}, now=101.6)
    snap = st.latest().snapshot(now=102.0)
    schemes = {s["scheme"]: s for s in snap["schemes"]}
    assert (schemes["gcc"]["done"], schemes["gcc"]["in_flight"], schemes["gcc"]["grid"]) == (1, 2, "K 8; N 16; S 0, 2")
    assert schemes["gcc"]["p50_s"] == pytest.approx(0.8)  # the task's seconds on its worker
    assert schemes["gcc"]["metric"] == pytest.approx(0.5)
    assert (schemes["uncoded"]["done"], schemes["uncoded"]["undecodable"]) == (0, 1)
    assert [(r["batch"], r["worker"], r["outcome"]) for r in snap["shards"]] == [(1, "w2", "running"),
                                                                                 (0, "w1", "kept")]
    assert [f["batch"] for f in snap["in_flight"]] == [1, 2]
    # what the page shows of it: tasks, the grid and the cells, no batches-in-flight bars
    assert "gcc-dask sweep <b>" in page._header(snap) and "1 of 3 tasks finished" in page._header(snap)
    assert "<td>K 8; N 16; S 0, 2</td>" in page.scheme_table(snap)
    assert "<td>K=8 N=16 S=2 trials 5-9</td><td>waiting</td>" in page.flight_table(snap)
    assert page._flight_columns(snap)["label"] == []
    st.event({"kind": "end", "run": TOKEN, "status": "stopped", "t": 103.0}, now=103.0)
    snap = st.latest().snapshot(now=104.0)
    assert (snap["status"], snap["in_flight"]) == ("stopped", [])


def test_quiet_workers_are_marked_from_when_they_went_quiet_until_they_are_back_or_ended():
    from gcc_dask.dashboard import page

    st = _state()  # the run started at t = 100
    _shard(st, f"eval-b0-w0-gcc-{TOKEN}", "processing", worker="w1", now=100.5)
    st.event({"kind": "quiet", "run": TOKEN, "workers": ["w1"], "ended": [], "t": 101.0}, now=101.0)
    snap = st.latest().snapshot(now=101.5)
    assert snap["quiet_now"] == ["w1"]
    assert snap["quiet"] == [{"worker": "w1", "from": 1.0, "to": 1.5, "ended": False}]  # drawn up to now
    assert "quiet: w1" in page._header(snap)
    st.event({"kind": "quiet", "run": TOKEN, "workers": [], "ended": [], "t": 102.0}, now=102.0)  # its heartbeats again
    st.event({"kind": "quiet", "run": TOKEN, "workers": ["w2"], "ended": [], "t": 103.0}, now=103.0)
    st.event({"kind": "quiet", "run": TOKEN, "workers": ["w2"], "ended": ["w2"], "t": 104.0}, now=104.0)
    # still listed after it was ended: no new spell
    st.event({"kind": "quiet", "run": TOKEN, "workers": ["w2"], "ended": [], "t": 105.0}, now=105.0)
    snap = st.latest().snapshot(now=106.0)
    assert snap["quiet"] == [{"worker": "w1", "from": 1.0, "to": 2.0, "ended": False},
                             {"worker": "w2", "from": 3.0, "to": 4.0, "ended": True}]
    assert snap["quiet_now"] == []
    # on the worker x time view: w2, which ran no shard, gets a lane; each spell is a band across its worker's lanes
    spans: dict = {}
    cols, labels = page._shard_columns(snap, spans)
    assert sorted(labels.values()) == ["w1", "w2"]
    bands = page.quiet_columns(snap, spans)
    assert (bands["left"], bands["right"], bands["what"]) == ([1.0, 3.0], [2.0, 4.0], ["quiet", "quiet, then ended"])
    assert all(b < t for b, t in zip(bands["bottom"], bands["top"]))
    assert page._axis_labels(labels, ["w2"])["label"] == ["w1", "w2 (quiet)"]
    st.event({"kind": "quiet", "run": TOKEN, "workers": ["w1"], "ended": [], "t": 107.0}, now=107.0)
    st.event({"kind": "end", "run": TOKEN, "status": "complete", "t": 108.0}, now=108.0)
    assert st.latest().snapshot(now=200.0)["quiet"][-1] == {"worker": "w1", "from": 7.0, "to": 8.0, "ended": False}


def test_the_page_redraws_at_once_for_a_milestone_only():
    from gcc_dask.dashboard.page import milestone

    st = _state()
    run = st.latest()
    first = milestone(run)
    _shard(st, f"eval-b0-w0-gcc-{TOKEN}", "processing", worker="w1", now=100.5)
    second = milestone(run)
    assert second != first  # its first shard
    _shard(st, f"eval-b0-w1-gcc-{TOKEN}", "processing", worker="w1", now=100.6)
    assert milestone(run) == second  # another shard: waits for the next redraw
    st.event({"kind": "done", "run": TOKEN, "batch": 0, "records": [{"scheme": "gcc", "status": 1}]}, now=101.0)
    assert milestone(run) != second  # its first batch finished
    assert milestone(None) == (None,)


def test_the_run_tells_its_page_which_workers_are_quiet_when_that_changes(monkeypatch):
    from gcc_dask import dashboard
    from gcc_dask.runtime.page_events import QuietPage
    from gcc_dask.runtime.runner_cluster import ClusterRunner

    sent: list[dict] = []
    monkeypatch.setattr(dashboard, "publish", lambda client, ev: sent.append(ev))

    class Workers:
        behind_heartbeats: set = set()
        unresponsive: set = set()

    class Runner(ClusterRunner):
        token, client, _workers = TOKEN, None, Workers()
        _page_quiet = QuietPage(TOKEN)

    r = Runner()
    r._tell_page_quiet()
    assert sent == []  # nothing quiet, nothing said
    r._workers.behind_heartbeats = {"w1"}
    r._tell_page_quiet()
    r._tell_page_quiet()  # said once
    r._workers.behind_heartbeats, r._workers.unresponsive = set(), {"w1"}
    r._tell_page_quiet()
    r._workers.unresponsive = set()  # gone from the scheduler: nothing new to say
    r._tell_page_quiet()
    assert [(e["kind"], e["run"], e["workers"], e["ended"]) for e in sent] == [
        ("quiet", TOKEN, ["w1"], []), ("quiet", TOKEN, [], ["w1"]), ("quiet", TOKEN, [], [])]


def test_events_never_go_on_a_stream_other_than_the_one_attached(monkeypatch):
    """After a reconnect (a scheduler started anew, without the plugin's handler), an event on the client's stream
    would be an operation the scheduler cannot handle, which closes the stream: nothing is sent, and the next run
    attaches again."""
    from gcc_dask.dashboard import driver

    class FakeClient:
        dashboard_link = "http://127.0.0.1:8787/status"
        status = "running"

        def __init__(self):
            self.scheduler_comm, self.sent = object(), []

        def _send_to_scheduler(self, msg):
            self.sent.append(msg)

        def scheduler_info(self, **kwargs):  # the scheduler attach asks again
            raise OSError("gone")

    client = FakeClient()
    monkeypatch.setattr(driver, "_publishers", {})
    driver._publishers[client] = driver._Publisher(client, stream=True)
    driver.publish(client, {"kind": "start", "run": TOKEN})
    assert [m["events"][0]["kind"] for m in client.sent] == ["start"]
    client.scheduler_comm = object()  # reconnected
    driver.publish(client, {"kind": "end", "run": TOKEN})
    assert len(client.sent) == 1
    assert driver.attach(client) is None and client not in driver._publishers  # asked again: no page there
