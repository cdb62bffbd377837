"""The store's layout: format constants, batch statuses, array creation, shared helpers (see the package docs)."""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from gcc_dask.errors import InvalidInputError, StoreError


STORE_FORMAT = 1
INPUTS = "inputs"
_MARKER = "gcc_dask_store"
#: batches per chunk of the driver-written per-batch arrays of a scheme
BATCH_CHUNK = 1024
#: root attribute of a store whose chunks carry a checksum and are all written (fill values included), with
#: what :mod:`.integrity` may rely on; absent in stores made before (they are read and resumed as before)
INTEGRITY_ATTR = "integrity"
INTEGRITY = {"checksum": "crc32c", "empty_chunks": "written", "chunk_digest": "store_id array chunk crc32c"}
#: root attribute: a random identity given to a store when it is created, kept by every resume; the
#: ``chunk_digest`` of each batch binds its chunks to it (:mod:`.integrity`)
STORE_ID_ATTR = "store_id"
#: per-batch array of each group, (num_batches, 2) uint64: for each of the group's :data:`BOUND` arrays, a digest
#: of the store's id, the array's path, the chunk's key and its ``crc32c`` (:func:`.integrity.chunk_digest`); 0
#: where none was written. A scheme's is written with the batch's record (by the driver), the inputs' one chunk
#: per batch by the worker that wrote them
DIGEST = "chunk_digest"
#: the sample arrays (one chunk per batch) whose chunks a group's :data:`DIGEST` binds, in its column order
BOUND = {INPUTS: ("labels", "reference"), "scheme": ("decoded", "filled")}


def bound_arrays(group: str) -> tuple[str, str]:
    """The arrays of `group` (``"inputs"`` or a scheme) whose chunks its :data:`DIGEST` binds, in column order."""
    return BOUND[INPUTS] if group == INPUTS else BOUND["scheme"]


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
    # symbolic links resolved: two spellings of one store are one store (one lock, one overwrite)
    return Path(text).expanduser().resolve()


def _output_dims(output_shape: tuple[int, ...]) -> tuple[str, ...]:
    if len(output_shape) == 1:
        return ("output",)
    return tuple(f"output_{i}" for i in range(len(output_shape)))


def _to_host(x: Any) -> np.ndarray:
    if type(x).__module__.split(".")[0] == "cupy":
        x = x.get()
    return np.asarray(x)


#: the root attributes every reader of a store relies on (a store whose zarr.json lacks one is damaged)
REQUIRED_ATTRS = ("status", "config", "num_samples", "batch_size", "num_batches", "output_shape", "schemes",
                  "has_labels", "has_reference", "dtype")


def _open_root(path: Path, mode: str = "r+"):
    """Open the root group, refusing anything that is not a gcc-dask store."""
    zarr = _zarr()
    if not (path / "zarr.json").is_file():
        what = "does not exist" if not path.exists() else "is not a Zarr v3 store"
        raise StoreError(f"store path: got {str(path)!r}, which {what}; expected a gcc-dask run store")
    try:
        root = zarr.open_group(str(path), mode=mode, use_consolidated=False)
    except Exception as exc:  # zarr raises several types for unreadable metadata
        raise StoreError(f"store path: got {str(path)!r}; cannot open it as a Zarr group ({exc})") from None
    if root.attrs.get(_MARKER) != STORE_FORMAT:
        raise StoreError(f"store path: got {str(path)!r}; expected a gcc-dask run store (format "
                         f"{STORE_FORMAT}), found a Zarr group without the gcc-dask attributes")
    missing = [key for key in REQUIRED_ATTRS if key not in root.attrs]
    if missing:
        raise StoreError(f"store path: got {str(path)!r}, whose zarr.json lacks the attribute"
                         f"{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} (damaged: a key edited "
                         "or misspelt); expected a gcc-dask run store with its layout attributes: pass --overwrite "
                         "(overwrite=True) to start it anew, or choose another store path")
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


