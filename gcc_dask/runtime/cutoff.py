"""The speculative cutoff: when to stop waiting for a batch's stragglers (pure functions).

A batch's N shard results arrive at times ``a_n`` (seconds since the batch started; ``inf`` for a shard
that failed or has not arrived). The cutoff fires at the earliest of (docs/pipeline.rst, section 'Cutoff'):

1. ``wait_for`` results have arrived (for exact schemes: the received set covers every ``group``);
2. the ``deadline``;
3. the adaptive rule, after Spark's ``spark.speculation.{quantile,multiplier,minTaskRuntime}``: once
   ``ceil(quantile * N)`` results are in, wait at most ``multiplier`` x their median duration, never less
   than ``min_runtime``.

If the cutoff fires with fewer results than the scheme needs (``min_results``), ``on_shortfall`` decides:
``"wait"`` moves the cutoff to the arrival of the ``min_results``-th result, ``"decode"`` keeps the
cutoff (the batch is undecodable if the scheme cannot decode), ``"fail"`` marks the batch failed.

Everything here is a pure function of arrival times, so the Dask loop (:mod:`gcc_dask.runtime.executor`)
only calls :func:`decide`. It serves both clocks:

* wall clock: shards that have not arrived are ``inf``; the decision is final when ``time <= now``;
* virtual clock (injected latencies): shards are known in order of their injected latency; the decision
  is final when ``time < horizon``, the smallest latency whose outcome is still unknown.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_BACKUP_COPIES

__all__ = ["CutoffPolicy", "CutoffDecision", "Speculation", "backup_schedule", "backup_threshold", "backup_time",
           "backups_due", "cutoff_time", "late_shards_due", "decide", "needed_results", "resolve_wait_for", "spares_due"]

Shortfall = Literal["wait", "decode", "fail"]
Reason = Literal["wait_for", "deadline", "adaptive", "exhausted"]


@dataclass(frozen=True)
class CutoffPolicy:
    """When a batch stops waiting for its stragglers.

    Parameters
    ----------
    num_workers : int
        N, the number of shards of the batch.
    wait_for : int
        Fire once this many results have arrived, 1 <= wait_for <= N.
    min_results : int
        The fewest results the scheme can decode from (its ``min_received``), >= 0.
    deadline : float or None
        Seconds since the batch start; ``None`` for no deadline.
    quantile, multiplier, min_runtime : float or None, float, float
        The adaptive rule; ``quantile=None`` disables it. quantile in (0, 1], multiplier >= 1, seconds >= 0.
    on_shortfall : {"wait", "decode", "fail"}
    groups : tuple of int or None
        For replication-like schemes: ``groups[n]`` is the input that worker n computes; the
        ``wait_for`` rule then also fires once every group has a result (every input recovered).

    Raises
    ------
    ConfigError
        For values outside the ranges above.
    """

    num_workers: int
    wait_for: int
    min_results: int = 1
    deadline: float | None = None
    quantile: float | None = None
    multiplier: float = 1.5
    min_runtime: float = 0.0
    on_shortfall: Shortfall = "decode"
    groups: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        n = self.num_workers
        if n < 1:
            raise ConfigError(f"num_workers: got {n!r}; expected an integer >= 1")
        if not 1 <= self.wait_for <= n:
            raise ConfigError(f"cutoff.wait_for: got {self.wait_for!r}; expected 1 <= wait_for <= N = {n}")
        if not 0 <= self.min_results <= n:
            raise ConfigError(f"min_results: got {self.min_results!r}; expected 0 <= min_results <= N = {n}")
        if self.deadline is not None and not self.deadline > 0:
            raise ConfigError(f"cutoff.deadline: got {self.deadline!r}; expected a positive duration or null")
        if self.quantile is not None and not 0 < self.quantile <= 1:
            raise ConfigError(f"cutoff.quantile: got {self.quantile!r}; expected 0 < quantile <= 1 or null")
        if not self.multiplier >= 1:
            raise ConfigError(f"cutoff.multiplier: got {self.multiplier!r}; expected a number >= 1")
        if not self.min_runtime >= 0:
            raise ConfigError(f"cutoff.min_runtime: got {self.min_runtime!r}; expected seconds >= 0")
        if self.on_shortfall not in ("wait", "decode", "fail"):
            raise ConfigError(
                f"cutoff.on_shortfall: got {self.on_shortfall!r}; expected one of 'wait', 'decode', 'fail'"
            )
        if self.groups is not None and len(self.groups) != n:
            raise ConfigError(f"groups: got {len(self.groups)} entries; expected one per worker (N = {n})")


@dataclass(frozen=True)
class CutoffDecision:
    """The outcome of :func:`cutoff_time`.

    ``time`` is ``inf`` when no rule can ever fire from the arrivals given (more results are needed).
    ``shortfall`` is True when the cutoff keeps fewer than ``min_results`` results;
    ``failed`` when that shortfall is to be reported as a failed batch (``on_shortfall="fail"``).
    """

    time: float
    reason: Reason | None
    n_received: int
    shortfall: bool = False
    failed: bool = False

    def received(self, arrivals: np.ndarray) -> np.ndarray:
        """Indices (sorted, int64) of the shards that arrived by the cutoff."""
        return np.flatnonzero(np.asarray(arrivals, dtype=float) <= self.time).astype(np.int64)


def resolve_wait_for(value: int | str, num_workers: int, stragglers: int) -> int:
    """Resolve the config value of ``cutoff.wait_for`` ("N-S", "all" or an int) to a count.

    Raises
    ------
    ConfigError
        If the result is not in [1, N].
    """
    if isinstance(value, str):
        v = value.replace(" ", "").upper()
        if v == "ALL" or v == "N":
            count = num_workers
        elif v == "N-S":
            count = num_workers - stragglers
        else:
            raise ConfigError(f"cutoff.wait_for: got {value!r}; expected 'N-S', 'all' or an integer")
    else:
        count = int(value)
    if not 1 <= count <= num_workers:
        raise ConfigError(
            f"cutoff.wait_for: got {value!r} (= {count}) with N = {num_workers}, S = {stragglers}; "
            f"expected a count between 1 and N"
        )
    return count


def needed_results(policy: CutoffPolicy) -> int:
    """How many results the cutoff needs when none fails: the shards a batch runs at full priority.

    ``wait_for``, or fewer when the policy has ``groups`` (one result per group ends the wait), and never
    fewer than ``min_results``. The other ``N - needed_results(policy)`` shards are the batch's spares
    (``cutoff.spares``, docs/pipeline.rst, section 'Spares').

    Examples
    --------
    >>> needed_results(CutoffPolicy(num_workers=16, wait_for=12))
    12
    >>> needed_results(CutoffPolicy(num_workers=16, wait_for=16, groups=tuple(n % 8 for n in range(16))))
    8
    """
    count = policy.wait_for
    if policy.groups is not None:
        count = min(count, len(set(policy.groups)))
    return min(policy.num_workers, max(count, policy.min_results))


def spares_due(known: np.ndarray, failed: np.ndarray, regular: np.ndarray, promoted: np.ndarray,
               overtaken: bool) -> int:
    """How many more of a batch's spares to run at the batch's own priority now.

    One for every regular shard that failed (and every promoted spare that failed), and, once the batch
    is *overtaken* (a batch submitted after it has reached its cutoff while it still waits for regular
    results), one for every regular result still missing: on a busy cluster the batches in flight finish
    in order, so a batch that falls behind one submitted later waits for a straggler. Spares already
    promoted count against that, so a promoted spare that is itself slow brings in no further one.

    Parameters
    ----------
    known, failed, regular, promoted : arrays of bool, shape (N,)
        Shards with an outcome (a result or a failure); that failed; that run at the batch's priority from
        the start; spares already promoted.
    overtaken : bool

    Returns
    -------
    int
        The spares to promote now, >= 0 (the caller caps it by the spares left).

    Examples
    --------
    >>> regular = np.array([True, True, True, False])
    >>> none = np.zeros(4, dtype=bool)
    >>> spares_due(np.array([True, False, False, False]), none, regular, none, overtaken=True)
    2
    >>> spares_due(np.array([True, True, False, False]), np.array([False, True, False, False]), regular,
    ...            none, overtaken=False)
    1
    """
    regular = np.asarray(regular, dtype=bool)
    failed = np.asarray(failed, dtype=bool)
    promoted = np.asarray(promoted, dtype=bool)
    due = int((failed & (regular | promoted)).sum())
    if overtaken:
        due += int((regular & ~np.asarray(known, dtype=bool)).sum())
    return max(0, due - int(promoted.sum()))


def _groups_covered_time(sorted_t: list[float], order: list[int], groups: tuple[int, ...]) -> float:
    """Earliest time at which every group has at least one finite arrival (inf if never)."""
    first: dict[int, float] = {}
    for t, n in zip(sorted_t, order):
        if t == math.inf:
            break
        first.setdefault(groups[n], t)
    if len(first) < len(set(groups)):
        return math.inf
    return max(first.values())


def _adaptive_time(finite: list[float], policy: CutoffPolicy) -> float:
    """Earliest time the adaptive (quantile/multiplier) rule fires, inf if never."""
    if policy.quantile is None:
        return math.inf
    q = max(1, math.ceil(policy.quantile * policy.num_workers))
    return _rule_time(finite, q, policy.multiplier, policy.min_runtime)


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
    t = np.asarray(first, dtype=float)
    launch = np.asarray(launch, dtype=float)
    failed = np.asarray(failed, dtype=bool)
    if launch.shape != (rule.copies + 1, t.size) or failed.shape != launch.shape:
        raise ValueError(f"launch and failed: got shapes {launch.shape} and {failed.shape}; expected "
                         f"({rule.copies + 1}, {t.size})")
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


def cutoff_time(arrivals: np.ndarray, policy: CutoffPolicy) -> CutoffDecision:
    """The earliest time the policy fires if no result beyond ``arrivals`` ever comes.

    Parameters
    ----------
    arrivals : array of float, shape (N,)
        Seconds since the batch start at which each shard's result arrived; ``inf`` (or NaN) for a shard
        that failed or has not arrived (yet).
    policy : CutoffPolicy

    Returns
    -------
    CutoffDecision
        ``time`` is ``inf`` when nothing can fire without more results.

    Raises
    ------
    ValueError
        ``arrivals`` not of shape (N,).

    Notes
    -----
    Called on every shard event of every batch in flight, so it works on Python floats: for the N of
    a coded batch (tens to a few thousand) that is several times faster than NumPy's per-call overhead.
    """
    t = np.asarray(arrivals, dtype=float)
    if t.shape != (policy.num_workers,):
        raise ValueError(f"arrivals: got shape {t.shape}; expected ({policy.num_workers},)")
    times = [math.inf if x != x else x for x in t.tolist()]  # NaN: no result, as inf
    if len(times) <= 64:
        order = sorted(range(len(times)), key=times.__getitem__)  # stable, as np.argsort(kind="stable")
    else:
        order = np.argsort(np.asarray(times), kind="stable").tolist()
    sorted_t = [times[n] for n in order]
    n_finite = bisect.bisect_left(sorted_t, math.inf)
    finite = sorted_t[:n_finite]

    time, reason = math.inf, None
    candidates: list[tuple[float, Reason]] = []
    if policy.wait_for <= n_finite:
        candidates.append((finite[policy.wait_for - 1], "wait_for"))
    if policy.groups is not None:
        candidates.append((_groups_covered_time(sorted_t, order, policy.groups), "wait_for"))
    if policy.deadline is not None:
        candidates.append((float(policy.deadline), "deadline"))
    candidates.append((_adaptive_time(finite, policy), "adaptive"))
    time, reason = min(candidates, key=lambda c: c[0])
    if time == math.inf:
        return CutoffDecision(math.inf, None, n_finite)
    # A rule firing after the last finite arrival is "exhausted" when nothing else can come: decided by
    # the caller, which knows whether results are still outstanding.
    n = bisect.bisect_right(finite, time)
    if n >= policy.min_results:
        return CutoffDecision(time, reason, n)
    if policy.on_shortfall == "wait":
        if policy.min_results <= n_finite:
            later = finite[policy.min_results - 1]
            return CutoffDecision(later, reason, bisect.bisect_right(finite, later))
        return CutoffDecision(math.inf, None, n_finite)
    return CutoffDecision(time, reason, n, shortfall=True, failed=policy.on_shortfall == "fail")


def decide(
    arrivals: np.ndarray,
    policy: CutoffPolicy,
    *,
    now: float | None = None,
    horizon: float | None = None,
    outstanding: int | None = None,
    cutoff: CutoffDecision | None = None,
) -> CutoffDecision | None:
    """Return the final cutoff decision, or None when the batch must keep waiting.

    Parameters
    ----------
    arrivals : array of float, shape (N,)
        As in :func:`cutoff_time`; ``inf`` for failed shards and shards not (yet) known.
    policy : CutoffPolicy
    now : float, optional
        Wall clock mode: seconds since the batch start. Final when the cutoff time is ``<= now``.
    horizon : float, optional
        Virtual clock mode: the smallest injected latency among shards whose outcome is unknown
        (``inf`` when all are known). Final when the cutoff time is ``< horizon``.
    outstanding : int, optional
        Shards whose outcome is unknown. When 0, the decision is final whatever the rules say: the batch
        keeps what it has ("exhausted").
    cutoff : CutoffDecision, optional
        ``cutoff_time(arrivals, policy)`` if the caller has it already (it is not computed again).

    Returns
    -------
    CutoffDecision or None
    """
    if (now is None) == (horizon is None):
        raise ValueError("decide: give exactly one of now= (wall clock) or horizon= (virtual clock)")
    d = cutoff_time(arrivals, policy) if cutoff is None else cutoff
    if now is not None and d.time <= now:
        return d
    if horizon is not None and d.time < horizon:
        return d
    if outstanding == 0:
        t = np.asarray(arrivals, dtype=float)
        finite = t[np.isfinite(t)]
        last = float(finite.max()) if finite.size else 0.0
        n = int(finite.size)
        short = n < policy.min_results
        return CutoffDecision(last, "exhausted", n, shortfall=short, failed=short and policy.on_shortfall == "fail")
    return None
