"""Output paths checked before any work: a report, a bench's folder, a performance report that cannot be written is
refused with one line at the start, not with a traceback once the work is done."""

from __future__ import annotations

import os

from gcc_dask.errors import ConfigError

__all__ = ["writable_dir", "writable_file"]


def _why(exc: OSError, folder: str) -> str:
    """Why `folder` could not be made: the file that stands where a folder of its path should be, else the
    system's reason."""
    here = folder
    while here and not os.path.exists(here):
        parent = os.path.dirname(here)
        here = parent if parent != here else ""
    if here and not os.path.isdir(here):
        return f"{here} is a file"
    return exc.strerror or type(exc).__name__


def writable_dir(option: str, path: str | os.PathLike) -> str:
    """`path` as an absolute folder that exists (made here, with its parents) and can be written.

    Raises
    ------
    ConfigError
        One line naming `option`, the path and why it cannot be used (a file in its place or on its way, a
        read-only or missing file system, no permission).
    """
    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if os.fspath(path) == "":
        raise ConfigError(f"{option}: got ''; expected a folder path")
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{option}: got {os.fspath(path)!r}, which cannot be made a folder ({_why(e, target)}); "
                          "expected a folder that can be created and written") from None
    probe = os.path.join(target, f".gcc-dask-write-check-{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{option}: got {os.fspath(path)!r}, a folder that cannot be written ({_why(e, target)}); "
                          "expected a folder that can be written") from None
    return target


def writable_file(option: str, path: str | os.PathLike) -> str:
    """`path` as an absolute file path that can be written: its folder exists (made here) and a file can be
    created there; an existing file is kept as it is (it is replaced when the report is written).

    Raises
    ------
    ConfigError
        One line naming `option`, the path and why it cannot be written.
    """
    if os.fspath(path) == "":
        raise ConfigError(f"{option}: got ''; expected a file path")
    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if os.path.isdir(target):
        raise ConfigError(f"{option}: got {os.fspath(path)!r}, which is a folder; expected a file path")
    folder = os.path.dirname(target)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{option}: got {os.fspath(path)!r}, whose folder cannot be made ({_why(e, folder)}); "
                          "expected a file in a folder that can be created and written") from None
    existed = os.path.exists(target)
    try:
        with open(target, "a"):
            pass
        if not existed:
            os.remove(target)
    except OSError as e:
        raise ConfigError(f"{option}: got {os.fspath(path)!r}, which cannot be written ({_why(e, folder)}); expected a "
                          "file in a folder that can be written") from None
    return target
