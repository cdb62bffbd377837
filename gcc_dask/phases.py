"""Where a run's time goes: seconds per named phase, on the wall clock of the calling process.

:func:`gcc_dask.run_pipeline` times its parts with a :class:`PhaseTimer` and returns them as
:attr:`gcc_dask.pipeline.RunResult.phases_s`; the bench's ``cheap`` section shows them beside each ratio, so a
small run's fixed costs (cluster, probe, digests, store, composition, first batch) are measured, not guessed.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

__all__ = ["PhaseTimer", "format_phases"]


class PhaseTimer:
    """Seconds per phase: ``with timer("store"): ...`` adds the block's duration to ``timer.seconds["store"]``
    (a phase entered twice sums both). ``clock`` is any monotonic clock in seconds (a test passes its own)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.started = clock()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = self.clock()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + (self.clock() - t0)

    def elapsed(self) -> float:
        """Seconds since the timer was made."""
        return self.clock() - self.started


#: the parts of ``batches`` that :func:`format_phases` names in brackets, with their words
WITHIN_BATCHES = (("load_f", "f loaded on the workers"), ("first_batch", "first batch"))

#: the phases :func:`format_phases` names, in the order a run goes through them
ORDER = ("advice", "connect", "probe", "digests", "store", "composition", "batches", "finish")


def format_phases(seconds: dict[str, float]) -> str:
    """One line for people: ``time: 4.2 s in all: probe 0.07 s, store 0.05 s, composition 1.2 s, batches 2.8 s
    (f loaded on the workers 1.1 s, first batch 0.31 s), finish 0.02 s``; phases under 5 ms are left out, and so is
    a phase the run skipped. The load of f and the first batch are parts of ``batches``."""
    parts = []
    for name in ORDER:
        value = seconds.get(name)
        if value is None or value < 0.005:
            continue
        text = f"{name} {value:.2g} s" if value < 10 else f"{name} {value:.0f} s"
        if name == "batches":
            # (a load of f under 5 ms is left out, as a phase is; the first batch never)
            within = [f"{label} {seconds[key]:.2g} s" for key, label in WITHIN_BATCHES
                      if key in seconds and (key == "first_batch" or seconds[key] >= 0.005)]
            text += f" ({', '.join(within)})" if within else ""
        parts.append(text)
    total = seconds.get("total")
    head = f"time: {total:.3g} s in all" if total is not None else "time"
    return head + (": " + ", ".join(parts) if parts else "")
