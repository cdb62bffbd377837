"""f as a Python callable: an import path (``"module:function"``) or an object shipped by value
(cloudpickle), with the checks that it pickles and the token that tells two of them apart.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Sequence

from gcc_dask.errors import ConfigError, WorkloadError
from gcc_dask.workloads.base import Workload, register_workload


# -------------------------------------------------------------------------------------------- callable
def _import_object(spec: str, key: str = "workload.name", dirs: Sequence[str] = ()) -> Any:
    """The object at the import path `spec` (``"package.module:function"``), named `key` in errors (the config
    key the user wrote). A module that is not importable from ``sys.path`` is looked for in `dirs` in turn (the
    YAML file's folder, the working directory), each on ``sys.path`` only while that import runs."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{key}: got {spec!r}; expected 'package.module:function'")
    obj: Any = _import_module(module, spec, key, dirs)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise WorkloadError(f"module {module!r} has no attribute {attr!r} ({key}={spec!r})") from None
    return obj


def _import_dirs(base_dir: str | os.PathLike | None) -> tuple[str, ...]:
    """The folders an import path's module is looked for in when it is not on ``sys.path``: `base_dir` (the YAML
    file's folder), then the working directory; absolute, so that a worker of another working directory looks in
    the same ones."""
    return tuple(dict.fromkeys(os.path.abspath(os.fspath(d)) for d in (base_dir, os.getcwd()) if d))


def _import_module(module: str, spec: str, key: str, dirs: Sequence[str]) -> Any:
    """``importlib.import_module(module)``, else from the first of `dirs` that holds it (see
    :func:`_import_object`); one WorkloadError line naming `key` and the folders tried when none does."""
    import sys

    top = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        first = exc
        if not isinstance(exc, ModuleNotFoundError) or exc.name not in (top, module) or not dirs:
            raise WorkloadError(f"cannot import module {module!r} for {key}={spec!r}: {exc}") from exc
    tried = list(dict.fromkeys(os.path.abspath(d) for d in dirs))
    importlib.invalidate_caches()
    for folder in tried:
        if folder in sys.path or not os.path.isdir(folder):
            continue
        sys.path.append(folder)
        try:
            return importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name not in (top, module):
                raise WorkloadError(f"cannot import module {module!r} for {key}={spec!r}: {exc}") from exc
        except ImportError as exc:
            raise WorkloadError(f"cannot import module {module!r} for {key}={spec!r}: {exc}") from exc
        finally:
            sys.path.remove(folder)
    raise WorkloadError(f"cannot import module {module!r} for {key}={spec!r}: {first} (looked on sys.path, then in "
                        f"{', '.join(tried)}); expected a module installed, or a {top}.py (or package {top}/) in "
                        "one of those folders") from first


def _py_file(name: str) -> str | None:
    """The ``.py`` file of the imported module `name`, else None (a built-in or compiled module, a namespace
    package, one not imported)."""
    import sys

    path = getattr(sys.modules.get(name), "__file__", None)
    return os.path.abspath(path) if path and path.endswith(".py") and os.path.isfile(path) else None


def _imported_names(path: str, name: str) -> list[str]:
    """The modules the source file `path` (of module `name`) imports, as absolute names, from its text
    (``import a.b``, ``from . import c``, ``from .d import e``: ``a.b``, ``pkg.c``, ``pkg.d`` and ``pkg.d.e``)."""
    import ast

    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    package = name if os.path.basename(path) == "__init__.py" else name.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if base:
                found.append(base)
                found += [f"{base}.{alias.name}" for alias in node.names]
    return found


def _module_source(name: str) -> list[str]:
    """The ``.py`` file of the imported module `name` first, then those of the modules it imports from beside it
    (its own folder, or its top-level package's), and theirs in turn: what a worker reads f's code from. A
    module installed elsewhere (the standard library, site-packages) is not followed. Found from the files' text
    (their import statements), so the list is the same in every process. ``[]`` when `name` has no ``.py``
    file."""
    first = _py_file(name)
    if first is None:
        return []
    top = _py_file(name.partition(".")[0])  # a package's __init__.py, or the module itself
    root = os.path.dirname(top if top is not None and top.endswith("__init__.py") else first)
    outside = {os.path.abspath(p) for p in _installed_paths()}
    files, todo, seen = [first], [(name, first)], {first}
    while todo:
        module, path = todo.pop()
        for other in _imported_names(path, module):
            found = _py_file(other)
            if (found is None or found in seen or not found.startswith(root + os.sep)
                    or any(found.startswith(o + os.sep) for o in outside)):
                continue
            seen.add(found)
            files.append(found)
            todo.append((other, found))
    return [files[0], *sorted(files[1:])]


def _installed_paths() -> list[str]:
    """Where Python's own and installed modules live (the standard library, site-packages)."""
    import site
    import sysconfig

    paths = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(getattr(site, "getsitepackages", list)())
    paths.add(getattr(site, "getusersitepackages", lambda: None)())
    return [p for p in paths if p]


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

    uses_files = True  # takes base_dir: the YAML file's folder, where an import path's module is looked for too

    def __init__(self, function: str | Callable[..., Any] | None = None,
                 kwargs: dict[str, Any] | None = None, factory: bool = False,
                 name: str | None = None, base_dir: str | os.PathLike | None = None) -> None:
        if (function is None) == (name is None):
            raise ConfigError(f"workload.name: got name={name!r}, function={function!r}; expected "
                              f"exactly one 'package.module:function' (or, from Python, function=f)")
        key = "workload.function" if name is None else "workload.name"  # the key the user wrote
        function = name if function is None else function
        self._payload = None
        self._dirs = _import_dirs(base_dir)
        token = None
        if isinstance(function, str):
            target = _import_object(function, key, self._dirs)
            label: Any = function
        elif callable(function):
            self._keep(function, "f" if name is None else "workload.name")
            target, label, token = function, _label(function), _payload_token(self._payload)
        else:
            raise ConfigError(f"{key}: got {function!r}; expected 'package.module:function' or a callable")
        if not callable(target):
            raise WorkloadError(f"{key}={function!r} is not callable")
        self._key = key
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
            fn = _import_object(self.function, self.__dict__.get("_key", "workload.name"),
                                self.__dict__.get("_dirs", ()))
        else:  # pragma: no cover - unpickled from an older gcc-dask
            fn = self.function
        kwargs = self.kwargs
        if self.factory:
            return fn(**kwargs)
        if not kwargs:
            return fn
        return lambda X: fn(X, **kwargs)
