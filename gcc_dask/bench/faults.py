"""Real slowness for the tail section's scenarios: one worker process slowed (SIGSTOP/SIGCONT in a duty cycle)
or frozen (SIGSTOP for a while, then SIGCONT), from a thread of the driver while a job runs.
"""

from __future__ import annotations

import abc
import os
import signal
import threading


#: a frozen process is stopped this long after its job starts
FREEZE_AFTER_S = 1.0
#: the slow process runs SLOW_ON_S out of every SLOW_ON_S + SLOW_OFF_S
SLOW_ON_S, SLOW_OFF_S = 0.010, 0.040


# ------------------------------------------------------------------------------------ real slowness
def _victim(client, workers: int) -> int:
    """The process id of the first worker (by address) once `workers` are there: the one slowed or frozen. A
    pipeline ends a worker frozen longer than ``cluster.unresponsive_after`` and its nanny starts another, so
    it is looked up before every job."""
    client.wait_for_workers(workers, timeout=120)
    pids = client.run(os.getpid)
    return int(pids[sorted(pids)[0]])


def _signal(pid: int, sig: int) -> None:
    """``os.kill``, quiet when the process is gone (ended by the run, or by its nanny)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class _Signalling(abc.ABC):
    """A context that signals process `pid` from a thread of its own (:meth:`_run`, which returns early once
    ``self._stop`` is set), and leaves it running (SIGCONT) on exit."""

    name = "gcc-dask-bench-signal"

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    @abc.abstractmethod
    def _run(self) -> None:
        """Signal ``self.pid`` until ``self._stop`` is set (each subclass its own pattern)."""

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        _signal(self.pid, signal.SIGCONT)


class _Slow(_Signalling):
    """Make a process run a fraction of the time: SIGSTOP/SIGCONT in a cycle."""

    name = "gcc-dask-bench-slow"

    def __init__(self, pid: int, on_s: float = SLOW_ON_S, off_s: float = SLOW_OFF_S) -> None:
        super().__init__(pid)
        self.on_s, self.off_s = on_s, off_s

    def _run(self) -> None:
        while not self._stop.is_set():
            _signal(self.pid, signal.SIGSTOP)
            self._stop.wait(self.off_s)
            _signal(self.pid, signal.SIGCONT)
            self._stop.wait(self.on_s)


class _Freeze(_Signalling):
    """Freeze a process (SIGSTOP) `after` seconds into the context for `seconds`, then resume it (SIGCONT)."""

    name = "gcc-dask-bench-freeze"

    def __init__(self, pid: int, seconds: float, after: float = FREEZE_AFTER_S) -> None:
        super().__init__(pid)
        self.seconds, self.after = seconds, after

    def _run(self) -> None:
        if self._stop.wait(self.after):
            return
        _signal(self.pid, signal.SIGSTOP)
        try:
            self._stop.wait(self.seconds)
        finally:
            _signal(self.pid, signal.SIGCONT)