def _git_sha(root: str | os.PathLike | None = None) -> str | None:
    """The git commit of the gcc-dask source tree, read from .git without running a process.

    `root` is the repository root, the folder that holds ``pyproject.toml`` and ``.git`` (default: the one
    this file sits in, ``parents[2]`` of ``gcc_dask/store/layout.py``). ``.git`` may be a folder (a clone)
    or a file ``gitdir: <path>`` (a worktree or submodule, whose branch refs live in the ``commondir``);
    a ref is read loose or from ``packed-refs``. None when there is no repository (an installed wheel) or
    it cannot be read.
    """
    def _is_sha(text: str) -> bool:  # SHA-1 (40 hex digits) or SHA-256 (64) object names
        return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)

    try:
        base_dir = Path(__file__).resolve().parents[2] if root is None else Path(root)
        git = base_dir / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>", absolute or relative to the root
            git = base_dir / git.read_text().split(":", 1)[1].strip()
        if not git.is_dir():
            return None
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head if _is_sha(head) else None
        ref = head.split(":", 1)[1].strip()
        common = (git / "commondir").read_text().strip() if (git / "commondir").is_file() else None
        for base in (git, (git / common) if common else None):
            if base is not None and (base / ref).is_file():
                sha = (base / ref).read_text().strip()
                return sha if _is_sha(sha) else None
            if base is not None and (base / "packed-refs").is_file():
                for line in (base / "packed-refs").read_text().splitlines():
                    if line.endswith(" " + ref) and _is_sha(line.split()[0]):
                        return line.split()[0]
    except (OSError, IndexError, ValueError):
        return None
    return None


@functools.lru_cache(maxsize=1)
def _installed_versions() -> tuple[tuple[str, str], ...]:
    """The installed versions, read once per process (importlib.metadata parses every package's metadata:
    about 25 ms a call)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for dist in ("gcc-dask", "numpy", "scipy", "dask", "distributed", "zarr", "xarray", "pydantic",
                 "onnxruntime", "cupy-cuda12x", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return tuple(out.items())


def _versions() -> dict[str, str]:
    """Python's and the main packages' versions, for the store's provenance attrs."""
    return dict(_installed_versions())


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _root_meta(path: Path) -> dict | None:
    """The parsed ``zarr.json`` of the group at `path`, or None when there is none or it is unreadable."""
    import json

    try:
        meta = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _is_consolidated(path: Path) -> bool:
    return bool((_root_meta(path) or {}).get("consolidated_metadata"))


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


#: long_name and units of every data array (``attributes`` of the Zarr array, ``attrs`` in xarray)
VARIABLES: dict[str, dict[str, str]] = {
    "labels": {"long_name": "ground-truth label (-1 where unknown)"},
    "reference": {"long_name": "f(x) computed uncoded"},
    "decoded": {"long_name": "decoded estimate of f(x); NaN where it could not be estimated"},
    "filled": {"long_name": "the estimate was filled in from other samples' results (all copies of this one "
                            "were lost)"},
    "received": {"long_name": "the worker's result was used to decode (the set F)"},
    "failed": {"long_name": "the worker's shard raised, or its worker died (an erasure)"},
    "latency_s": {"long_name": "shard start to result (injected latency on the virtual clock); NaN if not "
                               "received", "units": "s"},
    "cutoff_s": {"long_name": "when the cutoff fired, after the batch start", "units": "s"},
    "batch_latency_s": {"long_name": "batch start to decoded written", "units": "s"},
    "mse": {"long_name": "MSE of the batch's decoded outputs against the reference"},
    "rel_acc": {"long_name": "RelAcc: fraction of the batch's samples with argmax decoded = argmax "
                             "reference", "units": "1"},
    "error_estimate": {"long_name": "leave-one-out estimate of the decoding MSE (gcc/letcc only)"},
    "n_received": {"long_name": "results used to decode (-1 until written)", "units": "workers"},
    "n_failed": {"long_name": "shards that failed (-1 until written)", "units": "workers"},
    "n_backups": {"long_name": "backup copies launched (speculative; 0 for schemes without backups; -1 until "
                               "written)", "units": "workers"},
    "status": {"long_name": "0 pending, 1 decoded, 2 deadline-decoded, 3 undecodable, 4 failed"},
    DIGEST: {"long_name": "digest binding the batch's chunk of each bound array (decoded and filled; labels and "
                          "reference) to this store, the array and the chunk's place; 0 where not written"},
}


def _coordinate(group: _NodePlan, name: str, values: np.ndarray, dims: tuple[str, ...],
                attrs: Mapping[str, Any]) -> None:
    """A coordinate array written whole by the driver at creation (one large chunk: never rewritten)."""
    values = np.asarray(values)
    chunk = (max(1, min(values.shape[0], 1 << 20)),)
    group.create_array(name, data=values, chunks=chunk, dimension_names=dims, attributes=dict(attrs),
                       coordinate=True)


#: threads of :class:`Concurrently`: each zarr call on a local store is a few file-system round trips through
#: zarr's event loop (about 3 ms each here), and calls on different arrays overlap
IO_THREADS = 8


