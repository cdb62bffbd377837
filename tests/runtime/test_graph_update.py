"""GraphUpdate: many tasks with their own placement and priority in one graph update, on a real cluster."""

from __future__ import annotations

import uuid

import pytest

from gcc_dask.runtime.graph import GraphUpdate


def _inc(x):
    return x + 1


def _total(xs):
    return sum(xs)


def _where(_x):
    from distributed import get_worker

    return get_worker().address


def _tok() -> str:
    return uuid.uuid4().hex[:8]


def test_one_update_runs_placed_layers_and_a_task_over_their_results(client):
    a, b = sorted(client.scheduler_info()["workers"])
    t = _tok()
    update = GraphUpdate(client)
    bound = {}
    update.add(_where, [(i,) for i in range(3)], keys=[f"on-a-{i}-{t}" for i in range(3)], priority=5,
               workers=[a], then=lambda futs: bound.setdefault("a", futs))
    update.add(_where, [(i,) for i in range(2)], keys=[f"on-b-{i}-{t}" for i in range(2)], priority=4,
               workers=[b], then=lambda futs: bound.setdefault("b", futs))
    update.add(_inc, [(1,), (41,)], keys=[f"inc-0-{t}", f"inc-1-{t}"], priority=3)
    update.add(_total, [([f"inc-0-{t}", f"inc-1-{t}"],)], keys=[f"total-{t}"], priority=6)
    assert len(update) == 8
    futures = update.send()
    assert len(update) == 0 and list(futures) == [*(f"on-a-{i}-{t}" for i in range(3)),
                                                 *(f"on-b-{i}-{t}" for i in range(2)),
                                                 f"inc-0-{t}", f"inc-1-{t}", f"total-{t}"]
    # `then` got each layer's futures, in the order of its keys
    assert [f.key for f in bound["a"]] == [f"on-a-{i}-{t}" for i in range(3)]
    # the workers= annotation of each layer held (allow_other_workers is off)
    assert client.gather(bound["a"]) == [a, a, a] and client.gather(bound["b"]) == [b, b]
    # a list of keys of the same update is replaced by their results: (1 + 1) + (41 + 1)
    assert futures[f"total-{t}"].result() == 44


def test_each_layer_carries_its_own_priority(client):
    t = _tok()
    update = GraphUpdate(client)
    update.add(_inc, [(0,)], keys=[f"hi-{t}"], priority=7)
    update.add(_inc, [(0,)], keys=[f"lo-{t}"], priority=-3)
    futures = update.send()

    def priorities(dask_scheduler, keys):
        return {k: dask_scheduler.tasks[k].priority[0] for k in keys if k in dask_scheduler.tasks}

    client.gather(list(futures.values()))  # the update has reached the scheduler; the futures hold the tasks
    seen = client.run_on_scheduler(priorities, keys=list(futures))
    # Dask stores the negated user priority first in each task's priority tuple
    assert seen == {f"hi-{t}": -7, f"lo-{t}": 3}


def test_an_empty_update_sends_nothing(client):
    assert GraphUpdate(client).send() == {}


def test_a_repeated_key_is_refused_with_the_key():
    update = GraphUpdate(client=None)
    update.add(_inc, [(0,)], keys=["x"], priority=0)
    with pytest.raises(ValueError, match=r"keys: \['x'\] repeat a key"):
        update.add(_inc, [(1,)], keys=["x"], priority=0)
    with pytest.raises(ValueError, match=r"keys: \['y', 'y'\] repeat a key"):
        update.add(_inc, [(1,), (2,)], keys=["y", "y"], priority=0)


def test_keys_and_tasks_must_pair_up():
    with pytest.raises(ValueError, match="keys: got 1 keys for 2 tasks"):
        GraphUpdate(client=None).add(_inc, [(0,), (1,)], keys=["x"], priority=0)


# ------------------------------------------------------------------------------- the runner's refills
def _window_cfg(path, batches: int, in_flight: int) -> dict:
    return {
        "name": "window",
        "source": {"kind": "synthetic", "num_samples": batches * 4 * 2, "shape": [3], "seed": 4},
        "workload": {"kind": "analytic", "name": "smooth", "params": {"out_dim": 2}},
        "code": {"num_inputs": 4, "num_workers": 8, "block_size": 2},
        "composition": {"policy": "as_stored"},
        "schemes": ["gcc", "uncoded"],
        "stragglers": {"model": "none"},
        "cutoff": {"stragglers": 2},
        "store": {"path": str(path), "overwrite": True},
        "run": {"progress": False, "max_batches_in_flight": in_flight},
    }


def test_a_window_refill_sends_its_batches_in_one_graph_update(client, tmp_path, monkeypatch):
    import numpy as np
    import xarray as xr

    import gcc_dask as gd
    from gcc_dask.runtime import executor

    refills = []  # per refill: its batches, and the graph updates sent while it was submitted
    real_submit, real_send = executor.BatchRunner._submit_batches, GraphUpdate.send
    inside = []  # (between refills, spares promoted for an overtaken batch are updates of their own)

    def submit(self, work):
        refills.append(([b for b, _ in work], []))
        inside.append(True)
        try:
            return real_submit(self, work)
        finally:
            inside.pop()

    def send(self):
        if inside:
            refills[-1][1].append(len(self))
        return real_send(self)

    monkeypatch.setattr(executor.BatchRunner, "_submit_batches", submit)
    monkeypatch.setattr(GraphUpdate, "send", send)
    run = gd.run_pipeline(_window_cfg(tmp_path / "w.zarr", batches=21, in_flight=8), client=client)
    assert run.status == "complete"
    batches = [b for bs, _ in refills for b in bs]
    assert sorted(batches) == list(range(21))  # every batch once
    assert refills[0][0] == list(range(8))  # the window filled at once
    # the window is refilled once a quarter of it (2 batches) is free, never batch by batch (the last refill
    # takes what is left)
    assert all(len(bs) >= 2 for bs, _ in refills[:-1])
    # each refill is one graph update: per batch a reference and 8 + 4 shards, and uncoded's decode with them
    assert [sends for _, sends in refills] == [[len(bs) * (1 + 8 + 4 + 1)] for bs, _ in refills]
    for scheme in ("gcc", "uncoded"):
        ds = xr.open_zarr(run.path, group=scheme)
        assert (ds["status"].values == 1).all()
    ref = xr.open_zarr(run.path, group="inputs")["reference"].values
    # f on blocks of 2 against f on the whole batch: float32 rounding apart
    np.testing.assert_allclose(xr.open_zarr(run.path, group="uncoded")["decoded"].values, ref, atol=1e-6)


def test_the_refill_size_is_a_quarter_of_the_window():
    from gcc_dask.runtime.executor import BatchRunner

    sizes = {}
    for in_flight in (1, 2, 4, 7, 16):
        runner = BatchRunner.__new__(BatchRunner)
        runner.max_in_flight = in_flight
        sizes[in_flight] = runner.refill_size
    assert sizes == {1: 1, 2: 1, 4: 1, 7: 1, 16: 4}
