"""What a second ``gcc-dask advise`` reuses, and how long a call is expected to take (docs/frontier.rst).

An advice stores f's outputs (on the groups and on every coded input) in ``advice.zarr`` and the scores of
every (estimator, N, S) in ``advice-scores.npz`` beside it, each keyed by what fixes it: the data fingerprint
(source, model files, composition, sample size, K), the estimator and its parameters, S, the received-set
patterns and their seeds. A call whose outputs and scores are all stored evaluates nothing and starts no
cluster: it only chooses again (another target, margin or largest N/K within those measured). A call with
another straggler budget reuses f's outputs and scores the new sets.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["SCORES_FILE", "Expected", "expected_time", "load_scores", "save_scores", "score_key"]

SCORES_FILE = "advice-scores.npz"
#: sets decoded per candidate to time its decoder (on outputs of zeros: decoding costs the same on any values)
_TIMED_SETS = 16


def score_key(fingerprint: str, code: str, K: int, N: int, params: Mapping[str, Any], S: int,
              patterns: Sequence[str], extra: Mapping[str, Any], exhaustive_limit: int, draws: int,
              seed: int) -> str:
    """The key of one (estimator, N, S)'s scores: a digest of everything they depend on (hex str)."""
    blob = json.dumps({"data": fingerprint, "code": code, "K": K, "N": N, "params": params, "S": S,
                       "patterns": list(patterns), "extra": extra, "exhaustive_limit": exhaustive_limit,
                       "draws": draws, "seed": seed}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(("gcc-dask-advice-scores-v1\n" + blob).encode()).hexdigest()[:32]


def load_scores(folder: Path) -> dict[str, dict]:
    """The scores stored in `folder` by earlier calls: ``{key: {pattern: {metric: (G,) array}, "exhaustive":
    bool}}``; empty when there are none, or the file cannot be read (it is then rewritten)."""
    path = Path(folder) / SCORES_FILE
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            flat = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, KeyError):
        return {}
    out: dict[str, dict] = {}
    for name, value in flat.items():
        key, _, rest = name.partition("/")
        entry = out.setdefault(key, {})
        if rest == "exhaustive":
            entry["exhaustive"] = bool(value)
        else:
            pattern, _, metric = rest.partition("/")
            entry.setdefault(pattern, {})[metric] = value
    return out


def save_scores(folder: Path, scores: Mapping[str, Mapping]) -> None:
    """Write `scores` (as :func:`load_scores` returns them) to `folder`, replacing the file atomically."""
    flat: dict[str, np.ndarray] = {}
    for key, entry in scores.items():
        for pattern, value in entry.items():
            if pattern == "exhaustive":
                flat[f"{key}/exhaustive"] = np.asarray(bool(value))
            else:
                for metric, arr in value.items():
                    flat[f"{key}/{pattern}/{metric}"] = np.asarray(arr)
    path = Path(folder) / SCORES_FILE
    tmp = path.with_name(f".{path.name}.tmp.npz")
    np.savez(tmp, **flat)
    tmp.replace(path)


@dataclass(frozen=True)
class Expected:
    """The expected seconds of an advice call, from what it has left to do and timed costs."""

    f_rows: int
    f_s: float
    decodes: int
    decode_s: float
    threads: int

    @property
    def seconds(self) -> float:
        return (self.f_s + self.decode_s) / max(1, self.threads)

    def line(self) -> str:
        """One line: the expected time and what it is made of."""
        what = [f"f on {self.f_rows:,} rows (~{self.f_s / max(1, self.threads):.0f} s)" if self.f_rows
                else "f is not evaluated (its outputs are stored)",
                f"{self.decodes:,} group decodes (~{self.decode_s / max(1, self.threads):.0f} s)" if self.decodes
                else "no decodes (the scores are stored)"]
        at_once = f" ({self.threads} tasks at once)" if self.f_rows or self.decodes else ""
        return f"expected time: about {_round(self.seconds)}{at_once}: " + ", ".join(what)


def _round(seconds: float) -> str:
    if seconds < 1:
        return "1 s"
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    return f"{seconds / 60:.1f} min"


def expected_time(f_rows: int, seconds_per_row: float, decode_work: Sequence[tuple[Any, int, int, int]],
                  out_shape: tuple[int, ...], threads: int) -> Expected:
    """Expected seconds of the work left: f on `f_rows` rows at `seconds_per_row`, and for each
    ``(code, G, M, N)`` of `decode_work` the decode of G groups under M received sets of N workers, timed here
    on a few sets of outputs of zeros and scaled to M. Both are spread over `threads` (the cluster's)."""
    from .evaluate import score_sets

    decode_s, decodes = 0.0, 0
    for code, G, M, N in decode_work:
        if M <= 0 or G <= 0:
            continue
        K = code.num_inputs
        rng = np.random.default_rng(0)
        m = min(M, _TIMED_SETS)
        sets = np.ones((m, N), dtype=bool)
        for row in sets:  # some workers lost in each timed set, as in the real ones
            row[rng.choice(N, size=max(0, min(N - K, N // 4)), replace=False)] = False
        g = min(G, 64)
        t0 = time.perf_counter()
        score_sets(code, np.zeros((g, N, *out_shape), np.float32), np.zeros((g, K, *out_shape), np.float32), sets)
        decode_s += (time.perf_counter() - t0) * (M / m) * (G / g)
        decodes += G * M
    return Expected(f_rows=int(f_rows), f_s=float(f_rows) * float(seconds_per_row), decodes=decodes,
                    decode_s=decode_s, threads=max(1, int(threads)))
