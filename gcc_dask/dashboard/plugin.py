"""The scheduler plugin that keeps the coded runs' state for their dashboard page (docs/dashboard.rst).

Registered by the run from its client (:func:`~gcc_dask.dashboard.driver.attach`, idempotent: one per
scheduler, kept for the next runs). It learns what the run does from the driver's events on the Dask topic
``gcc-dask`` (its :meth:`log_event` hook) and from the transitions of the run's shard keys (which worker, when,
with what outcome); everything lives in :class:`~gcc_dask.dashboard.state.DashboardState`, in memory, bounded.
"""

from __future__ import annotations

import logging
import time

from distributed.diagnostics.plugin import SchedulerPlugin

from gcc_dask.dashboard.names import PLUGIN_NAME, TOPIC
from gcc_dask.dashboard.state import DashboardState

__all__ = ["DashboardPlugin"]

logger = logging.getLogger(__name__)


def _compute_times(startstops) -> tuple[float | None, float | None]:
    """The worker's start and stop of a task's ``compute`` (from a finished task's ``startstops``)."""
    for ss in startstops or ():
        if isinstance(ss, dict) and ss.get("action") == "compute":
            return float(ss["start"]), float(ss["stop"])
    return None, None


class DashboardPlugin(SchedulerPlugin):
    """Keeps every gcc-dask run's state on the scheduler and serves its page (:mod:`~.mount`)."""

    idempotent = True
    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.state = DashboardState()
        self.scheduler = None
        self.mounted = False

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler
        try:
            from gcc_dask.dashboard.mount import mount

            self.mounted = mount(scheduler)
        except Exception:  # the runs go on without their page
            logger.warning("gcc-dask: the run page could not be added to the dashboard", exc_info=True)
            self.mounted = False

    def log_event(self, topic, msg) -> None:
        if topic != TOPIC or not isinstance(msg, dict):
            return
        now = time.time()
        for ev in msg.get("events", ()):
            try:
                self.state.event(ev, now)
            except Exception:  # a malformed event costs the page that event, never the scheduler
                logger.debug("gcc-dask: event not understood: %r", ev, exc_info=True)

    def transition(self, key, start, finish, *args, stimulus_id=None, **kwargs) -> None:
        if not self.state.runs or type(key) is not str or not key.startswith("eval-b"):
            return
        try:
            worker, t0, t1 = None, None, None
            if finish == "processing":
                ts = self.scheduler.tasks.get(key) if self.scheduler is not None else None
                ws = getattr(ts, "processing_on", None)
                worker = getattr(ws, "address", None)
            elif finish == "memory":
                worker = kwargs.get("worker")
                t0, t1 = _compute_times(kwargs.get("startstops"))
            self.state.transition(key, finish, worker, time.time(), t0, t1)
        except Exception:
            logger.debug("gcc-dask: transition of %r not followed", key, exc_info=True)
