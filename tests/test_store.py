"""Tests for gcc_dask.store: layout, worker writes, status-last, resume, readers."""

from __future__ import annotations

import json
import threading
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

from gcc_dask import store as store_mod
from gcc_dask.errors import InvalidInputError, StoreError
from gcc_dask.store import BatchStatus, RunStore, check_writable, open_run, open_scheme, write_batch

K = 8
SCHEMES = {"gcc": 16, "uncoded": 8}


def make(path, **kw):
    args = dict(config_resolved={"name": "t", "code": {"num_inputs": K}}, fingerprint="f" * 64,
                schemes=SCHEMES, num_samples=30, batch_size=K, output_shape=(10,), has_labels=True,
                has_reference=True, seed=7)
    args.update(kw)
    return RunStore.create(path, **args)


def batch_arrays(batch, n_workers=16, rows=K, value=None, status=BatchStatus.DECODED):
    rng = np.random.default_rng(batch)
    received = np.zeros(n_workers, bool)
    received[: n_workers - 3] = True
    return dict(decoded=np.full((rows, 10), float(batch) if value is None else value, np.float32),
                received_mask=received, latency_s=rng.random(n_workers), cutoff_s=0.25 + batch,
                status=status, mse=0.1 * batch, rel_acc=0.9, batch_latency_s=0.5,
                error_estimate=0.01, failed_mask=~received & (np.arange(n_workers) % 2 == 0))


@pytest.fixture
def path(tmp_path):
    return tmp_path / "run.zarr"


# ------------------------------------------------------------------------------------------ layout
def test_layout_matches_design(path):
    st = make(path)
    assert st.num_batches == 4 and st.num_samples == 30 and st.batch_size == K
    root = zarr.open_group(str(path), mode="r")
    attrs = dict(root.attrs)
    for key in ("gcc_dask_version", "created", "finished", "status", "config", "config_fingerprint",
                "git_sha", "versions", "seed"):
        assert key in attrs
    assert attrs["status"] == "running" and attrs["finished"] is None and attrs["seed"] == 7
    assert attrs["config"] == {"name": "t", "code": {"num_inputs": K}}
    # sample arrays: one chunk per batch (workers write them); per-batch records: driver-written, BATCH_CHUNK
    expected = {
        "inputs/labels": ((30,), (K,), "int64", ("sample",)),
        "inputs/reference": ((30, 10), (K, 10), "float32", ("sample", "output")),
        "inputs/status": ((4,), (1,), "int8", ("batch",)),
        "gcc/decoded": ((30, 10), (K, 10), "float32", ("sample", "output")),
        "gcc/received": ((4, 16), (4, 16), "bool", ("batch", "worker")),
        "gcc/failed": ((4, 16), (4, 16), "bool", ("batch", "worker")),
        "gcc/latency_s": ((4, 16), (4, 16), "float64", ("batch", "worker")),
        "uncoded/latency_s": ((4, 8), (4, 8), "float64", ("batch", "worker")),
        "gcc/status": ((4,), (4,), "int8", ("batch",)),
        "gcc/n_received": ((4,), (4,), "int32", ("batch",)),
    }
    for name in ("cutoff_s", "mse", "rel_acc", "batch_latency_s", "error_estimate"):
        expected[f"gcc/{name}"] = ((4,), (4,), "float64", ("batch",))
    for name, (shape, chunks, dtype, dims) in expected.items():
        arr = root[name]
        assert (arr.shape, arr.chunks, str(arr.dtype), tuple(arr.metadata.dimension_names)) == \
            (shape, chunks, dtype, dims), name
    for group in ("inputs", "gcc", "uncoded"):  # every array has dimension names
        for _, arr in root[group].arrays():
            assert arr.metadata.dimension_names is not None
    assert np.isnan(root["gcc/decoded"][:]).all() and np.isnan(root["gcc/mse"][:]).all()
    assert (root["gcc/status"][:] == 0).all() and (root["inputs/labels"][:] == -1).all()
    assert dict(root["uncoded"].attrs)["num_workers"] == 8


