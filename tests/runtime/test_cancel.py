"""Cooperative cancellation: a cancelled straggler frees its worker thread at once.

``client.cancel`` does not interrupt a running task; our shards poll their own task state on the worker
(an internal API of distributed, pinned here) and return early.
"""

import time

import numpy as np
import pytest
from distributed import Client, LocalCluster, wait

from gcc_dask.runtime.tasks import RunPlugin, evaluate_shard


class _Identity:
    def load(self):
        return lambda x: x


def _plugin(name):
    """A run of one batch: the rows 0..5 as a (2, 3) float64 array, K = 2 uncoded, one sample per shard."""
    from gcc_dask.coding import make_code
    from gcc_dask.composition import BatchLayout
    from gcc_dask.sources import make_source

    return RunPlugin(name, _Identity(), {"uncoded": make_code("uncoded", num_inputs=2, num_workers=2)},
                     make_source("array", array=np.arange(6.0).reshape(2, 3)), None, layout=BatchLayout(2, 2, 1))


def _stamp(_):
    return time.time()


@pytest.fixture
def one_slot_client():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                      silence_logs=40) as cluster, Client(cluster) as c:
        yield c


#: the straggler's latency and the hook-only case's poll: longer than any test run (pytest-timeout ends one at
#: 900 s), so that the next task can only start because the cancel woke the straggler
FOREVER_S = 3600.0


def _executing(dask_worker, key) -> bool:  # runs on the worker
    ts = dask_worker.state.tasks.get(key)
    return ts is not None and ts.state == "executing"


@pytest.mark.parametrize("poll_s", [0.1, FOREVER_S], ids=["default-poll", "hook-only"])
def test_cancelled_straggler_frees_its_slot_quickly(one_slot_client, monkeypatch, poll_s):
    """A straggler of an hour is cancelled while it sleeps in the only thread: the next task runs (events, not
    durations: without the cooperative stop it would wait the hour, and pytest-timeout would end the test).
    With an hour's poll only the plugin's transition hook can wake the straggler: it must."""
    from gcc_dask.runtime import cancel

    monkeypatch.setattr(cancel, "POLL_INTERVAL_S", poll_s)  # where cooperative_sleep reads it
    c = one_slot_client
    plugin = _plugin("cancel-test")
    c.register_plugin(plugin, name=plugin.name)
    straggler = c.submit(evaluate_shard, plugin.name, "uncoded", 0, 0, FOREVER_S, key="eval-straggler",
                         pure=False)
    while not any(c.run(_executing, key="eval-straggler").values()):  # sleeping in the only thread
        time.sleep(0.01)
    t_cancel = time.time()
    c.cancel(straggler)
    nxt = c.submit(_stamp, 1, key="next-task", pure=False)
    started = nxt.result()  # (no time bound: the straggler's hour, or pytest-timeout, would end a hang)
    print(f"slot freed {(started - t_cancel) * 1000:.1f} ms after cancel")


def test_task_state_check_is_false_while_running(client):
    """Pins the internal API: a running, uncancelled shard is not seen as cancelled."""
    plugin = _plugin("state-test")
    client.register_plugin(plugin, name=plugin.name)
    fut = client.submit(evaluate_shard, plugin.name, "uncoded", 0, 1, 0.05, pure=False)
    res = fut.result(timeout=10)
    assert res is not None and res.worker == 1
    np.testing.assert_array_equal(res.output, [[3.0, 4.0, 5.0]])  # a block of G = 1 sample
    client.unregister_worker_plugin(plugin.name)


def test_a_plugin_with_order_from_ships_without_the_order_and_reads_it_on_setup(tmp_path):
    """The composition of a large run (8 bytes a sample) is read by each worker, not pickled through the
    scheduler with the plugin: the pickle's size does not grow with the dataset."""
    import pickle

    from gcc_dask.coding import make_code
    from gcc_dask.composition import BatchLayout
    from gcc_dask.sources import make_source

    n = 20_000
    perm = np.random.default_rng(0).permutation(n)
    np.save(tmp_path / "order.npy", perm)
    source = make_source("array", array=np.arange(float(n)).reshape(n, 1))
    codes = {"uncoded": make_code("uncoded", num_inputs=2, num_workers=2)}

    def plugin(order_from, order=perm):
        return RunPlugin("p-order", _Identity(), codes, source, None, layout=BatchLayout(n, 2, 4, order),
                         order_from=order_from)

    shipped = pickle.dumps(plugin(_Order(tmp_path / "order.npy")))
    assert len(pickle.dumps(plugin(None))) - len(shipped) > 0.9 * perm.nbytes  # the order stays home
    worker_copy = pickle.loads(shipped)
    assert worker_copy.layout.order is None
    worker_copy.setup(worker=None)
    assert np.array_equal(worker_copy.layout.order, perm)
    assert np.array_equal(worker_copy.load(3).x.ravel(), perm[24:32].astype(float))  # batch 3: slots 24..31
    # the driver's own plugin keeps its order, and an identity layout has nothing to read
    assert plugin(_Order(tmp_path / "order.npy")).layout.order is not None
    assert plugin(_Order(tmp_path / "order.npy"), order=None).order_from is None


class _Order:
    """Pickles to a path, as :class:`gcc_dask.store.SampleIndex` does."""

    def __init__(self, path):
        self.path = str(path)

    def __call__(self):
        return np.load(self.path)
