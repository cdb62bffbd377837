"""Scheme entries of a pipeline: one label per compared estimator, with its own parameters.

``schemes:`` lists names (``gcc``) or mappings ``{label, code, params}``, so that one run compares several
variants of one code at equal cost: replication at N = 10 and 12, uncoded waiting for all K results beside
uncoded cut off at K − S with a linear fill, gcc at two N (docs/pipeline.rst, section 'Schemes')::

    schemes:
      - gcc
      - {label: replication-linear, code: replication, params: {fill: linear}}
      - uncoded
      - {label: uncoded-cutoff, code: uncoded, params: {stop: cutoff, fill: linear}}

A label names the scheme's group in the store, its row in the summary and its line in the plots. ``params``
takes the keys of the code's section (``gcc``, ``lcc``, ``replication``, ``uncoded``, and ``speculation`` for
``speculative``), which it overrides for that entry only, and ``num_workers`` (N for that entry; not for
``uncoded``, whose N is K, nor ``speculative``, whose N is (speculation.copies + 1)·K) and ``points`` (for the
point-based codes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

from gcc_dask.errors import ConfigError

from .fields import SCHEMES, _expected, _Invalid, _Section

__all__ = ["ENTRY_KEYS", "LABEL_RE", "SchemeEntry", "SchemeLookup", "split_entries"]

#: labels are store group names: letters, digits, '_' and '-'
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
#: the section whose keys an entry's params override, per code
SECTION_OF = {"gcc": "gcc", "lcc": "lcc", "replication": "replication", "uncoded": "uncoded",
              "speculative": "speculation"}
#: params every entry of a code may set beside its section's keys
ENTRY_KEYS: dict[str, tuple[str, ...]] = {
    "bacc": ("num_workers", "points"),
    "bspline": ("num_workers", "points"),
    "gcc": ("num_workers", "points"),
    "lcc": ("num_workers", "points"),
    "letcc": ("num_workers", "points"),
    "replication": ("num_workers",),
    "speculative": (),
    "uncoded": (),
}


class SchemeEntry(_Section):
    """A scheme listed under a label of its own (``schemes: [{label, code, params}]``).

    Attributes
    ----------
    code
        The registered code the entry runs: bacc, bspline, gcc, lcc, letcc, replication, speculative or
        uncoded.
    params
        Overrides for this entry: the keys of the code's section (``gcc``: kernel, lambda_enc, lambda_dec,
        length_scale; ``lcc``: degree; ``replication``: copies, extra, stop, fill; ``uncoded``: stop,
        fill; ``speculative``: the ``speculation`` section's quantile, multiplier, min_runtime, copies),
        ``num_workers`` (N; every code but uncoded and speculative) and ``points`` (the point-based codes).
    """

    code: Literal["bacc", "bspline", "gcc", "lcc", "letcc", "replication", "speculative", "uncoded"]
    params: dict[str, Any] = Field(default_factory=dict)


def split_entries(schemes: Any, entries: Any) -> tuple[Any, Any]:
    """Turn a raw ``schemes`` list into labels and ``scheme_entries`` (a mapping label -> entry).

    Names stay as they are; a mapping ``{label, code, params}`` becomes its label in the list and its entry in
    `entries` (``label`` defaults to ``code``). Anything else is left for the field validators to refuse.
    """
    if isinstance(schemes, tuple):
        schemes = list(schemes)
    if not isinstance(schemes, list):
        return schemes, entries
    out_entries = dict(entries) if isinstance(entries, Mapping) else {}
    labels = []
    for i, item in enumerate(schemes):
        if not isinstance(item, Mapping):
            labels.append(item)
            continue
        unknown = sorted(set(map(str, item)) - {"label", "code", "params"})
        if unknown:
            raise _Invalid(f"schemes.{i}.{unknown[0]}", item[unknown[0]] if unknown[0] in item else None,
                           "no such key in a scheme entry (valid keys: label, code, params)")
        code = item.get("code")
        if not isinstance(code, str) or code not in SCHEMES:
            raise _Invalid(f"schemes.{i}.code", code, f"one of {', '.join(SCHEMES)}")
        label = item.get("label", code)
        if not isinstance(label, str) or not LABEL_RE.match(label):
            raise _Invalid(f"schemes.{i}.label", label, "a label of letters, digits, '_' or '-' that starts with a "
                                                      "letter or a digit (it names the scheme's group in the store)")
        if label == "inputs":
            raise _Invalid(f"schemes.{i}.label", label, "a label other than 'inputs' (the store's group of the "
                                                      "labels and the reference)")
        params = item.get("params") or {}
        if not isinstance(params, Mapping):
            raise _Invalid(f"schemes.{i}.params", params, "a mapping of the code's parameters")
        if label in out_entries and out_entries[label] != {"code": code, "params": dict(params)}:
            raise _Invalid(f"schemes.{i}.label", label, "a label used once (two entries share it)")
        out_entries[label] = {"code": code, "params": dict(params)}
        labels.append(label)
    return labels, out_entries


def entry_keys(code: str, section_keys: tuple[str, ...]) -> tuple[str, ...]:
    """The params an entry of `code` accepts: its section's keys and :data:`ENTRY_KEYS`."""
    return (*section_keys, *ENTRY_KEYS[code])


