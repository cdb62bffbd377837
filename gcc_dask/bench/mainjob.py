"""The ``mainjob`` section of the pipeline bench: the main job's gcc pipeline against a warm plain map, and where a
small run's fixed costs go.

The main job (``pipelines/mnist_lenet.yaml``: the 5,000 MNIST digits through LeNet-5, K = 8, N = 16, S = 4,
B = 64) with its gcc scheme alone, no injected stragglers and no uncoded reference, run two ways:

``gcc, embedded cluster``
    ``run_pipeline`` as ``gcc-dask run`` does it: its own LocalCluster started and closed by the call (the
    cluster's start is the ``connect`` part of the breakdown);
``gcc, warm cluster``
    the same pipeline on the warm cluster the plain map runs on (a second job on a running cluster).

The baseline is what a Dask user writes for the same job on that warm cluster: a ``client.map`` of LeNet-5 over
the digits' chunks of 64 (read from a compressed Zarr copy of the digits, outputs written to a Zarr array; the
ONNX session loaded once per worker thread, warm). The rounds are interleaved
(:func:`~gcc_dask.bench.rounds.interleaved_rounds`), each ratio the plain map's seconds over the contender's.
Beside each ratio, the median seconds of each part of the call (:attr:`gcc_dask.pipeline.RunResult.phases_s`:
cluster, probe, digests, store, composition, first batch, batches, finish). BENCHMARKS.md, section 'The main job
against a warm plain map', has the figures.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gcc_dask.bench.report import Table, Target
from gcc_dask.bench.rounds import interleaved_rounds, ratio_summary, work_limit

__all__ = ["mainjob_section", "MAINJOB_TARGET", "PHASES"]

#: the ratio to the warm plain map the main job's gcc pipeline is held to (issue 38)
MAINJOB_TARGET = 0.4
#: the parts of a call shown beside its ratio (:attr:`gcc_dask.pipeline.RunResult.phases_s`), median seconds
PHASES = ("connect", "probe", "digests", "store", "composition", "load_f", "first_batch", "batches", "finish")
#: the main job's geometry (pipelines/mnist_lenet.yaml)
K, N, S, BLOCK = 8, 16, 4, 64
#: what the bench changes in the main job: gcc alone, no injected stragglers, no reference, a fresh store
OVERRIDES = ("schemes=[gcc]", "stragglers.model=none", "run.reference=false", "store.overwrite=true",
             "run.progress=false")


def _main_job() -> Path:
    path = Path(__file__).resolve().parents[2] / "pipelines" / "mnist_lenet.yaml"
    if not path.exists():
        raise FileNotFoundError(f"the mainjob section runs {path}, which only a source checkout of gcc-dask has")
    return path


def _contender(client, work: Path, samples: int | None, seen: dict) -> Callable[[], dict]:
    """One call of the main job's gcc pipeline, on `client` (None: its own embedded cluster)."""
    from gcc_dask.pipeline import run_pipeline

    overrides = list(OVERRIDES) + ([f"source.limit={samples}"] if samples else [])

    def run() -> dict:
        out = work / f"mainjob-{time.time_ns()}.zarr"
        t0 = time.perf_counter()
        res = run_pipeline(str(_main_job()), client=client, out=str(out), overrides=overrides)
        wall = time.perf_counter() - t0
        seen.setdefault("phases", []).append(dict(res.phases_s))
        shutil.rmtree(out, ignore_errors=True)
        return {"job_wall_s": wall}

    return run


def mainjob_section(client, work: Path, quick: bool, say, model: str) -> tuple[Table, list[Target]]:
    """Run the section (see the module docs) on `client`, the warm cluster (the embedded cluster's shape: what
    :func:`~gcc_dask.runtime.cluster.connect` starts for an empty ``cluster`` section).

    Parameters
    ----------
    client : distributed.Client
        The warm cluster of the plain map and of ``gcc, warm cluster``.
    work : Path
        A scratch folder (the digits' Zarr copy, the stores).
    quick : bool
        512 digits and one round (for tests: seconds, not representative); else the 5,000 digits, 3 rounds.
    say : callable
        Progress lines.
    model : str
        LeNet-5's ONNX file (pipelines/models/lenet5_mnist.onnx).

    Returns
    -------
    Table
        One row per contender: the median and standard error of the ratio to the plain map over the rounds, the
        work limit and the ratio over it, the median seconds of each, and of each part of the call
        (:data:`PHASES`).
    list of Target
        Each contender's ratio against :data:`MAINJOB_TARGET`.
    """
    from gcc_dask.bench.maps import plain_map
    from gcc_dask.bench.throughput import write_dataset

    samples = 512 if quick else 5000
    rounds = 1 if quick else 3
    data = work / "mainjob-digits.zarr"
    client.submit(write_dataset, data, samples, BLOCK, True, pure=False).result()  # compressed, chunks of 64

    def plain() -> float:
        return plain_map(client, str(data), str(work / "mainjob-plain-out.zarr"), model, samples, BLOCK)["wall_s"]

    seen: dict[str, dict] = {"gcc, embedded cluster": {}, "gcc, warm cluster": {}}
    runs = {"gcc, embedded cluster": _contender(None, work, samples if quick else None, seen["gcc, embedded cluster"]),
            "gcc, warm cluster": _contender(client, work, samples if quick else None, seen["gcc, warm cluster"])}
    say(f"mainjob: {samples:,} digits, the main job's gcc pipeline against a warm plain map over chunks of {BLOCK}")
    plain()  # warm-up: the sessions on every worker thread, zarr on every worker
    runs["gcc, warm cluster"]()
    for s in seen.values():
        s.pop("phases", None)
    got = interleaved_rounds(plain, runs, rounds)
    rows: list[dict] = []
    targets: list[Target] = []
    limit = work_limit("gcc", K, N, S)
    for label in runs:
        mine = [r for r in got if r["contender"] == label]
        st = ratio_summary([r["vs_plain_map"] for r in mine])
        rows.append({
            "contender": label, "samples": samples, "vs_plain_map": st["median"], "se": st["se"],
            "work_limit": limit, "vs_work_limit": st["median"] / limit,
            "plain_s": float(np.median([(r["plain_before_s"] + r["plain_after_s"]) / 2 for r in mine])),
            "coded_s": float(np.median([r["job_wall_s"] for r in mine])), "rounds": st["n"],
            **{f"{phase}_s": float(np.median([p.get(phase, 0.0) for p in seen[label]["phases"]]))
               for phase in PHASES},
        })
        targets.append(Target(f"main job ({samples:,} digits): {label} / warm plain map", st["median"],
                              MAINJOB_TARGET, ">=", "x", f"+- {st['se']:.3f} (s.e., {st['n']} rounds); work "
                              f"limit {limit:.2f}x, {st['median'] / limit:.2f} of it"))
    shutil.rmtree(data, ignore_errors=True)
    table = Table("mainjob", "The main job's gcc pipeline against a warm plain map of LeNet-5 over chunks of 64",
                  rows, notes="ratio = plain map seconds / pipeline seconds, interleaved rounds; the parts are "
                              "RunResult.phases_s (connect: the embedded cluster's start)")
    return table, targets
