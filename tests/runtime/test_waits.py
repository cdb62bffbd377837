"""The driver's few waits outside its loop (a decode run again, a record fetched alone) end when the scheduler
is lost: a future of a client that lost its scheduler may never resolve, and a run waited there forever (seen
on a loaded machine: ``tests/reliability/test_cutoff_promise.py``'s lost scheduler, about 1 run in 10). They end
too when every worker was replaced (a task placed on a gone worker waits for ever: a CI run of
``tests/reliability/test_cluster_faults.py`` waited 300 s after the new workers came), and the loop's answer to
that, :meth:`~gcc_dask.runtime.runner_cluster.ClusterRunner._restart_in_flight`, runs again what was lost."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from gcc_dask.errors import ClusterError
from gcc_dask.runtime.executor import BatchRunner
from gcc_dask.runtime.runner_cluster import ClusterRunner
from gcc_dask.runtime.runner_results import ResultsRunner
from gcc_dask.runtime.signals import SignalFlag
from gcc_dask.runtime.workers import WorkersReplaced

_HOLD = threading.Event()


def _held() -> int:
    _HOLD.wait(30)
    return 1


class _Runner:
    """What ``BatchRunner._results`` uses of the runner; the scheduler counts as lost after `lost_after`
    polls, and every worker as replaced after `replaced_after` checks of the workers (None: never)."""

    def __init__(self, client, lost_after: int, replaced_after: int | None = None) -> None:
        self.client, self.polls, self.lost_after, self._signals = client, 0, lost_after, SignalFlag()
        self.checks, self.replaced_after = 0, replaced_after
        self._workers = SimpleNamespace(replaced=False)

    def _check_workers(self) -> None:
        self.checks += 1
        if self.replaced_after is not None and self.checks > self.replaced_after:
            self._workers.replaced = True

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


def test_a_wait_ends_when_every_worker_was_replaced_and_leaves_the_flag_to_the_loop(client):
    _HOLD.clear()
    fut = client.submit(_held, pure=False)
    runner = _Runner(client, lost_after=10**6, replaced_after=2)
    try:
        with pytest.raises(WorkersReplaced):
            BatchRunner._results(runner, [fut], poll=0.05)
        assert runner.checks == 3  # the workers are looked at on every poll, as the loop does
        assert runner._workers.replaced  # (the loop clears it when it runs the batches again)
    finally:
        _HOLD.set()


class _Restarter:
    """What ``ClusterRunner._restart_in_flight`` uses of the runner: it records what it submits and cancels."""

    def __init__(self, inflight) -> None:
        self._inflight = inflight
        self.submitted, self.references, self.cancelled, self.said = [], [], [], []

    def _submit_scheme(self, state, plan, restarts=0):
        self.submitted.append((state.batch, plan, restarts, state.load))
        state.schemes[plan] = _scheme(plan, restarts=restarts)

    def _submit_reference(self, state):
        self.references.append((state.batch, state.attempt))

    def _cancel(self, futures):
        self.cancelled += futures

    def echo(self, line):
        self.said.append(line)


def _scheme(name, result=None, restarts=0):
    return SimpleNamespace(plan=name, result=result, restarts=restarts, shards=[f"{name}-shard"], backup={},
                           decode=f"{name}-decode", score=None)


def _batch(batch, schemes, labels=None, reference=None):
    return SimpleNamespace(batch=batch, schemes=schemes, labels=labels, reference=reference, attempt=0,
                           load=f"read-{batch}", load_key=None)


def test_every_worker_replaced_runs_again_the_schemes_reads_and_references_and_hands_back_what_is_recorded():
    flying = _batch(1, {"gcc": _scheme("gcc")}, reference="ref-1")
    fetched_half = _batch(2, {"gcc": _scheme("gcc", result={"ok": 1}), "uncoded": _scheme("uncoded")},
                          labels="labels-2")
    fetched_whole = _batch(3, {"gcc": _scheme("gcc", result={"ok": 1})}, reference="ref-3")
    runner = _Restarter({1: flying})
    back = ClusterRunner._restart_in_flight(runner, [fetched_half, fetched_whole])
    assert back == [fetched_whole]  # every record on the driver: nothing runs again, it goes to its hand-over
    assert sorted(runner._inflight) == [1, 2]
    # each unrecorded scheme again (restarts + 1), its batch's read let go first (its worker may be gone)
    assert sorted((b, plan, restarts, load) for b, plan, restarts, load in runner.submitted) == [
        (1, "gcc", 1, None), (2, "uncoded", 1, None)]
    assert runner.references == [(1, 1), (2, 1)]  # a reference or labels again, under a new attempt
    assert sorted(runner.cancelled) == ["gcc-decode", "gcc-shard", "uncoded-decode", "uncoded-shard"]
    assert runner.said == ["every Dask worker was replaced: 2 scheme batch(es) in flight run again on the new "
                           "workers"]
    assert fetched_whole.attempt == 0 and fetched_whole.load == "read-3"


def _raises() -> None:
    raise ValueError("no reference")


class _Scorer(ResultsRunner):
    """What ``ResultsRunner._on_score`` uses of the runner, with :class:`_Runner`'s worker checks."""

    _check_workers = _Runner._check_workers

    def __init__(self, client, state, replaced_after: int) -> None:
        _Runner.__init__(self, client, lost_after=10**6, replaced_after=replaced_after)
        self._inflight, self._told, self.said = {state.batch: state}, set(), []
        self.layout = SimpleNamespace(samples=lambda batch: range(4))
        self.warn = self.said.append

    def _scheduler_lost(self) -> bool:
        return False


def test_a_batch_without_reference_does_not_wait_for_ever_for_a_decode_stuck_on_a_gone_worker(client):
    """The score failed (no reference), so its record is the decode's alone, fetched at once; that decode was
    lost with its worker and waits for shards placed on a gone worker, which no new worker ever runs. The run
    waited there for ever (the CI run above printed the batch's no-reference line, then nothing for 300 s); now
    the wait ends once every worker was replaced, and the loop runs the batch again."""
    from distributed import wait

    score = client.submit(_raises, pure=False)
    wait([score])
    stuck = client.submit(lambda: 1, pure=False, workers=["tcp://192.0.2.1:9"], allow_other_workers=False)
    s = SimpleNamespace(plan=SimpleNamespace(name="gcc", num_workers=4), done=False, score=score, decode=stuck,
                        result=None, start_wall=0.0, machine=SimpleNamespace(score_failed=lambda *a: ["unscored"]))
    runner = _Scorer(client, SimpleNamespace(batch=3, schemes={"gcc": s}), replaced_after=1)
    with pytest.raises(WorkersReplaced):
        ResultsRunner._on_score(runner, 3, "gcc", score)
    assert s.result is None and runner.checks == 2  # (no record made up: the scheme runs again)
    assert runner.said and runner.said[0].startswith("batch 3: f raised on its 4 samples uncoded (ValueError")
    client.cancel([stuck])
