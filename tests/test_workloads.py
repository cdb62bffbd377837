"""Workloads: the bundled LeNet-5 ONNX model, analytic maps, callables, TorchScript; pickling and errors."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from gcc_dask.errors import ConfigError, WorkloadError
from gcc_dask.sources import make_source
from gcc_dask.workloads import list_workloads, make_workload, resolve_model_path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "pipelines" / "models" / "lenet5_mnist.onnx"


@pytest.fixture(scope="module")
def mnist32():
    return make_source("mnist", split="test").read(0, 32)


@pytest.fixture(scope="module")
def lenet():
    return make_workload("onnx", path=MODEL)


# -------------------------------------------------------------------------------------------- ONNX
def test_bundled_model_is_small_and_documented():
    assert 200_000 < MODEL.stat().st_size < 300_000
    meta = json.loads(MODEL.with_suffix(".json").read_text())
    assert meta["heldout_accuracy"] >= 0.95 and meta["train_samples"] == 4000
    assert {"seed", "onnx_opset"} <= set(meta)


def test_onnx_lenet_classifies_mnist(lenet, mnist32):
    X, y = mnist32
    logits = lenet.load()(X)
    assert logits.shape == (32, 10) and logits.dtype == np.float32
    assert (logits.argmax(axis=1) == y).mean() > 0.9
    # flattened samples are reshaped to the model's declared (1, 28, 28); float64 is cast
    assert np.allclose(lenet(X.reshape(32, 784).astype(np.float64)), logits, atol=1e-5)
    assert lenet.output_shape((1, 28, 28)) == (10,)


def test_onnx_workload_pickles_without_session(lenet, mnist32):
    lenet(mnist32[0][:2])  # loads and caches a session in this process
    blob = pickle.dumps(lenet)
    assert len(blob) < 1000 and b"InferenceSession" not in blob
    clone = pickle.loads(blob)
    assert np.allclose(clone(mnist32[0][:4]), lenet(mnist32[0][:4]))


def test_onnx_bad_input_shape_names_shapes(lenet):
    with pytest.raises(WorkloadError, match=r"\(2, 3, 28, 28\).*\(n, 1, 28, 28\)"):
        lenet(np.zeros((2, 3, 28, 28), np.float32))
    with pytest.raises(WorkloadError, match="784 values"):
        lenet.output_shape((10,))


def _fixed_batch_model(tmp_path, batch: int) -> str:
    """The bundled LeNet-5 with its batch dimension fixed to `batch` (as some exporters write it)."""
    import onnx

    model = onnx.load(str(MODEL))
    for value in (*model.graph.input, *model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_value = batch
    path = tmp_path / f"lenet_batch{batch}.onnx"
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_onnx_fixed_batch_dimension_runs_in_slices(tmp_path, lenet, mnist32, batch):
    """A model exported with a fixed batch of b runs any n samples in slices of b (the last one padded):
    the outputs equal the dynamic model's, row for row, for n below, at, and above b."""
    x = np.concatenate([mnist32[0]] * 3)  # 96 digits
    dynamic = lenet.load()
    fixed = make_workload("onnx", path=_fixed_batch_model(tmp_path, batch)).load()
    assert fixed.fixed_batch == batch and dynamic.fixed_batch is None
    for n in sorted({1, 2, batch, batch + 1, 96}):
        want = dynamic(x[:n])
        got = fixed(x[:n])
        assert got.shape == want.shape == (n, 10)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_onnx_bad_path(tmp_path):
    with pytest.raises(WorkloadError, match="no_such_model.onnx"):
        make_workload("onnx", path="no_such_model.onnx", base_dir=tmp_path)
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    wl = make_workload("onnx", path=bad)
    with pytest.raises(WorkloadError, match=r"^workload\.path: got .*broken\.onnx', which ONNX Runtime cannot "
                                            r"load \([^\n]*\); expected an ONNX model file$"):
        wl.load()
    bad.unlink()  # gone by the time a worker loads it
    with pytest.raises(WorkloadError, match=r"^workload\.path: got .*broken\.onnx.*; expected a model file reachable from the driver and every Dask worker"):
        wl.load()


