"""Ctrl-C (SIGINT) and SIGTERM while a run holds a cluster: stop cleanly, never half-way (docs/cli.rst).

Two helpers, for the two moments a signal must not act at once:

* :class:`DeferredSignals` while an embedded ``LocalCluster`` starts. Python's own handlers would raise in the
  middle of the start and leak half-started worker processes; ignoring SIGINT (so that the workers inherit
  ``SIG_IGN``) dropped a Ctrl-C there altogether. Instead the signals are *recorded*, and blocked in the
  starting thread, so that every thread the cluster starts, and every worker process those threads spawn
  (now or when a nanny restarts one), inherits the blocked mask: a terminal's Ctrl-C or a cgroup's SIGTERM
  never reaches the workers, which the driver closes itself. After the start the signal is raised
  (:meth:`DeferredSignals.raise_pending`) once the caller can close what it started.
* :class:`SignalFlag` while the driver's loop runs: a signal sets a flag that the loop turns into an
  exception at a point of its choosing (a signal raised inside a distributed ``Future.__del__`` is discarded
  and the run goes on). A second signal raises at once.

Both work only in the main thread (where Python runs signal handlers); elsewhere they do nothing but the
blocking.
"""

from __future__ import annotations

import signal
import threading
from typing import Callable

from gcc_dask.errors import Terminated

__all__ = ["SIGNALS", "DeferredSignals", "SignalFlag", "interruption"]

#: the signals that stop a run: Ctrl-C and SIGTERM
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def interruption(signum: int) -> KeyboardInterrupt:
    """The exception a stopping signal becomes: :class:`~gcc_dask.errors.Terminated` for SIGTERM, else
    ``KeyboardInterrupt``."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _restore(signum: int, handler) -> None:
    """Put back a handler returned by ``signal.signal`` (None: one installed from C; the default then)."""
    signal.signal(signum, signal.SIG_DFL if handler is None else handler)


class DeferredSignals:
    """A context in which SIGINT and SIGTERM are recorded, not acted on, and blocked in this thread (so that
    the threads and processes started inside inherit the block). See the module docstring.

    ``pending`` is the first signal received (None if none); :meth:`raise_pending` raises it.
    """

    def __init__(self) -> None:
        self.pending: int | None = None
        self._handlers: dict[int, object] = {}
        self._mask: set | None = None

    def _record(self, signum, frame) -> None:
        if self.pending is None:
            self.pending = signum

    def __enter__(self) -> "DeferredSignals":
        if _main_thread():
            self._handlers = {s: signal.signal(s, self._record) for s in SIGNALS}
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        return self

    def __exit__(self, *exc) -> None:
        # unblock first: a signal that was pending (no other thread could take it) is delivered now, to
        # the recording handler; then put the previous handlers back
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        for s, handler in self._handlers.items():
            _restore(s, handler)
        self._handlers = {}

    def raise_pending(self) -> None:
        """Raise the recorded signal (``KeyboardInterrupt`` or :class:`~gcc_dask.errors.Terminated`), if any."""
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise interruption(signum)


class SignalFlag:
    """While installed, SIGINT and SIGTERM set :attr:`signum` instead of raising; a second one raises at once.

    :meth:`install` returns the function that puts the previous handlers back (a no-op outside the main
    thread, where nothing is installed); :meth:`check` raises the recorded signal.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def install(self) -> Callable[[], None]:
        self.signum = None
        if not _main_thread():
            return lambda: None

        def handler(signum, frame):
            if self.signum is not None:
                raise interruption(signum)
            self.signum = signum

        previous = {s: signal.signal(s, handler) for s in SIGNALS}

        def restore() -> None:
            for s, h in previous.items():
                _restore(s, h)

        return restore

    def check(self) -> None:
        """Raise the recorded signal, if any."""
        if self.signum is not None:
            raise interruption(self.signum)
