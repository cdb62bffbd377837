"""Spark's rule for backup copies of late tasks (pure functions): the ``speculative`` scheme's backups, the
composition's, and the timing rule the cutoff's adaptive deadline shares (docs/pipeline.rst, section
'Speculative execution').

Once a quantile of a batch's inputs have a result, an input still without one whose latest copy has run longer
than ``max(multiplier × the median time of those results, min_runtime)`` gets its next copy
(``spark.speculation.{quantile,multiplier,minTaskRuntime}``). :func:`backups_due` applies it on the wall clock;
:func:`backup_schedule` on the virtual clock, where every copy's latency is drawn when the batch is submitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_BACKUP_COPIES

__all__ = ["Speculation", "backup_schedule", "backup_threshold", "backup_time", "backups_due", "backups_due_since_launch"]


def _rule_time(finite: list[float], q: int, multiplier: float, min_runtime: float) -> float:
    """Earliest time t at which at least `q` of the arrivals are in and t >= max(multiplier × their median,
    min_runtime); inf if never from these arrivals.

    ``finite`` holds the finite arrivals in ascending order, so the median of the first j is read off
    (the mean of the two middle values for even j, as :func:`numpy.median`), not recomputed.
    """
    return _rule_fire(finite, q, multiplier, min_runtime)[0]


def _rule_fire(finite: list[float], q: int, multiplier: float, min_runtime: float) -> tuple[float, float]:
    """:func:`_rule_time` and the threshold it fired on, ``max(multiplier × median, min_runtime)`` (both inf
    when it never fires)."""
    m = len(finite)
    for j in range(q, m + 1):
        median = finite[j // 2] if j % 2 else (finite[j // 2 - 1] + finite[j // 2]) / 2
        threshold = max(multiplier * median, min_runtime)
        fire = max(finite[j - 1], threshold)
        if j == m or fire < finite[j]:
            return fire, threshold
    return math.inf, math.inf


@dataclass(frozen=True)
class Speculation:
    """Spark's rule for launching a backup copy of a late task (``spark.speculation.{quantile,multiplier,
    minTaskRuntime}``; docs/pipeline.rst, section 'Speculative execution').

    Once ``max(floor(quantile · K), 1)`` of a batch's K inputs have a result, an input still without one whose
    original has run longer than ``max(multiplier × the median time of those results, min_runtime)`` (the
    *threshold*) gets a backup copy. Times count from the batch's start (its submission), as the cutoff's do.
    With ``copies`` > 1 a backup that has itself run longer than the threshold without any copy of its input
    arriving gets the next copy, up to ``copies`` backups per input (Spark launches one: ``copies = 1``).

    Parameters
    ----------
    quantile : float
        In (0, 1]. Default 0.75, Spark's classic default (its configuration docs up to 3.x).
    multiplier : float
        >= 1. Default 1.5, Spark's classic default.
    min_runtime : float
        Seconds >= 0. Default 0.1, Spark's ``spark.speculation.minTaskRuntime``.
    copies : int
        Backup copies an input may get, 1 to 8. Default 1, Spark's.

    Raises
    ------
    ConfigError
        For values outside those ranges.
    """

    quantile: float = 0.75
    multiplier: float = 1.5
    min_runtime: float = 0.1
    copies: int = 1

    def __post_init__(self) -> None:
        for name in ("quantile", "multiplier", "min_runtime"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(value):
                raise ConfigError(f"speculation.{name}: got {value!r}; expected a finite number")
        if not 0 < self.quantile <= 1:
            raise ConfigError(f"speculation.quantile: got {self.quantile!r}; expected 0 < quantile <= 1")
        if not self.multiplier >= 1:
            raise ConfigError(f"speculation.multiplier: got {self.multiplier!r}; expected a number >= 1")
        if not self.min_runtime >= 0:
            raise ConfigError(f"speculation.min_runtime: got {self.min_runtime!r}; expected seconds >= 0")
        if isinstance(self.copies, bool) or not isinstance(self.copies, (int, np.integer)) \
                or not 1 <= self.copies <= MAX_BACKUP_COPIES:
            raise ConfigError(f"speculation.copies: got {self.copies!r}; expected an integer in "
                              f"[1, {MAX_BACKUP_COPIES}]")

    def needed(self, num_inputs: int) -> int:
        """Inputs that must have a result before any backup: ``max(floor(quantile · K), 1)`` (Spark's
        ``minFinishedForSpeculation``)."""
        return max(1, math.floor(self.quantile * num_inputs + 1e-9))


def backup_time(first: np.ndarray, rule: Speculation) -> float:
    """When the inputs still without a result are due a backup copy (seconds since the batch start).

    Parameters
    ----------
    first : array of float, shape (K,)
        Per input, when its first result (from any copy) arrived; ``inf`` (or NaN) for none yet.
    rule : Speculation

    Returns
    -------
    float
        The earliest time the rule holds given these arrivals: at least ``rule.needed(K)`` results in, and
        no earlier than ``multiplier`` × their median and ``min_runtime``; ``inf`` when fewer results are in
        (more must arrive first). A backup copy launched at time L is late, in its turn, at L + this time.

    Examples
    --------
    >>> backup_time(np.array([1.0, 1.0, 1.2, 1.0, np.inf, np.inf, 1.1, 0.9]), Speculation())
    1.5
    >>> backup_time(np.array([1.0, np.inf, np.inf, np.inf]), Speculation())  # 1 of 4 in, 3 needed
    inf
    """
    return _backup_rule(first, rule)[0]


def backup_threshold(first: np.ndarray, rule: Speculation) -> float:
    """How long a backup copy may run without a result before the next copy (seconds): the rule's
    ``max(multiplier × median, min_runtime)`` when it fires on these arrivals (:func:`backup_time`), else inf.

    Examples
    --------
    >>> backup_threshold(np.array([1.0, 1.0, 1.2, 1.0, np.inf, np.inf, 1.1, 0.9]), Speculation())
    1.5
    >>> backup_threshold(np.array([0.03] * 5 + [1.0, np.inf, np.inf]), Speculation())  # fires at 1.0: the 6th
    0.1
    """
    return _backup_rule(first, rule)[1]


def _backup_rule(first: np.ndarray, rule: Speculation) -> tuple[float, float]:
    t = np.asarray(first, dtype=float)
    finite = sorted(x for x in t.tolist() if x == x and x != math.inf)
    return _rule_fire(finite, rule.needed(t.size), rule.multiplier, rule.min_runtime)


def _copies_checked(first: Any, launch: Any, failed: Any, rule: Speculation
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`first`, `launch` and `failed` as float, float and bool arrays, or one ValueError when `launch` and `failed`
    are not of shape ``(rule.copies + 1, K)``."""
    t = np.asarray(first, dtype=float)
    launch = np.asarray(launch, dtype=float)
    failed = np.asarray(failed, dtype=bool)
    if launch.shape != (rule.copies + 1, t.size) or failed.shape != launch.shape:
        raise ValueError(f"launch and failed: got shapes {launch.shape} and {failed.shape}; expected "
                         f"({rule.copies + 1}, {t.size})")
    return t, launch, failed


