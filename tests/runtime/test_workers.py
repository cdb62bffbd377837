"""The driver's list of workers (gcc_dask.runtime.workers.WorkerList), with a client that answers from a script:
the first answer is awaited, later ones come from a thread; GPU filter; replacement; unresponsive workers."""

from __future__ import annotations

import threading
import time

from gcc_dask.runtime.workers import WorkerList


class _Client:
    """``scheduler_info()`` answers with the next of `answers` (the last one again when they run out); a call
    waits for `gate` when one is set. ``run`` records what a nanny was asked to do."""

    def __init__(self, answers, gate: threading.Event | None = None):
        self.answers, self.calls, self.gate, self.ran = list(answers), 0, gate, []

    def scheduler_info(self, **kwargs):
        if self.gate is not None:
            self.gate.wait()  # (the test sets it; no time bound)
        self.calls += 1
        return {"workers": self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]}

    def run(self, fn, workers=(), nanny=False, on_error="raise"):
        self.ran.append((tuple(workers), nanny))
        return {workers[0]: 4242}


def _wait_for(predicate):
    """Until `predicate()` holds (no time bound: pytest-timeout ends a hang)."""
    while not predicate():
        time.sleep(0.005)


def test_the_first_answer_is_awaited_and_later_ones_come_from_a_thread():
    gate = threading.Event()
    gate.set()
    client = _Client([{"tcp://b": {}, "tcp://a": {}}, {"tcp://a": {}}], gate)
    wl = WorkerList(client, ttl=0.0)
    assert wl.refresh() == ["tcp://a", "tcp://b"] and client.calls == 1  # sorted, asked at once
    gate.clear()
    time.sleep(0.001)
    assert wl.refresh() == ["tcp://a", "tcp://b"]  # the second question waits on the "scheduler": old answer
    assert wl.refresh() == ["tcp://a", "tcp://b"] and client.calls == 1  # one question under way at a time
    gate.set()
    _wait_for(lambda: client.calls == 2)
    _wait_for(lambda: wl.refresh() == ["tcp://a"])
    wl.close()


def test_refresh_asks_at_most_once_per_ttl():
    client = _Client([{"tcp://a": {}}])
    wl = WorkerList(client, ttl=60.0)
    wl.refresh()
    assert not wl.due
    for _ in range(5):
        wl.refresh()
    assert client.calls == 1
    wl.asked_at -= 61.0
    assert wl.due


def test_gpu_runs_keep_the_workers_with_a_gpu_only():
    answer = {"tcp://cpu": {"resources": {}}, "tcp://gpu": {"resources": {"GPU": 1}}, "tcp://zero": {
        "resources": {"GPU": 0}}}
    assert WorkerList(_Client([answer]), gpu=True).refresh() == ["tcp://gpu"]
    assert WorkerList(_Client([answer]), gpu=False).refresh() == ["tcp://cpu", "tcp://gpu", "tcp://zero"]


def test_replaced_is_set_only_when_no_worker_seen_before_is_left():
    wl = WorkerList(_Client([{}]))
    for answer, replaced in (({"a": {}, "b": {}}, False), ({"b": {}, "c": {}}, False),  # b stayed
                             ({}, False),  # none at all: nothing to compare with
                             ({"d": {}}, True)):  # b and c gone, d new
        wl._take(answer, 0.0)
        assert wl.replaced is replaced, answer


def test_an_unresponsive_worker_is_ended_and_gets_no_shards(monkeypatch):
    """A worker quiet for 3 heartbeat intervals leaves the list; after `unresponsive_after` seconds without a
    heartbeat the user is told once, and its nanny is asked (from a thread) to end it."""
    monkeypatch.setattr("gcc_dask.runtime.liveness.heartbeat_interval", lambda n: 0.01)
    told = []
    client = _Client([{}])
    wl = WorkerList(client, unresponsive_after=1.0, echo=told.append)

    def info(a, b):
        return {"tcp://a": {"last_seen": a, "nanny": "tcp://na"}, "tcp://b": {"last_seen": b, "nanny": "tcp://nb"}}

    wl._take(info(0.0, 0.0), 0.0)
    wl._take(info(1.0, 1.0), 1.0)
    wl._take(info(1.0, 1.01), 1.01)
    assert wl.addresses == ["tcp://a", "tcp://b"] and not told and wl.quiet == set()
    wl._take(info(1.0, 1.5), 1.5)  # behind (3 heartbeats missed) once
    assert wl.addresses == ["tcp://a", "tcp://b"] and wl.quiet == set()
    wl._take(info(1.0, 2.0), 2.0)  # twice running: quiet, no shards for it, not ended yet
    assert wl.addresses == ["tcp://b"] and wl.quiet == {"tcp://a"} and not told
    wl._take(info(1.0, 3.5), 3.5)  # a silent for 2.5 s > 1 s
    assert wl.addresses == ["tcp://b"]
    assert len(told) == 1 and "tcp://a sent no heartbeat for 2 s" in told[0]
    _wait_for(lambda: client.ran)
    assert client.ran == [(("tcp://a",), True)]
    wl._take(info(1.0, 4.0), 4.0)
    assert len(told) == 1 and wl.addresses == ["tcp://b"]  # told once; still no shards for it
    wl.close()


def test_an_unreachable_scheduler_counts_as_no_workers():
    wl = WorkerList(_Client([{}]))
    wl._take({"tcp://a": {}}, 0.0)
    wl._take(None, 1.0)
    assert wl.addresses == [] and not wl.replaced


def test_a_worker_behind_in_one_sample_is_asked_about_again_four_times_sooner():
    """Quiet takes two samples running behind: while a worker is behind in one, the list asks every ttl / 4,
    so the second sample comes sooner; once it is quiet (or caught up), every ttl again."""
    wl = WorkerList(_Client([{}]), ttl=1.0)
    watch = wl._liveness
    watch.update({"a": {"last_seen": 0.0}, "b": {"last_seen": 0.0}}, now=0.0)
    watch.update({"a": {"last_seen": 0.5}, "b": {"last_seen": 0.5}}, now=0.5)  # both moved once
    assert wl._ttl == 1.0
    watch.update({"a": {"last_seen": 0.5}, "b": {"last_seen": 2.5}}, now=2.5)  # a is 2 s behind: once
    assert watch.behind == {"a"} and watch.quiet == set() and wl._ttl == 0.25
    watch.update({"a": {"last_seen": 0.5}, "b": {"last_seen": 2.75}}, now=2.75)  # twice: quiet
    assert watch.quiet == {"a"} and wl._ttl == 1.0


def test_an_unready_worker_gets_no_shards_until_it_is_ready():
    client = _Client([{"tcp://a": {}, "tcp://b": {}}])
    wl = WorkerList(client, ttl=0.0)
    assert wl.refresh() == ["tcp://a", "tcp://b"]
    wl.unready({"tcp://b"})
    assert wl.addresses == ["tcp://a"] and wl.quiet == {"tcp://b"}
    _wait_for(lambda: wl.refresh() == ["tcp://a"] and client.calls >= 3)  # later answers leave it out too
    wl.ready({"tcp://b"})
    assert wl.quiet == set()
    _wait_for(lambda: wl.refresh() == ["tcp://a", "tcp://b"])
