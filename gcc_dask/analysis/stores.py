"""Open gcc-dask stores for analysis: pipeline run stores and sweep stores, told apart by their attrs.

A *run store* (``gcc-dask run``, :mod:`gcc_dask.store`) has one group per scheme with per-batch arrays;
a *sweep store* (``gcc-dask sweep``, :mod:`gcc_dask.sweep`) is one flat Dataset over
(scheme, num_inputs, num_workers, S|p, trial). Analysis reads stores only (it never imports the runtime).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from gcc_dask.errors import GccDaskError, StoreError

__all__ = ["check_run_chunks", "corrupt_chunk", "corrupt_chunk_error", "load_sweep", "names_corrupt_chunks", "open_sweep", "root_attrs",
           "store_kind"]

_F = TypeVar("_F", bound=Callable[..., Any])

RUN_MARKER = "gcc_dask_store"
SWEEP_MARKER = "gcc_dask_sweep"


def _meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        what = "does not exist" if not path.exists() else "is not a Zarr v3 store"
        raise StoreError(f"store path: got {str(path)!r}; it {what} (expected a gcc-dask run, sweep or "
                         "frontier store)") from None


def root_attrs(path: str | os.PathLike) -> dict[str, Any]:
    """The root attributes of a Zarr v3 store (read from its ``zarr.json``, no Zarr import).

    Raises
    ------
    StoreError
        If `path` is not a Zarr v3 store.
    """
    return dict(_meta(Path(os.fspath(path)).expanduser()).get("attributes") or {})


def store_kind(path: str | os.PathLike) -> Literal["run", "sweep", "frontier"]:
    """``"run"`` for a pipeline run store, ``"sweep"`` for a sweep store, ``"frontier"`` for a frontier store.

    Raises
    ------
    StoreError
        If `path` is neither.
    """
    attrs = root_attrs(path)
    if attrs.get(SWEEP_MARKER) == 1:
        return "sweep"
    if attrs.get("gcc_dask_frontier") == 1:
        return "frontier"
    if attrs.get(RUN_MARKER) is not None:
        return "run"
    raise StoreError(f"store path: got {os.fspath(path)!r}; expected a gcc-dask run, sweep or frontier "
                     "store (the root attributes name none)")


def _consolidated(path: Path) -> bool:
    return bool(_meta(path).get("consolidated_metadata"))


def open_sweep(path: str | os.PathLike):
    """Open a sweep store as a lazy :class:`xarray.Dataset` with string ``scheme``/``code`` coordinates.

    Dimensions: ``scheme``, ``num_inputs``, ``num_workers``, ``S`` (fixed-count stragglers) or ``p``
    (independent straggling), ``trial``. See :mod:`gcc_dask.sweep` for the variables.

    Raises
    ------
    StoreError
        If `path` is not a gcc-dask sweep store.
    """
    import numpy as np
    import xarray as xr

    path = Path(os.fspath(path)).expanduser().absolute()
    if store_kind(path) != "sweep":
        raise StoreError(f"store path: got {str(path)!r}, a run store; expected a sweep store (use the run "
                         "analysis functions for run stores)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_zarr(str(path), consolidated=_consolidated(path))
    return ds.assign_coords(scheme=np.asarray(ds["scheme"].values, dtype=object).astype(str),
                            code=("scheme", np.asarray(ds["code"].values, dtype=object).astype(str)))


def load_sweep(path: str | os.PathLike):
    """:func:`open_sweep`, read into memory in this process (NumPy-backed), never through a Dask cluster: with
    a ``distributed.Client`` as Dask's default (another run's, a notebook's), a lazy sweep store's reads would
    otherwise run on that client's cluster, which may not see the path, or be frozen.

    Raises
    ------
    StoreError
        If `path` is not a gcc-dask sweep store.
    """
    import dask

    with dask.config.set(scheduler="sync"):
        return open_sweep(path).load()


# ------------------------------------------------------------------------------------- damaged chunks
def corrupt_chunk(path: str | os.PathLike) -> tuple[str, tuple[int, ...], BaseException] | None:
    """The first chunk of the store that cannot be read back, or None if every chunk reads.

    Reads every stored chunk of every array, one at a time: meant for the error path only, to name what a
    codec error (``RuntimeError: Zstd decompression error``) was about.

    Returns
    -------
    (array, chunk, error) or None
        The array's path in the store (``"gcc/decoded"``), the chunk's grid index and the error it raised.
    """
    import zarr

    def arrays(group, prefix):
        for name, arr in sorted(group.arrays(), key=lambda item: item[0]):
            yield f"{prefix}{name}", arr
        for name, sub in sorted(group.groups(), key=lambda item: item[0]):
            yield from arrays(sub, f"{prefix}{name}/")

    root = zarr.open_group(os.fspath(path), mode="r", use_consolidated=False)
    for name, arr in arrays(root, ""):
        for index in itertools.product(*(range(n) for n in arr.cdata_shape)):
            region = tuple(slice(i * c, min((i + 1) * c, size)) for i, c, size in zip(index, arr.chunks, arr.shape))
            try:
                arr[region]
            except Exception as exc:  # any codec or I/O error: this chunk is what cannot be read
                return name, index, exc
    return None


def corrupt_chunk_error(path: str | os.PathLike) -> StoreError | None:
    """A :class:`StoreError` naming the store, the array and the chunk (and its batch) that cannot be read,
    or None when every chunk reads (then the error being handled is not about damaged data)."""
    import zarr

    from gcc_dask.store.integrity import chunk_span

    path = Path(os.fspath(path)).expanduser().absolute()
    try:
        found = corrupt_chunk(path)
    except Exception:  # the store cannot even be listed: let the original error speak
        return None
    if found is None:
        return None
    name, index, exc = found
    arr = zarr.open_array(str(path / name), mode="r")
    key = arr.metadata.encode_chunk_key(index)
    try:
        batch_size = root_attrs(path).get("batch_size")
    except StoreError:
        batch_size = None
    cause = (str(exc).splitlines() or [""])[0]
    return StoreError(
        f"store path: got {str(path)!r}; its array {name!r} has a damaged chunk {key} "
        f"({chunk_span(arr, index, batch_size)}) that cannot be read ({type(exc).__name__}: {cause}): restore "
        f"{str(path / name / key)!r} from a copy, or rerun into a new store"
    )


def _check_run_structure(store: Any) -> None:
    """For a run store: every group and array of its layout has readable metadata (one StoreError line naming
    the first that has not, :func:`gcc_dask.store.check_structure`); other paths pass (the reader names them)."""
    from gcc_dask.store import check_structure
    from gcc_dask.store.layout import REQUIRED_ATTRS

    if not isinstance(store, (str, os.PathLike)):
        return
    try:
        attrs = root_attrs(store)
    except StoreError:
        return
    if attrs.get(RUN_MARKER) is not None:
        path = Path(os.fspath(store)).expanduser().absolute()
        missing = [key for key in REQUIRED_ATTRS if key not in attrs]
        if missing:  # a key misspelt by one flipped byte: one line, not a KeyError from a reader
            raise StoreError(f"store path: got {str(path)!r}, whose zarr.json lacks the attribute"
                             f"{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} (damaged: a key "
                             "edited or misspelt); expected a gcc-dask run store with its layout attributes")
        check_structure(path, attrs)
        check_run_chunks(path, attrs)


def check_run_chunks(path: str | os.PathLike, attrs: dict[str, Any] | None = None) -> None:
    """Refuse to read a run store a chunk of whose done batches is missing or misplaced
    (:func:`gcc_dask.store.integrity.lost_chunks`): its metrics would be computed over fill values (a deleted
    ``decoded`` chunk reads as NaN rows, a deleted ``received`` chunk as no worker received) and printed as if
    whole. One :class:`StoreError` line names the chunks and the fix: the same run command recomputes them.

    Raises
    ------
    StoreError
        Naming the store, how many chunks, the first few with their batches, and how to repair it.
    """
    from gcc_dask.store.integrity import lost_chunks

    path = Path(os.fspath(path)).expanduser().absolute()
    attrs = root_attrs(path) if attrs is None else attrs
    try:
        lost = lost_chunks(path, attrs)
    except StoreError:
        return  # a damaged chunk (a status, the digests): the reader names it where it reads it
    if not lost:
        return
    shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
    raise StoreError(f"store path: got {str(path)!r}; {len(lost)} chunk{'s' if len(lost) > 1 else ''} of done "
                     f"batches {'are' if len(lost) > 1 else 'is'} missing or misplaced ({shown}), so its numbers "
                     "would be computed without them: run the same command (gcc-dask run, or coded_map with this "
                     "store as out=) to recompute those batches, or restore the chunks from a copy")


def names_corrupt_chunks(func: _F) -> _F:
    """Decorate a reader whose first argument is a store path: an error while it reads (a codec error such as
    ``RuntimeError: Zstd decompression error``, or a checksum that does not match, names nothing) becomes a
    :class:`StoreError` naming the store, array and chunk when a chunk of the store cannot be read; any other
    error passes through unchanged. A run store whose layout has a group or array with missing or unreadable
    metadata is refused before the reader runs (one line naming it), instead of being read without it."""

    first = next(iter(inspect.signature(func).parameters))

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        _check_run_structure(args[0] if args else kwargs.get(first))
        try:
            return func(*args, **kwargs)
        except GccDaskError:
            raise
        except Exception as exc:
            store = args[0] if args else kwargs.get(first)
            error = corrupt_chunk_error(store) if isinstance(store, (str, os.PathLike)) else None
            if error is None:
                raise
            raise error from exc

    return wrapper  # type: ignore[return-value]
