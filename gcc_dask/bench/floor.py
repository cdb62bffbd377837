"""What a coded scheme's throughput cannot exceed on this machine: its parts measured alone, summed per batch.

A batch of K·B samples costs the plain map K tasks of B samples each: each reads the chunks that hold its samples
(decompression included; ceil(B / c) chunks of c samples, one whole chunk when B < c) and evaluates f on its B
samples. A scheme at a cutoff of N − S results (lazy spares: the S spares run only when a
result is missing) costs at least:

- N − S evaluations of f on B coded samples, and N − S encodes of one coded input (``code.encode(blocks,
  workers=(n,))``, as :meth:`gcc_dask.runtime.plugin.RunPlugin.shard_input` does);
- the batch's chunks read once by every worker process that runs one of its shards (a coded shard needs the whole
  batch; a batch's shards go round-robin, so each of P processes runs some when N − S >= P). A process keeps a
  window's chunks while its batches run, so over a job it reads each chunk once: K·B / c chunk reads a batch per
  process, for chunks of c samples;
- its share of the composition (:func:`gcc_dask.composition.compose`, ``similarity``: the windows' reads,
  projection and chain, and the projection's fit), when the scheme's estimates depend on the grouping.

Dask's own work (scheduling, transfers to the decode, the decode and the store's writes) is left out, so the
ratio of the plain map's cost to this sum is an upper bound on the scheme's throughput relative to the plain map
on a machine whose cores are all busy: the *floor* of the scheme's cost, not a prediction. The work limit
K / (N − S) counts f alone; the floor counts what the machine must also do for the scheme (BENCHMARKS.md, section
"What bounds gcc on compressed data").
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np

__all__ = ["throughput_floor"]


def _median_s(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `fn` (s) over `repeats` calls after one warm-up call, on an otherwise idle machine."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(statistics.median(times))


def throughput_floor(source, f: Callable[[np.ndarray], Any], code, *, block: int, stopping_at: int,
                     processes: int, composes: bool = True, repeats: int = 5, **compose_kwargs: Any) -> dict:
    """The parts of one batch's cost, measured one at a time in this process, and the throughput bounds they imply.

    Parameters
    ----------
    source : gcc_dask.sources.Source
        A chunked source (``source.chunks`` not None), e.g. a compressed Zarr array.
    f : callable
        The loaded workload: ``f(x)`` on a ``(B, *sample_shape)`` array (:func:`gcc_dask.workloads.load_workload`).
    code : gcc_dask.coding.CodingScheme
        The scheme, with K = ``code.num_inputs`` and N = ``code.num_workers``.
    block : int
        B, samples per shard task (``code.block_size``); a batch holds K·B samples.
    stopping_at : int
        The results the cutoff keeps, N − S (1 to N).
    processes : int
        P, the worker processes a batch's shards are spread over (each reads the whole batch once).
    composes : bool
        Whether the scheme's estimates depend on the grouping (then the similarity composition is counted).
    repeats : int
        Timed calls per part (the median is taken).
    **compose_kwargs
        Passed to :func:`gcc_dask.composition.compose`: ``window``, ``dims``, ``fit_samples``, ``seed``.

    Returns
    -------
    dict
        ``chunk_read_s``: one chunk read (s). Seconds per batch: ``plain_read_s``, ``plain_f_s`` (the plain map's
        K tasks: their chunk reads and their calls of f on B samples), ``f_s``, ``encode_s`` (N − S each),
        ``read_s`` (min(P, N − S) reads of a batch's worth of chunks), ``composition_s`` (the whole composition over the number of batches;
        0 when not `composes`); and ``floor`` (the plain map's cost over the scheme's: an upper bound on its
        throughput relative to the plain map), ``floor_without_composition``, ``work_limit`` (K / (N − S), f
        alone).

    Raises
    ------
    InvalidInputError
        If `source` has no chunks, `code` is not a coding scheme, `stopping_at`, `block`, `processes` or `repeats`
        are out of range, `composes` is not a bool, or a keyword is not one of :func:`compose`'s.
    """
    from gcc_dask.composition import compose
    from gcc_dask.errors import InvalidInputError

    if not all(hasattr(code, a) for a in ("num_inputs", "num_workers", "encode")):
        raise InvalidInputError(f"code: got {type(code).__name__}; expected a coding scheme "
                                "(gcc_dask.make_code(...))")
    k, n = int(code.num_inputs), int(code.num_workers)
    if getattr(source, "chunks", None) is None or not hasattr(source, "read_chunk"):
        raise InvalidInputError(f"source: got {getattr(source, 'name', type(source).__name__)!r}, which has no "
                                "chunks; the floor counts chunk reads of a chunked source (a Zarr array, or a "
                                "dask array chunked along its samples: gcc_dask.sources.make_source)")
    if not isinstance(composes, bool):
        raise InvalidInputError(f"composes: got {composes!r}; expected True or False")
    unknown = sorted(set(compose_kwargs) - {"window", "dims", "fit_samples", "seed"})
    if unknown:
        raise InvalidInputError(f"{unknown[0]}: not a keyword of the composition; expected window, dims, "
                                "fit_samples or seed")
    for name, value, low, high in (("stopping_at", stopping_at, 1, n), ("block", block, 1, None),
                                   ("processes", processes, 1, None), ("repeats", repeats, 1, None)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low \
                or (high is not None and value > high):
            raise InvalidInputError(f"{name}: got {value!r}; expected an integer in [{low}, {high or 'inf'}]")
    if source.num_samples < k * block:
        raise InvalidInputError(f"block: got {block}; a batch of K·B = {k * block} samples is more than the source's "
                                f"{source.num_samples}: expected at most {source.num_samples // k}")
    t0 = time.perf_counter()
    layout = compose(source, group_size=k, block_size=block, policy="similarity" if composes else "as_stored",
                     **compose_kwargs)
    composition_s = (time.perf_counter() - t0) / layout.num_batches if composes else 0.0
    chunks = np.unique(layout.samples(0) // int(source.chunks))  # the chunks its first batch reads
    per_batch = k * block / int(source.chunks)  # a batch's worth of chunks (each read once per process per job)
    x, _ = source.take(layout.samples(0))
    blocks = layout.to_blocks(x)
    coded = np.ascontiguousarray(code.encode(blocks, workers=(0,))[0])
    plain = np.ascontiguousarray(source.read(0, block)[0])  # a plain task's B samples
    chunk_s = _median_s(lambda: [source.read_chunk(int(i)) for i in chunks], repeats) / chunks.size
    f_s = _median_s(lambda: f(coded), repeats)
    f_plain_s = _median_s(lambda: f(plain), repeats)
    encode_s = _median_s(lambda: code.encode(blocks, workers=(1 % n,)), repeats)
    c = int(source.chunks)
    plain_read_s, plain_f_s = k * -(-block // c) * chunk_s, k * f_plain_s  # ceil(B / c) chunks a task
    scheme = {"f_s": stopping_at * f_s, "encode_s": stopping_at * encode_s,
              "read_s": min(int(processes), stopping_at) * per_batch * chunk_s, "composition_s": composition_s}
    batches_only = scheme["f_s"] + scheme["encode_s"] + scheme["read_s"]
    return {"chunk_read_s": chunk_s, "plain_read_s": plain_read_s, "plain_f_s": plain_f_s, **scheme,
            "floor": (plain_read_s + plain_f_s) / (batches_only + composition_s),
            "floor_without_composition": (plain_read_s + plain_f_s) / batches_only,
            "work_limit": k / stopping_at}