def stop_rule(code: str, section: Any) -> Literal["cutoff", "recovery", "all"]:
    """When a scheme's batch stops: at the shared cutoff, at recovery (one copy of every input, LCC's
    threshold) or after all N results (``uncoded`` by default)."""
    if code in ("lcc", "speculative"):
        return "recovery"
    if code in ("replication", "uncoded"):
        return section.stop
    return "cutoff"


class SchemeLookup:
    """What a pipeline config says of each listed scheme: its code, N, section, stop rule and code parameters.

    A mixin of :class:`~gcc_dask.config.PipelineConfig` (which holds ``schemes``, ``scheme_entries``, ``code``,
    ``cutoff``, ``run`` and the code sections these methods read).
    """

    def _check_entries(self) -> None:
        """Every label is a scheme name or has an entry; every entry is listed; its params are valid keys of
        its code's section (or ``num_workers``/``points``), with valid values."""
        for label in self.schemes:
            if label == "auto" and label not in self.scheme_entries:
                continue
            if label not in self.scheme_entries and label not in SCHEMES:
                raise _Invalid("schemes", label, f"scheme names from {', '.join(SCHEMES)}, or entries "
                                                 "{label, code, params}")
        for label, entry in self.scheme_entries.items():
            if label not in self.schemes:
                raise _Invalid(f"scheme_entries.{label}", entry.code, "an entry whose label is listed in schemes")
            section = SECTION_OF.get(entry.code)
            valid = entry_keys(entry.code, tuple(type(getattr(self, section)).model_fields) if section else ())
            for key, value in entry.params.items():
                if key not in valid:
                    raise _Invalid(f"schemes.{label}.params.{key}", value,
                                   f"no such parameter for code {entry.code!r} (valid: {', '.join(valid) or 'none'})")
            if "num_workers" in entry.params:
                n = entry.params["num_workers"]
                if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 65536:
                    raise _Invalid(f"schemes.{label}.params.num_workers", n, "an integer from 1 to 65,536")
            if entry.code == "replication" and {"num_workers", "copies"} <= set(entry.params):
                raise _Invalid(f"schemes.{label}.params.copies", entry.params["copies"],
                               "no copies beside num_workers (give one of them)")
            if "points" in entry.params:
                from .fields import _points

                try:
                    _points(entry.params["points"])
                except _Invalid as e:
                    raise _Invalid(f"schemes.{label}.params.points", e.value, e.expected) from None
            self.section_for(label)  # the section's own checks, on the entry's values

    def _workers_key(self, scheme: str) -> tuple[str, Any]:
        """The config key (and its value) that sets `scheme`'s N, for an error line."""
        entry = self.scheme_entries.get(scheme)
        if entry is not None and "num_workers" in entry.params:
            return f"schemes.{scheme}.params.num_workers", entry.params["num_workers"]
        if self.code_of(scheme) == "replication" and self.section_for(scheme).copies is not None:
            return "replication.copies", self.section_for(scheme).copies
        if self.code_of(scheme) in ("speculative", "uncoded"):  # N = (copies + 1)·K, or K
            if entry is not None and "copies" in entry.params:
                return f"schemes.{scheme}.params.copies", entry.params["copies"]
            if self.code_of(scheme) == "speculative" and self.section_for(scheme).copies > 1:
                return "speculation.copies", self.section_for(scheme).copies
            return "code.num_inputs", self.code.num_inputs
        return "code.num_workers", self.code.num_workers

    @property
    def concrete_schemes(self) -> list[str]:
        """The listed schemes but ``auto`` (which a run replaces by the estimator it chooses)."""
        return [s for s in self.schemes if s != "auto" or s in self.scheme_entries]

    def code_of(self, scheme: str) -> str:
        """The registered code that the scheme labelled `scheme` runs (the label itself for a plain name)."""
        entry = self.scheme_entries.get(scheme)
        if entry is not None:
            return entry.code
        if scheme in SCHEMES:
            return scheme
        raise ConfigError(f"scheme: got {scheme!r}; expected one of {', '.join(self.schemes)}")

    def section_for(self, scheme: str) -> Any:
        """The code's section (``gcc``, ``lcc``, ``replication``, ``uncoded``) with the entry's params over it,
        validated; None for codes without a section.

        Raises
        ------
        ConfigError
            A param of the entry with an invalid value (the line names ``schemes.<label>.params.<key>``).
        """
        code = self.code_of(scheme)
        name = SECTION_OF.get(code)
        if name is None:
            return None
        base = getattr(self, name)
        entry = self.scheme_entries.get(scheme)
        own = {k: v for k, v in (entry.params if entry else {}).items() if k in type(base).model_fields}
        if not own:
            return base
        try:
            return type(base).model_validate({**base.model_dump(), **own})
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            cause = (err.get("ctx") or {}).get("error")
            key = ".".join(str(p) for p in err.get("loc", ()))
            if isinstance(cause, _Invalid):
                expected, value = cause.expected, cause.value
            else:
                expected, value = _expected(err), err.get("input")
            raise _Invalid(f"schemes.{scheme}.params.{key}", value, expected) from None

    def points_for(self, scheme: str) -> Any:
        """The point placement of `scheme` (the entry's ``points``, else ``code.points``); None for the codes
        that place no points (replication, uncoded, speculative)."""
        if self.code_of(scheme) in ("replication", "uncoded", "speculative"):
            return None
        entry = self.scheme_entries.get(scheme)
        return entry.params["points"] if entry is not None and "points" in entry.params else self.code.points

    def stop_of(self, scheme: str) -> str:
        """When `scheme`'s batches stop: ``cutoff`` (the shared cutoff), ``recovery`` (replication waiting for a
        copy of every input, lcc for its recovery threshold) or ``all`` (uncoded waiting for all K)."""
        return stop_rule(self.code_of(scheme), self.section_for(scheme))

    def workers_for(self, scheme: str) -> int:
        """Number of workers N that `scheme` runs on: the entry's ``num_workers``, else ``code.num_workers`` for
        the coded schemes and for replication (``replication.copies * K`` when copies is set), K for uncoded and
        ``(speculation.copies + 1) · K`` for speculative (K shards and their backup copies, launched when
        late; 2K by default)."""
        own = self._own_workers(scheme)
        return self.code.num_workers if own is None else own

    def _own_workers(self, scheme: str) -> int | None:
        """The N that `scheme` sets itself (uncoded, speculative, an entry's ``num_workers``,
        ``replication.copies``), or None when it runs on ``code.num_workers``."""
        k = self.code.num_inputs
        code = self.code_of(scheme)
        if code == "uncoded":
            return k
        if code == "speculative":
            return (self.section_for(scheme).copies + 1) * k
        entry = self.scheme_entries.get(scheme)
        if entry is not None and "num_workers" in entry.params:
            return int(entry.params["num_workers"])
        if code == "replication" and self.section_for(scheme).copies is not None:
            return self.section_for(scheme).copies * k
        return None

    def _runs_on_code_workers(self, scheme: str) -> bool:
        """Whether `scheme` (a label of ``schemes``, ``auto`` included) takes its N from ``code.num_workers``."""
        if scheme == "auto" and scheme not in self.scheme_entries:
            return True  # its budget: the N/K it chooses within
        return self._own_workers(scheme) is None

    def wait_for_count(self, scheme: str) -> int:
        """The cutoff's ``wait_for`` as a count of results for `scheme`, clamped to [1, N]."""
        n = self.workers_for(scheme)
        wait_for = self.cutoff.wait_for
        if wait_for == "all":
            return n
        if wait_for == "N-S":
            return max(1, n - self.cutoff.stragglers)
        return max(1, min(int(wait_for), n))

    def code_params(self, scheme: str) -> dict[str, Any]:
        """Keyword arguments for ``make_code(code_of(scheme), num_inputs=K, num_workers=workers_for(scheme),
        **...)``."""
        code = self.code_of(scheme)
        section = self.section_for(scheme)
        params: dict[str, Any] = {"nan_policy": self.run.nan_policy}
        points = self.points_for(scheme)
        if points is not None:
            params["points"] = points
            if isinstance(points, dict):
                params["on_coincidence"] = "ignore"  # explicit points are meant as given
        if code == "gcc":
            params.update(section.model_dump(exclude_none=True))
        elif code == "lcc":
            params["degree"] = section.degree
        elif code in ("replication", "uncoded"):
            if section.fill != "none":
                params["fill"] = section.fill
            if code == "replication" and self.workers_for(scheme) % self.code.num_inputs:
                params["extra"] = section.extra
        return params

