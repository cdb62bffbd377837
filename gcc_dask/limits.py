"""Bounds that a real cluster can meet, checked up front by the config, the sweep config and the library.

A value beyond these passes every type check and then hangs, or exhausts memory before the first batch:
``num_workers: 2e9`` allocates its worker points (16 GB), ``hang_delay: 1e12`` sleeps for 31,000 years.
They are refused with one line that names the key, the value and the bound. Each bound is far above
anything the pipelines, sweeps and benchmarks use (N ≤ 1024, K ≤ 128, waits of seconds).

This module imports nothing heavy, so both :mod:`gcc_dask.config` and :mod:`gcc_dask.coding` use it.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "MAX_CODE_ENTRIES",
    "MAX_DURATION",
    "MAX_FIT_SAMPLES",
    "MAX_INPUTS",
    "MAX_LOCAL_WORKERS",
    "MAX_SAMPLES",
    "MAX_SWEEP_ENTRIES",
    "MAX_TRIALS",
    "MAX_WINDOW",
    "MAX_WORKERS",
    "parse_seconds",
]

#: Most inputs per batch (K) and workers per batch (N): one Dask task per worker per batch.
MAX_INPUTS = 65_536
MAX_WORKERS = 65_536
#: Most entries of the (N, K) float64 encoder matrix, K * N (2**26 entries = 512 MiB).
MAX_CODE_ENTRIES = 2**26
#: Most samples of a run: 2**31 (the store's coordinate arrays alone are 20 bytes a sample).
MAX_SAMPLES = 2**31
#: Most worker processes of an embedded LocalCluster, per CPU core of the machine (at least 8 in all).
MAX_LOCAL_WORKERS = 4
#: Most samples of one window of the composition's similarity chain (``composition.window``): a window is read
#: whole and chained in O(window) time per sample (8 times the default of 8,192).
MAX_WINDOW = 65_536
#: Most samples the composition's principal components are fitted on (``composition.fit_samples``): they are
#: read whole, as float64 (65,536 MNIST digits are 411 MB; 16 times the default of 4,096).
MAX_FIT_SAMPLES = 65_536
#: Longest duration (s) any config key accepts: one day.
MAX_DURATION = 86_400.0
#: Most trials of a sweep, and most entries of one sweep result array (schemes x K x N x S x trials,
#: held in memory as float64 while the store is created: 2**24 entries = 128 MiB).
MAX_TRIALS = 1_000_000
MAX_SWEEP_ENTRIES = 2**24
#: Most backup copies of an input for ``speculative`` (``speculation.copies``): N = (copies + 1)·K.
MAX_BACKUP_COPIES = 8

# a decimal number (no sign, no '_', optional exponent), optional blanks, a unit of letters
_DURATION_RE = re.compile(r"(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z]+)")
_BARE_NUMBER_RE = re.compile(r"[+-]?[\d_]*\.?[\d_]+(?:[eE][+-]?\d+)?")


def _units() -> dict[str, float]:
    from dask.utils import timedelta_sizes

    return dict(timedelta_sizes)


def _yaml_float(text: str) -> str:
    """``1e12`` as YAML 1.1 reads a float (``1.0e+12``): it needs a '.' and a signed exponent."""
    mantissa, _, exponent = text.lower().partition("e")
    mantissa = mantissa if "." in mantissa else f"{mantissa}.0"
    return f"{mantissa}e{exponent if exponent[:1] in '+-' else '+' + exponent}"


def parse_seconds(value: Any, *, limit: float = MAX_DURATION) -> float:
    """A duration in float seconds, read strictly.

    Accepted: a number of seconds (int or float, not bool), or a string of a decimal number and a
    unit, such as ``"50ms"``, ``"2s"``, ``" 3 ms "``, ``"1 minute"``, ``"1.5h"``: the units of
    :func:`dask.utils.parse_timedelta` (``ns``, ``us``, ``ms``, ``s``, ``m``, ``h``, ``d``, ``w`` and
    their long names). The result must be finite and in ``[0, limit]`` (one day by default).

    Refused, where :func:`dask.utils.parse_timedelta` reads something surprising: a string without a
    unit (``"5"``, ``"1_000"``: is it seconds or milliseconds? write ``"5s"`` or the number ``5``),
    underscores (``"1_000s"``; dask reads ``"1_000"`` as 1000 s), signs (``"+3s"``), blanks inside the
    number (``"3 0s"`` is 30 s to dask) and a unit without a number (``"s"`` is 1 s to dask). ``".5s"``
    is read as 0.5 s (dask reads 1.5 s).

    Raises
    ------
    ValueError
        With the text of what is valid (callers put it in their one-line error), for anything else.
    """
    base = (f"a duration such as '50ms' or '2s' (a number and a unit), or a number of seconds, "
            f"from 0 to {limit:g}{' (1 day)' if limit == 86_400 else ''}")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(base)
    if isinstance(value, str):
        text = value.strip()
        match = _DURATION_RE.fullmatch(text)
        if match is None:
            if "_" in text:
                fixed = text.replace("_", "") + ("" if text[-1:].isalpha() else "s")
                raise ValueError(f"{base}; a string without '_' (such as {fixed!r})")
            if _BARE_NUMBER_RE.fullmatch(text):
                yaml_hint = (f"; YAML reads {text} as a string, {_yaml_float(text)} as a number"
                             if "e" in text.lower() else "")
                raise ValueError(f"{base}; a string needs a unit (such as '{text.lstrip('+')}s' for "
                                 f"seconds, or a number without quotes{yaml_hint})")
            raise ValueError(base)
        units = _units()
        if match["unit"] not in units:
            raise ValueError(f"{base}; unit {match['unit']!r} is not one of ns, us, ms, s, m, h, d, w")
        seconds = float(match["number"]) * units[match["unit"]]
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond float range
            seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(base)
    if seconds > limit:
        raise ValueError(f"{base}; no run should wait longer")
    return seconds
