"""Lazy spares (``cutoff.spares``): which shards a batch runs at its own priority, and what the spares change.

The pure parts (which results a cutoff needs, which worker points are preferred) are tested without a
cluster; the runtime on a LocalCluster: on a busy cluster a spare's low-priority copy runs only once no regular
shard waits for a thread, and a batch keeps a spare only once it was promoted; on the virtual clock lazy and
eager spares keep the same shards and decode the same values (the promotions: tests/runtime/test_batch_machine.py).
"""

from __future__ import annotations

import asyncio
import queue

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.errors import ConfigError
from gcc_dask.coding import make_code
from gcc_dask.coding.points import spread_order
from gcc_dask.config import load_config
from gcc_dask.pipeline import build_codes, build_plans
from gcc_dask.runtime.cutoff import CutoffPolicy, needed_results
from gcc_dask.runtime.executor import BatchRunner, SchemePlan
from run_helpers import CALLS, RAN, StubFuture


# ------------------------------------------------------------------------------------------- pure
@pytest.mark.parametrize(("policy", "expected"), [
    (CutoffPolicy(num_workers=16, wait_for=12), 12),
    (CutoffPolicy(num_workers=16, wait_for=16), 16),
    # one result per group ends the wait: one copy of each of the 8 inputs
    (CutoffPolicy(num_workers=16, wait_for=16, groups=tuple(n % 8 for n in range(16))), 8),
    # never fewer than the scheme can decode from
    (CutoffPolicy(num_workers=16, wait_for=4, min_results=9), 9),
])
def test_needed_results(policy, expected):
    assert needed_results(policy) == expected


def test_spread_order_puts_systematic_workers_first_and_spreads_the_rest():
    code = make_code("gcc", num_inputs=8, num_workers=16, points="systematic")
    order = spread_order(code.data_points, code.worker_points)
    assert sorted(order.tolist()) == list(range(16))
    on_data = {int(np.argmin(np.abs(code.worker_points - a))) for a in code.data_points}
    assert set(order[:8].tolist()) == on_data
    # the first 12 leave no stretch of [-1, 1] wider than the widest gap between data points uncovered,
    # where the first 12 by index (the left three quarters of the points) leave a gap of about 0.4 + 1
    kept = np.sort(code.worker_points[order[:12]])
    assert np.max(np.diff(kept)) <= np.max(np.diff(code.data_points)) + 1e-12
    assert 1.0 - kept[-1] < 0.05 and kept[0] + 1.0 < 0.05


def test_spread_order_takes_one_copy_of_each_input_first_for_replication():
    code = make_code("replication", num_inputs=8, num_workers=16)
    order = spread_order(code.data_points, code.worker_points)
    assert sorted(order[:8].tolist() and [n % 8 for n in order[:8].tolist()]) == list(range(8))


def test_spread_order_without_coincidences_starts_at_the_left_end():
    beta = np.linspace(-1, 1, 5)
    assert spread_order(np.array([-0.9, 0.9]), beta).tolist() == [0, 4, 2, 1, 3]


def test_regular_mask_follows_the_plan_order():
    plan = SchemePlan(name="gcc", num_workers=6, policy=CutoffPolicy(num_workers=6, wait_for=4),
                      order=(5, 0, 3, 1, 2, 4))
    assert plan.regular(lazy=True).tolist() == [True, True, False, True, False, True]
    assert plan.regular(lazy=False).all()


def test_bad_spares_value_is_one_config_line(tmp_path):
    with pytest.raises(ConfigError, match=r"cutoff\.spares.*'lazy'"):
        load_config(_cfg(tmp_path / "s.zarr", spares="sometimes"))


def test_events_fall_back_to_a_callback_without_future_state():
    from gcc_dask.runtime.events import FutureEvents

    class Fake:
        status = "pending"

        def add_done_callback(self, fn):
            self.callback = fn

    events = FutureEvents(client=None)
    fut = Fake()
    asyncio.run(events._report_when_done(fut, ("shard", 0, "gcc", 3)))
    with pytest.raises(queue.Empty):
        events.next(timeout=0)
    fut.status = "finished"
    fut.callback(fut)
    _, tag, got, status = events.next(timeout=0)
    assert (tag, got, status) == (("shard", 0, "gcc", 3), fut, "finished")


