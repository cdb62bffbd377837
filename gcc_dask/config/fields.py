"""Shared pieces of the configuration models: scheme names, error lines, durations, the base section.

Every problem becomes one :class:`~gcc_dask.errors.ConfigError` line of the form
``"<key.path>: got <value!r>; expected <what is valid>"``; durations accept ``"50ms"``/``"2s"`` strings or
numbers of seconds up to one day (:func:`gcc_dask.limits.parse_seconds`) and are stored as float seconds.
"""

from __future__ import annotations

import math
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_CODE_ENTRIES, MAX_FIT_SAMPLES, MAX_INPUTS, MAX_WINDOW, MAX_WORKERS, parse_seconds

#: Every scheme name a config may list (kept equal to ``gcc_dask.coding.list_codes()`` by a test).
SCHEMES: tuple[str, ...] = ("bacc", "bspline", "gcc", "lcc", "letcc", "replication", "speculative", "uncoded")
#: Schemes that run on ``code.num_workers`` workers and so need ``num_workers >= num_inputs``.
CODED_SCHEMES: tuple[str, ...] = ("bacc", "bspline", "gcc", "lcc", "letcc")

_FINGERPRINT_EXCLUDE = ("store", "cluster", ("run", "progress"), ("run", "max_batches_in_flight"),
                        ("run", "limit_batches"))
#: the same keys, dotted (``"run.progress"``): left out of the fingerprint, so never a reason to refuse a resume
FINGERPRINT_IGNORED: tuple[str, ...] = tuple(".".join(i) if isinstance(i, tuple) else i for i in _FINGERPRINT_EXCLUDE)
#: (section, key) of the keys added after stores were first made: a store made before a key existed resumes under
#: a config that leaves it at its default (:meth:`PipelineConfig.fingerprint` with ``stored``)
ADDED_KEYS: tuple[tuple[str, str], ...] = (("advise", "margin"), ("speculation", "copies"), ("run", "output_kind"),
                                           ("composition", "leaf"))


class _Invalid(ValueError):
    """A validation failure that knows its key (relative to the model that raised it)."""

    def __init__(self, key: str | None, value: Any, expected: str):
        super().__init__(expected)
        self.key, self.value, self.expected = key, value, expected


class _Nothing:
    """The value of a key the user left out, in an error line ("got nothing")."""

    def __repr__(self) -> str:
        return "nothing"


#: see :class:`_Nothing`
NOTHING = _Nothing()


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, at most `limit` characters: a longer one keeps its start and its end around "..." (a
    long path keeps its file name, which a cut end hid: under a deep temporary folder, 'nope.npy' was lost)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]


_PLAIN_KEY = re.compile(r"^[\w\-\[\]]+$")


def _key_path(parts: Sequence[Any]) -> str:
    """Dotted key path; odd keys (spaces, newlines, dots) are shown with repr so the line stays one line."""
    return ".".join(str(p) if _PLAIN_KEY.match(str(p)) else repr(p) for p in parts)


#: what a pydantic error of these types expects, in the user's words (pydantic says "a valid boolean")
_EXPECTED_BY_TYPE = {"bool_parsing": "true or false", "bool_type": "true or false"}


def _expected(err: Mapping[str, Any]) -> str:
    """What a pydantic error (one of ``ValidationError.errors()``) expects: the valid values where they are few
    (a boolean: true or false), else its message without "Input should be "."""
    if err.get("type") in _EXPECTED_BY_TYPE:
        return _EXPECTED_BY_TYPE[str(err["type"])]
    return str(err.get("msg", "a valid value")).removeprefix("Input should be ")


def _fail(key: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"{key}: got {_short(value)}; expected {expected}")


# --------------------------------------------------------------------------------------- value types
def parse_duration(value: Any, *, allow_none: bool = False) -> float | None:
    """Parse a duration (``"50ms"``, ``"2s"``, or a number of seconds) into float seconds.

    Strings are a decimal number and a unit (:func:`gcc_dask.limits.parse_seconds`): a string without
    a unit such as ``"5"`` is refused rather than guessed (write ``"5s"`` or the number ``5``), and so
    are underscores (``"1_000"``), signs and anything :func:`dask.utils.parse_timedelta` would read
    surprisingly. Every duration is at most one day (``gcc_dask.limits.MAX_DURATION``).

    Raises
    ------
    ValueError
        If the value is not a finite duration in [0, 86400] s (a ``ValueError`` subclass that
        :func:`load_config` reports as one ConfigError line).
    """
    if value is None and allow_none:
        return None
    try:
        return parse_seconds(value)
    except ValueError as exc:
        raise _Invalid(None, value, str(exc)) from None


def _duration(value: Any) -> float:
    return parse_duration(value)


def _optional_duration(value: Any) -> float | None:
    return parse_duration(value, allow_none=True)


