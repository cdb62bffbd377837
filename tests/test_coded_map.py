"""coded_map: your own f on your own X (NumPy, dask, Zarr, DataArray) on a LocalCluster of processes.

The runs inject seeded stragglers on the virtual clock, so which results each batch keeps depends on the seed
alone and two runs of the same f, X and config give the same bits: that is how the estimates of coded_map are
compared with run_pipeline's, and with each other across input types.
"""

from __future__ import annotations

import os
import re
import threading
import uuid

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.errors import ConfigError, WorkloadError

RNG = np.random.default_rng(7)
X = RNG.uniform(-1, 1, size=(600, 4)).astype(np.float32)
W = RNG.normal(size=(4, 3)).astype(np.float32)
# small batches (K·B = 4·16 = 64 rows, 10 batches), S = 2 of N = 8 stragglers injected on the virtual clock
CONFIG = {
    "code": {"num_inputs": 4, "num_workers": 8, "block_size": 16},
    "cutoff": {"stragglers": 2},
    "stragglers": {"model": "shifted_exponential", "shift": 0.001, "scale": 0.002, "seed": 3},
}


def f(x):
    """A smooth f: R^4 -> R^3, importable by the workers (they run this module's code by reference)."""
    return np.tanh(x @ W)


def marking(block, folder):
    """Leave a file named after this process in `folder` (an instrumented dask block), then return the block."""
    if block.size:
        with open(os.path.join(folder, f"{os.getpid()}-{uuid.uuid4().hex[:8]}"), "w"):
            pass
    return block


def test_lambda_on_numpy_matches_run_pipeline(process_client, tmp_path):
    scale = np.float32(0.5)
    g = lambda x: np.tanh(x @ W) * scale  # noqa: E731 - a lambda closing over a local, pickled by value
    res = gd.coded_map(g, X, client=process_client, out=tmp_path / "cm.zarr", **CONFIG)
    est = res.estimates
    assert isinstance(est, np.ndarray) and est.shape == (600, 3) and est.dtype == np.float32
    truth = g(X)
    assert np.abs(est - truth).mean() < 0.01 and np.abs(est - truth).max() < 0.2
    assert res.summary.loc["gcc", "mean_received"] == 6.0  # N - S = 8 - 2 results per batch

    import xarray as xr

    ran = gd.run_pipeline({"source": {"kind": "array", "array": X},
                           "workload": {"kind": "callable", "function": g},
                           "schemes": ["gcc"], "run": {"reference": False, "progress": False},
                           "cluster": {"gpu": False}, **CONFIG},
                          client=process_client, out=tmp_path / "rp.zarr")
    stored = xr.open_zarr(ran.path, group="gcc").sortby("sample")["decoded"].values  # the README's reading
    np.testing.assert_array_equal(est, stored)
    ds = res.to_xarray()
    assert ds["gcc"].dims == ("sample", "output") and ds.attrs["store"] == res.store
    np.testing.assert_array_equal(ds["gcc"].values, est)


def test_dask_array_is_read_on_the_workers_only(process_client, tmp_path):
    import dask.array as da

    marks = tmp_path / "marks"
    marks.mkdir()
    dX = da.from_array(X, chunks=150).map_blocks(marking, str(marks), dtype=X.dtype, meta=np.empty((0, 4), X.dtype))
    res = gd.coded_map(f, dX, client=process_client, out=tmp_path / "dask.zarr", **CONFIG)
    pids = {name.split("-")[0] for name in os.listdir(marks)}
    assert pids and str(os.getpid()) not in pids  # every block was computed in a worker process
    est = res.estimates
    assert isinstance(est, da.Array) and est.chunks == ((150,) * 4, (3,))  # X's chunks along the samples
    values = est.compute(scheduler="sync")
    plain = gd.coded_map(f, X, client=process_client, out=tmp_path / "numpy.zarr", **CONFIG).estimates
    np.testing.assert_array_equal(values, plain)  # the same rows decoded from the same results


def test_zarr_array_and_dataarray(process_client, tmp_path):
    import dask.array as da
    import xarray as xr
    import zarr

    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=X.shape, chunks=(200, 4), dtype="float32")
    z[:] = X
    res = gd.coded_map(f, z, client=process_client, out=tmp_path / "z.zarr", **CONFIG)
    assert res.run.config.source.kind == "zarr"  # the workers read the files themselves
    assert isinstance(res.estimates, da.Array) and res.estimates.chunks[0] == (200, 200, 200)
    plain = gd.coded_map(f, X, client=process_client, out=tmp_path / "numpy.zarr", **CONFIG).estimates
    np.testing.assert_array_equal(res.estimates.compute(scheduler="sync"), plain)

    times = np.arange(600) * 0.25
    arr = xr.DataArray(X, dims=("time", "feature"), coords={"time": times})
    res = gd.coded_map(f, arr, client=process_client, out=tmp_path / "numpy.zarr", **CONFIG)  # resumed
    assert res.run.wall_s == 0.0  # the same f, X and config: the store was complete, nothing ran again
    ds = res.to_xarray()
    assert ds["gcc"].dims == ("time", "output")
    np.testing.assert_array_equal(ds["time"].values, times)
    np.testing.assert_array_equal(ds["gcc"].values, plain)


def test_sklearn_predict_proba(process_client, tmp_path):
    from sklearn.linear_model import LogisticRegression

    y = (X @ W).argmax(axis=1)
    clf = LogisticRegression(max_iter=1000).fit(X, y)
    res = gd.coded_map(clf.predict_proba, X, client=process_client, out=tmp_path / "sk.zarr",
                       run={"reference": True}, **CONFIG)
    truth = clf.predict_proba(X)
    assert res.estimates.shape == truth.shape
    assert np.abs(res.estimates - truth).mean() < 0.01
    assert np.mean(res.estimates.argmax(1) == truth.argmax(1)) > 0.97
    assert res.summary.loc["gcc", "rel_acc"] > 0.97  # the reference was computed: RelAcc is reported
    np.testing.assert_allclose(res.reference, truth, atol=1e-6)


