"""The pydantic models of a pipeline config, one per section (DESIGN.md "Configuration").

``name, source, workload, code, schemes, gcc, lcc, replication, stragglers, cutoff, cluster, store, run``;
:class:`PipelineConfig` holds them all, checks the combinations and computes the run's fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr
from pydantic import field_validator, model_validator

from gcc_dask.errors import ConfigError

from .fields import (
    _FINGERPRINT_EXCLUDE,
    CODED_SCHEMES,
    SCHEMES,
    Duration,
    InputCount,
    OptionalDuration,
    PathStr,
    PosInt,
    WorkerCount,
    _as_list,
    _Invalid,
    _Section,
    check_sizes,
)

_SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "mnist": ("split", "limit"),
    "fashion_mnist": ("split", "limit"),
    "zarr": ("path", "array", "labels", "limit"),
    "npy": ("path", "labels", "limit"),
    "synthetic": ("num_samples", "shape", "seed", "limit"),
    "array": ("array", "labels", "limit"),
}
_SOURCE_REQUIRED = {"zarr": ("path",), "npy": ("path",), "synthetic": ("num_samples", "shape"),
                    "array": ("array",)}


class SourceConfig(_Section):
    """Where the inputs come from (see :func:`gcc_dask.sources.make_source`); keys depend on ``kind``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False,
                              arbitrary_types_allowed=True)

    kind: Literal["mnist", "fashion_mnist", "zarr", "npy", "synthetic", "array"]
    split: Literal["all", "train", "test"] | None = None
    limit: PosInt | None = None
    path: PathStr | None = None
    array: Any = None
    labels: Any = None
    num_samples: PosInt | None = None
    shape: Annotated[list[PosInt], BeforeValidator(_as_list)] | None = None
    seed: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _kind_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
            return data
        kind = data["kind"]
        if kind not in _SOURCE_KEYS:
            return data  # the Literal check reports it
        allowed = ("kind", *_SOURCE_KEYS[kind])
        data = {k: v for k, v in data.items() if k in allowed or v is not None}  # null = unset
        for key in data:
            if key not in allowed:
                raise _Invalid(str(key), data[key],
                               f"no such key for source kind {kind!r} (valid keys: {', '.join(allowed)})")
        for key in _SOURCE_REQUIRED.get(kind, ()):
            if data.get(key) is None:
                raise _Invalid(key, data.get(key), f"a value: source kind {kind!r} requires {key!r}")
        data = dict(data)
        if kind in ("mnist", "fashion_mnist") and data.get("split") is None:
            data["split"] = "all"
        if kind == "synthetic" and data.get("seed") is None:
            data["seed"] = 0
        if kind in ("zarr", "npy") and isinstance(data.get("labels"), os.PathLike):
            data["labels"] = os.fspath(data["labels"])
        return data

    @model_validator(mode="after")
    def _kind_types(self) -> SourceConfig:
        if self.kind in ("zarr", "npy"):
            for key in ("array", "labels"):
                value = getattr(self, key)
                if value is not None and not isinstance(value, str):
                    what = "the name of an array in the Zarr store" if self.kind == "zarr" else "a path"
                    raise _Invalid(key, value, f"{what} (a string) or null")
        if self.kind == "array":
            if not (hasattr(self.array, "shape") and hasattr(self.array, "dtype")):
                raise _Invalid("array", self.array, "a numpy or dask array of shape (n, *sample_shape)")
            try:
                empty = len(self.array.shape) < 1 or int(self.array.shape[0]) < 1
            except (TypeError, ValueError):
                empty = True
            if empty:
                raise _Invalid("array", self.array, "an array with at least one sample")
            if self.labels is not None and not hasattr(self.labels, "shape"):
                raise _Invalid("labels", self.labels, "an integer array of shape (n,) or null")
        return self


_ANALYTIC = ("xsinx", "polynomial", "smooth")
_WORKLOAD_KEYS = {"onnx": ("path",), "torch": ("path", "name"), "analytic": ("name",),
                  "callable": ("name",)}
