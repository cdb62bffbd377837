"""What the run's dashboard page costs a run: throughput with the page open and with it off, side by side.

One LocalCluster with its dashboard (2 in-process workers x 8 threads), the smoke pipeline's LeNet-5 on MNIST
without injected latency (the run's orchestration is all there is to slow down: the worst case for the page),
rounds that alternate the two modes, after one warm-up run of each:

* off: ``GCC_DASK_RUN_PAGE=off``: the run publishes nothing (the plugin is not consulted);
* open: the run publishes, and a viewer holds the page open (a Bokeh client session in another process, which
  the page redraws for every second, as for a browser tab).

Prints samples/s per mode (median over the rounds) and open / off. docs/dashboard.rst and BENCHMARKS.md,
section 'The run page's cost', have the figures.

    python pipelines/bench_run_page.py SAMPLES ROUNDS
    python pipelines/bench_run_page.py 1024 5
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from distributed import Client, LocalCluster

import gcc_dask as gd

samples, rounds = int(sys.argv[1]), int(sys.argv[2])
OVERRIDES = ["run.progress=false", f"source.limit={samples}", "stragglers.model=none", "store.overwrite=true",
             "run.max_batches_in_flight=4"]
#: a viewer that holds the page open: its session's websocket read until closed (bokeh 3.9 names that private)
VIEWER = ("import sys, bokeh.client as b; s = b.pull_session(url=sys.argv[1]); print('viewer: page open', flush=True); "
          "getattr(s, 'loop_until_closed', None) and s.loop_until_closed() or s._loop_until_closed()")

if __name__ == "__main__":
    out = tempfile.mkdtemp(prefix="gcc-dask-bench-page-")
    with LocalCluster(n_workers=2, threads_per_worker=8, processes=False, dashboard_address=":0",
                      silence_logs=40) as cl, Client(cl) as c:
        def run(mode: str) -> float:
            os.environ["GCC_DASK_RUN_PAGE"] = "off" if mode == "off" else "on"
            t = time.perf_counter()
            gd.run_pipeline("pipelines/smoke.yaml", client=c, out=f"{out}/{mode}.zarr", overrides=OVERRIDES)
            return samples / (time.perf_counter() - t)

        run("open")  # puts the page on the scheduler (once), so the viewer has a page to hold open
        viewer = subprocess.Popen([sys.executable, "-c", VIEWER, gd.dashboard.page_url(c)])
        try:
            run("off")
            res = {"off": [], "open": []}
            for i in range(rounds):
                for mode in (("off", "open") if i % 2 == 0 else ("open", "off")):
                    res[mode].append(run(mode))
                    print(f"round {i} {mode}: {res[mode][-1]:.1f} samples/s", flush=True)
            alive = viewer.poll() is None
        finally:
            viewer.terminate()
        print(f"viewer held the page open through every round: {alive}")
        off, on = np.array(res["off"]), np.array(res["open"])
        ratio = on / off
        print(f"off  {np.median(off):.1f} samples/s (min {off.min():.1f} max {off.max():.1f})")
        print(f"open {np.median(on):.1f} samples/s (min {on.min():.1f} max {on.max():.1f})")
        print(f"open / off per round: median {np.median(ratio):.3f} (min {ratio.min():.3f} max {ratio.max():.3f})")
