"""Where a run's time goes: seconds per named phase, on the wall clock of the calling process.

:func:`gcc_dask.run_pipeline` times its parts with a :class:`PhaseTimer` and returns them as
:attr:`gcc_dask.pipeline.RunResult.phases_s`; the bench's ``cheap`` section shows them beside each ratio, so a
small run's fixed costs (cluster, probe, digests, store, composition, first batch) are measured, not guessed.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

__all__ = ["PhaseTimer"]


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
