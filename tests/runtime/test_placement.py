"""Placement as pure functions (gcc_dask.runtime.placement): no cluster, no clock."""

from __future__ import annotations

import doctest

import numpy as np

from gcc_dask.runtime import placement
from gcc_dask.runtime.placement import (away_from_quiet, backup_place, backup_worker, by_place, copy_slot, loose,
                                        round_robin, shard_place)

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


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(placement).failed == 0


def test_a_shard_is_asked_for_on_its_round_robin_worker_loosely_and_anywhere_on_a_lone_worker():
    assert loose(["b"]) == {"workers": ["b"], "allow_other_workers": True}
    assert [shard_place(W, 2, s)["workers"] for s in range(3)] == [["c"], ["a"], ["b"]]
    assert shard_place(["a"], 2, 0) == {} and shard_place([], 0, 0) == {}
    arrivals, known, failed = np.array([0.3, 0.1, 0.2]), np.ones(3, dtype=bool), np.zeros(3, dtype=bool)
    assert backup_place(W, 0, 2, 0, arrivals, known, failed) == loose([backup_worker(W, 0, 2, 0, arrivals, known,
                                                                                     failed)])
    assert backup_place(["a"], 0, 2, 0, arrivals, known, failed) == {}


def test_while_a_worker_is_quiet_the_scheduler_s_own_placement_keeps_to_the_others():
    assert away_from_quiet(("a", "c")) == {"workers": ["a", "c"], "allow_other_workers": True}
    assert away_from_quiet([]) == {}  # (none left: anywhere)


def test_shards_are_grouped_per_placement_the_regular_ones_first_in_their_order():
    place = {0: loose(["a"]), 1: loose(["b"]), 2: loose(["a"]), 3: loose(["a"]), 4: loose(["b"])}
    assert by_place([0, 1, 2, 3, 4], place.__getitem__, regular=[0, 1, 4]) == [
        (loose(["a"]), True, [0]), (loose(["b"]), True, [1, 4]), (loose(["a"]), False, [2, 3])]
    assert by_place([3, 1, 0], place.__getitem__) == [(loose(["a"]), True, [3, 0]), (loose(["b"]), True, [1])]
    assert by_place([0, 1], lambda w: {}) == [({}, True, [0, 1])]  # (one worker: one group)
    assert by_place([], place.__getitem__) == []
