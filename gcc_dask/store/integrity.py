"""What a resume and a reader trust, checked: the layout's metadata, the chunks of done batches, damaged chunks.

A store made by this version checksums every chunk (``crc32c`` after ``zstd``, or after ``blosc`` for the
coordinates: :func:`~.layout.codecs`) and writes every chunk, even one that holds only fill values
(``write_empty_chunks``), so that a batch whose status
is written has a chunk in each of its sample arrays. Three checks use that (docs/store.rst, section
'Integrity'):

- :func:`check_structure`: every group and array of the layout has a readable ``zarr.json`` (a deleted or
  garbled one, or a folder replaced by a file, is one :class:`~gcc_dask.errors.StoreError` line naming it);
- :func:`missing_batches`: the done batches whose chunk of a sample array (``decoded``, ``labels``,
  ``reference``) is gone, which a resume runs again instead of reading them back as fill values;
- :func:`damaged_chunk_error`: after a read failed (a checksum that does not match, a chunk that does not
  decompress), the one line naming the array, the chunk file and the batches it holds;
- :func:`lost_records`: the done batches whose chunk of a per-batch array (``received``, ``rel_acc``, ``mse``, ...,
  ``status``) is gone, which a resume marks pending and runs again;
- :func:`lost_chunks`: every chunk of a done batch that is missing or misplaced, named for the readers
  (``report``, ``summary``), which refuse to print a number computed without it;
- :func:`misplaced_chunks`: in a store that binds its chunks (``chunk_digest``), the done batches whose chunk of a
  sample array is not the one written there (moved or swapped within the store, or copied from another store):
  its ``crc32c`` is sound, but the digest recorded with the batch names another store, array, place or content.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gcc_dask.errors import StoreError

from .layout import _BATCH_FLOATS, DIGEST, INPUTS, INTEGRITY_ATTR, STORE_ID_ATTR, _output_dims, bound_arrays

__all__ = ["check_structure", "chunk_digest", "chunk_span", "damaged_chunk_error", "lost_chunks", "lost_records",
           "misplaced_chunks", "missing_batches", "missing_filled", "read_checked"]

#: coordinate arrays, written whole when the store is created (and never again)
COORDINATES = ("sample", "group", "position", "batch", "worker", "worker_point")
#: arrays of every scheme group and of the inputs group, whatever the run (coordinates included)
SCHEME_ARRAYS = ("decoded", "received", "failed", "latency_s", *_BATCH_FLOATS, "n_received", "n_failed", "status",
                 "sample", "group", "position", "batch", "worker", "worker_point")
INPUT_ARRAYS = ("sample", "group", "position", "batch", "status")
#: statuses whose batch wrote its ``decoded`` chunk in every store version (a decoded batch has finite rows,
#: which zarr always writes); in a store that writes empty chunks, an undecodable batch's NaN chunk as well
_DECODED_WRITTEN = (1, 2)
_DECODED_WRITTEN_ALL = (1, 2, 3)
#: every done status (a failed batch writes its record too)
_DONE = (1, 2, 3, 4)


def _node(path: Path, rel: str, node_type: str, chunks: bool = False) -> str | None:
    """Why the node `rel` of the store at `path` is unusable (missing, not JSON, another node type; with
    `chunks`, a 1-D array one of whose chunk files is missing), or None."""
    meta_path = path / rel / "zarr.json"
    if (path / rel).exists() and not (path / rel).is_dir():
        return f"{rel} is a file, expected a Zarr {node_type} folder"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        return f"{rel}/zarr.json is missing"
    except (OSError, ValueError) as e:
        return f"{rel}/zarr.json cannot be read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if not isinstance(meta, dict) or meta.get("node_type") != node_type:
        return f"{rel}/zarr.json is not the metadata of a Zarr {node_type}"
    why = _invalid_metadata(meta, node_type)
    if why:
        return f"{rel}/zarr.json is not valid Zarr {node_type} metadata ({why})"
    if chunks and len(meta.get("shape", ())) == 1:
        try:
            size, chunk = meta["shape"][0], meta["chunk_grid"]["configuration"]["chunk_shape"][0]
            sep = (meta["chunk_key_encoding"].get("configuration") or {}).get("separator", "/")
        except (KeyError, IndexError, TypeError, AttributeError):
            return f"{rel}/zarr.json is not the metadata of a Zarr {node_type}"
        for i in range(-(-int(size) // int(chunk))):
            if not (path / rel / f"c{sep}{i}").is_file():
                return f"{rel} has lost its chunk c{sep}{i} (values written when the store was created)"
    return None


def _invalid_metadata(meta: dict, node_type: str) -> str | None:
    """Why zarr would refuse the metadata `meta` of a ``node_type`` node (a key misspelled by one flipped byte:
    ``fill_valuX``, a missing ``chunk_grid``, an unknown codec), as ``"KeyError: 'fill_value'"``; None when it
    parses. The metadata as zarr itself reads it, so that a reader never meets zarr's own traceback."""
    import copy

    try:
        if node_type == "array":
            from zarr.core.metadata.v3 import ArrayV3Metadata

            ArrayV3Metadata.from_dict(copy.deepcopy(meta))
        else:
            from zarr.core.group import GroupMetadata

            GroupMetadata.from_dict(copy.deepcopy(meta))
    except ImportError:  # pragma: no cover - a zarr that moved these classes: the node_type check stands
        return None
    except Exception as e:  # zarr raises KeyError, TypeError, ValueError, MetadataValidationError...
        return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"
    return None


