"""The second real dataset: the committed Fashion-MNIST CNN, its pipeline and its sweep.

The accuracy check needs Debian's ``dataset-fashion-mnist`` package (the IDX files under
/usr/share/datasets/fashion-mnist) and is skipped without it; the file and config checks always run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from gcc_dask.config import load_config
from gcc_dask.errors import SourceError
from gcc_dask.sources import make_source
from gcc_dask.sweep_config import load_sweep_config
from gcc_dask.workloads import make_workload

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "pipelines" / "models" / "fashion_cnn.onnx"
META = json.loads(MODEL.with_suffix(".json").read_text())
PIPELINE = ROOT / "pipelines" / "fashion_cnn.yaml"
SWEEP = ROOT / "pipelines" / "fashion_relacc.yaml"
INSTALL = "sudo apt-get install dataset-fashion-mnist"


@pytest.fixture(scope="module")
def fashion_test():
    """The 10,000 Fashion-MNIST test images, or a skip naming the package to install."""
    try:
        return make_source("fashion_mnist", split="test")
    except SourceError:
        pytest.skip(f"Fashion-MNIST not installed; run '{INSTALL}'")


def test_committed_model_is_small_and_documented():
    assert MODEL.stat().st_size == META["onnx_bytes"] < 400_000
    assert hashlib.sha256(MODEL.read_bytes()).hexdigest() == META["onnx_sha256"]  # JSON matches model
    assert META["parameters"] <= 100_000 and META["heldout_samples"] == 10_000
    assert META["onnx_vs_torch_max_abs_logit_diff"] < 1e-4
    assert {"seed", "onnx_opset", "heldout_accuracy", "train_samples"} <= set(META)


def test_committed_model_reproduces_recorded_accuracy(fashion_test):
    f = make_workload("onnx", path=MODEL).load()
    assert len(fashion_test) == META["heldout_samples"]
    correct = 0
    for start, stop in fashion_test.batches(1000):
        X, y = fashion_test.read(start, stop)
        logits = f(X)
        assert logits.shape == (stop - start, 10) and np.isfinite(logits).all()
        correct += int((logits.argmax(1) == y).sum())
    acc = correct / len(fashion_test)
    assert acc == pytest.approx(META["heldout_accuracy"], abs=5e-4)
    assert acc > 0.85


def test_pipeline_yaml_validates():
    cfg = load_config(PIPELINE)
    assert (cfg.source.kind, cfg.source.split) == ("fashion_mnist", "test")
    assert Path(cfg.workload.path) == MODEL.resolve()
    assert (cfg.code.num_inputs, cfg.code.num_workers) == (8, 16)
    assert list(cfg.schemes) == ["gcc", "bacc", "replication", "uncoded"]
    # the straggler and cutoff settings are mnist_lenet.yaml's, so the two datasets compare directly
    ref = load_config(ROOT / "pipelines" / "mnist_lenet.yaml")
    assert cfg.stragglers == ref.stragglers and cfg.cutoff == ref.cutoff


def test_sweep_yaml_validates():
    cfg = load_sweep_config(SWEEP)
    fn = cfg.function
    assert (fn.kind, fn.source.kind, fn.source.split) == ("dnn", "fashion_mnist", "test")
    assert Path(fn.workload.path) == MODEL.resolve()
