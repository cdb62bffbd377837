"""End-to-end benchmarks of the pipeline on a Dask LocalCluster.

Eleven sections, each a table of :class:`~gcc_dask.bench.report.BenchReport` (``throughput`` and ``scale`` are
described in :mod:`gcc_dask.bench.throughput`, ``tail`` (tail latency against compute spent, with a figure, on
a cluster of 4 processes) in :mod:`gcc_dask.bench.tail`, ``checksums`` in :mod:`gcc_dask.bench.store`, ``cheap`` (a
model of the user's own through ``coded_map`` against ``map_blocks``) in :mod:`gcc_dask.bench.cheap`, ``mainjob``
(the main job's gcc pipeline against a warm plain map, and its fixed costs) in :mod:`gcc_dask.bench.mainjob`,
``page`` (the run's dashboard page off, published and open, side by side) in :mod:`gcc_dask.bench.page`; the other
four use one sample per shard, ``block_size: 1``):

``stragglers``
    LeNet-5 on MNIST, K = 8, shifted-exponential latencies with hang probability 0.05 and hangs of 20x
    the median latency. ``gcc`` and ``bacc`` at N = 1.5K and 2K against ``uncoded`` (N = K, waits for
    all) and ``replication`` (r = 2, N = 2K, waits for one copy of each input), on the same latency draws
    (they depend on (seed, batch, worker) only). Batch latency p50/p99, samples/s, RelAcc.
``orchestration``
    f a no-op, no injected latency: the pipeline's wall time per shard task against Dask's own floor, a
    plain ``client.map`` of no-ops over as many tasks, measured in the same run on the same cluster; also
    the CPU time of the driver process (client and scheduler) and of the worker processes per task.
``scaling``
    Wall time against the number of batches (with a linear fit) and against N.
``memory``
    Peak resident memory of the driver and of the workers while the pipeline streams a Zarr dataset,
    for a dataset and its 10x larger version (psutil, sampled every 20 ms).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gcc_dask.bench.processes import MemorySampler, _cpu_s, _worker_pids
from gcc_dask.bench.processes import cpu_by_pid  # noqa: F401  (importable from here, as before the split)
from gcc_dask.bench.report import BenchReport, Table, Target, machine_info
from gcc_dask.bench.tail import tail_section
from gcc_dask.bench.throughput import scale_section, throughput_section
from gcc_dask.errors import WorkloadError

__all__ = ["run_pipeline_bench", "noop_f", "pool_f", "MemorySampler", "SECTIONS"]

SECTIONS = ("throughput", "scale", "tail", "stragglers", "orchestration", "scaling", "memory", "checksums", "cheap",
            "mainjob", "page")
#: the block size of the throughput and scale sections (the pipeline's default ``code.block_size``)
BLOCK = 512
K = 8
HANG_PROB = 0.05
HANG_FACTOR = 20.0
#: targets (issue 5)
P99_VS_UNCODED_MAX = 0.5
P99_VS_REPLICATION_MAX = 1.0
RELACC_MIN = 0.95
ORCHESTRATION_MAX = 3.0
MEMORY_GROWTH_MAX = 1.2


# ------------------------------------------------------------------------------------ worker functions
def noop_f(X):
    """f for the orchestration bench: (n, ...) -> (n, 10), no arithmetic (a view of the input)."""
    return X.reshape(X.shape[0], -1)[:, :10]


def pool_f(X):
    """f for the memory bench: (n, ...) -> (n, 10) float32, the means of 10 slices of each sample."""
    flat = X.reshape(X.shape[0], -1)
    return np.stack([part.mean(axis=1) for part in np.array_split(flat, 10, axis=1)], axis=1).astype(np.float32)


def _noop_task(i):
    return i


# ---------------------------------------------------------------------------------------- helpers
def _lenet_path() -> str:
    path = Path(__file__).resolve().parents[2] / "pipelines" / "models" / "lenet5_mnist.onnx"
    if not path.is_file():
        raise WorkloadError(f"bench pipeline: the LeNet-5 model is not at {str(path)!r}; run the bench from a "
                            "source checkout of gcc-dask (it ships pipelines/models/lenet5_mnist.onnx)")
    return str(path)


def _config(name: str, store: Path, *, source: dict, workload: dict, n: int, schemes: list[str],
            stragglers: dict | None = None, cutoff: dict | None = None, in_flight: int = 4,
            reference: bool = True, composition: str = "as_stored") -> dict:
    return {
        "name": name, "source": source, "workload": workload,
        "code": {"num_inputs": K, "num_workers": n, "block_size": 1}, "composition": {"policy": composition},
        "schemes": schemes, "stragglers": stragglers or {"model": "none"},
        "replication": {"stop": "recovery"},  # the baseline of these sections waits for a copy of every input
        "cutoff": cutoff or {"wait_for": "all"}, "store": {"path": str(store), "overwrite": True},
        "run": {"max_batches_in_flight": in_flight, "progress": False, "reference": reference},
    }


def _run(cfg: dict, client):
    from gcc_dask.pipeline import run_pipeline

    return run_pipeline(cfg, client=client)


# ---------------------------------------------------------------------------------------- sections
def _stragglers(client, work: Path, quick: bool, say) -> tuple[Table, list[Target], list[str]]:
    # latencies well above the ~0.3 s it takes 2 cores to push a batch's 66 tasks through Dask (see the
    # orchestration table): with 20 ms shards the batch latency measures Dask's overhead, not stragglers
    shift, scale = (0.005, 0.005) if quick else (0.100, 0.050)
    median = shift + scale * math.log(2.0)
    hang = HANG_FACTOR * median
    batches = 4 if quick else 100
    strag = {"model": "shifted_exponential", "shift": shift, "scale": scale, "hang_prob": HANG_PROB,
             "hang_delay": hang, "seed": 0}
    # coded schemes: wait for N - 1 results, or once 3/4 are in at most 2x their median, or a deadline of
    # 10x the median latency (half a hang): a hanging shard is never waited for
    cutoff = {"wait_for": "N-S", "stragglers": 1, "quantile": 0.75, "multiplier": 2.0, "min_runtime": 0.0,
              "deadline": 10 * median, "on_shortfall": "decode"}
    source = {"kind": "mnist", "split": "test", "limit": batches * K}
    workload = {"kind": "onnx", "path": _lenet_path()}
    rows = []
    runs = ((2 * K, ["gcc", "bacc", "replication", "uncoded"]), (3 * K // 2, ["gcc", "bacc"]))
    if not quick:  # the first batches of a fresh cluster pay for imports and model set-up: not measured
        _run(_config("bench-stragglers-warmup", work / "stragglers-warmup.zarr", workload=workload,
                     source={**source, "limit": 2 * K}, n=2 * K, schemes=runs[0][1], stragglers=strag,
                     cutoff=cutoff), client)
    for n, schemes in runs:
        say(f"  stragglers: N={n}, {batches} batches of K={K}, schemes {schemes}")
        cfg = _config(f"bench-stragglers-n{n}", work / f"stragglers-n{n}.zarr", source=source, workload=workload,
                      n=n, schemes=schemes, stragglers=strag, cutoff=cutoff, in_flight=4 if quick else 1,
                      composition="similarity")
        res = _run(cfg, client)
        for scheme, s in res.summary.iterrows():
            rows.append({"scheme": scheme, "N": {"uncoded": K, "replication": 2 * K}.get(scheme, n), "K": K,
                         "batches": int(s["batches"]), "latency_p50_s": float(s["latency_p50_s"]),
                         "latency_p99_s": float(s["latency_p99_s"]), "samples_per_s": float(s["samples_per_s"]),
                         "rel_acc": float(s["rel_acc"]), "mean_received": float(s["mean_received"]),
                         "cutoff_p99_s": float(s["cutoff_p99_s"]), "run_wall_s": res.wall_s})
    by = {(r["scheme"], r["N"]): r for r in rows}
    unc, rep = by[("uncoded", K)], by[("replication", 2 * K)]
    for r in rows:
        r["p99_vs_uncoded"] = r["latency_p99_s"] / unc["latency_p99_s"]
        r["p99_vs_replication"] = r["latency_p99_s"] / rep["latency_p99_s"]
    gcc = by[("gcc", 2 * K)]
    targets = [
        Target("gcc p99 batch latency / uncoded p99 (N=2K)", gcc["p99_vs_uncoded"], P99_VS_UNCODED_MAX, "<=", "x",
               f"{gcc['latency_p99_s']:.3f} s vs {unc['latency_p99_s']:.3f} s"),
        Target("gcc p99 / replication p99 (N=2K, equal worker count)", gcc["p99_vs_replication"],
               P99_VS_REPLICATION_MAX, "<=", "x", f"{gcc['latency_p99_s']:.3f} s vs {rep['latency_p99_s']:.3f} s"),
        Target("gcc RelAcc, LeNet-5/MNIST, N=2K", gcc["rel_acc"], RELACC_MIN, ">=", "",
               f"{gcc['batches'] * K} samples, mean |F| = {gcc['mean_received']:.2f} of {2 * K}"),
    ]
    notes = [f"Latency model: shifted exponential, shift {shift * 1e3:g} ms, scale {scale * 1e3:g} ms (median "
             f"{median * 1e3:.1f} ms), hang probability {HANG_PROB}, hang {hang * 1e3:.0f} ms = {HANG_FACTOR:g}x the "
             f"median; seed 0. Coded cutoff: {cutoff}. uncoded waits for all K, replication for one copy of "
             "each input. Batch latency: submission to decoded, wall clock, one batch in flight (on 2 cores more "
             "batches in flight queue behind each other and the latency measures the queue, not the stragglers)."]
    return Table("stragglers", "End to end under injected straggling (LeNet-5 on MNIST)", rows,
                 "All schemes of a run share the cluster and the latency draws; the N = 1.5K run is a second "
                 "run on the same draws."), targets, notes


def _orchestration(client, work: Path, quick: bool, say) -> tuple[Table, list[Target]]:
    pids = _worker_pids(client)
    batches = 8 if quick else 60
    ns = (16,) if quick else (16, 64)
    source = {"kind": "synthetic", "num_samples": 2 * K, "shape": [1, 28, 28]}
    workload = {"kind": "callable", "name": "gcc_dask.bench.pipeline:noop_f"}
    warm = _config("bench-warmup", work / "warmup.zarr", source=source, workload=workload, n=16, schemes=["gcc"],
                   reference=False)
    _run(warm, client)  # imports, plugin and model set up on every worker
    best: dict[str, dict] = {}

    def keep(key: str, row: dict) -> None:
        if key not in best or row["wall_ms_per_task"] < best[key]["wall_ms_per_task"]:
            best[key] = row

    for _ in range(1 if quick else 2):  # interleaved: floor, pipeline, floor, pipeline
        for n in ns:
            tasks = batches * n
            c0, d0, t0 = _cpu_s(pids), time.process_time(), time.perf_counter()
            futs = client.map(_noop_task, range(tasks), pure=False)
            client.gather(futs)
            wall = time.perf_counter() - t0
            cpu_d, cpu_w = time.process_time() - d0, _cpu_s(pids) - c0
            del futs
            keep(f"floor-{n}", {"what": "client.map of no-ops (Dask floor)", "N": n, "tasks": tasks, "wall_s": wall,
                                "wall_ms_per_task": wall / tasks * 1e3, "cpu_driver_ms_per_task": cpu_d / tasks * 1e3,
                                "cpu_workers_ms_per_task": cpu_w / tasks * 1e3 if pids else math.nan})
            cfg = _config(f"bench-orch-n{n}", work / f"orch-n{n}.zarr", workload=workload, n=n, schemes=["gcc"],
                          source={**source, "num_samples": batches * K}, reference=False)
            c0, d0 = _cpu_s(pids), time.process_time()
            res = _run(cfg, client)
            cpu_d, cpu_w = time.process_time() - d0, _cpu_s(pids) - c0
            keep(f"pipeline-{n}", {"what": "pipeline, f a no-op (per shard task)", "N": n, "tasks": tasks,
                                   "wall_s": res.wall_s, "wall_ms_per_task": res.wall_s / tasks * 1e3,
                                   "cpu_driver_ms_per_task": cpu_d / tasks * 1e3,
                                   "cpu_workers_ms_per_task": cpu_w / tasks * 1e3 if pids else math.nan})
            say(f"  orchestration N={n}: floor {best[f'floor-{n}']['wall_ms_per_task']:.2f} ms/task, pipeline "
                f"{best[f'pipeline-{n}']['wall_ms_per_task']:.2f} ms/shard")
    rows = []
    for n in ns:
        floor, pipe = best[f"floor-{n}"], best[f"pipeline-{n}"]
        pipe["ratio_vs_floor"] = pipe["wall_ms_per_task"] / floor["wall_ms_per_task"]
        floor["ratio_vs_floor"] = 1.0
        rows += [floor, pipe]
    r16 = best["pipeline-16"]
    targets = [Target("orchestration per shard task / Dask floor (N=16, f no-op)", r16["ratio_vs_floor"],
                      ORCHESTRATION_MAX, "<=", "x",
                      f"{r16['wall_ms_per_task']:.2f} ms vs {best['floor-16']['wall_ms_per_task']:.2f} ms per task")]
    notes = (f"{batches} batches of K={K}, one scheme (gcc), no injected latency, no reference, 4 batches in flight. "
             "The pipeline's time per shard task also pays for each batch's decode task (which gathers the kept "
             "results from the other worker), the shards' reads and encodes, the decoded rows written to Zarr "
             "and the records the driver writes. Best of the interleaved repeats. "
             "CPU: driver = this process (client, scheduler, nannies); workers = the worker processes "
             "(n/a when they are threads of this process).")
    return Table("orchestration", "Orchestration cost against Dask's own per-task floor", rows, notes), targets


def _scaling(client, work: Path, quick: bool, say) -> tuple[Table, list[str]]:
    source = {"kind": "synthetic", "num_samples": 2 * K, "shape": [1, 28, 28]}
    workload = {"kind": "callable", "name": "gcc_dask.bench.pipeline:noop_f"}
    rows = []
    plan = [("batches", b, 16) for b in ((2, 4) if quick else (8, 16, 32, 64))]
    plan += [("N", 4 if quick else 16, n) for n in ((8, 16) if quick else (8, 16, 32, 64))]
    warm = _config("bench-warmup", work / "scale-warmup.zarr", source=source, workload=workload, n=16,
                   schemes=["gcc"], reference=False)
    _run(warm, client)  # imports and plugin set-up on every worker, not in the first point
    for vary, batches, n in plan:
        cfg = _config(f"bench-scale-{vary}", work / f"scale-{vary}-{batches}-{n}.zarr", workload=workload, n=n,
                      schemes=["gcc"], source={**source, "num_samples": batches * K}, reference=False)
        res = _run(cfg, client)
        rows.append({"vary": vary, "batches": batches, "N": n, "wall_s": res.wall_s,
                     "ms_per_batch": res.wall_s / batches * 1e3, "ms_per_shard": res.wall_s / (batches * n) * 1e3})
        say(f"  scaling {vary}: batches={batches} N={n}: {res.wall_s:.2f} s")
    notes = []
    for vary, x in (("batches", "batches"), ("N", "N")):
        pts = [(r[x], r["wall_s"]) for r in rows if r["vary"] == vary]
        xs, ys = np.array(pts, dtype=float).T
        slope, icpt = np.polyfit(xs, ys, 1)
        pred = slope * xs + icpt
        ss = float(((ys - ys.mean()) ** 2).sum())
        r2 = 1.0 - float(((ys - pred) ** 2).sum()) / ss if ss > 0 else math.nan
        unit = "s per batch" if vary == "batches" else "s per worker (per batch of the run)"
        notes.append(f"wall time against {x}: linear fit slope {slope:.4f} {unit}, intercept {icpt:.3f} s, "
                     f"R^2 = {r2:.4f}")
    return Table("scaling", "Scaling: wall time against the number of batches and against N", rows,
                 "f a no-op, gcc, no injected latency, 4 batches in flight. " + " ".join(notes)), notes


def _make_dataset(path: Path, samples: int, shape: tuple[int, ...], seed: int = 0) -> None:
    import zarr

    arr = zarr.create_array(store=str(path), shape=(samples, *shape), chunks=(K, *shape), dtype="float32",
                            compressors=None, overwrite=True)
    rng = np.random.default_rng(seed)
    for start in range(0, samples, 64):
        stop = min(samples, start + 64)
        arr[start:stop] = rng.random((stop - start, *shape), dtype=np.float32)


def _memory(client, work: Path, quick: bool, say) -> tuple[Table, list[Target]]:
    from gcc_dask.runtime.cluster import ClusterSpec, connect

    shape = (1, 28, 28) if quick else (3, 224, 224)
    sizes = (8, 80) if quick else (80, 800)
    n = 8 if quick else 16
    workload = {"kind": "callable", "name": "gcc_dask.bench.pipeline:pool_f"}
    rows = []
    for samples in sizes:
        data = work / f"dataset-{samples}.zarr"
        _make_dataset(data, samples, shape)
        cfg = _config(f"bench-memory-{samples}", work / f"memory-{samples}.zarr", workload=workload, n=n,
                      schemes=["gcc"], source={"kind": "zarr", "path": str(data)}, reference=True)
        # a fresh cluster per size (unless one is given): worker peaks do not carry over between sizes
        spec = ClusterSpec(n_workers=2, threads_per_worker=16, processes=True)
        with connect(spec, client) as c:
            pids = _worker_pids(c)
            with MemorySampler(pids) as mem:
                res = _run(cfg, c)
        mb = 2**20
        rows.append({"samples": samples, "dataset_mb": samples * math.prod(shape) * 4 / mb,
                     "batches": math.ceil(samples / K), "N": n, "driver_start_mb": mem.driver_start / mb,
                     "driver_peak_mb": mem.driver_peak / mb,
                     "workers_peak_mb": mem.workers_peak / mb if pids else math.nan,
                     "worker_processes": len(pids), "wall_s": res.wall_s})
        say(f"  memory: {samples} samples ({rows[-1]['dataset_mb']:.0f} MB): driver peak "
            f"{rows[-1]['driver_peak_mb']:.0f} MB, workers peak {rows[-1]['workers_peak_mb']:.0f} MB")
        shutil.rmtree(data, ignore_errors=True)
    small, large = rows
    growth = large["samples"] / small["samples"]
    targets = [Target(f"driver peak memory, dataset x{growth:g} / x1", large["driver_peak_mb"] / small["driver_peak_mb"],
                      MEMORY_GROWTH_MAX, "<=", "x",
                      f"{small['driver_peak_mb']:.0f} MB -> {large['driver_peak_mb']:.0f} MB")]
    if not math.isnan(small["workers_peak_mb"]):
        targets.append(Target(f"workers peak memory, dataset x{growth:g} / x1",
                              large["workers_peak_mb"] / small["workers_peak_mb"], MEMORY_GROWTH_MAX, "<=", "x",
                              f"{small['workers_peak_mb']:.0f} MB -> {large['workers_peak_mb']:.0f} MB "
                              f"({small['worker_processes']} worker processes, summed)"))
    notes = (f"A Zarr array of samples of shape {shape} float32 (one chunk per batch), streamed batch by batch; f "
             "reduces each sample to 10 means; gcc, no injected latency, 4 batches in flight, reference on. "
             "Peak RSS sampled every 20 ms; driver = this process (client, scheduler, nannies).")
    return Table("memory", "Peak memory while the streamed dataset grows 10x", rows, notes), targets


# ---------------------------------------------------------------------------------------- entry point
def run_pipeline_bench(*, quick: bool = False, client=None, sections: tuple[str, ...] = SECTIONS,
                       work_dir: str | os.PathLike | None = None, echo: Callable[[str], None] | None = None,
                       command: str = "") -> BenchReport:
    """Run the pipeline benchmarks (see the module docstring) and return the report.

    Parameters
    ----------
    quick : bool
        A few batches per section and small data, for tests: seconds, not representative.
    client : distributed.Client, optional
        Use this cluster for every section (never closed here). Default: a fresh embedded LocalCluster of
        2 worker processes x 16 threads per section, and for the memory section one per dataset size.
    sections : tuple of str
        A subset of ``SECTIONS``.
    work_dir : path, optional
        Where the run stores and the dataset go (removed at the end); default a temporary directory.
    echo : callable, optional
        Progress lines.

    Returns
    -------
    BenchReport
    """
    from gcc_dask.runtime.cluster import ClusterSpec, connect

    say = echo or (lambda _msg: None)
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        from gcc_dask.errors import ConfigError

        raise ConfigError(f"sections: got {unknown!r}; expected a subset of {list(SECTIONS)}")
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="gcc-dask-bench-", dir=work_dir))
    tables: list[Table] = []
    targets: list[Target] = []
    notes: list[str] = []
    try:
        # each section on a cluster of its own (unless one is given), so that what one section leaves on the
        # workers and the scheduler (model sessions, task history) does not weigh on the next
        spec = ClusterSpec(n_workers=2, threads_per_worker=16, processes=True)
        for name, fn in (("throughput", throughput_section), ("scale", scale_section)):
            if name not in sections:
                continue
            say(f"pipeline bench: {name}")
            with connect(spec, client) as c:
                out = fn(c, tmp, quick, say, _lenet_path(), BLOCK)
            tables.append(out[0])
            targets += out[1]
        figures: dict[str, bytes] = {}
        if "tail" in sections:
            say("pipeline bench: tail")
            # a cluster of its own (4 processes x 8 threads), unless the given one's workers can be signalled
            tail_tables, tg, nt, figs = tail_section(client, tmp, quick, say, _lenet_path(), BLOCK)
            tables += tail_tables
            targets += tg
            notes += nt
            figures.update(figs)
        for name, fn in (("stragglers", _stragglers), ("orchestration", _orchestration), ("scaling", _scaling)):
            if name not in sections:
                continue
            say(f"pipeline bench: {name}")
            with connect(spec, client) as c:
                out = fn(c, tmp, quick, say)
            tables.append(out[0])
            if name == "stragglers":
                targets += out[1]
                notes += out[2]
            elif name == "orchestration":
                targets += out[1]
            else:
                notes += out[1]
        if "memory" in sections:
            say("pipeline bench: memory")
            table, tg = _memory(client, tmp, quick, say)
            tables.append(table)
            targets += tg
        if "cheap" in sections:  # a model of the user's own through coded_map, on 2 processes of one thread
            from gcc_dask.bench.cheap import cheap_section

            say("pipeline bench: cheap")
            with connect(ClusterSpec(n_workers=2, threads_per_worker=1, processes=True), client) as c:
                table, tg = cheap_section(c, tmp, quick, say)
            tables.append(table)
            targets += tg
        if "mainjob" in sections:  # the main job against a warm plain map, on the embedded cluster's shape
            from gcc_dask.bench.mainjob import mainjob_section

            say("pipeline bench: mainjob")
            with connect(ClusterSpec(), client) as c:
                table, tg = mainjob_section(c, tmp, quick, say, _lenet_path())
            tables.append(table)
            targets += tg
        if "page" in sections:  # the run page's cost: the smoke pipeline with the page off, published and open
            from gcc_dask.bench.page import page_section

            say("pipeline bench: page")
            with connect(spec, client) as c:
                smoke = str(Path(_lenet_path()).parents[1] / "smoke.yaml")
                page_tables, tg, nt = page_section(c, tmp, quick, say, smoke)
            tables += page_tables
            targets += tg
            notes += nt
        if "checksums" in sections:  # the store's codecs alone: no cluster
            from gcc_dask.bench.store import checksum_section

            say("pipeline bench: checksums")
            table, tg = checksum_section(tmp, quick, say)
            tables.append(table)
            targets += tg
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info = machine_info({"cluster": "given client" if client is not None else
                         "a LocalCluster per section, 2 worker processes x 16 threads (tail: 4 x 8)"})
    return BenchReport(bench="pipeline", command=command, quick=quick, tables=tables, targets=targets, info=info,
                       wall_s=time.perf_counter() - t0, notes=notes, figures=figures)