def check_structure(path: str | os.PathLike, attrs: Mapping[str, Any]) -> None:
    """Check that every group and array of a run store's layout has a readable ``zarr.json``.

    Reads the metadata files directly (a few dozen small JSON files, no Zarr call). Arrays added to the
    layout later than this list are not required, so an older store still opens. In a store that writes
    every chunk (the ``integrity`` root attribute), the chunks of the coordinate arrays (the composition
    ``sample``, ``group``, ``position``, the ``batch``, ``worker`` and ``worker_point`` indices), written
    once when the store was created, must all be there.

    Parameters
    ----------
    path : str or os.PathLike
        The run store.
    attrs : mapping
        Its root attributes (``schemes``, ``has_labels``, ``has_reference``, ``output_shape``).

    Raises
    ------
    StoreError
        Naming the first group or array that is missing or damaged, and what to do.
    """
    path = Path(path)
    # () for a scalar f: no output coordinate (an empty list is not "unknown": it used to be read as one)
    shape = attrs.get("output_shape")
    out_dims = _output_dims(tuple(shape)) if shape is not None else ("output",)
    inputs = [*INPUT_ARRAYS, *out_dims, *(["labels"] if attrs.get("has_labels") else []),
              *(["reference"] if attrs.get("has_reference") else [])]
    nodes = [(INPUTS, inputs)] + [(str(s), [*SCHEME_ARRAYS, *out_dims]) for s in (attrs.get("schemes") or {})]
    written = (attrs.get(INTEGRITY_ATTR) or {}).get("empty_chunks") == "written"
    for group, arrays in nodes:
        why = _node(path, group, "group") or next(
            (w for w in (_node(path, f"{group}/{a}", "array", written and (a in COORDINATES or a in out_dims))
                         for a in arrays) if w), None)
        if why:
            raise StoreError(f"store path: got {str(path)!r}; the store is damaged: {why}; restore it from a "
                             "copy, or pass --overwrite (store.overwrite: true) to start over")


def missing_batches(path: str | os.PathLike, group: str, names: Iterable[str], status: np.ndarray,
                    done: Iterable[int], batch_size: int) -> np.ndarray:
    """The batches whose status is in `done` but whose chunk of a sample array in `names` is missing.

    Parameters
    ----------
    path : str or os.PathLike
        The run store.
    group : str
        ``"inputs"`` or a scheme.
    names : iterable of str
        Arrays of `group` along ``sample`` (one chunk of ``batch_size`` rows per batch), e.g. ``("decoded",)``.
    status : array of int8, shape (num_batches,)
        The group's batch statuses.
    done : iterable of int
        The statuses whose batches must have their chunks.
    batch_size : int
        Rows per batch (K·B).

    Returns
    -------
    array of int64
        Ascending batch indices (one file-system ``stat`` per done batch and array).
    """
    path = Path(path)
    candidates = np.flatnonzero(np.isin(status, list(done)))
    missing: set[int] = set()
    for name in names:
        folder = path / group / name
        try:
            meta = json.loads((folder / "zarr.json").read_text())
        except (OSError, ValueError):
            continue  # check_structure names it
        chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
        if chunks[0] != batch_size:
            continue  # not one chunk per batch: nothing to check batch by batch
        encoding = meta.get("chunk_key_encoding", {})
        sep = (encoding.get("configuration") or {}).get("separator", "/")
        prefix = "c" + sep if encoding.get("name", "default") == "default" else ""
        tail = sep.join("0" for _ in chunks[1:])
        for b in candidates:
            key = prefix + str(int(b)) + (sep + tail if tail else "")
            if not (folder / key).is_file():
                missing.add(int(b))
    return np.asarray(sorted(missing), dtype=np.int64)


