"""Your own model on your own array, in Dask's idiom: :func:`coded_map` and :class:`CodedResult`.

``coded_map(f, X)`` is ``f(X)`` computed on a Dask cluster with coded computing: the rows of X are composed
into groups of K similar rows, each group is encoded into N coded rows, N shard tasks evaluate f on blocks of
them, a cutoff keeps the first N − S results of every batch and the decoder estimates f of every row
(docs/own_model.rst). It is :func:`gcc_dask.pipeline.run_pipeline` with X as the source and f as the
workload, so the results land in a run store like any pipeline's, and every config key is a keyword argument
checked as in YAML.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from gcc_dask.errors import ConfigError, WorkloadError

__all__ = ["CODED_MAP_DEFAULTS", "CodedResult", "coded_map"]

#: The config of a :func:`coded_map` job where the caller sets nothing (docs/own_model.rst, section
#: 'Defaults'): the main job's geometry (K = 8 rows coded into N = 16 shards, a cutoff at N − S = 12 results),
#: no uncoded reference (it would evaluate f on every row a second time), no progress bar, NumPy (not
#: CuPy) handed to f (a GPU model moves its input itself), and the composition chosen by f's measured cost
#: (``composition.policy: auto``: the similarity chain, or the k-d tree for an f of under 5 µs a row).
CODED_MAP_DEFAULTS: dict[str, dict[str, Any]] = {
    "code": {"num_inputs": 8, "num_workers": 16},
    "cutoff": {"stragglers": 4},
    "run": {"reference": False, "progress": False},
    "cluster": {"gpu": False},
    "composition": {"policy": "auto"},
}
_NOT_KEYWORDS = ("source", "workload", "schemes")


@dataclass(frozen=True)
class CodedResult:
    """What :func:`coded_map` returns: the estimates of f(X), and the run store they were read from.

    Attributes
    ----------
    run : gcc_dask.pipeline.RunResult
        The pipeline run (``run.path``, ``run.status``, ``run.config``, ``run.wall_s``).
    schemes : tuple of str
        The schemes that ran; :attr:`estimates` are the first one's.
    lazy : bool
        Whether the estimates are dask arrays (for a dask array, a Zarr array or a dask-backed DataArray).
    dim : str
        The name of the sample axis in :meth:`to_xarray` (a DataArray's first dimension, else ``"sample"``).
    index : array-like or None
        The DataArray's coordinate along `dim`, kept for :meth:`to_xarray`.
    chunks : tuple of int or None
        The input's chunks along its first axis: the lazy estimates are chunked the same way.
    """

    run: Any
    schemes: tuple[str, ...]
    lazy: bool = False
    dim: str = "sample"
    index: Any = None
    chunks: tuple[int, ...] | None = None

    @property
    def store(self) -> str:
        """The run store's path (open it with :func:`gcc_dask.open_run`, a DataTree of one node per scheme, or
        ``xarray.open_zarr(store, group="gcc")`` for one scheme: the store's root holds groups only)."""
        return self.run.path

    def __repr__(self) -> str:  # the config (and an in-memory X in it) is not what a reader wants to see
        config = getattr(self.run, "config", None)
        data = getattr(getattr(config, "source", None), "array", None)
        rows = f", {data.shape[0]} rows" if getattr(data, "shape", None) else ""
        return (f"<CodedResult schemes={list(self.schemes)}{rows}, store={self.store!r}, "
                f"status={getattr(self.run, 'status', '?')!r}, lazy={self.lazy}>")

    def _check_store(self) -> None:
        """Raise :class:`~gcc_dask.errors.StoreError` when the store is no longer the one this result was made with
        (another run overwrote it since: its ``store_id`` changed; a resume keeps it), before anything is read from
        it: this result's estimates and that store's reference or summary would belong to two different runs."""
        same_store(self.store, getattr(self.run, "store_id", None))

    def _checked(self, values):
        """`values` read from the store; when lazy, a dask array that checks the store once per compute (a task
        all its blocks wait for, :func:`same_store`) before its blocks are read: one taken before another call
        overwrote the store raises instead of reading the other run's rows."""
        made = getattr(self.run, "store_id", None)
        if not self.lazy or made is None:
            return values
        import dask

        checked = dask.delayed(same_store, pure=False)(self.store, made)
        return values.map_blocks(_after_check, checked, dtype=values.dtype)

    @property
    def summary(self):
        """One row per scheme (:attr:`gcc_dask.pipeline.RunResult.summary`; ``rel_acc`` and ``rmse`` need the
        uncoded reference: ``run={"reference": True}``).

        Raises
        ------
        StoreError
            The store was overwritten by another run since this result was made."""
        if "_summary" not in getattr(self.run, "__dict__", {}):
            self._check_store()
        return self.run.summary

    @functools.cached_property
    def estimates(self):
        """f̂(X) of the first scheme: shape ``(n, *output_shape)``, float32, row i for row i of X; NaN in the
        rows of a batch that could not be decoded. NumPy for NumPy input (the rows the decodes sent back as the
        run went, :attr:`gcc_dask.pipeline.RunResult.estimates`, copied; read from the store only when some did
        not come back, as after a resume), else a dask array reading the store."""
        return self.estimates_of(self.schemes[0])

    def estimates_of(self, scheme: str):
        """:attr:`estimates` of `scheme` (one of :attr:`schemes`).

        Raises
        ------
        ConfigError
            If `scheme` did not run.
        StoreError
            The estimates are read from a store that another run has overwritten since.
        """
        from gcc_dask.store import read_in_dataset_order

        if scheme not in self.schemes:
            raise ConfigError(f"scheme: got {scheme!r}; expected one of the schemes that ran: {list(self.schemes)}")
        kept = getattr(self.run, "estimates", None) or {}
        if not self.lazy and scheme in kept:
            return kept[scheme].copy()  # (each call its own array, as each read of the store was)
        self._check_store()
        return self._checked(read_in_dataset_order(self.store, scheme, "decoded", lazy=self.lazy, chunks=self.chunks))

    @property
    def reference(self):
        """f(X) computed uncoded (with ``run={"reference": True}``), like :attr:`estimates`; None without it."""
        from gcc_dask.store import INPUTS, read_in_dataset_order

        if not self.run.config.run.reference:
            return None
        self._check_store()
        return self._checked(read_in_dataset_order(self.store, INPUTS, "reference", lazy=self.lazy,
                                                   chunks=self.chunks))

    def to_xarray(self):
        """The estimates of every scheme (and ``reference`` when computed) as an :class:`xarray.Dataset`.

        Dimensions ``(dim, output, ...)`` in X's row order, with X's coordinate along `dim` when X was a
        DataArray; lazy (dask-backed) when :attr:`lazy`. The attrs name the store and the schemes.
        """
        import xarray as xr

        first = self.estimates
        out_dims = ("output",) if first.ndim == 2 else tuple(f"output_{i}" for i in range(first.ndim - 1))
        dims = (self.dim, *out_dims)
        data = {s: (dims, first if s == self.schemes[0] else self.estimates_of(s)) for s in self.schemes}
        if self.reference is not None:
            data["reference"] = (dims, self.reference)
        coords = {self.dim: np.asarray(self.index) if self.index is not None else np.arange(first.shape[0])}
        coords.update({d: np.arange(n) for d, n in zip(out_dims, first.shape[1:])})
        return xr.Dataset(data, coords=coords, attrs={"store": self.store, "schemes": list(self.schemes)})


def same_store(path: str, store_id: str | None) -> bool:
    """True when the run store at `path` still has `store_id` (its identity, made at creation and kept by resumes;
    None: nothing to check); else one :class:`~gcc_dask.errors.StoreError` line: another run overwrote the store
    since the result that holds `store_id` was made. A store that cannot be opened passes (the read that follows
    says what is wrong with it). Runs on this machine or in a task of the lazy estimates.

    Raises
    ------
    StoreError
        The store at `path` has another ``store_id``.
    """
    from gcc_dask.errors import StoreError
    from gcc_dask.store import STORE_ID_ATTR, RunStore

    if store_id is None:
        return True
    try:
        now = RunStore(path).attrs.get(STORE_ID_ATTR)
    except Exception:  # gone, or no longer a run store: the read itself says so
        return True
    if now != store_id:
        raise StoreError(f"store: {path!r} was overwritten by another run after this result was made (its "
                         f"store_id is {str(now)[:8]}, this result's {store_id[:8]}); expected the store of this "
                         "result: read the newer result, or give each coded_map call its own out=")
    return True


def _after_check(block: np.ndarray, checked: bool) -> np.ndarray:
    """`block`, once :func:`same_store` passed (`checked`: its result, a dependency of every block)."""
    return block


def _workload_section(f: Any) -> dict[str, Any]:
    """The ``workload`` config of f: an in-memory callable or torch module, or a model file."""
    from gcc_dask.workloads import is_torch_module

    if isinstance(f, (str, os.PathLike)):
        text = os.fspath(f)
        if text.endswith(".onnx"):
            return {"kind": "onnx", "path": text}
        if text.endswith((".pt", ".pth", ".ts")):
            return {"kind": "torch", "path": text}
        if ":" in text and not os.path.exists(text):
            return {"kind": "callable", "name": text}
        raise WorkloadError(f"f: got {text!r}; expected a callable on batches, an .onnx model file, a TorchScript "
                            "file (.pt) or an import path 'module:function'")
    if is_torch_module(f):
        return {"kind": "torch", "module": f}
    if callable(f):
        return {"kind": "callable", "function": f}
    raise WorkloadError(f"f: got {type(f).__name__!r} ({f!r:.60}); expected a callable f(X) -> Y on batches, a "
                        "torch.nn.Module, or an .onnx model file")


def _source_section(X: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``source`` config of X, and how to give the estimates back (lazy, dim, index, chunks)."""
    how: dict[str, Any] = {"lazy": False, "dim": "sample", "index": None, "chunks": None}
    if isinstance(X, (str, bytes, os.PathLike)):  # np.asarray would make it a 0-d array of one string
        where = os.fspath(X) if not isinstance(X, bytes) else X.decode(errors="replace")
        hint = (f"for the Zarr array there, pass zarr.open_array({where!r}, mode='r') or "
                f"dask.array.from_zarr({where!r})" if os.path.exists(where) else "no file or folder is there")
        raise ConfigError(f"X: got the path {where!r}; expected an array of samples (NumPy, dask, xarray, Zarr or a "
                          f"DataFrame): {hint}")
    module = type(X).__module__.split(".")[0]
    if module == "xarray" and hasattr(X, "dims"):
        if X.ndim < 1:
            raise ConfigError(f"X: got a 0-d DataArray {X.name!r}; expected samples along its first dimension")
        how["dim"] = str(X.dims[0])
        if X.dims[0] in X.coords:
            how["index"] = X.coords[X.dims[0]].values
        X = X.data
        module = type(X).__module__.split(".")[0]
    if module == "zarr" and hasattr(X, "store_path"):
        how["lazy"] = True
        store = X.store_path.store
        root = getattr(store, "root", None)
        if root is not None and type(store).__name__ == "LocalStore":  # read by the workers from the files
            _check_rows(X)
            how["chunks"] = _even_chunks(X.shape[0], X.chunks[0])
            return {"kind": "zarr", "path": str(root), "array": X.store_path.path or None}, how
        import dask.array as da

        X = da.from_zarr(X)
    if callable(getattr(X, "__dask_graph__", None)):
        sizes = tuple(X.chunks[0]) if getattr(X, "chunks", None) else ()
        if any(isinstance(c, float) and math.isnan(c) for c in sizes):
            raise ConfigError(f"X: got a dask array of shape {tuple(X.shape)} whose chunk sizes are unknown (NaN, "
                              "as after boolean indexing); expected known chunk sizes: call X.compute_chunk_sizes() "
                              "first")
        _check_rows(X)
        how.update(lazy=True, chunks=tuple(int(c) for c in sizes))
        return {"kind": "array", "array": X}, how
    if module == "scipy" and hasattr(X, "toarray"):
        raise ConfigError(f"X: got a SciPy sparse {type(X).__name__} of shape {X.shape}; expected a dense array "
                          "(NumPy, dask, xarray or Zarr): pass X.toarray()")
    if not isinstance(X, np.ndarray):
        X = np.asarray(X)
    _check_rows(X)
    return {"kind": "array", "array": X}, how


def _check_rows(X: Any) -> None:
    """Refuse an X without a row (0-d, or none along its first axis), naming coded_map's argument ``X`` (the
    config's own check would name ``source.array``, which a coded_map user never wrote)."""
    shape = tuple(getattr(X, "shape", ()))
    if not shape or shape[0] == 0:
        raise ConfigError(f"X: got an array of shape {shape}; expected at least one sample (row) along its first "
                          "axis")


def _even_chunks(n: int, size: int) -> tuple[int, ...]:
    return tuple(min(size, n - start) for start in range(0, n, size))


def _temporary_store(name: str) -> str:
    """A store in a new temporary folder, removed when this Python process exits."""
    folder = tempfile.mkdtemp(prefix="gcc-dask-")
    atexit.register(shutil.rmtree, folder, True)
    return os.path.join(folder, f"{name}.zarr")


def _merged_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """:data:`CODED_MAP_DEFAULTS` with the caller's sections laid over them, key by key."""
    for key in _NOT_KEYWORDS:
        if key in config:
            what = {"source": "the data are X", "workload": "the model is f",
                    "schemes": "the schemes are the schemes= argument"}[key]
            raise ConfigError(f"{key}: got {config[key]!r:.60}; expected no {key}= keyword in coded_map ({what})")
    out: dict[str, Any] = {k: dict(v) for k, v in CODED_MAP_DEFAULTS.items()}
    for key, value in config.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value  # the config's own check says what is wrong with a non-mapping section
    return out


def coded_map(f: Callable[..., Any] | str | os.PathLike, X: Any, *, schemes: Sequence[str] = ("gcc",),
              client=None, out: str | os.PathLike | None = None,
              performance_report: str | os.PathLike | None = None, **config: Any) -> CodedResult:
    """Estimate ``f(X)`` row by row on a Dask cluster with coded computing, robust to slow workers.

    The rows of X (its first axis) are composed into groups of K similar rows; each group is encoded into N
    coded rows; N shard tasks per batch evaluate f on blocks of B of them; each batch stops at the first
    N − S results (or its deadline) and the decoder estimates f of all K·B rows (docs/own_model.rst).

    Parameters
    ----------
    f : callable, torch.nn.Module, or path
        ``f(batch) -> outputs``: a NumPy array of shape ``(m, *X.shape[1:])`` in, ``(m, *output_shape)`` float
        out (float32 or float64): a plain function, a lambda, a closure, a fitted scikit-learn estimator's
        ``predict_proba``, a ``torch.nn.Module`` (run under ``torch.inference_mode``, CUDA when the worker has
        it), an ``.onnx`` file (ONNX Runtime) or an import path ``'module:function'``. An in-memory f is
        pickled with cloudpickle and unpickled once per Dask worker, never once per task. f receives coded
        rows, mixtures of similar rows of X, so it must accept any real values of X's shape. f must not modify
        its input in place (as with ``dask.array.map_blocks``): a block that several shards evaluate on a
        worker (replication's copies, speculative's backups, several schemes in one run) is one array.
    X : numpy.ndarray, dask.array.Array, zarr.Array, xarray.DataArray, pandas or dask DataFrame
        ``(n, *sample_shape)``, real floating (float32 or float64), samples along the first axis. A NumPy array
        is sent to each worker once; a dask array is read block by block on the workers (no block of it is
        computed on this machine; unknown chunk sizes are computed first, as dask-ml does); a Zarr array on a
        local or shared file system is read from its files by the workers (another store is read through
        ``dask.array.from_zarr``); a DataArray by its data; a DataFrame ``(n, p)`` of numeric columns as an
        array (float32 when every column is, else float64; a dask DataFrame's partitions are its chunks:
        :func:`gcc_dask.frames.as_rows`). f receives arrays, never DataFrames.
    schemes : str or sequence of str
        The estimators to run on the same batches (one name is one scheme): ``gcc`` (the default), ``bacc``,
        ``bspline``, ``letcc``, ``lcc``, ``replication``, ``speculative`` (uncoded with backup copies of late
        shards, Spark's rule) or ``uncoded``; ``auto`` lets :func:`gcc_dask.advise` pick.
    client : distributed.Client, optional
        The cluster to use (never closed here). Default: the client Dask would use now
        (``distributed.default_client()``), else ``cluster=`` / ``DASK_SCHEDULER_ADDRESS``, else an embedded
        LocalCluster started for this call and closed after it.
    out : path, optional
        The run store (a folder every worker can write). Default: a new temporary folder, removed when this
        Python process exits (the lazy estimates read from it). An existing store made by the same f, X and
        config is resumed (nothing finished is recomputed); one made otherwise is refused unless
        ``store={"overwrite": True}``.
    performance_report : path, optional
        Write Dask's performance report of the run (HTML).
    **config
        Config sections as keyword arguments, checked as in a YAML pipeline (docs/configuration.rst): e.g.
        ``code={"num_inputs": 8, "num_workers": 12, "block_size": 64}``, ``cutoff={"stragglers": 3,
        "deadline": "2s"}``, ``gcc={"lambda_dec": 1e-4}``, ``run={"reference": True}``, ``name="my-job"``.
        Each section is laid over :data:`CODED_MAP_DEFAULTS` key by key.

    Returns
    -------
    CodedResult
        ``.estimates`` of shape ``(n, *output_shape)``, float32, in X's row order: NumPy for NumPy (and pandas)
        input, a dask array (lazily reading the store) for dask (array or DataFrame) and Zarr input; ``.store``, ``.summary``,
        ``.to_xarray()``.

    Raises
    ------
    gcc_dask.errors.ConfigError
        A config keyword that is unknown or invalid (one line naming the key, the value and what is valid); a
        DataFrame column that is not numeric, a Series as X, or an X without a row (0-d, or of shape (0, ...)).
    gcc_dask.errors.WorkloadError
        f cannot be pickled (named), does not fit X's rows, or returns non-floating outputs.
    gcc_dask.errors.SourceError
        X is not real floating data, or its samples hold no value (shape (n, 0)).
    gcc_dask.errors.GccDaskError
        As :func:`gcc_dask.run_pipeline` (an unreachable cluster, a store the workers cannot write, ...).

    Examples
    --------
    >>> import numpy as np, gcc_dask as gd
    >>> X = np.random.default_rng(0).normal(size=(4096, 20)).astype("float32")
    >>> res = gd.coded_map(lambda x: np.tanh(x @ np.ones((20, 3), "float32")), X)   # doctest: +SKIP
    >>> res.estimates.shape                                                          # doctest: +SKIP
    (4096, 3)
    """
    from gcc_dask.config import load_config
    from gcc_dask.pipeline import run_pipeline
    from gcc_dask.runtime.cluster import current_client

    if isinstance(schemes, str):
        schemes = (schemes,)
    if not isinstance(schemes, (list, tuple)) or not schemes:
        raise ConfigError(f"schemes: got {schemes!r}; expected a scheme name or a non-empty list of them (e.g. "
                          "('gcc',), the default)")
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise ConfigError(f"out: got {out!r}; expected a store path (str or os.PathLike) or None")
    from gcc_dask.frames import as_rows

    data = _merged_config(config)
    data["workload"] = _workload_section(f)
    data["source"], how = _source_section(as_rows(X).array)
    data["schemes"] = list(schemes)
    data.setdefault("name", "coded-map")
    store = dict(data.get("store") or {}) if isinstance(data.get("store", {}), Mapping) else data["store"]
    if isinstance(store, dict):
        if out is not None and store.get("path") is not None and os.fspath(out) != os.fspath(store["path"]):
            raise ConfigError(f"store.path: got {store['path']!r}; expected it unset when out={os.fspath(out)!r} "
                              "is given (one of the two)")
        if out is None and store.get("path") is None:
            name = data["name"] if isinstance(data["name"], str) else "coded-map"
            store["path"] = _temporary_store(name)
        elif out is not None:
            store["path"] = os.fspath(out)
        data["store"] = store
    cfg = load_config(data)
    result = run_pipeline(cfg, client=client if client is not None else current_client(),
                          performance_report=performance_report, keep_estimates=not how["lazy"])
    # the schemes that ran: ``auto`` is the one the advice chose (the run's config holds it, resolved)
    return CodedResult(run=result, schemes=tuple(getattr(result, "config", cfg).schemes), **how)
