"""Writes from Dask workers (``decoded``, inputs) and the driver's buffered per-batch records."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gcc_dask.errors import InvalidInputError, StoreError

from .layout import _BATCH_FLOATS, DONE_STATUSES, INPUTS, _batch_rows, _local, _open_root, _rows, _vector

_RECORD_LOCK = threading.Lock()  # per-batch records have one writer process; serialise its threads
_HANDLES: dict[tuple[str, int], dict[str, Any]] = {}


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
    decoded : array of shape ``(n, *output_shape)`` or ``(K, *output_shape)``
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


def _present(handles: dict[str, Any], group: str, name: str) -> bool:
    """Whether the store has array ``group/name`` (cached with the handles)."""
    key = ("present", group, name)
    arrays = handles["arrays"]
    if key not in arrays:
        try:
            _array(handles, group, name)
            arrays[key] = True
        except KeyError:
            arrays[key] = False
    return arrays[key]


def _scheme_checked(attrs: Mapping[str, Any], scheme: str) -> None:
    if scheme == INPUTS or scheme not in attrs["schemes"]:
        raise StoreError(f"scheme: got {scheme!r}; expected one of the store's schemes {sorted(attrs['schemes'])}")


def write_decoded(path: str | os.PathLike, scheme: str, batch: int, decoded: Any, filled: Any = None) -> None:
    """Write one batch's estimates ``<scheme>/decoded`` (its own chunk only); safe on Dask workers.

    Parameters
    ----------
    decoded : array of shape ``(n, *output_shape)`` or ``(K, *output_shape)``
        Estimates for the batch's n samples (a padded last batch may pass K rows); NaN where undecodable.
    filled : array of bool, shape (n,), optional
        The samples whose estimate a fill took from other samples' results (``<scheme>/filled``); None: none
        (the array keeps its fill value, False).

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
    if filled is not None:
        _array(h, scheme, "filled")[start:stop] = _vector("filled", filled, stop - start, bool)


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
    if _present(h, scheme, "n_backups"):  # a store made before the array existed is resumed without it
        columns["n_backups"] = np.array([int(r.get("n_backups", 0)) for r in records], dtype=np.int32)
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
    reference : array of shape ``(n, *output_shape)`` or ``(K, *output_shape)``, optional
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
