"""The scheduler plugin that keeps the coded runs' state for their dashboard page (docs/dashboard.rst).

Registered by the run from its client (:func:`~gcc_dask.dashboard.driver.attach`, idempotent: one per
scheduler, kept for the next runs). It learns what the run does from the driver's events, which come on the
client's own batched stream to the scheduler (the operation :data:`~.names.STREAM_OP`, whose handler the plugin
adds: no round trip, in order with the run's tasks) or, from a driver that cannot use it, as Dask events on the
topic ``gcc-dask`` (its :meth:`log_event` hook); and from the transitions of the run's shard keys (which
worker, when, with what outcome). Everything lives in :class:`~gcc_dask.dashboard.state.DashboardState`, in
memory, bounded.
"""

from __future__ import annotations

import logging
import time

from distributed.diagnostics.plugin import SchedulerPlugin

from gcc_dask.dashboard.names import PLUGIN_NAME, STREAM_OP, TOPIC
from gcc_dask.dashboard.state import PREFIXES, DashboardState

__all__ = ["DashboardPlugin"]

logger = logging.getLogger(__name__)


def _stream_handler(scheduler):
    def handle(events=(), **_) -> None:
        try:
            plugin = scheduler.plugins.get(PLUGIN_NAME)
            if plugin is not None and isinstance(events, (list, tuple)):
                plugin.events(events)
        except Exception:  # never raised: it would close the client's stream to the scheduler
            logger.debug("gcc-dask: events not understood", exc_info=True)

    return handle


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
        #: seconds of the scheduler's thread the page has cost so far: its hooks on the run's shard transitions
        #: (past the first tests, which every task's transitions pay), the driver's events, and the redraws of
        #: open pages (:mod:`gcc_dask.dashboard.page`); with their counts. The bench reads them
        #: (:mod:`gcc_dask.bench.page`). Timed by the wall clock (``time.perf_counter``, read in user space; the
        #: thread is seldom switched out in these short calls), not by the thread's CPU clock: ``thread_time``
        #: is a system call, which cost the scheduler's thread 15 us a call on average in a smoke run (up to 8
        #: ms: the thread is switched out in it), 3% of the run, more than the hooks it timed (BENCHMARKS.md,
        #: "The run page's cost").
        self.cpu = {"transitions_s": 0.0, "events_s": 0.0, "redraws_s": 0.0, "transitions": 0, "events": 0,
                    "redraws": 0}

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler
        # the driver's events on the client's stream: a handler that never raises (an exception in a stream
        # handler closes the client's stream), and finds the plugin registered at the time (this one may be gone)
        scheduler.stream_handlers[STREAM_OP] = _stream_handler(scheduler)
        try:
            from gcc_dask.dashboard.mount import mount

            self.mounted = mount(scheduler)
        except Exception:  # the runs go on without their page
            logger.warning("gcc-dask: the run page could not be added to the dashboard", exc_info=True)
            self.mounted = False

    def log_event(self, topic, msg) -> None:
        if topic != TOPIC or not isinstance(msg, dict):
            return
        self.events(msg.get("events", ()))

    def events(self, events) -> None:
        """Apply the driver's events (a list of dicts; see :meth:`.state.DashboardState.event`)."""
        t = time.perf_counter()
        now = time.time()
        for ev in events:
            try:
                self.state.event(ev, now)
            except Exception:  # a malformed event costs the page that event, never the scheduler
                logger.debug("gcc-dask: event not understood: %r", ev, exc_info=True)
        self.cpu["events_s"] += time.perf_counter() - t
        self.cpu["events"] += len(events)

    def transition(self, key, start, finish, *args, stimulus_id=None, **kwargs) -> None:
        # called for every transition of every task: only a task's start (-> processing) and its end (processing
        # -> memory, erred, released, ...) of a run's shard or a sweep's task are looked at (the page draws no
        # other), the cheapest tests first
        if (finish != "processing" and start != "processing") or not self.state.runs or type(key) is not str \
                or not key.startswith(PREFIXES):
            return
        t = time.perf_counter()
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
        self.cpu["transitions_s"] += time.perf_counter() - t
        self.cpu["transitions"] += 1