def _session():
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(("kind", "path", "match"), [
    ("onnx", _session, r"^workload\.path: got <onnxruntime\..*\.\.\.; expected a model file path \(str or "
                       r"os\.PathLike\), not 'InferenceSession': the workers load the model from the file themselves$"),
    ("onnx", lambda: str(MODEL).encode(), r"^workload\.path: got b'.*; expected a model file path \(str or "
                                          r"os\.PathLike\), not 'bytes'"),
    ("torch", lambda: object(), r"^workload\.path: got <object object at .*>; expected a model file path \(str or "
                                r"os\.PathLike\), not 'object'"),
], ids=["onnx-session", "onnx-bytes", "torch-object"])
def test_model_path_must_be_a_path(kind, path, match):
    with pytest.raises(ConfigError, match=match):
        make_workload(kind, path=path())


def test_resolve_model_path(tmp_path, monkeypatch):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "models").mkdir()
    target = tmp_path / "models" / "m.onnx"
    target.write_bytes(b"x")
    monkeypatch.chdir(tmp_path / "pipelines")
    # not under the cwd nor base_dir itself, but under base_dir's parent
    assert resolve_model_path("models/m.onnx", base_dir=tmp_path / "pipelines") == target
    assert resolve_model_path(target) == target
    assert resolve_model_path("../models/m.onnx") == target
    with pytest.raises(WorkloadError, match="tried"):
        resolve_model_path("models/m.onnx")


# ---------------------------------------------------------------------------------------- analytic
def test_analytic_values():
    x = np.linspace(-3, 3, 12).reshape(3, 4)
    assert np.allclose(make_workload("analytic", name="xsinx")(x), x * np.sin(x))
    coeffs = [1.0, -2.0, 0.5, 3.0]
    poly = make_workload("analytic", name="polynomial", coeffs=coeffs)
    assert np.allclose(poly(x), np.polynomial.polynomial.polyval(x, coeffs))
    assert poly.output_shape((4,)) == (4,)
    x32 = x.astype(np.float32)
    assert make_workload("analytic", name="xsinx")(x32).dtype == np.float32
    assert make_workload("analytic", name="xsinx")(np.arange(3)).dtype == np.float64


def test_analytic_smooth_map():
    wl = make_workload("analytic", name="smooth", out_dim=5, hidden=16, seed=3)
    X = np.random.default_rng(0).random((6, 2, 4))
    Y = wl(X)
    assert Y.shape == (6, 5) and wl.output_shape((2, 4)) == (5,)
    # a fixed, seeded map: reproducible, per-sample, and smooth (small input change, small output change)
    again = pickle.loads(pickle.dumps(wl))
    assert np.array_equal(again(X), Y) and np.allclose(wl(X[2:3]), Y[2:3])
    assert np.abs(wl(X + 1e-6) - Y).max() < 1e-5
    assert not np.allclose(make_workload("analytic", name="smooth", out_dim=5, hidden=16, seed=4)(X), Y)


def test_analytic_runs_on_array_api_strict():
    xps = pytest.importorskip("array_api_strict")
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    for params in [{"name": "xsinx"}, {"name": "polynomial", "coeffs": [1, 2]}, {"name": "smooth"}]:
        wl = make_workload("analytic", **params)
        out = wl(xps.asarray(x))
        assert type(out).__module__.startswith("array_api_strict")
        assert np.allclose(np.asarray(out), wl(x))


@pytest.mark.parametrize("params, msg", [
    ({"name": "cosine"}, "workload.name"),
    ({"name": "xsinx", "coeffs": [1]}, "only valid with name='polynomial'"),
    ({"name": "polynomial", "coeffs": []}, "at least one"),
    ({"name": "smooth", "out_dim": 0}, "workload.out_dim"),
])
def test_analytic_bad_params(params, msg):
    with pytest.raises(ConfigError, match=msg):
        make_workload("analytic", **params)


