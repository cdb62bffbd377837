"""Which Dask cluster a run uses (docs/cluster.rst).

Precedence: an explicit ``distributed.Client`` (used, never closed); else a scheduler address
(``--scheduler``/``cluster.address``), a scheduler file, or ``DASK_SCHEDULER_ADDRESS``; else an embedded
``LocalCluster``. Connecting is bounded by a timeout so an unreachable scheduler fails fast.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import dask

from gcc_dask._blas import one_blas_thread
from gcc_dask._paths import writable_file
from gcc_dask.errors import ClusterError
from gcc_dask.limits import MAX_LOCAL_WORKERS
from gcc_dask.runtime.signals import DeferredSignals

logger = logging.getLogger(__name__)

__all__ = ["ClusterSpec", "allowed_failures", "connect", "check_gpu_workers", "cluster_has_gpu", "current_client",
           "gpu_available", "describe_target", "performance_report", "run_on_cluster", "worker_environ",
           "MALLOC_ENVIRON"]


@dataclass(frozen=True)
class ClusterSpec:
    """Where to run. All fields optional; see the module docstring for the precedence."""

    address: str | None = None
    scheduler_file: str | None = None
    n_workers: int | None = None
    threads_per_worker: int | None = None
    processes: bool = True
    connect_timeout: float = 10.0
    memory_limit: str | None = "auto"
    gpu: bool | str = "auto"

    @classmethod
    def from_config(cls, cluster, *, threads_per_worker: int | None = None) -> ClusterSpec:
        """The spec of a config's ``cluster`` section (:class:`gcc_dask.config.ClusterConfig`); an unset
        ``threads_per_worker`` takes `threads_per_worker` (None: the embedded cluster's default)."""
        return cls(address=cluster.address, scheduler_file=cluster.scheduler_file, n_workers=cluster.n_workers,
                   threads_per_worker=cluster.threads_per_worker or threads_per_worker,
                   processes=True if cluster.processes is None else cluster.processes,
                   connect_timeout=cluster.connect_timeout, gpu=cluster.gpu)


def describe_target(spec: ClusterSpec) -> str:
    """One line naming the cluster :func:`connect` would use."""
    if spec.address:
        return f"scheduler at {spec.address}"
    if spec.scheduler_file:
        return f"scheduler from file {spec.scheduler_file}"
    env = os.environ.get("DASK_SCHEDULER_ADDRESS")
    if env:
        return f"scheduler at {env} (DASK_SCHEDULER_ADDRESS)"
    workers = spec.n_workers or _default_workers()
    threads = spec.threads_per_worker or _default_threads()
    return f"embedded LocalCluster ({workers} workers x {threads} threads)"


def _default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _default_threads() -> int:
    # Injected stragglers sleep cooperatively: many cheap threads per worker keep sleeping shards from
    # queueing behind each other, so the cluster sees the stragglers the latency model draws.
    return 16


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


def _lost_comm(text: str) -> bool:
    """distributed's "Batched Comm Closed" record: on an external cluster it is printed, with the traceback of
    the failed write, when the scheduler goes away; the run then says so itself, in one line (a lost scheduler
    ends a run with ``ClusterError``)."""
    return text.startswith("Batched Comm Closed")


class _ReconnectNoise(logging.Filter):
    """Drop (log at DEBUG level) what the client logs when its scheduler is gone: "Failed to reconnect", and the
    traceback of its reconnection cancelled when it is closed (an ERROR record with no message and an
    ``asyncio.CancelledError``). The run, or the composition, says it in its own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        import asyncio

        try:
            text = record.getMessage()
        except Exception:  # pragma: no cover - a record whose arguments do not format
            return True
        error = record.exc_info[1] if record.exc_info else None
        if text.startswith("Failed to reconnect") or (isinstance(error, asyncio.CancelledError) and not text.strip()):
            logger.debug("%s (%s)", text, type(error).__name__ if error is not None else "")
            return False
        return True


@contextlib.contextmanager
def connect(spec: ClusterSpec, client=None) -> Iterator:
    """Yield a ``distributed.Client`` per the precedence above; close only what this function opened.

    Raises
    ------
    ClusterError
        When the scheduler cannot be reached within ``spec.connect_timeout`` seconds, or the local
        cluster cannot start.
    """
    from distributed import Client, LocalCluster

    if client is not None:
        status = getattr(client, "status", "running")
        if status in ("closing", "closed"):  # its calls would fail on the first use, blamed on whatever used it
            raise ClusterError(f"client: got a distributed.Client that is {status} (status {status!r}); expected a "
                               "running one: pass an open Client, or none (client=None) for the config's cluster")
        yield client
        return
    address = spec.address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address or spec.scheduler_file:
        where = address or spec.scheduler_file
        try:
            if address:
                c = Client(address, timeout=spec.connect_timeout)
            else:
                c = Client(scheduler_file=spec.scheduler_file, timeout=spec.connect_timeout)
        except (OSError, TimeoutError, ValueError) as e:
            raise ClusterError(
                f"cluster.address: got {where!r}, but cannot reach the Dask scheduler there within "
                f"{spec.connect_timeout:g} s ({type(e).__name__}: {e}); expected a running scheduler: start it "
                f"with `dask scheduler`, or leave the address empty for an embedded LocalCluster"
            ) from None
        quiet, reconnect = DebugOnly(_lost_comm), _ReconnectNoise()
        logging.getLogger("distributed.batched").addFilter(quiet)
        logging.getLogger("distributed.client").addFilter(reconnect)
        try:
            yield c
        finally:
            try:
                c.close()
            finally:  # after close: no write of this client is left to fail
                logging.getLogger("distributed.batched").removeFilter(quiet)
                logging.getLogger("distributed.client").removeFilter(reconnect)
        return
    # Our own cluster: a shard lost with its worker is an erasure, so never re-run it elsewhere. The
    # statistical profiler is off: it walks the frames of running tasks and races with native extensions
    # (a traceback "'InferenceSession' object has no attribute 'f_back'" from ONNX Runtime sessions); the
    # dashboard's profile page stays empty. Worker processes never see SIGINT or SIGTERM (blocked, below):
    # Ctrl-C reaches the driver, which stops the run and closes the cluster, instead of every worker printing
    # its own traceback.
    cap = max(8, MAX_LOCAL_WORKERS * (os.cpu_count() or 1))
    if spec.n_workers is not None and spec.n_workers > cap:
        raise ClusterError(f"cluster.n_workers: got {spec.n_workers}; expected at most {cap} worker processes for "
                           f"an embedded LocalCluster on this {os.cpu_count()}-core machine (more threads per "
                           "worker instead, or a cluster of several machines: cluster.address)")
    gpu = spec.gpu is True or (spec.gpu == "auto" and gpu_available()[0])
    if spec.gpu is True and not gpu_available()[0]:
        raise ClusterError(f"cluster.gpu: got true, but this machine has no usable GPU ({gpu_available()[1]}); "
                           "use gpu: auto or false, or install the gpu extra on a machine with a CUDA GPU")
    # The scheduler lives in this process: its logs of past events are kept short, so that a long run's memory
    # does not grow with its number of tasks.
    # Ctrl-C or SIGTERM while the cluster starts is recorded and raised once it has started (and is then
    # closed): the worker processes, and the cluster's threads that spawn them, start with both signals
    # blocked, so they never see the terminal's Ctrl-C or a cgroup's SIGTERM (DeferredSignals).
    deferred = DeferredSignals()
    if spec.processes:
        # multiprocessing's resource tracker unblocks SIGINT and SIGTERM in the thread that first starts it
        # (the cluster's event loop, just before it spawns the workers): start it here, before the block
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    environ = worker_environ()
    if spec.processes:
        _replace_dasks_leftover(environ)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.nanny.pre-spawn-environ": environ,
                          "distributed.worker.profile.enabled": False,
                          "distributed.admin.log-length": 1000,
                          "distributed.admin.low-level-log-length": 200}), deferred:
        try:
            cluster = LocalCluster(
                n_workers=spec.n_workers or _default_workers(),
                threads_per_worker=spec.threads_per_worker or _default_threads(),
                processes=spec.processes,
                dashboard_address=":0",
                memory_limit=spec.memory_limit,
                silence_logs=logging.CRITICAL,  # expected erasures and shutdown noise: see the store, not the terminal
                resources={"GPU": 1} if gpu else None,
            )
        except Exception as e:  # pragma: no cover - depends on the machine
            raise ClusterError(f"cluster: got an embedded LocalCluster that cannot start ({type(e).__name__}: "
                               f"{' '.join(str(e).split()).rstrip('.')}); expected one to start on this machine"
                               f"{_script_hint(spec)}") from e
    try:
        deferred.raise_pending()
        c = Client(cluster)
    except BaseException:
        cluster.close()
        raise
    # workers that are threads of this process share its BLAS: one thread a call, as in a worker process
    blas = contextlib.nullcontext() if spec.processes else one_blas_thread()
    try:
        with blas:
            yield c
    finally:
        c.close()
        cluster.close()


#: glibc's malloc settings for the worker processes of the embedded cluster (docs/cluster.rst, 'The embedded
#: LocalCluster'). Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` to 64 KiB, which also freezes glibc's mmap
#: threshold at 128 KiB: every batch's arrays (a chunk, a batch, a coded input: megabytes) are then mapped
#: fresh and page-faulted in, and unmapped when freed. Blocks up to 32 MiB come from the heap instead, and
#: up to 64 MiB of freed heap is kept for the next batch: on a 2-core VM this cut the workers' page faults
#: about 10x and their system CPU time 3-5x (BENCHMARKS.md, 'Tail latency'), for 0.4-0.6 GiB more
#: resident memory per worker process.
MALLOC_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": 32 << 20, "MALLOC_TRIM_THRESHOLD_": 64 << 20}
#: Dask's own ``distributed.nanny.pre-spawn-environ`` value of ``MALLOC_TRIM_THRESHOLD_``
_DASK_TRIM_DEFAULT = 65536


def worker_environ() -> dict:
    """``distributed.nanny.pre-spawn-environ`` for the embedded cluster's worker processes: Dask's, with
    :data:`MALLOC_ENVIRON` where the user's Dask config does not set those variables (a trim threshold left at
    Dask's default of 64 KiB counts as not set)."""
    import distributed  # noqa: F401 - loads distributed's defaults into dask.config

    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", None) or {})
    for key, value in MALLOC_ENVIRON.items():
        if key not in env or _dasks_default(key, env[key]):
            env[key] = value
    return env


def _dasks_default(key: str, value: Any) -> bool:
    """Whether `value` of variable `key` is what Dask's nanny sets by itself (``MALLOC_TRIM_THRESHOLD_=65536``),
    not a choice of the user's."""
    return key == "MALLOC_TRIM_THRESHOLD_" and str(value) == str(_DASK_TRIM_DEFAULT)


def _replace_dasks_leftover(environ: dict) -> None:
    """Put `environ`'s malloc variables into this process's ``os.environ`` where Dask left its own
    default there. A nanny copies its pre-spawn environment into the spawning process's ``os.environ``, and a
    later nanny takes ``os.environ``'s values over the config's: after any earlier LocalCluster of Dask's
    defaults in this process, ours would be ignored. A value other than Dask's default is the user's, and
    stays."""
    for key in MALLOC_ENVIRON:
        if key in os.environ and key in environ and _dasks_default(key, os.environ[key]):
            os.environ[key] = str(environ[key])


def _script_hint(spec: ClusterSpec) -> str:
    """Why worker processes may fail to start from a script: each one imports the script (multiprocessing's
    spawn), so calls at its top level run again in every worker, which cannot start processes of its own."""
    import sys

    main = sys.modules.get("__main__")
    if not spec.processes or not getattr(main, "__file__", None) or hasattr(sys, "ps1"):
        return ""
    return (f"; in a script ({os.path.basename(main.__file__)}), put the calls that start a cluster under "
            "`if __name__ == \"__main__\":` (each Dask worker process imports the script), or set "
            "cluster.processes: false")


def cluster_has_gpu(client) -> bool:
    """True when at least one worker advertises a ``GPU`` resource."""
    info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
    return any(w.get("resources", {}).get("GPU", 0) > 0 for w in info.get("workers", {}).values())


def check_gpu_workers(client) -> list[str]:
    """Check that every worker advertising a ``GPU`` resource can use one: CuPy imports and a device call works.

    A worker started with ``--resources GPU=1`` but without CuPy (or without a working CUDA device) would
    fail every shard placed on it, and a run would end "complete" with nothing decoded. Each such worker runs
    :func:`gpu_available` (``client.run``); no worker advertising a GPU means nothing to check.

    Returns
    -------
    list of str
        Addresses of the GPU workers, all of which passed.

    Raises
    ------
    ClusterError
        One line naming the workers that failed, why, and the two fixes: install the gpu extra on them, or
        ``cluster.gpu: false`` to run on NumPy.
    """
    info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
    workers = sorted(a for a, w in info.get("workers", {}).items() if w.get("resources", {}).get("GPU", 0) > 0)
    if not workers:
        return []
    results = client.run(gpu_available, workers=workers, on_error="return")
    failed = {}
    for address in workers:
        result = results.get(address, (False, "the worker did not answer"))
        if isinstance(result, BaseException):
            result = (False, f"{type(result).__name__}: {result}".splitlines()[0][:120])
        if not result[0]:
            failed[address] = result[1]
    if failed:
        shown = list(failed)[:4]
        more = f" and {len(failed) - len(shown)} more" if len(failed) > len(shown) else ""
        reasons = "; ".join(dict.fromkeys(failed.values()))
        raise ClusterError(
            f"cluster.gpu: {len(failed)} of {len(workers)} workers advertise a GPU resource but cannot use it "
            f"({', '.join(shown)}{more}: {reasons}); install CuPy on those workers (pip install -e \".[gpu]\") "
            "or set cluster.gpu: false to run on NumPy"
        )
    return workers


def _accepts_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def gpu_available() -> tuple[bool, str]:
    """Whether this process can use a CUDA GPU through CuPy: a device call must succeed.

    ``import cupy`` succeeds on machines without a GPU; only the first device call fails.
    """
    try:
        import cupy

        cupy.zeros(1).sum().item()
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return True, name.decode() if isinstance(name, bytes) else str(name)
    except Exception as e:
        return False, f"{type(e).__name__}: {e}".splitlines()[0][:120]


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


#: shared arguments of :func:`map_on_cluster` smaller than this (pickled, in all) travel with each task; larger
#: ones (an in-memory source) are scattered to every worker once per attempt
SHARED_BY_VALUE_BYTES = 1 << 20


#: seconds a wait of :func:`map_on_cluster` and :func:`run_on_cluster` gives workers to come back once every one is
#: gone (the pipeline passes ``cluster.connect_timeout``)
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


def map_on_cluster(client, func, items, *shared, attempts: int = MAP_ATTEMPTS, speculation=None,
                   worker_timeout: float = WORKER_TIMEOUT, what: str = "a task of the run ran"):
    """``[func(*shared, item) for item in items]`` as Dask tasks, one per item, in item order, with backup
    copies of the late ones.

    The ``shared`` arguments (a source, a projection) travel with each task when they are small (under
    :data:`SHARED_BY_VALUE_BYTES` pickled: a Zarr or image source, a projection); larger ones (an in-memory
    source) are scattered once per attempt, to every worker, and passed to every task by reference, never
    pickled per task.

    A task late by Spark's rule (`speculation`, default :class:`~gcc_dask.runtime.cutoff.Speculation`: once
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
    try:
        return _map_on_cluster(client, func, items, *shared, attempts=attempts, speculation=speculation,
                               watch=_WorkerWatch(client, worker_timeout, what))
    except ClusterError:
        raise
    except Exception as e:
        if _scheduler_gone(client, e):
            raise scheduler_lost_error(client, what, e) from None
        raise


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
    ones (:func:`~gcc_dask.runtime.cutoff.backups_due`) and of those whose every copy runs on a worker that has
    missed :data:`~gcc_dask.runtime.liveness.MISSED_HEARTBEATS` heartbeats (a frozen worker may hold more than
    the quarter of the tasks Spark's rule lets wait); return the items whose every copy was lost with its
    worker. Every copy still out is cancelled on the way out.

    A result held only by workers that froze after its task finished (the fetch would wait for as long as they
    stay frozen) counts as a lost copy: the item gets its next copy at once, away from them
    (:func:`_fetch`)."""
    import math
    import time

    import numpy as np
    from distributed import KilledWorker, wait

    from gcc_dask.runtime.cutoff import backups_due
    from gcc_dask.runtime.liveness import MISSED_HEARTBEATS, heartbeat_interval

    k = len(todo)
    start = time.monotonic()
    first = np.full(k, math.inf)  # when each item's first result came (seconds since start)
    launch = np.full((rule.copies + 1, k), math.inf)
    failed = np.zeros((rule.copies + 1, k), dtype=bool)
    copies: list[list] = [[] for _ in range(k)]
    open_ = set(range(k))  # items without a result and with a copy out or to come
    avoid: list[set[str]] = [set() for _ in range(k)]  # workers holding a result of the item that did not arrive
    frozen: set[str] = set()  # holders found frozen (their other results are not waited for)
    told: set[str] = set()  # the frozen holders logged at INFO level already
    beat = heartbeat_interval(len(client.scheduler_info().get("workers", ())) or 1)
    silent_after = MISSED_HEARTBEATS * beat
    check_at = silent_after  # the first look at the workers' heartbeats

    def submit(j: int, away: set[str] | None = None) -> None:
        kwargs = {"workers": sorted(away), "allow_other_workers": True} if away else {}
        copies[j].append(client.submit(call, *args, items[todo[j]], pure=False, **kwargs))
        launch[len(copies[j]) - 1, j] = time.monotonic() - start

    try:
        for j in range(k):
            submit(j)
        while open_:
            now = time.monotonic() - start
            due, later = backups_due(first, launch, failed, now, rule)
            # (an item with a finished copy is fetched below: no copy, even when a slow fetch held this loop)
            due = {j for j in due.tolist() if j in open_
                   and not any(f.status == "finished" and not failed[c, j] for c, f in enumerate(copies[j]))}
            spare = [j for j in open_ if len(copies[j]) <= rule.copies]
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


def current_client():
    """The ``distributed.Client`` that Dask would use now (``distributed.default_client``), or None."""
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        return None


@contextlib.contextmanager
def performance_report(client, path) -> Iterator[None]:
    """Write Dask's performance report of what runs inside the block to `path` (HTML), or do nothing when
    `path` is None (:class:`distributed.performance_report`: task stream, worker profiles, bandwidth, the
    scheduler's and workers' logs of the time)."""
    if path is None:
        yield
        return
    from distributed import performance_report as report

    target = writable_file("--performance-report", path)
    rep = report(filename=target)
    with client.as_current():
        rep.__enter__()
        try:
            yield
        except BaseException:  # the job failed: its own error is the one to see
            with contextlib.suppress(Exception):
                rep.__exit__(None, None, None)
            raise
        try:
            rep.__exit__(None, None, None)
        except OSError as e:  # checked writable at the start: a full disk, say; the job's results are kept
            warnings.warn(f"--performance-report: could not write {target!r} ({e.strerror or e}); the job's "
                          "results are not affected", RuntimeWarning, stacklevel=3)


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
