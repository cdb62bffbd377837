"""Calls to the scheduler and to every worker that do not wait for frozen workers: which workers have missed
their heartbeats, a call made again without them, plugins removed, thread slots, the scheduler's
``allowed-failures``, and a function run once on a worker.
"""

from __future__ import annotations

import logging
from typing import Callable

from gcc_dask.errors import ClusterError

logger = logging.getLogger("gcc_dask.runtime.cluster")  # (the name its messages had before the split)


class DebugOnly(logging.Filter):
    """A logging filter that drops the records whose message ``drop(text)`` picks, logging them at DEBUG level
    instead: noise about events a run handles and reports itself, in its own line."""

    def __init__(self, drop: Callable[[str], bool]) -> None:
        super().__init__()
        self.drop = drop

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # pragma: no cover - a record whose arguments do not format
            return True
        if self.drop(text):
            logger.debug("%s", text)
            return False
        return True


def _accepts_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def frozen_workers(client, silent_after: float) -> set[str]:
    """The workers whose latest heartbeat is more than `silent_after` seconds older than the newest worker's,
    on the scheduler's clock (``last_seen``): frozen, stopped or swapping hard. One call to the scheduler."""
    def behind(dask_scheduler, silent_after):  # runs on the scheduler (shipped by value)
        seen = {a: ws.last_seen for a, ws in dask_scheduler.workers.items()}
        newest = max(seen.values(), default=0.0)
        return sorted(a for a, t in seen.items() if newest - t > silent_after)

    return set(client.run_on_scheduler(behind, silent_after=silent_after))


def past_frozen(client, call, frozen: set[str] | None = None):
    """``call(workers)`` for a client call that waits for each of `workers` (``client.run``, a plugin's
    registration), not held by a frozen worker: ``(its value, the workers it left out)``.

    The call runs in a thread of its own with ``workers=None`` (every worker), or the workers not in `frozen`
    when some are given. While it waits, the workers' heartbeats are read once a heartbeat interval; once a
    worker has missed :data:`~gcc_dask.runtime.liveness.MISSED_HEARTBEATS` of them
    (:func:`frozen_workers`), the wait stops and the call is made again for the others (the first one goes on
    in its thread and ends when that worker answers or dies). A frozen worker used to hold a run's set-up for
    as long as it stayed frozen (docs/pipeline.rst, section 'Unresponsive workers'). An error of `call` is
    raised here.
    """
    import threading

    from gcc_dask.runtime.liveness import MISSED_HEARTBEATS, heartbeat_interval

    frozen = set(frozen or ())
    while True:
        box: dict = {}
        done = threading.Event()
        every = set(client.scheduler_info().get("workers", {}))
        workers = sorted(every - frozen) if frozen else None

        def target(workers=workers):
            try:
                box["value"] = call(workers)
            except BaseException as e:  # raised in the caller's thread
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=target, name="gcc-dask-setup", daemon=True).start()
        beat = heartbeat_interval(max(1, len(every)))
        new: set[str] = set()
        while not done.wait(beat):
            new = frozen_workers(client, MISSED_HEARTBEATS * beat) - frozen
            if new:
                break
        if done.is_set():
            if "error" in box:
                raise box["error"]
            return box["value"], frozen
        logger.info("workers %s missed %d heartbeats: not waited for", sorted(new), MISSED_HEARTBEATS)
        frozen |= new


def remove_plugins(client, prefix: str, frozen: set[str] | None = None) -> list[str]:
    """Unregister every worker plugin whose name starts with `prefix`, on the scheduler (so that new workers do
    not get it) and on the workers (their :meth:`teardown` runs); the names removed.

    The workers in `frozen` are not asked, nor waited for (:func:`past_frozen`); the ones found frozen on the
    way are added to it.

    A run on a store removes the plugins of earlier runs on the same store whose driver died without removing
    them (``gcc-dask-<store>-``, :func:`gcc_dask.pipeline.run_pipeline`): their tasks still running then write
    nothing. Nothing else holds such a name: one driver at a time writes a store (its lock).
    """
    def on_workers(dask_worker, prefix=prefix):
        return [n for n in dask_worker.plugins if n.startswith(prefix)]

    def on_scheduler(dask_scheduler, prefix=prefix):
        return [n for n in dask_scheduler.worker_plugins if n.startswith(prefix)]

    async def remove_here(dask_worker, names):
        for n in names:
            if n in dask_worker.plugins:
                await dask_worker.plugin_remove(n)

    frozen = set() if frozen is None else frozen

    def run(func, **kwargs):  # on every worker but the frozen ones
        value, found = past_frozen(client, lambda workers: client.run(func, workers=workers, **kwargs), frozen)
        frozen.update(found)
        return value

    try:
        registered = set(client.run_on_scheduler(on_scheduler))
        everywhere = registered | {n for names in run(on_workers).values() for n in names}
    except Exception:  # pragma: no cover - a scheduler that cannot answer: nothing to clean up here
        logger.debug("could not list the worker plugins", exc_info=True)
        return []
    for name in sorted(registered):
        try:  # (on the scheduler, which then tells the workers; a frozen one is not waited for)
            _, found = past_frozen(client, lambda workers, name=name: client.unregister_worker_plugin(name), frozen)
            frozen.update(found)
        except Exception:  # pragma: no cover - removed meanwhile
            logger.debug("could not unregister plugin %s", name, exc_info=True)
    left = sorted(everywhere - registered)
    if left:  # installed on workers only (their scheduler forgot it): remove them there
        try:
            run(remove_here, names=left)
        except Exception:  # pragma: no cover
            logger.debug("could not remove plugins %s from the workers", left, exc_info=True)
    return sorted(everywhere)


