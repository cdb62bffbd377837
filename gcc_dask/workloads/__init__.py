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

One module per concern: :mod:`~gcc_dask.workloads.base` (the :class:`Workload` interface, the registry, the
per-process cache of loaded fs), and one per kind: :mod:`~gcc_dask.workloads.onnx_model`,
:mod:`~gcc_dask.workloads.analytic`, :mod:`~gcc_dask.workloads.callables`, :mod:`~gcc_dask.workloads.torch_module`.
Importing this package registers them all.
"""

from __future__ import annotations

from gcc_dask.workloads.base import (
    Workload, list_workloads, load_workload, make_workload, register_workload, resolve_model_path,
)
from gcc_dask.workloads.base import LOADED_MAX  # noqa: F401
# the kinds (importing them registers them), importable from here as before the split
from gcc_dask.workloads.onnx_model import OnnxWorkload, onnx_external_files  # noqa: F401
from gcc_dask.workloads.analytic import AnalyticWorkload  # noqa: F401
from gcc_dask.workloads.callables import CallableWorkload, pickle_payload  # noqa: F401
from gcc_dask.workloads.torch_module import TorchWorkload, is_torch_module  # noqa: F401

__all__ = ["Workload", "list_workloads", "load_workload", "make_workload", "register_workload",
           "resolve_model_path"]
