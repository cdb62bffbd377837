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
``uncoded``, whose N is K, nor ``speculative``, whose N is 2K) and ``points`` (for the point-based codes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from .fields import SCHEMES, _Invalid, _Section

__all__ = ["ENTRY_KEYS", "LABEL_RE", "SchemeEntry", "split_entries"]

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
        fill; ``speculative``: the ``speculation`` section's quantile, multiplier, min_runtime),
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
            raise _Invalid(f"schemes.{i}.label", label, "a label of letters, digits, '_' or '-' (it names the "
                                                      "scheme's group in the store)")
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