def test_events_finishing_in_one_pass_of_the_loop_reach_the_queue_as_one_list():
    from gcc_dask.runtime.events import FutureEvents

    class Done:
        status = "finished"

    events = FutureEvents(client=None)

    async def pass_of_the_loop():
        await events._track([(Done(), ("shard", 0, "gcc", w)) for w in range(3)])
        await asyncio.sleep(0)  # the tracking tasks run
        await asyncio.sleep(0)  # the flush scheduled by the first of them runs

    asyncio.run(pass_of_the_loop())
    assert events._queue.qsize() == 1
    assert [events.next(timeout=0)[1][3] for _ in range(3)] == [0, 1, 2]


# ---------------------------------------------------------------------------------------- runtime
def _cfg(path, *, spares="lazy", stragglers=None, function="run_helpers:counted_sin", n=96, in_flight=4):
    return {
        "name": "spares",
        "source": {"kind": "synthetic", "num_samples": n, "shape": [3], "seed": 4},
        "workload": {"kind": "callable", "name": function},
        "code": {"num_inputs": 4, "num_workers": 8, "block_size": 2},
        "composition": {"policy": "as_stored"},
        "schemes": ["gcc"],
        "stragglers": stragglers or {"model": "none"},
        "cutoff": {"stragglers": 3, "spares": spares},
        "store": {"path": str(path), "overwrite": True},
        "run": {"progress": False, "reference": False, "max_batches_in_flight": in_flight},
    }


# what a run on it says from Python (a RuntimeWarning): its N = 8 shards queue on the one thread
ONE_THREAD = r"^a batch has up to N = 8 shards but the cluster has 1 worker threads"