def backups_due(first: np.ndarray, launch: np.ndarray, failed: np.ndarray, now: float,
                rule: Speculation) -> tuple[np.ndarray, float]:
    """Which inputs get their next copy now, and when the next one comes due if no result arrives meanwhile.

    An input without a result and with a copy left (fewer than ``rule.copies`` backups launched) gets its next
    copy at once when every copy launched so far failed (an erasure); else its first backup at
    :func:`backup_time`, and a later one once the latest backup has run for :func:`backup_threshold`
    (launched at L: due at L + that).

    Parameters
    ----------
    first : array of float, shape (K,)
        As in :func:`backup_time`.
    launch : array of float, shape (copies + 1, K)
        When each copy was launched (seconds since the batch start; row 0 the originals, row c the c-th backup
        copy); ``inf`` for a copy not launched.
    failed : array of bool, shape (copies + 1, K)
        Copies that failed.
    now : float
        Seconds since the batch start.
    rule : Speculation

    Returns
    -------
    (ndarray of int64, float)
        The inputs due now, ascending; the earliest time a further one comes due (``inf``: none can without
        another result).

    Examples
    --------
    >>> first = np.array([1.0, 1.0, 1.2, np.inf])
    >>> launch = np.array([[0.0] * 4, [np.inf] * 4])
    >>> no = np.zeros((2, 4), dtype=bool)
    >>> backups_due(first, launch, no, now=1.4, rule=Speculation())
    (array([], dtype=int64), 1.5)
    >>> backups_due(first, launch, no, now=1.5, rule=Speculation())[0].tolist()
    [3]
    """
    t, launch, failed = _copies_checked(first, launch, failed, rule)
    started = np.isfinite(launch)
    copies = started.sum(axis=0)  # launched so far, the original included
    waiting = ~np.isfinite(t) & (copies <= rule.copies)
    erased = (failed | ~started).all(axis=0)
    last = np.where(started, launch, -math.inf).max(axis=0)
    fire, threshold = _backup_rule(t, rule)
    due_at = np.where(erased, -math.inf, np.where(copies > 1, last + threshold, fire))
    due = waiting & (due_at <= now)
    later = due_at[waiting & ~due]
    return np.flatnonzero(due).astype(np.int64), float(later.min()) if later.size else math.inf


