"""What the run's dashboard page costs a run: throughput with the page open and with it off, side by side.

One LocalCluster with its dashboard (2 in-process workers x 8 threads), the smoke pipeline's LeNet-5 on MNIST
without injected latency (the run's orchestration is all there is to slow down: the worst case for the page),
rounds that alternate the two modes, after one warm-up run of each:

* off: ``GCC_DASK_RUN_PAGE=off``: the run publishes nothing (the plugin is not consulted);
* open: the run publishes, and a viewer holds the page open (headless Chromium, niced, else a Bokeh client
  session in another process), which the page redraws for every second.

Prints per mode (median over the rounds) samples/s and this process's CPU ms per sample (the cluster is
in-process: driver, scheduler and workers; not the viewer), and open / off per round. docs/dashboard.rst and BENCHMARKS.md,
section 'The run page's cost', have the figures.

    python pipelines/bench_run_page.py SAMPLES ROUNDS
    python pipelines/bench_run_page.py 1024 5
"""
import os
import shutil
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
#: a viewer that holds the page open where no browser is installed: its session's websocket read until closed
#: (bokeh 3.9's client reads its messages recursively, so it gives up after some hundreds of redraws)
VIEWER = ("import sys, bokeh.client as b; s = b.pull_session(url=sys.argv[1]); print('viewer: page open', flush=True); "
          "getattr(s, 'loop_until_closed', None) and s.loop_until_closed() or s._loop_until_closed()")
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def viewer(url: str, profile: str) -> subprocess.Popen:
    """Hold the page open: headless Chromium at the lowest CPU priority (a user's browser runs on another
    machine), else a Bokeh client session."""
    if CHROMIUM:
        print(f"viewer: headless {CHROMIUM}", flush=True)
        return subprocess.Popen(["nice", "-n", "19", CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
                                 "--remote-debugging-port=0", url],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.Popen([sys.executable, "-c", VIEWER, url])


if __name__ == "__main__":
    out = tempfile.mkdtemp(prefix="gcc-dask-bench-page-")
    with LocalCluster(n_workers=2, threads_per_worker=8, processes=False, dashboard_address=":0",
                      silence_logs=40) as cl, Client(cl) as c:
        def run(mode: str) -> tuple[float, float]:
            """samples/s (wall clock), and this process's CPU ms per sample (driver, scheduler and workers: the
            cluster is in-process; the viewer's CPU is not in it)."""
            os.environ["GCC_DASK_RUN_PAGE"] = "off" if mode == "off" else "on"
            t, cpu = time.perf_counter(), time.process_time()
            gd.run_pipeline("pipelines/smoke.yaml", client=c, out=f"{out}/{mode}.zarr", overrides=OVERRIDES)
            return samples / (time.perf_counter() - t), (time.process_time() - cpu) / samples * 1e3

        run("open")  # puts the page on the scheduler (once), so the viewer has a page to hold open
        view = viewer(gd.dashboard.page_url(c), f"{out}/chromium")
        try:
            run("off")
            res = {"off": [], "open": []}
            for i in range(rounds):
                for mode in (("off", "open") if i % 2 == 0 else ("open", "off")):
                    res[mode].append(run(mode))
                    print(f"round {i} {mode}: {res[mode][-1][0]:.1f} samples/s, {res[mode][-1][1]:.2f} CPU ms/sample",
                          flush=True)
            alive = view.poll() is None
        finally:
            view.terminate()
        print(f"viewer held the page open through every round: {alive}")
        off, on = np.array(res["off"]), np.array(res["open"])
        for name, col in (("samples/s", 0), ("CPU ms/sample", 1)):
            print(f"{name}: off median {np.median(off[:, col]):.3g} (min {off[:, col].min():.3g} max "
                  f"{off[:, col].max():.3g}), open median {np.median(on[:, col]):.3g} (min {on[:, col].min():.3g} "
                  f"max {on[:, col].max():.3g})")
            ratio = on[:, col] / off[:, col]
            print(f"  open / off per round: median {np.median(ratio):.3f} (min {ratio.min():.3f} max {ratio.max():.3f})")
