"""Placement (pure): which worker a batch's shard, or a backup copy of one, is asked to run on.

A batch's shards are spread over the workers round-robin (:func:`round_robin`), so that one worker's death
erases about N/W of them, never all (shards depend on no task, so the scheduler would otherwise pack a batch
onto whichever worker has free threads); a backup copy goes to another worker than its original's
(:func:`copy_slot`), preferably one of those that sent the batch's results first (:func:`backup_worker`).
The placement is loose (:func:`loose`): the Dask shell passes ``allow_other_workers=True``, so the scheduler picks
another worker when the one named is gone; with fewer than two workers nothing is named (:func:`shard_place`,
:func:`backup_place`). The tasks the scheduler places itself (an exact scheme's shards, a decode next to its
inputs, a batch's labels or reference) are only kept off quiet workers (:func:`away_from_quiet`). The shell submits
the shards of one placement together, one layer of a graph update each (:func:`by_place`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["away_from_quiet", "backup_place", "backup_worker", "by_place", "copy_slot", "loose", "round_robin",
           "shard_place"]


def round_robin(workers: Sequence[str], batch: int, slot: int) -> str:
    """The worker of round-robin `slot` of `batch`: ``workers[(batch + slot) % len(workers)]`` (batches start one
    worker further on, so the first shards of every batch do not all land on the first worker)."""
    return workers[(int(batch) + int(slot)) % len(workers)]


def copy_slot(num_inputs: int, w: int, speculative: bool) -> int:
    """The round-robin slot of shard `w`: itself, or, for a scheme with backup copies (``speculative``), for
    copy c of original k (shard ``c·K + k``), ``k + c``, so that each copy runs on another worker than its
    original's and the copies before it (on a cluster of more than c workers).

    Examples
    --------
    >>> [copy_slot(4, w, True) for w in range(12)]
    [0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5]
    """
    k = int(num_inputs)
    return w % k + w // k if speculative and w >= k else w


def backup_worker(workers: Sequence[str], batch: int, w: int, nth: int, arrivals: np.ndarray, known: np.ndarray,
                  failed: np.ndarray) -> str:
    """Where the `nth` backup copy of the batch (0 first), of shard `w`, runs: one of the faster half of the
    workers (by :func:`round_robin`) that have sent a result of the batch, by their first result, other than
    `w`'s own, one after the other over the copies; any other worker when none has. (A slow worker sends its
    results too, last: a copy there would be as late.)

    Parameters
    ----------
    workers : sequence of str
        The workers shards are spread over (at least 2).
    arrivals : array of float, shape (N,)
        Each shard's arrival time (any order of magnitude; only their order is used).
    known, failed : arrays of bool, shape (N,)
        Shards with an outcome; those that failed.
    """
    own = round_robin(workers, batch, w)
    sent = [v for v in np.argsort(arrivals, kind="stable").tolist() if known[v] and not failed[v]]
    fast = [x for x in dict.fromkeys(round_robin(workers, batch, v) for v in sent) if x != own]
    choices = fast[:(len(fast) + 1) // 2] or [x for x in workers if x != own]
    return choices[int(nth) % len(choices)]


def loose(workers: Sequence[str]) -> dict:
    """The keywords of ``Client.submit`` that ask for one of `workers`, loosely: the scheduler takes another worker
    when none of them is there."""
    return {"workers": list(workers), "allow_other_workers": True}


def shard_place(workers: Sequence[str], batch: int, slot: int) -> dict:
    """Where the shard at round-robin `slot` of `batch` runs (:func:`round_robin`, :func:`loose`), so that one
    death erases about N/W of a batch's shards, never all of them: a shard depends on no task, or only on its
    batch's one read, so the scheduler would otherwise pack a batch onto whichever worker has free threads (or holds
    the read). Anywhere (``{}``) with fewer than two workers.

    >>> shard_place(["a", "b", "c"], 1, 4), shard_place(["a"], 1, 4)
    ({'workers': ['c'], 'allow_other_workers': True}, {})
    """
    return loose([round_robin(workers, batch, slot)]) if len(workers) >= 2 else {}


def backup_place(workers: Sequence[str], batch: int, w: int, nth: int, arrivals: np.ndarray, known: np.ndarray,
                 failed: np.ndarray) -> dict:
    """Where the `nth` backup copy of `batch` (0 first), of shard `w`, runs (:func:`backup_worker`, :func:`loose`);
    anywhere (``{}``) with fewer than two workers."""
    if len(workers) < 2:
        return {}
    return loose([backup_worker(workers, batch, w, nth, arrivals, known, failed)])


def away_from_quiet(workers: Sequence[str]) -> dict:
    """Where a task the scheduler places may run while a worker is quiet: on `workers` (the others), loosely;
    anywhere (``{}``) when there is none."""
    return loose(workers) if workers else {}


def by_place(ws: Sequence[int], place_of: Callable[[int], dict],
             regular: Sequence[int] | None = None) -> list[tuple[dict, bool, list[int]]]:
    """Shards `ws` grouped by their placement (``place_of(w)``) and, given `regular`, by whether they are regular
    (else every one counts as regular): ``(place, regular, shards)`` per group, the regular ones first, each in the
    order its shards come (an idle worker starts whatever reaches it first).

    >>> by_place([0, 1, 2, 3], lambda w: {"workers": ["ab"[w % 2]]}, regular=[0, 1, 2])
    [({'workers': ['a']}, True, [0, 2]), ({'workers': ['b']}, True, [1]), ({'workers': ['b']}, False, [3])]
    """
    keep = None if regular is None else set(regular)
    groups: dict[tuple[str, bool], tuple[dict, list[int]]] = {}
    for w in ws:
        place = place_of(w)
        groups.setdefault((repr(place), keep is None or w in keep), (place, []))[1].append(w)
    return [(place, is_regular, group) for (_, is_regular), (place, group) in
            sorted(groups.items(), key=lambda g: not g[0][1])]