def backups_due_since_launch(first: np.ndarray, launch: np.ndarray, failed: np.ndarray, now: float,
                             rule: Speculation) -> tuple[np.ndarray, float]:
    """:func:`backups_due` for tasks launched at different times: a map of more items than the cluster has
    threads, each item launched as a thread frees (:func:`~gcc_dask.runtime.cluster_map.map_on_cluster`).

    Spark's rule on run times, not on times since a common start: the median is over the durations of the
    results in (arrival − launch of the original), and an item is late once its original (or its latest
    backup) has run longer than ``max(multiplier × median, min_runtime)``, counted from its own launch. An item
    not launched yet (every entry of its column ``inf``) is never due: waiting for a thread is not being late.

    Parameters
    ----------
    first : array of float, shape (K,)
        Per item, when its first result arrived (seconds since the map's start); ``inf`` for none yet.
    launch, failed : arrays, shape (copies + 1, K)
        As in :func:`backups_due` (seconds since the map's start).
    now : float
        Seconds since the map's start.
    rule : Speculation

    Returns
    -------
    (ndarray of int64, float)
        The items due now, ascending; the earliest time a further one comes due (``inf``: none without another
        result or launch).

    Examples
    --------
    >>> inf = np.inf
    >>> first = np.array([1.0, 1.0, 2.0, 2.0, inf])  # 2 threads: items 2 and 3 launched at 1, item 4 at 2
    >>> launch = np.array([[0.0, 0.0, 1.0, 1.0, 2.0], [inf] * 5])
    >>> no = np.zeros((2, 5), dtype=bool)
    >>> backups_due_since_launch(first, launch, no, now=2.5, rule=Speculation())  # ran 0.5 s of 1.5 allowed
    (array([], dtype=int64), 3.5)
    """
    t, launch, failed = _copies_checked(first, launch, failed, rule)
    started = np.isfinite(launch)
    launched = started[0]
    with np.errstate(invalid="ignore"):
        took = np.where(np.isfinite(t) & launched, t - np.where(launched, launch[0], 0.0), math.inf)
    threshold = backup_threshold(took, rule)
    copies = started.sum(axis=0)
    waiting = launched & ~np.isfinite(t) & (copies <= rule.copies)
    erased = launched & (failed | ~started).all(axis=0)
    last = np.where(started, launch, -math.inf).max(axis=0)  # finite for every launched item
    due_at = np.where(erased, -math.inf, np.where(launched, last, math.inf) + threshold)
    due = waiting & (due_at <= now)
    later = due_at[waiting & ~due]
    return np.flatnonzero(due).astype(np.int64), float(later.min()) if later.size else math.inf


def backup_schedule(draws: np.ndarray, rule: Speculation,
                    failed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The rule's backups on the virtual clock, where every copy's latency is drawn in advance.

    The rule's time T (:func:`backup_time`) and threshold D (:func:`backup_threshold`) are taken on the
    originals' draws. An input's first backup is launched at T when its original has not arrived by then; each
    later one D after the copy before it, when no copy has arrived by then; and the next copy at once when
    every copy launched so far is known to have failed (at the last one's failure). A copy arrives at its
    launch plus its own draw; a failed copy's draw is when it failed, and it is no arrival.

    Parameters
    ----------
    draws : array of float, shape (copies + 1, K)
        Each copy's drawn latency (row 0 the originals, launched at 0; ``inf`` for a copy that never arrives).
    rule : Speculation
    failed : array of bool, shape (copies + 1, K), optional
        Copies known to have failed.

    Returns
    -------
    (launch, arrival) : arrays of float, shape (copies + 1, K)
        Launch times (``inf``: not launched; row 0 zeros) and arrivals (``inf`` where not launched).

    Examples
    --------
    >>> draws = np.array([[1.0, 1.0, 1.0, 9.0], [1.0] * 4, [1.0] * 4])
    >>> launch, arrival = backup_schedule(draws, Speculation(copies=2))
    >>> launch[:, 3].tolist(), arrival[:, 3].tolist()  # T = 1.5: the backup at 1.5 arrives at 2.5, before 3.0
    ([0.0, 1.5, inf], [9.0, 2.5, inf])
    """
    d = np.asarray(draws, dtype=float)
    m = rule.copies + 1
    if d.ndim != 2 or d.shape[0] != m:
        raise ValueError(f"draws: got shape {d.shape}; expected ({m}, K)")
    bad = np.zeros(d.shape, dtype=bool) if failed is None else np.asarray(failed, dtype=bool)
    if bad.shape != d.shape:
        raise ValueError(f"failed: got shape {bad.shape}; expected {d.shape}")
    fire, threshold = _backup_rule(d[0], rule)
    launch = np.full(d.shape, math.inf)
    arrival = np.full(d.shape, math.inf)
    launch[0], arrival[0] = 0.0, d[0]
    for k in range(d.shape[1]):
        for c in range(1, m):
            ok = ~bad[:c, k] & np.isfinite(launch[:c, k])
            first_ok = float(arrival[:c, k][ok].min()) if ok.any() else math.inf
            at = fire if c == 1 else launch[c - 1, k] + threshold
            if not ok.any():  # every copy so far failed: the next one when the last of them did
                at = min(at, float(arrival[:c, k].max()))
            if not math.isfinite(at) or first_ok <= at:
                break
            launch[c, k] = at
            arrival[c, k] = at + d[c, k]
    return launch, arrival