def _array_meta(path: Path, rel: str) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / rel / "zarr.json").read_text())
    except (OSError, ValueError):
        return None  # check_structure names it
    return meta if isinstance(meta, dict) and meta.get("node_type") == "array" else None


def _chunk_file(meta: Mapping[str, Any], index: tuple[int, ...]) -> str:
    encoding = meta.get("chunk_key_encoding", {})
    sep = (encoding.get("configuration") or {}).get("separator", "/")
    prefix = "c" + sep if encoding.get("name", "default") == "default" else ""
    return prefix + sep.join(str(int(i)) for i in index)


def _read_status(path: Path, group: str) -> np.ndarray | None:
    import zarr

    if _array_meta(path, f"{group}/status") is None:
        return None
    return np.asarray(read_checked(path, f"{group}/status", zarr.open_array(str(path / group / "status"), mode="r")))


def missing_filled(path: str | os.PathLike, group: str, status: np.ndarray, done: Iterable[int],
                   batch_size: int) -> np.ndarray:
    """The done batches of scheme `group` whose ``filled`` chunk was written (a nonzero digest recorded with the
    batch, ``chunk_digest[:, 1]``) but is gone. A batch without a fill writes no ``filled`` chunk, so only the
    digest tells a deleted one from one never written; a store without digests gives none. int64, ascending."""
    import zarr

    path = Path(path)
    candidates = np.flatnonzero(np.isin(status, list(done)))
    meta = _array_meta(path, f"{group}/filled")
    if candidates.size == 0 or meta is None or _array_meta(path, f"{group}/{DIGEST}") is None \
            or meta["chunk_grid"]["configuration"]["chunk_shape"][0] != batch_size:
        return np.zeros(0, dtype=np.int64)
    recorded = read_checked(path, f"{group}/{DIGEST}", zarr.open_array(str(path / group / DIGEST), mode="r"))
    column = bound_arrays(group).index("filled")
    lost = [int(b) for b in candidates if int(recorded[b, column]) != 0
            and not (path / group / "filled" / batch_chunk_key(meta, int(b))).is_file()]
    return np.asarray(lost, dtype=np.int64)