_CALLABLE_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class WorkloadConfig(_Section):
    """The function f evaluated by the workers (see :func:`gcc_dask.workloads.make_workload`)."""

    kind: Literal["onnx", "analytic", "callable", "torch"]
    path: PathStr | None = None
    name: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _kind_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str) \
                or data["kind"] not in _WORKLOAD_KEYS:
            return data
        allowed = ("kind", *_WORKLOAD_KEYS[data["kind"]], "params")
        data = {k: v for k, v in data.items() if k in allowed or v is not None}  # null = unset
        for key in data:
            if key not in allowed:
                raise _Invalid(str(key), data[key], f"no such key for workload kind {data['kind']!r} "
                                                    f"(valid keys: {', '.join(allowed)})")
        if data.get("params") is None and "params" in data:
            data = {**data, "params": {}}
        return data

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
        if self.kind == "onnx" and not self.path:
            raise _Invalid("path", self.path, "the path of an .onnx model file")
        if self.kind == "torch" and not (self.path or self.name):
            raise _Invalid("path", self.path, "a TorchScript file path (or name: 'module:factory')")
        if self.kind == "analytic" and self.name not in _ANALYTIC:
            raise _Invalid("name", self.name, f"one of {', '.join(map(repr, _ANALYTIC))}")
        if self.kind == "callable" and not (self.name and _CALLABLE_RE.match(self.name)):
            raise _Invalid("name", self.name, "an importable 'module:function' such as 'numpy:tanh'")
        if self.kind == "torch" and self.name and not _CALLABLE_RE.match(self.name):
            raise _Invalid("name", self.name, "an importable 'module:factory'")
        try:
            json.dumps(self.params, allow_nan=False)
        except (TypeError, ValueError):
            raise _Invalid("params", self.params, "JSON-compatible values (strings, numbers, "
                                                  "booleans, lists, mappings; no NaN)") from None
        return self


class CodeConfig(_Section):
    """The batch geometry: K inputs per coding group, N workers for the coded schemes, B groups per batch.

    A batch is one *block* of ``block_size`` groups: K·B samples, N shard tasks that each evaluate f on B
    samples at once, one cutoff and one decode (``docs/batch_model.rst``). ``block_size: 1`` is one sample
    per shard.
    """

    num_inputs: InputCount
    num_workers: WorkerCount
    block_size: Annotated[int, Field(ge=1, le=65536)] = 64
    points: Literal["chebyshev", "equispaced"] = "chebyshev"


class CompositionConfig(_Section):
    """Which K samples are coded together, in which order (:mod:`gcc_dask.composition`).

    ``similarity`` (the default) chains similar inputs (greedy nearest neighbours on their leading principal
    components, within windows of ``window`` samples) and cuts the chain into groups of K; ``pc1`` sorts by the
    first principal component; ``random`` is a seeded permutation; ``as_stored`` keeps the source's order.
    No policy looks at labels or at f. The composition is stored with the run and reused on resume.
    """

    policy: Literal["as_stored", "random", "pc1", "similarity"] = "similarity"
    window: PosInt = 8192
    dims: PosInt = 32
    fit_samples: PosInt = 4096
    seed: Annotated[int, Field(ge=0)] = 0


def _lambda_dec(value: Any) -> Any:
    if isinstance(value, str) and value == "gcv":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            return float(value)
    raise _Invalid(None, value, "a number >= 0 or 'gcv'")


class GccConfig(_Section):
    """Parameters of the GCC scheme (METHODS.md section 3); ``length_scale: null`` = the kernel's default."""

    kernel: Literal["sobolev2", "matern32", "matern52", "gaussian"] = "sobolev2"
    lambda_enc: Annotated[float, Field(ge=0)] = 0.0
    lambda_dec: Annotated[float | str, BeforeValidator(_lambda_dec)] = 0.0
    length_scale: Annotated[float, Field(gt=0)] | None = None


class LccConfig(_Section):
    """Lagrange coded computing: the polynomial degree of f it assumes."""

    degree: PosInt = 1


class ReplicationConfig(_Section):
    """Replication: every input is evaluated by ``copies`` workers (N = copies * K)."""

    copies: Annotated[int, Field(ge=2)] = 2


