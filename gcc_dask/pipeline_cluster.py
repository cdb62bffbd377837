"""The checks of the cluster a run makes before its batches: a worker is there, and every worker sees the store."""

from __future__ import annotations

import os
import uuid

from gcc_dask.errors import ClusterError, StoreError
from gcc_dask.runtime.cluster import past_frozen


def _wait_for_workers(client, timeout: float) -> None:
    """At least one worker must be there, or join within `timeout` s: a run on none would wait forever."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise ClusterError(
            f"cluster: got a Dask scheduler at {client.scheduler.address!r} that has no workers, and none joined "
            f"within {timeout:g} s (cluster.connect_timeout); expected at least one: start some with "
            f"`dask worker ADDRESS`, or raise cluster.connect_timeout"
        ) from None


def _check_reachable(client, path: str) -> set[str]:
    """Every worker must see the driver's store (it writes its batches there itself); returns the workers not
    checked because they are frozen (:func:`~gcc_dask.runtime.cluster.past_frozen`: they get no shards until
    they answer, and are ended if they stay silent).

    The driver has created the store: it leaves a token file in it, and each worker must read that
    token back and write a file of its own there. A worker on a machine without the shared file system
    fails the read (creating the directory on its own disk would pass a write-only probe).
    """
    token = uuid.uuid4().hex
    mark = os.path.join(path, f".reachable-{token[:8]}")
    try:
        with open(mark, "w") as fh:
            fh.write(token)
    except OSError as e:  # a read-only or full file system: the run could not write its store either
        raise StoreError(f"store.path: got {path!r}, which this driver cannot write into ({type(e).__name__}: "
                         f"{e.strerror or e}); fix the file system (space, permissions, a read-only mount) and "
                         "run the same command again") from None

    def _probe(mark=mark, token=token):
        try:
            with open(mark) as fh:
                if fh.read() != token:
                    return f"{mark} holds another run's token"
            mine = f"{mark}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            with open(mine, "w") as fh:
                fh.write("ok")
            os.remove(mine)
        except OSError as e:
            return f"{type(e).__name__}: {e.strerror or e}"
        return None

    frozen: set[str] = set()
    try:
        outcome, frozen = past_frozen(client, lambda workers: client.run(_probe, workers=workers))
    except Exception as e:
        outcome = {"?": f"{type(e).__name__}: {e}"}
    finally:
        try:
            os.remove(mark)
        except OSError:
            pass
    bad = {w: why for w, why in outcome.items() if why}
    if bad:
        worker, why = next(iter(bad.items()))
        raise StoreError(
            f"store.path: got {path!r}, which {len(bad)} of {len(outcome)} Dask workers cannot see or write "
            f"(worker {worker}: {why}); use a path on a file system that the driver and every worker mount"
        )
    return frozen
