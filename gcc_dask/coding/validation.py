"""Argument validation shared by the schemes, and host conversion of index arrays.

Every message names the argument, echoes the value with ``!r`` and says what is valid
(docs/architecture.rst, section 'Errors').
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError, InvalidInputError
from gcc_dask.limits import MAX_CODE_ENTRIES

__all__ = ["check_choice", "check_code_size", "check_int", "check_nonneg", "check_positive", "index_array",
           "to_numpy"]


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None, why: str = "") -> int:
    """`value` as an int in ``[minimum, maximum]``; `why` says where the maximum comes from."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{name} must be an integer {bound}; got {name}={value!r}")
    if maximum is not None and value > maximum:
        reason = f" ({why})" if why else ""
        raise ConfigError(f"{name} must be an integer in [{minimum}, {maximum}]{reason}; got {name}={value!r}")
    return int(value)


def check_code_size(num_inputs: int, num_workers: int) -> None:
    """Refuse an (N, K) encoder matrix of more than ``gcc_dask.limits.MAX_CODE_ENTRIES`` entries, before
    anything is allocated."""
    entries = num_inputs * num_workers
    if entries > MAX_CODE_ENTRIES:
        raise ConfigError(
            f"num_inputs * num_workers must be at most {MAX_CODE_ENTRIES:,} (the (N, K) float64 encoder "
            f"matrix); got num_inputs={num_inputs!r}, num_workers={num_workers!r}, whose encoder alone "
            f"would take {entries * 8 / 2**30:.1f} GiB"
        )


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{name} must be one of {list(choices)}; got {name}={value!r}")
    return value


def check_nonneg(name: str, value: Any, *, extra: tuple[str, ...] = ()) -> float | str:
    if isinstance(value, str) and value in extra:
        return value
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        also = f" or one of {list(extra)}" if extra else ""
        raise ConfigError(f"{name} must be a finite float >= 0{also}; got {name}={value!r}")
    return float(value)


def check_positive(name: str, value: Any) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite float > 0; got {name}={value!r}")
    return float(value)


def to_numpy(x: Any) -> np.ndarray:
    """Host copy of an array from any namespace (NumPy, CuPy, Array API)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get") and type(x).__module__.startswith("cupy"):
        return x.get()
    try:
        return np.asarray(x)
    except Exception:  # pragma: no cover - libraries that refuse __array__
        return np.from_dlpack(x)


def index_array(received: Any, num_workers: int) -> np.ndarray:
    """`received` as a 1-D int64 host array (a boolean mask of length N is turned into indices)."""
    r = received if isinstance(received, np.ndarray) else to_numpy(received)
    if r.dtype != np.int64:
        if r.dtype == np.bool_ and r.shape == (num_workers,):
            r = np.flatnonzero(r)
        elif r.size == 0:
            r = r.astype(np.int64)
        elif r.dtype.kind in "iu":
            r = r.astype(np.int64)
        else:
            raise InvalidInputError(
                f"received must be integer worker indices (or a boolean mask of shape ({num_workers},)); "
                f"got dtype {r.dtype} with values {received!r}"
            )
    if r.ndim != 1:
        raise InvalidInputError(f"received must be 1-D; got shape {r.shape} ({received!r})")
    return np.ascontiguousarray(r)
