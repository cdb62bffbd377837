"""Interleaved rounds: a contender's throughput ratio to the plain map measured again in rounds that alternate
with the plain map's runs, and their mean with its standard error (one ratio swings by about 0.2 from run to
run on a 2-core machine: one round cannot decide a target).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


def interleaved_rounds(run_plain: Callable[[], float], runs: dict[str, Callable[[], float]],
                       rounds: int) -> list[dict]:
    """Throughput ratios of pipelines against the plain map, one sample per round: plain map, first pipeline,
    plain map, second pipeline, plain map, ... `rounds` times over. Each run returns its job's wall time (s);
    a pipeline's run may instead return a dict with ``job_wall_s`` and ``composition_s`` (the seconds of the job
    spent composing the batches). A pipeline's ratio is the mean of the plain map runs just before and just after
    it over its own, so that a drift of the machine's speed weighs on both sides alike.

    Returns one dict per pipeline run: ``contender``, ``round`` (0-based), ``job_wall_s``, ``composition_s`` (0
    when the run did not say), ``plain_before_s``, ``plain_after_s``, ``vs_plain_map``, and
    ``batches_vs_plain_map``: the same ratio over the job's time less its composition (what the batches alone
    run at).
    """
    out: list[dict] = []
    before = float(run_plain())
    for i in range(int(rounds)):
        for label, run in runs.items():
            got = run()
            wall = float(got["job_wall_s"] if isinstance(got, dict) else got)
            composing = float(got.get("composition_s", 0.0)) if isinstance(got, dict) else 0.0
            after = float(run_plain())
            plain = (before + after) / 2
            out.append({"contender": label, "round": i, "job_wall_s": wall, "composition_s": composing,
                        "plain_before_s": before, "plain_after_s": after, "vs_plain_map": plain / wall,
                        "batches_vs_plain_map": plain / (wall - composing)})
            before = after
    return out


def ratio_summary(ratios) -> dict[str, float]:
    """``n``, ``mean``, ``se`` (the standard error of the mean: sample standard deviation over sqrt(n); NaN for
    one sample), ``median``, ``min`` and ``max`` of throughput ratios (a 1-D sequence of floats, n >= 1)."""
    r = np.asarray(ratios, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"ratios: got shape {r.shape}; expected a non-empty 1-D sequence")
    se = float(r.std(ddof=1) / math.sqrt(r.size)) if r.size > 1 else math.nan
    return {"n": int(r.size), "mean": float(r.mean()), "se": se, "median": float(np.median(r)),
            "min": float(r.min()), "max": float(r.max())}


def _decided(summary: dict[str, float], limit: float) -> str:
    """Whether the limit lies outside mean +- 2 SE (the target is then decided either way)."""
    if not math.isfinite(summary["se"]):
        return "one round: undecided"
    gap = abs(summary["mean"] - limit)
    return "decided (the limit is outside mean +- 2 SE)" if gap > 2 * summary["se"] else \
        "not decided (the limit is within mean +- 2 SE)"


def work_limit(scheme: str, k: int, n: int, s: int) -> float:
    """The throughput a scheme can reach without stragglers, as a fraction of a plain map's (its redundancy's
    price): 1 for ``uncoded`` and ``speculative`` (one evaluation of each input; backup copies start only when a
    shard is late) and for any scheme without stragglers to wait out (S = 0); else K/(N − S), at most 1, for the
    schemes that evaluate the first N − S of N shards of a batch of K inputs' rows (``gcc``, ``bacc``,
    ``replication``: the S spares are lazy)."""
    if scheme in ("uncoded", "speculative") or s <= 0:
        return 1.0
    return min(1.0, k / (n - s))
