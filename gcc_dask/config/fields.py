"""Shared pieces of the configuration models: scheme names, error lines, durations, the base section.

Every problem becomes one :class:`~gcc_dask.errors.ConfigError` line of the form
``"<key.path>: got <value!r>; expected <what is valid>"``; durations accept ``"50ms"``/``"2s"`` strings or
numbers of seconds (:func:`dask.utils.parse_timedelta`) and are stored as float seconds.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from gcc_dask.errors import ConfigError

#: Every scheme name a config may list (kept equal to ``gcc_dask.coding.list_codes()`` by a test).
SCHEMES: tuple[str, ...] = ("bacc", "bspline", "gcc", "lcc", "letcc", "replication", "uncoded")
#: Schemes that run on ``code.num_workers`` workers and so need ``num_workers >= num_inputs``.
CODED_SCHEMES: tuple[str, ...] = ("bacc", "bspline", "gcc", "lcc", "letcc")

_FINGERPRINT_EXCLUDE = ("store", "cluster", ("run", "progress"), ("run", "max_batches_in_flight"),
                        ("run", "limit_batches"))


class _Invalid(ValueError):
    """A validation failure that knows its key (relative to the model that raised it)."""

    def __init__(self, key: str | None, value: Any, expected: str):
        super().__init__(expected)
        self.key, self.value, self.expected = key, value, expected


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_PLAIN_KEY = re.compile(r"^[\w\-\[\]]+$")


def _key_path(parts: Sequence[Any]) -> str:
    """Dotted key path; odd keys (spaces, newlines, dots) are shown with repr so the line stays one line."""
    return ".".join(str(p) if _PLAIN_KEY.match(str(p)) else repr(p) for p in parts)


def _fail(key: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"{key}: got {_short(value)}; expected {expected}")


# --------------------------------------------------------------------------------------- value types
def parse_duration(value: Any, *, allow_none: bool = False) -> float | None:
    """Parse a duration (``"50ms"``, ``"2s"``, or a number of seconds) into float seconds.

    Raises
    ------
    ValueError
        If the value is not a finite, non-negative duration (a ``ValueError`` subclass that
        :func:`load_config` reports as one ConfigError line).
    """
    from dask.utils import parse_timedelta

    expected = "a duration such as '50ms' or '2s', or a number of seconds >= 0"
    if value is None:
        if allow_none:
            return None
        raise _Invalid(None, value, expected)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _Invalid(None, value, expected)
    try:
        seconds = float(parse_timedelta(value.strip() if isinstance(value, str) else value))
    except Exception:
        raise _Invalid(None, value, expected) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise _Invalid(None, value, expected)
    return seconds


def _duration(value: Any) -> float:
    return parse_duration(value)


def _optional_duration(value: Any) -> float | None:
    return parse_duration(value, allow_none=True)


def _as_list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _as_path_str(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


Duration = Annotated[float, BeforeValidator(_duration)]
OptionalDuration = Annotated[float | None, BeforeValidator(_optional_duration)]
PathStr = Annotated[str, BeforeValidator(_as_path_str)]
PosInt = Annotated[int, Field(ge=1)]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
