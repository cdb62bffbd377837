"""How many samples a shard task evaluates at once: the block size B chosen from what f costs.

With ``code.block_size: auto`` (the default) the run times f on a sample of the source before it starts
(:func:`time_f`) and :func:`choose_block_size` picks B so that one shard task spends about
:data:`TARGET_SHARD_S` seconds in f: enough to dwarf what Dask and the run spend per task (a few ms), as
Dask's own guidance asks of tasks (100 ms or more). A cheap f gets large blocks, a costly one small blocks.
B is then bounded by memory (:data:`MAX_BATCH_BYTES` of samples per batch), by the data (at least
:data:`MIN_BATCHES` batches where the source is long enough, so that batches overlap and the cutoff has
latencies to learn from), lined up with the source's chunks (each chunk read once per batch), and rounded so
that a little timing noise does not change it. The batches in flight follow from B
(:data:`MAX_IN_FLIGHT_BYTES`). docs/pipeline.rst, section 'Block size', tells the rule and its figures.

The choice depends on the machine's speed, so it is made once, when a store is created, and recorded in
the store (attrs ``block_size`` and ``block_size_reason``); a resumed run reuses it. Set
``code.block_size`` to a number for a layout that is the same on every machine.

Pure Python and NumPy: the caller hands f and the source in.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["BlockChoice", "FCost", "batches_in_flight", "choose_block_size", "time_f", "MAX_BLOCK_SIZE"]

#: seconds of f per shard task that the automatic block size aims at
TARGET_SHARD_S = 0.1
#: batches a run keeps at least, where the source holds that many (each batch is one cutoff and one decode)
MIN_BATCHES = 4
#: bytes of samples one batch may hold (a batch's samples are read into memory by each worker that runs it)
MAX_BATCH_BYTES = 128 * 2**20
#: bytes of samples the batches in flight may hold together
MAX_IN_FLIGHT_BYTES = 512 * 2**20
#: the largest block size (``code.block_size``'s upper bound)
MAX_BLOCK_SIZE = 262144
#: :func:`time_f` doubles the samples of its call until one takes this long (seconds) ...
PROBE_S = 0.02
#: ... or holds this many samples
PROBE_MAX_ROWS = 8192
#: ... or holds this many bytes of samples (224 x 224 RGB images in float32: 85 of them)
PROBE_MAX_BYTES = 16 * 2**20
#: the first call's samples
PROBE_MIN_ROWS = 64
#: calls of f timed on the last rows when one is short (under 2 × PROBE_S): the fastest is f's cost
PROBE_REPEATS = 3


@dataclass(frozen=True)
class FCost:
    """What one timed call of f cost: `seconds` for `rows` samples."""

    seconds: float
    rows: int

    @property
    def seconds_per_row(self) -> float:
        return self.seconds / max(1, self.rows)


@dataclass(frozen=True)
class BlockChoice:
    """A block size and the batches in flight that go with it, and why (one sentence, stored with the run)."""

    block_size: int
    max_in_flight: int
    reason: str


def probe_rows(num_samples: int, row_bytes: int = 0) -> int:
    """How many of a source's first samples :func:`time_f` times f on at most: ``num_samples``, at most
    :data:`PROBE_MAX_ROWS`, and at most :data:`PROBE_MAX_BYTES` of samples of `row_bytes` bytes each (never
    fewer than one)."""
    cap = PROBE_MAX_ROWS if row_bytes <= 0 else max(1, min(PROBE_MAX_ROWS, PROBE_MAX_BYTES // int(row_bytes)))
    return max(1, min(int(num_samples), cap))


def time_f(fn: Callable[[np.ndarray], Any], read: Callable[[int, int], np.ndarray], num_samples: int,
           clock: Callable[[], float] = time.perf_counter) -> FCost:
    """Time f on the first samples of a source: calls on 64, 128, 256, ... samples until one takes
    :data:`PROBE_S` seconds or holds :func:`probe_rows` samples (the model's probe hands it the samples it
    read, at most :data:`PROBE_MAX_BYTES` of them); the last call's cost, or,
    when that call was short (under 2 × PROBE_S), the fastest of :data:`PROBE_REPEATS` calls on those samples
    (a busy machine preempts some of them).

    The first call (on :data:`PROBE_MIN_ROWS` samples) warms f up (a model's first call allocates) and is
    timed again. The samples are read once, all of them at first (a chunked, compressed source decompresses its
    first chunk once, not once per call). About 6 × PROBE_S of f at most, plus the read.

    Parameters
    ----------
    fn : callable
        f, mapping ``(m, *sample_shape)`` to ``(m, *output_shape)``.
    read : callable
        ``read(start, stop) -> x`` of shape ``(stop - start, *sample_shape)``.
    num_samples : int
        The source's length (>= 1).
    clock : callable
        Seconds, monotonic.

    Returns
    -------
    FCost
    """
    limit = probe_rows(num_samples)
    rows = min(PROBE_MIN_ROWS, limit)
    samples = read(0, limit)
    fn(samples[:rows])  # warm-up
    while True:
        x = np.ascontiguousarray(samples[:rows])
        t0 = clock()
        fn(x)
        spent = clock() - t0
        if spent >= PROBE_S or rows >= limit:
            break
        rows = min(2 * rows, limit)
    # a short call timed again, the fastest kept: on a busy machine a call of a few ms is often preempted (f
    # timed 16-80x slower than it is gave blocks as many times smaller, and a run of as many more tasks)
    for _ in range(PROBE_REPEATS - 1 if spent < 2 * PROBE_S else 0):
        t0 = clock()
        fn(x)
        spent = min(spent, clock() - t0)
    return FCost(seconds=max(spent, 0.0), rows=rows)


def _aligned(b: int, k: int, chunks: int | None, multiple: int, ceiling: int | None = None) -> int:
    """`b` (>= 1) moved to a value that lines blocks up with the chunks, a multiple of `multiple`.

    With chunks of c samples, in order of preference:

    - ``b >= c / 2``: B a whole number of chunks (rounded down, or up to one chunk when ``c / 2 <= b < c``
      and one chunk is at most `ceiling`): every shard of a selection scheme (uncoded, replication) then
      reads whole chunks of its own, so a batch reads each chunk once, and a batch of K·B samples holds
      whole chunks;
    - B a divisor of c such that whole batches fill a chunk (K·B divides c);
    - B a divisor of c (a shard's samples lie in one chunk);
    - else, or without chunks, B moved down to a power of two times `multiple`.

    A candidate below ``b / 2`` is not taken. Never below `multiple` nor 1.
    """
    unit = max(1, int(multiple))
    if chunks is None or chunks < 1:
        whole = max(1, b // unit)
        return unit * 2 ** int(math.floor(math.log2(whole)))
    c = int(chunks)
    step = c * unit // math.gcd(c, unit)  # the smallest whole number of chunks that is a multiple of `unit`
    if 2 * b >= c:
        cand = max(1, b // step) * step
        if cand <= b or (cand <= 2 * b and (ceiling is None or cand <= ceiling)):
            return cand
    for per in (k, 1):  # whole batches per chunk (K·B divides c), then whole blocks per chunk (B divides c)
        for j in range(max(1, -(-c // (per * b))), 2 * c // (per * b) + 1):
            cand = c // (per * j)
            if c % (per * j) == 0 and cand % unit == 0 and b <= 2 * cand <= 2 * b:
                return cand
    return _aligned(b, k, None, unit)


def batches_in_flight(block_size: int, group_size: int, row_bytes: int, max_in_flight: int) -> int:
    """The batches in flight for blocks of `block_size`: as many as :data:`MAX_IN_FLIGHT_BYTES` of samples hold,
    at least 2 (one decoding while the next runs) and at most the configured `max_in_flight`."""
    batch_bytes = max(1, int(group_size) * int(block_size) * int(row_bytes))
    return max(min(2, int(max_in_flight)), min(int(max_in_flight), MAX_IN_FLIGHT_BYTES // batch_bytes))


def choose_block_size(seconds_per_row: float, *, num_samples: int, group_size: int, row_bytes: int,
                      chunks: int | None = None, max_in_flight: int = 16, multiple: int = 1) -> BlockChoice:
    """The block size B for f's measured cost, and the batches in flight (see the module docs).

    Parameters
    ----------
    seconds_per_row : float
        f's cost per sample (:attr:`FCost.seconds_per_row`), seconds; >= 0.
    num_samples : int
        n, the source's samples.
    group_size : int
        K.
    row_bytes : int
        Bytes of one sample as read.
    chunks : int, optional
        The source's samples per chunk (:attr:`gcc_dask.sources.Source.chunks`).
    max_in_flight : int
        The configured ``run.max_batches_in_flight``: the batches in flight never exceed it.
    multiple : int
        B is a multiple of this (a model with a fixed batch dimension).

    Returns
    -------
    BlockChoice

    Raises
    ------
    ValueError
        A negative or non-finite cost, or a size below 1.
    """
    if not (math.isfinite(seconds_per_row) and seconds_per_row >= 0):
        raise ValueError(f"seconds_per_row: got {seconds_per_row!r}; expected a finite number >= 0")
    for name, value in (("num_samples", num_samples), ("group_size", group_size), ("row_bytes", row_bytes),
                        ("max_in_flight", max_in_flight), ("multiple", multiple)):
        if int(value) < 1:
            raise ValueError(f"{name}: got {value!r}; expected an integer >= 1")
    k, n = int(group_size), int(num_samples)
    bounds = {
        f"{TARGET_SHARD_S:g} s of f per shard": math.ceil(TARGET_SHARD_S / max(seconds_per_row, 1e-9)),
        f"{MAX_BATCH_BYTES // 2**20} MiB of samples per batch": max(1, MAX_BATCH_BYTES // (k * int(row_bytes))),
        f"at least {MIN_BATCHES} batches": max(1, math.ceil(n / (k * MIN_BATCHES))),
        "the largest block size": MAX_BLOCK_SIZE,
    }
    bound = min(bounds, key=bounds.get)
    ceiling = min(MAX_BLOCK_SIZE, bounds[f"{MAX_BATCH_BYTES // 2**20} MiB of samples per batch"])
    b = _aligned(bounds[bound], k, chunks, int(multiple), ceiling)
    in_flight = batches_in_flight(b, k, int(row_bytes), int(max_in_flight))
    per_shard = b * seconds_per_row
    reason = (f"auto: f took {seconds_per_row * 1e6:.3g} µs per sample; B = {b} ({per_shard * 1e3:.3g} ms of f per "
              f"shard), bounded by {bound}"
              + (f" ({bounds[bound]}), rounded up to whole chunks of {chunks}" if b > bounds[bound]
                 else f", aligned with chunks of {chunks}" if chunks and (b % chunks == 0 or chunks % b == 0)
                 else f", not lined up with chunks of {chunks} (none fits a multiple of {multiple})" if chunks else "")
              + f"; {in_flight} batches in flight")
    return BlockChoice(block_size=b, max_in_flight=in_flight, reason=reason)
