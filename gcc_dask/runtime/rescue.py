"""Quiet-worker rescue (pure): which of a batch's shards on a worker that has stopped answering (missed its
heartbeats, :mod:`~gcc_dask.runtime.liveness`) must run again elsewhere (docs/pipeline.rst, section
'Unresponsive workers').

A cutoff scheme's batch needs :func:`~gcc_dask.runtime.cutoff.needed_results` results: the shards stuck on the
quiet worker run again only as far as the results in hand, the shards awaited elsewhere and the spares left
fall short of that (:func:`shortfall`); a smaller gap is the spares' to cover. A scheme with backup copies
(``speculative``) is rescued when one of its inputs can get no result at all: every copy launched so far is
stuck (:func:`blocked`), and Spark's rule may never launch another (it waits for a quantile of the inputs,
which the quiet worker may hold).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["awaited", "blocked", "shortfall", "spares_left"]


def awaited(regular: np.ndarray, promoted: np.ndarray, known: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """The shards a cutoff scheme's batch waits for: its regular and promoted ones without an outcome, bool (N,)."""
    return (regular | promoted) & ~known & ~failed


def spares_left(regular: np.ndarray, promoted: np.ndarray, known: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """The batch's spares not run at its priority, without an outcome (they may still bring a result), bool (N,)."""
    return ~regular & ~promoted & ~known & ~failed


def shortfall(needed: int, regular: np.ndarray, promoted: np.ndarray, known: np.ndarray, failed: np.ndarray,
              stuck: Sequence[int]) -> list[int]:
    """Of the `stuck` shards (on a quiet worker, all awaited), those to run again elsewhere: as many as the
    results in hand, plus the shards awaited elsewhere, plus the spares left, fall short of `needed`; the
    lowest first.

    Examples
    --------
    >>> regular = np.array([True] * 6 + [False] * 2)   # N = 8, 6 needed: 2 lazy spares
    >>> none = np.zeros(8, dtype=bool)
    >>> known = np.array([True, True, True, False, False, False, False, False])
    >>> shortfall(6, regular, none, known, none, [3, 4, 5])   # 3 in hand + 0 elsewhere + 2 spares: 1 short
    [3]
    >>> shortfall(6, regular, none, known, none, [5])         # 3 + 2 elsewhere + 2 spares: none short
    []
    """
    have = int((known & ~failed).sum()) + int(awaited(regular, promoted, known, failed).sum()) - len(stuck) \
        + int(spares_left(regular, promoted, known, failed).sum())
    missing = int(needed) - have
    return sorted(int(w) for w in stuck)[:missing] if missing > 0 else []


def blocked(num_inputs: int, known: np.ndarray, failed: np.ndarray, launched: np.ndarray,
            stuck: np.ndarray) -> bool:
    """Whether an input of a batch with backup copies (shard ``c·K + i`` is copy c of input i) has no result yet
    and every copy of it launched so far, and not failed, is `stuck` (bool (N,): running on a quiet worker).

    Examples
    --------
    >>> n = np.zeros(4, dtype=bool)
    >>> blocked(2, n, n, np.array([True, True, False, False]), np.array([True, False, False, False]))
    True
    >>> blocked(2, n, n, np.array([True, True, True, False]), np.array([True, False, False, False]))
    False
    """
    k, n = int(num_inputs), len(known)
    for i in range(k):
        copies = list(range(i, n, k))
        if any(known[w] and not failed[w] for w in copies):
            continue
        live = [w for w in copies if launched[w] and not failed[w]]
        if live and all(stuck[w] for w in live):
            return True
    return False
