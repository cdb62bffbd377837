"""Helpers of the reliability tests: a model that fails on some inputs, configs, store comparisons.

Workers import this module by name (``workload: {kind: callable, name: "rel_helpers:flaky"}``): pytest
puts this folder on ``sys.path`` (rootdir-relative imports, no ``__init__.py``), which in-process Dask
workers share; subprocesses get it through ``PYTHONPATH`` (:func:`subprocess_env`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import zarr
from distributed import WorkerPlugin

from gcc_dask.pipeline import StoreSink

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SMOKE = str(ROOT / "pipelines" / "smoke.yaml")
MODEL = str(ROOT / "pipelines" / "models" / "lenet5_mnist.onnx")

#: arrays of a scheme group whose values do not depend on the machine's timing (virtual clock)
DETERMINISTIC = ("decoded", "received", "failed", "latency_s", "cutoff_s", "status", "n_received",
                 "n_failed", "mse", "rel_acc", "error_estimate")


# ------------------------------------------------------------------------------------------- models
def fails_on(x: np.ndarray) -> bool:
    """Whether :func:`flaky` raises on the single sample ``x`` (a deterministic hash of its values)."""
    return int(np.floor(float(np.abs(np.asarray(x, dtype=np.float64)).sum()) * 1e4)) % 4 == 0


def flaky(X):
    """f(x) = x sin x, except that a *single-sample* call raises for about one input in four.

    Shards evaluate one coded input at a time, so about a quarter of them raise; the uncoded reference
    (all K samples at once) never does.
    """
    X = np.asarray(X)
    if X.shape[0] == 1 and fails_on(X[0]):
        raise ValueError("flaky model: this input makes it raise")
    return X * np.sin(X)


def picky(X):
    """f(x) = x sin x, except that it raises ``WorkloadError`` (a GccDaskError, as the ONNX workload raises on
    a runtime failure) on any single input whose first value exceeds 1.5: an f error, not a data error."""
    from gcc_dask.errors import WorkloadError

    X = np.asarray(X)
    if X.shape[0] == 1 and float(X.reshape(1, -1)[0, 0]) > 1.5:
        raise WorkloadError("picky model: it rejects this input")
    return X * np.sin(X)


def gated(X, gate: str):
    """f(x) = x sin x; a call on more than one sample (the uncoded reference of a batch) first leaves a file
    ``started-*`` in the folder `gate`, waits until a file ``release`` appears there (or the folder is gone: the
    test has ended), and leaves a file ``finished-*`` once it returns: the test decides when a killed driver's
    reference tasks finish, whatever the machine's speed."""
    import time
    import uuid

    X = np.asarray(X)
    if X.shape[0] > 1:
        mark = uuid.uuid4().hex
        Path(gate, f"started-{mark}").write_text("")
        while not Path(gate, "release").exists() and Path(gate).is_dir():
            time.sleep(0.02)
        out = X * np.sin(X)
        Path(gate, f"finished-{mark}").write_text("")
        return out
    return X * np.sin(X)


def xcosx(X):
    """f(x) = x cos x (another model than :func:`gated`'s, of the same output shape)."""
    X = np.asarray(X)
    return X * np.cos(X)


