"""The Zarr v3 results store: one store per run (DESIGN.md "The results store").

Layout::

    run.zarr/
      attrs: gcc_dask_version, created, finished, status, config, config_fingerprint, git_sha,
             versions, seed (+ num_samples, batch_size, num_batches, output_shape, schemes, ...)
      inputs/labels          (sample,)            int64   -1 where unknown
      inputs/reference       (sample, output)     float   f(x_k) computed uncoded; NaN until written
      inputs/status          (batch,)             int8    1 once the batch's inputs are written
      <scheme>/decoded       (sample, output)     float   estimates f^(x_k); NaN where undecodable
      <scheme>/received      (batch, worker)      bool    the set F used for decoding
      <scheme>/failed        (batch, worker)      bool    shards that raised or whose worker died
      <scheme>/latency_s     (batch, worker)      float64 shard start to result, s; NaN if cancelled
      <scheme>/cutoff_s      (batch,)             float64 when the cutoff fired, from the batch start, s
      <scheme>/batch_latency_s (batch,)           float64 batch start to decode done, s
      <scheme>/n_received, n_failed (batch,)      int32   -1 until written
      <scheme>/mse, rel_acc, error_estimate (batch,) float64 NaN when unknown
      <scheme>/status        (batch,)             int8    BatchStatus; written last

(with more than one output axis, ``output`` becomes ``output_0, output_1, ...``).

Who writes what. One batch owns exactly one chunk of every ``sample`` array (K rows), so Dask workers write
``decoded``, ``labels`` and ``reference`` concurrently without locks (:func:`write_decoded`,
:func:`write_inputs`; ``inputs/status`` keeps one chunk per batch for the same reason). The small per-batch
records of a scheme (``received`` ... ``status``) are written by one process only, the driver, in buffered
flushes (:meth:`RunStore.write_records`): their chunks hold :data:`BATCH_CHUNK` batches, because reading
one-row chunks back costs ~1 ms each (a 5,000-sample run took 58 s to summarise with one-batch chunks,
0.5 s with these). In every write path a batch's ``status`` is written after all its other arrays, so a
crash never leaves a batch that looks done but is not. Only the driver creates the store or edits
attributes; metadata is consolidated once, by :meth:`RunStore.finish`.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import threading
import uuid
import warnings
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from gcc_dask.errors import InvalidInputError, StoreError

__all__ = [
    "BatchStatus",
    "DONE_STATUSES",
    "RunStore",
    "check_writable",
    "open_run",
    "open_scheme",
    "write_batch",
    "write_decoded",
    "write_inputs",
]

STORE_FORMAT = 1
INPUTS = "inputs"
_MARKER = "gcc_dask_store"
#: batches per chunk of the driver-written per-batch arrays of a scheme
BATCH_CHUNK = 1024
_RECORD_LOCK = threading.Lock()  # per-batch records have one writer process; serialise its threads
_HANDLES: dict[tuple[str, int], dict[str, Any]] = {}


class BatchStatus(IntEnum):
    """Per-batch status codes stored in ``<scheme>/status`` (int8)."""

    PENDING = 0
    DECODED = 1
    DEADLINE_DECODED = 2
    UNDECODABLE = 3
    FAILED = 4


#: A batch is done (never recomputed on resume) iff its status is one of these.
DONE_STATUSES = frozenset(int(s) for s in BatchStatus if s != BatchStatus.PENDING)
_BATCH_FLOATS = ("cutoff_s", "batch_latency_s", "mse", "rel_acc", "error_estimate")


# ---------------------------------------------------------------------------------------- helpers
def _zarr():
    import zarr

    return zarr


def _local(path: str | os.PathLike) -> Path:
    text = os.fspath(path)
    if "://" in text:
        raise StoreError(f"store path: got {text!r}; expected a local or shared-filesystem path "
                         "(URLs are not supported yet)")
    return Path(text).expanduser().absolute()


def _output_dims(output_shape: tuple[int, ...]) -> tuple[str, ...]:
    if len(output_shape) == 1:
        return ("output",)
    return tuple(f"output_{i}" for i in range(len(output_shape)))


def _to_host(x: Any) -> np.ndarray:
    if type(x).__module__.split(".")[0] == "cupy":
        x = x.get()
    return np.asarray(x)


def _open_root(path: Path, mode: str = "r+"):
    """Open the root group, refusing anything that is not a gcc-dask store."""
    zarr = _zarr()
    if not (path / "zarr.json").is_file():
        what = "does not exist" if not path.exists() else "is not a Zarr v3 store"
        raise StoreError(f"store path: got {str(path)!r}; it {what} (expected a gcc-dask run store)")
    try:
        root = zarr.open_group(str(path), mode=mode, use_consolidated=False)
    except Exception as exc:  # zarr raises several types for unreadable metadata
        raise StoreError(f"store path: got {str(path)!r}; cannot open it as a Zarr group ({exc})") from None
    if root.attrs.get(_MARKER) != STORE_FORMAT:
        raise StoreError(f"store path: got {str(path)!r}; expected a gcc-dask run store (format "
                         f"{STORE_FORMAT}), found a Zarr group without the gcc-dask attributes")
    return root


def _batch_rows(attrs: Mapping[str, Any], batch: int) -> tuple[int, int]:
    num_batches = int(attrs["num_batches"])
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or not 0 <= batch < num_batches:
        raise InvalidInputError(f"batch: got {batch!r}; expected an integer in [0, {num_batches})")
    k, n = int(attrs["batch_size"]), int(attrs["num_samples"])
    return int(batch) * k, min((int(batch) + 1) * k, n)


def _rows(name: str, value: Any, start: int, stop: int, k: int, tail: tuple[int, ...]) -> np.ndarray:
    """Accept (stop - start, *tail) or a padded (K, *tail) block (trailing axes may come flattened);
    return the (stop - start) rows shaped (n, *tail)."""
    arr = _to_host(value)
    n = stop - start
    if (arr.ndim >= 1 and arr.shape[0] in (n, k) and arr.shape[1:] != tail
            and math.prod(arr.shape[1:]) == math.prod(tail)):
        arr = arr.reshape((arr.shape[0], *tail))
    if arr.shape[1:] != tail or arr.shape[0] not in (n, k):
        want = f"({n}, {', '.join(map(str, tail))})".replace(", )", ")")
        raise InvalidInputError(f"{name}: got an array of shape {arr.shape}; expected shape {want} "
                                f"(or {k} rows for a padded batch)")
    return arr[:n]


def _vector(name: str, value: Any, size: int, dtype: Any) -> np.ndarray:
    arr = _to_host(value)
    if arr.shape != (size,):
        raise InvalidInputError(f"{name}: got an array of shape {arr.shape}; expected shape ({size},)")
    return arr.astype(dtype, copy=False)


def _git_sha() -> str | None:
    """The git commit of the gcc-dask source tree, read from .git without running a process."""
    try:
        git = Path(__file__).resolve().parents[1] / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>"
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.split(":", 1)[1].strip()
        common = Path((git / "commondir").read_text().strip()) if (git / "commondir").is_file() else None
        for base in (git, (git / common) if common else None):
            if base is not None and (base / ref).is_file():
                return (base / ref).read_text().strip()
            if base is not None and (base / "packed-refs").is_file():
                for line in (base / "packed-refs").read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
    except (OSError, IndexError, ValueError):
        return None
    return None


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for dist in ("gcc-dask", "numpy", "scipy", "dask", "distributed", "zarr", "xarray", "pydantic",
                 "onnxruntime", "cupy-cuda12x", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _is_consolidated(path: Path) -> bool:
    import json

    try:
        meta = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(meta.get("consolidated_metadata"))


# ------------------------------------------------------------------------------------ worker writes
def write_batch(path: str | os.PathLike, scheme: str, batch: int, *, decoded: Any, received_mask: Any,
                latency_s: Any, cutoff_s: float, status: int, mse: float = math.nan,
                rel_acc: float = math.nan, batch_latency_s: float = math.nan,
                error_estimate: float = math.nan, failed_mask: Any = None) -> None:
    """Write one batch's results for `scheme`: its ``decoded`` rows, then its record, ``status`` last.

    The per-batch arrays are shared by :data:`BATCH_CHUNK` batches, so this is safe from many threads of
    one process (a lock serialises them), not from several processes at once: in a pipeline, workers
    call :func:`write_decoded` and the driver :meth:`RunStore.write_records`.

    Parameters
    ----------
    path : str or os.PathLike
        The run store (created by :class:`RunStore`).
    scheme : str
        A scheme group of the store.
    batch : int
        Batch index in [0, num_batches).
    decoded : array of shape (n, *output_shape) or (K, *output_shape)
        Estimates f^(x_k) for the batch's n samples (a padded last batch may pass K rows; the extra
        rows are dropped). NaN where undecodable. numpy or cupy; stored in the store's dtype.
    received_mask : array of bool, shape (N,)
        True for the workers whose results were used (the set F).
    latency_s : array of float, shape (N,)
        Seconds from shard start to result, NaN for shards that never arrived.
    cutoff_s : float
        When the cutoff fired, seconds from the batch start.
    status : int or BatchStatus
        One of DECODED, DEADLINE_DECODED, UNDECODABLE, FAILED (not PENDING).
    mse, rel_acc, batch_latency_s, error_estimate : float
        Per-batch metrics (NaN when unknown); ``batch_latency_s`` = batch start to decode done, s.
    failed_mask : array of bool, shape (N,), optional
        Shards that raised or whose worker died (erasures). Default: none failed.

    Raises
    ------
    StoreError
        If the store or the scheme group does not exist.
    InvalidInputError
        If `batch`, `status` or an array shape is out of range.
    """
    write_decoded(path, scheme, batch, decoded)
    record = {"batch": batch, "received_mask": received_mask, "latency_s": latency_s, "cutoff_s": cutoff_s,
              "status": status, "mse": mse, "rel_acc": rel_acc, "batch_latency_s": batch_latency_s,
              "error_estimate": error_estimate, "failed_mask": failed_mask}
    _write_records(_local(path), scheme, [record])


def _handles(path: Path) -> dict[str, Any]:
    """The store's root, attrs and arrays, opened once per process (re-opened when zarr.json changes)."""
    try:
        stamp = (path / "zarr.json").stat().st_mtime_ns
    except OSError:
        stamp = -1
    key = (str(path), stamp)
    cached = _HANDLES.get(key)
    if cached is None:
        root = _open_root(path)
        cached = {"root": root, "attrs": dict(root.attrs), "arrays": {}}
        if len(_HANDLES) > 32:
            _HANDLES.clear()
        _HANDLES[key] = cached
    return cached


