"""The checks the straggler models share: integers, floats and durations validated with one clear line, a
seed or generator as a NumPy generator, and a code's workers in the order of their points.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError
from gcc_dask.limits import parse_seconds


_NUMBER = (int, float, np.integer, np.floating)


# --------------------------------------------------------------------------------------- validation
def _check_int(name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer >= {lo}; got {name}={value!r}")
    if value < lo:
        raise ConfigError(f"{name} must be >= {lo}; got {name}={value!r}")
    return int(value)


def _check_float(name: str, value: Any, lo: float, hi: float, *, open_hi: bool = False) -> float:
    ok = isinstance(value, _NUMBER) and not isinstance(value, bool)
    if not ok or not (lo <= float(value) < hi if open_hi else lo <= float(value) <= hi):
        raise ConfigError(
            f"{name} must be a number in [{lo}, {hi}{')' if open_hi else ']'}; got {name}={value!r}"
        )
    return float(value)


def _check_positive(name: str, value: Any) -> float:
    ok = isinstance(value, _NUMBER) and not isinstance(value, bool)
    if not ok or not 0 < float(value) < math.inf:
        raise ConfigError(f"{name} must be a positive finite number; got {name}={value!r}")
    return float(value)


def _duration(name: str, value: Any) -> float:
    """Seconds (float64) from a number of seconds or a string such as ``"50ms"``, at most one day
    (:func:`gcc_dask.limits.parse_seconds`: a string needs a unit, no underscores)."""
    try:
        return parse_seconds(value)
    except ValueError as exc:
        raise ConfigError(f"{name} must be {exc}; got {name}={value!r}") from None


def _as_generator(rng: Any) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise ConfigError(f"rng must be a numpy.random.Generator or a non-negative int seed; got {rng!r}")


def _check_code(code: Any, num_workers: int) -> None:
    if code is not None and int(code.num_workers) != num_workers:
        raise ConfigError(
            f"num_workers must equal code.num_workers; got num_workers={num_workers!r}, "
            f"code.num_workers={code.num_workers!r}"
        )


def _point_order(code: Any, num_workers: int) -> np.ndarray:
    """Worker indices sorted by worker point (index order without a code or its points)."""
    points = getattr(code, "worker_points", None)
    if points is None:
        return np.arange(num_workers)
    return np.argsort(np.asarray(points, dtype=np.float64), kind="stable")


def _complement(stragglers: np.ndarray, n: int) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[stragglers] = False
    return np.flatnonzero(mask).astype(np.int64)
