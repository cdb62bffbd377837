"""How a task on a worker stops when the client cancels it: :func:`is_cancelled`, :func:`cooperative_sleep`.

``client.cancel`` does not interrupt a running task (docs/pipeline.rst, section 'Straggler injection'): a shard
checks its own state between chunks of work, and an injected straggler sleeps cooperatively, woken by its run's
plugin the moment the worker marks it cancelled.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from distributed import get_worker
from distributed.worker import thread_state

__all__ = ["POLL_INTERVAL_S", "cooperative_sleep", "is_cancelled"]

#: a sleeping straggler is woken by its plugin's transition hook; it also re-checks its own state this
#: often, in seconds, in case a wake-up is missed
POLL_INTERVAL_S = 0.1
_GONE = ("cancelled", "released", "forgotten")


def is_cancelled() -> bool:
    """True when the running task has been cancelled (released) by the client.

    ``client.cancel`` does not interrupt a running task; the worker only marks it ``cancelled`` and waits
    for it to return. This reads the task's own state on its worker (free, but an internal API of
    distributed: ``tests/runtime/test_cancel.py`` pins it). If the internal API moves, it returns False:
    the straggler then runs to the end of its injected delay instead of stopping early.
    """
    try:
        ts = get_worker().state.tasks.get(thread_state.key)
    except Exception:  # pragma: no cover - internal API moved
        return False
    return ts is None or ts.state in ("cancelled", "released", "forgotten")


def cooperative_sleep(seconds: float, plugin: Any = None) -> bool:
    """Sleep ``seconds`` unless the running task is cancelled first. Returns False if cancelled.

    With ``plugin`` (the run's :class:`~gcc_dask.runtime.plugin.RunPlugin`), the sleep waits on an event that
    :meth:`~gcc_dask.runtime.plugin.RunPlugin.transition` sets when the worker
    marks this task cancelled, so the thread is freed at once; either way the task's own state is re-checked
    every ``POLL_INTERVAL_S``.
    """
    end = time.monotonic() + seconds
    event = threading.Event()
    key = getattr(thread_state, "key", None)
    if plugin is not None and key is not None:
        plugin._sleepers[key] = event
    try:
        while True:
            if is_cancelled():
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            if event.wait(min(POLL_INTERVAL_S, left)):
                return False
    finally:
        if plugin is not None and key is not None:
            plugin._sleepers.pop(key, None)
