""":func:`map_on_cluster`: ``[func(*shared, item) for item in items]`` as Dask tasks, in item order, with backup
copies of the late ones (Spark's rule) and of those held by frozen workers; what the composition's windows run
on (docs/pipeline.rst, section 'Unresponsive workers').
"""

from __future__ import annotations

import logging
from typing import Any

from gcc_dask.errors import ClusterError
from gcc_dask.runtime.cluster_calls import (
    WORKER_TIMEOUT, DebugOnly, _scheduler_gone, _WorkerWatch, frozen_workers, scheduler_lost_error,
)

logger = logging.getLogger("gcc_dask.runtime.cluster")  # (the name its messages had before the split)


#: times a task of :func:`map_on_cluster` is submitted when its worker dies under it (``KilledWorker``: the
#: embedded cluster never re-runs a lost task itself, ``allowed-failures: 0``)
MAP_ATTEMPTS = 3


class _Raised:
    """A :class:`~gcc_dask.errors.GccDaskError` a task of :func:`map_on_cluster` met, returned as its value: the
    driver raises it with its one line, and the worker logs no "Compute Failed" block for a user's error."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _returning_errors(func, *args):
    from gcc_dask.errors import GccDaskError

    try:
        return func(*args)
    except GccDaskError as e:
        return _Raised(e)


#: copies an item of :func:`map_on_cluster` may get beyond Spark's rule's (`speculation.copies`) when every copy it
#: has runs on workers that stopped answering: a copy placed while a worker froze (before it missed its heartbeats,
#: or while the item's original still queued on the scheduler) could land there beside the original, and the item,
#: at the rule's limit, waited for Dask's worker-ttl (5 minutes) to end the frozen worker
RESCUE_COPIES = 2

#: shared arguments of :func:`map_on_cluster` smaller than this (pickled, in all) travel with each task; larger
#: ones (an in-memory source) are scattered to every worker once per attempt
SHARED_BY_VALUE_BYTES = 1 << 20


def map_on_cluster(client, func, items, *shared, attempts: int = MAP_ATTEMPTS, speculation=None,
                   worker_timeout: float = WORKER_TIMEOUT, what: str = "a task of the run ran"):
    """``[func(*shared, item) for item in items]`` as Dask tasks, one per item, in item order, with backup
    copies of the late ones.

    The ``shared`` arguments (a source, a projection) travel with each task when they are small (under
    :data:`SHARED_BY_VALUE_BYTES` pickled: a Zarr or image source, a projection); larger ones (an in-memory
    source) are scattered once per attempt, to every worker, and passed to every task by reference, never
    pickled per task.

    A task late by Spark's rule (`speculation`, default :class:`~gcc_dask.runtime.backups.Speculation`: once
    3/4 of the items have a result, an item out for 1.5 x their median time and 100 ms) gets a backup copy
    on another worker than the one running it; the first copy to return wins and the other is cancelled (the
    tasks are pure functions of their inputs, so either is the result). A frozen or overloaded worker then
    holds the map for about 1.5 x a typical task, not until it resumes or is ended (docs/pipeline.rst,
    section 'Unresponsive workers').

    A task lost with its worker (``KilledWorker``) gets its copy at once; an item whose every copy was lost is
    submitted again, at most `attempts` times in all; a :class:`~gcc_dask.errors.GccDaskError` raised by `func`
    is raised here, as it is. Used by :func:`gcc_dask.composition.compose` for its windows.

    Every worker gone for `worker_timeout` s (their tasks would wait for ever), or the scheduler lost, ends the
    map with one :class:`~gcc_dask.errors.ClusterError` line naming `what` was under way.

    Raises
    ------
    ClusterError
        If an item's tasks were lost with their workers `attempts` times, every worker is gone, or the scheduler.
    """
    # results lost with a worker are this map's to submit again (or to end with one line when every worker is
    # gone): the client's "Couldn't gather N keys, rescheduling" warning about them is logged at DEBUG level
    quiet = DebugOnly(lambda text: text.startswith("Couldn't gather") and "_returning_errors" in text)
    client_log = logging.getLogger("distributed.client")
    client_log.addFilter(quiet)
    try:
        return _map_on_cluster(client, func, items, *shared, attempts=attempts, speculation=speculation,
                               watch=_WorkerWatch(client, worker_timeout, what))
    except ClusterError:
        raise
    except Exception as e:
        if _scheduler_gone(client, e):
            raise scheduler_lost_error(client, what, e) from None
        raise
    finally:
        client_log.removeFilter(quiet)


def _map_on_cluster(client, func, items, *shared, attempts: int, speculation, watch: _WorkerWatch):
    import functools

    from distributed.comm import CommClosedError

    from gcc_dask.runtime.cutoff import Speculation

    items = list(items)
    if not items:
        return []
    rule = Speculation() if speculation is None else speculation
    results: list = [None] * len(items)
    todo = list(range(len(items)))
    call = functools.partial(_returning_errors, func)
    by_value = _small(shared)
    for attempt in range(1, attempts + 1):
        scattered: list = []
        try:
            if not by_value:
                try:
                    scattered = client.scatter(list(shared), hash=False, broadcast=True)
                except (OSError, CommClosedError) as e:  # a worker died while it received them: try again
                    logger.info("scattering to the workers failed (%s); attempt %d of %d", e, attempt, attempts)
                    continue
            args = tuple(scattered) if scattered else shared
            todo = _map_with_backups(client, call, args, items, todo, results, rule, watch)
        finally:
            client.cancel(scattered)
        if not todo:
            return results
        logger.info("%d of %d tasks were lost with their workers (attempt %d of %d); submitting them again",
                    len(todo), len(items), attempt, attempts)
    raise ClusterError(f"cluster: {len(todo)} of {len(items)} tasks of {getattr(func, '__name__', func)!r} were "
                       f"lost with their workers {attempts} times in a row; check the workers' memory and logs, "
                       "then run the same command again")


def _small(shared: tuple) -> bool:
    """Whether `shared` pickles to fewer than :data:`SHARED_BY_VALUE_BYTES` (what cannot be pickled here is
    not small: the scatter reports it)."""
    import pickle

    try:
        import cloudpickle

        return len(cloudpickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL)) < SHARED_BY_VALUE_BYTES
    except Exception:
        return False


def _map_with_backups(client, call, args: tuple, items: list, todo: list[int], results: list, rule,
                      watch: _WorkerWatch | None = None) -> list[int]:
    """Run ``call(*args, items[i])`` for each i in `todo` into ``results[i]``, with backup copies of the late
    ones (:func:`~gcc_dask.runtime.backups.backups_due_since_launch`) and of those whose every copy runs on a
    worker that has missed :data:`~gcc_dask.runtime.liveness.MISSED_HEARTBEATS` heartbeats (a frozen worker may
    hold more than the quarter of the tasks Spark's rule lets wait), up to :data:`RESCUE_COPIES` copies beyond the
    rule's limit for an item whose copies all sit on such workers; return the items whose every copy was lost
    with its worker. Every copy still out is cancelled on the way out.

    A result held only by workers that froze after its task finished (the fetch would wait for as long as they
    stay frozen) counts as a lost copy: the item gets its next copy at once, away from them
    (:func:`_fetch`).

    At most one original per thread of the cluster is out at a time; the next item is launched as one returns.
    An item queued behind others is then not taken for a late one (Spark's rule counts a task's run time, and
    a copy launched for a queued item would hold a worker's thread after its original's result came: a
    cancelled task runs to its end)."""
    import math
    import time

    import numpy as np
    from distributed import KilledWorker, wait

    from gcc_dask.runtime.backups import backups_due_since_launch
    from gcc_dask.runtime.liveness import MISSED_HEARTBEATS, heartbeat_interval

    k = len(todo)
    start = time.monotonic()
    first = np.full(k, math.inf)  # when each item's first result came (seconds since start)
    rows = rule.copies + 1  # Spark's rule's copies; the rescues of items stuck on quiet workers come after them
    launch = np.full((rows + RESCUE_COPIES, k), math.inf)
    failed = np.zeros((rows + RESCUE_COPIES, k), dtype=bool)
    copies: list[list] = [[] for _ in range(k)]
    open_ = set(range(k))  # items without a result and with a copy out or to come
    avoid: list[set[str]] = [set() for _ in range(k)]  # workers holding a result of the item that did not arrive
    frozen: set[str] = set()  # holders found frozen (their other results are not waited for)
    told: set[str] = set()  # the frozen holders logged at INFO level already
    beat = heartbeat_interval(len(client.scheduler_info().get("workers", ())) or 1)
    silent_after = MISSED_HEARTBEATS * beat
    check_at = silent_after  # the first look at the workers' heartbeats

    slots = max(1, sum(client.nthreads().values()))
    launched = 0  # items 0 .. launched - 1 have their original out (or back)

    def submit(j: int, away: set[str] | None = None) -> None:
        kwargs = {"workers": sorted(away), "allow_other_workers": True} if away else {}
        copies[j].append(client.submit(call, *args, items[todo[j]], pure=False, **kwargs))
        launch[len(copies[j]) - 1, j] = time.monotonic() - start

    def launch_next() -> None:
        nonlocal launched
        out = sum(1 for j in open_ if j < launched and not failed[:len(copies[j]), j].all())
        while launched < k and out < slots:
            submit(launched)
            launched += 1
            out += 1

    try:
        launch_next()
        while open_:
            now = time.monotonic() - start
            due, later = backups_due_since_launch(first, launch[:rows], failed[:rows], now, rule)
            # (an item with a finished copy is fetched below: no copy, even when a slow fetch held this loop)
            due = {j for j in due.tolist() if j in open_
                   and not any(f.status == "finished" and not failed[c, j] for c, f in enumerate(copies[j]))}
            # items that may take one more copy if all theirs run on quiet workers (Spark's rule's limit, and
            # RESCUE_COPIES beyond it for such items only)
            spare = [j for j in open_ if j < launched and len(copies[j]) < rows + RESCUE_COPIES]
            if due or (spare and now >= check_at):
                check_at = now + beat  # the heartbeats move once a beat: no need to look more often
                running, workers, behind = _placement(client, {j: [f.key for f in copies[j]] for j in spare},
                                                      silent_after)
                # an item whose copies all run on workers that have gone quiet: its next copy now
                stuck = {j for j in spare if running.get(j) and set(running[j]) <= behind}
                for j in sorted(due | stuck):
                    away = set(workers) - behind - set(running.get(j, ())) - avoid[j]
                    submit(j, away or None)
                if due or stuck:
                    logger.info("backup copies of %d late task(s) of %d (%d on quiet workers)",
                                len(due | stuck), k, len(stuck - due))
                    continue
            out = [f for j in open_ for c, f in enumerate(copies[j]) if not failed[c, j]]
            if not out:  # every item left lost all its copies, none to come
                break
            timeout = beat if not math.isfinite(later) else min(max(later - now, 0.01), beat)
            try:
                with client.as_current():  # distributed.wait takes the default client, which may be another one
                    wait(out, timeout=timeout, return_when="FIRST_COMPLETED")
            except TimeoutError:
                if watch is not None:
                    watch.check()  # no result within a beat: every worker gone, or the scheduler, ends the wait
            now = time.monotonic() - start
            for j in sorted(open_):
                for c, f in enumerate(copies[j]):
                    if failed[c, j] or f.status == "pending":
                        continue
                    if f.status == "finished":
                        arrived, value = _fetch(client, f, silent_after, beat, frozen)
                        if not arrived:  # held by workers that froze after it finished
                            avoid[j] |= value
                            failed[c, j] = True
                            said = logger.debug if value and value <= told else logger.info  # once a worker
                            told |= value
                            said("the result of a task is held on %s, which stopped answering: another copy",
                                 ", ".join(sorted(value)) or "a lost worker")
                            continue
                        if isinstance(value, _Raised):
                            raise value.error
                        results[todo[j]], first[j] = value, now
                        open_.discard(j)
                        break
                    error = f.exception() if f.status == "error" else None
                    if error is not None and not isinstance(error, KilledWorker):
                        raise error
                    failed[c, j] = True  # died with its worker (or was dropped with it): an erasure
                if j in open_ and failed[:len(copies[j]), j].all() and len(copies[j]) > rule.copies:
                    open_.discard(j)  # lost, every copy: the next attempt
            launch_next()
        return [todo[j] for j in range(k) if not math.isfinite(first[j])]
    finally:
        client.cancel([f for fs in copies for f in fs])


def _fetch(client, future, silent_after: float, beat: float, frozen: set[str]) -> tuple[bool, Any]:
    """``(True, result)`` of a finished `future`; ``(False, holders)`` when the workers that hold its result have
    stopped answering (no heartbeat for `silent_after` s while others send theirs) or hold it no longer.

    A worker frozen just after its task finished keeps the result, and a plain fetch waits for as long as it
    stays frozen. So the fetch runs in a thread of its own; once it has taken `silent_after` s, the holders'
    heartbeats are looked at every half `beat`: the fetch is given up (and left to end when they do) when every
    holder is `silent_after` behind, added to `frozen` (whose later results are given up at once), and waited
    for as long as one answers, whatever the result's size (a large result takes longer than `silent_after`)."""
    import threading

    if frozen:
        held = _holders(client, future)
        if held and held <= frozen:
            return False, held
    box: dict = {}
    done = threading.Event()

    def get() -> None:
        try:
            box["value"] = future.result()
        except BaseException as e:  # raised below, in the map's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=get, name="gcc-dask-fetch", daemon=True).start()
    if not done.wait(silent_after):
        held = _holders(client, future)
        while not done.wait(beat / 2):
            if not held or held <= frozen_workers(client, silent_after):
                frozen |= held
                return False, held
    if "error" in box:
        raise box["error"]
    return True, box["value"]


def _holders(client, future) -> set[str]:
    """The workers that hold `future`'s result (the scheduler's ``who_has``; empty when it cannot say)."""
    try:
        return set(client.who_has(future).get(future.key, ()))
    except Exception:  # pragma: no cover - the scheduler itself does not answer: nothing to avoid by name
        return set()


def _placement(client, keys: dict, silent_after: float) -> tuple[dict, list[str], set[str]]:
    """Where copies run: per entry of `keys` (an item -> the keys of its copies) the workers running one of
    them (one call to the scheduler, the function shipped by value); every worker; and the
    :func:`frozen_workers`."""
    def where(dask_scheduler, keys):  # runs on the scheduler
        running = {}
        for item, names in keys.items():
            busy = set()
            for key in names:
                ts = dask_scheduler.tasks.get(key)
                if ts is not None and ts.processing_on is not None:
                    busy.add(ts.processing_on.address)
            running[item] = sorted(busy)
        return running, sorted(dask_scheduler.workers)

    running, workers = client.run_on_scheduler(where, keys=keys)
    return {int(j): busy for j, busy in running.items()}, workers, frozen_workers(client, silent_after)
