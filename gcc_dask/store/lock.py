"""One driver per store: an advisory lock held while a run creates, resumes or writes its store.

The lock is ``fcntl.flock`` on a file next to the store (``.<name>.lock`` in the store's folder, so that
``--overwrite`` can replace the store while the lock stays put). The kernel releases it when the driver
exits, however it exits, so a crashed run never leaves a stale lock behind (a killed driver leaves the
empty file, which the next run simply locks); a run that ends removes it. The file holds the owner's
pid, host and start time, only to say who holds it. Where ``fcntl`` does not exist (Windows) the lock is a
no-op.
"""

from __future__ import annotations

import json
import os
import socket

from gcc_dask.errors import StoreError

from .layout import _local, _now

__all__ = ["StoreLock"]


class StoreLock:
    """Hold the store at `path` for this process: ``with StoreLock(path): ...``.

    Raises
    ------
    StoreError
        On entry, when another process holds the lock (the line names its pid, host and start time).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = _local(path)
        self.lock_path = self.path.parent / f".{self.path.name}.lock"
        self._fh = None

    def __enter__(self) -> "StoreLock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            return self._acquire(fcntl)
        except OSError as e:
            raise StoreError(f"store path: got {str(self.path)!r}; cannot create its lock file "
                             f"{str(self.lock_path)!r} ({type(e).__name__}: {e.strerror or e}); expected a "
                             "store path in a folder this process can write") from None

    def _acquire(self, fcntl) -> "StoreLock":
        while True:
            fh = open(self.lock_path, "a+")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.seek(0)
                owner = _owner(fh.read())
                fh.close()
                raise StoreError(f"store path: got {str(self.path)!r}, which another gcc-dask run is writing "
                                 f"({owner}); wait for it to finish, or choose another --out") from None
            try:
                same = os.fstat(fh.fileno()).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            fh.close()  # the holder removed the file between our open and our lock: lock the new one
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}))
        fh.flush()
        self._fh = fh
        return self

    def __exit__(self, *exc) -> None:
        if self._fh is not None:
            try:
                os.unlink(self.lock_path)  # removed while still held: a waiting opener retries on the new file
            except OSError:
                pass
            finally:
                self._fh.close()  # closing the file releases the lock
                self._fh = None


def _owner(text: str) -> str:
    try:
        info = json.loads(text)
        return f"pid {info['pid']} on host {info['host']}, since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "owner unknown"