@pytest.mark.parametrize(("output_shape", "dims"), [((), ("sample",)), ((2, 3), ("sample", "output_0", "output_1"))],
                         ids=["scalar-output", "matrix-output"])
def test_output_axes(path, output_shape, dims):
    make(path, output_shape=output_shape)
    assert tuple(zarr.open_group(str(path), mode="r")["gcc/decoded"].metadata.dimension_names) == dims
    decoded = np.arange(K * int(np.prod(output_shape)), dtype=np.float32).reshape(K, -1)  # flattened outputs
    write_batch(path, "gcc", 0, **{**batch_arrays(0), "decoded": decoded})
    got = RunStore.open(path).read_batch("gcc", 0)["decoded"]
    np.testing.assert_array_equal(got.reshape(K, -1), decoded)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"num_samples": 0}, InvalidInputError, "num_samples: got 0"),
    ({"batch_size": 0}, InvalidInputError, "batch_size: got 0"),
    ({"schemes": {"inputs": 4}}, InvalidInputError, "scheme name 'inputs'"),
    ({"schemes": {"gcc": 0}}, InvalidInputError, r"schemes\['gcc'\]: got 0"),
    ({"schemes": {}}, InvalidInputError, "at least one scheme"),
    ({"output_shape": (0,)}, InvalidInputError, "output_shape"),
], ids=["no-samples", "zero-batch", "reserved-name", "zero-workers", "no-schemes", "empty-output"])
def test_create_rejects(path, kwargs, error, match):
    with pytest.raises(error, match=match):
        make(path, **kwargs)


# -------------------------------------------------------------------------------------- writes
def test_out_of_order_writes_and_statuses(path):
    st = make(path)
    write_batch(path, "gcc", 2, **batch_arrays(2))
    write_batch(path, "gcc", 0, **batch_arrays(0, status=BatchStatus.UNDECODABLE, value=np.nan))
    st.write_batch("uncoded", 1, **batch_arrays(1, n_workers=8, status=BatchStatus.DEADLINE_DECODED))
    np.testing.assert_array_equal(st.batch_status("gcc"), [3, 0, 1, 0])
    np.testing.assert_array_equal(st.pending_batches("gcc"), [1, 3])
    np.testing.assert_array_equal(st.pending_batches("uncoded"), [0, 2, 3])
    got = st.read_batch("gcc", 2)
    np.testing.assert_array_equal(got["decoded"], np.full((K, 10), 2.0, np.float32))
    assert got["cutoff_s"] == 2.25 and got["mse"] == pytest.approx(0.2)
    assert got["n_received"] == 13 and got["n_failed"] == int(batch_arrays(2)["failed_mask"].sum())
    np.testing.assert_array_equal(got["latency_s"], batch_arrays(2)["latency_s"])
    assert np.isnan(st.read_batch("gcc", 1)["decoded"]).all()


def test_partial_final_batch(path):
    st = make(path)  # 30 samples, K = 8: the last batch holds samples 24..29
    assert st.batch_rows(3) == (24, 30)
    write_batch(path, "gcc", 3, **batch_arrays(3, rows=K))  # padded: extra rows dropped
    write_batch(path, "uncoded", 3, **batch_arrays(3, n_workers=8, rows=6))
    st.write_inputs(3, labels=np.arange(6), reference=np.ones((K, 10)))
    root = zarr.open_group(str(path), mode="r")
    np.testing.assert_array_equal(root["gcc/decoded"][24:], np.full((6, 10), 3.0))
    np.testing.assert_array_equal(root["inputs/labels"][24:], np.arange(6))
    np.testing.assert_array_equal(st.pending_batches("inputs"), [0, 1, 2])
    with pytest.raises(InvalidInputError, match=r"decoded: got an array of shape \(7, 10\); expected shape \(6, 10\)"):
        write_batch(path, "gcc", 3, **batch_arrays(3, rows=7))


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"status": 0}, InvalidInputError, "status: got 0"),
    ({"status": 9}, InvalidInputError, "status: got 9"),
    ({"received_mask": np.ones(15, bool)}, InvalidInputError, r"received_mask: got an array of shape \(15,\)"),
    ({"latency_s": np.ones((2, 16))}, InvalidInputError, "latency_s"),
], ids=["pending-status", "unknown-status", "short-mask", "bad-latency"])
def test_write_batch_rejects(path, change, error, match):
    make(path)
    with pytest.raises(error, match=match):
        write_batch(path, "gcc", 0, **{**batch_arrays(0), **change})
    assert RunStore.open(path).batch_status("gcc")[0] == 0


