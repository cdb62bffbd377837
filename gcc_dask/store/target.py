"""Where a run store goes on disk: what may stand at its path, what an interrupted run left beside it, and the
swap that puts a new store in place.

:func:`check_target` refuses, before any work, a path no store could use; :func:`remove_leftovers` removes the
hidden folders that a killed creation or replacement left next to a store, and the remains of a store removed
while a run wrote it (:func:`store_remains`); ``_swap_in`` replaces a store with two renames, so that its path
always holds the old store, nothing, or the new one (:meth:`~gcc_dask.store.RunStore.create`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

from gcc_dask.errors import StoreError

from .layout import _local, _open_root

logger = logging.getLogger(__name__)

__all__ = ["check_target", "remove_leftovers", "store_remains"]

#: hidden folders next to a store ``NAME``: a new store being built (``.NAME.creating-*``) and an old one being
#: removed after ``--overwrite`` replaced it (``.NAME.replaced-*``); what a killed driver leaves of them is
#: removed by the next :meth:`RunStore.create` or :meth:`RunStore.resume` of that store
_ASIDE = ("creating", "replaced")


def _aside(path, what: str):
    return path.parent / f".{path.name}.{what}-{uuid.uuid4().hex[:8]}"


#: a chunk file of a run store's layout, relative to the store (``gcc/decoded/c/3/0``, ``inputs/status/c/3``), and
#: the probe files a run leaves in its store (``.reachable-*``)
_CHUNK_FILE = re.compile(r"[^/]+/[^/]+/c(/\d+)+|\.reachable-[0-9a-f]+(\.[^/]*)?")


def store_remains(path: str | os.PathLike) -> int | None:
    """The number of files (0 for empty folders only) at `path` when it holds the remains of a run store removed while a run still wrote it
    (chunk files that a late write put back, ``gcc/decoded/c/30/0``, and no ``zarr.json`` anywhere); None for
    anything else (a store, an empty or missing folder, a folder with any other file). Such remains are no store:
    every reader refused them as "not a Zarr v3 store" until they were removed by hand."""
    path = _local(path)
    if not path.is_dir() or (path / "zarr.json").exists():
        return None
    if not any(path.iterdir()):
        return None
    count = 0
    for folder, _, files in os.walk(path):
        for name in files:
            rel = (Path(folder) / name).relative_to(path).as_posix()
            if name == "zarr.json" or not _CHUNK_FILE.fullmatch(rel):
                return None
            count += 1
    return count


def remove_leftovers(path: str | os.PathLike) -> list[str]:
    """Remove the hidden folders that an interrupted creation or replacement of the store at `path` left next
    to it (``.NAME.creating-*``, ``.NAME.replaced-*``), and the remains of a store removed while a run wrote it
    (:func:`store_remains`: a new store then takes its place, as if it had never been there; one warning says
    so); the names removed. Call it while holding the store's :class:`~gcc_dask.store.StoreLock` (the pipeline
    does): another driver's store being built is one of them.
    """
    path = _local(path)
    removed = []
    remains = store_remains(path)
    if remains is not None:
        shutil.rmtree(path, ignore_errors=True)
        logger.warning("store: %s held %d chunk file(s) and no zarr.json, what late writes left of a store removed "
                       "while a run wrote it; removed them, a new store starts there", path, remains)
        removed.append(path.name)
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return removed
    for p in siblings:
        if p.is_dir() and not p.is_symlink() and any(p.name.startswith(f".{path.name}.{w}-") for w in _ASIDE):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    return removed


def check_target(path: str | os.PathLike, overwrite: bool) -> None:
    """Refuse, before any work, a store path that neither a new store nor a resume could use: a file, or (with
    `overwrite`) a folder that holds something other than a gcc-dask store (such folders are never deleted).

    Raises
    ------
    StoreError
        One line naming the path and what is there.
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise StoreError(f"store path: got {str(target)!r}, which is a file; expected a folder: a new store, or a "
                         "run store to resume")
    if overwrite and target.is_dir() and store_remains(target) is None:
        if any(target.iterdir()) and not (target / "zarr.json").is_file():
            raise StoreError(f"store path: got {str(target)!r}, a folder of other files; expected a run store or an "
                             "empty folder to overwrite (no other folder is ever deleted): choose another store path")
        _check_replaceable(target)


def _check_replaceable(path) -> None:
    """`path` may be replaced: an empty directory or a gcc-dask store (other directories are never deleted)."""
    if path.is_dir() and not any(path.iterdir()):
        return
    _open_root(path)  # raises StoreError for anything that is not ours


def _swap_in(tmp, path) -> None:
    """Put the complete store `tmp` at `path`, replacing what is there: the old store is renamed aside first,
    then `tmp` renamed into place (two renames: at every instant `path` holds the old store, nothing, or the
    new one, never a half-deleted one), then the old one removed."""
    old = None
    if path.exists():
        old = _aside(path, "replaced")
        os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        if old is not None and not path.exists():
            os.rename(old, path)  # put the old store back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
