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
from gcc_dask.runtime.backups import (  # noqa: F401  (Spark's rule, importable from here as before)
    Speculation, _rule_fire, _rule_time, backup_schedule, backup_threshold, backup_time, backups_due,
)

__all__ = ["CutoffPolicy", "CutoffDecision", "Speculation", "backup_schedule", "backup_threshold", "backup_time",
           "backups_due", "cutoff_time", "decide", "needed_results", "resolve_wait_for"]

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