def _array(handles: dict[str, Any], group: str, name: str):
    arrays = handles["arrays"]
    if (group, name) not in arrays:
        arrays[(group, name)] = handles["root"][group][name]
    return arrays[(group, name)]


def _scheme_checked(attrs: Mapping[str, Any], scheme: str) -> None:
    if scheme == INPUTS or scheme not in attrs["schemes"]:
        raise StoreError(f"scheme: got {scheme!r}; expected one of the store's schemes {sorted(attrs['schemes'])}")


def write_decoded(path: str | os.PathLike, scheme: str, batch: int, decoded: Any) -> None:
    """Write one batch's estimates ``<scheme>/decoded`` (its own chunk only); safe on Dask workers.

    Parameters
    ----------
    decoded : array of shape (n, *output_shape) or (K, *output_shape)
        Estimates for the batch's n samples (a padded last batch may pass K rows); NaN where undecodable.

    Raises
    ------
    StoreError, InvalidInputError
        Unknown store or scheme; batch out of range; wrong shape.
    """
    h = _handles(_local(path))
    attrs = h["attrs"]
    _scheme_checked(attrs, scheme)
    start, stop = _batch_rows(attrs, batch)
    rows = _rows("decoded", decoded, start, stop, int(attrs["batch_size"]), tuple(attrs["output_shape"]))
    out = _array(h, scheme, "decoded")
    out[start:stop] = rows.astype(out.dtype, copy=False)


