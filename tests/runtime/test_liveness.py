"""Unresponsive workers (gcc_dask.runtime.liveness): the detection is a pure function of heartbeat samples."""

from __future__ import annotations

import time

import pytest

from gcc_dask.runtime.liveness import MISSED_HEARTBEATS, HeartbeatWatch, heartbeat_interval


def _info(**last_seen):
    return {address: {"last_seen": t} for address, t in last_seen.items()}


def test_a_worker_whose_heartbeat_stops_is_reported_once_after_the_limit():
    watch = HeartbeatWatch(2.0)
    assert watch.update(_info(a=9.0, b=9.0, c=9.0), now=-1.0) == []
    assert watch.update(_info(a=10.0, b=10.0, c=10.0), now=0.0) == []
    # a's heartbeat stops at scheduler time 10; b's and c's move on
    assert watch.update(_info(a=10.0, b=11.0, c=11.0), now=1.0) == []
    assert watch.update(_info(a=10.0, b=12.0, c=12.0), now=2.0) == []  # exactly 2 s: not beyond
    assert watch.update(_info(a=10.0, b=12.5, c=12.5), now=2.5) == [("a", 2.5)]
    assert watch.update(_info(a=10.0, b=13.0, c=13.0), now=3.0) == []  # reported once
    assert watch.unresponsive == {"a"}
    # once the scheduler forgets it (ended), it is no longer held
    assert watch.update(_info(b=14.0, c=14.0), now=4.0) == [] and watch.unresponsive == set()


def test_nothing_is_reported_when_no_heartbeat_moves():
    """Every heartbeat late at once is the scheduler, the network or the driver, not one worker."""
    watch = HeartbeatWatch(1.0)
    watch.update(_info(a=1.0, b=1.0), now=0.0)
    assert watch.update(_info(a=1.0, b=1.0), now=30.0) == []


@pytest.mark.parametrize("after", [None, 0.1])
def test_never_with_none_and_at_least_three_heartbeat_intervals(after):
    watch = HeartbeatWatch(after)
    floor = MISSED_HEARTBEATS * heartbeat_interval(2)
    assert floor == pytest.approx(1.5)  # 3 x 0.5 s, the interval of a cluster of up to 10 workers
    watch.update(_info(a=-1.0, b=-1.0), now=-1.0)
    watch.update(_info(a=0.0, b=0.0), now=0.0)
    watch.update(_info(a=0.0, b=1.0), now=1.0)
    assert watch.update(_info(a=0.0, b=1.4), now=1.4) == []
    got = watch.update(_info(a=0.0, b=1.6), now=1.6)
    assert got == ([] if after is None else [("a", 1.6)])


def test_a_single_worker_or_missing_heartbeat_times_are_never_reported():
    watch = HeartbeatWatch(1.0)
    watch.update(_info(a=0.0), now=0.0)
    assert watch.update(_info(a=0.0), now=10.0) == []  # nothing else runs anyway
    other = HeartbeatWatch(1.0)
    other.update({"a": {}, "b": {"last_seen": 0.0}}, now=0.0)
    assert other.update({"a": {}, "b": {"last_seen": 5.0}}, now=5.0) == []  # no last_seen: always moving


def test_a_worker_that_never_sent_a_heartbeat_since_it_joined_is_left_alone():
    """A worker that just joined sets up the run's plugin before its heartbeats start: ending it then would
    end every replacement in turn. Once its heartbeat has moved, it is watched like the others."""
    watch = HeartbeatWatch(1.0)
    watch.update(_info(a=0.0, b=0.0), now=0.0)
    assert watch.update(_info(a=0.0, b=5.0), now=5.0) == []  # a never moved since it was first seen
    watch.update(_info(a=6.0, b=6.0), now=6.0)  # now it did
    assert watch.update(_info(a=6.0, b=8.0), now=8.0) == [("a", 2.0)]


def test_a_worker_is_quiet_after_three_missed_heartbeats_and_leaves_that_state_with_its_next_one():
    """Quiet (no new shards; what waits for it runs again elsewhere) counts on the scheduler's clock, against
    the newest heartbeat of any worker, long before the worker is unresponsive (ended)."""
    watch = HeartbeatWatch(5.0)
    watch.update(_info(a=0.0, b=0.0, c=0.0), now=0.0)
    watch.update(_info(a=0.5, b=0.5, c=0.5), now=0.5)  # every heartbeat moved once
    assert watch.update(_info(a=0.5, b=2.0, c=1.9), now=2.0) == [] and watch.quiet == set()  # 1.5 s: not beyond
    assert watch.update(_info(a=0.5, b=2.1, c=2.0), now=2.1) == [] and watch.quiet == set()  # behind once
    assert watch.update(_info(a=0.5, b=2.6, c=2.5), now=2.6) == [] and watch.quiet == {"a"}  # twice running
    assert watch.unresponsive == set()  # quiet is not ended
    assert watch.update(_info(a=2.7, b=2.7, c=2.7), now=2.7) == [] and watch.quiet == set()  # its heartbeat came


def test_a_worker_behind_for_one_sample_only_is_not_quiet():
    """After a stall of the scheduler's loop the heartbeats come in one by one: for one sample every worker
    but the first looks behind. Quiet needs two samples running."""
    watch = HeartbeatWatch(5.0)
    watch.update(_info(a=0.0, b=0.0), now=0.0)
    watch.update(_info(a=0.5, b=0.5), now=0.5)
    assert watch.update(_info(a=0.5, b=2.5), now=2.5) == [] and watch.quiet == set()  # b's came first
    assert watch.update(_info(a=2.7, b=2.8), now=3.0) == [] and watch.quiet == set()  # then a's


