"""What a run tells its dashboard page (gcc_dask.runtime.page_events): plain dicts, read back by the page's own state
(gcc_dask.dashboard.state) without a cluster or a clock."""

from __future__ import annotations

import doctest

from gcc_dask.dashboard.driver import record_summary, start_event
from gcc_dask.dashboard.state import DashboardState
from gcc_dask.runtime import page_events
from gcc_dask.runtime.page_events import QuietPage, cutoff_event, done_event, end_event, submit_event
from inflight_helpers import plan

TOKEN = "5e5e5e5e"


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(page_events).failed == 0


def test_the_page_follows_a_run_from_its_events():
    st = DashboardState()
    st.event(start_event(TOKEN, [plan("gcc")], output_size=10, batches=2), now=0.0)
    st.event(submit_event(TOKEN, [(0, ["gcc"]), (1, ("gcc",))]), now=0.1)
    st.event(cutoff_event(TOKEN, 0, "gcc", [0, 1, 2, 3, 4, 6], 0.6, 1), now=0.7)
    record = {"scheme": "gcc", "status": 1, "batch_latency_s": 0.8, "cutoff_s": 0.6, "rel_acc": 0.99, "mse": 0.01,
              "n_backups": 0, "received_mask": [True] * 6 + [False] * 2}
    st.event(done_event(TOKEN, 0, record_summary([record])), now=0.9)
    page = QuietPage(TOKEN)
    st.event(page.update({"w2"}, ()), now=1.0)
    snap = st.snapshot(now=1.5)["runs"][0]
    assert snap["status"] == "running" and snap["quiet_now"] == ["w2"]
    assert [(f["batch"], f["cut"]) for f in snap["in_flight"]] == [(1, False)]
    assert snap["schemes"][0]["done"] == 1
    st.event(end_event(TOKEN, clean=False), now=2.0)
    assert st.snapshot(now=2.0)["runs"][0]["status"] == "stopped"
    assert end_event(TOKEN, clean=True)["status"] == "complete"


def test_quiet_workers_are_told_when_they_change_and_an_ended_one_once():
    page = QuietPage(TOKEN)
    said = [page.update(q, e) for q, e in [((), ()), ({"w1"}, ()), ({"w1"}, ()), ((), {"w1"}), ((), {"w1"}),
                                            ((), ())]]
    assert [None if ev is None else (ev["workers"], ev["ended"]) for ev in said] == [
        None, (["w1"], []), None, ([], ["w1"]), None, ([], [])]
