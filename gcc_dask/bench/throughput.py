"""Throughput of a dataset job, side by side with what a Dask user does without gcc-dask.

Two sections of ``gcc-dask bench pipeline``:

``throughput``
    LeNet-5 on MNIST-shaped images (the 5,000 real digits tiled into a Zarr array written by the bench).
    The user's alternative is a plain ``client.map`` of f over chunks of B images, written here with Dask's
    public API only (each task reads its chunk from the Zarr array, runs the ONNX model, writes its rows to
    a Zarr array of outputs). Against it, on the same data and cluster, in one run: the pipeline's
    ``uncoded`` (N = K), ``replication`` (N = 2K), ``gcc`` and ``bacc`` (N = 2K, cutoff at N − S), each run
    on its own with blocks of the same B images and ``run.reference: false``, plus ``gcc`` with the
    reference on and ``gcc`` with the default similarity composition. Three scenarios: (a) no stragglers;
    (b) the same injected draws for every contender, plain map included: hang probability 0.05, hangs 20x
    the median chunk time; (c) one persistently slow worker (20x). The plain map runs again after every
    contender, and each contender is compared with the two plain runs beside it in time (the machine's speed
    drifts). Samples/s and job wall time for each,
    and the batch latency p50/p99 (for the plain map: a "batch" is K consecutive chunks, from the first
    one's start to the last one's end).
``scale``
    The gcc pipeline on 100,000 and 1,000,000 MNIST-shaped images (a Zarr array): samples/s, composition
    time, and the peak resident memory of the driver and of the workers.

Quick mode (``--quick``, the tests): blocks of :data:`QUICK_BLOCK` images, 8 batches in ``throughput`` (its
contenders: uncoded and gcc, the ones its targets read, and gcc with the reference; scenarios (a) and (b), those
its targets read; one plain run per scenario, no pipeline warm-up), 4 and 16 in ``scale``.
"""

from __future__ import annotations

import functools
import math
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gcc_dask.bench.report import Table, Target

__all__ = ["plain_chunk", "task_seconds", "write_dataset", "throughput_section", "scale_section"]

K = 8
N = 16
S = 4
HANG_PROB = 0.05
HANG_FACTOR = 20.0
SLOW_FACTOR = 20.0
#: targets (issue 12), all ratios measured in one run
GCC_VS_MAP_MIN = 0.4
UNCODED_VS_MAP_MIN = 0.8
GCC_P99_VS_UNCODED_MAX = 0.3
GCC_WALL_VS_MAP_MAX = 1.0
SCALE_MEMORY_MAX = 1.10
SCALE_RATE_MIN = 0.8
#: quick mode (tests): blocks of this many images, and only these schemes (the targets' contenders)
QUICK_BLOCK = 16
QUICK_SCHEMES = ("uncoded", "gcc")