def test_write_batch_rejects_unknown_scheme_and_batch(path):
    make(path)
    with pytest.raises(StoreError, match="scheme: got 'bacc'"):
        write_batch(path, "bacc", 0, **batch_arrays(0))
    with pytest.raises(InvalidInputError, match=r"batch: got 4; expected an integer in \[0, 4\)"):
        write_batch(path, "gcc", 4, **batch_arrays(4))
    with pytest.raises(StoreError, match="does not exist"):
        write_batch(path.parent / "other.zarr", "gcc", 0, **batch_arrays(0))


def test_write_inputs_checks_what_the_store_holds(path):
    make(path, has_reference=False)
    with pytest.raises(InvalidInputError, match="reference: got an array; expected None"):
        store_mod.write_inputs(path, 0, labels=np.arange(K), reference=np.ones((K, 10)))
    with pytest.raises(InvalidInputError, match="labels: got None"):
        store_mod.write_inputs(path, 0)
    store_mod.write_inputs(path, 0, labels=np.arange(K))
    np.testing.assert_array_equal(RunStore.open(path).batch_status("inputs"), [1, 0, 0, 0])


def test_concurrent_writers_on_distinct_batches_lose_nothing(tmp_path):
    path = tmp_path / "many.zarr"
    st = make(path, num_samples=16 * K, schemes={"gcc": 16})
    errors = []

    def work(batches):
        try:
            for b in batches:
                write_batch(path, "gcc", b, **batch_arrays(b))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(range(i, 16, 4),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert (st.batch_status("gcc") == 1).all()
    decoded = zarr.open_group(str(path), mode="r")["gcc/decoded"][:]
    np.testing.assert_array_equal(decoded[:, 0], np.repeat(np.arange(16.0), K))
    np.testing.assert_array_equal(zarr.open_group(str(path), mode="r")["gcc/cutoff_s"][:], np.arange(16) + 0.25)


def test_status_is_written_last(path, monkeypatch):
    st = make(path)

    def crash(group, batch, status):
        raise KeyboardInterrupt("driver killed between data and status")

    monkeypatch.setattr(store_mod.writes, "_write_status", crash)  # where the writers look it up
    with pytest.raises(KeyboardInterrupt):
        write_batch(path, "gcc", 1, **batch_arrays(1))
    with pytest.raises(KeyboardInterrupt):
        store_mod.write_inputs(path, 1, labels=np.arange(K), reference=np.ones((K, 10)))
    monkeypatch.undo()
    # the data landed, but the batch still counts as pending, so a resume redoes it
    assert (st.read_batch("gcc", 1)["decoded"] == 1.0).all()
    np.testing.assert_array_equal(st.pending_batches("gcc"), [0, 1, 2, 3])
    np.testing.assert_array_equal(st.pending_batches("inputs"), [0, 1, 2, 3])
    write_batch(path, "gcc", 1, **batch_arrays(1, value=5.0))
    np.testing.assert_array_equal(st.pending_batches("gcc"), [0, 2, 3])
    assert (st.read_batch("gcc", 1)["decoded"] == 5.0).all()


# -------------------------------------------------------------------------------------- resume
def test_resume_with_same_fingerprint_keeps_batches(path):
    st = make(path)
    write_batch(path, "gcc", 0, **batch_arrays(0, value=4.0))
    st.finish(status="interrupted")
    again = RunStore.open_or_create(path, **_create_args(path))
    assert again.resumed and again.attrs["status"] == "running" and again.attrs["finished"] is None
    assert len(again.attrs["resumed_at"]) == 1
    np.testing.assert_array_equal(again.pending_batches("gcc"), [1, 2, 3])
    assert (again.read_batch("gcc", 0)["decoded"] == 4.0).all()
    # the stale consolidated metadata of the first finish is gone: readers see the resumed status
    assert json.loads((path / "zarr.json").read_text()).get("consolidated_metadata") is None
    assert open_run(path).attrs["status"] == "running"


def _create_args(path, **kw):
    args = dict(config_resolved={"name": "t"}, fingerprint="f" * 64, schemes=SCHEMES, num_samples=30,
                batch_size=K, output_shape=(10,), has_labels=True, has_reference=True, seed=7)
    args.update(kw)
    return args


def test_new_store_via_open_or_create(path):
    st = RunStore.open_or_create(path, **_create_args(path))
    assert not st.resumed and st.num_batches == 4
    empty = path.parent / "empty.zarr"
    empty.mkdir()
    assert not RunStore.open_or_create(empty, **_create_args(empty)).resumed


def test_resume_refuses_other_config(path):
    make(path)
    with pytest.raises(StoreError, match="made by a different configuration.*--overwrite"):
        RunStore.open_or_create(path, **_create_args(path, fingerprint="0" * 64))
    with pytest.raises(StoreError, match="num_samples=30; this run needs num_samples=31"):
        RunStore.open_or_create(path, **_create_args(path, num_samples=31))
    with pytest.raises(StoreError, match="dtype='float32'; this run needs dtype='float64'"):
        RunStore.open_or_create(path, **_create_args(path, dtype="float64"))


def test_overwrite_starts_over(path):
    st = make(path)
    write_batch(path, "gcc", 0, **batch_arrays(0))
    with pytest.raises(StoreError, match="already exists"):
        make(path)
    fresh = RunStore.open_or_create(path, overwrite=True, **_create_args(path, fingerprint="0" * 64))
    assert not fresh.resumed and fresh.attrs["config_fingerprint"] == "0" * 64
    np.testing.assert_array_equal(fresh.pending_batches("gcc"), [0, 1, 2, 3])
    assert st.path == fresh.path


def test_overwrite_never_deletes_foreign_data(tmp_path):
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("...")
    with pytest.raises(StoreError, match="not a Zarr v3 store"):
        make(other, overwrite=True)
    assert (other / "thesis.tex").exists()
    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    with pytest.raises(StoreError, match="without the gcc-dask attributes"):
        make(tmp_path / "plain.zarr", overwrite=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert make(empty, overwrite=True).num_batches == 4


def test_open_missing_or_foreign(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        RunStore.open(tmp_path / "nope.zarr")
    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    with pytest.raises(StoreError, match="expected a gcc-dask run store"):
        RunStore.open(tmp_path / "plain.zarr")
    with pytest.raises(StoreError, match="does not exist"):
        open_run(tmp_path / "nope.zarr")


# ------------------------------------------------------------------------------------- readers
def _filled(path):
    st = make(path)
    for b in range(st.num_batches):
        write_batch(path, "gcc", b, **batch_arrays(b))
        write_batch(path, "uncoded", b, **batch_arrays(b, n_workers=8, status=BatchStatus.FAILED))
        st.write_inputs(b, labels=np.arange(K), reference=np.zeros((K, 10)))
    return st


def test_finish_consolidates_and_readers_work(path):
    st = _filled(path)
    st.finish()
    attrs = st.attrs
    assert attrs["status"] == "complete" and attrs["finished"] is not None
    assert json.loads((path / "zarr.json").read_text()).get("consolidated_metadata")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(str(path), group="gcc")
        tree = open_run(path)
    assert ds["decoded"].dims == ("sample", "output") and ds.sizes["worker"] == 16
    assert ds["received"].dims == ("batch", "worker") and ds["status"].dtype == np.int8
    np.testing.assert_array_equal(ds["status"].values, [1, 1, 1, 1])
    np.testing.assert_array_equal(ds["decoded"].values[:, 0], np.repeat(np.arange(4.0), K)[:30])
    assert isinstance(tree, xr.DataTree)
    assert set(tree.children) == {"inputs", "gcc", "uncoded"}
    assert tree["uncoded"].sizes["worker"] == 8 and tree.attrs["status"] == "complete"
    assert tree["inputs"]["labels"].dims == ("sample",)


def test_readers_work_before_finish(path):
    _filled(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = open_scheme(path, "uncoded", inputs=True)
        tree = open_run(path)
    assert set(ds.data_vars) >= {"decoded", "labels", "reference", "status"}
    np.testing.assert_array_equal(ds["status"].values, [4, 4, 4, 4])
    assert ds["reference"].dims == ("sample", "output")
    assert tree.attrs["status"] == "running"
    ds = xr.open_zarr(str(path), group="gcc", consolidated=False)  # the plain xarray call
    assert ds["latency_s"].dims == ("batch", "worker")


def test_finish_rejects_unknown_status(path):
    with pytest.raises(InvalidInputError, match="status: got 'done'"):
        make(path).finish(status="done")


# ------------------------------------------------------------------------------------- probing
def test_check_writable(tmp_path):
    assert check_writable(tmp_path) == str(tmp_path)
    assert check_writable(tmp_path / "new" / "run.zarr") == str(tmp_path / "new" / "run.zarr")
    assert not (tmp_path / "new").exists()  # probing creates nothing
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreError, match="does not exist on this machine"):
        check_writable(tmp_path / "run.zarr", must_exist=True)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="it is a file"):
        check_writable(blocker)
    with pytest.raises(StoreError, match="expected a path this process can write"):
        check_writable(blocker / "run.zarr")
    with pytest.raises(StoreError, match="URLs are not supported"):
        check_writable("s3://bucket/run.zarr")


def test_write_records_many_batches_at_once(path):
    st = make(path)
    for b in (2, 0):
        store_mod.write_decoded(path, "gcc", b, np.full((K, 10), float(b)))
    recs = [{"batch": b, "received_mask": np.arange(16) % 2 == 0, "latency_s": np.full(16, 0.1 * b),
             "cutoff_s": 0.5, "status": 2, "mse": 0.25 * b, "rel_acc": 1.0} for b in (2, 0)]
    st.write_records("gcc", recs)
    np.testing.assert_array_equal(st.batch_status("gcc"), [1 * 2, 0, 2, 0])
    root = zarr.open_group(str(path), mode="r")
    np.testing.assert_array_equal(root["gcc/mse"][:][[0, 2]], [0.0, 0.5])
    np.testing.assert_array_equal(root["gcc/n_received"][:], [8, -1, 8, -1])
    with pytest.raises(InvalidInputError, match="at most once"):
        st.write_records("gcc", recs + recs[:1])


def test_the_inputs_digest_skips_a_folder_it_cannot_list(tmp_path, monkeypatch):
    import os

    from gcc_dask import _digest

    (tmp_path / "data" / "ok").mkdir(parents=True)
    (tmp_path / "data" / "ok" / "f").write_text("1")
    (tmp_path / "data" / "locked").mkdir()
    (tmp_path / "data" / "locked" / "g").write_text("2")
    real = os.scandir

    def scandir(path):  # as os.walk does, a folder that cannot be listed (lost+found, no permission) is skipped
        if os.path.basename(path) == "locked":
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(_digest.os, "scandir", scandir)
    seen = _digest.files_digest([tmp_path / "data"])
    (tmp_path / "data" / "locked" / "g").write_text("3")
    assert _digest.files_digest([tmp_path / "data"]) == seen
    (tmp_path / "data" / "ok" / "f").write_text("22")
    assert _digest.files_digest([tmp_path / "data"]) != seen


def test_a_sample_index_reads_the_stored_composition_and_pickles_to_its_path(tmp_path):
    import pickle

    perm = np.random.default_rng(3).permutation(30)
    make(tmp_path / "r.zarr", sample_index=perm)
    reader = store_mod.SampleIndex(tmp_path / "r.zarr")
    got = pickle.loads(pickle.dumps(reader))()
    assert got.dtype == np.int64 and np.array_equal(got, perm)
    assert len(pickle.dumps(reader)) < 200
    with pytest.raises(StoreError, match="store"):
        store_mod.SampleIndex(tmp_path / "missing.zarr")()


@pytest.mark.parametrize("bad", [[0, 1, 1], [0, 1, 3], [-1, 0, 1]], ids=["repeat", "beyond", "negative"])
def test_a_sample_index_that_is_not_a_permutation_is_refused(tmp_path, bad):
    with pytest.raises(InvalidInputError, match="sample_index: expected a permutation of range"):
        make(tmp_path / "r.zarr", num_samples=3, batch_size=3, sample_index=np.array(bad))


@pytest.mark.parametrize("bad, why", [([0.5, 1.9, 2.2, 3.7], "got dtype float64"), (["0", "1", "2", "3"], "got dtype <U1"),
                                      ([0, 0, 1, 2], "got 0 more than once"), ([0, 1, 2, 9], "got 9 at position 3")],
                         ids=["floats", "strings", "repeat", "beyond"])
def test_a_bad_sample_index_names_what_is_wrong_and_leaves_an_existing_store(tmp_path, bad, why):
    make(tmp_path / "r.zarr", num_samples=4, batch_size=4)
    with pytest.raises(InvalidInputError, match=rf"sample_index: expected a permutation of range\(4\).*{why}"):
        make(tmp_path / "r.zarr", num_samples=4, batch_size=4, sample_index=bad, overwrite=True)
    assert RunStore.open(tmp_path / "r.zarr").num_samples == 4  # the old store is still there


def test_a_refused_resume_names_the_config_keys_that_differ(tmp_path):
    cfg = {"name": "t", "code": {"num_inputs": K, "block_size": 256}, "run": {"progress": True}}
    make(tmp_path / "r.zarr", config_resolved=cfg)
    now = {"name": "t", "code": {"num_inputs": K, "block_size": 512}, "run": {"progress": False}}
    with pytest.raises(StoreError, match=r"differs in code\.block_size \(256 in the store, 512 now\)\); pass") as e:
        RunStore.resume(tmp_path / "r.zarr", fingerprint="0" * 64, config_resolved=now, config_ignore=("run.progress",))
    assert "progress" not in str(e.value)


def test_a_damaged_stored_composition_is_one_line_naming_the_store(tmp_path):
    make(tmp_path / "r.zarr", sample_index=np.random.default_rng(1).permutation(30))
    st = RunStore.open(tmp_path / "r.zarr")
    st._root["inputs"]["sample"][:2] = [5, 5]
    with pytest.raises(StoreError, match=r"r\.zarr.*inputs/sample: expected a permutation of range\(30\).*got 5 more than once"):
        RunStore.open(tmp_path / "r.zarr").sample_index()
    chunk = next(p for p in (tmp_path / "r.zarr" / "inputs" / "sample").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(b"not a zstd frame")
    with pytest.raises(StoreError, match=r"r\.zarr.*its array 'inputs/sample' has a damaged chunk c/0 \(sample 0-29, "
                                         r"batches 0-3\).*checksum"):
        RunStore.open(tmp_path / "r.zarr").sample_index()