class Concurrently:
    """Calls on different zarr arrays that overlap: ``run(fn, *args, **kwargs)`` starts ``fn(*args, **kwargs)``
    in a thread pool. Leaving the ``with`` block waits for all of them and raises the first error. After an
    error inside the block (Ctrl-C included) the calls not started are dropped and the running ones waited
    for, so that nothing is still writing when the caller cleans up."""

    def __enter__(self) -> Concurrently:
        self._pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="gcc-dask-store-io")
        self._started: list[Future] = []
        return self

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._started.append(self._pool.submit(fn, *args, **kwargs))

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            self._pool.shutdown(wait=True, cancel_futures=exc_type is not None)
        except BaseException:  # Ctrl-C while waiting: drop what has not started, wait for what runs
            self._pool.shutdown(wait=True, cancel_futures=True)
            raise
        if exc_type is None:
            for f in self._started:
                f.result()


def codecs(coordinate_itemsize: int | None = None) -> tuple[Any, ...]:
    """The bytes-to-bytes codecs of an array of a new store: Zarr's default ``zstd`` (level 0), then a
    ``crc32c`` checksum of the compressed chunk, which a read verifies (a flipped byte is a ``ValueError``
    instead of wrong numbers; docs/store.rst, section 'Integrity').

    A coordinate (values of `coordinate_itemsize` bytes each, written once by the driver: ``sample``, ``group``,
    ``position``, ...) is compressed by ``blosc`` with zstd after a byte shuffle instead, then checksummed the
    same way: sample indices compress 10x better and about 10x faster so (8 MiB of int64 indices: 3 ms against
    25-32 ms, and a store of 2,000,000 samples writes 5 such arrays of 16 MB at its creation)."""
    from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

    if coordinate_itemsize is not None:
        return (BloscCodec(cname="zstd", clevel=1, shuffle="shuffle", typesize=int(coordinate_itemsize)),
                Crc32cCodec())
    return (ZstdCodec(level=0, checksum=False), Crc32cCodec())


