"""A client that is not Dask's default (``Client(..., set_as_default=False)``, or one of several) runs everything
itself: the composition's window map and the run's waits used ``distributed.wait``, which takes the *default*
client, and failed with "No clients found" when the process had no other (docs/cluster.rst, item 1); a sweep's
and a frontier's summaries were read through the default client's cluster, and waited forever when it could not
run them."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import numpy as np
    from distributed import Client, LocalCluster

    import gcc_dask as gd
    from gcc_dask.frontier.run import run_frontier
    from gcc_dask.runtime.cluster import map_on_cluster
    from gcc_dask.sweep import run_sweep


    def square(x):
        return x * x


    if __name__ == "__main__":
        cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=":0",
                               silence_logs=40)
        client = Client(cluster, set_as_default=False)
        print("map", map_on_cluster(client, square, range(5)))
        X = np.random.default_rng(0).normal(size=(512, 6)).astype("float32")
        res = gd.coded_map(np.tanh, X, client=client, code={"num_inputs": 4, "num_workers": 6, "block_size": 8},
                           composition={"policy": "similarity", "window": 64}, cutoff={"stragglers": 1})
        print("estimates", res.estimates.shape, bool(np.isfinite(res.estimates).all()))
        # now Dask's default client is another one, whose cluster has no worker: whatever goes there never ends
        idle = LocalCluster(n_workers=0, processes=False, dashboard_address=":0", silence_logs=40)
        default = Client(idle)
        print("map again", map_on_cluster(client, square, range(3)))
        sweep = run_sweep({"name": "t", "function": {"kind": "xsinx"}, "schemes": ["gcc"],
                           "code": {"num_inputs": [4], "num_workers": [8]},
                           "stragglers": {"model": "fixed_count", "S": [1], "pattern": "random"}, "trials": 2,
                           "run": {"progress": False}}, client=client, out="sweep.zarr")
        print("sweep", sweep.status, len(sweep.summary))
        frontier = run_frontier({"kind": "frontier", "name": "fp", "function": {"kind": "polynomial",
                                 "coeffs": [1, 1, 1], "low": -1, "high": 1}, "composition": "similarity",
                                 "groups": 20, "num_inputs": 3, "ratios": [2], "stragglers": {"S": [1]},
                                 "metric": "mse", "candidates": "default"}, client=client, out="frontier.zarr")
        print("frontier", type(frontier).__name__)
        default.close()
        idle.close()
        client.close()
        cluster.close()
""")


@pytest.mark.slow
def test_a_client_that_is_not_the_default_composes_and_runs(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                              cwd=tmp_path)
    except subprocess.TimeoutExpired as e:  # it waited for the default client's cluster, which has no worker
        pytest.fail(f"the run waited for Dask's default client: {(e.stdout or b'')[-2000:]!r}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "map [0, 1, 4, 9, 16]" in done.stdout, done.stdout
    assert "estimates (512, 6) True" in done.stdout, (done.stdout, done.stderr[-2000:])
    assert "map again [0, 1, 4]" in done.stdout and "sweep complete" in done.stdout, done.stdout
    assert "frontier " in done.stdout, (done.stdout, done.stderr[-2000:])
