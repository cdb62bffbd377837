"""The workload interface and its registry: :class:`Workload` (a picklable description of f),
:func:`register_workload`, :func:`make_workload`, :func:`list_workloads`, :func:`resolve_model_path`, and
:func:`load_workload`, the per-process cache of loaded fs.

The kinds live beside it (:mod:`gcc_dask.workloads.onnx_model`, :mod:`gcc_dask.workloads.analytic`,
:mod:`gcc_dask.workloads.callables`, :mod:`gcc_dask.workloads.torch_module`); :mod:`gcc_dask.workloads` imports
them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask.errors import ConfigError, WorkloadError

__all__ = ["Workload", "list_workloads", "load_workload", "make_workload", "register_workload", "resolve_model_path"]


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
