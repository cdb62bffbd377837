"""Placement as pure functions (gcc_dask.runtime.placement): no cluster, no clock."""

from __future__ import annotations

import numpy as np

from gcc_dask.runtime.placement import backup_worker, copy_slot, round_robin

W = ["a", "b", "c"]


def test_shards_go_round_robin_and_each_batch_starts_one_worker_on():
    assert [round_robin(W, 0, s) for s in range(4)] == ["a", "b", "c", "a"]
    assert [round_robin(W, 1, s) for s in range(4)] == ["b", "c", "a", "b"]
    # one death erases about N/W of a batch's 12 shards, never all
    placed = [round_robin(W, 5, s) for s in range(12)]
    assert {w: placed.count(w) for w in W} == {"a": 4, "b": 4, "c": 4}


def test_each_copy_of_an_input_runs_on_another_worker_than_its_original_and_earlier_copies():
    k = 4
    for i in range(k):  # original i, copies 4 + i and 8 + i
        slots = [copy_slot(k, c * k + i, speculative=True) for c in range(3)]
        assert slots == [i, i + 1, i + 2]
        assert len({round_robin(W, 7, s) for s in slots}) == 3  # three workers: three different ones
    assert [copy_slot(k, w, speculative=False) for w in range(8)] == list(range(8))  # spares: their own slot


def test_a_backup_goes_to_the_faster_half_of_the_workers_that_sent_results_not_the_originals():
    workers = ["a", "b", "c", "d"]
    arrivals = np.array([0.3, 0.1, np.inf, 0.2])  # shard 1 first (worker b at batch 0), then 3 (d), then 0 (a)
    known = np.array([True, True, False, True])
    failed = np.zeros(4, dtype=bool)
    # shard 2 (worker c) is late: its copies go to b, then d (the faster half of b, d, a), one after the other
    assert [backup_worker(workers, 0, 2, n, arrivals, known, failed) for n in range(3)] == ["b", "d", "b"]
    # a failed result does not count as sent; nobody sent anything: any worker other than its own
    assert backup_worker(workers, 0, 2, 0, arrivals, known, np.ones(4, dtype=bool)) == "a"
    assert backup_worker(workers, 0, 1, 0, arrivals, np.zeros(4, dtype=bool), failed) in {"a", "c", "d"}
