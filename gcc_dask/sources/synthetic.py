"""Synthetic samples, a pure function of (seed, sample index): any slice reads the same values in any process.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError
from gcc_dask.sources.base import Source, _check_limit, register_source


# ------------------------------------------------------------------------------------------ synthetic
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrap-around arithmetic): a counter-based hash."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


@register_source("synthetic")
class SyntheticSource(Source):
    """Uniform random samples in ``[low, high)``, generated on read (for scale tests; no labels).

    Value ``j`` of sample ``i`` is a SplitMix64 hash of ``(seed, i * size + j)`` mapped to [0, 1) with 53
    bits, so any slice is reproducible on its own: sample i depends only on (seed, i).

    Parameters: ``num_samples``, ``shape`` (sample shape, default (1, 28, 28)), ``seed`` (default 0),
    ``low``/``high`` (default 0, 1), ``dtype`` (default float32), ``limit``. :attr:`chunks` is None.
    """

    _fresh_reads = True

    def __init__(self, num_samples: int = 1024, shape: Any = (1, 28, 28), seed: int = 0,
                 low: float = 0.0, high: float = 1.0, dtype: Any = "float32",
                 limit: int | None = None) -> None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) \
                or num_samples < 0:
            raise ConfigError(f"source.num_samples: got {num_samples!r}; expected an integer >= 1")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1
                   for s in shape):
            raise ConfigError(f"source.shape: got {shape!r}; expected a list of positive integers")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ConfigError(f"source.seed: got {seed!r}; expected an integer >= 0")
        if not float(low) < float(high):
            raise ConfigError(f"source.low/high: got low={low!r}, high={high!r}; expected low < high")
        kind = np.dtype(dtype)
        if kind.kind != "f":
            raise ConfigError(f"source.dtype: got {dtype!r}; expected a floating dtype")
        self.seed, self.low, self.high = int(seed), float(low), float(high)
        self._key = _splitmix64(np.array([self.seed], dtype=np.uint64))[0]
        self._finish(f"synthetic[seed={self.seed}]", int(num_samples), shape, kind, False,
                     _check_limit(limit), {"kind": "synthetic", "num_samples": int(num_samples),
                                           "shape": list(shape), "seed": self.seed, "low": self.low,
                                           "high": self.high, "dtype": kind.name})

    def _read(self, start: int, stop: int) -> tuple[Any, Any]:
        size = int(np.prod(self.sample_shape))
        counter = np.arange(start * size, stop * size, dtype=np.uint64)
        bits = _splitmix64(counter ^ self._key) >> np.uint64(11)
        u = bits.astype(np.float64) * (1.0 / 2.0**53)
        x = (self.low + (self.high - self.low) * u).astype(self.dtype)
        top = np.nextafter(self.dtype.type(self.high), self.dtype.type(self.low))
        return np.minimum(x, top), None  # rounding to float32 must not reach `high`
