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


@pytest.mark.parametrize("poll_s", [0.1, 30.0], ids=["default-poll", "hook-only"])
def test_cancelled_straggler_frees_its_slot_quickly(one_slot_client, monkeypatch, poll_s):
    """With a 30 s poll only the plugin's transition hook can wake the straggler: it must."""
    from gcc_dask.runtime import tasks

    monkeypatch.setattr(tasks, "POLL_INTERVAL_S", poll_s)
    c = one_slot_client
    plugin = _plugin("cancel-test")
    c.register_plugin(plugin, name=plugin.name)
    straggler = c.submit(evaluate_shard, plugin.name, "uncoded", 0, 0, 30.0, key="eval-straggler", pure=False)
    while not c.processing() or not any(c.processing().values()):
        time.sleep(0.01)
    time.sleep(0.1)  # the straggler is now sleeping in the only thread
    t_cancel = time.time()
    c.cancel(straggler)
    nxt = c.submit(_stamp, 1, key="next-task", pure=False)
    started = nxt.result(timeout=10)
    freed_after = started - t_cancel
    print(f"slot freed {freed_after * 1000:.1f} ms after cancel")
    # without the cooperative stop the next task would wait the straggler's remaining ~30 s
    assert freed_after < 0.5


def test_task_state_check_is_false_while_running(client):
    """Pins the internal API: a running, uncancelled shard is not seen as cancelled."""
    plugin = _plugin("state-test")
    client.register_plugin(plugin, name=plugin.name)
    fut = client.submit(evaluate_shard, plugin.name, "uncoded", 0, 1, 0.05, pure=False)
    res = fut.result(timeout=10)
    assert res is not None and res.worker == 1
    np.testing.assert_array_equal(res.output, [[3.0, 4.0, 5.0]])  # a block of G = 1 sample
    client.unregister_worker_plugin(plugin.name)