def _write_records(path: Path, scheme: str, records: list[Mapping[str, Any]]) -> None:
    h = _handles(path)
    attrs = h["attrs"]
    _scheme_checked(attrs, scheme)
    n_workers = int(attrs["schemes"][scheme])
    batches = []
    for r in records:
        _batch_rows(attrs, r["batch"])
        if r["status"] not in DONE_STATUSES:
            raise InvalidInputError(f"status: got {r['status']!r}; expected one of {sorted(DONE_STATUSES)} "
                                    "(1 decoded, 2 deadline-decoded, 3 undecodable, 4 failed)")
        batches.append(int(r["batch"]))
    if len(set(batches)) != len(batches):
        raise InvalidInputError(f"records: got batches {batches!r}; expected each batch at most once")
    idx = np.asarray(batches, dtype=np.int64)
    received = np.stack([_vector("received_mask", r["received_mask"], n_workers, bool) for r in records])
    failed = np.stack([np.zeros(n_workers, bool) if r.get("failed_mask") is None
                       else _vector("failed_mask", r["failed_mask"], n_workers, bool) for r in records])
    latency = np.stack([_vector("latency_s", r["latency_s"], n_workers, np.float64) for r in records])
    columns = {
        "received": received, "failed": failed, "latency_s": latency,
        "n_received": received.sum(axis=1).astype(np.int32), "n_failed": failed.sum(axis=1).astype(np.int32),
    }
    for name in _BATCH_FLOATS:
        columns[name] = np.array([math.nan if r.get(name) is None else float(r[name]) for r in records])
    order = np.argsort(idx)
    idx = idx[order]
    with _RECORD_LOCK:
        for name, values in columns.items():
            _array(h, scheme, name).oindex[idx] = values[order]
        _write_status(_array(h, scheme, "status"), idx, np.array([int(r["status"]) for r in records], np.int8)[order])


