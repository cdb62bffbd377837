"""What a run plans for each scheme (:class:`SchemePlan`) and where each batch in flight stands (its state per
scheme, with the :class:`~.batch_machine.BatchMachine` that takes its straggler decisions), as the driver loop
(:mod:`gcc_dask.runtime.executor`) keeps them. Pure data: no Dask call here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gcc_dask.runtime.batch_machine import DONE, FAILED, INF, MAX_ATTEMPTS, BatchMachine
from gcc_dask.runtime.cutoff import CutoffPolicy, Speculation, needed_results

__all__ = ["SchemePlan", "INF", "MAX_ATTEMPTS", "clock_and_spares", "draw_delays"]


def clock_and_spares(latency_model: Any, virtual_clock: bool, spares: str) -> tuple[bool, bool]:
    """A run's clock and spares: whether its cutoffs run on the virtual clock (`virtual_clock` asked for, and a
    latency model that draws the shards' arrivals), and whether its spares are lazy (``spares: lazy``, on the wall
    clock only: on the virtual clock a spare's start would depend on the wall clock).

    >>> model = object()
    >>> [clock_and_spares(m, virtual, "lazy") for m, virtual in [(model, True), (None, True), (model, False)]]
    [(True, False), (False, True), (False, True)]

    Raises
    ------
    ValueError
        If `spares` is neither ``"lazy"`` nor ``"eager"``.
    """
    if spares not in ("lazy", "eager"):
        raise ValueError(f"spares: got {spares!r}; expected 'lazy' or 'eager'")
    virtual = latency_model is not None and bool(virtual_clock)
    return virtual, spares == "lazy" and not virtual


def draw_delays(latency_model: Any, seed: int, batch: int, num_workers: int, work: float) -> np.ndarray | None:
    """The latencies injected into a batch's `num_workers` shards (seconds, float (N,)), drawn per (`seed`, `batch`,
    shard) by `latency_model` for shards of `work` (the batch's groups with per-sample latencies, else 1); None
    without a latency model (nothing injected)."""
    if latency_model is None:
        return None
    return np.asarray(latency_model.latencies(seed, batch, num_workers, work=work), dtype=float)


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


class _SchemeState:
    """One scheme's batch in flight, as the driver keeps it: its futures (``shards``, ``backup``, ``decode``,
    ``score``), its record, and its :class:`~.batch_machine.BatchMachine` (``machine``), which takes every
    straggler decision. The machine's state (``arrivals``, ``known``, ``failed``, ``promoted``, ``launched``,
    ``launch_s``, ``vtimes``, ``backed``, ``turn_s``, ``received``, ``direct``, ``attempt``, ``restarts``,
    ``rescues``, ...) reads and writes through to it."""

    def __init__(self, plan: SchemePlan, start_wall: float, start_mono: float, delays: np.ndarray | None,
                 virtual: bool = False, restarts: int = 0, regular: np.ndarray | None = None) -> None:
        self.plan = plan
        self.start_wall = start_wall
        self.start_mono = start_mono
        self.machine = BatchMachine(plan, regular=regular, delays=delays, virtual=virtual, restarts=restarts)
        self.shards: list = []
        self.decode: Any = None
        self.score: Any = None  # the score task joining the decode with the reference (runs with a reference only)
        self.result: dict | None = None
        self.meta: dict | None = None
        self.wake: float | None = None  # wall clock: when to look at the cutoff again (monotonic); None: now
        self.sfx = ""  # key suffix of this submission of the scheme's shards
        self.backup: dict = {}  # a cutoff's late shard -> its backup copy still running

    @property
    def done(self) -> bool:
        """The scheme's record is made (or it failed)."""
        return self.machine.phase in (DONE, FAILED)

    @done.setter
    def done(self, value: bool) -> None:
        if value:
            self.machine.decode_finished()

    @property
    def backups(self) -> int:
        """Backup copies launched so far: a speculative plan's, or a cutoff's of its late shards."""
        return self.machine.backups


def _through(name: str) -> property:
    return property(lambda self: getattr(self.machine, name), lambda self, v: setattr(self.machine, name, v),
                    doc=f"The machine's ``{name}``.")


for _name in ("delays", "virtual", "arrivals", "known", "failed", "promoted", "launched", "launch_s", "vtimes",
              "backed", "turn_s", "received", "direct", "attempt", "restarts", "rescues"):
    setattr(_SchemeState, _name, _through(_name))
del _name


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
    load: Any = None  # the batch's one read (tasks.load_batch) its coded shards take; None: none in use
    load_key: str | None = None  # its key while the graph update that adds it is not sent yet
    load_by: set = field(default_factory=set)  # who took it: scheme names, and "inputs" (reference or labels)
    loads: int = 0  # reads submitted so far (a read let go on a quiet worker is submitted again, a key of its own)

    @property
    def done(self) -> bool:
        # a failed labels task counts once its event is handled: it may stop the run (an unwritable store)
        labelled = self.labels is None or self.labels.status == "finished" or self.labels_given_up
        return labelled and all(s.done for s in self.schemes.values())