def thread_slots(client) -> int:
    """Worker threads of the cluster, all workers together (0 when it has none)."""
    try:
        return int(sum(client.nthreads().values()))
    except Exception:  # pragma: no cover - a scheduler that cannot answer
        return 0


def allowed_failures(client) -> int | None:
    """The scheduler's ``distributed.scheduler.allowed-failures``: how often it re-runs a task whose worker died
    before it gives up (``KilledWorker``). None when the scheduler cannot be asked (it refuses pickled code)."""
    try:
        value = client.run_on_scheduler(_scheduler_allowed_failures)
    except Exception:
        return None
    return None if value is None else int(value)


def _scheduler_allowed_failures(dask_scheduler=None):
    return getattr(dask_scheduler, "allowed_failures", None)


#: seconds a wait of :func:`~gcc_dask.runtime.cluster_map.map_on_cluster` and :func:`run_on_cluster` gives
#: workers to come back once every one is gone (the pipeline passes ``cluster.connect_timeout``)
WORKER_TIMEOUT = 10.0


class _WorkerWatch:
    """Ends a wait on a cluster that has lost every worker (or its scheduler): :meth:`check`, called at least once
    a second while tasks are out, raises a :class:`ClusterError` line once no worker has been there for
    `timeout` seconds (their tasks would wait in the scheduler's ``no-worker`` state for ever), or at once when
    the scheduler cannot be reached. `what` names the work (``"composing the samples"``)."""

    def __init__(self, client, timeout: float, what: str) -> None:
        self.client, self.timeout, self.what = client, float(timeout), what
        self.since: float | None = None

    def check(self) -> None:
        import time

        try:
            workers = self.client.scheduler_info().get("workers") or {}
        except Exception as e:  # the scheduler is gone (OSError, CommClosedError, "ConnectionPool is closed")
            raise scheduler_lost_error(self.client, self.what, e) from None
        if workers:
            self.since = None
            return
        now = time.monotonic()
        if self.since is None:
            self.since = now
            logger.warning("every Dask worker is gone while %s; waiting up to %g s for workers to come back",
                           self.what, self.timeout)
        elif now - self.since > self.timeout:
            raise ClusterError(f"cluster: every Dask worker was lost while {self.what} and none came back within "
                               f"{self.timeout:g} s (cluster.connect_timeout); start workers (or a new cluster) and "
                               "run the same command again")


def scheduler_lost_error(client, what: str, exc: BaseException | None = None) -> ClusterError:
    """The one line for a scheduler lost while `what` (``"composing the samples"``) went on."""
    try:
        address = client.scheduler.address
    except Exception:
        address = None
    why = f" ({type(exc).__name__})" if exc is not None else ""
    return ClusterError(f"cluster: lost the connection to the Dask scheduler at {address!r} while {what}{why}; run "
                        "the same command again once the scheduler is back (the store resumes)")


def _scheduler_gone(client, exc: BaseException) -> bool:
    """Whether `exc`, raised by a call to `client`, is its scheduler gone (not a bug of the caller)."""
    from distributed.client import ClosedClientError
    from distributed.comm import CommClosedError

    if isinstance(exc, (ClosedClientError, CommClosedError)):
        return True
    if getattr(client, "status", "running") != "running":  # reconnecting, closing or closed
        return True
    text = str(exc)
    return "ConnectionPool is closed" in text or "scheduler-connection-lost" in text


def run_on_cluster(client, func, *args, worker_timeout: float = WORKER_TIMEOUT, what: str = "a task of the run ran"):
    """``func(*args)`` as one Dask task (e.g. a read of a source that only the workers read); its result, or its
    exception raised here. Every worker gone for `worker_timeout` s, or the scheduler lost, or the task's worker
    dead, is one :class:`~gcc_dask.errors.ClusterError` line (the task would otherwise wait for ever)."""
    from distributed import KilledWorker, wait

    watch = _WorkerWatch(client, worker_timeout, what)
    try:
        future = client.submit(func, *args, pure=False)
        try:
            while True:
                try:
                    with client.as_current():
                        wait([future], timeout=1.0)
                    break
                except TimeoutError:
                    watch.check()
            return future.result()
        finally:
            if future.status == "pending":
                client.cancel([future])
    except ClusterError:
        raise
    except KilledWorker:
        raise ClusterError(f"cluster: the worker running {getattr(func, '__name__', func)!r} died while {what} "
                           "(KilledWorker); check the workers' memory and logs, then run the same command again") \
            from None
    except Exception as e:
        if _scheduler_gone(client, e):
            raise scheduler_lost_error(client, what, e) from None
        raise
