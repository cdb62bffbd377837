"""Placement (pure): which worker a batch's shard, or a backup copy of one, is asked to run on.

A batch's shards are spread over the workers round-robin (:func:`round_robin`), so that one worker's death
erases about N/W of them, never all (shards depend on no task, so the scheduler would otherwise pack a batch
onto whichever worker has free threads); a backup copy goes to another worker than its original's
(:func:`copy_slot`), preferably one of those that sent the batch's results first (:func:`backup_worker`).
The placement is loose: the Dask shell passes ``allow_other_workers=True``, so the scheduler picks another
worker when the one named is gone.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["backup_worker", "copy_slot", "round_robin"]


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
