"""Writes from Dask workers (``decoded``, inputs) and the driver's buffered per-batch records."""

from __future__ import annotations

import math
import os
import re
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gcc_dask.errors import InvalidInputError, StoreError, WriteRefusedError

from .integrity import chunk_crc, chunk_digest
from .layout import (_BATCH_FLOATS, DIGEST, DONE_STATUSES, INPUTS, STORE_ID_ATTR, Concurrently, _batch_rows, _local,
                     _open_root, _rows, _vector, bound_arrays, writable)

#: root attribute holding the identity of the driver session that writes the store (a new one at every
#: create and resume): a write that carries another one is refused (:class:`WriteRefusedError`)
TOKEN_ATTR = "run_token"

_RECORD_LOCK = threading.Lock()  # per-batch records have one writer process; serialise its threads
_HANDLES: dict[tuple[str, Any], dict[str, Any]] = {}


# ------------------------------------------------------------------------------------ worker writes
def write_batch(path: str | os.PathLike, scheme: str, batch: int, *, decoded: Any, received_mask: Any,
                latency_s: Any, cutoff_s: float, status: int, mse: float = math.nan,
                rel_acc: float = math.nan, batch_latency_s: float = math.nan,
                error_estimate: float = math.nan, failed_mask: Any = None, token: str | None = None) -> None:
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
    token : str, optional
        The writing run's identity (:attr:`RunStore.token`); when given, the write is refused unless the
        store still carries it.

    Raises
    ------
    StoreError
        If the store or the scheme group does not exist, or a file cannot be written (naming the array).
    WriteRefusedError
        If `token` is not the store's.
    InvalidInputError
        If `batch`, `status` or an array shape is out of range.
    """
    digest = write_decoded(path, scheme, batch, decoded, token=token)
    record = {"batch": batch, "chunk_digest": digest, "received_mask": received_mask, "latency_s": latency_s, "cutoff_s": cutoff_s,
              "status": status, "mse": mse, "rel_acc": rel_acc, "batch_latency_s": batch_latency_s,
              "error_estimate": error_estimate, "failed_mask": failed_mask}
    _write_records(_local(path), scheme, [record], token=token)


#: where this process can name an open folder by its file descriptor (Linux): the writes' handles then follow
#: the folder they opened, whatever is renamed or removed at its path afterwards (:func:`_open_for_writes`)
_FD_PATHS = Path("/proc/self/fd")


def _open_for_writes(path: Path) -> Any:
    """The store's root group, opened for writes through a file descriptor of its folder where the system has
    one (``/proc/self/fd/N``): a write through it lands in the store that was opened, or fails, and never
    creates anything at `path` once that store has been moved, removed or replaced (``--overwrite`` renames the
    old store aside first). Elsewhere, by its path. Raises StoreError for anything but a gcc-dask store."""
    root = _open_root(path)  # names what is wrong with `path`
    if not _FD_PATHS.is_dir():
        return root
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return root
    try:
        by_fd = _zarr_group(f"{_FD_PATHS}/{fd}")
        weakref.finalize(by_fd.store, os.close, fd)  # closed when nothing writes through it any more
    except Exception:
        os.close(fd)
        return root
    return by_fd


def _zarr_group(where: str) -> Any:
    import zarr

    return zarr.open_group(where, mode="r+", use_consolidated=False)


def _handles(path: Path, token: str | None = None) -> dict[str, Any]:
    """The store's root, attrs and arrays, opened once per process (:func:`_open_for_writes`; opened again when
    the ``zarr.json`` at `path` changes: zarr replaces that file on every edit, and a store created anew at the
    same path has its own).

    With `token`, the store at `path` must carry it (checked on every call, right before the caller writes): a
    store removed, moved, or replaced by another run raises :class:`~gcc_dask.errors.WriteRefusedError`, and
    nothing is written (zarr would otherwise create the folders of the chunk, a skeleton of a store where there
    is none)."""
    try:
        st = (path / "zarr.json").stat()
        stamp = (st.st_ino, st.st_mtime_ns)
    except OSError:
        if token is not None:
            raise WriteRefusedError(f"store path: got {str(path)!r}; the store is gone (removed or moved while "
                                    "this run was writing it): nothing was written; run the same command again "
                                    "to start a new store there") from None
        stamp = None
    key = (str(path), stamp)
    cached = _HANDLES.get(key)
    if cached is None:
        root = _open_for_writes(path)
        cached = {"root": root, "attrs": dict(root.attrs), "arrays": {}, "path": path}
        if len(_HANDLES) > 32:
            _HANDLES.clear()
        _HANDLES[key] = cached
    if token is not None and cached["attrs"].get(TOKEN_ATTR) != token:
        raise WriteRefusedError(f"store path: got {str(path)!r}, which another run now writes (its token "
                                f"{str(cached['attrs'].get(TOKEN_ATTR))[:8]}, this run's {str(token)[:8]}; it was "
                                "replaced with --overwrite or resumed): nothing was written")
    return cached


def _array(handles: dict[str, Any], group: str, name: str):
    arrays = handles["arrays"]
    if (group, name) not in arrays:
        try:
            arrays[(group, name)] = writable(handles["root"][group][name])
        except Exception as e:  # a group or array whose metadata is gone or damaged
            raise StoreError(f"store path: got {str(handles['path'])!r}; cannot open its "
                             f"array {group}/{name} to write it ({type(e).__name__}: {e}); the store is damaged: "
                             "pass --overwrite to start over") from None
    return arrays[(group, name)]


def _present(handles: dict[str, Any], group: str, name: str) -> bool:
    """Whether the store has array ``group/name`` (cached with the handles): a store made before the array
    existed is written without it."""
    key = ("present", group, name)
    arrays = handles["arrays"]
    if key not in arrays:
        try:
            arrays[key] = name in handles["root"][group]
        except KeyError:  # no such group: :func:`_array` names what is damaged when it is written
            arrays[key] = False
    return arrays[key]


def _scheme_checked(attrs: Mapping[str, Any], scheme: str) -> None:
    if scheme == INPUTS or scheme not in attrs["schemes"]:
        raise StoreError(f"scheme: got {scheme!r}; expected one of the store's schemes {sorted(attrs['schemes'])}")


def write_decoded(path: str | os.PathLike, scheme: str, batch: int, decoded: Any, filled: Any = None, *,
                  token: str | None = None) -> np.ndarray | None:
    """Write one batch's estimates ``<scheme>/decoded`` (its own chunk only); safe on Dask workers.

    Returns the batch's ``chunk_digest`` row, uint64 (2,), which binds the chunks just written (``decoded``,
    ``filled``) to this store, their arrays and their place: pass it with the batch's record
    (``record["chunk_digest"]``, :meth:`RunStore.write_records`) so that a resume can tell a chunk moved or
    copied there (:func:`~.integrity.misplaced_chunks`); None for a store made without digests.

    Parameters
    ----------
    decoded : array of shape ``(n, *output_shape)`` or ``(K, *output_shape)``
        Estimates for the batch's n samples (a padded last batch may pass K rows); NaN where undecodable.
    filled : array of bool, shape (n,), optional
        The samples whose estimate a fill took from other samples' results (``<scheme>/filled``); None: none
        (the array keeps its fill value, False).
    token : str, optional
        The writing run's identity (:attr:`RunStore.token`): when given, the write is refused unless the
        store still carries it (checked right before the chunk is written).

    Raises
    ------
    StoreError, InvalidInputError
        Unknown store or scheme; batch out of range; wrong shape.
    WriteRefusedError
        The store is gone, or carries another run's token.
    """
    path = _local(path)
    attrs = _handles(path, token)["attrs"]
    _scheme_checked(attrs, scheme)
    start, stop = _batch_rows(attrs, batch)
    rows = _rows("decoded", decoded, start, stop, int(attrs["batch_size"]), tuple(attrs["output_shape"]))
    h = _handles(path, token)  # the token checked right before the write
    out = _array(h, scheme, "decoded")
    with _naming_failures(path, f"{scheme}/decoded", np.array([batch])):
        with np.errstate(over="ignore"):  # beyond float32: ±inf, said once by the run
            out[start:stop] = rows.astype(out.dtype, copy=False)
    if filled is not None:
        with _naming_failures(path, f"{scheme}/filled", np.array([batch])):
            _array(h, scheme, "filled")[start:stop] = _vector("filled", filled, stop - start, bool)
    _still_there(h, path, scheme, ("decoded",) + (("filled",) if filled is not None else ()), batch)
    return _digests(h, scheme, batch, ("decoded",) + (("filled",) if filled is not None else ()))


_GONE = ("store path: got {path!r}; the store is gone (removed or moved while this run was writing it): nothing "
         "was written; run the same command again to start a new store there")


def _still_there(h: dict[str, Any], path: Path, group: str, names: tuple[str, ...], batch: int) -> None:
    """After a worker wrote batch `batch`'s chunks of `names`: the store it wrote into still has its root
    ``zarr.json``. A store removed while the chunk was written (``rm -r`` lists a folder, then a late write puts a
    chunk in it, then the folder cannot be removed) would otherwise keep that chunk where the store was: those
    chunks, and the folders made for them, are removed again, and the write is refused."""
    folder = Path(str(h["root"].store.root))
    if (folder / "zarr.json").is_file():
        return
    for name in names:
        arr = _array(h, group, name)
        chunk = folder / group / name / arr.metadata.encode_chunk_key((int(batch),) + (0,) * (arr.ndim - 1))
        try:
            chunk.unlink()
        except OSError:
            pass
        parent = chunk.parent
        while parent != folder and folder in parent.parents:
            try:
                parent.rmdir()  # only an empty one: what this write made
            except OSError:
                break
            parent = parent.parent
    raise WriteRefusedError(_GONE.format(path=str(path)))


def _digests(h: dict[str, Any], group: str, batch: int, written: tuple[str, ...]) -> np.ndarray | None:
    """The ``chunk_digest`` row of `batch` in `group`: uint64 (2,), for each bound array
    (:func:`~.layout.bound_arrays`) the digest of its chunk just written (:func:`~.integrity.chunk_digest`, the
    ``crc32c`` read back from the file: 4 bytes), 0 for one not written now. None for a store made without
    digests."""
    store_id = h["attrs"].get(STORE_ID_ATTR)
    if not store_id or not _present(h, group, DIGEST):
        return None
    folder = Path(str(h["root"].store.root))  # where the writes went (/proc/self/fd/N: the store opened)
    digests = np.zeros(2, dtype=np.uint64)
    for i, name in enumerate(bound_arrays(group)):
        if name in written:
            arr = _array(h, group, name)
            key = arr.metadata.encode_chunk_key((int(batch),) + (0,) * (arr.ndim - 1))
            crc = chunk_crc(folder / group / name / key)
            if crc is not None:
                digests[i] = chunk_digest(str(store_id), f"{group}/{name}", key, crc)
    return digests


def _write_records(path: Path, scheme: str, records: list[Mapping[str, Any]], token: str | None = None) -> None:
    h = _handles(path, token)
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
    if _present(h, scheme, DIGEST):  # what write_decoded returned; 0 (not checked) for a batch without it
        columns[DIGEST] = np.stack([np.zeros(2, np.uint64) if r.get(DIGEST) is None
                                    else _vector(DIGEST, r[DIGEST], 2, np.uint64) for r in records])
    for name in _BATCH_FLOATS:
        columns[name] = np.array([math.nan if r.get(name) is None else float(r[name]) for r in records])
    order = np.argsort(idx)
    idx = idx[order]
    status = np.array([int(r["status"]) for r in records], np.int8)[order]
    def write(name: str, values: np.ndarray) -> None:
        with _naming_failures(path, f"{scheme}/{name}", idx):
            _array(h, scheme, name).oindex[idx] = values[order]

    with _RECORD_LOCK:
        h = _handles(path, token)
        # the columns at once (each write is a few file-system round trips through zarr's event loop: the last
        # flush of a run took 50-130 ms one array after another), then, once all are written, the status
        with Concurrently() as run:
            for name, values in columns.items():
                run(write, name, values)
        with _naming_failures(path, f"{scheme}/status", idx):
            _write_status(_array(h, scheme, "status"), idx, status)


class _naming_failures:
    """``with _naming_failures(path, "gcc/status", batches):`` turns a file-system failure of the write inside
    (``OSError``: a full disk, a read-only mount, a file where a chunk folder should be) into one
    :class:`StoreError` line naming the store, the array and the batches."""

    def __init__(self, path: Path, name: str, batches: np.ndarray | None) -> None:
        self.path, self.name, self.batches = path, name, batches

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and issubclass(exc_type, OSError) and not (self.path / "zarr.json").is_file():
            # the folder written through was removed under the write: the store is gone, not the disk at fault
            raise WriteRefusedError(_GONE.format(path=str(self.path))) from None
        if exc_type is not None and issubclass(exc_type, OSError):
            b = self.batches
            which = "" if b is None else f" of batch {int(b[0])}" if b.size == 1 else \
                f" of batches {int(b.min())}-{int(b.max())}"
            # the file named by the store's path, not by the descriptor the write went through (_open_for_writes)
            why = _FD_PATH_RE.sub(str(self.path).replace("\\", "\\\\"), f"{exc_type.__name__}: {exc}")
            raise StoreError(f"store: cannot write {self.name}{which} to {str(self.path)!r} ({why}); fix the "
                             "store's file system (space, permissions) and run the same command again to "
                             "resume") from None


#: ``/proc/self/fd/N``, as it appears in the errors of a write through :func:`_open_for_writes`
_FD_PATH_RE = re.compile(r"/proc/self/fd/\d+")


def _write_status(status: Any, index: Any, values: np.ndarray) -> None:
    """Mark batches done: always the last write of a batch (a crash before it leaves them pending)."""
    status.oindex[np.atleast_1d(np.asarray(index, dtype=np.int64))] = np.atleast_1d(values).astype(np.int8)


def write_inputs(path: str | os.PathLike, batch: int, *, labels: Any = None, reference: Any = None,
                 token: str | None = None) -> None:
    """Write one batch of ``inputs/labels`` and ``inputs/reference``, then ``inputs/status`` (last).

    Parameters
    ----------
    labels : array of int, shape (n,) or (K,), optional
        Ground-truth labels; required when the store has labels.
    reference : array of shape ``(n, *output_shape)`` or ``(K, *output_shape)``, optional
        f(x_k) computed uncoded; required when the store has a reference.
    token : str, optional
        The writing run's identity (:attr:`RunStore.token`): when given, each array's write is refused unless
        the store still carries it.

    Raises
    ------
    WriteRefusedError
        The store is gone, or carries another run's token.
    """
    path = _local(path)
    attrs = _handles(path, token)["attrs"]
    start, stop = _batch_rows(attrs, batch)
    k, tail = int(attrs["batch_size"]), tuple(attrs["output_shape"])
    rows = {}
    for name, value, shape_tail in (("labels", labels, ()), ("reference", reference, tail)):
        present = bool(attrs[f"has_{name}"])
        if present and value is None:
            raise InvalidInputError(f"{name}: got None; expected an array, the store records {name}")
        if not present and value is not None:
            raise InvalidInputError(f"{name}: got an array; expected None (store made without {name})")
        if present:
            rows[name] = _rows(name, value, start, stop, k, shape_tail)
    for name, values in rows.items():
        h = _handles(path, token)  # the token checked right before each write
        out = _array(h, INPUTS, name)
        with _naming_failures(path, f"{INPUTS}/{name}", np.array([batch])):
            with np.errstate(over="ignore"):  # beyond float32: ±inf, said once by the run
                out[start:stop] = values.astype(out.dtype, copy=False)
        _still_there(h, path, INPUTS, (name,), batch)
    digests = _digests(_handles(path, token), INPUTS, batch, tuple(rows))
    if digests is not None:  # with the batch's chunks, before its status (one chunk per batch: workers write it)
        with _naming_failures(path, f"{INPUTS}/{DIGEST}", np.array([batch])):
            _array(_handles(path, token), INPUTS, DIGEST)[batch:batch + 1] = digests[None]
    h = _handles(path, token)
    with _naming_failures(path, f"{INPUTS}/status", np.array([batch])):
        _write_status(_array(h, INPUTS, "status"), batch, np.array([1], np.int8))
    _still_there(h, path, INPUTS, (DIGEST, "status") if digests is not None else ("status",), batch)
