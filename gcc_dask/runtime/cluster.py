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
from gcc_dask.runtime.cluster_calls import (  # noqa: F401  (importable from here, as before the split)
    WORKER_TIMEOUT, DebugOnly, _accepts_n_workers, allowed_failures, frozen_workers, past_frozen, remove_plugins,
    run_on_cluster, scheduler_lost_error, thread_slots,
)
from gcc_dask.runtime.cluster_gpu import check_gpu_workers, cluster_has_gpu, gpu_available
from gcc_dask.runtime.cluster_map import (  # noqa: F401  (importable from here, as before the split)
    MAP_ATTEMPTS, SHARED_BY_VALUE_BYTES, _small, map_on_cluster,
)

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
    scheduler's and workers' logs of the time). Bokeh's JavaScript and CSS are written inline (``mode="inline"``),
    so the report opens offline: by default Bokeh loads them from its CDN and the page is blank without one."""
    if path is None:
        yield
        return
    from distributed import performance_report as report

    target = writable_file("--performance-report", path)
    rep = report(filename=target, mode="inline")
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
