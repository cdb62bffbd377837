"""Helpers shared by the pipeline tests: rebuild a run's batches from its store, and decode them directly."""

from __future__ import annotations

import threading

import numpy as np
import zarr

from gcc_dask.composition import BatchLayout


def stored_layout(path) -> BatchLayout:
    """The run's batch layout, read back from its store (composition, K, block size)."""
    root = zarr.open_group(str(path), mode="r")
    attrs = root.attrs
    order = np.asarray(root["inputs/sample"][:], dtype=np.int64)
    return BatchLayout(int(attrs["num_samples"]), int(attrs["num_inputs"]), int(attrs["block_size"]), order)


def direct_decode(path, scheme: str, batch: int, code, f, source) -> np.ndarray:
    """What batch `batch` of `scheme` decodes to, computed here: encode the stored composition's blocks, apply f
    to the coded blocks of the stored received set, decode (the same calls as the pipeline's tasks).

    Returns (n_batch, *out) in slot order: compare with ``decoded`` rows ``batch_slots(batch)``.
    """
    layout = stored_layout(path)
    root = zarr.open_group(str(path), mode="r")
    received = np.flatnonzero(root[f"{scheme}/received"][batch])
    x, _ = source.take(layout.samples(batch))
    blocks = layout.to_blocks(x)  # (K, G, *shape)
    # one call of f per shard block, each shard's own row of the encoder, as the shards
    y = np.stack([np.asarray(f(code.encode(blocks, workers=[w])[0])) for w in received])
    decoded = code.decode(y, received)
    n = x.shape[0]
    return np.asarray(BatchLayout.from_blocks(decoded, n)).reshape(n, -1)


_CALLS_LOCK = threading.Lock()
#: calls of :func:`counted_sin` so far (a threaded cluster's workers share this module with the test)
CALLS = {"n": 0}


def counted_sin(x):
    """f(x) = sin(x), counting its calls in :data:`CALLS` (one call per shard block)."""
    with _CALLS_LOCK:
        CALLS["n"] += 1
    return np.sin(np.asarray(x, dtype=np.float64))


#: the keys of the tasks :func:`keyed_sin` ran in, in the order of its calls ("" for a call outside a task)
RAN: list[str] = []


def keyed_sin(x):
    """f(x) = sin(x), appending the key of the task that calls it to :data:`RAN` (on a worker with one thread: the
    order in which the worker ran its shards)."""
    from distributed.worker import thread_state

    with _CALLS_LOCK:
        RAN.append(str(getattr(thread_state, "key", "")))
    return np.sin(np.asarray(x, dtype=np.float64))



def slow_on(x, address: str | list = "", seconds: float = 1.0, scheme: str | None = None):
    """f(x) = tanh(x), but `seconds` late on the Dask worker at `address` (a persistently slow worker; a list:
    on each of them); with `scheme`, only in that scheme's shards (tasks ``eval-b*-w*-<scheme>-*``: the other
    schemes of the run, an exact one that would wait for them, are not slowed). The delay is a cooperative sleep,
    so a cancelled copy frees its thread."""
    from distributed import get_worker
    from distributed.worker import thread_state

    from gcc_dask.runtime.tasks import cooperative_sleep

    try:
        here = get_worker().address
    except ValueError:  # called outside a task (the driver's check on one sample)
        here = None
    mine = scheme is None or f"-{scheme}-" in str(getattr(thread_state, "key", ""))
    if here is not None and here in ([address] if isinstance(address, str) else address) and mine:
        cooperative_sleep(seconds)
    return np.tanh(np.asarray(x, dtype=np.float64))


#: opened by a test to let the shards :func:`held_on` holds go on (a threaded cluster's workers share it)
GATE = threading.Event()
#: shards :func:`held_on` has held so far, and those it let go on because the gate opened (not cancelled)
HELD = {"held": 0, "let_through": 0}


def held_on(x, address: str = ""):
    """f(x) = tanh(x), but a shard (a task ``eval-...``) on the Dask worker at `address` is held until
    :data:`GATE` opens or the task is cancelled (a worker slower than any timeout: the shards there never finish
    while the gate is closed; the batch's reference, off the latency path, is not held)."""
    from distributed import get_worker
    from distributed.worker import thread_state

    from gcc_dask.runtime.cancel import is_cancelled

    try:
        here = get_worker().address
    except ValueError:  # called outside a task (the driver's check on one sample)
        here = None
    if here == address and str(getattr(thread_state, "key", "")).startswith("eval-"):
        with _CALLS_LOCK:
            HELD["held"] += 1
        while not GATE.wait(0.05):
            if is_cancelled():
                break
        else:
            with _CALLS_LOCK:
                HELD["let_through"] += 1
    return np.tanh(np.asarray(x, dtype=np.float64))


class StubFuture:
    """A stand-in for a Dask future on a stub client that runs nothing: its key, a status the test sets, and the
    error ``exception()`` returns."""

    def __init__(self, key):
        self.key, self.status, self.error = key, "pending", None

    def exception(self, timeout=None):
        return self.error
