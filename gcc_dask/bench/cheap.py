"""The ``cheap`` section of the pipeline bench: a model of the user's own that costs about a microsecond a row.

What a user who brings a small model sees: ``coded_map`` with its defaults against the plain Dask way,
``dask.array.from_zarr(path).map_blocks(f)`` computed, on the same cluster (2 worker processes of one thread).
f is a NumPy multilayer perceptron with the shape of a scikit-learn ``MLPClassifier((64, 64))``'s
``predict_proba`` (32 inputs, two ReLU layers of 64, a softmax over 3 classes: about 0.5 µs a row on one
core); the rows are float32 normals in a compressed Zarr array, 200,000 rows in chunks of 10,000 and
2,000,000 in chunks of 100,000 (``quick``: 20,000 in chunks of 1,000, one round, and no warm-up call but
the one that fills the second call's cache). Each contender's call
includes everything a user waits for: the probe of f, the store, the composition, the batches and the
estimates computed (``CodedResult.estimates.compute()``).

The rounds are interleaved (:func:`~gcc_dask.bench.tail.interleaved_rounds`: plain map, contender, plain
map, ...), so each ratio is plain map seconds over the contender's, measured side by side. Beside it, each
contender's *work limit*: the fraction of the plain map's throughput left once the scheme's redundancy is paid
without stragglers (1 for uncoded and speculative, whose copies start only when a shard is late; K/(N − S) for
gcc and replication, which evaluate N − S shards of K inputs' worth of rows), and the ratio over that limit:
what the run's overheads keep of what the scheme could reach. ``gcc, second call`` is gcc again on the same
data with the composition cache warm (a second model on the same data, a resume, a sweep). BENCHMARKS.md,
section 'A cheap model of your own', has the figures.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gcc_dask.bench.report import Table, Target
from gcc_dask.bench.rounds import interleaved_rounds, ratio_summary, work_limit

__all__ = ["CheapMLP", "cheap_section", "work_limit", "CHEAP_TARGETS"]

#: the geometry of ``coded_map``'s defaults (:data:`gcc_dask.coded.CODED_MAP_DEFAULTS`)
K, N, S = 8, 16, 4
#: contender -> (scheme, composition cache warm)
CONTENDERS = {"uncoded": ("uncoded", False), "speculative": ("speculative", False), "gcc": ("gcc", False),
              "replication": ("replication", False), "gcc, second call": ("gcc", True)}
#: the ratio to the plain map each contender is held to (issue 38's targets)
CHEAP_TARGETS = {"uncoded": 0.8, "speculative": 0.8, "gcc": 0.35, "replication": 0.35, "gcc, second call": 0.45}
#: the parts of a call shown beside its ratio (:attr:`gcc_dask.pipeline.RunResult.phases_s`, and the estimates
#: computed afterwards), median seconds over the rounds
PHASES = ("probe", "digests", "store", "composition", "load_f", "first_batch", "batches", "finish", "estimates")
#: (rows, rows per chunk) of the full run's datasets
SIZES = ((200_000, 10_000), (2_000_000, 100_000))
QUICK_SIZES = ((20_000, 1_000),)


class CheapMLP:
    """A NumPy multilayer perceptron shaped as a scikit-learn ``MLPClassifier((64, 64))``'s ``predict_proba``:
    ``(m, 32)`` float32 in, ``(m, 3)`` float32 class probabilities out; seeded weights (picklable, shipped to each
    worker once)."""

    def __init__(self, seed: int = 0, features: int = 32, hidden: int = 64, classes: int = 3) -> None:
        rng = np.random.default_rng(seed)
        self.w1 = (rng.normal(size=(features, hidden)) / math.sqrt(features)).astype(np.float32)
        self.w2 = (rng.normal(size=(hidden, hidden)) / math.sqrt(hidden)).astype(np.float32)
        self.w3 = (rng.normal(size=(hidden, classes)) / math.sqrt(hidden)).astype(np.float32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = np.maximum(np.asarray(x, dtype=np.float32) @ self.w1, 0)
        h = np.maximum(h @ self.w2, 0)
        z = h @ self.w3
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)


def _dataset(work: Path, rows: int, chunk: int) -> str:
    import zarr

    path = work / f"cheap_{rows}_{chunk}.zarr"
    z = zarr.create_array(str(path), shape=(rows, 32), chunks=(chunk, 32), dtype="float32")  # zstd, as zarr does
    rng = np.random.default_rng(0)
    for start in range(0, rows, chunk):
        z[start:start + chunk] = rng.normal(size=(min(chunk, rows - start), 32)).astype(np.float32)
    return str(path)


def _contender(client, f: Callable, path: str, work: Path, scheme: str, cache: str, seen: dict) -> Callable[[], dict]:
    import dask.array as da

    import gcc_dask as gd

    def run() -> float:
        before = os.environ.get("GCC_DASK_CACHE")
        os.environ["GCC_DASK_CACHE"] = cache
        try:
            t0 = time.perf_counter()
            res = gd.coded_map(f, da.from_zarr(path), schemes=(scheme,), client=client,
                               out=str(work / f"run-{scheme}-{time.time_ns()}.zarr"))
            t1 = time.perf_counter()
            res.estimates.compute()
            wall = time.perf_counter() - t0
        finally:
            if before is None:
                os.environ.pop("GCC_DASK_CACHE", None)
            else:
                os.environ["GCC_DASK_CACHE"] = before
        seen["block_size"] = res.run.block_size
        seen.setdefault("phases", []).append({**res.run.phases_s, "estimates": wall - (t1 - t0)})
        return {"job_wall_s": wall, "composition_s": res.run.phases_s.get("composition", 0.0)}

    return run


def cheap_section(client, work: Path, quick: bool, say) -> tuple[Table, list[Target]]:
    """Run the section (see the module docs) on `client` (2 worker processes of one thread, as
    :func:`~gcc_dask.bench.pipeline.run_pipeline_bench` gives it).

    Returns
    -------
    Table
        One row per dataset and contender: median and standard error of the ratio to the plain map over the
        rounds, the work limit and the ratio over it, the median seconds of each, the block size B chosen, and
        the median seconds of each part of the call (:data:`PHASES`: where a small run's fixed costs go).
    list of Target
        The ratio of each contender to the plain map on every dataset, against :data:`CHEAP_TARGETS`.
    """
    import dask.array as da

    f = CheapMLP()
    rows_out: list[dict] = []
    targets: list[Target] = []
    rounds = 1 if quick else 3
    for rows, chunk in (QUICK_SIZES if quick else SIZES):
        say(f"cheap: {rows:,} rows in chunks of {chunk:,}")
        path = _dataset(work, rows, chunk)
        runs: dict[str, Callable[[], dict]] = {}
        blocks: dict[str, dict] = {}
        warm = tempfile.mkdtemp(prefix="cache-", dir=work)
        for label, (scheme, cached) in CONTENDERS.items():
            blocks[label] = {}
            runs[label] = _contender(client, f, path, work, scheme, warm if cached else "off", blocks[label])

        def plain() -> float:
            t0 = time.perf_counter()
            da.from_zarr(path).map_blocks(f, chunks=(chunk, 3), dtype=np.float32).compute()
            return time.perf_counter() - t0

        plain()  # warm-up: the model and the modules on every worker, the cache filled for the second call
        for label, run in runs.items():
            if not quick or CONTENDERS[label][1]:  # (quick: the second call's cache only)
                run()
        for seen in blocks.values():
            seen.pop("phases", None)  # the warm-up's
        got = interleaved_rounds(plain, runs, rounds)
        for label, (scheme, _) in CONTENDERS.items():
            mine = [r for r in got if r["contender"] == label]
            st = ratio_summary([r["vs_plain_map"] for r in mine])
            limit = work_limit(scheme, K, N, S)
            rows_out.append({
                "rows": rows, "chunk": chunk, "contender": label, "vs_plain_map": st["median"], "se": st["se"],
                "work_limit": limit, "vs_work_limit": st["median"] / limit,
                "plain_s": float(np.median([(r["plain_before_s"] + r["plain_after_s"]) / 2 for r in mine])),
                "coded_s": float(np.median([r["job_wall_s"] for r in mine])),
                "block_size": blocks[label].get("block_size"), "rounds": st["n"],
                **{f"{phase}_s": float(np.median([p.get(phase, 0.0) for p in blocks[label]["phases"]]))
                   for phase in PHASES},
            })
            targets.append(Target(f"cheap model, {rows:,} rows: {label} / plain map_blocks", st["median"],
                                  CHEAP_TARGETS[label], ">=", "x",
                                  f"+- {st['se']:.3f} (s.e., {st['n']} rounds); work limit {limit:.2f}x, "
                                  f"{st['median'] / limit:.2f} of it"))
    table = Table("cheap", "A cheap model of your own: coded_map with its defaults against map_blocks", rows_out,
                  notes="ratio = plain map seconds / contender seconds, interleaved rounds; work limit = the "
                        "ratio the scheme's redundancy allows without stragglers")
    return table, targets