def _write_status(status: Any, index: Any, values: np.ndarray) -> None:
    """Mark batches done: always the last write of a batch (a crash before it leaves them pending)."""
    status.oindex[np.atleast_1d(np.asarray(index, dtype=np.int64))] = np.atleast_1d(values).astype(np.int8)


def write_inputs(path: str | os.PathLike, batch: int, *, labels: Any = None, reference: Any = None) -> None:
    """Write one batch of ``inputs/labels`` and ``inputs/reference``, then ``inputs/status`` (last).

    Parameters
    ----------
    labels : array of int, shape (n,) or (K,), optional
        Ground-truth labels; required when the store has labels.
    reference : array of shape (n, *output_shape) or (K, *output_shape), optional
        f(x_k) computed uncoded; required when the store has a reference.
    """
    h = _handles(_local(path))
    attrs = h["attrs"]
    start, stop = _batch_rows(attrs, batch)
    k, tail = int(attrs["batch_size"]), tuple(attrs["output_shape"])
    for name, value, shape_tail in (("labels", labels, ()), ("reference", reference, tail)):
        present = bool(attrs[f"has_{name}"])
        if present and value is None:
            raise InvalidInputError(f"{name}: got None; expected an array, the store records {name}")
        if not present and value is not None:
            raise InvalidInputError(f"{name}: got an array; expected None (store made without {name})")
        if present:
            rows = _rows(name, value, start, stop, k, shape_tail)
            out = _array(h, INPUTS, name)
            out[start:stop] = rows.astype(out.dtype, copy=False)
    _write_status(_array(h, INPUTS, "status"), batch, np.array([1], np.int8))