@pytest.fixture(scope="module")
def one_thread():
    """A cluster with a single worker thread: shards run one at a time, in priority order."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
                           silence_logs=40)
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


def _shard_key(key: str) -> tuple[int, int, str]:
    """``(batch, shard, copy)`` of a shard's key ``eval-b{batch}-w{shard}-{scheme}[-{copy}...]-{token}``: copy
    ``""`` for the first one submitted, else its suffixes (``p`` a promoted spare, ``b`` a backup copy of a late
    shard, ``q1`` a rescue from a quiet worker, ``a1`` the batch's next attempt)."""
    parts = key.split("-")
    return int(parts[1][1:]), int(parts[2][1:]), "-".join(parts[4:-1])


def test_lazy_spares_are_not_computed_on_a_busy_cluster(one_thread, tmp_path):
    """Every batch in one window, on a worker with one thread: whatever the machine's load, the worker runs a
    spare's low-priority copy only once no regular shard waits for its thread, and a batch keeps a spare only
    once it was promoted (the batch was overtaken by a later one while a regular result was late: a legitimate
    response on a busy machine). Nothing here depends on how fast the machine is: the order of the worker's
    calls is the tasks' priorities, not their timing."""
    cfg = load_config(_cfg(tmp_path / "lazy.zarr", function="run_helpers:keyed_sin", in_flight=12))
    plan = build_plans(cfg, build_codes(cfg))[0]
    regular = plan.regular(lazy=True)
    assert (int(regular.sum()), int((~regular).sum())) == (5, 3)
    RAN.clear()
    with pytest.warns(RuntimeWarning, match=ONE_THREAD):  # N = 8 shards on one thread, on purpose
        gd.run_pipeline(cfg, client=one_thread)
    ran = [_shard_key(k) for k in RAN if k.startswith("eval-")]  # (not the driver's check on one sample)
    root = zarr.open_group(str(tmp_path / "lazy.zarr"), mode="r")
    received = root["gcc/received"][:]
    assert received.shape[0] == 12 and (root["gcc/status"][:] == 1).all()
    # every batch decoded from exactly the results its cutoff needs, each key run once (a copy of a shard, a
    # backup of a late one or a rescue from a worker that went quiet under load, has a key of its own)
    assert (received.sum(axis=1) == 5).all() and len(set(ran)) == len(ran)
    promoted = {(b, w) for b, w, copy in ran if "p" in copy.split("-")}
    for b, w in zip(*np.nonzero(received)):
        assert regular[w] or (b, w) in promoted, f"batch {b} kept spare {w}, never promoted"
        assert any((b2, w2) == (b, w) for b2, w2, _ in ran)
    # the spares' low-priority first copies rank below every regular shard of the window: the worker ran each of
    # them (a thread with nothing else queued starts them before the cutoff's cancel arrives) after the last
    # regular shard it ran; eager spares (ranked with their batch) run before the next batch's regular shards
    last_regular = max(i for i, (_, w, _) in enumerate(ran) if regular[w])
    early = [(b, w) for i, (b, w, copy) in enumerate(ran) if not regular[w] and not copy and i < last_regular]
    assert early == [], f"spares ran before a regular shard: {early}"


def test_eager_spares_compete_with_the_regular_shards(one_thread, tmp_path):
    cfg = load_config(_cfg(tmp_path / "eager.zarr", spares="eager"))
    before = CALLS["n"]
    with pytest.warns(RuntimeWarning, match=ONE_THREAD):  # N = 8 shards on one thread, on purpose
        gd.run_pipeline(cfg, client=one_thread)
    calls = CALLS["n"] - before
    root = zarr.open_group(str(tmp_path / "eager.zarr"), mode="r")
    batches = root["gcc/received"].shape[0]
    # every shard of a batch ranks above the next batches' shards, so the spares run before them
    assert calls > 5 * batches + 3 * 4 + 2


def test_virtual_clock_keeps_the_same_shards_with_lazy_or_eager_spares(client, tmp_path):
    stragglers = {"model": "shifted_exponential", "shift": "2ms", "scale": "2ms", "hang_prob": 0.3,
                  "hang_delay": "50ms", "seed": 5}
    out = {}
    for spares in ("lazy", "eager"):
        path = tmp_path / f"{spares}.zarr"
        gd.run_pipeline(_cfg(path, spares=spares, stragglers=stragglers, function="numpy:sin", n=64,
                             in_flight=8), client=client)
        root = zarr.open_group(str(path), mode="r")
        out[spares] = {name: root[f"gcc/{name}"][:] for name in ("received", "status", "cutoff_s", "decoded")}
    lazy, eager = out["lazy"], out["eager"]
    for name in lazy:
        np.testing.assert_array_equal(lazy[name], eager[name], err_msg=name)
    cfg = load_config(_cfg(tmp_path / "x.zarr"))
    regular = build_plans(cfg, build_codes(cfg))[0].regular(lazy=True)
    # with hangs in 30% of the shards, some batches kept a spare: the spares ran when they were needed
    assert (lazy["received"] & ~regular[None, :]).any()


# ------------------------------------------------------------------------- promotion, on a stub client
_Future = StubFuture


class _Client:
    """Records what the runner submits and cancels; runs nothing."""

    def __init__(self):
        self.maps, self.cancelled, self.submitted, self.watched = [], [], [], []
        watched = self.watched
        self.loop = type("Loop", (), {"add_callback": staticmethod(lambda fn, items: watched.extend(items))})()

    def submit(self, func, *args, key, **kwargs):
        self.submitted.append((key, args))
        return _Future(key)

    def get(self, graph, keys, sync=True, **kwargs):
        """A graph update (:class:`~gcc_dask.runtime.graph.GraphUpdate`): its shard layers are recorded as
        maps, its other tasks as submits."""
        assert not sync
        for layer in graph.layers.values():
            tasks = dict(layer)
            if all(t[0].__name__ == "evaluate_shard" for t in tasks.values()):
                self.maps.append({"workers": [t[4] for t in tasks.values()],
                                  "priority": layer.annotations["priority"], "keys": list(tasks)})
            else:
                self.submitted += [(k, t[1:]) for k, t in tasks.items()]
        return [_Future(k) for k in keys]

    def cancel(self, futures):
        self.cancelled += list(futures)

    def scheduler_info(self, **kwargs):
        return {"workers": {}}


def _stub_runner(**kwargs):
    from types import SimpleNamespace

    from gcc_dask.composition import BatchLayout

    plugin = SimpleNamespace(name="p", name_token="tok", layout=BatchLayout(64, 4, 2),
                             source=SimpleNamespace(has_labels=False),
                             codes={"gcc": make_code("gcc", num_inputs=4, num_workers=8),
                                    "uncoded": make_code("uncoded", num_inputs=4, num_workers=4)})
    plan = SchemePlan(name="gcc", num_workers=8, policy=CutoffPolicy(num_workers=8, wait_for=5),
                      order=(1, 6, 3, 4, 2, 5, 0, 7))
    uncoded = SchemePlan(name="uncoded", num_workers=4,
                         policy=CutoffPolicy(num_workers=4, wait_for=4, groups=(0, 1, 2, 3)))
    client = _Client()
    runner = BatchRunner(client, plugin, [plan, uncoded], num_samples=64, output_size=1, max_in_flight=4,
                         reference=False, **kwargs)
    # what is cancelled, at once (the runner's own _cancel makes the same call from a thread of its own:
    # test_cancels_run_off_the_loop_in_order)
    runner._cancel = runner._cancel_now
    return runner, client, plan


def test_cancels_run_off_the_loop_in_order():
    """``_cancel`` returns before the client's cancel does (it waits for the scheduler), and the calls are made
    one after the other in the order asked."""
    import threading

    runner, client, _ = _stub_runner()
    del runner._cancel  # the runner's own, threaded
    gate, calls = threading.Event(), []

    def slow_cancel(futures):
        gate.wait(5)
        calls.append([f.key for f in futures])

    client.cancel = slow_cancel
    runner._cancel([_Future("a"), _Future("b")])
    runner._cancel([])  # nothing to cancel: no call
    runner._cancel([_Future("c")])
    assert calls == []  # both calls are still waiting for the "scheduler"
    gate.set()
    runner._canceller.shutdown(wait=True)
    assert calls == [["a", "b"], ["c"]]


def test_an_overtaken_batch_runs_its_spares_at_its_own_priority():
    runner, client, plan = _stub_runner()
    for batch in (0, 1):
        runner._submit_batch(batch, ["gcc"])
    regular = plan.regular(lazy=True)
    assert [m["priority"] for m in client.maps] == [0, -4, -1, -5]  # regulars, then spares below all in flight
    s0 = runner._inflight[0].schemes["gcc"]
    s0_first = list(s0.shards)
    for w in np.flatnonzero(regular)[:3]:  # batch 0 has 3 of its 5 regular results
        runner._on_shard(0.1, 0, "gcc", int(w), s0.shards[w], "finished")
    assert len(client.maps) == 4 and not client.cancelled
    s1 = runner._inflight[1].schemes["gcc"]
    for w in np.flatnonzero(regular):  # batch 1 reaches its cutoff first: batch 0 is overtaken
        runner._on_shard(0.2, 1, "gcc", int(w), s1.shards[w], "finished")
    promoted = client.maps[-1]
    # the two spares first in the plan's order (5, then 0), for the two missing regular results, at priority -0
    assert promoted["workers"] == [5, 0] and promoted["priority"] == 0
    assert all(k.startswith(f"eval-b0-w{w}-gcc-p-") for k, w in zip(promoted["keys"], [5, 0]))
    # batch 1 cancels its own spares at its cutoff; of batch 0's, only the two low-priority copies
    assert {f.key for f in client.cancelled if f.key.startswith("eval-b0")} == {s0_first[5].key, s0_first[0].key}
    assert s0.promoted.tolist() == [True, False, False, False, False, True, False, False]
    # a report from a cancelled low-priority copy is ignored
    runner._on_shard(0.3, 0, "gcc", 5, s0_first[5], "finished")
    assert not s0.known[5]


def test_a_failed_regular_shard_brings_in_one_spare_at_once():
    runner, client, plan = _stub_runner()
    runner._submit_batch(0, ["gcc"])
    s = runner._inflight[0].schemes["gcc"]
    runner._on_shard(0.1, 0, "gcc", 1, s.shards[1], "error")
    assert client.maps[-1]["workers"] == [5] and client.maps[-1]["priority"] == 0
    runner._on_shard(0.2, 0, "gcc", 5, s.shards[5], "error")  # the promoted spare fails too: the next one
    assert client.maps[-1]["workers"] == [0]


def test_a_scheme_that_keeps_every_result_is_decoded_without_watching_its_shards():
    runner, client, _ = _stub_runner()
    runner._submit_batch(0, ["uncoded"])
    s = runner._inflight[0].schemes["uncoded"]
    # the decode went with the shards, over all four; only the decode is watched
    assert s.direct and s.decode.key == "decode-b0-uncoded-d-tok"
    assert s.meta["latency_s"] is None and client.submitted[-1][1][4] == [0, 1, 2, 3]
    assert [tag[0] for _, tag in client.watched] == ["decode"]
    # a shard fails: so does the decode, and the runner falls back to watching the shards
    s.decode.status, s.decode.error = "error", RuntimeError("f raised on shard 2")
    runner._on_decode(0, "uncoded", s.decode)
    assert not s.direct and s.decode is None
    assert sorted(tag[3] for _, tag in client.watched if tag[0] == "shard") == [0, 1, 2, 3]
    for w in range(4):
        runner._on_shard(0.1 + w, 0, "uncoded", w, s.shards[w], "error" if w == 2 else "finished")
    # the cutoff decides as for any scheme: the three survivors are decoded, under a key of their own (under the
    # failed decode's key the scheduler, while it still held that one, gave back its error: the batch failed)
    key, args = client.submitted[-1]
    assert key == "decode-b0-uncoded-tok" and args[4] == [0, 1, 3] and args[6]["status"] == 2


def test_wall_clock_injection_uses_lazy_spares_and_the_virtual_clock_does_not():
    from gcc_dask.stragglers import ShiftedExponential

    model = ShiftedExponential(shift=0.0, scale=0.01)
    virtual, _, plan = _stub_runner(latency_model=model)
    wall, _, _ = _stub_runner(latency_model=model, virtual_clock=False)
    assert virtual._regular["gcc"].all()
    np.testing.assert_array_equal(wall._regular["gcc"], plan.regular(lazy=True))
    assert (virtual.virtual_clock, wall.virtual_clock) == (True, False)


def test_bad_clock_value_is_one_config_line(tmp_path):
    cfg = _cfg(tmp_path / "c.zarr", stragglers={"model": "shifted_exponential", "scale": "1ms", "clock": "cpu"})
    with pytest.raises(ConfigError, match=r"stragglers\.clock.*'virtual'"):
        load_config(cfg)


def test_a_replication_batch_promotes_a_spare_of_the_group_it_lacks():
    from types import SimpleNamespace

    from gcc_dask.composition import BatchLayout

    groups = (0, 1, 2, 3, 0, 1, 2, 3)
    plan = SchemePlan(name="replication", num_workers=8, order=(0, 3, 1, 2, 4, 7, 5, 6),
                      policy=CutoffPolicy(num_workers=8, wait_for=8, groups=groups))
    plugin = SimpleNamespace(name="p", name_token="tok", layout=BatchLayout(64, 4, 2),
                             source=SimpleNamespace(has_labels=False),
                             codes={"replication": make_code("replication", num_inputs=4, num_workers=8)})
    client = _Client()
    runner = BatchRunner(client, plugin, [plan], num_samples=64, output_size=1, max_in_flight=4, reference=False)
    runner._submit_batch(0, ["replication"])
    s = runner._inflight[0].schemes["replication"]
    runner._on_shard(0.1, 0, "replication", 2, s.shards[2], "error")
    # the other copy of input 2 (shard 6), not the first spare in the order (shard 4, a copy of input 0)
    assert client.maps[-1]["workers"] == [6]


def test_priorities_follow_the_submission_order_when_batch_numbers_have_gaps():
    runner, client, _ = _stub_runner()
    for batch in (0, 5, 6):  # as after a resume: batches 1-4 were done
        runner._submit_batch(batch, ["gcc"])
    regular, spare = {}, {}
    for m in client.maps:
        batch = int(m["keys"][0].split("-")[1][1:])
        (regular if m["priority"] > -4 else spare).setdefault(batch, m["priority"])
    assert regular == {0: 0, 5: -1, 6: -2}
    # batch 0's spares rank below the regular shards of every batch in flight
    assert spare[0] < min(regular.values())


def test_a_lost_future_is_reported_once_it_is_finished_again():
    from gcc_dask.runtime.events import FutureEvents

    class Recomputed:
        """A finished key whose worker died: "lost" while Dask computes it again, then "finished"."""

        def __init__(self):
            self.states, self._state = ["lost", "finished"], self

        @property
        def status(self):
            return self.states[0]

        async def wait(self):
            self.states.pop(0)

    events = FutureEvents(client=None)

    async def run():
        await events._report_when_done(Recomputed(), ("shard", 0, "uncoded", 1))
        await asyncio.sleep(0)

    asyncio.run(run())
    assert events.next(timeout=0)[3] == "finished"


def test_the_clients_lost_fetch_warning_about_this_runs_keys_is_kept_off_the_terminal():
    import logging

    from gcc_dask.runtime.executor import _LostFetchLogFilter

    quiet = _LostFetchLogFilter("f00d")

    def record(msg, *args):
        return logging.LogRecord("distributed.client", logging.WARNING, __file__, 1, msg, args, None)

    assert not quiet.filter(record("Couldn't gather %s keys, rescheduling %s", 1, ("score-b14-gcc-f00d",)))
    assert quiet.filter(record("Couldn't gather %s keys, rescheduling %s", 1, ("someone-elses-key",)))
    assert quiet.filter(record("Any other warning about %s", "score-b14-gcc-f00d"))
