"""Cheap content digests of the files a run reads (model weights, data), for the run's fingerprint.

A resumed run must not mix results of two models or two datasets, so the store records a digest of what
the run read, and a resume with other files is refused. Files up to :data:`FULL_HASH_BYTES` are hashed
whole; larger ones by their size, their modification time and the SHA-256 of their first and last
:data:`EDGE_BYTES`. A directory (a Zarr store) counts by the content of its metadata files and the size and
modification time of every other file (its chunks): reading gigabytes of chunks at every start is not an
option, and a chunk rewritten in place gets a new modification time. A file restored with its old time and
the same size goes unseen.
"""

from __future__ import annotations

import hashlib
import os
from typing import Iterable

__all__ = ["file_digest", "files_digest", "files_state"]

FULL_HASH_BYTES = 64 << 20
EDGE_BYTES = 4 << 20


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file's content (whole, or size, modification time and first and last 4 MiB when
    larger than 64 MiB).

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    h = hashlib.sha256()
    size = os.path.getsize(path)
    h.update(str(size).encode())
    with open(path, "rb") as fh:
        if size <= FULL_HASH_BYTES:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        else:
            h.update(str(os.stat(fh.fileno()).st_mtime_ns).encode())
            h.update(fh.read(EDGE_BYTES))
            fh.seek(size - EDGE_BYTES)
            h.update(fh.read(EDGE_BYTES))
    return h.hexdigest()


def files_digest(paths: Iterable[str | os.PathLike]) -> str:
    """One digest of several files: each file's name within its folder and :func:`file_digest`.

    A directory (a Zarr store) counts by its metadata files (``zarr.json``, ``.zarray``, ``.zattrs``, ...)
    and the sizes and modification times of its other files, listed in sorted order.
    """
    return files_state(paths)[0]


def files_state(paths: Iterable[str | os.PathLike]) -> tuple[str, int]:
    """:func:`files_digest` of `paths`, and the newest modification time among their files (``st_mtime_ns``,
    nanoseconds since the epoch; 0 when there is no file).

    The newest time tells a caller whether the digest can stand for the content it read at a time t: a file
    modified within the file system's timestamp resolution of t could change again with the same size and
    time (git's 'racily clean' files), so only files last modified well before t are vouched for.

    Raises
    ------
    OSError
        If a file cannot be read.
    """
    h = hashlib.sha256()
    newest = [0]
    for path in paths:
        path = os.fspath(path)
        h.update(os.path.basename(path.rstrip("/")).encode())
        if os.path.isdir(path):
            _tree_digest(h, path, "", newest)
        else:
            h.update(file_digest(path).encode())
            newest[0] = max(newest[0], os.stat(path).st_mtime_ns)
    return h.hexdigest(), newest[0]


def _tree_digest(h, folder: str, rel: str, newest: list[int] | None = None) -> None:
    """Add a folder's files to `h`, top-down: its own files in sorted order, then each subfolder in sorted
    order (``os.walk``'s order and rules: symbolic links to folders are not followed, a folder that cannot
    be listed is skipped). ``os.scandir`` reads each entry's type with the listing: a Zarr store of 4-D
    chunks is a folder per chunk, and a walk that stats every path costs twice as much."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    subfolders = []
    for e in entries:
        try:
            is_dir = e.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            try:
                link = e.is_symlink()
            except OSError:
                link = False
            if not link:
                subfolders.append(e)
            continue
        h.update((rel + e.name).encode())
        st = e.stat()
        if newest is not None:
            newest[0] = max(newest[0], st.st_mtime_ns)
        if e.name.startswith(("zarr.json", ".z")):
            h.update(file_digest(e.path).encode())
        else:
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    for e in subfolders:
        _tree_digest(h, e.path, rel + e.name + "/", newest)
