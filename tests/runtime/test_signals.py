"""Ctrl-C and SIGTERM while a run holds a cluster (gcc_dask.runtime.signals), without a cluster.

Signals are sent to the main thread with ``signal.raise_signal`` / ``signal.pthread_kill``. (A process-directed
``os.kill`` is taken by any thread that does not block the signal: one left over from an earlier test would take
it while the main thread blocks it.)
"""

from __future__ import annotations

import signal
import threading

import pytest

from gcc_dask.errors import Terminated
from gcc_dask.runtime.signals import DeferredSignals, SignalFlag, interruption


def _blocked_in_a_new_thread() -> set:
    """The signals blocked in a new thread started now (it inherits the starting thread's mask)."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("mask", signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    t.start()
    t.join()
    return out["mask"]


def test_interruption_is_terminated_for_sigterm_and_keyboard_interrupt_for_sigint():
    assert type(interruption(signal.SIGTERM)) is Terminated and isinstance(interruption(signal.SIGTERM),
                                                                           KeyboardInterrupt)
    assert type(interruption(signal.SIGINT)) is KeyboardInterrupt


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_deferred_signals_are_recorded_blocked_for_new_threads_and_raised_after(signum):
    before = signal.getsignal(signum)
    with DeferredSignals() as deferred:
        # what the cluster's threads (and the worker processes they spawn) inherit
        assert {signal.SIGINT, signal.SIGTERM} <= _blocked_in_a_new_thread()
        signal.pthread_kill(threading.main_thread().ident, signum)  # pending (blocked here) until the block ends
        assert deferred.pending is None and signum in signal.sigpending()
    assert deferred.pending == signum
    assert signal.getsignal(signum) is before  # the previous handler is back
    assert not {signal.SIGINT, signal.SIGTERM} & signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with pytest.raises(KeyboardInterrupt) as info:
        deferred.raise_pending()
    assert isinstance(info.value, Terminated) == (signum == signal.SIGTERM)
    deferred.raise_pending()  # raised once


def test_nothing_is_raised_without_a_signal():
    with DeferredSignals() as deferred:
        pass
    deferred.raise_pending()
    assert deferred.pending is None


def test_signal_flag_records_the_first_signal_and_raises_on_the_second():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when pytest was started in the background (nohup, &)
    flag = SignalFlag()
    restore = flag.install()
    try:
        signal.raise_signal(signal.SIGTERM)
        assert flag.signum == signal.SIGTERM  # recorded, not raised
        with pytest.raises(Terminated):
            flag.check()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # a second signal raises at once
    finally:
        restore()
    assert signal.getsignal(signal.SIGINT) is before  # put back as it was