# ---------------------------------------------------------------------------------------- callable
def test_callable_import_path_and_kwargs():
    wl = make_workload("callable", function="numpy:tanh")
    x = np.linspace(-2, 2, 5)
    assert np.allclose(wl(x), np.tanh(x)) and wl.output_shape((3,)) == (3,)
    clip = make_workload("callable", function="numpy:clip", kwargs={"a_min": 0.0, "a_max": 1.0})
    assert np.allclose(clip(x), np.clip(x, 0, 1))
    fac = make_workload("callable", function="numpy:vectorize", kwargs={"pyfunc": abs}, factory=True)
    assert np.allclose(fac(x), np.abs(x))
    for w in (wl, clip, fac):
        assert len(pickle.dumps(w)) < 500


def test_make_workload_takes_pipeline_keys(tmp_path):
    # the pipeline passes base_dir to every kind, the YAML's `name` for callables, and None for unset keys
    wl = make_workload("callable", name="numpy:tanh", base_dir=tmp_path, path=None)
    assert np.allclose(wl(np.ones(2)), np.tanh(1.0)) and wl.params["function"] == "numpy:tanh"
    an = make_workload("analytic", name="xsinx", base_dir=tmp_path, coeffs=None)
    assert an.output_shape((3,)) == (3,)
    with pytest.raises(ConfigError, match="exactly one"):
        make_workload("callable", name="numpy:tanh", function="numpy:sin")


def test_callable_object_and_errors():
    wl = make_workload("callable", function=np.sin)
    assert np.allclose(pickle.loads(pickle.dumps(wl))(np.ones(2)), np.sin(1.0))
    with pytest.raises(ConfigError, match="package.module:function"):
        make_workload("callable", function="numpy.tanh")
    with pytest.raises(WorkloadError, match="no_such_module_xyz"):
        make_workload("callable", function="no_such_module_xyz:f")
    with pytest.raises(WorkloadError, match="no attribute 'nope'"):
        make_workload("callable", function="numpy:nope")
    with pytest.raises(WorkloadError, match="not callable"):
        make_workload("callable", function="numpy:pi")


@pytest.mark.parametrize("spec, match", [
    ("no_such_module_xyz:f", r"^cannot import module 'no_such_module_xyz' for workload.name='no_such_module_xyz:f'"),
    ("numpy:nope", r"^module 'numpy' has no attribute 'nope' \(workload.name='numpy:nope'\)$"),
    ("numpy:pi", r"^workload.name='numpy:pi' is not callable$"),
], ids=["no-module", "no-attribute", "not-callable"])
def test_an_import_path_from_yaml_is_named_by_its_yaml_key(spec, match):
    """The YAML key of an import path is workload.name: its errors named workload.function, a key the YAML
    cannot have."""
    from gcc_dask.config import load_config
    from gcc_dask.inputs import build_source_and_workload

    cfg = load_config({"source": {"kind": "synthetic", "num_samples": 8, "shape": [2]},
                       "workload": {"kind": "callable", "name": spec}, "code": {"num_inputs": 2},
                       "schemes": ["uncoded"]})
    with pytest.raises(WorkloadError, match=match) as e:
        build_source_and_workload(cfg)
    assert "workload.function" not in str(e.value)


