"""The user's maps the tail section measures the pipeline against: a plain ``client.map`` of f over the chunks
(:func:`plain_map`) and the same map with backup tasks by Spark's rule, as a careful Dask user writes it
(:func:`hedged_map`), with the thread seconds their tasks held (:func:`_spent`).
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any, Callable

import numpy as np


#: chunks in a batch of the maps (the pipeline's K: a batch of K chunks is compared with a batch of K·B samples)
K = 8
#: Spark's classic rule for the hedged map and ``speculative`` (docs/pipeline.rst, 'Speculative execution')
QUANTILE, MULTIPLIER, MIN_RUNTIME = 0.75, 1.5, 0.1


def _task_seconds(client) -> dict[str, float]:
    """Seconds plain-map tasks have held a thread so far, per worker address (see :func:`_spent`)."""
    from gcc_dask.bench.throughput import task_seconds

    return {addr: float(v) for addr, v in client.run(task_seconds).items()}


def _spent(before: dict, after: dict) -> float:
    """What the cluster spent between two per-worker snapshots: each worker's growth, a worker that started in
    between counted from zero. A worker that ended in between (scenario d's frozen process, ended and replaced)
    takes its counts with it, so the figure is then a lower bound (without this, the replaced worker's counts
    made the total negative)."""
    return float(sum(max(0.0, v - before.get(k, 0.0)) for k, v in after.items()))


def _settle(client, timeout: float = 300.0) -> None:
    """Wait until no task runs on the cluster (cancelled copies that are still running finish first)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(client.processing().values()):
            return
        time.sleep(0.05)


def _output_array(path: str, samples: int, block: int) -> None:
    import zarr

    zarr.create_array(store=path, shape=(samples, 10), chunks=(block, 10), dtype="float32", overwrite=True)


def plain_map(client, data: str, out: str, model: str, samples: int, block: int,
              delay: Callable[[int], float] | None = None) -> dict:
    """The plain map over every chunk of `block` samples (all submitted at once, as ``client.map`` does)."""
    from gcc_dask.bench.throughput import plain_chunk

    _output_array(out, samples, block)
    starts = list(range(0, samples, block))
    stops = [min(s + block, samples) for s in starts]
    d = [0.0 if delay is None else float(delay(i)) for i in range(len(starts))]
    c0 = _task_seconds(client)
    t0 = time.perf_counter()
    futures = client.map(plain_chunk, [data] * len(starts), [out] * len(starts), [model] * len(starts), starts,
                         stops, d, pure=False)
    times = client.gather(futures)
    wall = time.perf_counter() - t0
    _settle(client)
    spans = [max(t[1] for t in times[i:i + K]) - min(t[0] for t in times[i:i + K]) for i in range(0, len(times), K)]
    chunk = [t[1] - t[0] - dd for t, dd in zip(times, d)]
    return {"wall_s": wall, "spans": np.array(spans), "chunk_s": np.array(chunk),
            "compute_s": _spent(c0, _task_seconds(client)), "backups": 0}


def hedged_map(client, data: str, out: str, model: str, samples: int, block: int, *, slots: int,
               delay: Callable[[int], float] | None = None,
               backup_delay: Callable[[int, int], float] | None = None, copies: int = 1,
               quantile: float = QUANTILE, multiplier: float = MULTIPLIER, min_runtime: float = MIN_RUNTIME,
               poll_s: float = 0.01) -> dict:
    """The plain map with backup tasks, written with Dask's public API as a careful user would.

    At most `slots` chunk tasks are in flight (one per worker thread), so that the time since a task's
    submission is its run time (and its scheduling). ``as_completed`` reports the results; every `poll_s` the
    loop applies Spark's rule: once ``max(floor(quantile · slots), 1)`` chunks are done, a chunk out for longer
    than ``max(multiplier × their median time from submission to result, min_runtime)`` that has no copy gets
    one (its own injected delay: ``backup_delay(i, 1)``); with `copies` > 1, a copy out that long in its turn
    gets the next (``backup_delay(i, c)``), up to `copies` of them. The first result of a chunk wins; the other
    copies are cancelled, which does not stop a running task.

    Returns
    -------
    dict
        ``wall_s``, ``spans`` (K-chunk batches, first submission to last winning result), ``compute_s`` (thread
        seconds of every copy, once they have all returned), ``backups``.
    """
    from distributed import as_completed

    from gcc_dask.bench.throughput import plain_chunk

    _output_array(out, samples, block)
    starts = list(range(0, samples, block))
    n = len(starts)
    token = uuid.uuid4().hex[:8]
    c0 = _task_seconds(client)
    submitted: dict[int, float] = {}
    winner: dict[int, float] = {}
    chunk_of: dict[Any, int] = {}
    out_copies: dict[int, list] = {}
    durations: list[float] = []
    ac = as_completed(loop=client.loop)
    t0 = time.perf_counter()

    latest: dict[int, float] = {}

    def submit(i: int, copy: int) -> None:
        if copy == 0:
            d = 0.0 if delay is None else float(delay(i))
        else:
            d = 0.0 if backup_delay is None else float(backup_delay(i, copy))
        fut = client.submit(plain_chunk, data, out, model, starts[i], min(starts[i] + block, samples),
                            d, key=f"hedged-{i}-{copy}-{token}", pure=False)
        chunk_of[fut] = i
        out_copies.setdefault(i, []).append(fut)
        latest[i] = time.time()
        if copy == 0:
            submitted[i] = latest[i]
        ac.add(fut)

    nxt = 0
    while nxt < min(slots, n):
        submit(nxt, 0)
        nxt += 1
    need = max(1, math.floor(quantile * slots + 1e-9))
    backups = 0
    while len(winner) < n:
        batch = ac.next_batch(block=False)
        for fut in batch:
            i = chunk_of[fut]
            if fut.status == "error" and all(f.status == "error" for f in out_copies[i]):
                raise fut.exception()
            if i in winner or fut.status != "finished":
                continue
            _, finished = fut.result()
            winner[i] = finished
            durations.append(finished - submitted[i])  # as the lateness below: from the submission
            client.cancel([f for f in out_copies[i] if f is not fut])
            if nxt < n:
                submit(nxt, 0)
                nxt += 1
        if len(durations) >= need:
            threshold = max(multiplier * float(np.median(durations)), min_runtime)
            now = time.time()
            for i in list(submitted):
                if i not in winner and len(out_copies[i]) <= copies and now - latest[i] > threshold:
                    submit(i, len(out_copies[i]))
                    backups += 1
        if not batch:
            time.sleep(poll_s)
    wall = time.perf_counter() - t0
    _settle(client)
    spans = []
    for b in range(0, n, K):
        ids = range(b, min(b + K, n))
        spans.append(max(winner[i] for i in ids) - min(submitted[i] for i in ids))
    return {"wall_s": wall, "spans": np.array(spans), "compute_s": _spent(c0, _task_seconds(client)), "backups": backups}
