"""A lost scheduler, and the client's noise about lost results: what :class:`~.runner_cluster.ClusterRunner` tells
the user about them (docs/pipeline.rst, section 'Failures and erasures').

A run whose scheduler is gone stops with one line (:func:`lost_scheduler_error`) once the client has given up
reconnecting (:func:`scheduler_lost`); the client's own warnings about the run's lost results, and about its
failed reconnection, are logged at DEBUG level only (:class:`LostFetchLogFilter`): the run handles those and
says so in its own lines.
"""

from __future__ import annotations

from gcc_dask.errors import ClusterError
from gcc_dask.runtime.cluster_calls import DebugOnly

__all__ = ["LostFetchLogFilter", "lost_scheduler_error", "scheduler_lost"]


class LostFetchLogFilter(DebugOnly):
    """Drop the client's "Couldn't gather N keys, rescheduling" warning about this run's own keys (those whose
    names contain `token`; log it at DEBUG level instead): results lost with a worker are the runner's to handle
    (a decode is run again, a batch restarted, or the run stops with one line when every worker is gone), not the
    user's to read. The same for "Failed to reconnect to scheduler": the run then stops with its own line about
    it."""

    def __init__(self, token: str) -> None:
        super().__init__(lambda text: (text.startswith("Couldn't gather") and token in text)
                         or text.startswith("Failed to reconnect"))
        self.token = token


def scheduler_lost(client, exc: BaseException | None = None) -> bool:
    """Whether `client` has lost its scheduler for good: it has closed (after failing to reconnect within its
    timeout), or `exc` is the client's own "closed" error while it is not running. An error of the driver's own
    code while the client is connected is a bug, and is not taken for a lost scheduler."""
    from distributed.client import ClosedClientError
    from distributed.comm import CommClosedError

    if client.status in ("closing", "closed"):
        return True
    return isinstance(exc, (ClosedClientError, CommClosedError)) and client.status != "running"


def lost_scheduler_error(address: str | None, exc: BaseException | None = None) -> ClusterError:
    """The one line that stops a run whose scheduler, at `address`, is gone; `exc` (its type is named) the error
    that showed it."""
    why = f" ({type(exc).__name__})" if exc is not None else ""
    return ClusterError(
        f"cluster: lost the connection to the Dask scheduler at {address!r}{why}; the batches finished before are "
        "in the store: run the same command again to resume once the scheduler is back")
