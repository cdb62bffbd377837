"""The run's plugin on the workers (:class:`~.tasks.RunPlugin`, which loads f in its set-up): registered without
waiting for a frozen worker, confirmed on the workers left out once they answer, and removed at the run's end.

Plain functions of a client, for :class:`~.runner_cluster.ClusterRunner` (docs/pipeline.rst, section
'Unresponsive workers'): a worker frozen (SIGSTOP, swapping hard) when the run starts used to hold the
registration, and so the run, for as long as it stayed frozen. Now the plugin reaches the others, the frozen ones
are left out (:func:`~.cluster_calls.past_frozen`), and a thread per worker left out asks until the plugin is
there (it gets no shards before).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from gcc_dask.runtime.cluster_calls import past_frozen

logger = logging.getLogger("gcc_dask.runtime.executor")

__all__ = ["confirm_when_ready", "register", "unregister"]

#: seconds between two questions to a worker left out of the registration (:func:`confirm_when_ready`)
CONFIRM_EVERY_S = 0.2


def _plugin_check() -> Callable:
    """The question asked on a worker, ``has_plugin(dask_worker, name) -> bool``: whether the plugin `name` is
    there; when its set-up failed there, its error is raised (and so raised by ``client.run``). A nested function,
    so that it is shipped to the workers by value."""

    def has_plugin(dask_worker, name: str) -> bool:  # runs on a worker
        plugin = dask_worker.plugins.get(name)
        if plugin is not None and getattr(plugin, "fn", True) is None:
            plugin.setup(dask_worker)  # its setup failed there: raise its error here
        return plugin is not None

    return has_plugin


def register(client, plugin, suspected: set[str]) -> set[str]:
    """Register `plugin` (its ``name``) on every worker of `client`, not waiting for a frozen one.

    Parameters
    ----------
    client : distributed.Client
    plugin : RunPlugin
        The run's worker plugin (:class:`~.tasks.RunPlugin`); its set-up loads f.
    suspected : set of str
        Worker addresses known frozen before (not waited for from the start).

    Returns
    -------
    set of str
        The workers left out: `suspected` and those that missed their heartbeats while the registration waited
        (:func:`~.cluster_calls.past_frozen`). The registration on them goes on in a thread of its own; they get
        the plugin when they answer (:func:`confirm_when_ready` says when).

    Raises
    ------
    Exception
        The plugin's set-up error on a worker that answered (f failed to load there).
    """
    name = plugin.name
    has_plugin = _plugin_check()
    started: list[bool] = []

    def on(workers):
        if workers is None:  # every worker: the plain registration
            started.append(True)
            return client.register_plugin(plugin, name=name)
        if not started:  # workers known frozen from the start: the registration waits for them, in a thread
            started.append(True)
            threading.Thread(target=_register_everywhere, args=(client, plugin), name="gcc-dask-register",
                             daemon=True).start()
        # the registration under way (still waiting for the frozen workers) reaches the others
        while not all(client.run(has_plugin, workers=workers, name=name).values()):
            time.sleep(0.05)

    _, frozen = past_frozen(client, on, suspected)
    return set(frozen)


def _register_everywhere(client, plugin) -> None:
    """``client.register_plugin`` on every worker, frozen ones included (it returns once they all answered);
    an error is only logged: a worker's own set-up error is raised by :func:`register`'s question."""
    try:
        client.register_plugin(plugin, name=plugin.name)
    except Exception:
        logger.debug("registering plugin %s", plugin.name, exc_info=True)


def confirm_when_ready(client, name: str, addresses, ready: Callable[[list[str]], None]) -> list[threading.Thread]:
    """Ask each worker of `addresses` (left out by :func:`register`), in a thread per worker, whether plugin
    `name` is there, every :data:`CONFIRM_EVERY_S` seconds until it is: then ``ready([address])``. A worker that
    is ended, gone or whose set-up failed is given up (it stays without shards). Returns the threads (daemons,
    started); the question waits for the worker to answer, however long it stays frozen."""
    has_plugin = _plugin_check()

    def confirm(address: str) -> None:
        while True:
            try:
                if client.run(has_plugin, workers=[address], name=name).get(address):
                    ready([address])
                    return
            except Exception as e:  # ended, gone, or its set-up failed there: it stays without shards
                logger.debug("worker %s: the run's plugin is not there (%r)", address, e)
                return
            time.sleep(CONFIRM_EVERY_S)

    threads = [threading.Thread(target=confirm, args=(address,), name="gcc-dask-plugin-check", daemon=True)
               for address in sorted(addresses)]
    for thread in threads:
        thread.start()
    return threads


def unregister(client, name: str) -> None:
    """Remove plugin `name` from the workers; a failure is only logged (the cluster may be gone already; the
    next run of the store replaces the plugin anyway)."""
    try:
        client.unregister_worker_plugin(name)
    except Exception:  # pragma: no cover - the cluster may be gone already
        logger.debug("could not remove plugin %s", name, exc_info=True)
