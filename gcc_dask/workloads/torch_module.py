"""f as a torch module: a TorchScript file, a ``"module:factory"`` import path, or a module object (torch is
optional and imported where f is loaded).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask.errors import ConfigError, WorkloadError
from gcc_dask.workloads.base import Workload, _is_cupy, _one_line, register_workload, resolve_model_path
from gcc_dask.workloads.callables import _InMemory, _import_object, _label, _payload_token, _import_dirs


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
            # fail early when the factory cannot be imported (looked for beside the YAML file and in the cwd too)
            self._dirs = _import_dirs(base_dir)
            _import_object(name, "workload.name", self._dirs)
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
            module = _import_object(self.name, "workload.name", self.__dict__.get("_dirs", ()))(**self.kwargs)
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
            if not on_gpu:
                X = np.ascontiguousarray(X)
                if not X.flags.writeable:  # the run's shared, read-only samples: torch wants its own (and warns)
                    X = X.copy()
            t = torch.from_dlpack(X) if on_gpu else torch.from_numpy(X)
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
