"""A user's own cheap model through coded_map against a plain map_blocks, ratios side by side in one run.

A scikit-learn MLP (64, 64) ``predict_proba`` on n x 32 float32 rows in a compressed Zarr array (chunks of c
rows), read as ``da.from_zarr``; each round times ``map_blocks`` then ``coded_map`` with its defaults
(estimates computed), on one LocalCluster of 2 single-thread worker processes, after one warm-up of each.
Prints plain / coded per scheme: median and standard error over the rounds.

    python pipelines/bench_own_cheap_model.py N CHUNK SCHEMES ROUNDS CACHE
    python pipelines/bench_own_cheap_model.py 200000 10000 uncoded,speculative,gcc,replication 3 off
    python pipelines/bench_own_cheap_model.py 200000 10000 gcc,replication 3 warm   # composition cache on

CACHE ``off`` composes in every call; ``warm`` keeps compositions in a fresh cache folder, so every timed call
after the warm-up reuses its composition (a second call on the same data). Needs scikit-learn (the test extra).
BENCHMARKS.md, section 'A cheap model of your own', has the figures.
"""
import sys, time, os, shutil, numpy as np, warnings, tempfile
warnings.filterwarnings("ignore")
import dask.array as da, zarr
from distributed import Client, LocalCluster
from sklearn.neural_network import MLPClassifier
import gcc_dask as gd
n = int(sys.argv[1]); chunk = int(sys.argv[2]); schemes = sys.argv[3].split(","); rounds = int(sys.argv[4])
cache_mode = sys.argv[5]  # off | warm
os.makedirs("/tmp/gcc-dask-bench-cheap", exist_ok=True)
rng = np.random.default_rng(0)
Xtr = rng.normal(size=(2000, 32)).astype("float32"); ytr = (Xtr[:, 0] > 0).astype(int) + (Xtr[:, 1] > 0)
clf = MLPClassifier((64, 64), max_iter=50, random_state=0).fit(Xtr, ytr)
path = f"/tmp/gcc-dask-bench-cheap/x{n}_{chunk}.zarr"
if not os.path.exists(path):
    X = rng.normal(size=(n, 32)).astype("float32")
    z = zarr.create_array(path, shape=X.shape, chunks=(chunk, 32), dtype="float32"); z[:] = X
os.environ["GCC_DASK_CACHE"] = tempfile.mkdtemp() if cache_mode == "warm" else "off"
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cl, Client(cl) as c:
        def plain():
            t = time.perf_counter(); da.from_zarr(path).map_blocks(clf.predict_proba, chunks=(chunk, 3), dtype="float64").compute(); return time.perf_counter() - t
        def coded(s):
            t = time.perf_counter()
            r = gd.coded_map(clf.predict_proba, da.from_zarr(path), schemes=(s,), out=f"/tmp/gcc-dask-bench-cheap/run_{s}_{time.time()}.zarr")
            e = r.estimates.compute()
            return time.perf_counter() - t
        plain(); [coded(s) for s in schemes]
        res = {s: [] for s in schemes}
        for _ in range(rounds):
            for s in schemes:
                tp = plain(); tc = coded(s); res[s].append(tp / tc)
        for s in schemes:
            r = np.array(res[s]); print(f"{cache_mode} {s}: ratio median {np.median(r):.3f} +- {r.std(ddof=1)/np.sqrt(len(r)):.3f} (min {r.min():.3f} max {r.max():.3f}) plain {tp:.2f}s", flush=True)
