"""The function f that each worker evaluates: ONNX models, analytic maps, Python callables, TorchScript.

A :class:`Workload` is a light, picklable *description* of f. ``Workload.load()`` builds the real callable
(an ONNX Runtime session, a TorchScript module, an imported function) in the process that calls it, so
the runtime ships the description once per Dask worker (a ``WorkerPlugin``) and loads it there; the
loaded object is never pickled. The callable maps a batch ``X`` of shape ``(n, *input_shape)`` (NumPy or
CuPy) to ``(n, *output_shape)`` float32/float64 in the same array namespace.

    wl = make_workload("onnx", path="pipelines/models/lenet5_mnist.onnx")
    f = wl.load()
    logits = f(X)                       # (n, 1, 28, 28) float32 -> (n, 10) float32
    wl.output_shape((1, 28, 28))        # (10,)

Kinds: ``onnx``, ``analytic`` (``xsinx``, ``polynomial``, ``smooth``), ``callable``, ``torch``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import importlib
import json
import os
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask.errors import ConfigError, WorkloadError

__all__ = ["Workload", "list_workloads", "load_workload", "make_workload", "register_workload",
           "resolve_model_path"]

_WORKLOADS: dict[str, type["Workload"]] = {}


def register_workload(kind: str) -> Callable[[type["Workload"]], type["Workload"]]:
    """Class decorator: make ``make_workload(kind, ...)`` build this :class:`Workload` subclass."""

    def deco(cls: type[Workload]) -> type[Workload]:
        cls.kind = kind
        _WORKLOADS[kind] = cls
        return cls

    return deco


def list_workloads() -> list[str]:
    """Sorted names of the registered workload kinds."""
    return sorted(_WORKLOADS)


def make_workload(kind: str, **params: Any) -> "Workload":
    """Build a workload description (nothing heavy is loaded until :meth:`Workload.load`).

    Parameters
    ----------
    kind : str
        One of :func:`list_workloads`: ``onnx``, ``analytic``, ``callable``, ``torch``.
    **params
        The kind's parameters (see its class); a None value means the default. ``base_dir`` resolves a
        relative ``path`` (see :func:`resolve_model_path`) and is ignored by kinds without files.

    Returns
    -------
    Workload

    Raises
    ------
    ConfigError
        Unknown kind or an invalid parameter value.
    WorkloadError
        A model file that cannot be found, or a function that cannot be imported.
    """
    try:
        cls = _WORKLOADS[kind]
    except (KeyError, TypeError):
        raise ConfigError(f"workload.kind: got {kind!r}; expected one of {list_workloads()}") from None
    params = {k: v for k, v in params.items() if v is not None}  # None means "the default"
    if not cls.uses_files:
        params.pop("base_dir", None)
    import inspect

    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "base_dir")]
    unknown = sorted(set(params) - set(accepted) - {"base_dir"})
    if unknown:
        raise ConfigError(f"workload.params: got unknown key {unknown[0]!r} for workload kind {kind!r}; expected "
                          f"keys among {accepted}")
    return cls(**params)


def resolve_model_path(path: str | os.PathLike, base_dir: str | os.PathLike | None = None) -> Path:
    """Find a model file: as given (absolute, or relative to the cwd), then under ``base_dir`` and its parent.

    Parameters
    ----------
    path : str or PathLike
        The path from the configuration, e.g. ``pipelines/models/lenet5_mnist.onnx``.
    base_dir : str or PathLike, optional
        The folder of the YAML file that named ``path``.

    Returns
    -------
    pathlib.Path
        The absolute path of the first candidate that exists.

    Raises
    ------
    ConfigError
        If `path` is not a str or os.PathLike (an ``onnxruntime.InferenceSession``, say).
    WorkloadError
        If no candidate exists; the message lists every path tried.
    """
    _check_path_type(path)
    p = Path(os.fspath(path)).expanduser()
    tried = [p if p.is_absolute() else Path.cwd() / p]
    if not p.is_absolute() and base_dir is not None:
        base = Path(os.fspath(base_dir)).expanduser().resolve()
        tried += [base / p, base.parent / p]
    for cand in tried:
        if cand.is_file():
            return cand.resolve()
    raise WorkloadError(f"workload.path: got {os.fspath(path)!r}, which is not a file; expected an existing "
                        f"model file (tried {[str(c) for c in dict.fromkeys(tried)]})")


def _check_path_type(path: Any) -> None:
    """Refuse a `path` that is not a path (an ``onnxruntime.InferenceSession``, a torch module, bytes)."""
    if not isinstance(path, (str, os.PathLike)):
        text = repr(path)
        text = text if len(text) <= 80 else text[:77] + "..."
        raise ConfigError(f"workload.path: got {text}; expected a model file path (str or os.PathLike), not "
                          f"{type(path).__name__!r}: the workers load the model from the file themselves")


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "cupy"


def _to_numpy(x: Any) -> np.ndarray:
    if _is_cupy(x):
        import cupy

        return cupy.asnumpy(x)
    return np.asarray(x)


class Workload(ABC):
    """A picklable description of f; :meth:`load` returns the callable.

    Attributes
    ----------
    kind : str
        The registry name.
    params : dict
        The constructor parameters, JSON-able where the kind allows (for the run's attrs).
    """

    kind = "?"
    uses_files = False  # whether the constructor takes ``base_dir``
    params: dict[str, Any]

    @abstractmethod
    def load(self) -> Callable[[Any], Any]:
        """Build f in this process.

        Returns
        -------
        callable
            ``f(X)``: X of shape ``(n, *input_shape)``, numpy or cupy -> ``(n, *output_shape)`` float32 or
            float64, in the namespace of X. A fresh object on every call.
        """

    def files(self) -> list[str]:
        """Model files f is built from: their content goes into a run's fingerprint, so a resume refuses a
        changed model. Empty for analytic functions and callables (their code counts through :meth:`sources` and
        the pickled bytes' token)."""
        path = getattr(self, "path", None)
        return [path] if path else []

    def sources(self) -> list[str]:
        """Python source files f's code is read from at each load (a module behind an import path): their content
        goes into a run's inputs digest, as :meth:`files`' does, so that a resume refuses an edited module.
        Empty by default. Unlike :meth:`files`, they do not key the models kept loaded (:func:`load_workload`)."""
        return []

    def __call__(self, X: Any) -> Any:
        """Evaluate f on X, loading it on first use in this process (:func:`load_workload`; the loaded f is
        not pickled)."""
        fn = self.__dict__.get("_loaded")
        if fn is None:
            fn = self._loaded = load_workload(self)
        return fn(X)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_loaded"}

    def output_shape(self, input_shape: Sequence[int]) -> tuple[int, ...]:
        """Shape of f(x) for one sample x of shape ``input_shape`` (found by evaluating f on zeros).

        Raises
        ------
        WorkloadError
            If f does not accept samples of this shape.
        """
        shape = tuple(int(s) for s in input_shape)
        return tuple(int(s) for s in np.shape(self(np.zeros((1, *shape), np.float32))))[1:]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.params!r}>"


#: workloads loaded in this process, kept across runs (most recently used last; :func:`load_workload`)
_LOADED: OrderedDict[str, Callable] = OrderedDict()
_LOADED_LOCK = threading.Lock()
#: loaded workloads kept per process
LOADED_MAX = 4


def load_workload(workload) -> Callable:
    """``workload.load()``, or the f an earlier run loaded in this process from the same files.

    Used by each Dask worker (the run's plugin) and by :meth:`Workload.__call__`. A workload built from
    model files (``workload.files()``: ONNX, TorchScript) is kept, at most :data:`LOADED_MAX` of them,
    under its class, its parameters and each file's absolute path, size, inode, modification and change
    times: a second job on the same cluster reuses the loaded model, as a plain Dask map that caches its
    session does, and a file rewritten or replaced (even by ``cp -p`` or ``rsync -a``, which keep the
    modification time; the change time cannot be set) is loaded anew. A fresh ONNX Runtime session runs
    its first calls on each thread up to twice as slowly (it plans its memory then), which a job of a few
    seconds would pay every time. Workloads without files (analytic functions, callables), and objects
    without ``params``, are loaded every time: their identity is code.

    Parameters
    ----------
    workload : Workload
        Or any object with ``load()`` (and optionally ``files()`` and ``params``).

    Returns
    -------
    callable
        f, as :meth:`Workload.load` returns it; shared by the callers of the same workload.

    Raises
    ------
    WorkloadError
        As :meth:`Workload.load` (a missing model file, a model that does not load).
    """
    files = list(getattr(workload, "files", list)())  # any object with load() is a workload here
    params = getattr(workload, "params", None)
    if not files or params is None:
        return workload.load()
    try:
        stamps = [(os.path.abspath(f), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                  for f in files for st in [os.stat(f)]]
    except OSError:
        return workload.load()  # load() names the missing file
    kind = f"{type(workload).__module__}.{type(workload).__qualname__}"
    key = json.dumps([kind, params, stamps], sort_keys=True, default=str)
    with _LOADED_LOCK:
        fn = _LOADED.get(key)
        if fn is not None:
            _LOADED.move_to_end(key)
            return fn
    fn = workload.load()
    with _LOADED_LOCK:
        _LOADED[key] = fn
        while len(_LOADED) > LOADED_MAX:
            _LOADED.popitem(last=False)
    return fn


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's text on one line (ONNX Runtime's span several), shortened to `limit` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------------------------------------ ONNX
#: the external data files of the ONNX models this process has read, by (path, size, inode, mtime, ctime)
_EXTERNAL: dict[tuple, list[str]] = {}


def _tensors(graph) -> Any:
    """Every tensor of an ONNX graph and of its subgraphs: initializers (sparse ones too), tensor attributes."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def onnx_external_files(path: str | os.PathLike) -> list[str]:
    """The external data files of the ONNX model at `path` (``model.onnx`` + ``model.onnx.data``): the
    absolute path of each file a tensor's ``location`` names, relative to the model's folder, once each, in
    the order first named; empty for a model that holds its weights.

    A model without the word ``location`` in it has no external data and is not parsed; one with it is
    parsed without its weights (``onnx``). The answer is kept per process, by the file's size, inode,
    modification and change times.

    Raises
    ------
    WorkloadError
        If a named file does not exist, or the model cannot be parsed.
    """
    path = os.fspath(path)
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    if key in _EXTERNAL:
        return list(_EXTERNAL[key])
    with open(path, "rb") as fh:
        data = fh.read()
    files: list[str] = []
    if b"location" in data:
        import onnx

        try:
            model = onnx.load_model_from_string(data)
        except Exception as e:
            raise WorkloadError(f"cannot load ONNX model {path!r}: {type(e).__name__}: {e}") from None
        folder = os.path.dirname(os.path.abspath(path))
        graphs = [model.graph, *(g for f in model.functions for n in f.node for a in n.attribute
                                 for g in ([a.g] if a.HasField("g") else []) + list(a.graphs))]
        for graph in graphs:
            for tensor in _tensors(graph):
                if tensor.data_location != onnx.TensorProto.EXTERNAL:
                    continue
                location = {e.key: e.value for e in tensor.external_data}.get("location")
                full = os.path.abspath(os.path.join(folder, location or ""))
                if not location or not os.path.isfile(full):
                    raise WorkloadError(
                        f"ONNX model {path!r} keeps the weights of tensor {tensor.name!r} in the external data file "
                        f"{location!r}, which does not exist at {full!r}; copy it next to the model (the path must "
                        "be reachable from every Dask worker)")
                if full not in files:
                    files.append(full)
    _EXTERNAL[key] = files
    return list(files)


@register_workload("onnx")
class OnnxWorkload(Workload):
    """An ONNX model evaluated with ONNX Runtime.

    Parameters: ``path`` (resolved by :func:`resolve_model_path` with ``base_dir``), ``providers``
    (default: CUDA then CPU when ONNX Runtime has the CUDA provider, else CPU),
    ``intra_op_num_threads`` (default 1, as Dask already runs several shards at once per worker; 0:
    ONNX Runtime's default). The input is reshaped to the model's declared per-sample shape (e.g.
    (784,) -> (1, 28, 28)) and cast to its dtype; f returns the first output. CuPy input is copied to
    the host and the result copied back. A model whose weights are in external data files (``model.onnx`` +
    ``model.onnx.data``) counts them among its :meth:`files`: they are in the run's inputs digest and in the
    workers' model cache key (:func:`load_workload`).

    A model exported with a fixed batch dimension b (input shape ``(b, ...)`` instead of ``(N, ...)``)
    is run in slices of b samples, the last one padded with zeros whose outputs are dropped: f still maps
    any (n, ...) to (n, ...), whatever ``code.block_size`` is. The loaded f's ``fixed_batch`` attribute
    is b (None for a dynamic batch dimension).
    """

    uses_files = True

    def files(self) -> list[str]:
        """The model file, then its external data files (:func:`onnx_external_files`).

        Raises
        ------
        WorkloadError
            If an external data file the model names does not exist.
        """
        if not os.path.isfile(self.path):
            return [self.path]  # load() names the missing model
        return [self.path, *onnx_external_files(self.path)]

    def __init__(self, path: str | os.PathLike, base_dir: str | os.PathLike | None = None,
                 providers: Sequence[str] | None = None, intra_op_num_threads: int = 1) -> None:
        self.path = str(resolve_model_path(path, base_dir))
        self.providers = None if providers is None else list(providers)
        self.intra_op_num_threads = intra_op_num_threads
        self.params = {"kind": "onnx", "path": self.path, "providers": self.providers,
                       "intra_op_num_threads": intra_op_num_threads}

    def load(self) -> Callable[[Any], Any]:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - core dependency
            raise WorkloadError("workload.kind: got 'onnx', but onnxruntime is not installed; expected it "
                                "installed (pip install onnxruntime)") from exc
        if not os.path.isfile(self.path):
            raise WorkloadError(f"workload.path: got {self.path!r}, which is not a file here; expected a model "
                                f"file reachable from the driver and every Dask worker")
        providers = self.providers
        if providers is None:
            providers = ["CPUExecutionProvider"]
            if "CUDAExecutionProvider" in ort.get_available_providers():
                providers.insert(0, "CUDAExecutionProvider")
        opts = ort.SessionOptions()
        if self.intra_op_num_threads:
            opts.intra_op_num_threads = int(self.intra_op_num_threads)
        try:
            sess = ort.InferenceSession(self.path, sess_options=opts, providers=providers)
        except Exception as exc:
            raise WorkloadError(f"workload.path: got {self.path!r}, which ONNX Runtime cannot load "
                                f"({_one_line(exc)}); expected an ONNX model file") from None
        inp = sess.get_inputs()[0]
        dims = tuple(d if isinstance(d, int) and d > 0 else None for d in inp.shape)
        batch, per_sample, name = (dims[0] if dims else None), dims[1:], inp.name
        dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64}.get(inp.type, np.float32)
        path = self.path

        def run(x: np.ndarray) -> np.ndarray:
            try:
                return sess.run(None, {name: x})[0]
            except Exception as exc:
                raise WorkloadError(f"workload: got input of shape {tuple(x.shape)}, which ONNX model {path!r} "
                                    f"rejects ({_one_line(exc)}); expected one that fits its declared input "
                                    f"{list(inp.shape)}") from None

        def run_sliced(x: np.ndarray) -> np.ndarray:
            """A fixed batch dimension b: slices of b samples, the last one zero-padded."""
            n, parts = x.shape[0], []
            for lo in range(0, max(n, 1), batch):
                part = x[lo:lo + batch]
                keep = part.shape[0]
                if keep < batch:
                    part = np.concatenate([part, np.zeros((batch - keep, *x.shape[1:]), dtype=x.dtype)])
                parts.append(np.asarray(run(part))[:keep])
            return np.concatenate(parts)

        def f(X: Any) -> Any:
            on_gpu = _is_cupy(X)
            x = _to_numpy(X)
            n = x.shape[0] if x.ndim else 0
            if None not in per_sample:
                size = int(np.prod(per_sample, dtype=np.int64))
                if int(np.prod(x.shape[1:], dtype=np.int64)) != size or x.ndim < 1:
                    want = ", ".join(map(str, per_sample))
                    raise WorkloadError(
                        f"workload: got input of shape {tuple(x.shape)}, which does not fit ONNX model {path!r}; "
                        f"expected (n, {want}) or any (n, ...) with {size} values per sample")
                x = x.reshape((n, *per_sample))
            x = np.ascontiguousarray(x, dtype=dtype)
            y = run(x) if batch is None or x.ndim < 1 or x.shape[0] == batch else run_sliced(x)
            y = np.asarray(y, dtype=np.float32 if y.dtype != np.float64 else np.float64)
            if on_gpu:
                import cupy

                return cupy.asarray(y)
            return y

        f.fixed_batch = batch
        return f


# -------------------------------------------------------------------------------------------- analytic
_ANALYTIC = ("xsinx", "polynomial", "smooth")


@register_workload("analytic")
class AnalyticWorkload(Workload):
    """Closed-form test functions, written against the array API (run on NumPy, CuPy, array-api-strict).

    ``name="xsinx"``: f(x) = x sin x elementwise (the GCC paper's running example; output shape = input
    shape). ``name="polynomial"``: f(x) = sum_i coeffs[i] x**i elementwise (Horner; ``coeffs`` lowest
    order first, default [0, 0, 1]). ``name="smooth"``: a fixed random-feature network R^d -> R^m,
    f(x) = V tanh(W x + b) / sqrt(hidden) with W ~ N(0, 1/d), b ~ N(0, 1), V ~ N(0, 1) drawn from
    ``numpy.random.default_rng(seed)`` once d is known (params ``out_dim`` m = 10, ``hidden`` = 64,
    ``seed`` = 0); x is the flattened sample. Integer input is promoted to float64.
    """

    def __init__(self, name: str = "xsinx", coeffs: Sequence[float] | None = None, out_dim: int = 10,
                 hidden: int = 64, seed: int = 0) -> None:
        if name not in _ANALYTIC:
            raise ConfigError(f"workload.name: got {name!r}; expected one of {list(_ANALYTIC)}")
        if coeffs is not None and name != "polynomial":
            raise ConfigError(f"workload.coeffs: got {coeffs!r}; only valid with name='polynomial'")
        self.name = name
        self.coeffs = [0.0, 0.0, 1.0] if coeffs is None else [float(c) for c in coeffs]
        if not self.coeffs:
            raise ConfigError("workload.coeffs: got []; expected at least one coefficient")
        for key, val in (("out_dim", out_dim), ("hidden", hidden)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ConfigError(f"workload.{key}: got {val!r}; expected a positive integer")
        self.out_dim, self.hidden, self.seed = int(out_dim), int(hidden), int(seed)
        self.params = {"kind": "analytic", "name": name}
        if name == "polynomial":
            self.params["coeffs"] = self.coeffs
        if name == "smooth":
            self.params.update(out_dim=self.out_dim, hidden=self.hidden, seed=self.seed)

    def _weights(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, d])
        W = rng.standard_normal((d, self.hidden)) / np.sqrt(d)
        b = rng.standard_normal(self.hidden)
        V = rng.standard_normal((self.hidden, self.out_dim)) / np.sqrt(self.hidden)
        return W, b, V

    def load(self) -> Callable[[Any], Any]:
        from array_api_compat import array_namespace

        name, coeffs, cache = self.name, self.coeffs, {}

        def f(X: Any) -> Any:
            xp = array_namespace(X)
            if not xp.isdtype(X.dtype, "real floating"):
                X = xp.astype(X, xp.float64)
            if name == "xsinx":
                return X * xp.sin(X)
            if name == "polynomial":
                out = xp.full_like(X, coeffs[-1])
                for c in coeffs[-2::-1]:
                    out = out * X + c
                return out
            n, d = X.shape[0], int(np.prod(X.shape[1:], dtype=np.int64))
            if d not in cache:
                cache[d] = self._weights(d)
            W, b, V = (xp.asarray(a, dtype=X.dtype) for a in cache[d])
            return xp.tanh(xp.reshape(X, (n, d)) @ W + b) @ V

        return f

    def output_shape(self, input_shape: Sequence[int]) -> tuple[int, ...]:
        return (self.out_dim,) if self.name == "smooth" else tuple(int(s) for s in input_shape)


# -------------------------------------------------------------------------------------------- callable
def _import_object(spec: str) -> Any:
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"workload.function: got {spec!r}; expected 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise WorkloadError(f"cannot import module {module!r} for workload.function={spec!r}: "
                            f"{exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise WorkloadError(f"module {module!r} has no attribute {attr!r} "
                                f"(workload.function={spec!r})") from None
    return obj


def _module_source(name: str) -> list[str]:
    """``[path]`` of the ``.py`` file of the imported module `name`, else ``[]`` (a built-in or compiled module,
    a namespace package, one not imported)."""
    import sys

    path = getattr(sys.modules.get(name), "__file__", None)
    return [os.path.abspath(path)] if path and path.endswith(".py") and os.path.isfile(path) else []


def _by_reference(obj: Any) -> bool:
    """True for a plain function that cloudpickle pickles by reference: found under its qualified name in its
    importable module (not ``__main__``), so each worker imports its code from that module's file."""
    import sys
    import types

    if not isinstance(obj, types.FunctionType) or obj.__module__ in (None, "__main__"):
        return False
    found: Any = sys.modules.get(obj.__module__)
    for part in obj.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is obj


def _label(obj: Any) -> str:
    """``module:qualname`` of a function or method, else the object's type: how errors and attrs name f."""
    qual = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return f"{module}:{qual}"


def pickle_payload(obj: Any, what: str = "f") -> bytes:
    """``cloudpickle.dumps(obj)``: how an in-memory f travels to the Dask workers (once per worker, in the
    run's plugin). cloudpickle pickles functions defined in ``__main__``, lambdas and closures by value, and
    importable functions, classes and methods by reference (the workers must then import their module).

    Raises
    ------
    WorkloadError
        One line naming `obj` (``what``, e.g. "f") when it cannot be pickled: an open file, a lock, a
        socket or a generator in its closure or attributes.
    """
    import cloudpickle

    try:
        return cloudpickle.dumps(obj)
    except Exception as exc:
        text = repr(obj)
        text = text if len(text) <= 80 else text[:77] + "..."
        cause = str(exc).splitlines()[0] if str(exc) else ""
        raise WorkloadError(
            f"{what}: got {_label(obj)} ({text}), which cannot be pickled to ship it to the Dask workers "
            f"(cloudpickle: {type(exc).__name__}: {cause}); keep open files, locks, sockets and generators out "
            f"of f (open them inside f, or in a factory: workload.params.factory)") from None


def _payload_token(payload: bytes) -> str:
    import hashlib

    return hashlib.sha256(payload).hexdigest()[:16]


class _InMemory:
    """Mixin of the workloads built from a Python object (a function, a torch module): the object is kept
    as it is in this process and pickled once, with cloudpickle, as bytes (``_payload``), for the workers; a
    worker unpickles it once, in :meth:`Workload.load` (the run's plugin calls that once per worker)."""

    _object_key = "function"

    def _keep(self, obj: Any, what: str) -> None:
        self._payload = pickle_payload(obj, what)
        self._object = obj

    def _the_object(self) -> Any:
        obj = self.__dict__.get("_object")
        if obj is None:
            import cloudpickle

            obj = self._object = cloudpickle.loads(self._payload)
        return obj

    def __getstate__(self) -> dict[str, Any]:
        state = Workload.__getstate__(self)  # type: ignore[arg-type]
        state.pop("_object", None)
        if self.__dict__.get("_payload") is not None:
            state[self._object_key] = None
        return state


@register_workload("callable")
class CallableWorkload(_InMemory, Workload):
    """Any Python function ``f(X) -> Y`` on batches: ``X`` of shape ``(n, *sample_shape)`` to ``Y`` of shape
    ``(n, *output_shape)``, float32 or float64.

    ``function`` is either an import path ``"package.module:function"`` (checked at construction, imported
    by each worker; the YAML key is ``name``, an alias) or, from Python, the callable itself: a function, a
    lambda, a closure, a bound method such as a fitted scikit-learn estimator's ``predict_proba``, or any
    object with ``__call__``. A callable object is pickled with cloudpickle here (an object that cannot be
    pickled is refused at once, with one :class:`~gcc_dask.errors.WorkloadError` line naming it) and
    unpickled once per Dask worker, by the run's plugin; this process keeps the object itself.

    ``kwargs`` (dict) are passed to f on every call. With ``factory=True`` the imported or given object is
    called once in :meth:`load` (with ``kwargs``) and must return f, e.g. to load a model per worker.
    """

    def __init__(self, function: str | Callable[..., Any] | None = None,
                 kwargs: dict[str, Any] | None = None, factory: bool = False,
                 name: str | None = None) -> None:
        if (function is None) == (name is None):
            raise ConfigError(f"workload.name: got name={name!r}, function={function!r}; expected "
                              f"exactly one 'package.module:function' (or, from Python, function=f)")
        function = name if function is None else function
        self._payload = None
        token = None
        if isinstance(function, str):
            target = _import_object(function)
            label: Any = function
        elif callable(function):
            self._keep(function, "f" if name is None else "workload.name")
            target, label, token = function, _label(function), _payload_token(self._payload)
        else:
            raise ConfigError(f"workload.function: got {function!r}; expected 'package.module:function'"
                              f" or a callable")
        if not callable(target):
            raise WorkloadError(f"workload.function={function!r} is not callable")
        self.function, self.kwargs, self.factory = function, dict(kwargs or {}), bool(factory)
        self.params = {"kind": "callable", "function": label, "kwargs": self.kwargs,
                       "factory": self.factory}
        if token is not None:
            self.params["token"] = token

    def sources(self) -> list[str]:
        """The source file of the module f comes from, when its code is read from there by each worker: an
        import path ``"package.module:function"``, or a function pickled by reference (found under its name in
        an importable module other than ``__main__``). A function defined in a script, a notebook or a lambda
        travels by value (its code is in the token of :attr:`params`). Empty when the module has no ``.py``
        file."""
        if isinstance(self.function, str):
            return _module_source(self.function.partition(":")[0])
        target = self.__dict__.get("_object", self.function)
        return _module_source(target.__module__) if _by_reference(target) else []

    def load(self) -> Callable[[Any], Any]:
        if self._payload is not None:
            fn = self._the_object()
        elif isinstance(self.function, str):
            fn = _import_object(self.function)
        else:  # pragma: no cover - unpickled from an older gcc-dask
            fn = self.function
        kwargs = self.kwargs
        if self.factory:
            return fn(**kwargs)
        if not kwargs:
            return fn
        return lambda X: fn(X, **kwargs)


# ----------------------------------------------------------------------------------------------- torch
def is_torch_module(obj: Any) -> bool:
    """True for a ``torch.nn.Module`` instance, found without importing torch (a class named Module in a
    ``torch.nn`` module among the object's bases)."""
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn") for c in type(obj).__mro__)


@register_workload("torch")
class TorchWorkload(_InMemory, Workload):
    """A torch module evaluated under ``torch.inference_mode`` (optional extra: ``torch``).

    Exactly one of ``path``, a TorchScript file (``torch.jit.save``; resolved like
    :func:`resolve_model_path` with ``base_dir``), ``name``, a ``"module:factory"`` import path called with
    ``kwargs`` in :meth:`load` that returns a ``torch.nn.Module``, or, from Python, ``module``, the
    ``torch.nn.Module`` itself (pickled with cloudpickle here, unpickled once per Dask worker). Other
    parameters: ``device`` (``"auto"``: CUDA when available, else CPU), ``input_shape`` (optional per-sample
    shape the input is reshaped to), ``dtype`` (``"float32"``). f takes NumPy (or CuPy, through DLPack) input
    of shape ``(n, *sample_shape)`` and returns the module's output in the input's namespace.
    """

    uses_files = True
    _object_key = "module"

    def __init__(self, path: str | os.PathLike | None = None, base_dir: str | os.PathLike | None = None,
                 device: str = "auto", input_shape: Sequence[int] | None = None,
                 dtype: str = "float32", name: str | None = None,
                 kwargs: dict[str, Any] | None = None, module: Any = None) -> None:
        if sum(v is not None for v in (path, name, module)) != 1:
            raise ConfigError(f"workload.path: got path={path!r}, name={name!r}, module="
                              f"{type(module).__name__ if module is not None else None}; expected exactly one: "
                              f"a TorchScript file, a 'module:factory' returning a torch module, or (from "
                              f"Python) module=a torch.nn.Module")
        if module is not None and not is_torch_module(module):
            raise ConfigError(f"workload.module: got {type(module).__name__!r}; expected a torch.nn.Module")
        self.path = None if path is None else str(resolve_model_path(path, base_dir))
        self.name, self.kwargs = name, dict(kwargs or {})
        self._payload, self.module = None, module
        if name is not None:
            _import_object(name)  # fail early when the factory cannot be imported
        if module is not None:
            self._keep(module, "f")
        self.device, self.dtype = device, np.dtype(dtype).name
        self.input_shape = None if input_shape is None else tuple(int(s) for s in input_shape)
        self.params = {"kind": "torch", "path": self.path, "name": name, "kwargs": self.kwargs,
                       "device": device, "dtype": self.dtype,
                       "input_shape": None if input_shape is None else list(self.input_shape)}
        if module is not None:
            self.params.update(module=_label(module), token=_payload_token(self._payload))

    def load(self) -> Callable[[Any], Any]:
        try:
            import torch
        except ImportError as exc:
            raise WorkloadError("workload.kind: got 'torch', but PyTorch is not installed; expected it installed "
                                "(pip install 'gcc-dask[torch]')") from exc
        device = self.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if self._payload is not None:  # a fresh copy: never move or switch the caller's own module
            import cloudpickle

            module = cloudpickle.loads(self._payload).to(device).eval()
        elif self.name is not None:
            module = _import_object(self.name)(**self.kwargs)
            if not isinstance(module, torch.nn.Module):
                raise WorkloadError(f"workload.name={self.name!r} returned {type(module).__name__}; "
                                    f"expected a torch.nn.Module")
            module = module.to(device).eval()
        elif not os.path.isfile(self.path):
            raise WorkloadError(f"workload.path: got {self.path!r}, which is not a file here; expected a model "
                                f"file reachable from the driver and every Dask worker")
        else:
            try:
                with warnings.catch_warnings():  # torch >= 2.10 deprecates TorchScript; it loads
                    warnings.simplefilter("ignore", DeprecationWarning)
                    module = torch.jit.load(self.path, map_location=device).eval()
            except Exception as exc:
                raise WorkloadError(f"workload.path: got {self.path!r}, which torch.jit.load cannot load "
                                    f"({_one_line(exc)}); expected a TorchScript model file") from None
        tdtype, per_sample = getattr(torch, self.dtype), self.input_shape
        path = self.path or self.name or self.params.get("module")

        def f(X: Any) -> Any:
            on_gpu = _is_cupy(X)
            t = torch.from_dlpack(X) if on_gpu else torch.from_numpy(np.ascontiguousarray(X))
            if per_sample is not None:
                if int(np.prod(t.shape[1:])) != int(np.prod(per_sample)):
                    raise WorkloadError(f"input of shape {tuple(t.shape)} does not fit torch "
                                        f"model {path!r}: expected (n, {', '.join(map(str, per_sample))})")
                t = t.reshape((t.shape[0], *per_sample))
            with torch.inference_mode():
                out = module(t.to(device=device, dtype=tdtype))
            if on_gpu:
                import cupy

                return cupy.from_dlpack(out.contiguous())
            return out.cpu().numpy()

        return f