def lost_records(path: str | os.PathLike, group: str, status: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The per-batch arrays of scheme `group` (``received``, ``latency_s``, ``mse``, ``rel_acc``, ..., and
    ``status`` itself) whose chunk file is gone while batches of that chunk are done: array name to those batches
    (int64, ascending). Their values would read back as fill values (no worker received, NaN metrics).

    A per-batch array holds up to :data:`~.layout.BATCH_CHUNK` batches a chunk, and a store that writes every
    chunk (``integrity``) writes it with the first of its batches, so a missing chunk of a done batch was deleted
    or lost. A lost ``status`` chunk is told by its batches' ``n_received`` chunk, written with them (their
    statuses then read as pending). Empty for a store made before chunks were all written.

    Parameters
    ----------
    path : str or os.PathLike
        The run store.
    group : str
        A scheme.
    status : array of int8, shape (num_batches,), optional
        The group's statuses (read when not given).
    """
    path = Path(path)
    status = _read_status(path, group) if status is None else np.asarray(status)
    if status is None:
        return {}
    done = np.isin(status, list(_DONE))
    lost: dict[str, np.ndarray] = {}
    try:
        names = sorted(p.name for p in (path / group).iterdir() if p.is_dir())
    except OSError:
        return {}
    for name in names:
        if name in COORDINATES:
            continue
        meta = _array_meta(path, f"{group}/{name}")
        if meta is None or (meta.get("dimension_names") or [None])[0] != "batch":
            continue
        chunk = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
        tail = (0,) * (len(meta["shape"]) - 1)
        batches = []
        for c in range(-(-int(meta["shape"][0]) // chunk)):
            if (path / group / name / _chunk_file(meta, (c, *tail))).is_file():
                continue
            span = np.arange(c * chunk, min((c + 1) * chunk, status.size))
            if name == "status":
                counts = _array_meta(path, f"{group}/n_received")
                if counts is not None and (path / group / "n_received" / _chunk_file(counts, (c,))).is_file():
                    batches.extend(span.tolist())
            elif done[span].any():
                batches.extend(span[done[span]].tolist())
        if batches:
            lost[name] = np.asarray(batches, dtype=np.int64)
    return lost


def _batches_text(batches: Iterable[int]) -> str:
    b = sorted(int(x) for x in batches)
    if len(b) == 1:
        return f"batch {b[0]}"
    if b == list(range(b[0], b[-1] + 1)):
        return f"batches {b[0]}-{b[-1]}"
    return f"batches {', '.join(map(str, b[:4]))}" + (f" and {len(b) - 4} more" if len(b) > 4 else "")


def lost_chunks(path: str | os.PathLike, attrs: Mapping[str, Any]) -> list[str]:
    """Every chunk of a done batch that a reader of the run store at `path` would read without its values: missing
    (deleted or lost: ``decoded``, ``filled``, ``labels``, ``reference``, and the per-batch arrays of
    :func:`lost_records`) or misplaced (:func:`misplaced_chunks`), each named with its batches
    (``"gcc/decoded/c/3/0 (batch 3)"``). Empty when every chunk is there, and for a store made before chunks were
    all written (``integrity``), where a missing chunk cannot be told from one never written."""
    import zarr

    path = Path(path)
    if (attrs.get(INTEGRITY_ATTR) or {}).get("empty_chunks") != "written":
        return []
    batch_size = int(attrs["batch_size"])
    store_id = attrs.get(STORE_ID_ATTR)
    found: list[str] = []

    def sample_chunk(group: str, name: str, batch: int) -> str:
        meta = _array_meta(path, f"{group}/{name}")
        key = batch_chunk_key(meta, batch) if meta is not None else f"c/{batch}"
        return f"{group}/{name}/{key}"

    groups = [INPUTS, *(str(s) for s in attrs.get("schemes") or {})]
    for group in groups:
        status = _read_status(path, group)
        if status is None:
            continue
        if group == INPUTS:
            names = [n for n in ("labels", "reference") if attrs.get(f"has_{n}")]
            for name in names:
                for b in missing_batches(path, group, (name,), status, (1,), batch_size):
                    found.append(f"{sample_chunk(group, name, int(b))} (batch {int(b)})")
        else:
            for b in missing_batches(path, group, ("decoded",), status, _DECODED_WRITTEN_ALL, batch_size):
                found.append(f"{sample_chunk(group, 'decoded', int(b))} (batch {int(b)})")
            for b in missing_filled(path, group, status, _DONE, batch_size):
                found.append(f"{sample_chunk(group, 'filled', int(b))} (batch {int(b)})")
            for name, batches in lost_records(path, group, status).items():
                meta = _array_meta(path, f"{group}/{name}")
                chunk = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
                tail = (0,) * (len(meta["shape"]) - 1)
                for c in sorted({int(b) // chunk for b in batches}):
                    inside = [int(b) for b in batches if int(b) // chunk == c]
                    found.append(f"{group}/{name}/{_chunk_file(meta, (c, *tail))} ({_batches_text(inside)})")
        if store_id:
            for b, names in misplaced_chunks(path, group, status, (1,) if group == INPUTS else _DONE,
                                             str(store_id), batch_size).items():
                found.extend(f"{n} (batch {b}, moved or copied there)" for n in names if _reads(path, n))
    return found


def _reads(path: Path, chunk: str) -> bool:
    """Whether the chunk file `chunk` (``"gcc/decoded/c/3/0"``) decodes: a damaged one (a checksum that does not
    match) is not named as misplaced, the reader's own error names it as damaged."""
    import zarr

    name, _, key = chunk.partition("/c/")
    try:
        arr = zarr.open_array(str(path / name), mode="r")
        index = tuple(int(i) for i in key.split("/"))
        arr[tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, arr.chunks, arr.shape))]
    except Exception:
        return False
    return True