def _array_metadata(shape: tuple[int, ...], chunks: tuple[int, ...], dtype: Any, fill_value: Any,
                    dimension_names: tuple[str, ...], attributes: Mapping[str, Any],
                    coordinate: bool = False) -> Any:
    """The Zarr v3 metadata of an array of a new store: a regular chunk grid, the default chunk keys ('/'),
    little-endian bytes, then the store's :func:`codecs`; what ``zarr.create_array`` makes of the same
    arguments (tests/store/test_store_layout.py), without a round trip through zarr's event loop."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    dtype = np.dtype(dtype)
    if fill_value is None:
        fill_value = np.zeros((), dtype=dtype).item()
    return ArrayV3Metadata.from_dict({
        "zarr_format": 3, "node_type": "array", "shape": [int(x) for x in shape], "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [int(x) for x in chunks]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_value,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   *(c.to_dict() for c in codecs(dtype.itemsize if coordinate else None))],
        "attributes": dict(attributes), "dimension_names": list(dimension_names),
    })


class _NodePlan:
    """A group of a store being laid out: :meth:`create_group` and :meth:`create_array` (zarr's names) record
    the nodes' metadata, every array with the store's :func:`codecs`, and the values of the arrays given
    ``data``; :meth:`make` then writes every node's metadata at once (``zarr.create_hierarchy``: one round
    through zarr's event loop, not one per array) and the recorded values, each chunk written even when it
    holds only fill values (:func:`writable`). A new store of one scheme took 140 ms one array at a time
    through a thread pool, about 60 ms this way."""

    def __init__(self, attributes: Mapping[str, Any] | None = None, *, _path: str = "",
                 _nodes: dict | None = None, _values: dict | None = None) -> None:
        from zarr.core.group import GroupMetadata

        self._path = _path
        self._nodes: dict[str, Any] = {} if _nodes is None else _nodes
        self._values: dict[str, np.ndarray] = {} if _values is None else _values
        self._nodes[_path] = GroupMetadata(attributes=dict(attributes or {}))

    def _key(self, name: str) -> str:
        return f"{self._path}/{name}" if self._path else name

    def create_group(self, name: str, *, attributes: Mapping[str, Any] | None = None) -> _NodePlan:
        return _NodePlan(attributes, _path=self._key(name), _nodes=self._nodes, _values=self._values)

    def create_array(self, name: str, *, chunks: tuple[int, ...], dimension_names: tuple[str, ...],
                     attributes: Mapping[str, Any], shape: tuple[int, ...] | None = None, dtype: Any = None,
                     fill_value: Any = None, data: np.ndarray | None = None, coordinate: bool = False) -> None:
        key = self._key(name)
        if data is not None:
            data = np.asarray(data)
            shape, dtype = data.shape, data.dtype
            self._values[key] = data
        self._nodes[key] = _array_metadata(shape, chunks, dtype, fill_value, dimension_names, attributes,
                                           coordinate)

    def make(self, path: str | os.PathLike) -> None:
        """Create the planned nodes under `path` (a folder that does not exist yet), then write the values."""
        import zarr

        try:
            made = dict(zarr.create_hierarchy(store=zarr.storage.LocalStore(os.fspath(path)), nodes=self._nodes))
            with Concurrently() as run:
                for key, values in self._values.items():
                    run(writable(made[key]).__setitem__, Ellipsis, values)
        except BaseException:
            _settle_zarr_writes()
            raise


def _settle_zarr_writes(timeout: float = 30.0) -> None:
    """After a failed :meth:`_NodePlan.make` (a full disk): wait until the writes zarr still has under way end,
    and take their errors. ``create_hierarchy`` stops at the first failed write, leaving the others running on
    zarr's event loop: they then wrote into the folder being removed (a ``.creating-*`` folder stayed behind),
    and each failure printed "Task exception was never retrieved" with its traceback (1,621 lines)."""
    import asyncio

    try:
        from zarr.core.sync import sync
    except ImportError:  # pragma: no cover - a zarr without it
        return

    async def settle() -> None:
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
            for t in tasks:
                if t.done() and not t.cancelled():
                    t.exception()  # taken: not printed as "never retrieved"

    try:
        from zarr.core.sync import _get_loop

        loop = _get_loop()
        if getattr(loop.get_exception_handler(), "__name__", "") != _quiet_failed_writes.__name__:
            loop.set_exception_handler(_quiet_failed_writes)
        sync(settle())
    except Exception:  # the loop is gone: nothing left to wait for
        pass


def _quiet_failed_writes(loop: Any, context: dict) -> None:
    """zarr's event loop's exception handler once a store creation failed: a write task whose ``OSError`` (the
    full disk the creation reported in its own line) nobody took is logged at DEBUG level, not printed with
    its traceback when the task is collected; anything else goes to the default handler."""
    import logging

    if isinstance(context.get("exception"), OSError) and "never retrieved" in str(context.get("message", "")):
        logging.getLogger(__name__).debug("a failed write of zarr: %s", context.get("exception"))
        return
    loop.default_exception_handler(context)


def writable(arr: Any) -> Any:
    """`arr` set to write every chunk, fill values included (zarr's runtime ``write_empty_chunks``): a batch's
    chunk exists once it is written, so that a missing one means a lost write (:mod:`.integrity`)."""
    with_config = getattr(arr, "with_config", None)
    return with_config({"write_empty_chunks": True}) if with_config is not None else arr


def _create_arrays(path: str | os.PathLike, root_attrs: Mapping[str, Any], schemes: Mapping[str, int], n: int, k: int,
                   num_batches: int, output_shape: tuple[int, ...], dtype: np.dtype, has_labels: bool,
                   has_reference: bool, scheme_attrs: Mapping[str, Mapping[str, Any]],
                   sample_index: np.ndarray | None = None, group_size: int | None = None,
                   worker_points: Mapping[str, Any] | None = None,
                   groups: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Every group and array of a new store at `path` (a folder not there yet; the root has `root_attrs`):
    coordinates (written here, once) and data arrays (fill values), all at once (:class:`_NodePlan`).

    `sample_index` (n,) is the dataset index of each slot (the composition; default the identity); `groups`
    the (group, position) of each slot (default: slot s is position ``s % group_size`` of group
    ``s // group_size``). `worker_points` gives each scheme's β (N,). Every array gets the store's
    :func:`codecs`.
    """
    root = _NodePlan(root_attrs)
    out_dims = _output_dims(output_shape)
    sample_spec = ((n, *output_shape), (k, *output_shape), ("sample", *out_dims))
    slots = np.arange(n, dtype=np.int64)
    sample = slots if sample_index is None else np.asarray(sample_index, dtype=np.int64)
    g = int(group_size or k)
    group, position = groups if groups is not None else (slots // g, (slots % g).astype(np.int32))
    composition = {
        "sample": (sample, {"long_name": "the dataset's own index of the sample in this slot"}),
        "group": (np.asarray(group, dtype=np.int64), {"long_name": "coding group of the sample (K samples "
                                                                   "coded together)"}),
        "position": (np.asarray(position, dtype=np.int32), {"long_name": "position k of the sample in its "
                                                                         "group (it sits on the data point "
                                                                         "alpha_k)"}),
    }

    bchunk = min(num_batches, BATCH_CHUNK)

    def batch_array(group, name, dtype_, fill, chunk=bchunk, attrs=None):
        group.create_array(name, shape=(num_batches,), chunks=(chunk,), dtype=dtype_, fill_value=fill,
                           dimension_names=("batch",), attributes=attrs or VARIABLES.get(name, {}))

    def digest_array(group, chunk=bchunk):
        group.create_array(DIGEST, shape=(num_batches, 2), chunks=(chunk, 2), dtype="uint64", fill_value=0,
                           dimension_names=("batch", "bound_array"), attributes=VARIABLES[DIGEST])

    def coordinates(group, workers=None):
        for name, (values, attrs) in composition.items():
            _coordinate(group, name, values, ("sample",), attrs)
        _coordinate(group, "batch", np.arange(num_batches, dtype=np.int64), ("batch",),
                    {"long_name": "batch index"})
        for i, (dim, size) in enumerate(zip(out_dims, output_shape)):
            _coordinate(group, dim, np.arange(size, dtype=np.int64), (dim,),
                        {"long_name": "output index (the class index for a classifier's logits)"})
        if workers is not None:
            w, beta = workers
            _coordinate(group, "worker", np.arange(w, dtype=np.int64), ("worker",),
                        {"long_name": "worker index"})
            _coordinate(group, "worker_point", np.asarray(beta, dtype=np.float64), ("worker",),
                        {"long_name": "worker point beta_n on [-1, 1]"})

    inputs = root.create_group(INPUTS, attributes={"description": "ground truth for evaluation",
                                                    "coordinates": "group position"})
    coordinates(inputs)
    if has_labels:
        inputs.create_array("labels", shape=(n,), chunks=(k,), dtype="int64", fill_value=-1,
                            dimension_names=("sample",), attributes=VARIABLES["labels"])
    if has_reference:
        inputs.create_array("reference", shape=sample_spec[0], chunks=sample_spec[1], dtype=dtype,
                            fill_value=np.nan, dimension_names=sample_spec[2], attributes=VARIABLES["reference"])
    batch_array(inputs, "status", "int8", 0, chunk=1,  # written by workers: one chunk per batch
                attrs={"long_name": "1 once the batch's labels and reference are written"})
    digest_array(inputs, chunk=1)  # written by the workers with the batch's chunks, as its status
    for scheme, workers in schemes.items():
        workers = int(workers)
        beta = (worker_points or {}).get(scheme)
        beta = np.full(workers, np.nan) if beta is None else np.asarray(beta, dtype=np.float64)
        if beta.shape != (workers,):
            raise InvalidInputError(f"worker_points[{scheme!r}]: got shape {beta.shape}; expected ({workers},)")
        group = root.create_group(scheme, attributes={"scheme": scheme, "num_inputs": g,
                                                      "num_workers": workers,
                                                      "coordinates": "group position worker_point",
                                                      **dict(scheme_attrs.get(scheme, {}))})
        coordinates(group, (workers, beta))
        group.create_array("decoded", shape=sample_spec[0], chunks=sample_spec[1], dtype=dtype,
                           fill_value=np.nan, dimension_names=sample_spec[2], attributes=VARIABLES["decoded"])
        group.create_array("filled", shape=(n,), chunks=(k,), dtype="bool", fill_value=False,
                           dimension_names=("sample",), attributes=VARIABLES["filled"])
        for name, dtype_, fill in (("received", "bool", False), ("failed", "bool", False),
                                   ("latency_s", "float64", np.nan)):
            group.create_array(name, shape=(num_batches, workers), chunks=(bchunk, workers),
                               dtype=dtype_, fill_value=fill, dimension_names=("batch", "worker"), attributes=VARIABLES[name])
        for name in _BATCH_FLOATS:
            batch_array(group, name, "float64", np.nan)
        batch_array(group, "n_received", "int32", -1)
        batch_array(group, "n_failed", "int32", -1)
        batch_array(group, "n_backups", "int32", -1)
        batch_array(group, "status", "int8", 0)
        digest_array(group)  # with the driver's records (what the decode's write of the chunks returned)
    root.make(path)
