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



def slow_on(x, address: str | list = "", seconds: float = 1.0):
    """f(x) = tanh(x), but `seconds` late on the Dask worker at `address` (a persistently slow worker; a list:
    on each of them); the delay is a cooperative sleep, so a cancelled copy frees its thread."""
    from distributed import get_worker

    from gcc_dask.runtime.tasks import cooperative_sleep

    try:
        here = get_worker().address
    except ValueError:  # called outside a task (the driver's check on one sample)
        here = None
    if here is not None and here in ([address] if isinstance(address, str) else address):
        cooperative_sleep(seconds)
    return np.tanh(np.asarray(x, dtype=np.float64))
