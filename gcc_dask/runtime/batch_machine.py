"""One scheme's batch as a pure state machine: events in, actions out, on an injected clock.

The driver (:class:`~.executor.BatchRunner`) keeps one :class:`BatchMachine` per (batch, scheme) (owned by its
``_SchemeState``, :mod:`~.plans`). It turns the futures of Dask into the machine's events, and the machine's
actions into futures; every straggler decision is taken here, by the pure policy modules:

=================================  ==========================================================
decision                           policy
=================================  ==========================================================
the cutoff (N − S, deadline, ...)  :func:`~.cutoff.decide`, :func:`~.cutoff.cutoff_time`
backups of a speculative plan      :func:`~.backups.backups_due`, :func:`~.backups.backup_schedule`
backups of late shards             :func:`~.late_shards.late_shards_due`
lazy spares promoted               :func:`~.spares.spares_due`
quiet-worker rescue                :func:`~.rescue.shortfall`, :func:`~.rescue.awaited`
=================================  ==========================================================

States: ``waiting`` (shards running, no cutoff yet), ``cut`` (the kept shards are being decoded), ``done`` (the
scheme's record is made) and ``failed``. Times are seconds since the batch's start, passed in with each event
(``now``): no clock is read here, and nothing here imports Dask. On the virtual clock (``virtual``) a shard's
arrival is its drawn latency (``delays``), whatever ``now``.

Events (methods): :meth:`~BatchMachine.start`, :meth:`~BatchMachine.shard_finished`,
:meth:`~BatchMachine.shard_failed` (an erasure, never retried), :meth:`~BatchMachine.tick`,
:meth:`~BatchMachine.promote`, :meth:`~BatchMachine.take_turn`, :meth:`~BatchMachine.short_of`,
:meth:`~BatchMachine.decode_finished`, :meth:`~BatchMachine.decode_failed`, :meth:`~BatchMachine.score_failed`.
Actions (returned, in order): :class:`Submit`, :class:`Decode`, :class:`Copy`, :class:`BackUp`, :class:`Promote`,
:class:`Rescue`, :class:`Cut`, :class:`Redecode`, :class:`Restart`, :class:`Rescore`, :class:`Unscored`,
:class:`WatchShards`, :class:`Fail`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gcc_dask.runtime.backups import backup_schedule, backups_due
from gcc_dask.runtime.cutoff import cutoff_time, decide, needed_results
from gcc_dask.runtime.late_shards import late_shards_due
from gcc_dask.runtime.rescue import awaited, shortfall, spares_left
from gcc_dask.runtime.spares import spares_due

__all__ = [
    "BatchMachine", "Submit", "Decode", "Copy", "BackUp", "Promote", "Rescue", "Cut", "Redecode", "Restart",
    "Rescore", "Unscored", "WatchShards", "Fail", "MAX_ATTEMPTS", "WAITING", "CUT", "DONE", "FAILED",
]

INF = math.inf
#: submissions of a batch's reference or decode task (and runs of a scheme's batch), in all, when they die
#: with a worker
MAX_ATTEMPTS = 3

WAITING, CUT, DONE, FAILED = "waiting", "cut", "done", "failed"


@dataclass(frozen=True)
class Submit:
    """Submit shards `shards` (the batch's start): `regular` at the batch's priority, the others (lazy spares)
    below every batch in flight."""
    shards: tuple[int, ...]
    regular: tuple[int, ...]


@dataclass(frozen=True)
class Decode:
    """Submit the decode with the shards (a scheme that keeps every result): over `received`, not watching the
    shards; `cutoff_s` is known on the virtual clock only (NaN otherwise)."""
    received: tuple[int, ...]
    cutoff_s: float
    status: int = 1


@dataclass(frozen=True)
class Copy:
    """Submit the next backup copies of a speculative plan (shard ``c·K + k`` is copy c of input k)."""
    shards: tuple[int, ...]


@dataclass(frozen=True)
class BackUp:
    """Submit one backup copy of each late shard of `shards`, the originals left running; `first` is the
    batch's number of backups before these (where copy ``first + i`` runs: :func:`~.placement.backup_worker`)."""
    shards: tuple[int, ...]
    first: int


@dataclass(frozen=True)
class Promote:
    """Run these spares again at the batch's own priority (the low-priority ones cancelled)."""
    shards: tuple[int, ...]


@dataclass(frozen=True)
class Rescue:
    """Run these shards again elsewhere (they wait on a quiet worker and the cutoff cannot do without them); the
    ``rescue``-th rescue of the batch."""
    shards: tuple[int, ...]
    rescue: int


@dataclass(frozen=True)
class Cut:
    """The cutoff is final at `cutoff_s`: decode `received`, cancel the others; the store's `status` (1
    decoded, 2 deadline-decoded, 4 failed)."""
    received: tuple[int, ...]
    cutoff_s: float
    status: int


@dataclass(frozen=True)
class Redecode:
    """Decode the same kept shards again (the decode died with its worker)."""


@dataclass(frozen=True)
class Restart:
    """Run the scheme's batch again from its shards, new keys, same draws (kept shards lost with a worker)."""


@dataclass(frozen=True)
class Rescore:
    """Join the decoded batch with its reference again (the score, or the reference, died with its worker)."""


@dataclass(frozen=True)
class Unscored:
    """Keep the decode's record without metrics (no reference to score against)."""


@dataclass(frozen=True)
class WatchShards:
    """The decode submitted with the shards failed: watch the shards and let the cutoff decide."""


@dataclass(frozen=True)
class Fail:
    """The scheme's batch has no estimate."""
    reason: str


class BatchMachine:
    """The straggler logic of one scheme's batch (module docstring).

    Parameters
    ----------
    plan : SchemePlan
        The scheme (:class:`~.plans.SchemePlan`): N, its cutoff policy, order, ``speculation``, ``backups``.
    regular : bool array (N,) or None
        The shards run at the batch's priority (:meth:`~.plans.SchemePlan.regular`); None: all.
    delays : float array (N,) or None
        The injected latencies (the virtual clock's arrivals).
    virtual : bool
        Decide on the virtual clock of `delays`.
    restarts : int
        Times this scheme's batch was run again before (its keys say so).
    """

    def __init__(self, plan, regular: np.ndarray | None = None, delays: np.ndarray | None = None,
                 virtual: bool = False, restarts: int = 0) -> None:
        n = plan.num_workers
        self.plan = plan
        self.regular = np.ones(n, dtype=bool) if regular is None else regular
        self.delays = delays
        self.virtual = virtual
        self.restarts = restarts
        self.attempt = 0  # submissions of the decode (and score) lost with a worker so far
        self.rescues = 0  # times some shards ran again off a quiet worker
        self.phase = WAITING
        self.arrivals = np.full(n, INF)
        self.known = np.zeros(n, dtype=bool)
        self.failed = np.zeros(n, dtype=bool)
        self.promoted = np.zeros(n, dtype=bool)  # spares resubmitted at the batch's priority
        self.launched = np.ones(n, dtype=bool)  # shards submitted (a speculative plan's copies: when due)
        self.launch_s = np.zeros(n)  # when each shard was submitted
        self.backed = np.zeros(n, dtype=bool)  # shards given a backup copy (plan.backups)
        self.vtimes = None if delays is None else np.asarray(delays, dtype=float).copy()
        self.turn_s: float | None = None  # when its turn for backups of late shards came
        self.received: list[int] | None = None  # the kept shards, once cut
        self.direct = False  # decoded with its shards (no cutoff to decide)

    # -- what the machine knows ---------------------------------------------------------------------
    @property
    def backups(self) -> int:
        """Backup copies launched so far: a speculative plan's, or a cutoff's of its late shards."""
        if self.plan.speculation is None:
            return int(self.backed.sum())
        return int(self.launched[self.plan.num_inputs:].sum())

    def awaited(self) -> np.ndarray:
        """The shards a cutoff waits for (:func:`~.rescue.awaited`), bool (N,)."""
        return awaited(self.regular, self.promoted, self.known, self.failed)

    def spares_left(self) -> np.ndarray:
        """The spares left (:func:`~.rescue.spares_left`), bool (N,)."""
        return spares_left(self.regular, self.promoted, self.known, self.failed)

    def latency(self) -> np.ndarray:
        """Per shard: seconds from the batch's start to its result (NaN if none; on the virtual clock, the kept
        shards' only)."""
        if self.virtual:
            return np.where(np.isin(np.arange(self.plan.num_workers), self.received), self.arrivals, np.nan)
        return np.where(np.isfinite(self.arrivals), self.arrivals, np.nan)

    @property
    def wants_turn(self) -> bool:
        """Waiting with backups of late shards to launch once its turn comes."""
        return self.plan.backups is not None and self.phase == WAITING

    # -- events -------------------------------------------------------------------------------------
    def start(self) -> list:
        """The batch starts: the shards to submit, and for a scheme that keeps every result its decode."""
        plan, regular = self.plan, self.regular
        if plan.speculation is not None:
            self.launched = regular.copy()  # the originals; backups when due
            self.launch_s = np.where(regular, 0.0, INF)
            if self.virtual:
                self._schedule()
        ws = np.flatnonzero(self.launched).tolist()
        actions: list = [Submit(tuple(ws), tuple(w for w in ws if regular[w]))]
        if plan.waits_for_all:
            self.direct = True
            self.received = list(range(plan.num_workers))
            self.phase = CUT
            cutoff = float(cutoff_time(self.delays, plan.policy).time) if self.virtual else math.nan
            actions.append(Decode(tuple(self.received), cutoff))
        return actions

    def arrive(self, w: int, now: float) -> None:
        """Record shard `w`'s result at `now` (on the virtual clock: at its drawn time)."""
        self.known[w] = True
        self.arrivals[w] = self.vtimes[w] if self.virtual else now

    def erase(self, w: int) -> None:
        """Record shard `w` as an erasure (it raised, or was lost with its worker)."""
        self.known[w] = True
        self.failed[w] = True

    def shard_finished(self, w: int, now: float) -> list:
        """Shard `w`'s result arrived: record it, then :meth:`tick`."""
        if self.phase != WAITING or self.known[w]:
            return []
        self.arrive(w, now)
        return self.tick(now)[0]

    def shard_failed(self, w: int, now: float) -> list:
        """Shard `w` failed (an erasure, never retried): record it, :meth:`tick`, then :meth:`promote`."""
        if self.phase != WAITING or self.known[w]:
            return []
        self.erase(w)
        actions = self.tick(now)[0]
        return actions + self.promote(False, now)

    def tick(self, now: float) -> tuple[list, float]:
        """Look at the cutoff at `now`: the backups now due and, once it is final, the :class:`Cut`; and when to
        look again (seconds since the start; inf: not before another event)."""
        if self.phase != WAITING:
            return [], INF
        if self.plan.speculation is not None:
            actions, spec_wake = self._copies(now)
        elif self.plan.backups is not None:
            actions, spec_wake = self._back_up_late(now)
        else:
            actions, spec_wake = [], INF
        policy = self.plan.policy
        outstanding = int((~self.known & self.launched).sum())
        c = cutoff_time(self.arrivals, policy)
        if self.virtual:
            unknown = self.vtimes[~self.known & self.launched]
            horizon = float(unknown.min()) if unknown.size else INF
            d = decide(self.arrivals, policy, horizon=horizon, outstanding=outstanding, cutoff=c)
        else:
            d = decide(self.arrivals, policy, now=now, outstanding=outstanding, cutoff=c)
        if d is None:
            if self.virtual:
                return actions, INF
            return actions, min(c.time if math.isfinite(c.time) else INF, spec_wake)
        return actions + [self._cut(d)], INF

    def promote(self, overtaken: bool, now: float) -> list:
        """Spares to run at the batch's priority (:func:`~.spares.spares_due`): when a regular shard failed, or
        (`overtaken`) a batch submitted later has reached its cutoff first."""
        if self.phase != WAITING or self.plan.speculation is not None:
            return []  # (a speculative plan's copies come from tick)
        plan, regular = self.plan, self.regular
        waiting = np.flatnonzero(~regular & ~self.promoted & ~self.known)
        if waiting.size == 0:
            return []
        due = spares_due(self.known, self.failed, regular, self.promoted, overtaken)
        if not due:
            return []
        rank = {w: i for i, w in enumerate(plan.order or range(plan.num_workers))}
        groups = plan.policy.groups
        if groups is None:
            picked = sorted(waiting.tolist(), key=rank.__getitem__)[:due]
        else:
            # one result per group ends the wait: take the spares of the groups still in need first, those
            # without a result and (unless the batch is overtaken: then its running shards are the late ones)
            # without a shard still running for them
            hope = self.known & ~self.failed if overtaken else (regular | self.promoted) & ~self.failed
            covered = {groups[w] for w in np.flatnonzero(hope)}
            picked = sorted(waiting.tolist(), key=lambda w: (groups[w] in covered, rank[w]))[:due]
        self.promoted[picked] = True
        self.launch_s[picked] = now
        return [Promote(tuple(picked))]

    def take_turn(self, now: float) -> bool:
        """The batch's turn for backups of its late shards came at `now` (its shards count as launched no
        earlier); False when it had come already."""
        if self.turn_s is not None:
            return False
        self.turn_s = now
        return True

    def short_of(self, stuck: list[int], now: float) -> list:
        """Shards `stuck` on a quiet worker: those the cutoff cannot do without (:func:`~.rescue.shortfall`) run
        again elsewhere."""
        again = shortfall(needed_results(self.plan.policy), self.regular, self.promoted, self.known, self.failed,
                          stuck)
        if not again:
            return []
        self.rescues += 1
        self.launch_s[again] = now
        return [Rescue(tuple(again), self.rescues)]

    def decode_finished(self) -> None:
        """The decode (or its score) made the scheme's record."""
        if self.phase != FAILED:
            self.phase = DONE

    def decode_failed(self, error: str, killed: bool, lost: list[int] = ()) -> list:
        """The decode failed with `error` (its repr); `killed`: with its worker, `lost`: the kept shards lost with
        theirs. Watch the shards (decoded with them), run the batch again, decode again, or fail."""
        if self.direct:
            self.direct, self.received, self.phase = False, None, WAITING
            return [WatchShards()]
        if killed:
            if lost and self.restarts + 1 < MAX_ATTEMPTS:
                return [Restart()]
            if self.attempt + 1 < MAX_ATTEMPTS:
                self.attempt += 1
                return [Redecode()]
        return [self.fail(f"decode failed: {error}")]

    def score_failed(self, killed: bool, decoded: bool) -> list:
        """The score (the decoded batch joined with its reference) failed; `killed`: with its worker (or the
        reference's, or the decode's record's), `decoded`: the decode's record is still there. Decode again (then
        score), score again, or keep the record without metrics (at most :data:`MAX_ATTEMPTS` tries)."""
        if killed and self.attempt + 1 < MAX_ATTEMPTS:
            self.attempt += 1
            return [Rescore()] if decoded else [Redecode()]
        return [Unscored()]

    def fail(self, reason: str) -> Fail:
        """The scheme's batch has no estimate."""
        self.phase = FAILED
        return Fail(reason)

    # -- decisions ----------------------------------------------------------------------------------
    def _schedule(self) -> np.ndarray:
        """Virtual clock: mark launched the copies :func:`~.backups.backup_schedule` launches on the draws and the
        failures known so far, with their virtual launch and arrival times; return them."""
        k, rule = self.plan.num_inputs, self.plan.speculation
        m = rule.copies + 1
        launch, arrival = backup_schedule(np.asarray(self.delays, dtype=float).reshape(m, k), rule,
                                          failed=self.failed.reshape(m, k))
        new = np.isfinite(launch.ravel()) & ~self.launched
        self.launched[new] = True
        self.launch_s[new] = launch.ravel()[new]
        self.vtimes[new] = arrival.ravel()[new]
        return np.flatnonzero(new)

    def _copies(self, now: float) -> tuple[list, float]:
        """A speculative plan's copies now due (:func:`~.backups.backups_due`), and when to look again."""
        plan = self.plan
        k, m = plan.num_inputs, plan.speculation.copies + 1
        first = np.where(self.failed, INF, self.arrivals).reshape(m, k).min(axis=0)
        launch = self.launch_s.reshape(m, k)
        failed = self.failed.reshape(m, k)
        if self.virtual:  # the schedule again, with the failures reported so far: the copies they call for
            ws = self._schedule().tolist()
            t_due = INF
        else:
            due, t_due = backups_due(first, launch, failed, now, plan.speculation)
            copy = np.isfinite(launch[:, due]).sum(axis=0)  # the next copy of each input due
            ws = (copy * k + due).tolist()
            if ws:
                self.launched[ws] = True
                self.launch_s[ws] = now
                _, t_due = backups_due(first, launch, failed, now, plan.speculation)  # with the new copies' turn
        actions = [Copy(tuple(ws))] if ws else []
        return actions, (INF if self.virtual or not math.isfinite(t_due) else t_due)

    def _back_up_late(self, now: float) -> tuple[list, float]:
        """One backup copy of each late shard the cutoff cannot do without (:func:`~.late_shards.late_shards_due`),
        once the batch's turn came; and when to look again."""
        if self.virtual or self.direct or self.turn_s is None:
            return [], INF
        due, t_due = late_shards_due(np.where(self.failed, INF, self.arrivals),
                                     np.maximum(self.launch_s, self.turn_s), self.awaited(), self.backed,
                                     self.spares_left(), needed_results(self.plan.policy), now, self.plan.backups)
        actions = []
        if due.size:
            actions.append(BackUp(tuple(due.tolist()), int(self.backed.sum())))
            self.backed[due] = True
        return actions, (t_due if math.isfinite(t_due) else INF)

    def _cut(self, d) -> Cut:
        """The cutoff `d` is final: the kept shards (a speculative plan: the first copy of each input) and the
        store's status."""
        plan = self.plan
        received = [w for w in range(plan.num_workers) if self.arrivals[w] <= d.time and not self.failed[w]]
        if plan.speculation is not None:  # the first copy of each input wins (copy c of input k is shard k + c·K)
            first: dict[int, int] = {}
            for w in received:
                k = w % plan.num_inputs
                if k not in first or self.arrivals[w] < self.arrivals[first[k]]:
                    first[k] = w
            received = sorted(first.values())
        if d.failed:
            status = 4
        elif d.reason in ("wait_for",) and not d.shortfall:
            status = 1
        elif d.reason == "exhausted" and len(received) >= plan.policy.wait_for:
            status = 1
        else:
            status = 2
        self.received = received
        self.phase = CUT
        return Cut(tuple(received), float(d.time), status)
