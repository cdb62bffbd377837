"""The window of batches in flight (pure): when it takes more batches, which of them are overtaken or take their
turn for backups, and how long a run waits once every worker is gone. The driver
(:class:`~.executor.BatchRunner`) keeps one :class:`Window` per run and one :class:`WorkerLoss`; batches are
named by ``seq``, the order of their submission (batch numbers may have gaps after a resume). No clock is read
here and nothing imports Dask: the time comes in with each call (docs/architecture.rst, 'The batch machine').
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["Window", "WorkerLoss", "priority", "refill_size", "takes_more", "turns"]


def refill_size(max_in_flight: int) -> int:
    """Batches submitted together once that many slots of the window are free (one graph update for all of
    them, not one per batch): a quarter of `max_in_flight`, at least 1."""
    return max(1, max_in_flight // 4)


def takes_more(free: int, in_flight: int, max_in_flight: int) -> bool:
    """Whether the window submits more batches now: :func:`refill_size` slots are free, or none is in flight."""
    return free >= refill_size(max_in_flight) or not in_flight


def priority(seq: int, what: str, max_in_flight: int) -> int:
    """The Dask priority (higher runs first) of a task of the batch submitted `seq`-th, of a window of
    `max_in_flight`: ``"decode"`` above its shards, and so is ``"load"`` (the batch's one read, which its coded
    shards take); ``"shard"`` (regular shards, backup copies, promoted spares,
    rescued shards) in the order of submission; ``"spare"`` (lazy spares) below the shards of every batch in
    flight and above the next batches'; ``"background"`` (a reference, labels, a score: for the metrics only,
    never needed by a decode) below every spare.

    Examples
    --------
    >>> [priority(1, what, 4) for what in ("decode", "shard", "spare", "background")]
    [0, -1, -5, -10]
    """
    base = -int(seq)
    return {"decode": base + 1, "load": base + 1, "shard": base, "spare": base - max_in_flight,
            "background": base - 2 * max_in_flight - 1}[what]


def turns(waiting: Iterable[int], older_than: int | None = None) -> list[int]:
    """The batches (seqs) whose turn for backups of their late shards comes now, of those `waiting` for it (a
    scheme with ``cutoff.backups``, not cut yet): the oldest alone; with `older_than`, every one submitted
    before that seq (a later batch reached its cutoff first: they are overtaken). Only a batch whose turn has
    come launches backups, and its shards count as launched no earlier: the shards of the batches behind the
    oldest may wait for a thread behind its own, so their time since the batch's start is no sign of a slow
    worker."""
    waiting = sorted(waiting)
    if older_than is None:
        return waiting[:1]
    return [seq for seq in waiting if seq < older_than]


class Window:
    """Which batch reached its cutoff last, per scheme: a batch submitted before it and still waiting is
    overtaken (its spares run at its own priority, :func:`~.spares.spares_due`)."""

    def __init__(self) -> None:
        self.decided: dict[str, int] = {}  # per scheme: the latest batch (its seq) that reached its cutoff

    def overtaken(self, scheme: str, seq: int) -> bool:
        """Whether a batch submitted later than `seq` has reached its cutoff for `scheme`."""
        return self.decided.get(scheme, -1) > seq

    def cut(self, scheme: str, seq: int) -> bool:
        """Batch `seq` reached its cutoff for `scheme`: True when it is the latest so far (the batches before it
        that still wait are then overtaken), False when a later one had reached it first."""
        if seq <= self.decided.get(scheme, -1):
            return False
        self.decided[scheme] = seq
        return True


class WorkerLoss:
    """The run's wait once every worker is gone: it says so, says when workers are back, and stops the run
    when none came back within `timeout` seconds (``cluster.connect_timeout``)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = float(timeout)
        self.since: float | None = None  # when the last worker was seen gone (None: workers are there)

    def step(self, workers: int, now: float) -> str | None:
        """`workers` are there at `now`: ``"back"`` (workers came back after none was there), ``"gone"`` (the
        first look without any), ``"stop"`` (none for longer than the timeout), or None (nothing new)."""
        if workers:
            back, self.since = self.since is not None, None
            return "back" if back else None
        if self.since is None:
            self.since = now
            return "gone"
        return "stop" if now - self.since > self.timeout else None