#: named placements of the data and worker points (``gcc_dask.coding.points.POINTS``)
POINT_NAMES: tuple[str, ...] = ("chebyshev", "equispaced", "systematic", "twins")


def _points(value: Any) -> Any:
    """one of chebyshev, equispaced, systematic, twins, or ``{alpha: [...], beta: [...]}``"""
    if isinstance(value, str):
        if value in POINT_NAMES:
            return value
        raise _Invalid(None, value, f"one of {', '.join(POINT_NAMES)}, or a mapping with 'alpha' and/or 'beta' "
                                    "lists of numbers in [-1, 1]")
    if isinstance(value, dict) and value and not set(value) - {"alpha", "beta"}:
        out = {}
        for key, vals in value.items():
            ok = isinstance(vals, (list, tuple)) and vals and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals)
            if not ok:
                raise _Invalid(key, vals, "a non-empty list of finite numbers in [-1, 1], strictly increasing")
            out[key] = [float(v) for v in vals]
        return out
    raise _Invalid(None, value, f"one of {', '.join(POINT_NAMES)}, or a mapping with 'alpha' and/or 'beta' lists "
                                "of numbers in [-1, 1]")


def _as_list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _as_path_str(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _at_most(limit: int, why: str):
    def check(value: int) -> int:
        if value > limit:
            raise _Invalid(None, value, f"an integer from 1 to {limit:,} ({why})")
        return value

    return check


def check_sizes(cfg: Any) -> None:
    """Refuse a batch geometry no cluster can run (``gcc_dask.limits``), for a :class:`PipelineConfig`.

    `num_inputs` and `num_workers` are bounded by their types; here: replication's ``copies * K`` workers,
    and ``K * N`` per scheme (every scheme builds its (N, K) float64 encoder matrix).
    """
    k = cfg.code.num_inputs
    for scheme in cfg.concrete_schemes:
        n = cfg.workers_for(scheme)
        code = cfg.code_of(scheme)
        if n > MAX_WORKERS:
            key, value = cfg._workers_key(scheme)
            raise _Invalid(key, value, f"a value with at most {MAX_WORKERS:,} workers for scheme {scheme!r} (the "
                                       f"workers of one batch; here {n:,})")
        if k * n > MAX_CODE_ENTRIES:
            key, value = cfg._workers_key(scheme) if code in CODED_SCHEMES and k * k <= MAX_CODE_ENTRIES \
                else ("code.num_inputs", k)
            raise _Invalid(key, value, f"num_inputs * num_workers <= {MAX_CODE_ENTRIES:,} for scheme "
                                       f"{scheme!r}: here K = {k:,} and N = {n:,}, so its (N, K) encoder "
                                       f"matrix alone would take {k * n * 8 / 2**30:.1f} GiB")


Duration = Annotated[float, BeforeValidator(_duration)]
OptionalDuration = Annotated[float | None, BeforeValidator(_optional_duration)]
PathStr = Annotated[str, BeforeValidator(_as_path_str)]
PosInt = Annotated[int, Field(ge=1)]
Points = Annotated[str | dict[str, list[float]], BeforeValidator(_points)]
#: K and N of a batch, bounded by ``gcc_dask.limits`` (65,536 each).
InputCount = Annotated[int, Field(ge=1), AfterValidator(_at_most(MAX_INPUTS, "inputs per batch"))]
WorkerCount = Annotated[int, Field(ge=1), AfterValidator(
    _at_most(MAX_WORKERS, "one Dask task per worker per batch; no cluster runs more"))]
#: The composition's window and fit sizes, bounded by ``gcc_dask.limits`` (65,536 samples each).
WindowSize = Annotated[int, Field(ge=1), AfterValidator(
    _at_most(MAX_WINDOW, "samples read and chained at once; larger windows cost time per sample"))]
FitSamples = Annotated[int, Field(ge=1), AfterValidator(
    _at_most(MAX_FIT_SAMPLES, "samples read at once, as float64, to fit the principal components"))]
#: The ``tree`` composition's leaf size, bounded like a window (a leaf is chained: O(leaf) work per sample).
LeafSize = Annotated[int, Field(ge=1), AfterValidator(
    _at_most(MAX_WINDOW, "samples chained at once; larger leaves cost time per sample"))]


def _accepts_none(annotation: Any) -> bool:
    """Whether a field's type admits None (``X | None``, ``Optional[X]``, ``Any``)."""
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    return any(_accepts_none(a) for a in typing.get_args(annotation)) if typing.get_origin(annotation) in (
        typing.Union, types.UnionType) else False


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_set(cls, data: Any) -> Any:
        """``key: null`` (or a key left empty in YAML) means "not set": the default applies, and a required key is
        missing. A key whose type admits None keeps it (``cutoff.deadline: null`` is no deadline)."""
        if not isinstance(data, Mapping):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items()
                if not (v is None and k in fields and not _accepts_none(fields[k].annotation))}
