"""The workers a run spreads its shards over, as the driver sees them (docs/pipeline.rst, 'Slots and placement').

:class:`WorkerList` asks the scheduler for its workers at most every :data:`WORKERS_TTL_S` seconds. The first
answer is awaited; every later question runs in a thread of its own and its answer is taken on a later call, so
the driver's loop never waits for a busy scheduler (``scheduler_info`` took 0.05-0.25 s a call with the
scheduler in the driver's process on 2 cores). Each answer is also a heartbeat sample: a worker that sent none
for ``cluster.unresponsive_after`` seconds is ended as if it had died (:mod:`~.liveness`) and gets no more
shards. The list notes when every worker seen before has gone and others took their place, which the driver
loop answers by running its batches in flight again (:meth:`~.executor.BatchRunner._restart_in_flight`).
"""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from gcc_dask.runtime.cluster import _accepts_n_workers
from gcc_dask.runtime.liveness import HeartbeatWatch, end_worker

logger = logging.getLogger(__name__)

__all__ = ["WORKERS_TTL_S", "WorkerList", "WorkersReplaced"]

#: seconds between refreshes of the worker list that shards are spread over (and checks that any are left)
WORKERS_TTL_S = 1.0


class WorkersReplaced(Exception):
    """Raised by a wait of the driver outside its loop (a record fetched alone, a decode run again) once every worker
    seen before is gone and others took their place (:attr:`WorkerList.replaced`): what it waits for may wait for
    ever, as a task placed on a gone worker is given to no new one. The loop then runs the batches in flight again
    (:meth:`~.executor.BatchRunner._restart_in_flight`)."""


