"""The driver's side of the run's dashboard page: put the page on the scheduler, and tell it what the run does.

:func:`attach` registers :class:`~gcc_dask.dashboard.plugin.DashboardPlugin` on the client's scheduler (once per
scheduler: the plugin stays for later runs) and returns the page's link, or None when the scheduler serves no
dashboard. :func:`publish` then sends the run's events on the client's own batched stream to the scheduler (the
operation :data:`~.names.STREAM_OP`, which the plugin handles: no round trip, in order with the run's tasks),
or, to a scheduler whose plugin has no handler for it (one registered by an older gcc-dask), as Dask events on
the topic :data:`TOPIC` (``Scheduler.log_event``, one round trip each). It costs the driver's loop a list
append: the events are sent from the client's event loop, those of 50 ms in one message, in order. A client
that was never attached publishes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import weakref

from gcc_dask.dashboard.names import PAGE, PLUGIN_NAME, STREAM_OP, TOPIC

__all__ = ["PAGE", "PLUGIN_NAME", "TOPIC", "attach", "page_url", "publish", "record_summary", "start_event",
           "sweep_start_event"]

logger = logging.getLogger(__name__)

#: seconds the events are gathered before one message takes them to the scheduler
FLUSH_S = 0.05

_publishers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_attaching = threading.Lock()  # one attach at a time (a run and a notebook cell may attach one client at once)


class _Publisher:
    """The events of one client not sent yet, and the one flush under way on the client's event loop."""

    def __init__(self, client, stream: bool = False) -> None:
        self.client = client
        self.stream = stream  # on the client's batched stream (else one log_event round trip a message)
        # the stream to the scheduler that was asked: after a reconnect (a scheduler started anew, without the
        # plugin's handler) the events are not sent on it, as an operation the scheduler has no handler for
        # would close the client's stream
        self.comm = getattr(client, "scheduler_comm", None)
        self._lock = threading.Lock()
        self._pending: list[dict] = []
        self._scheduled = False
        self._order: asyncio.Lock | None = None

    def add(self, event: dict) -> None:
        with self._lock:
            self._pending.append(event)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.client.loop.add_callback(self._flush)
        except Exception:  # the client is closing: the page goes idle
            self._scheduled = False

    async def _flush(self) -> None:
        await asyncio.sleep(FLUSH_S)
        while True:
            with self._lock:
                events, self._pending = self._pending, []
                if not events:
                    self._scheduled = False
                    return
                if self.stream:  # taken and queued at once: in order with flush_now
                    self._stream(events)
                    continue
            await self._send(events)

    @property
    def current(self) -> bool:
        """Whether the client still talks to the scheduler it was attached on (the same stream)."""
        return getattr(self.client, "scheduler_comm", None) is self.comm

    def _stream(self, events: list[dict]) -> None:
        if not self.current:  # reconnected since: the page of that scheduler is gone (attach again)
            return
        try:
            self.client._send_to_scheduler({"op": STREAM_OP, "events": events})  # (thread-safe; queued in order)
        except Exception as e:  # the client is closing: the page misses these, the run goes on
            logger.debug("dashboard events not sent: %r", e)

    async def _send(self, events: list[dict]) -> None:
        if self._order is None:  # created on the client's event loop, where every send runs
            self._order = asyncio.Lock()
        try:
            async with self._order:  # in the order taken: a flush under way goes before the run's last event
                await self.client.scheduler.log_event(topic=TOPIC, msg={"events": events})
        except Exception as e:  # the scheduler is busy or gone: the page misses these, the run goes on
            logger.debug("dashboard events not sent: %r", e)

    def flush_now(self, timeout: float = 5.0) -> None:
        """Send what is pending: on the client's stream, ahead of anything the client sends after it (the run's
        first shards); else as a round trip, waited for (the run's last event, before a client closes)."""
        with self._lock:
            events, self._pending = self._pending, []
            if events and self.stream:
                self._stream(events)
                return
        if not events or getattr(self.client, "status", "running") != "running":
            return
        try:
            self.client.sync(self._send, events, callback_timeout=timeout)
        except Exception as e:
            logger.debug("dashboard events not sent: %r", e)


def page_url(client) -> str | None:
    """The run page's link on `client`'s dashboard (beside ``client.dashboard_link``), or None without one."""
    try:
        link = client.dashboard_link
    except Exception:
        return None
    if not link:
        return None
    base = link[: -len("/status")] if link.rstrip("/").endswith("/status") else link.rstrip("/")
    return base.rstrip("/") + PAGE


