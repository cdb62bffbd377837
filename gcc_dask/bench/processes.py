"""What the benchmarks measure of processes: the workers' process ids, the CPU seconds processes have used, and
the peak resident memory of the driver and the workers (:class:`MemorySampler`).
"""

from __future__ import annotations

import os
import threading


def _worker_pids(client) -> list[int]:
    """Process ids of the workers; empty when they run in this process (threads)."""
    pids = set(client.run(os.getpid).values())
    return sorted(pids - {os.getpid()})


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) each of the processes `pids` has used so far (one that is gone is left out)."""
    import psutil

    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:  # pragma: no cover - a worker went away
            continue
        out[pid] = t.user + t.system
    return out


def _cpu_s(pids: list[int]) -> float:
    return sum(cpu_by_pid(pids).values())


class MemorySampler:
    """Peak resident memory (bytes) of this process and of a set of other processes, sampled in a thread.

    Use as a context manager; ``driver_peak``, ``workers_peak`` (sum over the processes at each sample)
    and ``driver_start`` are set when it exits.
    """

    def __init__(self, worker_pids: list[int], interval_s: float = 0.02) -> None:
        import psutil

        self._me = psutil.Process()
        self._workers = [psutil.Process(p) for p in worker_pids]
        self.interval_s = interval_s
        self.driver_start = self.driver_peak = self.workers_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gcc-dask-bench-memory", daemon=True)

    def _sample(self) -> None:
        import psutil

        self.driver_peak = max(self.driver_peak, self._me.memory_info().rss)
        total = 0
        for p in self._workers:
            try:
                total += p.memory_info().rss
            except psutil.Error:  # pragma: no cover - a worker went away
                pass
        self.workers_peak = max(self.workers_peak, total)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> MemorySampler:
        self.driver_start = self._me.memory_info().rss
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
