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

The sections' models live in :mod:`gcc_dask.sweep_sections`; this module holds :class:`SweepConfig` and reads
YAML job files (:func:`load_sweep_config`, :func:`read_job_file`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, Field, PrivateAttr, ValidationError
from pydantic import model_validator

from gcc_dask.config import ClusterConfig
from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_CODE_ENTRIES, MAX_SWEEP_ENTRIES, MAX_TRIALS
from gcc_dask.sweep_sections import (
    FunctionConfig, GridConfig, RunSection, SchemeSpec, StoreSection, StragglerGridConfig, _Bad, _Section, _schemes,
)
from gcc_dask.sweep_sections import (  # noqa: F401  (importable from here, as before the split)
    FUNCTIONS, SWEEP_SCHEMES, Features, PosInt, _as_list,
)

__all__ = ["FunctionConfig", "SchemeSpec", "SweepConfig", "load_sweep_config"]


_FINGERPRINT_EXCLUDE = ("store", "cluster", "run")
_PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"


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
    """``repr(value)``, at most `limit` characters: a longer one keeps its start and its end around "..." (a
    long path keeps its file name, which a cut end hid: under a deep temporary folder, 'nope.npy' was lost)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]


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
