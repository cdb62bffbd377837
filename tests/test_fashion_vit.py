"""The third image workload: the committed Fashion-MNIST Vision Transformer and its pipeline.

The accuracy and batch checks read the Fashion-MNIST test images (Debian's ``dataset-fashion-mnist``
package, the IDX files under /usr/share/datasets/fashion-mnist) and are skipped without it; the file and
config checks always run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gcc_dask.config import load_config
from gcc_dask.errors import SourceError
from gcc_dask.sources import make_source
from gcc_dask.workloads import make_workload

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "pipelines" / "models" / "fashion_vit.onnx"
META = json.loads(MODEL.with_suffix(".json").read_text())
PIPELINE = ROOT / "pipelines" / "fashion_vit.yaml"
INSTALL = "sudo apt-get install dataset-fashion-mnist"


@pytest.fixture(scope="module")
def fashion_test():
    """The 10,000 Fashion-MNIST test images, or a skip naming the package to install."""
    try:
        return make_source("fashion_mnist", split="test")
    except SourceError:
        pytest.skip(f"Fashion-MNIST not installed; run '{INSTALL}'")


@pytest.fixture(scope="module")
def session():
    return ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])


def test_committed_model_is_small_and_documented():
    assert MODEL.stat().st_size == META["onnx_bytes"] < 2_000_000
    assert hashlib.sha256(MODEL.read_bytes()).hexdigest() == META["onnx_sha256"]  # JSON matches model
    assert META["parameters"] < 1_000_000 and META["heldout_samples"] == 10_000
    assert META["train_samples"] == 60_000 and META["train_split"] == "train"
    assert META["onnx_vs_torch_max_abs_logit_diff"] < 1e-4
    assert META["batch_1_64_512_vs_512_max_abs_logit_diff"] < 1e-5
    model = onnx.load(MODEL)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    assert sum(int(np.prod(t.dims)) for t in model.graph.initializer
               if t.data_type == onnx.TensorProto.FLOAT and not t.name.startswith(("attn.", "gelu."))
               ) == META["parameters"]  # the graph carries exactly the trained weights
    assert {n.op_type for n in model.graph.node} >= {"Conv", "LayerNormalization", "Softmax", "MatMul"}


def test_input_and_output_names_and_shapes(session):
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, inp.shape[1:]) == ("input", "tensor(float)", [1, 28, 28])
    assert (out.name, out.type, out.shape[1:]) == ("logits", "tensor(float)", [10])
    assert isinstance(inp.shape[0], str) and inp.shape[0] == out.shape[0]  # a dynamic batch dimension
    assert (META["input"]["name"], META["output"]["name"]) == ("input", "logits")


def test_dynamic_batch_rows_agree(session, fashion_test):
    X, _ = fashion_test.read(0, 512)
    ref = session.run(None, {"input": X})[0]
    assert ref.shape == (512, 10) and np.isfinite(ref).all()
    single = np.concatenate([session.run(None, {"input": X[i:i + 1]})[0] for i in range(0, 512, 37)])
    np.testing.assert_allclose(single, ref[::37], rtol=0, atol=1e-5)
    blocks = np.concatenate([session.run(None, {"input": X[i:i + 64]})[0] for i in range(0, 512, 64)])
    np.testing.assert_allclose(blocks, ref, rtol=0, atol=1e-5)
    assert np.abs(ref[1:] - ref[:-1]).max() > 1.0  # the rows differ: agreement is not a constant output


def test_committed_model_reproduces_recorded_accuracy(fashion_test):
    f = make_workload("onnx", path=MODEL).load()  # the pipeline's own loader (flattened rows accepted)
    assert len(fashion_test) == META["heldout_samples"]
    correct = 0
    for start, stop in fashion_test.batches(2000):
        X, y = fashion_test.read(start, stop)
        logits = f(X.reshape(len(X), -1))
        assert logits.shape == (stop - start, 10) and np.isfinite(logits).all()
        correct += int((logits.argmax(1) == y).sum())
    acc = correct / len(fashion_test)
    assert acc == pytest.approx(META["heldout_accuracy"], abs=1e-4)
    assert acc > 0.85


def test_pipeline_yaml_validates():
    cfg = load_config(PIPELINE)
    assert (cfg.source.kind, cfg.source.split) == ("fashion_mnist", "test")
    assert Path(cfg.workload.path) == MODEL.resolve()
    assert (cfg.code.num_inputs, cfg.code.num_workers) == (8, 16)
    assert list(cfg.schemes) == ["gcc", "bacc", "replication", "uncoded"]
    # the settings of fashion_cnn.yaml but the model: the two Fashion-MNIST models compare directly
    ref = load_config(ROOT / "pipelines" / "fashion_cnn.yaml")
    assert cfg.stragglers == ref.stragglers and cfg.cutoff == ref.cutoff and cfg.gcc == ref.gcc
    assert cfg.store.path != ref.store.path