class StragglersConfig(_Section):
    """Injected worker latency (DESIGN.md "Straggler injection"); ``model: none`` uses the wall clock.

    ``unit: shard`` draws ``shift`` and ``scale`` per shard, whatever its block size; ``unit: sample`` reads
    them per sample, so a shard of B samples draws ``B·(shift + Exp(scale))`` (the classic model of coded
    computing, where a task's run time scales with its load). Hangs (``hang_delay``) are per shard either way.
    """

    model: Literal["none", "shifted_exponential", "pareto"] = "none"
    shift: Duration = 0.0
    scale: Duration = 0.01
    alpha: Annotated[float, Field(gt=0)] = 2.0
    hang_prob: Annotated[float, Field(ge=0, lt=1)] = 0.0
    hang_delay: Duration = 5.0
    slow_workers: Annotated[int, Field(ge=0)] = 0
    slow_factor: Annotated[float, Field(ge=1)] = 1.0
    unit: Literal["shard", "sample"] = "shard"
    seed: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _check(self) -> StragglersConfig:
        if self.model != "none" and self.scale <= 0:
            raise _Invalid("scale", self.scale, f"a duration > 0 for model {self.model!r}")
        return self


def _wait_for(value: Any) -> Any:
    if isinstance(value, str):
        norm = value.replace(" ", "").upper()
        if norm == "N-S":
            return "N-S"
        if norm == "ALL":
            return "all"
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise _Invalid(None, value, "'N-S', 'all' or an integer >= 1")


class CutoffConfig(_Section):
    """When a batch stops waiting for workers (DESIGN.md "The cutoff")."""

    wait_for: Annotated[int | str, BeforeValidator(_wait_for)] = "N-S"
    stragglers: Annotated[int, Field(ge=0)] = 0
    deadline: OptionalDuration = None
    quantile: Annotated[float, Field(gt=0, le=1)] | None = None
    multiplier: Annotated[float, Field(ge=1)] = 1.5
    min_runtime: Duration = 0.1
    on_shortfall: Literal["wait", "decode", "fail"] = "wait"


def _gpu(value: Any) -> Any:
    if isinstance(value, bool) or (isinstance(value, str) and value == "auto"):
        return value
    raise _Invalid(None, value, "'auto', true or false")


class ClusterConfig(_Section):
    """Which Dask cluster to use; all null = an embedded LocalCluster (DESIGN.md "Cluster")."""

    address: str | None = None
    scheduler_file: PathStr | None = None
    n_workers: PosInt | None = None
    threads_per_worker: PosInt | None = None
    gpu: Annotated[bool | str, BeforeValidator(_gpu)] = "auto"
    processes: bool | None = None
    connect_timeout: Duration = 10.0

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        if self.address and self.scheduler_file:
            raise _Invalid("scheduler_file", self.scheduler_file,
                           "null when cluster.address is set (give one of address, scheduler_file)")
        if self.connect_timeout <= 0:
            raise _Invalid("connect_timeout", self.connect_timeout, "a duration > 0")
        return self


class StoreConfig(_Section):
    """The Zarr results store; ``path: null`` becomes ``runs/<name>.zarr``. An existing run is resumed."""

    path: PathStr | None = None
    overwrite: bool = False


class RunConfig(_Section):
    """Execution knobs of the pipeline."""

    max_batches_in_flight: PosInt = 4
    limit_batches: PosInt | None = None
    nan_policy: Literal["raise", "propagate"] = "raise"
    reference: bool = True
    progress: bool = True


def _schemes(value: Any) -> Any:
    value = _as_list(value)
    if isinstance(value, str):
        value = [value]
    expected = f"a non-empty list of distinct scheme names from {', '.join(SCHEMES)}"
    if not isinstance(value, list) or not value:
        raise _Invalid(None, value, expected)
    for item in value:
        if item not in SCHEMES or not isinstance(item, str):
            raise _Invalid(None, item, f"scheme names from {', '.join(SCHEMES)}")
    if len(set(value)) != len(value):
        raise _Invalid(None, value, expected)
    return value


