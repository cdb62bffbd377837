"""Backups of a cutoff scheme's late shards (pure): the shards a batch cannot do without, copied on another worker
when they are late by Spark's rule (docs/pipeline.rst, section 'Backups of late shards'; ``cutoff.backups``).
"""

from __future__ import annotations

import math

import numpy as np

from gcc_dask.runtime.backups import Speculation, _rule_fire

__all__ = ["late_shards_due", "first_copy"]


def late_shards_due(arrivals: np.ndarray, launch: np.ndarray, awaited: np.ndarray, backed: np.ndarray,
                    spares: np.ndarray, needed: int, now: float, rule: Speculation) -> tuple[np.ndarray, float]:
    """Which shards of a cutoff scheme's batch get a backup copy now (``cutoff.backups``), and when to look again.

    Spark's rule on the results the cutoff needs: once ``max(floor(quantile · needed), 1)`` of them are in, a
    shard the batch waits for is *late* when it has run longer than ``max(multiplier × their median time,
    min_runtime)`` (:func:`backup_time` on these arrivals; a shard launched at L, a spare promoted, counts from L).
    Only as many late shards get a copy as the cutoff cannot do without: ``needed`` minus the results in, the
    awaited shards not late (and those with a copy already) and the spares not late either (a spare counts from
    the batch start: it may be running on the slow worker too). One copy per shard.

    Parameters
    ----------
    arrivals : array of float, shape (N,)
        Seconds since the batch start of each result (``inf``: none, or failed).
    launch : array of float, shape (N,)
        When each shard was launched (seconds since the batch start).
    awaited : array of bool, shape (N,)
        The shards the batch waits for: run at its priority, no result yet.
    backed : array of bool, shape (N,)
        Shards that have a backup copy already.
    spares : array of bool, shape (N,)
        Spares not run at the batch's priority, without a result and not failed (they may still bring one).
    needed : int
        Results the cutoff needs (:func:`needed_results`).
    now : float
        Seconds since the batch start.
    rule : Speculation
        ``copies`` is not used: one backup per shard.

    Returns
    -------
    (ndarray of int64, float)
        The shards due a copy now (the earliest launched first, then by index); the earliest time another
        awaited shard becomes late (``inf``: none can without another result).

    Examples
    --------
    Needed 8 of 10: 5 regular shards and a spare in by 0.25 s; 3 shards and the other spare on a slow worker.
    At 0.35 s none is late yet: look again at 0.375 s (1.5 × the median 0.25 s). At 0.4 s all four are, and
    the 6 results fall 2 short of 8: two of the three get a copy.

    >>> arr = np.array([0.25] * 5 + [np.inf] * 3 + [0.25, np.inf])
    >>> awaited = np.isin(np.arange(10), [5, 6, 7])
    >>> spare = np.arange(10) == 9
    >>> late_shards_due(arr, np.zeros(10), awaited, np.zeros(10, bool), spare, 8, 0.35, Speculation())
    (array([], dtype=int64), 0.375)
    >>> late_shards_due(arr, np.zeros(10), awaited, np.zeros(10, bool), spare, 8, 0.4, Speculation())
    (array([5, 6]), inf)
    """
    t = np.asarray(arrivals, dtype=float)
    launch = np.asarray(launch, dtype=float)
    awaited = np.asarray(awaited, dtype=bool)
    backed = np.asarray(backed, dtype=bool)
    spares = np.asarray(spares, dtype=bool)
    if not (launch.shape == awaited.shape == backed.shape == spares.shape == t.shape):
        raise ValueError(f"arrivals, launch, awaited, backed, spares: got shapes {t.shape}, {launch.shape}, "
                         f"{awaited.shape}, {backed.shape} and {spares.shape}; expected one shape (N,)")
    finite = sorted(x for x in t.tolist() if x == x and x != math.inf)
    fire, threshold = _rule_fire(finite, rule.needed(int(needed)), rule.multiplier, rule.min_runtime)
    none = np.zeros(0, dtype=np.int64)
    if not math.isfinite(fire):
        return none, math.inf
    late_at = np.maximum(fire, launch + threshold)
    candidates = awaited & ~backed
    late = candidates & (late_at <= now)
    spares_coming = int(spares.sum()) if now < fire else 0  # (launched with the batch: late from the rule's time)
    have = len(finite) + int(awaited.sum()) - int(late.sum()) + spares_coming
    missing = int(needed) - have
    due = none
    if missing > 0:
        ws = np.flatnonzero(late)
        due = ws[np.lexsort((ws, launch[ws]))][:missing].astype(np.int64)
        due.sort()
    pending = candidates & ~late
    return due, float(late_at[pending].min()) if pending.any() else math.inf


def first_copy(status: str, other: str) -> str:
    """A shard with a backup copy (or the copy) reported `status` (``"finished"``, ``"error"``, ``"lost"``, ...)
    while the other copy is `other` (its Dask status): ``"won"`` (the first result wins: the other is
    cancelled), ``"wait"`` (this one failed, the other may still bring a result: its own report, maybe on its
    way, decides) or ``"erased"`` (both failed: an erasure).

    Examples
    --------
    >>> first_copy("finished", "pending"), first_copy("error", "finished"), first_copy("error", "error")
    ('won', 'wait', 'erased')
    """
    if status == "finished":
        return "won"
    return "wait" if other in ("pending", "finished") else "erased"
