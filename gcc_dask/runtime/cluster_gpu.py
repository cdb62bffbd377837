"""GPUs on the cluster: whether this process can use one (a device call must succeed), whether a cluster's
workers advertise one, and a check that those that do can use it.
"""

from __future__ import annotations

from gcc_dask.errors import ClusterError
from gcc_dask.runtime.cluster_calls import _accepts_n_workers


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
