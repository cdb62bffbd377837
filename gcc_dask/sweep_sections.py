"""The sections of a sweep config, one pydantic model each: ``function`` (:class:`FunctionConfig`), a
``schemes`` entry (:class:`SchemeSpec`), ``code`` (:class:`GridConfig`), ``stragglers``
(:class:`StragglerGridConfig`), ``store`` and ``run``; :class:`~gcc_dask.sweep_config.SweepConfig` holds them
(docs/configuration.rst).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field
from pydantic import model_validator

from gcc_dask.config import SCHEMES, SourceConfig, WorkloadConfig
from gcc_dask.config.fields import Points
from gcc_dask.config.fields import _Section as _PipelineSection
from gcc_dask.config.fields import InputCount, WorkerCount
from gcc_dask.limits import MAX_CODE_ENTRIES, MAX_INPUTS, MAX_TRIALS, MAX_WORKERS


FUNCTIONS = ("xsinx", "polynomial", "smooth", "dnn")
_DEFAULT_RANGE = {"xsinx": (-3.0, 3.0), "polynomial": (-1.0, 1.0), "smooth": (-1.0, 1.0)}
_DEFAULT_DIM = {"xsinx": 1, "polynomial": 1, "smooth": 8}


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
        ``dnn`` only: which K samples a trial codes together: ``as_stored``, ``random``, ``pc1``,
        ``similarity``, ``tree`` or ``kd`` (a group of that composition of the source, docs/pipeline.rst, section
        'Composition'); unset: K random samples in the source's order.
    """

    label: str
    code: Literal["bacc", "bspline", "gcc", "lcc", "letcc", "replication", "uncoded"]
    params: dict[str, Any] = Field(default_factory=dict)
    composition: Literal["as_stored", "random", "pc1", "similarity", "tree", "kd"] | None = None


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