# ------------------------------------------------------------------------------------- the plain map
@functools.lru_cache(maxsize=4)
def _session(model: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # as the pipeline's ONNX workload: Dask runs several tasks per worker
    sess = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
    return sess, sess.get_inputs()[0].name


@functools.lru_cache(maxsize=8)
def _array(path: str, mode: str):
    import zarr

    return zarr.open_array(path, mode=mode)


_TASK_SECONDS = [0.0]
_TASK_LOCK = threading.Lock()


def task_seconds() -> float:
    """Seconds that :func:`plain_chunk` tasks have held a thread of this process so far (their sleeps included,
    and those of copies that were cancelled: a running task is never interrupted)."""
    with _TASK_LOCK:
        return _TASK_SECONDS[0]


def plain_chunk(data: str, out: str, model: str, start: int, stop: int, delay_s: float = 0.0):
    """One task of the plain map: sleep the injected delay, read rows start:stop, run f, write the outputs.

    Returns (started, finished) as ``time.time()``; the time it took is added to :func:`task_seconds`.
    """
    started = time.time()
    t0 = time.perf_counter()
    try:
        if delay_s > 0:
            time.sleep(delay_s)
        sess, name = _session(model)
        x = _array(data, "r")[start:stop]
        y = sess.run(None, {name: np.ascontiguousarray(x, dtype=np.float32)})[0]
        _array(out, "r+")[start:stop] = y
        return started, time.time()
    finally:
        with _TASK_LOCK:
            _TASK_SECONDS[0] += time.perf_counter() - t0


def _plain_map(client, data: str, work: Path, model: str, samples: int, block: int, delays=None) -> dict:
    """Run the plain map over every chunk of `block` samples; wall time and the K-chunk "batch" spans."""
    import zarr

    out = str(work / "plain-out.zarr")
    zarr.create_array(store=out, shape=(samples, 10), chunks=(block, 10), dtype="float32", overwrite=True)
    starts = list(range(0, samples, block))
    stops = [min(s + block, samples) for s in starts]
    d = [0.0] * len(starts) if delays is None else [float(delays(i)) for i in range(len(starts))]
    t0 = time.perf_counter()
    futures = client.map(plain_chunk, [data] * len(starts), [out] * len(starts), [model] * len(starts), starts,
                         stops, d, pure=False)
    times = client.gather(futures)
    wall = time.perf_counter() - t0
    spans = [max(t[1] for t in times[i:i + K]) - min(t[0] for t in times[i:i + K]) for i in range(0, len(times), K)]
    chunk = [t[1] - t[0] - dd for t, dd in zip(times, d)]
    return {"wall_s": wall, "spans": np.array(spans), "chunk_s": np.array(chunk)}


# -------------------------------------------------------------------------------------------- data
def write_dataset(path: Path, samples: int, chunk: int, compressed: bool = False) -> None:
    """The 5,000 real MNIST digits tiled to `samples` images (1, 28, 28) float32 in a Zarr array with chunks of
    `chunk` images: uncompressed, or with `compressed` Zarr's default codec (Zstandard), as a real dataset is
    stored."""
    import zarr

    from gcc_dask.sources import make_source

    digits, _ = make_source("mnist").read(0, 5000)
    codec = {} if compressed else {"compressors": None}
    arr = zarr.create_array(store=str(path), shape=(samples, 1, 28, 28), chunks=(chunk, 1, 28, 28),
                            dtype="float32", overwrite=True, **codec)
    step = 5000 * max(1, (1 << 16) // 5000)
    tile = np.concatenate([digits] * (step // 5000))
    for start in range(0, samples, step):
        stop = min(start + step, samples)
        arr[start:stop] = tile[: stop - start]


def _pipeline(client, work: Path, name: str, data: str, model: str, *, scheme: str, block: int,
              stragglers: dict, cutoff: dict, reference: bool = False, composition: str = "as_stored",
              in_flight: int = 16, spares: str = "lazy", limit_batches: int | None = None) -> dict:
    from gcc_dask.pipeline import run_pipeline

    cfg = {
        "name": name, "source": {"kind": "zarr", "path": data}, "workload": {"kind": "onnx", "path": model},
        "code": {"num_inputs": K, "num_workers": N, "block_size": block}, "composition": {"policy": composition},
        "schemes": [scheme], "stragglers": stragglers, "cutoff": {**cutoff, "spares": spares},
        "store": {"path": str(work / f"{name}.zarr"), "overwrite": True},
        "run": {"max_batches_in_flight": in_flight, "progress": False, "reference": reference,
                "limit_batches": limit_batches},
    }
    t0 = time.perf_counter()
    res = run_pipeline(cfg, client=client)
    wall = time.perf_counter() - t0
    s = res.summary.loc[scheme]
    return {"wall_s": wall, "batches_wall_s": res.wall_s, "latency_p50_s": float(s["latency_p50_s"]),
            "latency_p99_s": float(s["latency_p99_s"]), "rel_acc": float(s["rel_acc"]),
            "mean_received": float(s["mean_received"])}


# ------------------------------------------------------------------------------------------ sections
def throughput_section(client, work: Path, quick: bool, say: Callable[[str], None], model: str,
                       block: int) -> tuple[Table, list[Target], list[str]]:
    """The ``throughput`` section (see the module docstring)."""
    from gcc_dask.stragglers import ShiftedExponential

    block = QUICK_BLOCK if quick else block
    samples = 8 * K * block if quick else 100_000
    data = str(work / "throughput-data.zarr")
    client.submit(write_dataset, Path(data), samples, block, pure=False).result()  # on a worker, not the driver
    # warm up both sides (imports, ONNX sessions and their per-thread memory, zarr on the workers): the first
    # pipeline jobs on a fresh cluster otherwise run up to 30% slower, a cost the map's warm-up has paid. Every
    # worker thread runs shards of both code paths (encoded blocks, and uncoded reads of one position). Quick mode
    # (the tests: figures not representative) warms the map only, and runs it once per scenario
    _plain_map(client, data, work, model, min(samples, 4 * K * block), block)
    for scheme, batches in ((("gcc", 16), ("uncoded", 8)) if not quick else ()):
        _pipeline(client, work, "tp-warm", data, model, scheme=scheme, block=block, stragglers={"model": "none"},
                  cutoff={"wait_for": "N-S", "stragglers": S}, limit_batches=batches)
    base = _plain_map(client, data, work, model, samples, block)
    m = float(np.median(base["chunk_s"]))
    say(f"  throughput: {samples:,} images, blocks of {block}; plain map {samples / base['wall_s']:,.0f} samples/s, "
        f"median chunk {m * 1e3:.1f} ms")
    jitter = 0.2 * m
    scenarios = {
        "a: no stragglers": None,
        "b: hangs": {"model": "shifted_exponential", "shift": 0.0, "scale": jitter, "hang_prob": HANG_PROB,
                     "hang_delay": HANG_FACTOR * m, "seed": 0},
        "c: one slow worker": {"model": "shifted_exponential", "shift": m, "scale": jitter, "slow_workers": 1,
                               "slow_factor": SLOW_FACTOR, "seed": 0},
    }
    if quick:  # (c) feeds no target; the tail section's (c) slows a worker process of its own
        del scenarios["c: one slow worker"]
    rows = []
    for scenario, strag in scenarios.items():
        latency = None if strag is None else ShiftedExponential(
            **{k: v for k, v in strag.items() if k not in ("model", "seed")})
        def delay(i, latency=latency):
            return latency.latencies(0, i // K, K)[i % K]  # chunk i = worker i % K of batch i // K

        def run_plain():
            return _plain_map(client, data, work, model, samples, block, delays=None if latency is None else delay)

        # the plain map runs again after every contender: each contender is compared with the mean of the two
        # plain runs beside it in time (the machine's speed drifts by tens of percent within minutes)
        plains = [base if scenario.startswith("a") else run_plain()]
        say(f"  {scenario}: plain map {samples / plains[0]['wall_s']:,.0f} samples/s")
        # the cutoff sees real arrivals (stragglers.clock: wall), as the plain map does: the injected sleeps
        # are real stragglers here, not draws to decide on
        strag_cfg = {"model": "none"} if strag is None else {**strag, "clock": "wall"}
        coded_cut = {"wait_for": "N-S", "stragglers": S, "on_shortfall": "decode"}
        if strag is not None:
            coded_cut["deadline"] = 10 * m
        contenders = [("uncoded", {}, K), ("replication", {}, 2 * K), ("gcc", {}, N), ("bacc", {}, N)]
        contenders.append(("gcc", {"spares": "eager"}, N))  # every shard computes: the papers' model
        if scenario.startswith("a"):
            contenders += [("gcc", {"reference": True}, N), ("gcc", {"composition": "similarity"}, N)]
        if quick:  # what the targets read, and the reference's path: seconds, not representative
            contenders = [c for c in contenders if c[0] in QUICK_SCHEMES and set(c[1]) <= {"reference", "in_flight"}]
        if scenario.startswith("b"):
            # with 16 batches in flight a batch's latency is mostly its wait in the queue; with 2 it is the
            # stragglers' doing: the tail-latency comparison the coding is for
            contenders += [("uncoded", {"in_flight": 2}, K), ("gcc", {"in_flight": 2}, N)]
        for scheme, extra, n in contenders:
            label = scheme + "".join(f", {k}: {v}" for k, v in extra.items())
            r = _pipeline(client, work, f"tp-{scheme}", data, model, scheme=scheme, block=block,
                          stragglers=strag_cfg, cutoff=coded_cut, **extra)
            if not quick:  # (quick mode: the scenario's one plain run)
                plains.append(run_plain())
            beside = (plains[-2]["wall_s"] + plains[-1]["wall_s"]) / 2 if len(plains) > 1 else plains[0]["wall_s"]
            rows.append({"scenario": scenario, "contender": f"pipeline {label}", "N": n,
                         "samples_per_s": samples / r["wall_s"], "job_wall_s": r["wall_s"],
                         "batch_p50_s": r["latency_p50_s"], "batch_p99_s": r["latency_p99_s"],
                         "rel_acc": r["rel_acc"], "plain_wall_s": beside, "vs_plain_map": beside / r["wall_s"]})
            say(f"  {scenario}: {label} {rows[-1]['samples_per_s']:,.0f} samples/s ({rows[-1]['vs_plain_map']:.2f}x "
                f"the plain map beside it), p99 {r['latency_p99_s']:.3f} s")
        walls = np.array([p["wall_s"] for p in plains])
        spans = np.concatenate([p["spans"] for p in plains])
        rows.insert(len(rows) - len(contenders), {
            "scenario": scenario, "contender": "plain client.map", "N": "-",
            "samples_per_s": samples / float(np.median(walls)), "job_wall_s": float(np.median(walls)),
            "batch_p50_s": float(np.percentile(spans, 50)), "batch_p99_s": float(np.percentile(spans, 99)),
            "rel_acc": 1.0, "plain_wall_s": float(np.median(walls)), "vs_plain_map": 1.0})

    def pick(scenario, contender):
        return next(r for r in rows if r["scenario"].startswith(scenario) and r["contender"] == contender)

    gcc_a, unc_a = pick("a", "pipeline gcc"), pick("a", "pipeline uncoded")
    gcc_b, map_b = pick("b", "pipeline gcc"), pick("b", "plain client.map")
    gcc_l, unc_l = pick("b", "pipeline gcc, in_flight: 2"), pick("b", "pipeline uncoded, in_flight: 2")
    targets = [
        Target("no stragglers: gcc samples/s / plain map", gcc_a["vs_plain_map"], GCC_VS_MAP_MIN, ">=", "x",
               f"{gcc_a['samples_per_s']:,.0f} vs {samples / gcc_a['plain_wall_s']:,.0f} samples/s (the plain map "
               f"beside it); N - S = 12 of 16 shards computed per 8 chunks: about 0.67 at most"),
        Target("no stragglers: uncoded samples/s / plain map", unc_a["vs_plain_map"], UNCODED_VS_MAP_MIN, ">=", "x",
               f"{unc_a['samples_per_s']:,.0f} vs {samples / unc_a['plain_wall_s']:,.0f} samples/s"),
        Target("hangs: gcc p99 batch latency / uncoded p99 (2 batches in flight)",
               gcc_l["batch_p99_s"] / unc_l["batch_p99_s"], GCC_P99_VS_UNCODED_MAX, "<=", "x",
               f"{gcc_l['batch_p99_s']:.3f} s vs {unc_l['batch_p99_s']:.3f} s; with 16 in flight "
               f"{gcc_b['batch_p99_s']:.3f} s vs {pick('b', 'pipeline uncoded')['batch_p99_s']:.3f} s (the queue)"),
        Target("hangs: gcc job wall time / plain map's", gcc_b["job_wall_s"] / gcc_b["plain_wall_s"],
               GCC_WALL_VS_MAP_MAX, "<=", "x", f"{gcc_b['job_wall_s']:.2f} s vs {gcc_b['plain_wall_s']:.2f} s "
               f"(the plain map beside it; median of the scenario's plain runs {map_b['job_wall_s']:.2f} s)"),
    ]
    notes = [f"throughput: {samples:,} images (the 5,000 MNIST digits tiled) in an uncompressed Zarr array with "
             f"chunks of B = {block}; LeNet-5 (ONNX Runtime, 1 thread per call); K = {K}, N = {N} for gcc, bacc "
             f"and replication, S = {S}; median plain-map chunk time m = {m * 1e3:.1f} ms. (b) shifted "
             f"exponential shift 0, scale 0.2m, hang probability {HANG_PROB}, hang {HANG_FACTOR:g}m; (c) shift m, "
             f"scale 0.2m, worker 0..N-1's slowest index x{SLOW_FACTOR:g}; seed 0; the plain map's chunk i sleeps "
             f"the draw of worker i mod K of batch i // K, as the uncoded pipeline's shard does. Coded cutoff: "
             f"N - S results, deadline 10m under stragglers; under (b) and (c) stragglers.clock: wall. The plain map "
             f"runs again after every contender; vs_plain_map is against the mean of the two plain runs beside the "
             f"contender in time, and the plain row shows the median of its runs. Job wall: the whole run_pipeline call (store "
             f"creation and composition included) against the whole map (output array included)."]
    table = Table("throughput", "Dataset throughput against a plain Dask map of the same model over the same chunks",
                  rows, notes[0])
    shutil.rmtree(data, ignore_errors=True)
    return table, targets, notes


def scale_section(client, work: Path, quick: bool, say: Callable[[str], None], model: str,
                  block: int) -> tuple[Table, list[Target]]:
    """The ``scale`` section: gcc on 100k and 1M images, samples/s and peak memory (see the module docstring)."""
    from gcc_dask.bench.processes import MemorySampler, _worker_pids

    block = QUICK_BLOCK if quick else block
    sizes = (4 * K * block, 16 * K * block) if quick else (100_000, 1_000_000)
    rows = []
    for samples in sizes:
        data = work / f"scale-data-{samples}.zarr"
        # written by a worker: the driver's memory is what is measured, and a tile of images would stay in it
        client.submit(write_dataset, data, samples, block, pure=False).result()
        pids = _worker_pids(client)
        with MemorySampler(pids) as mem:
            r = _pipeline(client, work, f"scale-{samples}", str(data), model, scheme="gcc", block=block,
                          stragglers={"model": "none"}, cutoff={"wait_for": "N-S", "stragglers": S},
                          composition="similarity")
        from gcc_dask.store import RunStore

        attrs = RunStore.open(work / f"scale-{samples}.zarr").attrs
        mb = 2**20
        rows.append({"samples": samples, "batches": math.ceil(samples / (K * block)), "job_wall_s": r["wall_s"],
                     "samples_per_s": samples / r["wall_s"], "batches_samples_per_s": samples / r["batches_wall_s"],
                     "composition_s": float(attrs.get("composition_s", math.nan)),
                     "driver_peak_mb": mem.driver_peak / mb, "workers_peak_mb": mem.workers_peak / mb if pids else
                     math.nan, "rel_acc": r["rel_acc"]})
        say(f"  scale: {samples:,} images: {rows[-1]['samples_per_s']:,.0f} samples/s, composition "
            f"{rows[-1]['composition_s']:.1f} s, driver peak {rows[-1]['driver_peak_mb']:.0f} MB")
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(work / f"scale-{samples}.zarr", ignore_errors=True)
    small, large = rows
    targets = [
        Target(f"driver peak memory, {large['samples']:,} / {small['samples']:,} images",
               large["driver_peak_mb"] / small["driver_peak_mb"], SCALE_MEMORY_MAX, "<=", "x",
               f"{small['driver_peak_mb']:.0f} MB -> {large['driver_peak_mb']:.0f} MB"),
        Target(f"samples/s, {large['samples']:,} / {small['samples']:,} images",
               large["batches_samples_per_s"] / small["batches_samples_per_s"], SCALE_RATE_MIN, ">=", "x",
               f"{small['batches_samples_per_s']:,.0f} -> {large['batches_samples_per_s']:,.0f} samples/s (batches)"),
        Target(f"composition of {large['samples']:,} images (similarity), s", large["composition_s"], 120.0, "<=",
               "s", "windows of 8192 as Dask tasks"),
    ]
    notes = (f"gcc, K = {K}, N = {N}, S = {S}, blocks of {block}, similarity composition, no injected stragglers, no "
             "reference, 16 batches in flight; data: the 5,000 MNIST digits tiled into an uncompressed Zarr array. "
             "samples_per_s counts the whole run_pipeline call; batches_samples_per_s only the batches (the "
             "composition and the store creation excluded). Peak RSS sampled every 20 ms.")
    return Table("scale", "A million images through the same path", rows, notes), targets