def batch_chunk_key(meta: Mapping[str, Any], batch: int) -> str | None:
    """The key of batch `batch`'s chunk in the array whose ``zarr.json`` is `meta` (``c/3/0``), or None when the
    array is not one chunk per batch along its first axis (``batch_size`` rows: the caller checks)."""
    chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
    encoding = meta.get("chunk_key_encoding", {})
    sep = (encoding.get("configuration") or {}).get("separator", "/")
    prefix = "c" + sep if encoding.get("name", "default") == "default" else ""
    return prefix + sep.join([str(int(batch)), *("0" for _ in chunks[1:])])


def chunk_crc(file: str | os.PathLike) -> bytes | None:
    """The ``crc32c`` a chunk file ends with (its last 4 bytes, which zarr checks against the rest on every
    read), or None when there is no such file."""
    try:
        with open(file, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            return fh.read(4)
    except OSError:  # no file, or one shorter than 4 bytes (which no read accepts either)
        return None


def chunk_digest(store_id: str, name: str, key: str, crc: bytes) -> int:
    """The digest binding a chunk to its place: 64 bits of BLAKE2b over the store's id (``store_id``, made when
    it was created), the array's path in it (``"gcc/decoded"``), the chunk's key (``"c/3/0"``) and the chunk's
    ``crc32c`` (:func:`chunk_crc`). Never 0 (the fill value of ``chunk_digest``: nothing recorded)."""
    h = hashlib.blake2b(digest_size=8)
    for part in (store_id.encode(), name.encode(), key.encode(), crc):
        h.update(len(part).to_bytes(4, "little") + part)
    return int.from_bytes(h.digest(), "little") or 1


def misplaced_chunks(path: str | os.PathLike, group: str, status: np.ndarray, done: Iterable[int], store_id: str,
                     batch_size: int) -> dict[int, list[str]]:
    """The done batches of `group` whose chunk of a bound array (:func:`~.layout.bound_arrays`) is not the one
    written there, with those chunks' names (``"gcc/decoded/c/3/0"``).

    A chunk whose digest (:func:`chunk_digest` of the store's id, the array, its key and its ``crc32c``) differs
    from the one recorded with its batch (``<group>/chunk_digest``) was moved or swapped within the store, or
    copied from another store or run; its own checksum cannot tell, as it covers the chunk's bytes only. A
    batch recorded without digests (0), and a missing chunk (:func:`missing_batches`), are not named here.
    One read of ``chunk_digest`` and of each bound chunk's last 4 bytes per done batch.

    Parameters
    ----------
    path : str or os.PathLike
        The run store.
    group : str
        ``"inputs"`` or a scheme.
    status : array of int8, shape (num_batches,)
        The group's batch statuses.
    done : iterable of int
        The statuses whose batches are checked.
    store_id : str
        The store's ``store_id`` root attribute.
    batch_size : int
        Rows per batch (K·B).

    Returns
    -------
    dict of int to list of str
        Batch index to the names of its misplaced chunks, batches ascending.

    Raises
    ------
    StoreError
        When ``chunk_digest`` cannot be read (a damaged chunk is named).
    """
    import zarr

    path = Path(path)
    candidates = np.flatnonzero(np.isin(status, list(done)))
    if candidates.size == 0 or not (path / group / DIGEST / "zarr.json").is_file():
        return {}
    arr = zarr.open_array(str(path / group / DIGEST), mode="r")
    recorded = read_checked(path, f"{group}/{DIGEST}", arr)
    columns = []
    for i, name in enumerate(bound_arrays(group)):
        try:
            meta = json.loads((path / group / name / "zarr.json").read_text())
        except (OSError, ValueError):
            continue  # an array the store does not have (labels of a run without them), or check_structure's
        if meta["chunk_grid"]["configuration"]["chunk_shape"][0] == batch_size:
            columns.append((i, name, meta))
    found: dict[int, list[str]] = {}
    for b in candidates:
        for i, name, meta in columns:
            want = int(recorded[b, i])
            if want == 0:
                continue
            key = batch_chunk_key(meta, int(b))
            crc = chunk_crc(path / group / name / key)
            if crc is not None and chunk_digest(store_id, f"{group}/{name}", key, crc) != want:
                found.setdefault(int(b), []).append(f"{group}/{name}/{key}")
    return found


def chunk_span(arr: Any, index: tuple[int, ...], batch_size: Any) -> str:
    """``"sample 24-31, batch 3"``: what chunk `index` of `arr` covers, by dimension name (batches where known)."""
    dims = arr.metadata.dimension_names or tuple(f"dim_{i}" for i in range(len(index)))
    parts = []
    for dim, i, c, size in zip(dims, index, arr.chunks, arr.shape):
        lo, hi = i * c, min((i + 1) * c, size) - 1
        if dim != "batch":
            parts.append(f"{dim} {lo}" if lo == hi else f"{dim} {lo}-{hi}")
        k = batch_size if dim == "sample" and isinstance(batch_size, int) and batch_size > 0 else None
        if dim == "batch" or k:
            b_lo, b_hi = (lo // k, hi // k) if k else (lo, hi)
            parts.append(f"batch {b_lo}" if b_lo == b_hi else f"batches {b_lo}-{b_hi}")
    return ", ".join(parts)


#: arrays whose damaged chunk a rerun recomputes once the chunk file is deleted: a sample array of a done batch
#: is rerun when its chunk is missing (:func:`missing_batches`), a deleted status chunk makes its batches pending
_RECOMPUTED = ("decoded", "labels", "reference", "status")


def damaged_chunk_error(path: str | os.PathLike, name: str, arr: Any, batch_size: Any = None,
                        region: tuple[slice, ...] | None = None) -> StoreError | None:
    """After a read of `arr` (the array `name`, e.g. ``"gcc/decoded"``) failed: a StoreError naming its first
    chunk that cannot be read (within `region`, default all), or None when every chunk reads."""
    region = region or tuple(slice(0, s) for s in arr.shape)
    ranges = [range(r.start // c, -(-min(r.stop, s) // c)) for r, c, s in zip(region, arr.chunks, arr.shape)]
    for index in itertools.product(*ranges):
        chunk = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, arr.chunks, arr.shape))
        try:
            arr[chunk]
        except Exception as exc:  # a checksum mismatch, a codec error, an unreadable file: this chunk
            key = arr.metadata.encode_chunk_key(index)
            file = Path(path) / name / key
            cause = (str(exc).splitlines() or [""])[0][:200]
            fix = (f"delete {str(file)!r} and run the same command to recompute "
                   f"{'those batches' if name.endswith('status') else 'the batch'}, or restore it from a copy"
                   if name.rsplit("/", 1)[-1] in _RECOMPUTED else
                   f"restore {str(file)!r} from a copy, or pass --overwrite (store.overwrite: true) to start over")
            return StoreError(f"store path: got {str(path)!r}; its array {name!r} has a damaged chunk {key} "
                              f"({chunk_span(arr, index, batch_size)}) that cannot be read ({type(exc).__name__}: "
                              f"{cause}): {fix}")
    return None


def read_checked(path: str | os.PathLike, name: str, arr: Any, selection: Any = Ellipsis,
                 batch_size: Any = None) -> np.ndarray:
    """``arr[selection]``, or the :func:`damaged_chunk_error` line when a chunk cannot be read.

    Raises
    ------
    StoreError
        Naming the array, the chunk file and its batches (or, when no single chunk is to blame, the array
        and the error).
    """
    try:
        return arr[selection]
    except Exception as exc:
        region = selection if isinstance(selection, tuple) and all(isinstance(s, slice) for s in selection) \
            else (selection,) if isinstance(selection, slice) else None
        if region is not None:
            region = tuple(slice(s.start or 0, s.stop if s.stop is not None else n)
                           for s, n in zip(region, arr.shape)) + tuple(slice(0, n) for n in arr.shape[len(region):])
        error = damaged_chunk_error(path, name, arr, batch_size, region)
        if error is None:
            error = StoreError(f"store path: got {str(path)!r}; cannot read its array {name!r} "
                               f"({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]})")
        raise error from None
