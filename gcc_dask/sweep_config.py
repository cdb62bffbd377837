"""Validated sweep configuration: the grid of ``gcc-dask sweep`` (YAML in, frozen pydantic models out).

A sweep measures decoding accuracy offline: no cluster timing, the received sets are drawn directly
from the straggler models of :mod:`gcc_dask.stragglers` (docs/concepts.rst, section 'Stragglers'). Example::

    name: rate-worst-case
    function: {kind: xsinx, low: -3, high: 3}            # x ~ U(-3, 3), f(x) = x sin x
    schemes: [gcc, bacc]                                 # or {label: gcc-m52, code: gcc, params: {...}}
    params: {gcc: {kernel: sobolev2}}                    # per scheme (string entries of `schemes`)
    code: {num_inputs: [10], num_workers: [39, 79, 159, 319, 639], points: chebyshev}
    stragglers: {model: fixed_count, S: [1, 2, 4], pattern: adversarial}   # or {model: bernoulli, p: [0.1]}
    trials: 10
    seed: 0
    store: {path: runs/rate-worst-case.zarr, overwrite: false}
    cluster: {n_workers: 2, threads_per_worker: 1}
    run: {trials_per_task: 10, progress: true}

Function kinds: ``xsinx`` (elementwise x·sin x), ``polynomial`` (elementwise Σ c_i xⁱ, so LCC is exact),
``smooth`` (a fixed random-feature network R^dim → R^out_dim) with inputs ~ U(low, high)^dim, and
``dnn`` (a ``source`` of real samples through a ``workload`` such as the bundled LeNet-5 on MNIST).
Errors are one :class:`~gcc_dask.errors.ConfigError` line ``"<key.path>: got <value>; expected ..."``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, Field, PrivateAttr, ValidationError
from pydantic import model_validator

from gcc_dask.config import SCHEMES, ClusterConfig, SourceConfig, WorkloadConfig
from gcc_dask.config.fields import Points
from gcc_dask.config.fields import _Section as _PipelineSection
from gcc_dask.config.fields import InputCount, WorkerCount
from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_CODE_ENTRIES, MAX_INPUTS, MAX_SWEEP_ENTRIES, MAX_TRIALS, MAX_WORKERS

__all__ = ["FunctionConfig", "SchemeSpec", "SweepConfig", "load_sweep_config"]

FUNCTIONS = ("xsinx", "polynomial", "smooth", "dnn")
_DEFAULT_RANGE = {"xsinx": (-3.0, 3.0), "polynomial": (-1.0, 1.0), "smooth": (-1.0, 1.0)}
_DEFAULT_DIM = {"xsinx": 1, "polynomial": 1, "smooth": 8}
_FINGERPRINT_EXCLUDE = ("store", "cluster", "run")
_PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
PosInt = Annotated[int, Field(ge=1)]
#: features of an analytic function's input, output or hidden layer: at most MAX_INPUTS (65,536), and the
#: smooth network's weight matrices at most MAX_CODE_ENTRIES entries each (checked in FunctionConfig)
Features = Annotated[int, Field(ge=1, le=MAX_INPUTS)]


class _Bad(ValueError):
    """A validation failure that knows its key (same shape as the pipeline config's)."""

    def __init__(self, key: str | None, value: Any, expected: str):
        super().__init__(expected)
        self.key, self.value, self.expected = key, value, expected


def _as_list(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]  # a single grid value
    return value


class _Section(_PipelineSection):
    """A section of a sweep or frontier file: strict, frozen, no unknown keys, and ``key: null`` means "not set"
    (the default applies; a required key or section is missing), as in a pipeline (docs/configuration.rst)."""


class FunctionConfig(_Section):
    """The function f and its input distribution (the kinds are described in :mod:`gcc_dask.sweep_config`).

    Attributes
    ----------
    kind
        ``xsinx`` (x·sin x elementwise), ``polynomial`` (Σ c_i xⁱ elementwise, so LCC is exact),
        ``smooth`` (a fixed random-feature network R^dim → R^out_dim) or ``dnn`` (real samples from
        ``source`` through ``workload``).
    low, high
        The inputs are drawn uniformly from [low, high) (not for ``dnn``). Defaults: [-3, 3) for
        ``xsinx``, [-1, 1) otherwise.
    dim
        Features per input (not for ``dnn``); default 1, or 8 for ``smooth``.
    coeffs
        ``polynomial``: the coefficients c_0, c_1, ..., lowest order first (default ``[0, 0, 1]``); the
        degree sets LCC's ``degree``.
    out_dim
        ``smooth``: the outputs of the network.
    hidden
        ``smooth``: the hidden units of the network.
    seed
        ``smooth``: the seed of the network's weights.
    source
        ``dnn``: the samples, as the pipeline's ``source`` section (default: MNIST, ``split: test``).
    workload
        ``dnn``: f, as the pipeline's ``workload`` section (default: the bundled LeNet-5 ONNX model).
    """

    kind: Literal["xsinx", "polynomial", "smooth", "dnn"]
    low: float | None = None
    high: float | None = None
    dim: Features | None = None
    coeffs: Annotated[list[float], BeforeValidator(_as_list)] | None = None
    out_dim: Features = 10
    hidden: Features = 64
    seed: Annotated[int, Field(ge=0)] = 0
    source: SourceConfig | None = None
    workload: WorkloadConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("kind") not in FUNCTIONS:
            return data
        data = {k: v for k, v in data.items() if v is not None}
        kind = data["kind"]
        if kind == "dnn":
            for key in ("low", "high", "dim", "coeffs"):
                if key in data:
                    raise _Bad(key, data[key], "no such key for function kind 'dnn' (its inputs come "
                                               "from `source`)")
            data.setdefault("source", {"kind": "mnist", "split": "test"})
            data.setdefault("workload", {"kind": "onnx", "path": "models/lenet5_mnist.onnx"})
            return data
        for key in ("source", "workload"):
            if key in data:
                raise _Bad(key, data[key], f"no such key for function kind {kind!r} (only 'dnn' has one)")
        if "coeffs" in data and kind != "polynomial":
            raise _Bad("coeffs", data["coeffs"], "no such key unless kind is 'polynomial'")
        lo, hi = _DEFAULT_RANGE[kind]
        data.setdefault("low", lo)
        data.setdefault("high", hi)
        data.setdefault("dim", _DEFAULT_DIM[kind])
        if kind == "polynomial":
            data.setdefault("coeffs", [0.0, 0.0, 1.0])
        for key in ("low", "high"):
            if isinstance(data[key], int) and not isinstance(data[key], bool):
                data[key] = float(data[key])
        if isinstance(data.get("coeffs"), (list, tuple)):
            data["coeffs"] = [float(c) if isinstance(c, int) and not isinstance(c, bool) else c
                              for c in data["coeffs"]]
        return data

    @model_validator(mode="after")
    def _check(self) -> FunctionConfig:
        if self.kind != "dnn" and not self.low < self.high:
            raise _Bad("high", self.high, f"a number > low = {self.low}")
        if self.kind == "smooth":
            for key, other in (("hidden", self.dim), ("out_dim", self.hidden)):
                if getattr(self, key) * other > MAX_CODE_ENTRIES:
                    raise _Bad(key, getattr(self, key), f"a size whose weight matrix with the layer before it "
                               f"({other:,}) holds at most {MAX_CODE_ENTRIES:,} entries")
        if self.kind == "polynomial" and not self.coeffs:
            raise _Bad("coeffs", self.coeffs, "at least one coefficient (lowest order first)")
        return self

    @property
    def degree(self) -> int | None:
        """Polynomial degree of f (``polynomial`` only), the LCC degree it needs."""
        return len(self.coeffs) - 1 if self.kind == "polynomial" else None


class SchemeSpec(_Section):
    """One compared scheme: a label (the ``scheme`` coordinate), a registered code and its params.

    Attributes
    ----------
    label
        The name in the store and the reports (``scheme`` coordinate); distinct per entry.
    code
        The registered code: bacc, bspline, gcc, lcc, letcc, replication or uncoded.
    params
        The code's parameters (``kernel``, ``points``, ``fill``, ...), over the grid's.
    composition
        ``dnn`` only: which K samples a trial codes together: ``as_stored``, ``random``, ``pc1`` or
        ``similarity`` (a group of that composition of the source, docs/pipeline.rst, section
        'Composition'); unset: K random samples in the source's order.
    """

    label: str
    code: Literal["bacc", "bspline", "gcc", "lcc", "letcc", "replication", "uncoded"]
    params: dict[str, Any] = Field(default_factory=dict)
    composition: Literal["as_stored", "random", "pc1", "similarity"] | None = None


#: the codes a sweep runs: every scheme but ``speculative``, whose backup copies depend on when a runtime's
#: shards finish, not on a drawn received set
SWEEP_SCHEMES = tuple(s for s in SCHEMES if s != "speculative")


def _schemes(value: Any) -> Any:
    """list of scheme names or ``{label, code, params}`` mappings"""
    value = _as_list(value)
    expected = (f"a non-empty list of scheme names ({', '.join(SWEEP_SCHEMES)}) or mappings "
                "{label, code, params}")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _Bad(None, value, expected)
    out = []
    for item in value:
        if isinstance(item, str):
            if item not in SWEEP_SCHEMES:
                hint = (" (speculative runs in a pipeline only: its backups depend on when the shards finish)"
                        if item == "speculative" else "")
                raise _Bad(None, item, f"a scheme name from {', '.join(SWEEP_SCHEMES)}{hint}")
            out.append({"label": item, "code": item})
        elif isinstance(item, Mapping):
            out.append(dict(item))
        else:
            raise _Bad(None, item, expected)
    labels = [item.get("label") for item in out]
    if len(set(map(str, labels))) != len(labels):
        raise _Bad(None, labels, "distinct scheme labels")
    return out


class GridConfig(_Section):
    """Batch geometry grid: every K × every N; ``points`` and ``on_coincidence`` go to every code.

    Attributes
    ----------
    num_inputs
        The values of K (a list, or one number).
    num_workers
        The values of N. A cell where a scheme cannot be built (e.g. N not a multiple of K for
        ``replication``) is skipped and recorded as such.
    points
        ``chebyshev`` or ``equispaced`` point placement.
    on_coincidence
        What a code does when a worker point equals a data point: ``warn``, ``nudge`` (move it) or
        ``ignore``; the count is recorded in ``coincident_points`` either way.
    """

    num_inputs: Annotated[list[InputCount], BeforeValidator(_as_list), Field(min_length=1)]
    num_workers: Annotated[list[WorkerCount], BeforeValidator(_as_list), Field(min_length=1)]
    points: Points = "chebyshev"
    on_coincidence: Literal["warn", "nudge", "ignore"] = "warn"


class StragglerGridConfig(_Section):
    """Received-set model: ``fixed_count`` over S values (random|contiguous|adversarial) or ``bernoulli`` over p.

    Attributes
    ----------
    model
        ``fixed_count`` (exactly S of the N workers straggle) or ``bernoulli`` (each worker straggles
        independently with probability p).
    S
        ``fixed_count``: the values of S.
    p
        ``bernoulli``: the values of p, each in [0, 1).
    pattern
        ``fixed_count``: which S straggle: ``random``, ``contiguous`` (a random window of S adjacent
        worker points) or ``adversarial`` (the set that maximises each scheme's MSE: exhaustive search
        when small enough, else a heuristic).
    exhaustive_limit
        ``adversarial``: search every straggler set when there are at most this many, else use the
        heuristic (whose result is a lower bound on the worst case).
    restarts
        ``adversarial``: random restarts of the heuristic search.
    """

    model: Literal["fixed_count", "bernoulli"]
    S: Annotated[list[Annotated[int, Field(ge=0, le=MAX_WORKERS)]], BeforeValidator(_as_list)] | None = None
    p: Annotated[list[Annotated[float, Field(ge=0, lt=1)]], BeforeValidator(_as_list)] | None = None
    pattern: Literal["random", "contiguous", "adversarial"] = "random"
    exhaustive_limit: PosInt = 2000
    restarts: Annotated[int, Field(ge=0)] = 32

    @model_validator(mode="before")
    @classmethod
    def _floats(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("p"), (list, tuple)):
            data = {**data, "p": [float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                                  for v in data["p"]]}
        elif isinstance(data, Mapping) and isinstance(data.get("p"), int) and not isinstance(data["p"], bool):
            data = {**data, "p": float(data["p"])}
        return data

    @model_validator(mode="after")
    def _check(self) -> StragglerGridConfig:
        need, other = ("S", "p") if self.model == "fixed_count" else ("p", "S")
        if not getattr(self, need):
            raise _Bad(need, getattr(self, need), f"a non-empty list of values for model {self.model!r}")
        if getattr(self, other) is not None:
            raise _Bad(other, getattr(self, other), f"no such key for model {self.model!r} (use {need!r})")
        if self.model == "bernoulli" and self.pattern != "random":
            raise _Bad("pattern", self.pattern, "'random' (patterns belong to model 'fixed_count')")
        values = getattr(self, need)
        if len(set(values)) != len(values):
            raise _Bad(need, values, "distinct values")
        return self

    @property
    def dim(self) -> str:
        """Name of the straggler dimension of the sweep store: ``"S"`` or ``"p"``."""
        return "S" if self.model == "fixed_count" else "p"

    @property
    def values(self) -> list:
        return list(self.S if self.model == "fixed_count" else self.p)


class StoreSection(_Section):
    """The sweep's Zarr store; ``path: null`` becomes ``runs/<name>.zarr``. A same-config store is resumed.

    Attributes
    ----------
    path
        The store's directory (``--out`` overrides it).
    overwrite
        Start over instead of resuming (``--overwrite``).
    """

    path: str | None = None
    overwrite: bool = False


class RunSection(_Section):
    """Execution knobs (not part of the fingerprint).

    Attributes
    ----------
    trials_per_task
        Trials of one grid cell evaluated by one Dask task (null: all of them).
    progress
        Show a progress bar.
    """

    trials_per_task: Annotated[int, Field(ge=1, le=MAX_TRIALS)] | None = None
    progress: bool = True


class SweepConfig(_Section):
    """A validated sweep. Build with :func:`load_sweep_config`.

    Attributes
    ----------
    name
        The sweep's name (default: the YAML file's name); the default store is ``runs/<name>.zarr``.
    schemes
        The schemes compared on the same data and received sets: scheme names, or mappings
        ``{label, code, params}`` to compare one code with several parameter sets (``label`` becomes
        the ``scheme`` coordinate of the store).
    params
        Code parameters per scheme label, e.g. ``{gcc: {kernel: matern52}}``.
    trials
        Independent draws (data and stragglers) per grid cell.
    seed
        The seed of every draw.
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] = "sweep"
    function: FunctionConfig
    schemes: Annotated[list[SchemeSpec], BeforeValidator(_schemes)]
    params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    code: GridConfig
    stragglers: StragglerGridConfig
    trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)] = 10
    seed: Annotated[int, Field(ge=0)] = 0
    store: StoreSection = Field(default_factory=StoreSection)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    run: RunSection = Field(default_factory=RunSection)

    _config_path: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        labels = {s.label for s in self.schemes}
        for key in self.params:
            if key not in labels:
                raise _Bad(f"params.{key}", self.params[key], f"params for a listed scheme ({', '.join(sorted(labels))})")
        for key in ("num_inputs", "num_workers"):
            values = getattr(self.code, key)
            if len(set(values)) != len(values):
                raise _Bad(f"code.{key}", values, "distinct values")
        try:
            json.dumps(self.params, allow_nan=False)
        except (TypeError, ValueError):
            raise _Bad("params", self.params, "JSON-compatible values") from None
        for i, spec in enumerate(self.schemes):
            if spec.composition is not None and self.function.kind != "dnn":
                raise _Bad(f"schemes.{i}.composition", spec.composition,
                           "no composition unless function.kind is 'dnn' (the other functions draw their inputs)")
        _check_sizes(self)
        return self

    def code_params(self, spec: SchemeSpec) -> dict[str, Any]:
        """Keyword arguments for ``make_code(spec.code, num_inputs=K, num_workers=N, **...)``."""
        params: dict[str, Any] = {}
        if spec.code not in ("replication", "uncoded"):
            params["on_coincidence"] = self.code.on_coincidence
        params["points"] = self.code.points
        if spec.code == "lcc" and self.function.degree is not None:
            params["degree"] = self.function.degree
        params.update(self.params.get(spec.label, {}))
        params.update(spec.params)
        return params

    @property
    def config_path(self) -> str | None:
        return self._config_path

    def resolved(self) -> dict[str, Any]:
        """The resolved config as a JSON-able dict (stored in the sweep store's root attrs)."""
        return json.loads(json.dumps(self.model_dump(mode="python", exclude_none=False)))

    def fingerprint(self) -> str:
        """SHA-256 of everything that determines the results (not ``store``, ``cluster``, ``run``)."""
        data = {k: v for k, v in self.resolved().items() if k not in _FINGERPRINT_EXCLUDE}
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(("gcc-dask-sweep-v1\n" + blob).encode()).hexdigest()


def _check_sizes(cfg: SweepConfig) -> None:
    """Refuse a grid no machine holds (``gcc_dask.limits``): an (N, K) encoder of more than 2**26 entries,
    or result arrays (schemes x K x N x S|p x trials, built in memory with the store) of more than 2**24."""
    k_max, n_max = max(cfg.code.num_inputs), max(cfg.code.num_workers)
    if k_max * n_max > MAX_CODE_ENTRIES:
        raise _Bad("code.num_workers", cfg.code.num_workers,
                   f"values with num_inputs * num_workers <= {MAX_CODE_ENTRIES:,}: here K = {k_max:,} and "
                   f"N = {n_max:,}, so the (N, K) encoder matrix alone would take "
                   f"{k_max * n_max * 8 / 2**30:.1f} GiB")
    shape = (len(cfg.schemes), len(cfg.code.num_inputs), len(cfg.code.num_workers),
             len(cfg.stragglers.values), cfg.trials)
    entries = math.prod(shape)
    if entries > MAX_SWEEP_ENTRIES:
        raise _Bad("trials", cfg.trials,
                   f"a grid of at most {MAX_SWEEP_ENTRIES:,} results per metric (schemes x num_inputs x "
                   f"num_workers x {cfg.stragglers.dim} x trials = {' x '.join(map(str, shape))} = "
                   f"{entries:,}); use fewer trials or split the sweep")


# ------------------------------------------------------------------------------------------- loading
def _error_line(exc: ValidationError, root: type[BaseModel] | None = None) -> str:
    """One line for the first error of a validation of `root` (default :class:`SweepConfig`); an unknown key
    first, since a typo in a required key also makes the real key missing, and the typo is what was written."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
    loc = [str(p) for p in err.get("loc", ())]
    cause = (err.get("ctx") or {}).get("error")
    if hasattr(cause, "expected") and hasattr(cause, "value"):  # _Bad, or the pipeline config's _Invalid
        if getattr(cause, "key", None):
            loc.extend(str(cause.key).split("."))
        return f"{'.'.join(loc) or 'sweep'}: got {_short(cause.value)}; expected {cause.expected}"
    path = ".".join(loc) or "sweep"
    kind = err.get("type", "")
    if kind == "missing":
        from gcc_dask.config.loading import _missing_line

        return _missing_line(path, loc, SweepConfig if root is None else root)
    if kind == "extra_forbidden":
        import difflib

        valid = _valid_keys(loc[:-1], root)
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{path}: got unknown key {loc[-1]!r}{hint}; expected one of: {', '.join(valid)}"
    msg = str(err.get("msg", "valid input"))
    for prefix in ("Input should be ", "Value error, "):
        msg = msg[len(prefix):] if msg.startswith(prefix) else msg
    if msg.startswith(("greater than", "less than")):
        msg = "a number " + msg
    return f"{path}: got {_short(err.get('input'))}; expected {msg}"


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _valid_keys(loc: Sequence[str], root: type[BaseModel] | None = None) -> list[str]:
    model: Any = SweepConfig if root is None else root
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return list(getattr(model, "model_fields", {})) if part.isdigit() else []
        model = ann
    return list(model.model_fields)


def _set(data: dict, item: str) -> None:
    if not isinstance(item, str) or "=" not in item or not item.partition("=")[0].strip():
        raise ConfigError(f"--set: got {item!r}; expected KEY=VALUE, such as trials=20 or stragglers.S=[1,2]")
    key, _, raw = item.partition("=")
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    try:
        node[parts[-1]] = yaml.safe_load(raw)
    except yaml.YAMLError:
        node[parts[-1]] = raw


def load_sweep_config(path_or_mapping: Any, overrides: Sequence[str] = ()) -> SweepConfig:
    """Read, override and validate a sweep configuration.

    Parameters
    ----------
    path_or_mapping : str, os.PathLike, Mapping or SweepConfig
        A YAML file or an equivalent mapping (see the module docstring).
    overrides : sequence of str
        ``"key.sub=value"`` items (the CLI's ``--set``); values are parsed as YAML.

    Returns
    -------
    SweepConfig
        Frozen; the ``dnn`` workload path is made absolute (searched in the cwd, then next to the YAML
        file and its parent), ``store.path`` defaults to ``runs/<name>.zarr`` (absolute, against the cwd).

    Raises
    ------
    ConfigError
        One line naming the key, the value and what would be valid.
    """
    if isinstance(path_or_mapping, SweepConfig) and not overrides:
        return path_or_mapping
    data, config_path = read_job_file(path_or_mapping, SweepConfig, "sweep", overrides)
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_error_line(exc).replace("\n", "\\n")) from None
    cfg._config_path = config_path
    return cfg


def read_job_file(path_or_mapping: Any, model: type[BaseModel], what: str,
                  overrides: Sequence[str] = ()) -> tuple[dict, str | None]:
    """The raw mapping of a job file (a sweep's or a frontier's), with its overrides and absolute paths.

    `path_or_mapping` is a YAML path, a mapping, or a validated `model` (its resolved form); `what` names the
    kind of file in error lines. ``name`` defaults to the file's stem, ``store.path`` to ``runs/<name>.zarr``
    and the ``dnn`` workload path is searched next to the file. Returns ``(data, config_path)``.
    """
    config_path = None
    if isinstance(path_or_mapping, model):
        config_path = getattr(path_or_mapping, "config_path", None)
        data, base = path_or_mapping.resolved(), Path.cwd()
    elif isinstance(path_or_mapping, Mapping):
        data, base = json.loads(json.dumps(path_or_mapping, default=str)), Path.cwd()
    elif isinstance(path_or_mapping, (str, os.PathLike)):
        path = Path(path_or_mapping).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(f"{what} config: got {str(path)!r}; expected an existing YAML file")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"{path}: invalid YAML or unreadable file: {first}") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: got {_short(data)}; expected a YAML mapping (name, function, ...)")
        data = dict(data)
        data.setdefault("name", path.stem.replace("_", "-"))
        config_path, base = str(path), path.parent
    else:
        raise ConfigError(f"{what} config: got {_short(path_or_mapping)}; expected a YAML path or a mapping")
    for item in [overrides] if isinstance(overrides, str) else overrides:
        _set(data, item)
    _check_top_level(data, model, what)
    _resolve_paths(data, base)
    return data, config_path


#: top-level keys of a pipeline file (gcc_dask.config) that a sweep file never has
_PIPELINE_ONLY = ("source", "workload", "cutoff", "composition", "gcc", "lcc", "replication")


def _check_top_level(data: Mapping[str, Any], model: type[BaseModel], what: str) -> None:
    """Before any file is looked for: a pipeline file given as a `what` (sweep, frontier) file, and unknown
    top-level keys (with the nearest valid key when it looks like a typo)."""
    import difflib

    valid = list(model.model_fields)
    unknown = [k for k in data if k not in valid]
    pipelineish = [k for k in unknown if k in _PIPELINE_ONLY]
    if pipelineish and "function" not in data:
        raise ConfigError(f"{what} config: got a pipeline file (it has {', '.join(map(repr, pipelineish))} and no "
                          f"'function'); expected a {what} file: run a pipeline with `gcc-dask run FILE` "
                          "(gcc_dask.run_pipeline)")
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), valid, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{unknown[0]}: got unknown key {unknown[0]!r}{hint}; expected one of: {', '.join(valid)}")


def _resolve_paths(data: dict, base: Path) -> None:
    from gcc_dask.errors import WorkloadError
    from gcc_dask.workloads import resolve_model_path

    fn = data.get("function")
    if isinstance(fn, dict) and fn.get("kind") == "dnn":
        wl = fn.get("workload") or {"kind": "onnx", "path": "models/lenet5_mnist.onnx"}
        if isinstance(wl, dict) and isinstance(wl.get("path"), str) and wl.get("kind") in ("onnx", "torch"):
            try:
                found = resolve_model_path(wl["path"], base)
            except WorkloadError as exc:
                try:  # the project's own pipelines/ folder (where the bundled LeNet-5 lives)
                    found = resolve_model_path(wl["path"], _PIPELINES)
                except WorkloadError:
                    raise ConfigError(f"function.workload.path: got {wl['path']!r}; expected an existing "
                                      f"model file ({exc})") from None
            wl = {**wl, "path": str(found)}
        fn["workload"] = wl
    store = data.get("store")
    store = dict(store) if isinstance(store, Mapping) else ({} if store is None else store)
    if isinstance(store, dict):
        if store.get("path") is None and isinstance(data.get("name", "sweep"), str):
            store["path"] = f"runs/{data.get('name', 'sweep')}.zarr"
        if isinstance(store.get("path"), (str, os.PathLike)):
            store["path"] = str(Path(store["path"]).expanduser().absolute())
        data["store"] = store
