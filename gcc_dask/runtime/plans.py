"""What a run plans for each scheme (:class:`SchemePlan`) and where each batch in flight stands (its state per
scheme), as the driver loop (:mod:`gcc_dask.runtime.executor`) keeps them. Pure data: no Dask call here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gcc_dask.runtime.cutoff import CutoffPolicy, Speculation, needed_results

__all__ = ["SchemePlan"]

INF = math.inf


@dataclass(frozen=True)
class SchemePlan:
    """One scheme of a run: its name, its number of shards N, its cutoff policy, and the order in which its
    shards are preferred (:func:`~gcc_dask.coding.points.spread_order`; None: index order). With lazy
    spares the first :func:`~.cutoff.needed_results` shards of ``order`` run at the batch's priority.

    With ``speculation`` (the ``speculative`` scheme: N = (copies + 1)·K, ``policy.groups[n] = n mod K``)
    shards 0..K-1 are the originals, the only shards submitted with the batch, and shard c·K + k is backup
    copy c of original k, submitted when :func:`~.backups.backups_due` says so.

    With ``backups`` (``cutoff.backups``, a scheme that stops at a cutoff, on the wall clock), a shard the
    cutoff cannot do without that is late by that rule gets one backup copy on another worker
    (:func:`~.late_shards.late_shards_due`); the first copy to arrive is the shard's result."""

    name: str
    num_workers: int
    policy: CutoffPolicy
    order: tuple[int, ...] | None = None
    speculation: Speculation | None = None
    backups: Speculation | None = None

    def __post_init__(self) -> None:
        if self.speculation is not None:
            g = self.policy.groups
            m = self.speculation.copies + 1
            k = self.num_workers // m
            if self.num_workers % m or g is None or tuple(g) != tuple(n % k for n in range(self.num_workers)):
                raise ValueError(f"plan {self.name!r}: speculation with {m - 1} backup copies needs N = {m}K "
                                 f"shards with groups n mod K; got N = {self.num_workers}, groups {g!r}")

    @property
    def num_inputs(self) -> int:
        """K of a plan with backups (N / (copies + 1)); N otherwise."""
        if self.speculation is None:
            return self.num_workers
        return self.num_workers // (self.speculation.copies + 1)

    @property
    def waits_for_all(self) -> bool:
        """The cutoff keeps every result (no deadline, no adaptive rule, all N needed): no decision to take,
        so the batch's decode is submitted with its shards (:meth:`BatchRunner._submit_direct`)."""
        p = self.policy
        return needed_results(p) == self.num_workers and p.deadline is None and p.quantile is None

    def regular(self, lazy: bool) -> np.ndarray:
        """Bool mask (N,): the shards that run at the batch's priority (all of them unless ``lazy``; with
        ``speculation``, the K originals, whatever ``lazy``)."""
        mask = np.ones(self.num_workers, dtype=bool)
        if self.speculation is not None:
            mask[self.num_inputs:] = False
        elif lazy:
            order = np.arange(self.num_workers) if self.order is None else np.asarray(self.order)
            mask[:] = False
            mask[order[:needed_results(self.policy)]] = True
        return mask


@dataclass
class _SchemeState:
    plan: SchemePlan
    start_wall: float
    start_mono: float
    delays: np.ndarray | None  # injected latencies (slept by the shards), or None
    virtual: bool = False  # the cutoff runs on the virtual clock of ``delays``
    shards: list = field(default_factory=list)
    arrivals: np.ndarray = None  # type: ignore[assignment]
    known: np.ndarray = None  # type: ignore[assignment]
    failed: np.ndarray = None  # type: ignore[assignment]
    decode: Any = None
    score: Any = None  # the score task joining the decode with the reference (runs with a reference only)
    done: bool = False
    result: dict | None = None
    attempt: int = 0  # submissions of this scheme's decode (and score) lost with a worker so far
    restarts: int = 0  # times this scheme's shards were run again because the kept ones were lost
    rescues: int = 0  # times some of its shards were run again off a quiet worker (_rerun_quiet)
    received: list | None = None  # the kept shards, once the cutoff is final
    meta: dict | None = None
    wake: float | None = None  # wall clock: when to look at the cutoff again (monotonic); None: now
    promoted: np.ndarray = None  # type: ignore[assignment]  # spares resubmitted at the batch's priority
    direct: bool = False  # decode submitted with the shards, which are not watched (_submit_direct)
    sfx: str = ""  # key suffix of this submission of the scheme's shards
    launched: np.ndarray = None  # type: ignore[assignment]  # shards submitted (a plan's backups: when due)
    launch_s: np.ndarray = None  # type: ignore[assignment]  # when each shard was submitted (s since the start)
    vtimes: np.ndarray | None = None  # virtual clock: each shard's arrival (its delay; a backup's launch + delay)
    backup: dict = field(default_factory=dict)  # a cutoff's late shard -> its backup copy still running
    backed: np.ndarray = None  # type: ignore[assignment]  # shards given a backup copy (plan.backups)
    turn_s: float | None = None  # when its turn for backups came (s since the start; BatchRunner._give_turn)

    def __post_init__(self) -> None:
        n = self.plan.num_workers
        self.arrivals = np.full(n, INF)
        self.known = np.zeros(n, dtype=bool)
        self.failed = np.zeros(n, dtype=bool)
        self.promoted = np.zeros(n, dtype=bool)
        self.launched = np.ones(n, dtype=bool)
        self.launch_s = np.zeros(n)
        self.backed = np.zeros(n, dtype=bool)
        if self.delays is not None:
            self.vtimes = np.asarray(self.delays, dtype=float).copy()

    @property
    def backups(self) -> int:
        """Backup copies launched so far: a speculative plan's, or a cutoff's of its late shards."""
        if self.plan.speculation is None:
            return int(self.backed.sum())
        return int(self.launched[self.plan.num_inputs:].sum())


@dataclass
class _BatchState:
    batch: int
    n_real: int
    reference: Any
    schemes: dict[str, _SchemeState]
    attempt: int = 0  # resubmissions of the reference task lost with a worker so far
    seq: int = 0  # the order in which the batch was submitted: its priorities (batch numbers may have gaps)
    labels: Any = None  # without a reference: the task that writes the batch's labels
    labels_given_up: bool = False  # the labels task failed, and its failure was handled (_on_labels)

    @property
    def done(self) -> bool:
        # a failed labels task counts once its event is handled: it may stop the run (an unwritable store)
        labelled = self.labels is None or self.labels.status == "finished" or self.labels_given_up
        return labelled and all(s.done for s in self.schemes.values())
