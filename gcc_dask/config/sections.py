"""The pydantic models of a pipeline config, one per section (docs/configuration.rst).

``name, source, workload, code, schemes, gcc, lcc, replication, uncoded, speculation, stragglers, cutoff, cluster,
store, run``;
:class:`PipelineConfig` holds them all, checks the combinations and computes the run's fingerprint.

The sections' own models live in one module per concern, imported here (and importable from here, as before):
``config.data`` (source, workload), ``config.coding`` (code, composition, the schemes' parameters),
``config.stragglers`` (stragglers, speculation, cutoff, advise), ``config.execution`` (cluster, store, run).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr
from pydantic import field_validator, model_validator

from gcc_dask.errors import ConfigError

from .coding import CodeConfig, CompositionConfig, GccConfig, LccConfig, ReplicationConfig, UncodedConfig
from .data import _SOURCE_KEYS, _WORKLOAD_KEYS, _WORKLOAD_OBJECTS, SourceConfig, WorkloadConfig
from .execution import ClusterConfig, RunConfig, StoreConfig
from .fields import _FINGERPRINT_EXCLUDE, ADDED_KEYS, NOTHING, SCHEMES, _as_list, _Invalid, _Section, check_sizes
from .schemes import SchemeEntry, SchemeLookup, split_entries
from .stragglers import AdviseConfig, CutoffConfig, SpeculationConfig, StragglersConfig


def _schemes(value: Any) -> Any:
    """list of scheme names or labels"""
    value = _as_list(value)
    if isinstance(value, str):
        value = [value]
    expected = (f"a non-empty list of distinct scheme names from {', '.join(SCHEMES)}, or entries "
                "{label, code, params}")
    if not isinstance(value, list) or not value:
        raise _Invalid(None, value, expected)
    for item in value:
        if not isinstance(item, str):
            raise _Invalid(None, item, f"scheme names from {', '.join(SCHEMES)}, 'auto', or entries "
                                       "{label, code, params}")
    if len(set(value)) != len(value):
        raise _Invalid(None, value, expected)
    return value


_SECTIONS = ("composition", "gcc", "lcc", "replication", "uncoded", "speculation", "advise", "stragglers",
             "cutoff", "cluster", "store", "run")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class PipelineConfig(SchemeLookup, _Section):
    """A validated pipeline (docs/configuration.rst). Build with :func:`load_config`.

    Attributes
    ----------
    name
        The run's name: letters, digits, ``.``, ``_`` or ``-``; the default store is ``runs/<name>.zarr``.
    schemes
        The schemes compared, on the same batches and latency draws: names (bacc, bspline, gcc, lcc, letcc,
        replication, speculative, uncoded) or entries ``{label, code, params}`` that run one code with parameters of its
        own under a label (e.g. ``{label: uncoded-cutoff, code: uncoded, params: {stop: cutoff, fill:
        linear}}``; docs/pipeline.rst, section 'Schemes'). ``auto`` lets the run choose: it measures every
        estimator on a sample of the data first (``advise`` section; docs/frontier.rst, section 'Advice'),
        records the choice in the store, and runs it. In the validated config this is the list of labels.
    scheme_entries
        The entries of ``schemes`` by label (filled from the mappings of ``schemes``; it need not be written
        by hand).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False,
                              arbitrary_types_allowed=True)

    name: str = "gcc-dask-run"
    source: SourceConfig
    workload: WorkloadConfig
    code: CodeConfig
    composition: CompositionConfig = Field(default_factory=CompositionConfig)
    schemes: Annotated[list[str], BeforeValidator(_schemes)]
    scheme_entries: dict[str, SchemeEntry] = Field(default_factory=dict)
    gcc: GccConfig = Field(default_factory=GccConfig)
    lcc: LccConfig = Field(default_factory=LccConfig)
    replication: ReplicationConfig = Field(default_factory=ReplicationConfig)
    uncoded: UncodedConfig = Field(default_factory=UncodedConfig)
    speculation: SpeculationConfig = Field(default_factory=SpeculationConfig)
    advise: AdviseConfig = Field(default_factory=AdviseConfig)
    stragglers: StragglersConfig = Field(default_factory=StragglersConfig)
    cutoff: CutoffConfig = Field(default_factory=CutoffConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    run: RunConfig = Field(default_factory=RunConfig)

    _config_path: str | None = PrivateAttr(default=None)
    _base_dir: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = {k: v for k, v in data.items() if not (k in _SECTIONS and v is None)}
        if "schemes" in data:
            data["schemes"], entries = split_entries(data["schemes"], data.get("scheme_entries"))
            if entries:
                data["scheme_entries"] = entries
        return _default_store_path(data)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise _Invalid(None, value, "a name of letters, digits, '.', '_' or '-' that starts with a letter or a "
                                        "digit (used in file names)")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> PipelineConfig:
        self._check_entries()
        if self.code.num_workers is None:
            needs = [s for s in self.schemes if self._runs_on_code_workers(s)]
            if needs:
                why = ("schemes: [auto] chooses an estimator within N workers" if needs[0] == "auto"
                       else f"scheme {needs[0]!r} runs on N workers")
                raise _Invalid("code.num_workers", NOTHING, f"an integer N >= K = {self.code.num_inputs} (this key "
                               f"is required: {why}; only uncoded, speculative, replication.copies and entries "
                               "with their own num_workers set N themselves)")
        check_sizes(self)
        k = self.code.num_inputs
        if self.concrete_schemes != self.schemes:
            if self.cutoff.stragglers >= k:
                raise _Invalid("cutoff.stragglers", self.cutoff.stragglers,
                               f"S < K = {k} with schemes [auto] (every estimator it may choose keeps a result)")
            if not self.concrete_schemes:
                return self
        for scheme in self.concrete_schemes:
            n = self.workers_for(scheme)
            if n < k:
                key, value = self._workers_key(scheme)
                raise _Invalid(key, value, f"an integer >= code.num_inputs = {k} (scheme {scheme!r} needs N >= K)")
            if self.code_of(scheme) == "lcc" and n < (k - 1) * self.section_for(scheme).degree + 1:
                need = (k - 1) * self.section_for(scheme).degree + 1
                key, value = self._workers_key(scheme)
                raise _Invalid(key, n, f"an integer >= (K - 1) * lcc.degree + 1 = {need} "
                                       "(the recovery threshold of lcc)")
        for scheme in self.concrete_schemes:  # partial replication: the positions of its N mod K extra copies
            extra = self.section_for(scheme).extra if self.code_of(scheme) == "replication" else None
            count = self.workers_for(scheme) % k
            if isinstance(extra, list) and count:
                from gcc_dask.coding.replication import extra_positions

                entry = self.scheme_entries.get(scheme)
                key = f"schemes.{scheme}.params.extra" if entry and "extra" in entry.params else "replication.extra"
                try:
                    extra_positions(extra, k, count)
                except ConfigError as e:
                    raise _Invalid(key, extra, str(e).partition("; expected ")[2]) from None
        from gcc_dask.coding.points import placement

        for scheme in self.concrete_schemes:
            points = self.points_for(scheme)
            if points is None or (isinstance(points, str) and points == "chebyshev"):
                continue
            entry = self.scheme_entries.get(scheme)
            key = f"schemes.{scheme}.params.points" if entry and "points" in entry.params else "code.points"
            try:
                placement(points, k, self.workers_for(scheme), name=key)
            except ConfigError as e:
                raise _Invalid(key, points, f"points that fit K = {k}, N = {self.workers_for(scheme)} ({e})") from None
        # S and wait_for apply to the schemes that stop at the cutoff; uncoded (stop: all), speculative, replication
        # (stop: recovery) and lcc wait for their recovery and never read them
        at_cutoff = [s for s in self.concrete_schemes if self.stop_of(s) == "cutoff"]
        n_max = max((self.workers_for(s) for s in at_cutoff), default=None)
        if n_max is not None and self.cutoff.stragglers >= n_max:
            raise _Invalid("cutoff.stragglers", self.cutoff.stragglers,
                           f"an integer S with 0 <= S < N = {n_max} workers")
        # every scheme that stops at the cutoff keeps N - S of its own N results: S must leave it some
        for scheme in self.concrete_schemes:
            if self.stop_of(scheme) != "cutoff":
                continue
            n_s = self.workers_for(scheme)
            if self.cutoff.wait_for == "N-S" and self.cutoff.stragglers >= n_s:
                code = self.code_of(scheme)
                hint = {"replication": " (or replication.stop: recovery)", "uncoded": " (or uncoded.stop: all)"}
                raise _Invalid("cutoff.stragglers", self.cutoff.stragglers,
                               f"S < {n_s}, the N of scheme {scheme!r}, which stops after N - S "
                               f"results{hint.get(code, '')}")
        if n_max is not None and isinstance(self.cutoff.wait_for, int) and self.cutoff.wait_for > n_max:
            raise _Invalid("cutoff.wait_for", self.cutoff.wait_for,
                           f"'N-S', 'all' or an integer in [1, {n_max}] (N = {n_max} workers)")
        n_min, smallest = min((self.workers_for(s), s) for s in self.concrete_schemes)
        if self.stragglers.slow_workers > n_min:
            raise _Invalid("stragglers.slow_workers", self.stragglers.slow_workers,
                           f"an integer in [0, {n_min}], the N of scheme {smallest!r} (the smallest: every "
                           "scheme draws its latencies from the same model)")
        return self

    # ----------------------------------------------------------------------------- derived values
    @property
    def config_path(self) -> str | None:
        """Absolute path of the YAML file this config was read from (None for a mapping)."""
        return self._config_path

    @property
    def base_dir(self) -> str:
        """Directory relative paths were resolved against (the YAML file's directory, else the cwd)."""
        return self._base_dir or os.getcwd()

    @property
    def seed(self) -> int:
        """The run seed (``stragglers.seed``): latency draws are a function of (seed, batch, worker)."""
        return self.stragglers.seed

    def resolved(self) -> dict[str, Any]:
        """The fully resolved config as a plain JSON-able dict (stored in the run's root attrs).

        Only the keys valid for ``source.kind`` appear; an in-memory ``source.array`` is summarised by
        its shape, dtype and a content token. ``load_config(cfg.resolved())`` rebuilds the same config
        for every source kind except ``array``.
        """
        out = self.model_dump(mode="python", exclude={"source"})
        out["workload"] = {k: v for k, v in out["workload"].items()
                           if k in ("kind", *_WORKLOAD_KEYS[self.workload.kind], "params")
                           and not (k in _WORKLOAD_OBJECTS and v is None)}
        for key in _WORKLOAD_OBJECTS:
            if key in out["workload"]:  # an in-memory f: its label (its content is in the run's inputs digest)
                out["workload"][key] = _object_label(getattr(self.workload, key))
        src = {"kind": self.source.kind}
        for key in _SOURCE_KEYS[self.source.kind]:
            value = getattr(self.source, key)
            if self.source.kind == "array" and key in ("array", "labels") and value is not None:
                value = _array_summary(value)
            src[key] = value
        out["source"] = src
        return json.loads(json.dumps(out))

    def resolved_for(self, stored: Mapping[str, Any]) -> dict:
        """:meth:`resolved`, less the keys added since the resolved config `stored` was written
        (:data:`~gcc_dask.config.fields.ADDED_KEYS`) that `stored` lacks and this config leaves at their
        defaults: what this config would have been then. ``composition.policy: auto`` stands for the policy
        `stored` names when it is one auto takes (``similarity``, ``tree`` or ``kd``): the store holds its composition,
        which a resume reads, never makes again (a store made before ``auto`` was :func:`~gcc_dask.coded_map`'s
        default resumes under it)."""
        data = self.resolved()
        for section, key in ADDED_KEYS:
            default = type(getattr(self, section)).model_fields[key].default
            if key not in (stored.get(section) or {}) and data.get(section, {}).get(key) == default:
                data[section].pop(key)
        was = (stored.get("composition") or {}).get("policy")
        if data.get("composition", {}).get("policy") == "auto" and was in ("similarity", "tree", "kd"):
            data["composition"]["policy"] = was
        return data

    def fingerprint(self, stored: Mapping[str, Any] | None = None) -> str:
        """A stable SHA-256 hex digest of everything that determines the results.

        Excludes ``store.*``, ``cluster.*``, ``run.progress``, ``run.max_batches_in_flight`` and
        ``run.limit_batches`` (it picks which batches run, not their results), so the same job resumes
        into its store from any cluster, or continues a limited run; any other change refuses the resume.

        With `stored` (the resolved config a store was made with), the keys added to the config since
        (:data:`~gcc_dask.config.fields.ADDED_KEYS`) that `stored` lacks and this config leaves at their
        defaults are left out too (:meth:`resolved_for`): the digest such a store would have under this config.
        """
        data = self.resolved() if stored is None else self.resolved_for(stored)
        for item in _FINGERPRINT_EXCLUDE:
            if isinstance(item, tuple):
                data[item[0]].pop(item[1], None)
            else:
                data.pop(item, None)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(("gcc-dask-config-v1\n" + blob).encode()).hexdigest()


def _default_store_path(data: dict) -> dict:
    """Fill ``store.path`` with ``runs/<name>.zarr`` when it is missing or null."""
    store = data.get("store", {})
    name = data.get("name", PipelineConfig.model_fields["name"].default)
    if isinstance(store, Mapping) and store.get("path") is None and isinstance(name, str):
        data["store"] = {**store, "path": f"runs/{name}.zarr"}
    return data


def _object_label(obj: Any) -> str:
    """``module:qualname`` of a Python object passed as f (a function, a bound method, a torch module)."""
    qual = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return f"<python object {module}:{qual}>"


def _array_summary(arr: Any) -> dict[str, Any]:
    from dask.base import tokenize

    return {"shape": [int(s) for s in arr.shape], "dtype": str(arr.dtype), "token": tokenize(arr)}
