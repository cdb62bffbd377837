"""The driver's few waits outside its loop (a decode run again, a record fetched alone) end when the scheduler
is lost: a future of a client that lost its scheduler may never resolve, and a run waited there forever (seen
on a loaded machine: ``tests/reliability/test_cutoff_promise.py``'s lost scheduler, about 1 run in 10)."""

from __future__ import annotations

import threading

import pytest

from gcc_dask.errors import ClusterError
from gcc_dask.runtime.executor import BatchRunner
from gcc_dask.runtime.signals import SignalFlag

_HOLD = threading.Event()


def _held() -> int:
    _HOLD.wait(30)
    return 1


class _Runner:
    """What ``BatchRunner._results`` uses of the runner; the scheduler counts as lost after `lost_after`
    polls."""

    def __init__(self, client, lost_after: int) -> None:
        self.client, self.polls, self.lost_after, self._signals = client, 0, lost_after, SignalFlag()

    def _scheduler_lost(self) -> bool:
        self.polls += 1
        return self.polls > self.lost_after

    _lost_scheduler_error = BatchRunner._lost_scheduler_error
    _scheduler_address = "tcp://gone:8786"


def test_a_wait_ends_with_the_run_s_one_line_when_the_scheduler_is_lost(client):
    _HOLD.clear()
    fut = client.submit(_held, pure=False)
    runner = _Runner(client, lost_after=2)
    try:
        with pytest.raises(ClusterError, match="lost the connection to the Dask scheduler at 'tcp://gone:8786'"):
            BatchRunner._results(runner, [fut], poll=0.05)
        assert runner.polls == 3
    finally:
        _HOLD.set()
    # a scheduler still there: the results, in order
    more = [client.submit(lambda x: x * 2, i, pure=False) for i in range(3)]
    assert BatchRunner._results(_Runner(client, lost_after=10**6), more, poll=0.05) == [0, 2, 4]