_SECTIONS = ("composition", "gcc", "lcc", "replication", "stragglers", "cutoff", "cluster", "store", "run")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class PipelineConfig(_Section):
    """A validated pipeline (DESIGN.md "Configuration"). Build with :func:`load_config`."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False,
                              arbitrary_types_allowed=True)

    name: str = "gcc-dask-run"
    source: SourceConfig
    workload: WorkloadConfig
    code: CodeConfig
    composition: CompositionConfig = Field(default_factory=CompositionConfig)
    schemes: Annotated[list[str], BeforeValidator(_schemes)]
    gcc: GccConfig = Field(default_factory=GccConfig)
    lcc: LccConfig = Field(default_factory=LccConfig)
    replication: ReplicationConfig = Field(default_factory=ReplicationConfig)
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
        return _default_store_path({k: v for k, v in data.items() if not (k in _SECTIONS and v is None)})

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise _Invalid(None, value, "a name of letters, digits, '.', '_' or '-' (used in file names)")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> PipelineConfig:
        check_sizes(self)
        k, n = self.code.num_inputs, self.code.num_workers
        coded = [s for s in self.schemes if s in CODED_SCHEMES]
        if coded and n < k:
            raise _Invalid("code.num_workers", n, f"an integer >= code.num_inputs = {k} "
                                                  f"(schemes {', '.join(coded)} need N >= K)")
        if "lcc" in self.schemes and n < (k - 1) * self.lcc.degree + 1:
            need = (k - 1) * self.lcc.degree + 1
            raise _Invalid("code.num_workers", n, f"an integer >= (K - 1) * lcc.degree + 1 = {need} "
                                                  "(the recovery threshold of lcc)")
        n_max = max(self.workers_for(s) for s in self.schemes)
        if self.cutoff.stragglers >= n_max:
            raise _Invalid("cutoff.stragglers", self.cutoff.stragglers,
                           f"an integer S with 0 <= S < N = {n_max} workers")
        if isinstance(self.cutoff.wait_for, int) and self.cutoff.wait_for > n_max:
            raise _Invalid("cutoff.wait_for", self.cutoff.wait_for,
                           f"'N-S', 'all' or an integer in [1, {n_max}] (N = {n_max} workers)")
        if self.stragglers.slow_workers > n_max:
            raise _Invalid("stragglers.slow_workers", self.stragglers.slow_workers,
                           f"an integer in [0, {n_max}] (N = {n_max} workers)")
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

    def workers_for(self, scheme: str) -> int:
        """Number of workers N that `scheme` runs on: ``code.num_workers`` for the coded schemes,
        ``replication.copies * K`` for replication and K for uncoded."""
        k = self.code.num_inputs
        if scheme == "replication":
            return self.replication.copies * k
        if scheme == "uncoded":
            return k
        if scheme in SCHEMES:
            return self.code.num_workers
        raise ConfigError(f"scheme: got {scheme!r}; expected one of {', '.join(SCHEMES)}")

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
        """Keyword arguments for ``make_code(scheme, num_inputs=K, num_workers=workers_for(scheme), **...)``."""
        self.workers_for(scheme)  # validates the name
        params: dict[str, Any] = {"nan_policy": self.run.nan_policy}
        if scheme not in ("replication", "uncoded"):
            params["points"] = self.code.points
        if scheme == "gcc":
            params.update(self.gcc.model_dump(exclude_none=True))
        elif scheme == "lcc":
            params["degree"] = self.lcc.degree
        return params

    def resolved(self) -> dict[str, Any]:
        """The fully resolved config as a plain JSON-able dict (stored in the run's root attrs).

        Only the keys valid for ``source.kind`` appear; an in-memory ``source.array`` is summarised by
        its shape, dtype and a content token. ``load_config(cfg.resolved())`` rebuilds the same config
        for every source kind except ``array``.
        """
        out = self.model_dump(mode="python", exclude={"source"})
        out["workload"] = {k: v for k, v in out["workload"].items()
                           if k in ("kind", *_WORKLOAD_KEYS[self.workload.kind], "params")}
        src = {"kind": self.source.kind}
        for key in _SOURCE_KEYS[self.source.kind]:
            value = getattr(self.source, key)
            if self.source.kind == "array" and key in ("array", "labels") and value is not None:
                value = _array_summary(value)
            src[key] = value
        out["source"] = src
        return json.loads(json.dumps(out))

    def fingerprint(self) -> str:
        """A stable SHA-256 hex digest of everything that determines the results.

        Excludes ``store.*``, ``cluster.*``, ``run.progress``, ``run.max_batches_in_flight`` and
        ``run.limit_batches`` (it picks which batches run, not their results), so the same job resumes
        into its store from any cluster, or continues a limited run; any other change refuses the resume.
        """
        data = self.resolved()
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


def _array_summary(arr: Any) -> dict[str, Any]:
    from dask.base import tokenize

    return {"shape": [int(s) for s in arr.shape], "dtype": str(arr.dtype), "token": tokenize(arr)}


# ------------------------------------------------------------------------------------- load_config
