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

from typing import Callable, Mapping, Sequence

import numpy as np

from gcc_dask.runtime.liveness import MISSED_HEARTBEATS  # (a constant: liveness imports Dask in its functions only)

__all__ = ["awaited", "blocked", "quiet_line", "reruns", "shortfall", "spares_left", "stuck_shards"]


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


def reruns(waits: Mapping[str, Sequence[tuple]], stuck: set[str], blocked_: Callable[[tuple], bool]) -> dict:
    """What runs again because of the tasks `stuck` on a quiet worker: per ``(batch, scheme)`` (scheme ``""``:
    the batch's inputs), the last entry found that calls for it. `waits` maps a task's key to what waits for it, ``(why,
    batch, scheme, ...)`` tuples: ``why`` is ``"scheme"`` (its decode, score or kept results), ``"inputs"``
    (its labels or reference), ``"record"`` (a record being fetched) or ``"copy"`` (a copy of a speculative
    scheme, which runs again only when an input of it is :func:`blocked`: ``blocked_(entry)``).

    Examples
    --------
    >>> waits = {"a": [("scheme", 0, "gcc")], "b": [("copy", 1, "speculative")], "c": [("inputs", 2, "")]}
    >>> reruns(waits, {"a", "b"}, lambda entry: False)
    {(0, 'gcc'): ('scheme', 0, 'gcc')}
    """
    again: dict = {}
    for key in stuck:
        for entry in waits.get(key, ()):
            if entry[0] != "copy" or blocked_(entry):
                again[(entry[1], entry[2])] = entry
    return again


def stuck_shards(shards: Mapping[str, tuple], stuck: set[str], again: Mapping[tuple, object]) -> dict:
    """The awaited shards stuck on a quiet worker of the ``(batch, scheme)`` not run again whole (`again`):
    `shards` maps a key to ``(batch, scheme, w, ...)``; per ``(batch, scheme)``, its first entry and the
    stuck shards' numbers, in the order of their keys (the machine decides which of them run again,
    :func:`shortfall`).

    Examples
    --------
    >>> shards = {"k1": (0, "gcc", 1), "k2": (0, "gcc", 2), "k3": (1, "gcc", 0)}
    >>> stuck_shards(shards, {"k1", "k2", "k3"}, {(1, "gcc"): "scheme"})
    {(0, 'gcc'): ((0, 'gcc', 1), [1, 2])}
    """
    found: dict = {}
    for key in sorted(stuck & shards.keys()):
        entry = shards[key]
        if (entry[0], entry[1]) not in again:
            found.setdefault((entry[0], entry[1]), (entry, []))[1].append(entry[2])
    return found


def quiet_line(quiet, what: list[str], said: set[str]) -> str | None:
    """The line a run says when it runs `what` again because of the `quiet` workers, or None: only when
    something runs again, and once per worker per run (`said`, updated, holds those said already; a worker
    behind on its heartbeats on a busy machine would otherwise be named at every look)."""
    new = sorted(set(quiet) - said)
    if not what or not new:
        return None
    said.update(new)
    return (f"Dask worker{'s' if len(new) > 1 else ''} {', '.join(new)} missed {MISSED_HEARTBEATS} heartbeats: "
            f"{'what batches' if len(what) > 1 else 'what batch'} {', '.join(what)} waited for there runs again "
            "on the other workers (said once per worker a run)")
