"""The batch's one read (``load_batch``) that its coded shards take, on a stub client: submitted once per batch in
the batch's graph update, above its shards and on a worker of its own; not for a selection scheme, nor on a
single worker; run again elsewhere, with the schemes that took it, when its worker died while reading or went
quiet; reported to the quiet-worker rescue while something still needs it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from distributed import KilledWorker

from gcc_dask.coding import make_code
from gcc_dask.composition import BatchLayout
from gcc_dask.runtime.cutoff import CutoffPolicy
from gcc_dask.runtime.executor import BatchRunner, SchemePlan
from gcc_dask.runtime.quiet import waits_on
from gcc_dask.runtime.tasks import evaluate_shard, load_batch, reference_task
from gcc_dask.runtime.window import priority
from run_helpers import StubFuture


_Future = StubFuture


class _Client:
    """Records every task of each graph update (key -> (function, args, annotations)); runs nothing."""

    def __init__(self, workers=("tcp://a", "tcp://b")):
        self.tasks, self.cancelled, self.futures = {}, [], {}
        self.workers = list(workers)
        self.loop = type("Loop", (), {"add_callback": staticmethod(lambda fn, items: None)})()

    def get(self, graph, keys, sync=True, **kwargs):
        for layer in graph.layers.values():
            for key, task in dict(layer).items():
                self.tasks[key] = (task[0], task[1:], dict(layer.annotations))
        futures = [_Future(k) for k in keys]
        self.futures.update({f.key: f for f in futures})
        return futures

    def submit(self, func, *args, key, **kwargs):
        self.tasks[key] = (func, args, kwargs)
        self.futures[key] = f = _Future(key)
        return f

    def cancel(self, futures):
        self.cancelled += list(futures)

    def scheduler_info(self, **kwargs):
        return {"workers": {w: {} for w in self.workers}}


def _runner(workers=("tcp://a", "tcp://b"), reference=False, chunks=16, replication=False, labels=False):
    codes = {"gcc": make_code("gcc", num_inputs=4, num_workers=8),
             "uncoded": make_code("uncoded", num_inputs=4, num_workers=4)}
    if replication:  # (waits for one copy of every input, as a run's replication with stop: recovery)
        codes["replication"] = make_code("replication", num_inputs=4, num_workers=8)
    plugin = SimpleNamespace(name="p", name_token="tok", layout=BatchLayout(64, 4, 2), codes=codes,
                             source=SimpleNamespace(has_labels=labels, chunks=chunks))
    gcc = SchemePlan(name="gcc", num_workers=8, policy=CutoffPolicy(num_workers=8, wait_for=5))
    uncoded = SchemePlan(name="uncoded", num_workers=4,
                         policy=CutoffPolicy(num_workers=4, wait_for=4, groups=(0, 1, 2, 3)))
    plans = [gcc, uncoded]
    if replication:
        groups = tuple(int(codes["replication"].selected_input(w)) for w in range(8))
        plans.append(SchemePlan(name="replication", num_workers=8, policy=CutoffPolicy(
            num_workers=8, wait_for=8, on_shortfall="wait", groups=groups)))
    client = _Client(workers)
    runner = BatchRunner(client, plugin, plans, num_samples=64, output_size=1, max_in_flight=4,
                         reference=reference)
    runner._cancel = runner._cancel_now
    return runner, client


def _of(client, func):
    return {k: v for k, v in client.tasks.items() if v[0] is func}


def test_each_batch_has_one_read_that_its_coded_shards_take():
    runner, client = _runner(reference=True)
    runner._submit_batches([(0, ["gcc", "uncoded"]), (1, ["gcc", "uncoded"])])
    loads = _of(client, load_batch)
    assert sorted(loads) == ["load-b0-tok", "load-b1-tok"]
    for batch in (0, 1):
        _, args, notes = loads[f"load-b{batch}-tok"]
        assert args == ("p", batch)
        assert notes["priority"] == priority(batch, "load", 4) > priority(batch, "shard", 4)
        assert notes["workers"] and notes["allow_other_workers"]
    assert {loads[f"load-b{b}-tok"][2]["workers"][0] for b in (0, 1)} == {"tcp://a", "tcp://b"}  # round-robin
    shards = _of(client, evaluate_shard)
    for key, (_, args, _) in shards.items():
        batch = args[2]
        if "-gcc-" in key:  # (name, scheme, batch, shard, delay, [the read's key])
            assert args[5] == [f"load-b{batch}-tok"]
        else:  # uncoded's shards read their own samples
            assert len(args) == 5
    # the reference takes the read too
    for key, (_, args, _) in _of(client, reference_task).items():
        assert args[-1] == [f"load-b{args[1]}-tok"]
    assert runner._inflight[0].load.key == "load-b0-tok" and runner._inflight[0].load_by == {"gcc", "inputs"}


@pytest.mark.parametrize("where", ["one worker", "in memory"])
def test_one_worker_or_a_source_in_memory_reads_each_batch_in_its_shards(where):
    runner, client = _runner(workers=("tcp://a",)) if where == "one worker" else _runner(chunks=None)
    runner._submit_batches([(0, ["gcc", "uncoded"])])
    assert not _of(client, load_batch)
    assert all(len(args) == 5 for _, args, _ in _of(client, evaluate_shard).values())
    assert runner._inflight[0].load is None


def test_a_read_lost_with_its_worker_runs_the_schemes_that_took_it_again():
    runner, client = _runner()
    runner._submit_batches([(0, ["gcc", "uncoded"])])
    state = runner._inflight[0]
    gcc, uncoded = state.schemes["gcc"], state.schemes["uncoded"]
    first = list(gcc.shards)
    state.load.status, state.load.error = "error", KilledWorker("load-b0-tok", "tcp://a", 0)
    first[3].status = "error"
    runner._on_shard(0.1, 0, "gcc", 3, first[3], "error")
    again = state.schemes["gcc"]
    assert again is not gcc and again.restarts == 1 and not again.failed.any()
    assert "load-b0-l1-tok" in client.tasks and state.load.key == "load-b0-l1-tok"
    assert all(client.tasks[f.key][1][5] == ["load-b0-l1-tok"] for f in again.shards)
    assert {f.key for f in client.cancelled} >= {f.key for f in first}
    assert state.schemes["uncoded"] is uncoded  # it took no read
    # the other shards of the first run report their failure too: late reports, ignored
    runner._on_shard(0.1, 0, "gcc", 4, first[4], "error")
    assert state.schemes["gcc"] is again and not again.failed.any()


def test_a_read_that_failed_on_its_data_leaves_erasures():
    runner, client = _runner()
    runner._submit_batches([(0, ["gcc"])])
    state = runner._inflight[0]
    s = state.schemes["gcc"]
    state.load.status, state.load.error = "error", ValueError("bad data")
    runner._on_shard(0.1, 0, "gcc", 3, s.shards[3], "error")
    assert state.schemes["gcc"] is s and s.failed[3] and s.restarts == 0
    # a spare brought in for it takes the same read (it fails too: a batch's bad data stops the run)
    assert "load-b0-l1-tok" not in client.tasks
    taken = [[getattr(r, "key", r) for r in args[5]] for _, args, _ in _of(client, evaluate_shard).values()]
    assert len(taken) == 9 and all(t == ["load-b0-tok"] for t in taken)  # 8 shards, and 1 spare promoted


def test_the_quiet_rescue_sees_the_read_while_a_scheme_still_needs_it():
    runner, _ = _runner(reference=True)
    runner._submit_batches([(0, ["gcc", "uncoded"])])
    state = runner._inflight[0]
    waits, _ = waits_on([state])
    whys = sorted((why, scheme) for why, _, scheme, *_ in waits["load-b0-tok"])
    assert whys == [("inputs", ""), ("scheme", "gcc")]
    state.schemes["gcc"].decode = _Future("decode")  # cut: its kept results are what it waits for now
    state.reference.status = "finished"
    assert "load-b0-tok" not in waits_on([state])[0]



def test_a_shard_of_a_scheme_that_took_no_read_is_not_lost_with_the_read():
    """A breaker's find: the read died with its worker, and the first failure the driver heard of was a shard of
    a scheme that took no read (replication, its own worker the dead one). Running gcc again swallowed that
    report: the replication shard never became an erasure, and its batch waited for it for ever (a real run of
    gcc, letcc, replication and speculative on 3 worker processes, two SIGKILLed while reading, hung). It is an
    erasure, and gcc runs again."""
    runner, client = _runner(replication=True)
    runner._submit_batches([(0, ["gcc", "replication"])])
    state = runner._inflight[0]
    gcc, rep = state.schemes["gcc"], state.schemes["replication"]
    assert all(len(client.tasks[f.key][1]) == 5 for f in rep.shards)  # it took no read
    state.load.status, state.load.error = "error", KilledWorker("load-b0-tok", "tcp://a", 0)
    lost = rep.shards[2]
    lost.status, lost.error = "error", KilledWorker(lost.key, "tcp://a", 0)
    runner._on_shard(0.1, 0, "replication", 2, lost, "error")
    assert state.schemes["replication"] is rep and rep.failed[2]  # its erasure, as without a read
    again = state.schemes["gcc"]
    assert again is not gcc and again.restarts == 1 and state.load.key == "load-b0-l1-tok"
    # gcc's first shards report their failure next: late reports, ignored
    gcc.shards[3].status = "error"
    runner._on_shard(0.1, 0, "gcc", 3, gcc.shards[3], "error")
    assert state.schemes["gcc"] is again and not again.failed.any()


def test_labels_lost_with_the_read_are_written_from_a_read_that_lives():
    """The read died with its worker, and the batch's labels task (which took it) reported its KilledWorker
    before any shard did: the labels ran again, and must not take the dead read again (they would fail with it
    once more, and after MAX_ATTEMPTS the batch's labels were given up: a resume's work)."""
    runner, client = _runner(labels=True)
    runner._submit_batches([(0, ["gcc"])])
    state = runner._inflight[0]
    gcc, labels = state.schemes["gcc"], state.labels
    assert client.tasks[labels.key][1][-1] == ["load-b0-tok"]
    dead = KilledWorker("load-b0-tok", "tcp://a", 0)
    state.load.status, state.load.error = "error", dead
    labels.status, labels.error = "error", dead
    runner._on_labels(0, labels)
    again = state.labels
    assert again is not labels and state.attempt == 1
    taken = [getattr(r, "key", r) for r in client.tasks[again.key][1][-1]]
    assert taken == ["load-b0-l1-tok"]  # not the read that died: the one gcc, run again, takes
    assert state.schemes["gcc"] is not gcc and state.schemes["gcc"].restarts == 1
    gcc.shards[3].status = "error"  # gcc's first shards report their failure next: late reports, ignored
    runner._on_shard(0.1, 0, "gcc", 3, gcc.shards[3], "error")
    assert state.schemes["gcc"].restarts == 1 and not state.schemes["gcc"].failed.any()