def _module_beside(folder: Path, name: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text("import numpy as np\n\ndef g(x):\n    return np.tanh(x) + 1\n")
    return f"{name}:g"


@pytest.mark.parametrize("where", ["yaml-folder", "cwd"])
def test_an_import_path_finds_its_module_beside_the_yaml_or_in_the_cwd(tmp_path, monkeypatch, where):
    """A YAML pipeline whose f is 'module:function' in a module beside the YAML file (or in the working
    directory, which the gcc-dask script does not put on sys.path) could not be imported: both folders are
    tried, each on sys.path only while that import runs."""
    import sys
    import uuid

    from gcc_dask.config import load_config
    from gcc_dask.inputs import build_source_and_workload

    name = f"beside_{where.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    spec = _module_beside(tmp_path / ("jobs" if where == "yaml-folder" else "."), name)
    (tmp_path / "jobs").mkdir(exist_ok=True)
    yaml = tmp_path / "jobs" / "p.yaml"
    yaml.write_text("source: {kind: synthetic, num_samples: 8, shape: [2]}\n"
                    f"workload: {{kind: callable, name: '{spec}'}}\n"
                    "code: {num_inputs: 2}\nschemes: [uncoded]\n")
    path_before = list(sys.path)
    try:
        _, wl = build_source_and_workload(load_config(yaml))
        x = np.linspace(-1, 1, 4)
        np.testing.assert_allclose(wl(x), np.tanh(x) + 1)
        sys.modules.pop(name)  # a worker process that has not imported it: looks in the same folders
        np.testing.assert_allclose(pickle.loads(pickle.dumps(wl)).load()(x), np.tanh(x) + 1)
        assert sys.path == path_before  # only for that import
    finally:
        sys.modules.pop(name, None)
    monkeypatch.chdir(tmp_path / "jobs")  # neither folder holds it: one line naming the folders looked in
    other = tmp_path / "elsewhere" / "p.yaml"
    other.parent.mkdir()
    other.write_text(yaml.read_text().replace(name, name + "_gone"))
    with pytest.raises(WorkloadError, match=rf"^cannot import module '{name}_gone' for workload.name=.*\(looked on "
                                            rf"sys.path, then in {re.escape(str(other.parent))}, "
                                            rf"{re.escape(str(tmp_path / 'jobs'))}\)"):
        build_source_and_workload(load_config(other))


def test_unknown_kind():
    assert {"onnx", "analytic", "callable", "torch"} <= set(list_workloads())
    with pytest.raises(ConfigError, match="workload.kind: got 'tensorflow'"):
        make_workload("tensorflow")


# ------------------------------------------------------------------------------------------- torch
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torchscript_workload(tmp_path, mnist32):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    torch.jit.script(net).save(str(tmp_path / "net.pt"))
    wl = make_workload("torch", path="net.pt", base_dir=tmp_path, input_shape=(1, 28, 28))
    X = mnist32[0][:8]
    out = wl(X.reshape(8, 784))
    assert isinstance(out, np.ndarray) and out.shape == (8, 10) and out.dtype == np.float32
    with torch.no_grad():
        assert np.allclose(out, net(torch.from_numpy(X)).numpy(), atol=1e-6)
    assert wl.output_shape((784,)) == (10,)
    blob = pickle.dumps(wl)
    assert len(blob) < 1000 and np.allclose(pickle.loads(blob)(X), out)
    with pytest.raises(WorkloadError, match=r"\(8, 5\)"):
        wl(np.zeros((8, 5), np.float32))
    # a factory import path instead of a file: torch.nn.Identity(), built once per load()
    ident = make_workload("torch", name="torch.nn:Identity", base_dir=tmp_path)
    assert np.array_equal(ident(X), X) and len(pickle.dumps(ident)) < 1000
    with pytest.raises(WorkloadError, match="expected a torch.nn.Module"):
        make_workload("torch", name="numpy:zeros", kwargs={"shape": 2}).load()
    with pytest.raises(ConfigError, match="exactly one"):
        make_workload("torch")


def test_a_worker_reuses_a_loaded_model_until_its_file_changes(tmp_path, mnist32, monkeypatch):
    import os
    import shutil

    from gcc_dask.workloads import base as wl  # (the module that holds the cache)

    monkeypatch.setattr(wl, "_LOADED", type(wl._LOADED)())
    model = tmp_path / "lenet.onnx"
    shutil.copy(MODEL, model)
    first = wl.load_workload(make_workload("onnx", path=model))
    # a later run's plugin carries an equal description: it gets the loaded f, not a fresh session
    assert wl.load_workload(make_workload("onnx", path=model)) is first
    # other parameters, or the same file rewritten, are another model
    assert wl.load_workload(make_workload("onnx", path=model, intra_op_num_threads=2)) is not first
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = wl.load_workload(make_workload("onnx", path=model))
    assert again is not first
    x = mnist32[0][:4]
    np.testing.assert_array_equal(again(x), first(x))
    # at most LOADED_MAX are kept, the least recently used dropped first
    for threads in range(2, 2 + wl.LOADED_MAX):
        wl.load_workload(make_workload("onnx", path=model, intra_op_num_threads=threads))
    assert len(wl._LOADED) == wl.LOADED_MAX
    assert wl.load_workload(make_workload("onnx", path=model)) is not again


def test_workloads_without_files_are_loaded_by_every_run():
    from gcc_dask.workloads import base as wl  # (the module that holds the cache)

    w = make_workload("analytic", name="smooth", out_dim=2)
    assert wl.load_workload(w) is not wl.load_workload(w)


def test_a_model_replaced_with_its_old_size_and_time_is_loaded_anew(tmp_path, monkeypatch):
    import os
    import shutil

    from gcc_dask.workloads import base as wl  # (the module that holds the cache)

    monkeypatch.setattr(wl, "_LOADED", type(wl._LOADED)())
    model, other = tmp_path / "m.onnx", tmp_path / "other.onnx"
    shutil.copy(MODEL, model)
    shutil.copy(MODEL, other)
    first = wl.load_workload(make_workload("onnx", path=model))
    st = model.stat()
    os.replace(other, model)  # another file in its place (cp -p, rsync -a): same size, old times
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert wl.load_workload(make_workload("onnx", path=model)) is not first


def test_the_cache_tells_workload_classes_apart(tmp_path, monkeypatch):
    from gcc_dask.workloads import base as wl  # (the module that holds the cache)
    from gcc_dask.workloads import OnnxWorkload

    class Probabilities(OnnxWorkload):  # the same params as its parent, another f
        def load(self):
            f = super().load()
            return lambda X: np.exp(f(X))

    class Duck:  # any object with load() and files(), without params: never kept
        def __init__(self, scale):
            self.scale = scale

        def files(self):
            return [str(MODEL)]

        def load(self):
            return lambda X: self.scale * np.ones(1)

    monkeypatch.setattr(wl, "_LOADED", type(wl._LOADED)())
    plain = wl.load_workload(make_workload("onnx", path=MODEL))
    assert wl.load_workload(Probabilities(MODEL)) is not plain
    assert wl.load_workload(Duck(2))(None)[0] == 2 and wl.load_workload(Duck(3))(None)[0] == 3


# ------------------------------------------------------------------------------ ONNX external weights
def _external_model(folder: Path, scale: float) -> Path:
    """A (n, 6) -> (n, 3) MatMul whose weights live in ``model.onnx.data`` (ONNX external data)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(18, dtype=np.float32).reshape(6, 3) / 10 * scale
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    return folder / "model.onnx"


def _rewrite_weights(folder: Path, scale: float) -> None:
    """New weights written into ``model.onnx.data`` in place, ``model.onnx`` untouched (a retrained export)."""
    w = np.arange(18, dtype=np.float32).reshape(6, 3) / 10 * scale
    with open(folder / "model.onnx.data", "r+b") as fh:
        fh.write(w.tobytes())


def test_onnx_external_weights_are_among_the_model_files_and_reloaded_when_they_change(tmp_path):
    """The weights file was in neither the run's inputs digest nor the model cache key: a changed ``.data``
    file was missed by a resume, and a process that had loaded the model kept the old weights."""
    from gcc_dask._digest import files_digest
    from gcc_dask.workloads import load_workload

    path = _external_model(tmp_path, 1.0)
    wl = make_workload("onnx", path=path)
    assert wl.files() == [str(path), str(tmp_path / "model.onnx.data")]
    x = np.ones((2, 6), np.float32)
    before = files_digest(wl.files())
    np.testing.assert_allclose(load_workload(wl)(x), x @ (np.arange(18).reshape(6, 3) / 10), rtol=1e-6)
    _rewrite_weights(tmp_path, 30.0)
    assert files_digest(wl.files()) != before
    np.testing.assert_allclose(load_workload(wl)(x), x @ (np.arange(18).reshape(6, 3) / 10 * 30), rtol=1e-6)
    assert make_workload("onnx", path=MODEL).files() == [str(MODEL)]  # weights inside the model: just the model


def test_onnx_missing_external_weights_are_one_line(tmp_path):
    path = _external_model(tmp_path, 1.0)
    (tmp_path / "model.onnx.data").unlink()
    with pytest.raises(WorkloadError, match=r"keeps the weights of tensor 'w' in the external data file "
                                            r"'model.onnx.data', which does not exist at"):
        make_workload("onnx", path=path).files()
