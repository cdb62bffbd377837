"""``map_on_cluster`` (the composition's windows as Dask tasks): backup copies of late tasks, Spark's rule, on
another worker; the first copy wins; small shared arguments travel with the tasks, large ones are scattered."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gcc_dask.runtime import cluster_map as cluster_mod  # (map_on_cluster and what it calls)
from gcc_dask.runtime.cluster import map_on_cluster
from gcc_dask.runtime.cutoff import Speculation

_RELEASE = threading.Event()
_LOCK = threading.Lock()
_CALLS: list[tuple[int, str, str]] = []  # (item, worker address, "returned" or "released")


def _late_first_call(late: int, item: int) -> int:
    """``item * 10``; the first call for item `late` blocks until the test releases it."""
    from distributed import get_worker

    address = get_worker().address
    with _LOCK:
        first = item == late and not any(i == late for i, _, _ in _CALLS)
        _CALLS.append((item, address, "started"))
    if first:
        _RELEASE.wait(60)
        with _LOCK:
            _CALLS.append((item, address, "released"))
    return item * 10


def test_a_late_task_gets_one_backup_on_another_worker_and_the_first_copy_wins(client):
    """Of 8 items, the first copy of item 3 blocks: once 6 results are in (Spark's 3/4) and it is out for
    1.5 x their median (and 100 ms), one copy is submitted, on the other worker, and its result is used
    while the original still blocks. No other item gets a copy."""
    _CALLS.clear()
    _RELEASE.clear()
    try:
        out = map_on_cluster(client, _late_first_call, range(8), 3)
        with _LOCK:
            calls = list(_CALLS)
    finally:
        _RELEASE.set()
    assert out == [i * 10 for i in range(8)]
    started = [(i, w) for i, w, what in calls if what == "started"]
    assert sorted(i for i, _ in started) == [0, 1, 2, 3, 3, 4, 5, 6, 7]  # one backup, of item 3 only
    (w_original, w_backup) = [w for i, w in started if i == 3]
    assert w_original != w_backup
    assert not [c for c in calls if c[2] == "released"]  # the result came while the original still blocked


def test_without_a_late_task_no_copy_is_launched(client):
    _CALLS.clear()
    _RELEASE.set()
    out = map_on_cluster(client, _late_first_call, range(6), -1)
    assert out == [i * 10 for i in range(6)]
    assert sorted(i for i, _, what in _CALLS if what == "started") == list(range(6))


def _sum_plus(shared: np.ndarray, item: int) -> float:
    return float(shared.sum()) + item


def test_small_shared_arguments_travel_with_the_tasks_and_large_ones_are_scattered(client, monkeypatch):
    small, large = np.arange(10.0), np.arange(400_000.0)  # 80 bytes; 3.2 MB
    assert cluster_mod._small((small,)) and not cluster_mod._small((large,))
    scatters = []
    scatter = client.scatter
    monkeypatch.setattr(client, "scatter", lambda *a, **kw: scatters.append(kw) or scatter(*a, **kw))
    assert map_on_cluster(client, _sum_plus, range(3), small) == [45.0, 46.0, 47.0]
    assert scatters == []
    total = float(large.sum())
    assert map_on_cluster(client, _sum_plus, range(3), large) == [total, total + 1, total + 2]
    assert len(scatters) == 1 and scatters[0]["broadcast"] is True


_TWICE = threading.Event()
_COUNTS: list[int] = []


def _late_twice(late: int, item: int) -> int:
    """``-item``; the first two calls for item `late` block until the test releases them."""
    with _LOCK:
        _COUNTS.append(item)
        n = _COUNTS.count(item)
    if item == late and n <= 2:
        _TWICE.wait(60)
    return -item


def test_with_more_copies_allowed_a_late_backup_gets_the_next_one(client):
    """``copies=2``: item 5's original and its first backup block; the third copy returns."""
    _COUNTS.clear()
    _TWICE.clear()
    try:
        out = map_on_cluster(client, _late_twice, range(8), 5, speculation=Speculation(copies=2))
        with _LOCK:
            calls = list(_COUNTS)
    finally:
        _TWICE.set()
    assert out == [-i for i in range(8)]
    assert calls.count(5) == 3 and all(calls.count(i) == 1 for i in range(8) if i != 5)


def _bad_item(bad: int, item: int) -> int:
    from gcc_dask.errors import SourceError

    if item == bad:
        raise SourceError(f"source: sample {item} is bad")
    return item


def test_a_user_error_in_a_task_is_raised_as_it_is(client):
    from gcc_dask.errors import SourceError

    with pytest.raises(SourceError, match="sample 1 is bad"):
        map_on_cluster(client, _bad_item, range(4), 1)


_SEEN: list[tuple[int, str]] = []  # (item, worker address) of every call of _recorded


def _recorded(item: int) -> int:
    from distributed import get_worker

    with _LOCK:
        _SEEN.append((item, get_worker().address))
    return item + 100


def _hold_first_result(monkeypatch, release: threading.Event) -> list[str]:
    """Patch Future.result so that the first result fetched does not arrive until `release` is set, with no
    time bound (a timed fetch raises TimeoutError at its timeout, as a fetch from a frozen worker does); return
    the held key (a list filled on the first fetch)."""
    from distributed import Future

    held: list[str] = []
    result = Future.result

    def held_result(self, timeout=None):
        if not held or held[0] == self.key:
            held[:1] = [self.key]
            if not release.wait(timeout):
                raise TimeoutError(f"no result of {self.key} within {timeout} s")
        return result(self, timeout=timeout)

    monkeypatch.setattr(Future, "result", held_result)
    return held


def _calls_per_item(n: int) -> dict[int, list[str]]:
    with _LOCK:
        seen = list(_SEEN)
    return {i: [w for j, w in seen if j == i] for i in range(n)}


def test_a_result_held_by_a_worker_that_stopped_answering_is_computed_again_elsewhere(client, monkeypatch):
    """A task finished on a worker that froze before its result was fetched: the fetch would wait for as long
    as the worker stays frozen (likely what held one composition for a 4 s freeze in the bench's frozen-worker
    scenario). Here the first result fetched does not arrive (Future.result held for 30 s) and its worker's
    heartbeats stop (frozen_workers says so): the map gives that item another copy on the other worker and
    returns, complete and in order. The held result is released only once the map has returned: the map returns
    at all only if it stopped waiting for it (no duration is measured)."""
    _SEEN.clear()
    release = threading.Event()
    held = _hold_first_result(monkeypatch, release)
    real = cluster_mod.frozen_workers

    def frozen(client_, silent_after):  # the holder of the held result has stopped sending heartbeats
        if not held:
            return real(client_, silent_after)
        return set(client.who_has().get(held[0], ()))

    monkeypatch.setattr(cluster_mod, "frozen_workers", frozen)
    try:
        out = map_on_cluster(client, _recorded, range(6))  # (the old fetch waited for the holder: a hang here)
    finally:
        release.set()
    assert out == [i + 100 for i in range(6)]
    # the held item, and any other whose result sat on the same (frozen) worker, ran once more on the other one
    counts = _calls_per_item(6)
    again = [i for i, ws in counts.items() if len(ws) == 2]
    assert again and all(1 <= len(ws) <= 2 for ws in counts.values()), counts
    frozen_one = {counts[i][0] for i in again}
    assert len(frozen_one) == 1 and all(counts[i][1] not in frozen_one for i in again), counts
    assert all(ws[0] not in frozen_one for i, ws in counts.items() if i not in again), counts


def test_a_slow_fetch_from_a_worker_that_answers_is_waited_for(client, monkeypatch):
    """A result that takes longer than three heartbeats to arrive from a worker that still sends its heartbeats
    (a large result) is waited for: no other copy, the same values (before, a 2.5 GB result was given up and
    computed again until the map failed). Events, not durations: every worker answers (frozen_workers says none
    is quiet, whatever a busy machine does to the heartbeats), and the held result arrives only once the map has
    looked at the holders' heartbeats three times past its first wait."""
    _SEEN.clear()
    release = threading.Event()
    held = _hold_first_result(monkeypatch, release)
    looks: list[str] = []

    def frozen(client_, silent_after):  # none quiet; the third look at the holder's heartbeats lets it arrive
        if held and not release.is_set():
            looks.append(held[0])
            if len(looks) >= 3:
                release.set()
        return set()

    monkeypatch.setattr(cluster_mod, "frozen_workers", frozen)
    try:
        out = map_on_cluster(client, _recorded, range(6))
    finally:
        release.set()
    assert out == [i + 100 for i in range(6)]
    assert len(looks) >= 3  # it waited for the slow one, past three looks at its holder
    assert all(len(ws) == 1 for ws in _calls_per_item(6).values())  # and computed nothing again


def _tenfold(item: int) -> int:
    return item * 10


def test_no_more_originals_are_out_than_the_cluster_has_threads(client, monkeypatch):
    """30 items on the 16 threads of the session's cluster: an item is launched as a thread frees, never queued
    behind others (a queued item looked late to Spark's rule, and its backup copy held a thread after its
    original returned)."""
    threads = sum(client.nthreads().values())
    futures, outstanding = [], []
    submit = client.submit

    def counting(*args, **kwargs):
        outstanding.append(sum(1 for f in futures if f.status == "pending"))
        futures.append(submit(*args, **kwargs))
        return futures[-1]

    monkeypatch.setattr(client, "submit", counting)
    assert map_on_cluster(client, _tenfold, range(30)) == [i * 10 for i in range(30)]
    assert len(futures) >= 30 and max(outstanding) < threads  # (counted before each submission)


def test_an_item_waiting_for_a_thread_is_not_late():
    """Spark's rule on run times: with 2 threads, items 2 and 3 launched at 1 s and item 4 at 2 s, item 4 has
    run 0.5 s at 2.5 s, not 2.5 s: not due until 1.5 x the median run time (1 s) after its launch."""
    from gcc_dask.runtime.backups import backups_due_since_launch

    inf = np.inf
    first = np.array([1.0, 1.0, 2.0, 2.0, inf, inf])
    launch = np.array([[0.0, 0.0, 1.0, 1.0, 2.0, inf], [inf] * 6])
    no = np.zeros((2, 6), dtype=bool)
    due, later = backups_due_since_launch(first, launch, no, now=2.5, rule=Speculation())
    assert due.tolist() == [] and later == 3.5  # item 5, never launched, is neither due nor erased
    assert backups_due_since_launch(first, launch, no, now=3.5, rule=Speculation())[0].tolist() == [4]
    failed = no.copy()
    failed[0, 4] = True  # its original lost with its worker: a copy at once
    assert backups_due_since_launch(first, launch, failed, now=2.1, rule=Speculation())[0].tolist() == [4]
