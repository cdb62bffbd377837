"""Which Dask cluster a run uses (docs/cluster.rst).

Precedence: an explicit ``distributed.Client`` (used, never closed); else a scheduler address
(``--scheduler``/``cluster.address``), a scheduler file, or ``DASK_SCHEDULER_ADDRESS``; else an embedded
``LocalCluster``. Connecting is bounded by a timeout so an unreachable scheduler fails fast.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Iterator

import dask

from gcc_dask.errors import ClusterError

logger = logging.getLogger(__name__)

__all__ = ["ClusterSpec", "connect", "cluster_has_gpu", "gpu_available", "describe_target"]


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
                f"cluster.address: cannot reach the Dask scheduler at {where!r} within "
                f"{spec.connect_timeout:g} s ({type(e).__name__}: {e}); start it with `dask scheduler` "
                f"or leave the address empty for an embedded LocalCluster"
            ) from None
        try:
            yield c
        finally:
            c.close()
        return
    # Our own cluster: a shard lost with its worker is an erasure, so never re-run it elsewhere.
    gpu = spec.gpu is True or (spec.gpu == "auto" and gpu_available()[0])
    if spec.gpu is True and not gpu_available()[0]:
        raise ClusterError(f"cluster.gpu: got true, but this machine has no usable GPU ({gpu_available()[1]}); "
                           "use gpu: auto or false, or install the gpu extra on a machine with a CUDA GPU")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        try:
            cluster = LocalCluster(
                n_workers=spec.n_workers or _default_workers(),
                threads_per_worker=spec.threads_per_worker or _default_threads(),
                processes=spec.processes,
                dashboard_address=":0",
                memory_limit=spec.memory_limit,
                silence_logs=logging.ERROR,
                resources={"GPU": 1} if gpu else None,
            )
        except Exception as e:  # pragma: no cover - depends on the machine
            raise ClusterError(f"cannot start a LocalCluster: {type(e).__name__}: {e}") from e
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def cluster_has_gpu(client) -> bool:
    """True when at least one worker advertises a ``GPU`` resource."""
    info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
    return any(w.get("resources", {}).get("GPU", 0) > 0 for w in info.get("workers", {}).values())


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
