"""A client that is not Dask's default (``Client(..., set_as_default=False)``, or one of several) runs everything
itself: the composition's window map and the run's waits used ``distributed.wait``, which takes the *default*
client, and failed with "No clients found" when the process had no other (docs/cluster.rst, item 1)."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import numpy as np
    from distributed import Client, LocalCluster

    import gcc_dask as gd
    from gcc_dask.runtime.cluster import map_on_cluster


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
        client.close()
        cluster.close()
""")


@pytest.mark.slow
def test_a_client_that_is_not_the_default_composes_and_runs(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "map [0, 1, 4, 9, 16]" in done.stdout, done.stdout
    assert "estimates (512, 6) True" in done.stdout, (done.stdout, done.stderr[-2000:])