def _served(dask_scheduler=None) -> tuple[bool, bool]:
    """Whether the scheduler serves the page, and whether it takes the driver's events on the client's stream
    (runs on the scheduler)."""
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return bool(getattr(plugin, "mounted", False)), STREAM_OP in getattr(dask_scheduler, "stream_handlers", {})


def attach(client) -> str | None:
    """Put the run's page on `client`'s scheduler and start publishing; the page's link, or None.

    None, and nothing is published, when the scheduler serves no dashboard, or cannot load the plugin (a
    scheduler without gcc-dask installed: the run goes on without the page, and says why in the log), or when the
    environment variable ``GCC_DASK_RUN_PAGE`` is ``off`` (the run then publishes nothing).
    """
    with _attaching:
        return _attach(client)


def _attach(client) -> str | None:
    if os.environ.get("GCC_DASK_RUN_PAGE", "").lower() in ("0", "off", "false", "no"):
        _publishers.pop(client, None)  # (a client attached before publishes no more)
        return None
    p = _publishers.get(client)
    if p is not None and p.current:
        return page_url(client)
    _publishers.pop(client, None)
    try:
        try:
            info = client.scheduler_info(n_workers=0)
        except TypeError:  # an older distributed without n_workers
            info = client.scheduler_info()
    except Exception:  # the scheduler is gone: the run says so itself
        return None
    if "dashboard" not in (info.get("services") or {}):
        return None
    from gcc_dask.dashboard.plugin import DashboardPlugin

    try:
        client.register_plugin(DashboardPlugin(), name=PLUGIN_NAME)
        served = client.run_on_scheduler(_served)
    except Exception as e:
        logger.warning("the gcc-dask dashboard page could not be put on the scheduler: %r", e)
        return None
    served, stream = served if isinstance(served, (tuple, list)) else (served, False)
    if not served:
        return None
    _publishers[client] = _Publisher(client, stream=bool(stream) and hasattr(client, "_send_to_scheduler"))
    return page_url(client)


def publish(client, event: dict) -> None:
    """Send one event of the run to its page (a no-op for a client that was not :func:`attach`-ed).

    `event` is a dict of msgpack-able values with ``kind`` (``start``, ``meta``, ``submit``, ``cutoff``, ``done``,
    ``end``) and ``run`` (the run's token); the time is added. ``start`` and ``end`` are sent at once: the page
    then knows the run before its first shard starts.
    """
    p = _publishers.get(client)
    if p is None:
        return
    event.setdefault("t", time.time())
    p.add(event)
    if event.get("kind") in ("start", "end"):  # before the run's first shard starts; before its client closes
        p.flush_now()


def _num(x) -> float:
    x = float(x)
    return x if math.isfinite(x) else float("nan")


def record_summary(records: list[dict]) -> list[dict]:
    """The few values of each scheme's batch record that the page shows (no arrays but the kept shards)."""
    out = []
    for r in records:
        mask = r.get("received_mask")
        out.append({
            "scheme": r.get("scheme"), "status": int(r.get("status", 0)),
            "batch_latency_s": _num(r.get("batch_latency_s", math.nan)), "cutoff_s": _num(r.get("cutoff_s", math.nan)),
            "rel_acc": _num(r.get("rel_acc", math.nan)), "mse": _num(r.get("mse", math.nan)),
            "backups": int(r.get("n_backups", 0) or 0),
            "received": None if mask is None else [int(i) for i, v in enumerate(mask) if v],
        })
    return out


def start_event(token: str, plans, output_size: int, batches: int | None = None) -> dict:
    """The event that starts a run on its page: its schemes (N, K, the results the cutoff needs) and its metric
    (RelAcc for an f with two or more outputs per sample, else MSE). `plans` are the runner's scheme plans."""
    schemes = {}
    for p in plans:
        spec = getattr(p, "speculation", None) is not None
        schemes[p.name] = {"N": int(p.num_workers), "K": int(p.num_inputs), "speculative": spec,
                           "needed": int(p.regular(True).sum())}
    return {"kind": "start", "run": token, "schemes": schemes, "batches": batches,
            "metric": "rel_acc" if output_size >= 2 else "mse"}


def sweep_start_event(token: str, labels, grid: str, tasks: int, metric: str) -> dict:
    """The event that starts a sweep on the page: its schemes (`labels`), each run on every cell of `grid` (a
    line such as ``"K 8; N 16, 32; S 0-4"``), its number of tasks (a cell and a block of trials each) and its
    metric (``rel_acc`` or ``mse``)."""
    schemes = {str(label): {"N": 1, "K": 1, "needed": 1, "grid": grid} for label in labels}
    return {"kind": "start", "run": token, "what": "sweep", "schemes": schemes, "batches": int(tasks),
            "metric": metric}
