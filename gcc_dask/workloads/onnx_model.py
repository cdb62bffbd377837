"""f as an ONNX model, run by ONNX Runtime (CPU, or CUDA for CuPy input), with its external data files.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask.errors import WorkloadError
from gcc_dask.workloads.base import Workload, _is_cupy, _one_line, _to_numpy, register_workload, resolve_model_path


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
