"""Bad input: every mistake a user can make is one line on stderr and exit status 2, never a traceback.

Complements ``tests/test_cli.py`` (missing config file, K = 0, S >= N, lambda < 0, unknown ``--set`` key,
``--scheduler`` unreachable, as real subprocesses) and ``tests/test_config.py`` (the validator's table and
its hypothesis fuzz tests). Here, through the CLI in-process: wrong types and impossible combinations in
the YAML file, missing model and data files, data that do not fit the model, an empty dataset, NaN/Inf in
the inputs (``run.nan_policy``), a store path that is not a store, a stale scheduler file or address; and,
through the API: a model that raises on some inputs (erasures, reported per batch), and a store path the
workers cannot see (a worker in its own mount namespace).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
import zarr
from click.testing import CliRunner
from distributed import Client, LocalCluster

import gcc_dask as gd
from gcc_dask.cli import main
from gcc_dask.config import load_config
from gcc_dask.pipeline import build_codes
from gcc_dask.sources import make_source
from rel_helpers import MODEL, fails_on, read_group, synthetic_config

MNIST_LIKE = [1, 28, 28]


def _base(tmp_path, **sections) -> dict:
    """A small LeNet-5 pipeline on synthetic 28x28 images, run by an embedded in-process cluster; one sample
    per shard in the source's order, so batch b holds samples 4b to 4b + 3."""
    cfg = {
        "name": "bad-input",
        "source": {"kind": "synthetic", "num_samples": 16, "shape": MNIST_LIKE},
        "workload": {"kind": "onnx", "path": MODEL},
        "code": {"num_inputs": 4, "num_workers": 8, "block_size": 1},
        "composition": {"policy": "as_stored"},
        "schemes": ["gcc", "uncoded"],
        "cutoff": {"stragglers": 2},
        "cluster": {"n_workers": 1, "threads_per_worker": 8, "processes": False},
        "store": {"path": str(tmp_path / "run.zarr")},
        "run": {"progress": False},
    }
    cfg.update(sections)
    return cfg


def _cli(tmp_path, cfg, *args, name="pipe.yaml"):
    """Run ``gcc-dask run`` in-process on `cfg` (a mapping, written as YAML); return the click result."""
    path = tmp_path / name
    if cfg is not None:
        path.write_text(yaml.safe_dump(cfg))
    return CliRunner().invoke(main, ["run", str(path), *args])


def _assert_user_error(result, *fragments):
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit)  # not an uncaught exception: no traceback
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gcc-dask: error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _assert_refusal(result, *fragments):
    """A run refused before it starts: one line that names what it got and what is valid (docs/cli.rst)."""
    line = _assert_user_error(result, *fragments)
    assert re.search(r": got .+; expected .+", line), line
    return line


def _folder_with_a_file(path) -> str:
    path.mkdir()
    (path / "todo.txt").write_text("not a run store")
    return str(path)


