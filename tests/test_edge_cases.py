"""Edge cases a tester found in the batch model, each pinned by a test: labels without a reference, outputs and
inputs that are not floating point, data changed in a Zarr source, heavy-tailed latencies, per-sample latency in
a short batch, symbolic links to a store, unusable store folders, unknown workload parameters, and bounds that
validation must apply per scheme."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.errors import (ClusterError, ConfigError, PoorEstimatesWarning, SourceError, StoreError,
                             WorkloadError)

MODEL = str(Path(__file__).resolve().parents[1] / "pipelines" / "models" / "lenet5_mnist.onnx")


def int_outputs(X):
    """f with integer outputs (the decoders cannot mix them)."""
    return np.asarray(X).reshape(np.shape(X)[0], -1)[:, :3].astype(np.int64)


def _cfg(path, **sections):
    cfg = {
        "name": "edge",
        "source": {"kind": "synthetic", "num_samples": 40, "shape": [5], "seed": 1},
        "workload": {"kind": "analytic", "name": "smooth", "params": {"out_dim": 3}},
        "code": {"num_inputs": 4, "num_workers": 8, "block_size": 2},
        "schemes": ["gcc", "uncoded"],
        "stragglers": {"model": "shifted_exponential", "shift": "5ms", "scale": "5ms", "seed": 2},
        "cutoff": {"stragglers": 2, "deadline": "1s", "on_shortfall": "decode"},
        "store": {"path": str(path)},
        "run": {"progress": False},
    }
    cfg.update(sections)
    return cfg


def test_labels_are_written_without_a_reference(client, tmp_path):
    run = gd.run_pipeline("pipelines/smoke.yaml", client=client, out=tmp_path / "noref.zarr",
                          overrides=["run.reference=false", "store.overwrite=false"])
    labels = zarr.open_group(str(run.path), mode="r")["inputs/labels"][:]
    assert (labels >= 0).all()
    assert run.summary.loc["uncoded", "accuracy"] > 0.9 and np.isnan(run.summary.loc["gcc", "rel_acc"])


def test_integer_outputs_of_f_are_refused_before_anything_runs(client, tmp_path):
    cfg = _cfg(tmp_path / "int.zarr", workload={"kind": "callable", "name": "test_edge_cases:int_outputs"})
    with pytest.raises(WorkloadError, match="workload: got int64 outputs from f; expected float32 or float64"):
        gd.run_pipeline(cfg, client=client)
    assert not (tmp_path / "int.zarr").exists()


def test_integer_data_is_refused_before_anything_runs_and_runs_with_a_cast(client, tmp_path):
    np.save(tmp_path / "u8.npy", (np.arange(40 * 5) % 251).astype(np.uint8).reshape(40, 5))
    cfg = _cfg(tmp_path / "u8.zarr", source={"kind": "npy", "path": str(tmp_path / "u8.npy")})
    with pytest.raises(SourceError, match="got uint8 samples in .*; expected real floating data .* set source.dtype: float32"):
        gd.run_pipeline(cfg, client=client)
    assert not (tmp_path / "u8.zarr").exists()
    cfg["source"]["dtype"] = "float32"
    assert gd.run_pipeline(cfg, client=client).status == "complete"


def test_changed_zarr_data_is_refused_on_resume(client, tmp_path):
    data = zarr.create_array(store=str(tmp_path / "data.zarr"), shape=(40, 5), chunks=(8, 5), dtype="float32",
                             compressors=None)
    data[:] = np.random.default_rng(0).random((40, 5)).astype(np.float32)
    cfg = _cfg(tmp_path / "run.zarr", source={"kind": "zarr", "path": str(tmp_path / "data.zarr")},
               run={"progress": False, "limit_batches": 2})
    gd.run_pipeline(cfg, client=client)
    data[16:24] = -data[16:24]  # same sizes, other values
    cfg["run"] = {"progress": False}
    with pytest.raises(StoreError, match="other model or data files"):
        gd.run_pipeline(cfg, client=client)


def test_rewritten_zarr_labels_are_refused_on_resume_and_older_stores_resume(client, tmp_path):
    """A reviewer's find: a Zarr source's labels array was not in the inputs digest (``files()`` lists the data
    array only), so a resume after the labels were rewritten in place mixed the old labels with the new ones.
    Its folder now counts (``label_files``): the resume is refused; a store made before it counted (no
    ``label_files`` attribute, its digest without the labels) resumes as before."""
    from gcc_dask.pipeline_resume import _inputs_digest
    from gcc_dask.sources import make_source
    from gcc_dask.workloads import make_workload

    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("x", data=np.random.default_rng(0).random((40, 5)).astype(np.float32), chunks=(8, 5))
    labels = root.create_array("y", data=np.arange(40) % 3, chunks=(8,))
    source = {"kind": "zarr", "path": str(tmp_path / "d.zarr"), "array": "x", "labels": "y"}
    cfg = _cfg(tmp_path / "run.zarr", source=source, run={"progress": False, "limit_batches": 1})
    gd.run_pipeline(cfg, client=client)
    store = zarr.open_group(str(tmp_path / "run.zarr"), mode="r+")
    assert store.attrs["label_files"] == [str(tmp_path / "d.zarr" / "y")]
    made_with = dict(store.attrs)
    old = {k: v for k, v in made_with.items() if k != "label_files"}  # as a store made before the labels counted
    old["inputs_digest"] = _inputs_digest(make_source(**source), make_workload("analytic", name="smooth", out_dim=3),
                                          list(made_with["model_sources"]), labels=False)
    assert old["inputs_digest"] != made_with["inputs_digest"]
    store.attrs.clear()
    store.attrs.update(old)
    cfg["run"] = {"progress": False, "limit_batches": 2}
    gd.run_pipeline(cfg, client=client)  # resumed
    store.attrs.clear()
    store.attrs.update({**made_with, "status": "incomplete"})
    labels[:] = (np.arange(40) + 1) % 3  # rewritten in place: same shape, same chunks
    cfg["run"] = {"progress": False}
    with pytest.raises(StoreError, match="other model or data files"):
        gd.run_pipeline(cfg, client=client)


def test_heavy_tails_are_bounded():
    from gcc_dask.stragglers import Pareto

    with pytest.raises(ConfigError, match="alpha must be at least 0.5"):
        Pareto(scale=0.001, alpha=0.05)
    lat = Pareto(scale=1000.0, alpha=0.5, hang_prob=0.5, hang_delay="1h").latencies(0, 0, 4096)
    assert lat.max() <= 86_400.0
    with pytest.raises(ConfigError, match=r"stragglers.alpha: got 0.1"):
        load_config("pipelines/smoke.yaml", ["stragglers.model=pareto", "stragglers.alpha=0.1"])


def test_per_sample_latency_counts_the_groups_of_the_batch(client, tmp_path):
    """unit: sample charges each shard for the groups its batch really has: a block_size far above the
    dataset does not inflate the latency of its one short batch."""
    cfg = _cfg(tmp_path / "unit.zarr", code={"num_inputs": 4, "num_workers": 8, "block_size": 1000},
               stragglers={"model": "shifted_exponential", "shift": "10ms", "scale": "1ms", "seed": 2,
                           "unit": "sample"})
    run = gd.run_pipeline(cfg, client=client)
    lat = zarr.open_group(str(run.path), mode="r")["gcc/latency_s"][:]
    # one batch of 40 samples = 10 groups: 10 x (10 ms + Exp(1 ms)), not 1000 x
    assert 0.1 <= np.nanmin(lat) and np.nanmax(lat) < 1.0, lat


def test_a_symbolic_link_to_a_store_is_the_same_store(client, tmp_path):
    from gcc_dask.store import StoreLock

    real, alias = tmp_path / "real.zarr", tmp_path / "alias.zarr"
    gd.run_pipeline(_cfg(real), client=client)
    os.symlink(real, alias)
    with StoreLock(real):
        with pytest.raises(StoreError, match="another gcc-dask run is writing"):
            gd.run_pipeline(_cfg(alias), client=client)
    again = gd.run_pipeline(_cfg(alias, store={"path": str(alias), "overwrite": True}), client=client)
    assert again.status == "complete" and alias.is_symlink() and (real / "zarr.json").exists()


@pytest.mark.parametrize("where", ["/dev/null/run.zarr", "/proc/run.zarr"], ids=["under-a-file", "read-only"])
def test_a_store_folder_without_room_for_the_lock_is_one_line(client, where):
    with pytest.raises(StoreError, match="cannot create its lock file"):
        gd.run_pipeline(_cfg(where), client=client)


def test_unknown_workload_parameters_are_one_config_line():
    from gcc_dask.workloads import make_workload

    with pytest.raises(ConfigError, match="workload.params: got unknown key 'bogus' for workload kind 'analytic'"):
        make_workload("analytic", name="smooth", out_dim=3, bogus=1)


@pytest.mark.parametrize(("overrides", "match"), [
    (["stragglers.model=shifted_exponential", "stragglers.slow_workers=9"],
     r"stragglers.slow_workers: got 9; expected an integer in \[0, 8\], the N of scheme 'uncoded'"),
    (["code.num_workers=64", "replication.copies=2", "cutoff.stragglers=16"],
     "cutoff.stragglers: got 16; expected S < 16, the N of scheme 'replication'"),
    (["source.kind=synthetic", "source.num_samples=1000000000000", "source.shape=[2]", "source.split=null"],
     "source.num_samples: got 1000000000000"),
], ids=["slow-workers-above-the-smallest-N", "S-leaves-replication-nothing", "absurd-sample-count"])
def test_bounds_per_scheme_are_checked_up_front(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("pipelines/smoke.yaml", overrides)


def test_a_local_cluster_of_hundreds_of_processes_is_refused():
    from gcc_dask.runtime.cluster import ClusterSpec, connect

    with pytest.raises(ClusterError, match="cluster.n_workers: got 300"):
        with connect(ClusterSpec(n_workers=300, processes=True)):
            pass


def test_batches_failed_by_the_cutoff_itself_are_not_rerun(client, tmp_path):
    """on_shortfall: fail is an outcome of the cutoff (its time is recorded), not an accident: a rerun keeps
    those batches (a failure of the environment, with no cutoff recorded, is retried)."""
    cfg = _cfg(tmp_path / "fail.zarr", cutoff={"stragglers": 2, "deadline": "1ms", "on_shortfall": "fail"},
               stragglers={"model": "shifted_exponential", "shift": "50ms", "scale": "5ms", "seed": 2})
    first = gd.run_pipeline(cfg, client=client)
    with pytest.warns(PoorEstimatesWarning, match=r"^poor estimates: gcc: RelAcc 0 < 0\.95"):  # no batch decoded
        assert first.summary.loc["gcc", "failed"] == 5
    said = []
    gd.run_pipeline(cfg, client=client, echo=said.append)
    assert any("5 of 5 batches already done" in line for line in said), said
