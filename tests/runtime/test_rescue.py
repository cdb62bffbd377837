"""Quiet-worker rescue as pure functions (gcc_dask.runtime.rescue): which stuck shards run again elsewhere."""

from __future__ import annotations

import numpy as np

from gcc_dask.runtime.rescue import awaited, blocked, shortfall, spares_left

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