def test_torch_module(process_client, tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    res = gd.coded_map(module, X, client=process_client, out=tmp_path / "torch.zarr", **CONFIG)
    assert res.run.config.workload.kind == "torch"
    with torch.inference_mode():
        truth = module(torch.from_numpy(X)).numpy()
    assert res.estimates.shape == (600, 3)
    assert np.abs(res.estimates - truth).mean() < 0.02
    assert module.training  # the caller's module is left as it was (not switched to eval mode)


class _CountingF:
    """f that leaves a file per unpickling, named after the process: shows where it was loaded."""

    def __init__(self, folder):
        self.folder = folder

    def __setstate__(self, state):
        self.__dict__.update(state)
        with open(os.path.join(self.folder, f"{os.getpid()}-{uuid.uuid4().hex[:8]}"), "w"):
            pass

    def __call__(self, x):
        return f(x)


def test_f_is_loaded_once_per_worker(process_client, tmp_path):
    loads = tmp_path / "loads"
    loads.mkdir()
    gd.coded_map(_CountingF(str(loads)), X, client=process_client, out=tmp_path / "once.zarr", **CONFIG)
    pids = [name.split("-")[0] for name in os.listdir(loads)]
    workers = {str(pid) for pid in process_client.run(os.getpid).values()}
    assert set(pids) <= workers and len(pids) == len(set(pids)) == len(workers)  # once in each worker, 10 batches


def test_not_picklable_f_is_one_error_naming_it(process_client, tmp_path):
    lock = threading.Lock()

    def locked_f(x):
        with lock:
            return f(x)

    with pytest.raises(WorkloadError) as err:
        gd.coded_map(locked_f, X, client=process_client, out=tmp_path / "never.zarr", **CONFIG)
    text = str(err.value)
    assert "\n" not in text and "locked_f" in text and "cannot be pickled" in text and "lock" in text
    assert not (tmp_path / "never.zarr").exists()


@pytest.mark.parametrize(("config", "match"), [
    ({"code": {"num_inputs": 4, "num_worker": 8}}, r"code\.num_worker: got unknown key 'num_worker'.*did you mean "
                                                    r"'num_workers'"),
    ({"cod": {"num_inputs": 4}}, r"cod: got unknown key 'cod'.*did you mean 'code'"),
    ({"cutoff": {"stragglers": 16}}, r"cutoff\.stragglers: got 16"),
    ({"source": {"kind": "mnist"}}, r"source: .*no source= keyword in coded_map \(the data are X\)"),
    ({"code": 8}, r"code: got 8; expected a mapping"),
    ({"schemes": None}, r"^schemes: got None; expected a scheme name or a non-empty list of them"),
    ({"schemes": []}, r"^schemes: got \[\]; expected a scheme name or a non-empty list of them"),
    ({"out": 123}, r"^out: got 123; expected a store path \(str or os.PathLike\) or None$"),
], ids=["typo-in-section", "typo-section", "impossible-S", "source-keyword", "not-a-mapping", "schemes-none",
        "schemes-empty", "out-int"])
def test_config_keywords_are_checked_as_yaml(config, match):
    with pytest.raises(ConfigError, match=match) as err:
        gd.coded_map(f, X, **config)
    assert "\n" not in str(err.value)


def test_bad_f_and_X():
    with pytest.raises(WorkloadError, match=r"f: got 'model\.bin'; expected a callable"):
        gd.coded_map("model.bin", X)
    with pytest.raises(WorkloadError, match=r"f: got 'int'"):
        gd.coded_map(3, X)


def test_a_path_for_X_is_one_line_saying_what_to_pass(tmp_path):
    """A new user's find: a Zarr array's path passed as X was refused as "an array of shape ()", the same whether
    the path existed or not. It is now named as a path, with what to pass instead (or that nothing is there)."""
    import zarr

    there = str(tmp_path / "x.zarr")
    zarr.create_array(store=there, data=X[:64])
    with pytest.raises(ConfigError, match=r"^X: got the path '.*x\.zarr'; expected an array of samples .*: for the "
                       r"Zarr array there, pass zarr\.open_array\('.*x\.zarr', mode='r'\) or dask\.array\.from_zarr"):
        gd.coded_map(f, there)
    with pytest.raises(ConfigError, match=r"^X: got the path '.*nothing\.zarr'; .*: no file or folder is there$"):
        gd.coded_map(f, tmp_path / "nothing.zarr")


def test_unknown_chunks_are_computed_and_sparse_X_is_one_line(process_client):
    """A dask array after boolean indexing (NaN chunk sizes) runs, its sizes computed as dask-ml does, and the
    caller's array is left as it was; a SciPy sparse matrix is one line saying what to call instead."""
    import dask.array as da

    dX = da.from_array(X, chunks=10)
    dX = dX[dX[:, 0] > -10]
    res = gd.coded_map(f, dX, client=process_client, schemes=("uncoded",), code={"num_inputs": 4, "num_workers": 4},
                       cutoff={"stragglers": 0}, stragglers={"model": "none"})
    assert np.isnan(dX.chunks[0][0])  # the caller's array is left as it was
    assert res.estimates.chunks[0] == dX.copy().compute_chunk_sizes().chunks[0]
    np.testing.assert_allclose(res.estimates.compute(scheduler="sync"), f(X), rtol=1e-5, atol=1e-5)
    sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(ConfigError, match=r"^X: got a SciPy sparse csr_matrix of shape \(600, 4\); expected a dense "
                                          r"array .*: pass X.toarray\(\)$"):
        gd.coded_map(f, sparse.csr_matrix(X))


def test_integer_X_is_refused_before_anything_runs(client, tmp_path):
    with pytest.raises(gd.errors.SourceError, match="got int64 samples in .array.; expected real floating data"):
        gd.coded_map(f, np.arange(40).reshape(10, 4), client=client, out=tmp_path / "int.zarr")


def test_samples_of_no_value_are_refused_before_anything_runs(client, tmp_path):
    """Issue 35, case 7: X of shape (100, 0) was ``ValueError: attempt to get argmax of an empty sequence`` from
    the composition's projection."""
    w = np.zeros((0, 3), np.float32)
    with pytest.raises(gd.errors.SourceError, match=r"^source: got 'array', whose samples have shape \(0,\) \(array "
                                                    r"shape \(100, 0\)\), no value each; expected samples of at "
                                                    "least one value") as e:
        gd.coded_map(lambda b: np.tanh(b @ w), np.zeros((100, 0), np.float32), client=client,
                     out=tmp_path / "empty.zarr")
    assert "\n" not in str(e.value) and not (tmp_path / "empty.zarr").exists()


def test_warns_when_the_scheduler_would_rerun_lost_shards(tmp_path):
    from distributed import Client, LocalCluster

    # Dask's default allowed-failures (3), and a scheduler reached over TCP as a separate one would be
    with LocalCluster(n_workers=1, threads_per_worker=8, processes=False, protocol="tcp://", dashboard_address=":0") \
            as cluster, Client(cluster, set_as_default=False) as c:
        with pytest.warns(RuntimeWarning, match=r"re-runs a task lost with its worker up to 3 times.*"
                                                r"ALLOWED_FAILURES=0") as caught:
            gd.coded_map(f, X[:64], client=c, out=tmp_path / "warn.zarr", **CONFIG)
            # the same scheduler again, through the same client and through another one: said once (issue 37)
            gd.coded_map(f, X[64:128], client=c, out=tmp_path / "again.zarr", **CONFIG)
            with Client(cluster, set_as_default=False) as other:
                gd.coded_map(f, X[:64], client=other, out=tmp_path / "other.zarr", **CONFIG)
    assert caught[0].filename == __file__  # attributed to the caller's line, not to gcc-dask's
    said = [w for w in caught if "allowed-failures" in str(w.message)]
    assert len(said) == 1 and "said once per scheduler in this process" in str(said[0].message)


def test_no_warning_on_a_cluster_that_never_reruns(process_client, tmp_path, recwarn):
    gd.coded_map(f, X[:64], client=process_client, out=tmp_path / "quiet.zarr", **CONFIG)  # allowed-failures 0
    from distributed import Client, LocalCluster

    # workers that are threads of this process cannot die alone: Dask's default is harmless there
    with LocalCluster(n_workers=1, threads_per_worker=8, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as c:
        gd.coded_map(f, X[:64], client=c, out=tmp_path / "inproc.zarr", **CONFIG)
    assert not [w for w in recwarn if "allowed-failures" in str(w.message)]


def test_a_client_with_fewer_threads_than_n_is_warned_of_once_at_the_callers_line(tmp_path):
    """The CLI notes a cluster with fewer worker threads than a batch's N shards; coded_map on the user's own
    client said nothing. It is a RuntimeWarning at the caller's line, once per call (4 batches here)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster, set_as_default=False) as c:
        with pytest.warns(RuntimeWarning, match=r"^a batch has up to N = 8 shards but the cluster has 2 worker "
                                                r"threads.*'Slots and placement'") as caught:
            res = gd.coded_map(f, X[:256], client=c, out=tmp_path / "few.zarr", **CONFIG)
    said = [w for w in caught if "worker threads" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__, [str(w.message) for w in caught]
    assert res.run.status == "complete" and gd.open_run(res.store).attrs["num_batches"] == 4


def test_default_client_and_temporary_store(client):
    res = gd.coded_map(f, X[:64], **CONFIG)  # the session's client is Dask's default client
    assert os.path.basename(res.store) == "coded-map.zarr" and os.path.isdir(res.store)
    assert os.path.basename(os.path.dirname(res.store)).startswith("gcc-dask-")
    assert res.estimates.shape == (64, 3)


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_how_to_fix_it(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "no_guard.py"
    script.write_text("import numpy as np\nimport gcc_dask as gd\n"
                      "gd.coded_map(np.tanh, np.zeros((64, 2), 'float32'), cluster={'n_workers': 1})\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("gcc_dask.errors.ClusterError: cluster: got an embedded LocalCluster that cannot start")
    assert 'in a script (no_guard.py), put the calls that start a cluster under `if __name__ == "__main__":`' in last


def test_an_output_of_the_wrong_shape_is_an_error_of_f_never_wrong_rows(process_client, tmp_path):
    """Issue 35, case 1: f transposes every block of more than one row (its one-row probe passes). Every shard
    output and the uncoded reference are checked against the shape f gave on its probe: a shard of the wrong
    shape is an erasure, and a batch left without an estimate is said once, naming f, the shape got and the one
    expected. No row is a wrong value (the run used to complete with 0 of 128 rows equal to f)."""
    bad = lambda b: np.tanh(b @ W).T if b.shape[0] > 1 else np.tanh(b @ W)  # noqa: E731
    with pytest.warns(RuntimeWarning) as caught:
        res = gd.coded_map(bad, X[:128], schemes=["uncoded"], client=process_client, out=tmp_path / "t.zarr",
                           run={"reference": True}, **CONFIG)
    said = [str(w.message) for w in caught if "has no estimate" in str(w.message)]
    assert len(said) == 1, said
    assert re.match(r"uncoded: batch \d has no estimate: every shard that ran failed; shard \d: WorkloadError\(.workload: "
                    r"f \(test_coded_map:.*<lambda>\) returned shape \(3, 16\) for a shard's block of 16 samples; "
                    r"expected \(16, 3\)", said[0]), said[0]
    assert np.isnan(res.estimates).all()  # no row of wrong values
    assert np.isnan(res.reference).all()  # the reference of each batch (64 rows, transposed too) is unknown


def test_a_square_block_transposed_is_an_error_of_f_never_wrong_rows(process_client, tmp_path):
    """A breaker's variant of issue 35, case 1: f: R^4 -> R^16 on blocks of 16 rows transposes a (16, 16) block,
    whose shape is the right one. Row 0 of a square block is compared with f on its first sample alone: every
    shard is an erasure, said once, and no row is a wrong value (it completed with 0 of 128 rows equal to f)."""
    w16 = RNG.normal(size=(4, 16)).astype(np.float32)
    bad = lambda b: np.tanh(b @ w16).T if b.shape[0] > 1 else np.tanh(b @ w16)  # noqa: E731
    with pytest.warns(RuntimeWarning) as caught:
        res = gd.coded_map(bad, X[:128], schemes=["uncoded"], client=process_client, out=tmp_path / "t.zarr",
                           run={"reference": True}, **CONFIG)
    said = [str(w.message) for w in caught if "has no estimate" in str(w.message)]
    assert len(said) == 1 and "returned a square block (16, 16) for a shard's block of 16 samples whose row 0 is " \
        "not f of that sample alone" in said[0], said
    assert np.isnan(res.estimates).all() and np.isnan(res.reference).all()
    good = lambda b: np.tanh(b @ w16)  # noqa: E731 - the same square blocks, rows right: no error, f's values
    ok = gd.coded_map(good, X[:128], schemes=["uncoded"], client=process_client, out=tmp_path / "ok.zarr", **CONFIG)
    np.testing.assert_allclose(ok.estimates, good(X[:128]), rtol=1e-6)


def test_a_scalar_f_makes_a_store_every_reader_opens(process_client, tmp_path):
    """f: R^4 -> R (one number per row, output shape ()): the summary, a resume and the report read the store
    (its integrity check used to expect an `output` coordinate that a scalar f never has, and called it
    damaged)."""
    g = lambda x: np.tanh(x @ W).sum(axis=1)  # noqa: E731
    out = tmp_path / "scalar.zarr"
    res = gd.coded_map(g, X, client=process_client, out=out, **CONFIG)
    assert res.estimates.shape == (600,)
    assert np.abs(res.estimates - g(X)).mean() < 0.03
    assert res.summary.loc["gcc", "mean_received"] == 6.0
    again = gd.coded_map(g, X, client=process_client, out=out, **CONFIG)  # a resume: nothing left to run
    np.testing.assert_array_equal(again.estimates, res.estimates)
    assert gd.open_run(out).attrs["output_shape"] == []


# replication's relative RMSE lies near the 0.1 that flags it poor (its fills at the cutoff): incidental here
@pytest.mark.filterwarnings("ignore:poor estimates:gcc_dask.errors.PoorEstimatesWarning")
def test_a_single_output_f_is_scored_by_relative_error_not_relacc(client, tmp_path):
    """A regressor, f = sin(X w) as one column (issue 37): its summary used to say rel_acc 1.0 for every scheme
    (the argmax of one column is always 0); it shows the relative RMSE, R² and the largest error instead."""
    w = W[:, 0]
    g = lambda x: np.sin(x @ w)[:, None]  # noqa: E731
    res = gd.coded_map(g, X[:256], client=client, out=tmp_path / "reg.zarr", schemes=("gcc", "replication"),
                       run={"reference": True}, **CONFIG)
    s = res.summary
    assert "rel_acc" not in s.columns and "accuracy" not in s.columns
    assert (s["output_kind"] == "regression").all()
    from gcc_dask import metrics

    truth = res.reference
    np.testing.assert_allclose(truth, g(X[:256]), rtol=1e-5, atol=1e-6)
    for scheme in ("gcc", "replication"):
        est = res.estimates_of(scheme)
        assert s.loc[scheme, "rel_rmse"] == pytest.approx(metrics.relative_rmse(est, truth), rel=1e-5)
        assert s.loc[scheme, "r2"] == pytest.approx(metrics.r2(est, truth), rel=1e-5)
        assert s.loc[scheme, "max_abs_err"] == pytest.approx(metrics.max_abs_error(est, truth), rel=1e-5)
    assert 0 < s.loc["gcc", "rel_rmse"] < 0.5 and s.loc["gcc", "r2"] > 0.5


@pytest.mark.parametrize("bad_f, error", [
    (lambda b: np.tanh(b)[:1, :3], r"returned shape \(1, 3\) .*expected \(16, 3\)"),  # one row for every block
    (lambda b: np.tanh(b[:, :3]) if len(b) == 1 else 1 / 0, "ZeroDivisionError"),  # passes the one-row probe only
    # the same number of values in another layout: used to be reshaped into wrong rows without a word
    (lambda b: np.tanh(b @ W).T if len(b) > 1 else np.tanh(b @ W), r"returned shape \(3, 16\) .*expected \(16, 3\)"),
])
def test_an_f_that_fails_on_every_block_is_said_once_with_its_error(process_client, tmp_path, bad_f, error):
    """Every batch without an estimate is NaN and counted in the summary; the first one of a scheme is also said
    (a RuntimeWarning from the library) with f's error, which otherwise only the worker's log held."""
    with pytest.warns(RuntimeWarning, match=rf"^gcc: batch \d+ has no estimate: .*{error}") as caught:
        res = gd.coded_map(bad_f, X[:128], client=process_client, out=tmp_path / "bad.zarr", **CONFIG)
    assert np.isnan(res.estimates).all()
    assert sum("has no estimate" in str(w.message) for w in caught) == 1  # once per scheme, not per batch


def test_an_f_that_fails_on_the_timing_of_an_auto_block_size_is_one_line(client, tmp_path):
    """``code.block_size: auto`` times f on blocks of 64 samples and more: an f that passed on one sample and
    fails there stops the run with one line naming the timing, not a traceback out of the timer."""
    bad = lambda b: np.tanh(b[:, :3]) if len(b) == 1 else 1 / 0  # noqa: E731
    config = {**CONFIG, "code": {**CONFIG["code"], "block_size": "auto"}}
    with pytest.raises(WorkloadError, match=r"fails on a block .* timed for code.block_size: auto "
                                            r"\(ZeroDivisionError: division by zero\).* every n and every sample: "
                                            r"fix f for these samples"):
        gd.coded_map(bad, X[:128], client=client, out=tmp_path / "t.zarr", **config)


def _rows_only(x):
    if np.ndim(x) != 2:
        raise ValueError(f"Expected 2D array, got {np.ndim(x)}D array instead")
    return np.tanh(x)


def test_a_1d_x_whose_f_takes_rows_is_told_to_reshape_x(client, tmp_path):
    """A 1-D X has scalar samples, so f gets blocks of shape (m,): a model of rows refuses them, and the line said
    "shape ()" alone (a new user's find); it now says why and what to do."""
    with pytest.raises(WorkloadError, match=r"shape \(\), dtype float32: ValueError: Expected 2D array.*\) \(each "
                                            r"sample of a 1-D X is one value.*reshape X to \(n, 1\) if f takes rows"):
        gd.coded_map(_rows_only, X[:, 0].copy(), client=client, out=tmp_path / "1d.zarr", **CONFIG)
    assert gd.coded_map(_rows_only, X[:128, :1], client=client, out=tmp_path / "2d.zarr",
                        **CONFIG).estimates.shape == (128, 1)  # (the same rows as (n, 1): it runs)


@pytest.mark.parametrize("given", ["import path", "imported function"])
def test_an_edited_module_behind_f_is_refused_on_resume(client, tmp_path, monkeypatch, given):
    """Issue 35, case 3: f named by its import path ('module:function'), or an importable function (pickled by
    reference: the workers read its code from the module), then its module edited: the same call used to resume
    and return the old f's results; the module's source is in the run's inputs digest, so it is refused (one
    line naming the module's file). Unedited, the same call resumes."""
    import importlib

    name = f"model_{uuid.uuid4().hex[:8]}"
    module = tmp_path / f"{name}.py"
    module.write_text("import numpy as np\n\ndef g(x):\n    return np.tanh(2 * x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the in-process workers of `client` share this sys.path
    f = f"{name}:g" if given == "import path" else importlib.import_module(name).g
    out = tmp_path / "edited.zarr"
    first = gd.coded_map(f, X[:128], client=client, out=out, **CONFIG)
    assert np.abs(first.estimates - np.tanh(2 * X[:128])).mean() < 0.05
    assert gd.open_run(out).attrs["model_sources"] == [str(module)]
    again = gd.coded_map(f, X[:128], client=client, out=out, **CONFIG)  # unedited: resumed
    np.testing.assert_array_equal(again.estimates, first.estimates)
    module.write_text("import numpy as np\n\ndef g(x):\n    return np.tanh(3 * x)\n")
    with pytest.raises(gd.errors.StoreError, match=rf"other source of the model's module {re.escape(str(module))}"):
        gd.coded_map(f, X[:128], client=client, out=out, **CONFIG)


def test_an_edited_module_that_f_imports_from_beside_it_is_refused_on_resume(client, tmp_path, monkeypatch):
    """A breaker's variant of issue 35, case 3: f's module imports a helper module from its own folder, and the
    helper is edited: the same call used to resume with the old f's results. The modules f's module imports
    from beside it (and theirs) are in the digest too; numpy, installed elsewhere, is not. A store that lists
    only f's own module (made before the helpers counted) is checked on that list: it resumes."""
    import zarr

    tag = uuid.uuid4().hex[:8]
    name, helper = f"model_{tag}", f"helper_{tag}"
    (tmp_path / f"{helper}.py").write_text("SCALE = 2.0\n")
    module = tmp_path / f"{name}.py"
    module.write_text(f"import numpy as np\nimport {helper}\n\ndef g(x):\n    return np.tanh({helper}.SCALE * x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "helper.zarr"
    first = gd.coded_map(f"{name}:g", X[:128], client=client, out=out, **CONFIG)
    assert gd.open_run(out).attrs["model_sources"] == [str(module), str(tmp_path / f"{helper}.py")]
    (tmp_path / f"{helper}.py").write_text("SCALE = 3.0\n")
    with pytest.raises(gd.errors.StoreError, match=r"other source of the model's module .*helper_"):
        gd.coded_map(f"{name}:g", X[:128], client=client, out=out, **CONFIG)
    (tmp_path / f"{helper}.py").write_text("SCALE = 2.0\n")  # back as it was: resumed
    np.testing.assert_array_equal(gd.coded_map(f"{name}:g", X[:128], client=client, out=out, **CONFIG).estimates,
                                  first.estimates)
    from gcc_dask.pipeline_resume import _inputs_digest
    from gcc_dask.sources import make_source
    from gcc_dask.workloads import make_workload

    root = zarr.open_group(str(out), mode="r+")  # as a store made when only f's own module counted
    source, workload = make_source("array", array=X[:128]), make_workload("callable", name=f"{name}:g")
    root.attrs.update({"model_sources": [str(module)], "inputs_digest": _inputs_digest(source, workload, [str(module)])})
    np.testing.assert_array_equal(gd.coded_map(f"{name}:g", X[:128], client=client, out=out, **CONFIG).estimates,
                                  first.estimates)


def test_a_store_made_before_module_sources_counted_is_resumed(client, tmp_path, monkeypatch):
    """A store whose inputs digest left the module's source out (made before it counted: no ``model_sources``
    attribute) is resumed as before, not refused as made by another model."""
    import zarr

    from gcc_dask.pipeline import _inputs_digest
    from gcc_dask.sources import make_source
    from gcc_dask.workloads import make_workload

    name = f"model_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import numpy as np\n\ndef g(x):\n    return np.tanh(2 * x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "old.zarr"
    first = gd.coded_map(f"{name}:g", X[:128], client=client, out=out, **CONFIG)
    root = zarr.open_group(str(out), mode="r+")
    source, workload = make_source("array", array=X[:128]), make_workload("callable", name=f"{name}:g")
    assert workload.sources() and _inputs_digest(source, workload) == root.attrs["inputs_digest"]
    attrs = dict(root.attrs)
    del attrs["model_sources"]
    attrs["inputs_digest"] = _inputs_digest(source, workload, sources=False)
    root.attrs.clear()
    root.attrs.update(attrs)
    again = gd.coded_map(f"{name}:g", X[:128], client=client, out=out, **CONFIG)
    np.testing.assert_array_equal(again.estimates, first.estimates)


# ------------------------------------------------ issue 35, case 8: NaN and overflow in f's output, per row
_W = np.random.default_rng(3).random((6, 4))
_NAN_KEYS = np.random.default_rng(4).random((8, 6))  # the 8 samples on which f returns NaN


def _nan_on_some(b):
    out = np.tanh(np.asarray(b, np.float64) @ _W)
    hit = (np.abs(np.asarray(b)[:, None, :] - _NAN_KEYS[None]).max(axis=2) < 1e-6).any(axis=1)
    out[hit] = np.nan
    return out


def _huge_on_some(b):
    out = np.tanh(np.asarray(b, np.float64) @ _W)
    out[np.asarray(b)[:, 0] > 0.99] = 1e39
    return out


def test_nan_from_f_on_a_few_rows_blanks_those_rows_only_and_is_said_once(client, tmp_path):
    """f returns NaN on 8 of 2,000 rows: every row of every scheme used to be NaN (the decode of each batch
    failed), uncoded's exact rows included. Now uncoded keeps its 1,992 exact rows, a coded scheme loses at most
    the groups that used a NaN row, and one warning gives the counts."""
    X = np.random.default_rng(5).random((2000, 6))
    X[np.arange(8) * 250 + 3] = _NAN_KEYS
    with pytest.warns(RuntimeWarning) as said:
        res = gd.coded_map(_nan_on_some, X, schemes=["uncoded", "gcc"], client=client, out=tmp_path / "nan.zarr")
    lines = [str(w.message) for w in said if "NaN or Inf" in str(w.message)]
    assert len(lines) == 1 and "in uncoded" in lines[0], [str(w.message) for w in said]
    # by design not a stop under the default nan_policy (raise stops on the data): the line says so
    assert "those rows are erasures (run.nan_policy stops the run on NaN or Inf in the data" in lines[0]
    assert gd.open_run(res.store).attrs["config"]["run"]["nan_policy"] == "raise"
    est = res.estimates  # the first scheme: uncoded
    bad = np.isnan(est).any(axis=1)
    assert bad.sum() == 8 and set(np.flatnonzero(bad)) == set((np.arange(8) * 250 + 3).tolist())
    want = _nan_on_some(X).astype(np.float32)
    np.testing.assert_allclose(est[~bad], want[~bad], rtol=1e-6)
    assert int(res.summary.loc["uncoded", "missing"]) == 8
    assert int(res.summary.loc["gcc", "missing"]) < 2000  # (it was every row)


def test_values_beyond_float32_are_said_once_without_numpys_cast_warning(client, tmp_path):
    X = np.random.default_rng(6).random((400, 6))
    with pytest.warns(RuntimeWarning) as said:
        res = gd.coded_map(_huge_on_some, X, schemes=["uncoded"], client=client, out=tmp_path / "big.zarr")
    texts = [str(w.message) for w in said]
    assert not any("overflow encountered" in t for t in texts), texts
    lines = [t for t in texts if "beyond float32's range" in t]
    rows = int((X[:, 0] > 0.99).sum())
    assert len(lines) == 1 and f"on {rows} rows in uncoded" in lines[0], texts
    assert int(np.isinf(res.estimates).any(axis=1).sum()) == rows


def test_a_closed_client_is_named_not_the_store_path(tmp_path):
    """Issue 35, case 8: a closed client was blamed on the store path ("which 1 of 1 Dask workers cannot see or
    write")."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
                      silence_logs=50) as cluster:
        c = Client(cluster)
        c.close()
        with pytest.raises(gd.errors.ClusterError, match=r"^client: got a distributed.Client that is closed "
                                                         r"\(status 'closed'\); expected a running one"):
            gd.coded_map(np.tanh, np.random.default_rng(0).random((64, 3)), client=c, out=tmp_path / "c.zarr")
    assert not (tmp_path / "c.zarr").exists()


def test_a_result_prints_in_one_line_without_the_data(client, tmp_path):
    """print(res) was the whole config, the input array in it; it is one line naming the schemes and the store."""
    X = np.ones((64, 3), np.float32)
    res = gd.coded_map(np.tanh, X, schemes=("uncoded",), client=client, out=tmp_path / "r.zarr")
    text = repr(res)
    assert text == (f"<CodedResult schemes=['uncoded'], 64 rows, store={str(tmp_path / 'r.zarr')!r}, "
                    "status='complete', lazy=False>")


@pytest.mark.parametrize("segment_bytes", [None, 0], ids=["by-store-chunks", "by-blocks"])
def test_estimates_read_each_store_chunk_once(process_client, tmp_path, monkeypatch, segment_bytes):
    """The lazy estimates of a composed run are the eager ones (rows in the dataset's order), read one store
    chunk a task: each chunk (one batch) decompressed once, not once per block of X (a batch of 8 blocks of X
    read it 8 times). Where a run of store chunks that holds its own samples is too long to reorder in one task
    (a source without chunks, whose windows need not hold whole batches), each block of X reads its rows from
    the chunks that hold them."""
    import dask.array as da
    import zarr

    from gcc_dask.store import readers

    if segment_bytes is not None:
        monkeypatch.setattr(readers, "MAX_SEGMENT_BYTES", segment_bytes)
    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=X.shape, chunks=(32, 4), dtype="float32")
    z[:] = X
    res = gd.coded_map(f, z, client=process_client, out=tmp_path / "z.zarr",
                       composition={"policy": "similarity", "window": 128}, **CONFIG)
    root = zarr.open_group(res.store, mode="r")
    assert (root["inputs/sample"][:] != np.arange(600)).any()  # the composition moved samples
    eager = readers.read_in_dataset_order(res.store, "gcc")
    lazy = readers.read_in_dataset_order(res.store, "gcc", lazy=True, chunks=(100,) * 6)
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == (100,) * 6
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), eager)
    reads = [k for k in dict(lazy.__dask_graph__()) if isinstance(k, tuple) and k[0].startswith("from-zarr")]
    if segment_bytes is None:
        assert len(reads) == root["gcc/decoded"].nchunks == 10  # one per batch
    else:
        assert not reads  # blocks of X read their rows themselves



def test_the_estimates_of_an_as_stored_run_read_no_composition(client, tmp_path, monkeypatch):
    """A run composed ``as_stored`` keeps the dataset's order: its estimates, eager and lazy, are read without
    the stored composition (``inputs/sample``: 16 MB at 2,000,000 rows, read and checked for nothing), the same
    values as the store's own rows."""
    import dask.array as da
    import zarr

    from gcc_dask.store import RunStore, readers

    res = gd.coded_map(f, X, client=client, out=tmp_path / "s.zarr", composition={"policy": "as_stored"}, **CONFIG)
    stored = zarr.open_group(res.store, mode="r")["gcc/decoded"][...]

    def refused(self):
        raise AssertionError("the composition was read")

    monkeypatch.setattr(RunStore, "sample_index", refused)
    np.testing.assert_array_equal(readers.read_in_dataset_order(res.store, "gcc"), stored)
    lazy = readers.read_in_dataset_order(res.store, "gcc", lazy=True, chunks=(100,) * 6)
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == (100,) * 6
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), stored)
    # small store chunks are read by each block straight (no rechunk); larger ones once each, then rechunked
    assert not [k for k in dict(lazy.__dask_graph__()) if isinstance(k, tuple) and "rechunk" in k[0]]
    monkeypatch.setattr(readers, "DIRECT_READ_BYTES", 0)
    rechunked = readers.read_in_dataset_order(res.store, "gcc", lazy=True, chunks=(100,) * 6)
    assert rechunked.chunks[0] == (100,) * 6 and [k for k in dict(rechunked.__dask_graph__())
                                                  if isinstance(k, tuple) and "rechunk" in k[0]]
    np.testing.assert_array_equal(rechunked.compute(scheduler="sync"), stored)


@pytest.mark.parametrize("op", ["as stored", "scaled"])
def test_a_zarr_array_rewritten_in_place_is_refused_on_resume_over_its_dask_array(client, tmp_path, op):
    """A breaker's find: ``da.from_zarr(path)`` is fingerprinted by its path, so a store made over it resumed
    after the Zarr array was rewritten in place with other values, and mixed the old rows with the new ones. The
    array's folder now counts in the inputs digest (``data_folders``), as read or under further operations: the
    resume is refused, one line; over the same unchanged files it resumes."""
    import dask.array as da
    import zarr

    path = str(tmp_path / "x.zarr")
    zarr.create_array(store=path, data=X[:256], chunks=(64, 4))
    out = tmp_path / "over-dask.zarr"

    def lazy():
        return da.from_zarr(path) if op == "as stored" else da.from_zarr(path) * np.float32(0.5)

    first = gd.coded_map(f, lazy(), client=client, out=out, **CONFIG)
    assert gd.open_run(out).attrs["data_folders"] == [path]
    again = gd.coded_map(f, lazy(), client=client, out=out, **CONFIG)  # unchanged: resumed
    np.testing.assert_array_equal(again.estimates, first.estimates)
    root = zarr.open_group(str(out), mode="r+")  # as a store made before the data folders counted: resumed
    attrs, made_with = dict(root.attrs), dict(root.attrs)
    del attrs["data_folders"]
    from gcc_dask.pipeline_resume import _inputs_digest
    from gcc_dask.sources import make_source
    from gcc_dask.workloads import make_workload

    old = _inputs_digest(make_source("array", array=lazy()), make_workload("callable", function=f),
                         list(attrs["model_sources"]), stored=False)
    assert old != attrs["inputs_digest"]
    root.attrs.clear()
    root.attrs.update({**attrs, "inputs_digest": old})
    np.testing.assert_array_equal(gd.coded_map(f, lazy(), client=client, out=out, **CONFIG).estimates,
                                  first.estimates)
    root.attrs.clear()
    root.attrs.update(made_with)
    w = zarr.open_array(path, mode="r+")
    w[:] = X[:256] + 100  # rewritten in place: same path, same shape, same chunks
    with pytest.raises(gd.errors.StoreError, match=r"other model or data files"):
        gd.coded_map(f, lazy(), client=client, out=out, **CONFIG)
    assert gd.open_run(out).attrs["data_folders"] == [path]  # the refusal wrote nothing


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")  # zarr's note on xarray's own metadata
def test_a_zarr_store_rewritten_in_place_is_refused_on_resume_over_its_xarray_dataarray(client, tmp_path):
    """``xarray.open_zarr(path)["x"]`` holds its Zarr array under xarray's lazy wrappers, where the inputs digest
    did not look: a resume over the store rewritten in place (same shape, other values) mixed the old rows with the
    new ones. Its folder now counts (``data_folders``): the resume is refused, one line; unchanged, it resumes."""
    import xarray as xr
    import zarr

    path = str(tmp_path / "x.zarr")
    xr.DataArray(X[:256], dims=("row", "feature")).chunk({"row": 64}).to_dataset(name="x").to_zarr(path, mode="w")
    out = tmp_path / "over-xarray.zarr"
    first = gd.coded_map(f, xr.open_zarr(path)["x"], client=client, out=out, **CONFIG)
    assert gd.open_run(out).attrs["data_folders"] == [os.path.join(path, "x")]
    again = gd.coded_map(f, xr.open_zarr(path)["x"], client=client, out=out, **CONFIG)  # unchanged: resumed
    np.testing.assert_array_equal(again.estimates, first.estimates)
    zarr.open_array(os.path.join(path, "x"), mode="r+")[:] = X[:256] + 100  # rewritten in place
    with pytest.raises(gd.errors.StoreError, match=r"other model or data files"):
        gd.coded_map(f, xr.open_zarr(path)["x"], client=client, out=out, **CONFIG)


def test_numpy_estimates_come_back_with_the_records_not_from_the_store(process_client, tmp_path, monkeypatch):
    """For NumPy input the estimates are the rows each decode sent back with its batch's record, put in the
    dataset's order on the driver: the same values as the store's, with no read of the store; with a reference
    (the rows go through the score task) and for every scheme. A resume, whose finished batches send nothing,
    reads them from the store instead."""
    import zarr

    from gcc_dask import store as store_mod

    out = tmp_path / "kept.zarr"
    res = gd.coded_map(f, X, schemes=("gcc", "uncoded"), client=process_client, out=out,
                       run={"reference": True}, composition={"policy": "similarity", "window": 128}, **CONFIG)
    root = zarr.open_group(res.store, mode="r")
    order = root["inputs/sample"][:]
    assert (order != np.arange(600)).any()  # composed: the store's rows are not X's
    stored = {}
    for scheme in ("gcc", "uncoded"):
        stored[scheme] = np.empty_like(root[f"{scheme}/decoded"][...])
        stored[scheme][order] = root[f"{scheme}/decoded"][...]
    assert set(res.run.estimates) == {"gcc", "uncoded"}

    def refused(*args, **kwargs):
        raise AssertionError("the estimates were read from the store")

    with monkeypatch.context() as m:
        m.setattr(store_mod, "read_in_dataset_order", refused)
        np.testing.assert_array_equal(res.estimates, stored["gcc"])
        np.testing.assert_array_equal(res.estimates_of("uncoded"), stored["uncoded"])
    np.testing.assert_allclose(res.estimates_of("uncoded"), f(X), rtol=1e-6, atol=1e-6)  # uncoded: f itself
    assert np.isfinite(res.summary.loc["gcc", "rel_acc"])  # scored as before

    again = gd.coded_map(f, X, schemes=("gcc", "uncoded"), client=process_client, out=out,
                         run={"reference": True}, composition={"policy": "similarity", "window": 128}, **CONFIG)
    assert again.run.estimates == {}  # nothing ran: the store holds every batch
    np.testing.assert_array_equal(again.estimates, stored["gcc"])


def test_each_call_for_numpy_estimates_gives_an_array_of_its_own(client, tmp_path):
    """A breaker's find: the kept estimates were handed out as one array, so editing what estimates_of returned
    changed every later result (estimates_of, to_xarray) without a word; each read of the store used to give a
    fresh array, and so does each call now."""
    res = gd.coded_map(f, X, schemes=("gcc", "uncoded"), client=client, out=tmp_path / "own.zarr", **CONFIG)
    u = res.estimates_of("uncoded")
    u /= 2
    again = res.estimates_of("uncoded")
    assert again is not u
    np.testing.assert_allclose(again, f(X), rtol=1e-6, atol=1e-6)  # uncoded: f itself (up to f's rounding)
    np.testing.assert_allclose(res.to_xarray()["uncoded"].values, f(X), rtol=1e-6, atol=1e-6)


def test_a_result_whose_store_another_run_overwrote_refuses_to_mix_the_two(client, tmp_path):
    """A breaker's find: after another call overwrote the store, an earlier result gave its own estimates (kept in
    memory) beside the new run's reference and summary (read from the store): estimates 5 apart from a reference
    with an RMSE of 0. Now what it would read from the store is refused with one line; its own estimates stay."""
    from gcc_dask.errors import StoreError

    kw = dict(schemes=("uncoded",), client=client, out=tmp_path / "shared.zarr", run={"reference": True}, **CONFIG)
    first = gd.coded_map(f, X, **kw)
    second = gd.coded_map(lambda x: 5 + f(x), X, store={"overwrite": True}, **kw)
    np.testing.assert_allclose(first.estimates, f(X), rtol=1e-6, atol=1e-6)  # its own, from memory
    for read in (lambda: first.reference, lambda: first.summary, first.to_xarray):
        with pytest.raises(StoreError, match=r"overwritten by another run after this result was made"):
            read()
    np.testing.assert_allclose(second.estimates, second.reference, rtol=1e-6, atol=1e-6)
    assert second.summary.loc["uncoded", "rmse"] < 1e-6


def test_auto_gives_the_scheme_it_chose_and_its_estimates(client, tmp_path):
    """A breaker's find: with ``schemes="auto"`` the result kept the name ``auto``, so its estimates could not
    be read (no ``auto`` group in the store) and estimates_of refused the scheme that ran."""
    res = gd.coded_map(f, X, schemes="auto", client=client, out=tmp_path / "auto.zarr", advise={"samples": 96},
                       **CONFIG)
    from gcc_dask.store import read_in_dataset_order

    assert res.schemes == tuple(res.run.config.schemes) and "auto" not in res.schemes
    est = res.estimates
    assert est.shape == (600, 3)  # (whichever estimator the advice chose: its rows, as the store holds them)
    np.testing.assert_array_equal(est, read_in_dataset_order(res.store, res.schemes[0]))
    np.testing.assert_array_equal(res.estimates_of(res.schemes[0]), est)
    assert list(res.to_xarray().data_vars) == [res.schemes[0]]


def _as_frame(x):
    import pandas as pd

    return pd.DataFrame(f(x))


def test_an_f_that_returns_a_dataframe_gives_its_values(client, tmp_path):
    """A breaker's find: an f returning a pandas DataFrame (an estimator set to ``set_output(transform="pandas")``)
    passed the probe, then every decode failed (its ``.get`` was taken for CuPy's) and the run said 'complete'
    with every row NaN. f's output is an array from the shard on."""
    res = gd.coded_map(_as_frame, X, schemes=("uncoded", "gcc"), client=client, out=tmp_path / "df.zarr",
                       **CONFIG)
    assert res.run.status == "complete"
    np.testing.assert_allclose(res.estimates, f(X), rtol=1e-6, atol=1e-6)
    assert np.isfinite(res.estimates_of("gcc")).all()


def test_a_lazy_result_taken_before_its_store_was_overwritten_raises_when_computed(client, tmp_path):
    """A breaker's find: the dask array of a result, taken before another call overwrote its store, read the other
    run's rows when computed. It now checks the store once per compute, before its blocks are read."""
    import dask.array as da

    from gcc_dask.errors import StoreError

    kw = dict(schemes=("uncoded",), client=client, out=tmp_path / "lazy.zarr", run={"reference": True}, **CONFIG)
    first = gd.coded_map(f, da.from_array(X, chunks=100), **kw)
    est, ref = first.estimates, first.reference
    np.testing.assert_allclose(est.compute(), f(X), rtol=1e-6, atol=1e-6)  # its own store: read
    gd.coded_map(f, da.from_array(X[::-1].copy(), chunks=100), store={"overwrite": True}, **kw)
    for lazy in (est, ref):
        with pytest.raises(StoreError, match=r"overwritten by another run after this result was made"):
            lazy.compute()
