"""Driver crash and resume: SIGKILL ``gcc-dask run`` mid-run, run the same command again.

Batches whose ``status`` reached the store are never recomputed; the others (pending, including any
whose ``decoded`` rows were written but whose record was not) are redone; the final store equals a run
that was never interrupted, bit for bit (virtual clock, same seed). ``--overwrite`` starts over; a store
made by another config is refused with one line and left untouched.
"""

from __future__ import annotations

import signal
import subprocess
import time

import numpy as np
import pytest
import yaml
import zarr

import gcc_dask as gd
from rel_helpers import assert_stores_equal, cli, read_group, status, subprocess_env, synthetic_config

pytestmark = pytest.mark.slow  # four `gcc-dask run` subprocesses and one in-process run: ~30-60 s

BATCHES = 48
SCHEMES = ["gcc", "uncoded"]


def _gcc_dask(*args, timeout=300):
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env())


#: the crashed runs: one sample per shard in the source's order, or blocks of 3 groups of similar samples
LAYOUTS = [(1, "as_stored"), (3, "similarity")]


@pytest.fixture(scope="module", params=LAYOUTS, ids=["one-sample", "blocks"])
def crashed(request, tmp_path_factory):
    """A run SIGKILLed once at least 10 of its 48 batches are in the store (but not all): one sample per shard
    in the source's order, or blocks of 3 groups of similar samples."""
    block, composition = request.param
    tmp = tmp_path_factory.mktemp("crash")
    store = tmp / "run.zarr"
    pipe = tmp / "pipe.yaml"
    pipe.write_text(yaml.safe_dump(synthetic_config(store, batches=BATCHES, k=4, n=8, schemes=SCHEMES, block=block,
                                                    composition=composition)))
    proc = subprocess.Popen(cli("run", str(pipe), "--no-progress"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=subprocess_env())
    done = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                done = min(int((status(store, s) > 0).sum()) for s in SCHEMES)
            except Exception:  # not created yet, or metadata being written
                done = 0
            if done >= 10:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    before = {s: read_group(store, s, ("status", "batch_latency_s", "decoded")) for s in SCHEMES}
    assert 10 <= (before["gcc"]["status"] > 0).sum() < BATCHES
    return {"pipe": pipe, "store": store, "before": before, "tmp": tmp, "rows": 4 * block}


@pytest.fixture(scope="module")
def resumed(crashed):
    """A partly written batch is planted (decoded rows written, status not), then the same command runs."""
    store = crashed["store"]
    pending = np.flatnonzero(crashed["before"]["gcc"]["status"] == 0)
    planted = int(pending[0])
    rows = crashed["rows"]
    zarr.open_group(str(store), mode="r+", use_consolidated=False)["gcc/decoded"][planted * rows:(planted + 1) * rows] = 123.0
    res = _gcc_dask("run", str(crashed["pipe"]), "--no-progress")
    return {**crashed, "result": res, "planted": planted}


@pytest.fixture(scope="module")
def uninterrupted(client, crashed):
    return gd.run_pipeline(str(crashed["pipe"]), client=client, out=crashed["tmp"] / "clean.zarr")


def test_resume_completes_and_says_what_it_kept(resumed):
    res = resumed["result"]
    assert res.returncode == 0, res.stderr[-3000:]
    kept = int((resumed["before"]["gcc"]["status"] > 0).sum())
    # a batch counts as done when every scheme has its status
    kept_all = int(np.logical_and.reduce([resumed["before"][s]["status"] > 0 for s in SCHEMES]).sum())
    assert f"resuming {resumed['store']}: {kept_all} of {BATCHES} batches already done" in res.stdout
    print(f"killed with {kept} of {BATCHES} gcc batches in the store; resumed with {kept_all} kept")
    root = zarr.open_group(str(resumed["store"]), mode="r")
    assert root.attrs["status"] == "complete" and len(root.attrs["resumed_at"]) == 1
    for scheme in SCHEMES:
        assert (root[f"{scheme}/status"][:] > 0).all()


def test_completed_batches_are_not_recomputed(resumed):
    for scheme in SCHEMES:
        before = resumed["before"][scheme]
        after = read_group(resumed["store"], scheme, ("status", "batch_latency_s", "decoded"))
        done = before["status"] > 0
        # batch_latency_s is wall time: a recomputed batch would differ in every bit
        np.testing.assert_array_equal(after["batch_latency_s"][done], before["batch_latency_s"][done])
        np.testing.assert_array_equal(after["status"][done], before["status"][done])


def test_partial_batches_are_redone(resumed):
    n = resumed["rows"]
    rows = np.s_[resumed["planted"] * n:(resumed["planted"] + 1) * n]
    after = read_group(resumed["store"], "gcc", ("decoded",))["decoded"]
    assert not (after[rows] == 123.0).any()


def test_resumed_store_equals_an_uninterrupted_run(resumed, uninterrupted):
    assert uninterrupted.status == "complete"
    assert_stores_equal(resumed["store"], uninterrupted.path, SCHEMES)


# the refusal and --overwrite do not depend on the layout: on the first crashed run only (its blocks' twin ran a
# whole 48-batch run again for --overwrite)
@pytest.mark.parametrize("crashed", LAYOUTS[:1], indirect=True, ids=["one-sample"])
def test_a_different_config_is_refused_and_the_store_left_alone(resumed):
    store = resumed["store"]
    before = {s: read_group(store, s) for s in SCHEMES}
    attrs = dict(zarr.open_group(str(store), mode="r").attrs)
    res = _gcc_dask("run", str(resumed["pipe"]), "--no-progress", "--set", "code.num_workers=10")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert "a run made by a different configuration" in lines[0] and "--overwrite" in lines[0]
    assert dict(zarr.open_group(str(store), mode="r").attrs) == attrs
    for scheme in SCHEMES:
        after = read_group(store, scheme)
        for name in before[scheme]:
            np.testing.assert_array_equal(after[name], before[scheme][name])


@pytest.mark.parametrize("crashed", LAYOUTS[:1], indirect=True, ids=["one-sample"])
def test_overwrite_starts_over(resumed, uninterrupted):
    store = resumed["store"]
    old = read_group(store, "gcc", ("batch_latency_s",))["batch_latency_s"]
    created = zarr.open_group(str(store), mode="r").attrs["created"]
    res = _gcc_dask("run", str(resumed["pipe"]), "--no-progress", "--overwrite")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming" not in res.stdout
    root = zarr.open_group(str(store), mode="r")
    assert root.attrs["resumed_at"] == [] and root.attrs["created"] >= created
    new = read_group(store, "gcc", ("batch_latency_s",))["batch_latency_s"]
    assert not np.isin(new, old).any()  # every batch recomputed
    assert_stores_equal(store, uninterrupted.path, SCHEMES)
