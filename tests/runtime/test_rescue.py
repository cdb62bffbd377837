"""Quiet-worker rescue as pure functions (gcc_dask.runtime.rescue): which stuck shards run again elsewhere."""

from __future__ import annotations

import numpy as np

from gcc_dask.runtime.rescue import awaited, blocked, quiet_line, reruns, shortfall, spares_left, stuck_shards

N = 8
NONE = np.zeros(N, dtype=bool)
REGULAR = np.array([True] * 6 + [False] * 2)  # a cutoff at 6 of 8: two lazy spares


def _mask(*ws):
    m = np.zeros(N, dtype=bool)
    m[list(ws)] = True
    return m


def test_awaited_and_spares_left_partition_the_shards_without_an_outcome():
    known, failed, promoted = _mask(0, 1), _mask(2, 7), _mask(6)
    assert awaited(REGULAR, promoted, known, failed).tolist() == _mask(3, 4, 5, 6).tolist()
    assert spares_left(REGULAR, promoted, known, failed).tolist() == NONE.tolist()  # 6 promoted, 7 failed
    assert spares_left(REGULAR, NONE, known, NONE).tolist() == _mask(6, 7).tolist()


def test_only_the_shortfall_of_the_stuck_shards_runs_again():
    known = _mask(0, 1, 2)
    # 3 results + 3 awaited (all stuck) + 2 spares = 8 - 3 stuck: 5 < 6 needed, the lowest stuck one runs again
    assert shortfall(6, REGULAR, NONE, known, NONE, [5, 3, 4]) == [3]
    # the spares failed: 3 + 0 + 0 = 3, three short: all three stuck ones run again
    assert shortfall(6, REGULAR, NONE, known, _mask(6, 7), [3, 4, 5]) == [3, 4, 5]
    # one stuck while two are awaited elsewhere: 3 + 2 + 2 >= 6, the spares cover it
    assert shortfall(6, REGULAR, NONE, known, NONE, [5]) == []


def test_an_input_is_blocked_when_every_live_copy_is_stuck():
    k = 2  # shards 0, 1 originals; 2, 3 their first copies
    launched = _mask(0, 1)[:4]
    stuck = np.array([True, False, False, False])
    assert blocked(k, NONE[:4], NONE[:4], launched, stuck)  # input 0: its only copy stuck
    assert not blocked(k, NONE[:4], NONE[:4], np.array([True, True, True, False]), stuck)  # its backup runs elsewhere
    assert not blocked(k, np.array([False, False, True, False]), NONE[:4], launched, stuck)  # the backup arrived
    # a failed copy is not live: the other, stuck, blocks the input
    assert blocked(k, NONE[:4], np.array([False, False, True, False]), np.array([True, True, True, False]), stuck)


def test_what_waits_for_a_stuck_task_runs_again_and_a_copy_only_when_its_input_is_blocked():
    waits = {"decode-b0": [("scheme", 0, "gcc", "s0")], "ref-b1": [("inputs", 1, "", None)],
             "eval-b2-w1": [("copy", 2, "speculative", "s2")], "eval-b3-w0": [("copy", 3, "speculative", "s3")],
             "score-b4": [("scheme", 4, "gcc", "s4"), ("record", 4, "gcc", "s4")]}
    stuck = {"decode-b0", "ref-b1", "eval-b2-w1", "eval-b3-w0", "score-b4", "elsewhere"}
    again = reruns(waits, stuck, lambda entry: entry[1] == 3)  # only batch 3's input has no copy left running
    assert set(again) == {(0, "gcc"), (1, ""), (3, "speculative"), (4, "gcc")}
    assert again[(4, "gcc")][0] == "record"  # the last entry for a (batch, scheme): its fetch is abandoned too
    assert reruns(waits, {"not-waited-for"}, lambda entry: True) == {}


def test_the_stuck_shards_of_a_batch_not_run_again_whole_are_grouped_for_its_machine():
    shards = {"eval-b0-w3": (0, "gcc", 3), "eval-b0-w1": (0, "gcc", 1), "eval-b1-w2": (1, "gcc", 2),
              "eval-b2-w0": (2, "bacc", 0)}
    found = stuck_shards(shards, {"eval-b0-w3", "eval-b0-w1", "eval-b1-w2"}, again={(1, "gcc"): "scheme"})
    assert found == {(0, "gcc"): ((0, "gcc", 1), [1, 3])}  # batch 1 runs again whole; batch 2's is not stuck


def test_the_quiet_line_is_said_once_per_worker_and_only_when_something_runs_again():
    said: set[str] = set()
    assert quiet_line({"tcp://a:1"}, [], said) is None and said == set()
    assert "tcp://a:1 missed 3 heartbeats: what batch 0 (gcc: 2 shards)" in quiet_line({"tcp://a:1"},
                                                                                       ["0 (gcc: 2 shards)"], said)
    assert quiet_line({"tcp://a:1"}, ["1 (gcc)"], said) is None