def _bytes(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _npy(tmp_path, name, array) -> str:
    path = tmp_path / name
    np.save(path, array)
    return str(path)


def _images(huge: int | None = None) -> np.ndarray:
    """16 random 28x28 images, one of them (`huge`) set to 3e38, near float32's largest value."""
    x = np.random.default_rng(1).random((16, 1, 28, 28)).astype(np.float32)
    if huge is not None:
        x[huge] = 3e38
    return x


# --------------------------------------------------------------------------- rejected before running
CASES = {
    "wrong-type": (lambda t: {"code": {"num_inputs": "four", "num_workers": 8}},
                   ["code.num_inputs: got 'four'; expected a valid integer"]),
    "K-greater-than-N": (lambda t: {"code": {"num_inputs": 4, "num_workers": 3}},
                         ["code.num_workers: got 3; expected an integer >= code.num_inputs = 4"]),
    "wait_for-greater-than-N": (lambda t: {"cutoff": {"wait_for": 9}}, ["cutoff.wait_for: got 9"]),
    "negative-lambda-in-yaml": (lambda t: {"gcc": {"lambda_enc": -0.5}}, ["gcc.lambda_enc: got -0.5"]),
    "missing-model": (lambda t: {"workload": {"kind": "onnx", "path": str(t / "nope.onnx")}},
                      ["workload.path: got", "nope.onnx", "expected an existing file"]),
    "missing-data": (lambda t: {"source": {"kind": "npy", "path": str(t / "nope.npy")}},
                     ["source.path: got", "nope.npy", "expected an existing file"]),
    "missing-labels": (lambda t: {"source": {"kind": "npy", "path": _npy(t, "x.npy", np.zeros((8, 1, 28, 28),
                                                                                              np.float32)),
                                             "labels": str(t / "nope-labels.npy")}},
                       ["source.labels: got", "nope-labels.npy"]),
    "data-wrong-shape-for-model": (lambda t: {"source": {"kind": "npy",
                                                         "path": _npy(t, "w.npy", np.zeros((16, 5), np.float32))}},
                                   ["workload: got input of shape (1, 5), which does not fit ONNX model"]),
    "empty-dataset": (lambda t: {"source": {"kind": "npy",
                                            "path": _npy(t, "e.npy", np.zeros((0, 1, 28, 28), np.float32))}},
                      ["which holds no samples (num_samples=0); expected at least one sample"]),
    "nan-in-first-sample": (lambda t: {"source": {"kind": "npy", "path": _npy(
        t, "n0.npy", np.where(np.arange(16)[:, None, None, None] == 0, np.nan, np.ones((16, 1, 28, 28), np.float32)))}},
                            ["source: got NaN or Inf in sample 0 (run.nan_policy: raise); expected finite data"]),
    "absurd-sample-shape": (lambda t: {"source": {"kind": "synthetic", "num_samples": 4, "shape": [10**20]}},
                            ["source: got 'synthetic[seed=0]', whose sample 0 cannot be read (ValueError: Maximum allowed size"]),
    "integer-samples": (lambda t: {"source": {"kind": "npy", "path": _npy(t, "i.npy", np.zeros((16, 784), np.int64))}},
                        ["source: got int64 samples in", "; expected real floating data"]),
    "not-a-npy-file": (lambda t: {"source": {"kind": "npy", "path": _folder_with_a_file(t / "d") + "/todo.txt"}},
                       ["source: got", "todo.txt', which cannot be read as a .npy file"]),
    "not-an-onnx-model": (lambda t: {"workload": {"kind": "onnx", "path": _bytes(t / "m.onnx", b"not a model")}},
                          ["workload.path: got", "m.onnx', which ONNX Runtime cannot load", "expected an ONNX model"]),
    "label-with-a-fraction": (lambda t: {"source": {"kind": "npy", "path": _npy(t, "x.npy", _images()),
                                                    "labels": _npy(t, "y.npy", np.arange(16) / 2)}},
                              ["source.labels: got 0.5 (float64) as the label of sample 1 of 'npy:", "; expected integer "
                               "class labels >= 0"]),
    "negative-label": (lambda t: {"source": {"kind": "npy", "path": _npy(t, "x.npy", _images()),
                                             "labels": _npy(t, "y.npy", np.arange(16) - 3)}},
                       ["source.labels: got -3 as the label of sample 0 of 'npy:", "; expected integer class labels >= 0"]),
    "sample-too-large-to-compose": (lambda t: {"source": {"kind": "npy", "path": _npy(t, "x.npy", _images(huge=9))},
                                               "composition": {"policy": "similarity", "window": 4}},
                                    ["source: got values up to 3e+38 in sample 9 of 'npy:", "too large to compose"]),
    "store-path-is-a-file": (lambda t: {"store": {"path": _npy(t, "f.npy", np.zeros(3))}},
                             ["store path: got", "f.npy", "which is a file; expected a folder"]),
    "store-path-is-not-a-run": (lambda t: {"store": {"path": _folder_with_a_file(t / "notes")}},
                                ["store path: got", "notes", "not a Zarr v3 store"]),
    "overwrite-a-folder-of-other-files": (lambda t: {"store": {"path": _folder_with_a_file(t / "notes"),
                                                               "overwrite": True}},
                                          ["store path: got", "notes', a folder of other files; expected a run store "
                                           "or an empty folder to overwrite"]),
    "store-path-empty": (lambda t: {"store": {"path": ""}},
                         ["store.path: got ''; expected a store path (a folder: a new store, or a run store to "
                          "resume)"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rejected_with_one_line_and_exit_status_2(tmp_path, case):
    sections, fragments = CASES[case]
    _assert_refusal(_cli(tmp_path, _base(tmp_path, **sections(tmp_path))), *fragments)
    assert not (tmp_path / "run.zarr").exists()  # nothing was created for a run that cannot start


_GOOD = ("source: {kind: synthetic, num_samples: 8, shape: [4]}\nworkload: {kind: analytic, name: xsinx}\n"
         "code: {num_inputs: 2, num_workers: 4}\nschemes: [gcc]\n")
YAML_TEXTS = {
    "unclosed-flow": ("name: x\nsource: {kind: synthetic\n", "got invalid YAML at line"),
    "tab-indent": (_GOOD + "\tname: x\n", "got invalid YAML at line 5"),
    "nul-byte": (_GOOD + "name: \x00\n", "invalid YAML"),
    "not-utf8": (b"name: \xff\xfe\n", "got a file that cannot be read as UTF-8 text"),
    "python-tag": (_GOOD + "name: !!python/object:os.system x\n", "got invalid YAML at line 5"),
    "binary-name": (_GOOD + "name: !!binary aGVsbG8=\n", "name: got b'hello'"),
    "date-in-params": (_GOOD.replace("xsinx}", "xsinx, params: {d: 2024-01-01}}"), "workload.params: got"),
    "set-of-schemes": (_GOOD.replace("[gcc]", "!!set {gcc: null}"), "schemes: got {'gcc'}"),
    "empty-file": ("", "source: got nothing"),
    "duplicate-key": (_GOOD + "schemes: [bacc]\n", "duplicate key 'schemes'"),
}
RECURSIVE = {"self-alias": "a: &a [*a]\n",
             "recursive-schemes": _GOOD.replace("schemes: [gcc]", "schemes: &s [gcc, *s]")}


@pytest.mark.parametrize("case", sorted(YAML_TEXTS))
def test_bad_yaml_is_one_line(tmp_path, case):
    text, fragment = YAML_TEXTS[case]
    path = tmp_path / "pipe.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    _assert_refusal(_cli(tmp_path, None), fragment)


@pytest.mark.parametrize("case", sorted(RECURSIVE))
def test_recursive_yaml_alias_is_a_config_error(tmp_path, case):
    path = tmp_path / "pipe.yaml"
    path.write_text(RECURSIVE[case])
    with pytest.raises(gd.errors.ConfigError, match="recursive YAML alias"):
        load_config(path)


@pytest.mark.parametrize("how", ["scheduler-file", "env-address"])
def test_unreachable_scheduler_is_one_line_after_a_bounded_wait(tmp_path, monkeypatch, how):
    """A stale scheduler file or DASK_SCHEDULER_ADDRESS: a clear line after cluster.connect_timeout."""
    cluster = {"connect_timeout": "1s"}
    if how == "scheduler-file":
        (tmp_path / "scheduler.json").write_text(json.dumps({"address": "tcp://127.0.0.1:9", "type": "Scheduler"}))
        cluster["scheduler_file"] = str(tmp_path / "scheduler.json")
    else:
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:9")
    _assert_refusal(_cli(tmp_path, _base(tmp_path, cluster=cluster)), "cannot reach the Dask scheduler",
                       "within 1 s")


def test_a_scheduler_without_workers_is_one_line_after_a_bounded_wait(tmp_path):
    """A scheduler with no workers (none ever join): a clear error after cluster.connect_timeout."""
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=":0",
                      silence_logs=50) as cluster:
        cfg = _base(tmp_path, cluster={"address": cluster.scheduler_address, "connect_timeout": "1s"})
        line = _assert_refusal(_cli(tmp_path, cfg), "has no workers, and none joined within 1 s")
    assert cluster.scheduler_address in line


# ------------------------------------------------------------------------------------- NaN / Inf
def _with_nan(tmp_path, sample: int, value=np.nan) -> str:
    x = np.random.default_rng(0).random((16, 1, 28, 28)).astype(np.float32)
    x[sample, 0, 5, 5] = value
    return _npy(tmp_path, "nan.npy", x)


def test_nan_in_a_later_batch_stops_the_run_with_one_line(tmp_path):
    """nan_policy: raise. The batch and the sample that holds the Inf are named; the store is marked failed."""
    cfg = _base(tmp_path, source={"kind": "npy", "path": _with_nan(tmp_path, 9, np.inf)})
    _assert_user_error(_cli(tmp_path, cfg), "source: batch 2 (sample 9, of its 4 samples)", "NaN or Inf",
                       "nan_policy='raise'", "set run.nan_policy: propagate")
    assert zarr.open_group(str(tmp_path / "run.zarr"), mode="r").attrs["status"] == "failed"


def test_batches_finished_before_the_nan_keep_their_records(client, tmp_path, monkeypatch):
    """The run stops on the NaN of batch 2, but batches 0 and 1 (one batch in flight: both finished before
    batch 2 started) keep their records: status 1, not 0 (which a resume would redo). The records are
    fetched in the background; a slow fetch makes batch 1's still under way when batch 2 fails."""
    import time as _time

    real_gather = client.gather

    def slow_gather(*args, **kwargs):
        _time.sleep(0.5)
        return real_gather(*args, **kwargs)

    monkeypatch.setattr(client, "gather", slow_gather)
    x = np.random.default_rng(0).random((16, 5)).astype(np.float32)
    x[9, 2] = np.nan
    cfg = synthetic_config(tmp_path / "nan.zarr", batches=4, k=4, n=8, schemes=("gcc", "uncoded"),
                           stragglers={"model": "none"}, cutoff={"stragglers": 0, "deadline": None},
                           run={"max_batches_in_flight": 1})  # (no deadline: a busy machine cut no batch early)
    cfg["source"] = {"kind": "npy", "path": _npy(tmp_path, "nan.npy", x)}
    with pytest.raises(gd.errors.InvalidInputError, match=r"source: batch 2 \(sample 9, of its 4 samples\)"):
        gd.run_pipeline(cfg, client=client)
    for scheme in ("gcc", "uncoded"):
        status = read_group(tmp_path / "nan.zarr", scheme, ("status",))["status"]
        assert status.tolist() == [1, 1, 0, 0], (scheme, status)


def test_an_f_raising_a_gcc_dask_error_on_every_shard_is_an_erasure(client, tmp_path):
    """f rejects every input of batch 2 with a WorkloadError: that batch is undecodable (status 3), and the run
    goes on. Only errors raised while reading or encoding a batch stop a run."""
    x = np.zeros((6, 3), np.float32)
    x[:, 0] = [0.1, 0.2, 1.9, 0.3, 0.4, 0.5]
    cfg = synthetic_config(tmp_path / "picky.zarr", batches=6, k=1, n=1, schemes=("uncoded",),
                           workload={"kind": "callable", "name": "rel_helpers:picky"},
                           stragglers={"model": "none"}, cutoff={"stragglers": 0, "deadline": None})
    # (no deadline: on a busy machine a 1 s deadline could cut a batch before its failed shard reported)
    cfg["source"] = {"kind": "npy", "path": _npy(tmp_path, "picky.npy", x)}
    with pytest.warns(RuntimeWarning) as caught:
        run = gd.run_pipeline(cfg, client=client)  # said once, with f's error
    said = [str(w.message) for w in caught]
    assert [m for m in said if re.match(r"^uncoded: batch 2 has no estimate: .*picky model: it rejects", m)], said
    # f raised on batch 2's uncoded sample too: the batch has no reference, so its sample is not scored
    assert [m for m in said if m.startswith("batch 2: f raised on its 1 sample uncoded (WorkloadError")], said
    assert run.status == "complete"
    g = read_group(run.path, "uncoded", ("status", "failed"))
    assert g["status"].tolist() == [1, 1, 3, 1, 1, 1]
    assert g["failed"][:, 0].tolist() == [False, False, True, False, False, False]
    # f raised on batch 2's uncoded input too: its reference is written as unknown (NaN), an outcome, so the
    # batch is not pending work that every resume would meet again
    inputs = read_group(run.path, "inputs", ("status", "reference"))
    assert (inputs["status"] == 1).all()
    assert np.isnan(inputs["reference"][2]).all() and np.isfinite(np.delete(inputs["reference"], 2, axis=0)).all()


@pytest.mark.parametrize("scheme", ["uncoded", "speculative", "replication", "gcc"])
def test_nan_in_x_stops_a_selection_scheme_run_alone(client, tmp_path, scheme):
    """A breaker's find: a selection scheme's shard reads only its own samples, so a NaN in X (nan_policy:
    raise) failed that one shard, which was decoded around as an erasure: uncoded and speculative gave the
    shard's rows as NaN and replication filled them in with finite values, with no error. A failed shard of a
    selection scheme is now checked for bad data too: the run stops with the same line as gcc's."""
    x = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    x[37, 2] = np.nan
    with pytest.raises(gd.errors.InvalidInputError, match=r"^source: batch \d+ \(sample 37, of its \d+ samples\)"
                       r": .*NaN or Inf.*set run.nan_policy: propagate"):  # the sample that holds the NaN named
        gd.coded_map(_tanh4, x, schemes=[scheme], client=client, out=tmp_path / "nan.zarr",
                     code={"num_inputs": 4, "num_workers": 8, "block_size": 4}, cutoff={"stragglers": 2},
                     stragglers={"model": "none"})
    assert zarr.open_group(str(tmp_path / "nan.zarr"), mode="r").attrs["status"] == "failed"


def _tanh4(x):
    return np.tanh(x @ np.ones((4, 3), np.float32))


def _propagated(tmp_path, sample):
    cfg = _base(tmp_path, source={"kind": "npy", "path": _with_nan(tmp_path, sample)},
                run={"progress": False, "nan_policy": "propagate"})
    result = _cli(tmp_path, cfg, "--no-progress")
    assert result.exit_code == 0, result.output
    return {s: read_group(tmp_path / "run.zarr", s, ("decoded", "status")) for s in ("gcc", "uncoded")}


@pytest.mark.parametrize("sample", [0, 9])
def test_nan_propagates_when_asked(tmp_path, sample):
    """nan_policy: propagate. The run completes; the NaN stays in its own batch."""
    stores = _propagated(tmp_path, sample)
    reference = read_group(tmp_path / "run.zarr", "inputs", ("reference",))["reference"]
    assert np.flatnonzero(~np.isfinite(reference).all(axis=1)).tolist() == [sample]
    batch = sample // 4
    rows = np.s_[batch * 4 : batch * 4 + 4]
    for scheme, g in stores.items():
        assert (g["status"] > 0).all()
        assert not np.isfinite(g["decoded"][rows]).all(), scheme  # a coded input mixes all K samples
        assert np.isfinite(np.delete(g["decoded"], rows, axis=0)).all(), scheme
        assert (np.delete(g["status"], batch) == 1).all(), scheme


def test_uncoded_nan_stays_in_its_own_sample(tmp_path):
    """Uncoded (and replication) gather rows instead of a matmul, so 0 * NaN cannot spread the NaN."""
    uncoded = _propagated(tmp_path, 9)["uncoded"]["decoded"]
    assert np.flatnonzero(~np.isfinite(uncoded).all(axis=1)).tolist() == [9]


# ----------------------------------------------------------------------------- a model that raises
def test_a_model_raising_on_some_inputs_gives_erasures_reported_per_batch(client, tmp_path):
    """f raises on ~1/4 of the coded inputs: those shards are erasures (``failed`` in the store, per batch
    and worker), the others decode; the uncoded reference (f on the real inputs) never raises."""
    k, n, batches = 4, 12, 6
    cfg = synthetic_config(tmp_path / "flaky.zarr", batches=batches, k=k, n=n,
                           workload={"kind": "callable", "name": "rel_helpers:flaky"},
                           # no deadline: the 1 s of synthetic_config fired on a busy machine (4 busy loops beside
                           # the suite) before the failing shards had reported, and the batch was decoded without them
                           stragglers={"model": "none"}, cutoff={"wait_for": "all", "deadline": None})
    cfg = load_config(cfg)
    source = make_source("synthetic", num_samples=batches * k, shape=[6], seed=3)
    assert not fails_on(source.read(0, 1)[0][0])  # the driver's check of f on sample 0 must pass
    with pytest.warns(RuntimeWarning, match=r"^gcc: f raised on shard \d+ of batch \d+ \(ValueError\('flaky model"):
        run = gd.run_pipeline(cfg, client=client)  # said once, with f's error
    assert run.status == "complete"
    code = build_codes(cfg)["gcc"]
    expected = np.stack([[fails_on(code.encode(source.read(b * k, (b + 1) * k)[0], workers=[w])[0])
                          for w in range(code.num_workers)] for b in range(batches)])
    assert expected.any()
    gcc = read_group(run.path, "gcc")
    np.testing.assert_array_equal(gcc["failed"], expected)  # exactly the shards whose f raised
    np.testing.assert_array_equal(gcc["received"], ~expected)  # all others were used
    np.testing.assert_array_equal(gcc["n_failed"], expected.sum(axis=1))
    assert set(gcc["status"][expected.any(axis=1)]) <= {2, 3} and (gcc["status"][~expected.any(axis=1)] == 1).all()
    decoded_ok = gcc["status"] == 2
    assert decoded_ok.any() and np.isfinite(gcc["mse"][decoded_ok]).all()
    assert not list(Path(run.path).glob(".reachable-*"))  # the reachability probe cleans up
    # the summary counts them beside its batches (a new user read "failed 0" while f raised on shards), and the
    # table printed at the end says so under it
    from gcc_dask.analysis.summary import format_summary

    done = gcc["status"] > 0
    assert run.summary.loc["gcc", "failed_shards"] == int(gcc["n_failed"][done].sum()) > 0
    assert run.summary.loc["gcc", "failed"] == 0  # (batches without an estimate)
    assert f"gcc: {int(expected.sum())} shards failed (f raised, or their worker was lost): erasures, decoded " \
        "around" in " ".join(format_summary(run.summary).split())


def _raises_on_large(x):
    """tanh(x W), except that a call raises when any of its rows has a first value above 2.5 (a model that
    cannot take some inputs): a shard, or a batch's uncoded reference, that holds such a row fails whole."""
    if (np.asarray(x)[:, 0] > 2.5).any():
        raise ValueError("bad row")
    return np.tanh(x @ np.ones((4, 3), np.float32))


def test_a_model_raising_on_some_rows_is_said_with_the_batches_left_unscored(client, tmp_path):
    """A new user's find: f raising on a few rows failed the shards and the uncoded references that held them
    with nothing said: the summary showed no failure and RelAcc 1.0 for uncoded, scored on the batches whose
    reference f could compute only. Each scheme now says once that f raised (the error, the shard and batch),
    and the run says once that a batch without a reference is left out of the metrics."""
    x = np.random.default_rng(5).uniform(-1, 1, size=(512, 4)).astype(np.float32)
    x[[40, 300], 0] = 3.0  # the two rows f raises on: in batches 0 and 4 (of 64 samples, in the stored order)
    with pytest.warns(RuntimeWarning) as caught:
        res = gd.coded_map(_raises_on_large, x, schemes=("gcc", "uncoded"), client=client,
                           out=tmp_path / "raise.zarr", run={"reference": True}, stragglers={"model": "none"},
                           composition={"policy": "as_stored"},
                           code={"num_inputs": 4, "num_workers": 8, "block_size": 16}, cutoff={"stragglers": 2})
    said = [str(w.message) for w in caught]
    for scheme in ("gcc", "uncoded"):
        assert sum(m.startswith(f"{scheme}: f raised on shard ") and "ValueError('bad row')" in m
                   for m in said) == 1, said
    unscored = [m for m in said if "so it has no reference" in m]
    assert len(unscored) == 1 and re.match(r"^batch [04]: f raised on its 64 samples uncoded \(ValueError", unscored[0])
    inputs = read_group(res.store, "inputs", ("reference",))
    unknown = np.isnan(inputs["reference"]).all(axis=1)
    assert unknown[:64].all() and unknown[256:320].all() and unknown.sum() == 128  # the batches of the bad rows
    uncoded = read_group(res.store, "uncoded", ("n_failed",))
    assert uncoded["n_failed"].sum() == 2  # the two shards that held them


def _doubles_in_place(x):
    """2 x, computed by writing into its input (what docs/own_model.rst tells an f not to do)."""
    x *= 2.0
    return x


def test_a_model_writing_into_its_input_is_refused_and_said_never_mixed_in(client, tmp_path):
    """An f that wrote into its input changed the samples that a worker's shards share (uncoded's shard and
    replication's copies of a position; the batch's samples that its reference and its coded shards read), so the
    next shard got doubled rows and gave 4x instead of 2x, with nothing said. Those samples are now read-only: f's
    write fails, and the line that says so tells what to do; no estimate is made of altered rows."""
    x = np.random.default_rng(6).uniform(-1, 1, size=(128, 4)).astype(np.float32)
    common = dict(client=client, stragglers={"model": "none"}, composition={"policy": "as_stored"},
                  code={"num_inputs": 4, "num_workers": 8, "block_size": 16})
    hint = "f wrote into its input, which is read-only"
    with pytest.warns(RuntimeWarning) as caught:
        res = gd.coded_map(_doubles_in_place, x, schemes=("uncoded", "replication"), out=tmp_path / "sel.zarr",
                           **common)
    said = [str(w.message) for w in caught]
    for scheme in ("uncoded", "replication"):
        assert any(m.startswith(f"{scheme}: batch ") and hint in m for m in said), said
    assert np.isnan(np.asarray(res.estimates)).all()  # no estimate of doubled rows: none at all
    # gcc encodes a block of its own for each shard (f may write into it), but the batch's reference is f on the
    # shared samples: refused, and said
    with pytest.warns(RuntimeWarning) as caught:
        res = gd.coded_map(_doubles_in_place, x, schemes=("gcc",), out=tmp_path / "gcc.zarr", run={"reference": True},
                           **common)
    unscored = [str(w.message) for w in caught if "so it has no reference" in str(w.message)]
    assert len(unscored) == 1 and hint in unscored[0]
    assert np.isfinite(np.asarray(res.estimates)).all()


# ------------------------------------------------------------------ a store the workers cannot see
def _can_unshare(tmp_path) -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs none {tmp_path}"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.fixture
def isolated_worker(tmp_path):
    """A scheduler here, and one worker whose view of ``tmp_path/shared`` is its own private tmpfs (as
    on a machine that does not mount the driver's file system)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    if not _can_unshare(shared):
        pytest.skip("needs root and unshare(1) to give a worker its own mount namespace")
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=":0",
                      silence_logs=50) as cluster:
        cmd = ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs none {shared} && exec {sys.executable} -m "
               f"distributed.cli.dask_worker {cluster.scheduler_address} --nthreads 4 --no-nanny --no-dashboard"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with Client(cluster) as c:
                c.wait_for_workers(1, timeout=60)
                yield c, shared
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_a_store_the_workers_cannot_see_is_refused_at_start(isolated_worker):
    client, shared = isolated_worker
    cfg = synthetic_config(shared / "run.zarr", batches=2)
    with pytest.raises(gd.errors.StoreError) as info:
        gd.run_pipeline(cfg, client=client)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"store.path: got {str(shared / 'run.zarr')!r}, which 1 of 1 Dask workers cannot "
                              "see or write (worker tcp://")
    assert "FileNotFoundError" in message and "every worker mount" in message


@pytest.mark.parametrize("scheme", ["uncoded", "gcc"])
def test_a_damaged_chunk_in_the_middle_of_x_stops_the_run_with_one_line(client, tmp_path, scheme):
    """A breaker's find: a compressed chunk of X that cannot be decoded (numcodecs raises RuntimeError), past the
    samples the probe reads, failed the shards that read it, which were decoded around as erasures: the run
    ended ``complete`` with those samples missing (uncoded) or their batch undecodable (gcc). A read that cannot
    be decoded is the batch's bad data now: the run stops with one line naming the source and the samples, and
    the store says ``failed``."""
    path = tmp_path / "x.zarr"
    z = zarr.open_array(str(path), mode="w", shape=(400, 4), chunks=(50, 4), dtype="float32")
    z[:] = np.random.default_rng(0).uniform(-1, 1, (400, 4)).astype(np.float32)
    chunk = path / "c" / "5" / "0"  # samples 250-299: batch 2 of 100 samples
    data = bytearray(chunk.read_bytes())
    data[4:] = bytes(b ^ 0x5A for b in data[4:])
    chunk.write_bytes(bytes(data))
    with pytest.raises(gd.errors.SourceError, match=r"^source: batch 2 \(samples 200 to 299\): source: got .*, "
                                                    r"whose samples 250-299 cannot be read \(RuntimeError: .*\); "
                                                    r"expected a readable source") as err:
        gd.coded_map(_tanh4, zarr.open_array(str(path), mode="r"), schemes=[scheme], client=client,
                     out=tmp_path / "run.zarr", composition={"policy": "as_stored"},
                     code={"num_inputs": 4, "num_workers": 8, "block_size": 25}, cutoff={"stragglers": 2},
                     stragglers={"model": "none"})
    assert "\n" not in str(err.value)
    assert zarr.open_group(str(tmp_path / "run.zarr"), mode="r").attrs["status"] == "failed"