class WorkerList:
    """The scheduler's workers that a run's shards may be placed on, refreshed off the driver's loop.

    Parameters
    ----------
    client : distributed.Client
    gpu : bool
        Keep only workers with a ``GPU`` resource.
    unresponsive_after : float or None
        Seconds without a heartbeat after which a worker is ended (:class:`~.liveness.HeartbeatWatch`); None:
        never.
    echo : callable, optional
        Where to tell the user that a worker was ended.
    ttl : float
        Seconds between two questions to the scheduler.

    Attributes
    ----------
    addresses : list of str
        The workers from the latest answer, sorted; empty when the scheduler could not be reached or has none.
    asked_at : float
        ``time.monotonic()`` of the latest question (``-inf`` before the first).
    replaced : bool
        Set when every worker seen before is gone and others are there; the caller clears it.
    """

    def __init__(self, client, *, gpu: bool = False, unresponsive_after: float | None = 5.0,
                 echo: Callable[[str], None] | None = None, ttl: float = WORKERS_TTL_S) -> None:
        self.client = client
        self.gpu = bool(gpu)
        self.ttl = float(ttl)
        self.echo = echo or (lambda _msg: None)
        self.addresses: list[str] = []
        self.asked_at = -math.inf
        self.replaced = False
        self._liveness = HeartbeatWatch(unresponsive_after)
        self._seen: set[str] = set()  # the last non-empty set of workers seen
        self._asker: ThreadPoolExecutor | None = None  # asks the scheduler, off the loop
        self._ender: ThreadPoolExecutor | None = None  # ends unresponsive workers, off the loop
        self._pending: Future | None = None  # the question under way
        self._unready: set[str] = set()  # workers without shards until ready (see unready)

    @property
    def quiet(self) -> set[str]:
        """The workers that missed :data:`~.liveness.MISSED_HEARTBEATS` heartbeats at the latest answer, and
        those not ready (:meth:`unready`); none of them in :attr:`addresses`: a batch waiting for a task on one
        of them runs again elsewhere."""
        return set(self._liveness.quiet) | self._unready

    @property
    def behind_heartbeats(self) -> set[str]:
        """The workers quiet because they missed their heartbeats (:attr:`quiet` less those not ready)."""
        return set(self._liveness.quiet)

    @property
    def unresponsive(self) -> set[str]:
        """The workers ended as unresponsive (:attr:`.liveness.HeartbeatWatch.unresponsive`)."""
        return self._liveness.unresponsive

    def unready(self, addresses) -> None:
        """Give `addresses` no shards until :meth:`ready` (workers left out of the run's set-up: they may not
        have the run's plugin yet)."""
        self._unready |= set(addresses)
        if self._unready:
            self.addresses = [a for a in self.addresses if a not in self._unready]

    def ready(self, addresses) -> None:
        """Workers :meth:`unready` before that may have shards again (from the next answer on)."""
        self._unready -= set(addresses)

    def suspect(self, addresses) -> None:
        """Workers the run's set-up found frozen (:meth:`.liveness.HeartbeatWatch.suspect`): no shards while they
        stay behind, and ended as any unresponsive worker."""
        self._liveness.suspect(addresses)

    @property
    def answered(self) -> bool:
        """Whether the question under way has its answer (the next :meth:`refresh` takes it)."""
        return self._pending is not None and self._pending.done()

    @property
    def due(self) -> bool:
        """Whether the next :meth:`refresh` would ask the scheduler again (``ttl`` seconds have passed)."""
        return time.monotonic() - self.asked_at > self._ttl

    @property
    def _ttl(self) -> float:
        """``ttl``, or a quarter of it while a worker is behind in one sample and not yet quiet (the second
        sample that makes it quiet comes sooner)."""
        return self.ttl / 4 if self._liveness.behind - self._liveness.quiet else self.ttl

    def refresh(self) -> list[str]:
        """Take the answer of the question under way if it has come, and ask again when ``ttl`` seconds have
        passed since the last question: awaited the first time, in a thread after that. Returns
        :attr:`addresses` (at most one question old)."""
        pending = self._pending
        if pending is not None and pending.done():
            self._pending = None
            self._take(*pending.result())
        now = time.monotonic()
        if now - self.asked_at <= self._ttl or self._pending is not None:
            return self.addresses
        first = not math.isfinite(self.asked_at)
        self.asked_at = now
        if first:
            self._take(*self._ask())
            return self.addresses
        if self._asker is None:
            self._asker = ThreadPoolExecutor(1, thread_name_prefix="gcc-dask-workers")
        self._pending = self._asker.submit(self._ask)
        return self.addresses

    def close(self) -> None:
        """Stop the threads without waiting for them (a question to a lost scheduler may hang)."""
        if self._ender is not None:
            self._ender.shutdown(wait=False)
        if self._asker is not None:
            self._asker.shutdown(wait=False, cancel_futures=True)
            self._asker, self._pending = None, None

    def _ask(self) -> tuple[dict | None, float]:
        """The scheduler's workers (``scheduler_info()["workers"]``; None when it cannot be reached), and when."""
        client = self.client
        try:
            info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
            return info.get("workers", {}), time.monotonic()
        except Exception:  # pragma: no cover - the scheduler is unreachable: count it as no workers
            return None, time.monotonic()

    def _take(self, workers: dict[str, Any] | None, now: float) -> None:
        """Apply an answer of :meth:`_ask`: end the unresponsive workers, keep the others (with a GPU when asked),
        and note when every worker seen before was replaced."""
        present: list[str] = []  # the workers there (quiet ones included), for `replaced`
        if workers is None:
            self.addresses = []
        else:
            for address, age in self._liveness.update(workers, now):
                self._end_unresponsive(address, age, workers[address].get("nanny"))
            present = sorted(a for a, ws in workers.items()
                             if (not self.gpu or ws.get("resources", {}).get("GPU", 0) > 0)
                             and a not in self._liveness.unresponsive)
            self.addresses = [a for a in present if a not in self.quiet]
        current = set(present)
        if current and self._seen and not current & self._seen:
            self.replaced = True
        if current:
            self._seen = current

    def _end_unresponsive(self, address: str, age: float, nanny: str | None) -> None:
        """A worker sent no heartbeat for `age` seconds: no more shards go to it, and it is ended as if it had
        died (:func:`~.liveness.end_worker`, in a thread of its own: a call to a frozen machine may hang), so
        that its shards become erasures and what it held is recomputed elsewhere."""
        self.echo(f"Dask worker {address} sent no heartbeat for {age:.0f} s (cluster.unresponsive_after): ending "
                  "it as if it had died; its shards are erasures")
        if self._ender is None:
            self._ender = ThreadPoolExecutor(1, thread_name_prefix="gcc-dask-unresponsive")

        def end():
            try:
                logger.warning("unresponsive worker %s: %s", address, end_worker(self.client, address, nanny))
            except Exception as e:  # the cluster is going away: nothing more to do
                logger.warning("could not end unresponsive worker %s: %r", address, e)

        self._ender.submit(end)