# ------------------------------------------------------------------------------------------ configs
def synthetic_config(path, *, batches: int, k: int = 4, n: int = 8, schemes=("gcc",), shape=(6,), block: int = 1,
                     composition: str = "as_stored", **sections):
    """A cheap pipeline: synthetic inputs, the analytic ``smooth`` network, injected stragglers.

    By default one sample per shard (``block_size: 1``) in the source's order, so that a batch is K samples
    and ``flaky`` (which raises on single-sample calls) makes shards fail; `block` and `composition` change it.
    No deadline: a batch waits for its N − S results (or every shard's outcome), so what a test asserts does not
    depend on how fast a busy machine runs it (a 1 s deadline once cut batches before their failed shards
    reported); a test of the deadline sets one.
    """
    cfg = {
        "name": "reliability",
        "source": {"kind": "synthetic", "num_samples": batches * k * block, "shape": list(shape), "seed": 3},
        "workload": {"kind": "analytic", "name": "smooth", "params": {"out_dim": 3}},
        "code": {"num_inputs": k, "num_workers": n, "block_size": block},
        "composition": {"policy": composition},
        "schemes": list(schemes),
        "stragglers": {"model": "shifted_exponential", "shift": "20ms", "scale": "10ms", "seed": 7},
        "cutoff": {"stragglers": 2, "deadline": None, "on_shortfall": "decode"},
        "cluster": {"n_workers": 2, "threads_per_worker": 4, "processes": False},
        "store": {"path": str(path), "overwrite": False},
        "run": {"max_batches_in_flight": 4, "progress": False},
    }
    for key, value in sections.items():  # these sections are updated, the others (source, workload) replaced
        if key in ("code", "stragglers", "cutoff", "cluster", "store", "run") and isinstance(value, dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


def subprocess_env() -> dict:
    """Environment for a ``gcc-dask`` subprocess: this folder importable, no colour, no CI noise."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def cli(*args: str) -> list[str]:
    """The command line of ``gcc-dask ARGS`` with this interpreter."""
    return [sys.executable, "-m", "gcc_dask.cli", *args]


# -------------------------------------------------------------------------------------------- store
def status(path, scheme: str = "gcc") -> np.ndarray:
    """The per-batch status of `scheme`, read fresh (no consolidated metadata)."""
    return zarr.open_group(str(path), mode="r", use_consolidated=False)[f"{scheme}/status"][:]


def wait_for_batches(path, proc, count: int = 3, scheme: str = "gcc") -> None:
    """Wait until `count` batches of `scheme` have a status in the store at `path` (it may not exist yet) or the
    subprocess `proc` has ended; the caller checks which. No time bound: an event, not a duration, ends the
    wait (a hang is ended by pytest-timeout)."""
    while proc.poll() is None:
        try:
            if (status(path, scheme) > 0).sum() >= count:
                return
        except Exception:  # not created yet
            pass
        time.sleep(0.1)


def read_group(path, group: str, names=DETERMINISTIC) -> dict[str, np.ndarray]:
    """The arrays `names` (those present) of one group of a run store."""
    g = zarr.open_group(str(path), mode="r", use_consolidated=False)[group]
    have = {name for name, _ in g.arrays()}
    return {name: g[name][...] for name in names if name in have}


def assert_stores_equal(a, b, schemes, names=DETERMINISTIC) -> None:
    """Bitwise equality (NaN == NaN) of the deterministic arrays and the inputs of two run stores."""
    for group in (*schemes, "inputs"):
        wanted = ("labels", "reference", "status") if group == "inputs" else names
        left, right = read_group(a, group, wanted), read_group(b, group, wanted)
        assert left.keys() == right.keys(), group
        for name in left:
            np.testing.assert_array_equal(left[name], right[name], err_msg=f"{group}/{name}")


# ------------------------------------------------------------------------ tasks that "die" once
_ARMED: set = set()
_ARMED_LOCK = threading.Lock()


def arm(*triggers: tuple) -> None:
    """Make the next matching load / inputs write / decoded write raise ``KilledWorker`` once.

    Triggers: ``("load", batch)``, ``("inputs", batch)``, ``("decoded", scheme, batch)``. In-process Dask
    workers share this module's state, so the first task to meet a trigger disarms it: exactly what a
    worker dying under that one task looks like to the driver (the task and its dependents err with
    ``KilledWorker``).
    """
    with _ARMED_LOCK:
        _ARMED.update(triggers)


def _fire(trigger: tuple) -> None:
    from distributed import KilledWorker

    with _ARMED_LOCK:
        if trigger not in _ARMED:
            return
        _ARMED.discard(trigger)
    raise KilledWorker(f"{trigger[0]}-{trigger[-1]}", GoneWorker(), 0)


class GoneWorker:
    """Stands for the scheduler's record of a dead worker (``KilledWorker.last_worker``)."""

    address = "tcp://dead-worker:0"


class DyingArray:
    """A (n, d) float32 array whose slice for batch ``b`` raises once when ``("load", b)`` is armed."""

    def __init__(self, data: np.ndarray, batch_size: int):
        self.data, self.batch_size = data, batch_size
        self.shape, self.dtype = data.shape, data.dtype

    def __getitem__(self, item):
        if isinstance(item, slice) and item.start:
            _fire(("load", item.start // self.batch_size))
        return self.data[item]

    def __dask_tokenize__(self):
        return ("DyingArray", self.data.tobytes(), self.batch_size)


class DyingSink(StoreSink):
    """The pipeline's store writer, except that a write raises ``KilledWorker`` once where armed."""

    def __call__(self, kind, batch, **arrays):
        _fire(("inputs", batch) if kind == "inputs" else ("decoded", kind, batch))
        return super().__call__(kind, batch, **arrays)


# --------------------------------------------------------------------------- which tasks ran where
class ExecLog(WorkerPlugin):
    """A Dask worker plugin that appends the key of every task that starts executing to a file, from
    every worker process (appends of one short line are atomic), restarted workers included."""

    name = "exec-log"

    def __init__(self, path):
        self.path = str(path)

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing":
            with open(self.path, "a") as fh:
                fh.write(f"{key}\n")

    def executions(self):
        """How many times each key started executing."""
        from collections import Counter

        try:
            with open(self.path) as fh:
                return Counter(line.strip() for line in fh if line.strip())
        except FileNotFoundError:
            return Counter()
