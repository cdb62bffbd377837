"""Unresponsive workers: a worker that stops sending heartbeats (frozen, SIGSTOPped, swapping hard) is ended,
as if it had died, so that its shards become erasures (docs/pipeline.rst, section 'Unresponsive workers').

A frozen worker process keeps its connections open: the results it holds cannot be fetched, the tasks it
runs never end, and nothing errs. The cutoff on the wall clock decodes around its shards (they never
arrive), but a batch whose reference, decode or score sits on it, or whose record is being fetched from it,
waits; on the virtual clock and for the exact schemes the batch waits for the shards themselves. The
scheduler's own remedy (``distributed.scheduler.worker-ttl``) takes 5 minutes by default.

:class:`HeartbeatWatch` is the detection, a pure function of the scheduler's ``last_seen`` times as the driver
samples them (tested without a cluster); :func:`end_worker` the remedy: the worker's nanny SIGKILLs its
process and starts a new one, exactly what a crashed worker gets; a worker without a nanny is removed from
the scheduler instead.

Before that, a worker that has missed :data:`MISSED_HEARTBEATS` heartbeats while others sent theirs is
*quiet* (:attr:`HeartbeatWatch.quiet`): it gets no new shards, and a batch that waits for a task on it (a kept
result it holds, an exact scheme's shard it runs, the batch's labels) is run again on the other workers
(:func:`keys_stuck_on` finds them; docs/pipeline.rst, section 'Unresponsive workers').
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

logger = logging.getLogger(__name__)

__all__ = ["MISSED_HEARTBEATS", "HeartbeatWatch", "end_worker", "heartbeat_interval", "keys_stuck_on"]

#: a worker counts as unresponsive only after at least this many heartbeat intervals without one
MISSED_HEARTBEATS = 3


def heartbeat_interval(n_workers: int) -> float:
    """Seconds between a worker's heartbeats in a cluster of `n_workers` (the scheduler asks for this)."""
    try:
        from distributed.scheduler import heartbeat_interval as dask_interval

        return float(dask_interval(n_workers))
    except Exception:  # pragma: no cover - moved in distributed: its documented default for small clusters
        return 0.5 if n_workers <= 10 else 1.0