# ----------------------------------------------------------------------------------------- RunStore
class RunStore:
    """The driver's handle on a run store: create, resume, inspect and finish it.

    Use :meth:`create`, :meth:`open` or :meth:`open_or_create`; workers use :func:`write_batch`.
    """

    def __init__(self, path: str | os.PathLike, *, resumed: bool = False, _root: Any = None):
        self.path = _local(path)
        self.resumed = resumed
        self._root = _root if _root is not None else _open_root(self.path)

    def __repr__(self) -> str:
        return (f"RunStore({str(self.path)!r}, status={self.attrs.get('status')!r}, "
                f"schemes={self.schemes}, num_batches={self.num_batches})")

    # ------------------------------------------------------------------------------- construction
    @classmethod
    def create(cls, path: str | os.PathLike, *, config_resolved: Mapping[str, Any], fingerprint: str,
               schemes: Mapping[str, int], num_samples: int, batch_size: int,
               output_shape: Iterable[int], has_labels: bool, has_reference: bool, seed: int,
               overwrite: bool = False, dtype: Any = "float32",
               scheme_attrs: Mapping[str, Mapping[str, Any]] | None = None,
               attrs: Mapping[str, Any] | None = None) -> RunStore:
        """Create an empty store with every array of the layout (all batches pending).

        Parameters
        ----------
        path : str or os.PathLike
            Directory of the new store (``*.zarr``).
        config_resolved : mapping
            JSON-able resolved config (``PipelineConfig.resolved()``), stored as ``attrs["config"]``.
        fingerprint : str
            ``PipelineConfig.fingerprint()``; a resume with another fingerprint is refused.
        schemes : mapping of str to int
            Scheme name -> number of workers N (the width of its ``worker`` axis).
        num_samples : int
            Length of the ``sample`` axis (>= 1).
        batch_size : int
            K, samples per batch; ``num_batches = ceil(num_samples / K)``.
        output_shape : tuple of int
            Shape of one f(x) (the trailing axes of ``decoded`` and ``reference``).
        has_labels, has_reference : bool
            Whether ``inputs/labels`` / ``inputs/reference`` are created.
        seed : int
            The run seed (root attribute).
        overwrite : bool
            Replace an existing gcc-dask store at `path` (other directories are never deleted).
        dtype : numpy dtype, default float32
            dtype of ``decoded`` and ``reference``.
        scheme_attrs, attrs : mapping, optional
            Extra JSON-able attributes per scheme group / for the root.

        Raises
        ------
        StoreError
            If `path` exists (and `overwrite` is false or it is not a gcc-dask store), or cannot be
            written.
        InvalidInputError
            If a size or scheme name is invalid.
        """
        path = _local(path)
        output_shape = tuple(int(s) for s in output_shape)
        _check_layout(schemes, num_samples, batch_size, output_shape)
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # an empty directory (e.g. made by mkdtemp) is as good as nothing
        if path.exists():
            if not overwrite:
                raise StoreError(f"store path: got {str(path)!r}; it already exists (resume it, or pass "
                                 "--overwrite / store.overwrite: true to start over)")
            _remove_store(path)
        k, n = int(batch_size), int(num_samples)
        num_batches = -(-n // k)
        root_attrs = {
            _MARKER: STORE_FORMAT,
            "gcc_dask_version": _versions().get("gcc-dask", "unknown"),
            "created": _now(),
            "finished": None,
            "status": "running",
            "config": dict(config_resolved),
            "config_fingerprint": str(fingerprint),
            "git_sha": _git_sha(),
            "versions": _versions(),
            "seed": int(seed),
            "num_samples": n,
            "batch_size": k,
            "num_batches": num_batches,
            "output_shape": list(output_shape),
            "schemes": {str(s): int(w) for s, w in schemes.items()},
            "has_labels": bool(has_labels),
            "has_reference": bool(has_reference),
            "dtype": np.dtype(dtype).name,
            "resumed_at": [],
            **dict(attrs or {}),
        }
        # built next to its final place and renamed into it: a reader (or a resume after a crash) sees the
        # whole layout or no store at all, never a root whose groups or arrays are still missing
        tmp = path.parent / f".{path.name}.creating-{uuid.uuid4().hex[:8]}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            root = _zarr().open_group(str(tmp), mode="w-", attributes=root_attrs)
            _create_arrays(root, schemes, n, k, num_batches, output_shape, np.dtype(dtype),
                           has_labels, has_reference, scheme_attrs or {})
            os.rename(tmp, path)
        except (OSError, PermissionError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StoreError(f"store path: got {str(path)!r}; cannot create the store there ({exc})") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls(path)

    @classmethod
    def open(cls, path: str | os.PathLike) -> RunStore:
        """Open an existing store for the driver. Raises StoreError if missing or not a gcc-dask store."""
        return cls(path)

    @classmethod
    def open_or_create(cls, path: str | os.PathLike, *, fingerprint: str, overwrite: bool = False,
                       **create_kwargs: Any) -> RunStore:
        """Resume the store at `path` if it was made by the same config, else create it.

        Takes the arguments of :meth:`create`. With ``overwrite=True`` an existing gcc-dask store is
        replaced. The returned store has ``resumed=True`` when existing batches were kept.

        Raises
        ------
        StoreError
            If `path` holds a store from a different config (another fingerprint) or with another
            layout, or something that is not a gcc-dask store.
        """
        path = _local(path)
        if overwrite or not path.exists() or (path.is_dir() and not any(path.iterdir())):
            return cls.create(path, fingerprint=fingerprint, overwrite=overwrite, **create_kwargs)
        store = cls(path)
        old = store.attrs.get("config_fingerprint")
        if old != fingerprint:
            raise StoreError(f"store path: got {str(path)!r}, a run made by a different configuration "
                             f"(fingerprint {str(old)[:12]}, this config {fingerprint[:12]}); pass "
                             "--overwrite (store.overwrite: true) to replace it, or choose another --out")
        want = {"num_samples": int(create_kwargs.get("num_samples", store.num_samples)),
                "batch_size": int(create_kwargs.get("batch_size", store.batch_size)),
                "output_shape": [int(s) for s in create_kwargs.get("output_shape", store.output_shape)],
                "schemes": {str(s): int(w) for s, w in create_kwargs.get("schemes", store.schemes).items()},
                "has_labels": bool(create_kwargs.get("has_labels", store.attrs["has_labels"])),
                "has_reference": bool(create_kwargs.get("has_reference", store.attrs["has_reference"])),
                "dtype": np.dtype(create_kwargs.get("dtype", store.attrs["dtype"])).name}
        for key, value in want.items():
            if store.attrs.get(key) != value:
                raise StoreError(f"store path: got {str(path)!r} with {key}={store.attrs.get(key)!r}; this "
                                 f"run needs {key}={value!r} (the input data changed?); pass --overwrite "
                                 "to replace it")
        store.update_attrs(status="running", finished=None,
                           resumed_at=[*store.attrs.get("resumed_at", []), _now()])
        store.resumed = True
        return store

    # ------------------------------------------------------------------------------------ queries
    @property
    def attrs(self) -> dict[str, Any]:
        """The root attributes (a copy)."""
        return dict(self._root.attrs)

    @property
    def num_batches(self) -> int:
        return int(self._root.attrs["num_batches"])

    @property
    def num_samples(self) -> int:
        return int(self._root.attrs["num_samples"])

    @property
    def batch_size(self) -> int:
        return int(self._root.attrs["batch_size"])

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(self._root.attrs["output_shape"])

    @property
    def schemes(self) -> dict[str, int]:
        """Scheme name -> number of workers."""
        return dict(self._root.attrs["schemes"])

    def batch_rows(self, batch: int) -> tuple[int, int]:
        """The ``[start, stop)`` sample rows of `batch`."""
        return _batch_rows(self._root.attrs, batch)

    def batch_status(self, scheme: str) -> np.ndarray:
        """Status of every batch of `scheme` (or ``"inputs"``): int8 array of shape (num_batches,)."""
        return np.asarray(self._group(scheme)["status"][:], dtype=np.int8)

    def pending_batches(self, scheme: str) -> np.ndarray:
        """Indices (int64, ascending) of the batches of `scheme` that are not done (status 0)."""
        return np.flatnonzero(~np.isin(self.batch_status(scheme), list(DONE_STATUSES))).astype(np.int64)

    def read_batch(self, scheme: str, batch: int) -> dict[str, np.ndarray]:
        """Every array of `scheme` restricted to `batch` (decoded: its samples; others: its row)."""
        start, stop = self.batch_rows(batch)
        group = self._group(scheme)
        out = {}
        for name, arr in group.arrays():
            dims = arr.metadata.dimension_names or ()
            if dims and dims[0] == "sample":
                out[name] = arr[start:stop]
            else:
                out[name] = arr[batch]
        return out

    def _group(self, scheme: str):
        if scheme != INPUTS and scheme not in self.schemes:
            raise StoreError(f"scheme: got {scheme!r}; expected one of {sorted(self.schemes)} or 'inputs'")
        return self._root[scheme]

    # ------------------------------------------------------------------------------ driver edits
    def update_attrs(self, **attrs: Any) -> None:
        """Set root attributes (driver only; JSON-able values)."""
        self._root.attrs.update(attrs)

    def set_scheme_attrs(self, scheme: str, **attrs: Any) -> None:
        """Set attributes of a scheme group (driver only; JSON-able values)."""
        self._group(scheme).attrs.update(attrs)

    def write_inputs(self, batch: int, labels: Any = None, reference: Any = None) -> None:
        """Write one batch of inputs (see :func:`write_inputs`)."""
        write_inputs(self.path, batch, labels=labels, reference=reference)

    def write_batch(self, scheme: str, batch: int, **kwargs: Any) -> None:
        """Write one batch of `scheme` (see :func:`write_batch`)."""
        write_batch(self.path, scheme, batch, **kwargs)

    def write_records(self, scheme: str, records: Iterable[Mapping[str, Any]]) -> None:
        """Write many batches' per-batch records of `scheme` at once (driver only), ``status`` last.

        Each record is a mapping with ``batch``, ``received_mask`` (N,) bool, ``latency_s`` (N,) float s,
        ``cutoff_s``, ``status`` and optionally ``failed_mask``, ``mse``, ``rel_acc``,
        ``batch_latency_s``, ``error_estimate``. Write the batches' ``decoded`` first
        (:func:`write_decoded`): a record's status marks its batch done.
        """
        records = list(records)
        if records:
            _write_records(self.path, scheme, records)

    def finish(self, status: str = "complete") -> None:
        """Mark the run finished (``status``, ``finished`` attrs) and consolidate the metadata once."""
        if status not in ("complete", "incomplete", "failed", "interrupted", "cancelled"):
            raise InvalidInputError(f"status: got {status!r}; expected 'complete', 'incomplete', 'failed', "
                                    "'interrupted' or 'cancelled'")
        self.update_attrs(status=status, finished=_now())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "consolidated metadata is not part of the v3 spec"
            _zarr().consolidate_metadata(str(self.path))
        self._root = _open_root(self.path)


def _check_layout(schemes: Mapping[str, int], num_samples: int, batch_size: int,
                  output_shape: tuple[int, ...]) -> None:
    for name, value in (("num_samples", num_samples), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidInputError(f"{name}: got {value!r}; expected an integer >= 1")
    if any(s < 1 for s in output_shape):
        raise InvalidInputError(f"output_shape: got {output_shape!r}; expected positive sizes")
    if not schemes:
        raise InvalidInputError(f"schemes: got {dict(schemes)!r}; expected at least one scheme")
    for scheme, workers in schemes.items():
        if not isinstance(scheme, str) or not scheme or scheme == INPUTS or "/" in scheme \
                or scheme.startswith("."):
            raise InvalidInputError(f"schemes: got scheme name {scheme!r}; expected a name other than "
                                    "'inputs', without '/'")
        if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
            raise InvalidInputError(f"schemes[{scheme!r}]: got {workers!r}; expected a worker count >= 1")


def _create_arrays(root: Any, schemes: Mapping[str, int], n: int, k: int, num_batches: int,
                   output_shape: tuple[int, ...], dtype: np.dtype, has_labels: bool,
                   has_reference: bool, scheme_attrs: Mapping[str, Mapping[str, Any]]) -> None:
    out_dims = _output_dims(output_shape)
    sample_spec = ((n, *output_shape), (k, *output_shape), ("sample", *out_dims))

    bchunk = min(num_batches, BATCH_CHUNK)

    def batch_array(group, name, dtype_, fill, chunk=bchunk):
        group.create_array(name, shape=(num_batches,), chunks=(chunk,), dtype=dtype_, fill_value=fill,
                           dimension_names=("batch",))

    inputs = root.create_group(INPUTS, attributes={"description": "ground truth for evaluation"})
    if has_labels:
        inputs.create_array("labels", shape=(n,), chunks=(k,), dtype="int64", fill_value=-1,
                            dimension_names=("sample",))
    if has_reference:
        inputs.create_array("reference", shape=sample_spec[0], chunks=sample_spec[1], dtype=dtype,
                            fill_value=np.nan, dimension_names=sample_spec[2])
    batch_array(inputs, "status", "int8", 0, chunk=1)  # written by workers: one chunk per batch
    for scheme, workers in schemes.items():
        workers = int(workers)
        group = root.create_group(scheme, attributes={"scheme": scheme, "num_inputs": k,
                                                      "num_workers": workers,
                                                      **dict(scheme_attrs.get(scheme, {}))})
        group.create_array("decoded", shape=sample_spec[0], chunks=sample_spec[1], dtype=dtype,
                           fill_value=np.nan, dimension_names=sample_spec[2])
        for name, dtype_, fill in (("received", "bool", False), ("failed", "bool", False),
                                   ("latency_s", "float64", np.nan)):
            group.create_array(name, shape=(num_batches, workers), chunks=(bchunk, workers), dtype=dtype_,
                               fill_value=fill, dimension_names=("batch", "worker"))
        for name in _BATCH_FLOATS:
            batch_array(group, name, "float64", np.nan)
        batch_array(group, "n_received", "int32", -1)
        batch_array(group, "n_failed", "int32", -1)
        batch_array(group, "status", "int8", 0)


def _remove_store(path: Path) -> None:
    """Delete `path` only if it is a gcc-dask store or an empty directory."""
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
        return
    _open_root(path)  # raises StoreError for anything that is not ours
    shutil.rmtree(path)


# ---------------------------------------------------------------------------------------- readers
def open_scheme(path: str | os.PathLike, scheme: str, *, inputs: bool = False, **kwargs: Any):
    """Open one scheme group as an :class:`xarray.Dataset` (lazy, dask-backed).

    Parameters
    ----------
    inputs : bool
        Also attach ``labels`` (sample,) and ``reference`` (sample, output) from the inputs group.
    **kwargs
        Passed to :func:`xarray.open_zarr`.
    """
    import xarray as xr

    path = _local(path)
    root = _open_root(path, mode="r")
    if scheme not in root.attrs["schemes"] and scheme != INPUTS:
        raise StoreError(f"scheme: got {scheme!r}; expected one of {sorted(root.attrs['schemes'])}")
    kwargs.setdefault("consolidated", _is_consolidated(path))
    ds = xr.open_zarr(str(path), group=scheme, **kwargs)
    if inputs and scheme != INPUTS:
        extra = xr.open_zarr(str(path), group=INPUTS, **kwargs).drop_vars("status")
        ds = ds.merge(extra)
    return ds


def open_run(path: str | os.PathLike, **kwargs: Any):
    """Open a run store as an :class:`xarray.DataTree` (root attrs, ``/inputs`` and one node per scheme).

    Falls back to a ``dict`` of group name -> Dataset where xarray has no DataTree.
    `kwargs` are passed to :func:`xarray.open_datatree` (``engine="zarr"``).

    Raises
    ------
    StoreError
        If `path` is missing or not a gcc-dask store.
    """
    import xarray as xr

    path = _local(path)
    root = _open_root(path, mode="r")
    kwargs.setdefault("consolidated", _is_consolidated(path))
    if hasattr(xr, "open_datatree"):
        return xr.open_datatree(str(path), engine="zarr", **kwargs)
    return {name: xr.open_zarr(str(path), group=name, **kwargs)
            for name in (INPUTS, *root.attrs["schemes"])}


def check_writable(path: str | os.PathLike, *, must_exist: bool = False) -> str:
    """Check that this process can create files at `path` (run it on every worker).

    Writes and removes a small probe file in `path` (or, when `path` does not exist yet, in its
    nearest existing parent directory).

    Parameters
    ----------
    must_exist : bool
        Also require `path` itself to exist (a worker checking a store the driver just created:
        a worker on another machine without the shared filesystem fails here).

    Returns
    -------
    str
        The absolute path.

    Raises
    ------
    StoreError
        If the path is missing (with `must_exist`) or not writable.
    """
    target = _local(path)
    if target.exists() and not target.is_dir():
        raise StoreError(f"store path: got {str(target)!r}; it is a file, expected a directory")
    if must_exist and not target.is_dir():
        raise StoreError(f"store path: got {str(target)!r}; it does not exist on this machine (the "
                         "store path must be on a filesystem shared by the driver and every worker)")
    probe_dir = target
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    probe = probe_dir / f".gcc-dask-probe-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StoreError(f"store path: got {str(target)!r}; expected a path this process can write "
                         f"({type(exc).__name__}: {exc.strerror or exc})") from None
    return str(target)