def test_no_worker_is_quiet_when_every_heartbeat_is_late_or_with_none():
    watch = HeartbeatWatch(5.0)
    watch.update(_info(a=0.0, b=0.0), now=0.0)
    watch.update(_info(a=1.0, b=1.0), now=1.0)
    watch.update(_info(a=1.0, b=1.0), now=9.0)  # the scheduler (or the driver) stalled: nobody's fault
    assert watch.quiet == set()
    never = HeartbeatWatch(None)  # cluster.unresponsive_after: null: a silent worker is left alone
    never.update(_info(a=0.0, b=0.0), now=0.0)
    never.update(_info(a=0.0, b=3.0), now=3.0)
    assert never.quiet == set()
    joined = HeartbeatWatch(5.0)  # a worker whose heartbeat never moved since it joined: setting up
    joined.update(_info(a=0.0, b=0.0), now=0.0)
    joined.update(_info(a=0.0, b=3.0), now=3.0)
    assert joined.quiet == set()


def test_a_worker_without_a_nanny_is_removed_from_the_scheduler():
    """end_worker on a worker without a nanny (threads in this process): the scheduler forgets it, and the
    tasks that wait for it are no longer held by it (the nanny case is test_cluster_faults.py's)."""
    from distributed import Client, LocalCluster

    from gcc_dask.runtime.liveness import end_worker

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as client:
        workers = client.scheduler_info()["workers"]
        victim = sorted(workers)[0]
        assert workers[victim]["nanny"] is None
        assert end_worker(client, victim, None) == "the scheduler removed it"
        while victim in client.scheduler_info()["workers"]:  # (no time bound: pytest-timeout ends a hang)
            time.sleep(0.05)
        assert set(client.scheduler_info()["workers"]) == set(workers) - {victim}
        assert client.submit(lambda x: x + 1, 1, pure=False).result(timeout=10) == 2


def test_a_suspect_is_quiet_at_the_first_sample_and_ended_after_the_limit():
    """A worker the run's set-up found frozen (``suspect``) has not moved since the watch began, yet it is
    quiet at once while behind and ended once silent for ``after``; one whose heartbeat is current is not."""
    watch = HeartbeatWatch(2.0)
    watch.suspect({"a", "c"})
    assert watch.update(_info(a=1.0, b=10.0, c=10.0), now=0.0) == []
    assert watch.quiet == {"a"}  # c is not behind
    assert watch.update(_info(a=1.0, b=11.0, c=11.0), now=1.0) == [] and watch.quiet == {"a"}
    assert watch.update(_info(a=1.0, b=12.5, c=12.5), now=2.5) == [("a", 2.5)]
    # not a suspect: a worker that never moved since the watch began is left alone (it may be setting up)
    other = HeartbeatWatch(2.0)
    other.update(_info(a=1.0, b=10.0), now=0.0)
    assert other.quiet == set() and other.update(_info(a=1.0, b=12.5), now=2.5) == []


class _StubClient:
    """What :func:`past_frozen` asks of a client: the workers, and who is behind (b: frozen)."""

    def __init__(self, behind):
        self.behind = behind

    def scheduler_info(self):
        return {"workers": {"a": {}, "b": {}}}

    def run_on_scheduler(self, func, **kwargs):
        return sorted(self.behind)


def test_past_frozen_calls_again_without_a_worker_that_missed_its_heartbeats():
    import threading

    from gcc_dask.runtime.cluster import past_frozen

    held = threading.Event()
    calls = []

    def call(workers):
        calls.append(workers)
        if workers is None:  # waits for every worker: b never answers
            held.wait(30)
        return {w: "ok" for w in workers or ()}

    try:
        value, frozen = past_frozen(_StubClient({"b"}), call)
    finally:
        held.set()
    assert calls == [None, ["a"]] and value == {"a": "ok"} and frozen == {"b"}
    # none behind: one call, its value; an error of the call is raised as it is
    assert past_frozen(_StubClient(set()), lambda w: 7) == (7, set())
    with pytest.raises(KeyError, match="boom"):
        past_frozen(_StubClient(set()), lambda w: {}["boom"])


def test_a_quiet_worker_is_said_once_a_run_and_only_when_something_runs_again():
    """On a busy machine a healthy worker can fall 3 heartbeats behind again and again: the run names it once,
    when it first runs something again because of it (issue 37, item 4), never when nothing ran again."""
    from gcc_dask.runtime.executor import quiet_line

    said: set[str] = set()
    assert quiet_line({"tcp://a:1"}, [], said) is None and said == set()  # nothing ran again: nothing said
    first = quiet_line({"tcp://a:1"}, ["0 (gcc: 2 shards)"], said)
    assert first == ("Dask worker tcp://a:1 missed 3 heartbeats: what batch 0 (gcc: 2 shards) waited for there "
                     "runs again on the other workers (said once per worker a run)")
    assert quiet_line({"tcp://a:1"}, ["0 (gcc: 2 shards)"], said) is None  # the same worker again: not said
    both = quiet_line({"tcp://a:1", "tcp://b:2"}, ["3 (inputs)", "4 (uncoded)"], said)
    assert both.startswith("Dask worker tcp://b:2 missed 3 heartbeats: what batches 3 (inputs), 4 (uncoded)")
    assert said == {"tcp://a:1", "tcp://b:2"}