class HeartbeatWatch:
    """Which workers have sent no heartbeat for ``after`` seconds, from samples of the scheduler's worker info.

    Parameters
    ----------
    after : float or None
        Seconds (``cluster.unresponsive_after``); at least :data:`MISSED_HEARTBEATS` heartbeat intervals are
        waited whatever it says. None: never.

    A worker's heartbeat time (``last_seen``, on the scheduler's clock) is compared with itself across samples,
    on the driver's clock, so the two clocks need not agree. Nothing counts as unresponsive while no worker's
    heartbeat has moved within the window: then the scheduler, the network or the driver is slow, not one
    worker; nor a worker whose heartbeat has not moved once since it was first seen: a worker that just
    joined sets up its plugins (the run's model, the composition) before its heartbeats start, and ending it
    then would end its replacement too. Each worker is reported once.
    """

    def __init__(self, after: float | None) -> None:
        self.after = None if after is None else float(after)
        self._seen: dict[str, tuple[Any, float]] = {}  # address -> (last_seen value, when it last moved)
        self._moved: set[str] = set()  # workers whose heartbeat moved at least once since first seen
        self.reported: set[str] = set()
        #: the workers quiet at the last sample: their last heartbeat MISSED_HEARTBEATS intervals older than
        #: another worker's, at this sample and the one before (a worker is quiet well before it is
        #: unresponsive; it leaves the set when a heartbeat comes)
        self.quiet: set[str] = set()
        self._behind: set[str] = set()  # the workers behind at the sample before

    def update(self, workers: Mapping[str, Mapping[str, Any]], now: float) -> list[tuple[str, float]]:
        """Take one sample (``scheduler_info()["workers"]``) at driver time `now` (monotonic seconds); return
        the workers newly found unresponsive, with the seconds since their last heartbeat."""
        seen = {}
        for address, info in workers.items():
            last = info.get("last_seen")
            prev = self._seen.get(address)
            # no last_seen (another distributed): always "moving", never unresponsive
            seen[address] = prev if prev is not None and last is not None and prev[0] == last else (last, now)
            if prev is not None and seen[address] is not prev:
                self._moved.add(address)
        self._seen = seen
        self.reported &= set(seen)
        self._moved &= set(seen)
        self.quiet = set()
        if self.after is None or len(seen) < 2:
            self._behind = set()
            return []
        beats = MISSED_HEARTBEATS * heartbeat_interval(len(seen))
        ages = {a: now - t for a, (_, t) in seen.items()}
        if all(age > beats for age in ages.values()):  # nobody's heartbeat moved: not one worker's fault
            self._behind = set()
            return []
        # quiet: on the scheduler's own clock, against the latest heartbeat of any worker (sooner than the ages
        # above, which count from the sample that first saw a heartbeat: up to one sampling interval late)
        stamps = {a: float(info["last_seen"]) for a, info in workers.items()
                  if isinstance(info.get("last_seen"), (int, float)) and not isinstance(info["last_seen"], bool)}
        newest = max(stamps.values(), default=0.0)
        behind = {a for a, t in stamps.items() if newest - t > beats and a in self._moved}
        # in two samples running: after a stall of the scheduler's loop the heartbeats it then takes in come one
        # by one, and for a moment every worker but the first looks behind
        self.quiet, self._behind = behind & self._behind, behind
        limit = max(self.after, beats)
        silent = {a: age for a, age in ages.items() if age > limit}
        if len(silent) == len(seen):
            return []
        new = [(a, age) for a, age in sorted(silent.items()) if a not in self.reported and a in self._moved]
        self.reported.update(a for a, _ in new)
        return new

    def suspect(self, addresses) -> None:
        """Take `addresses` as workers already seen behind (a run's set-up found them frozen,
        :func:`~gcc_dask.runtime.cluster.past_frozen`): quiet from the next sample on if they are still behind
        then, and ended once silent for ``after``, though their heartbeat has not moved since this watch began."""
        self._moved |= set(addresses)
        self._behind |= set(addresses)

    @property
    def behind(self) -> set[str]:
        """The workers behind at the latest sample (quiet if they still are at the next one)."""
        return set(self._behind)

    @property
    def unresponsive(self) -> set[str]:
        """The workers reported and still known to the scheduler (no shard is placed on them)."""
        return set(self.reported)


def end_worker(client, address: str, nanny: str | None) -> str:
    """End an unresponsive worker as if it had died; return what was done, for the log.

    With a nanny, the nanny SIGKILLs the worker's process (a frozen process cannot act on a polite request,
    and its open connections are closed only by its death) and starts a new one, as after a crash. Without
    one, the scheduler removes the worker (what ``distributed.scheduler.worker-ttl`` does).
    """
    if nanny:
        def kill(dask_worker):  # runs on the nanny; pickled by value (nothing to import there)
            import os
            import signal

            pid = dask_worker.pid
            if pid:
                os.kill(pid, signal.SIGKILL)
            return pid

        out = client.run(kill, workers=[address], nanny=True, on_error="return")
        result = next(iter(out.values()), None) if out else None
        if not isinstance(result, BaseException) and result:
            return f"its nanny killed process {result} and starts a new worker"
        logger.warning("the nanny of %s could not kill it (%r); removing it from the scheduler", address, result)

    async def remove(dask_scheduler, address):
        import time

        await dask_scheduler.remove_worker(address=address, stimulus_id=f"gcc-dask-unresponsive-{time.time()}",
                                           close=True)

    client.run_on_scheduler(remove, address=address)
    return "the scheduler removed it"


def keys_stuck_on(client, keys: list[str], workers: set[str]) -> set[str]:
    """The keys among `keys` that wait for one of `workers`: running there, or finished and held there only.

    One call to the scheduler (the function is shipped by value: the scheduler need not import gcc-dask). A
    key the scheduler no longer knows, or that some other worker holds, is not stuck.
    """
    def stuck(dask_scheduler, keys, workers):  # runs on the scheduler
        out = []
        for key in keys:
            ts = dask_scheduler.tasks.get(key)
            if ts is None:
                continue
            if ts.state == "processing" and ts.processing_on is not None:
                if ts.processing_on.address in workers:
                    out.append(key)
            elif ts.state == "memory" and ts.who_has and all(ws.address in workers for ws in ts.who_has):
                out.append(key)
        return out

    return set(client.run_on_scheduler(stuck, keys=list(keys), workers=sorted(workers)))
