"""CodedPostFit: a scikit-learn estimator's post-fit methods, coded, with the types of dask-ml's ParallelPostFit."""

from __future__ import annotations

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.errors import ConfigError

sklearn = pytest.importorskip("sklearn")
da = pytest.importorskip("dask.array")

from sklearn.datasets import make_classification  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

X, Y = make_classification(n_samples=480, n_features=6, n_informative=4, n_classes=3, random_state=0)
X = X.astype(np.float32)
DX = da.from_array(X, chunks=120)
CONFIG = {"code": {"num_inputs": 4, "num_workers": 8, "block_size": 16}, "cutoff": {"stragglers": 2},
          "stragglers": {"model": "shifted_exponential", "shift": 0.001, "scale": 0.002, "seed": 1}}

# what ParallelPostFit returns (dask_ml.wrappers, 2025.1): the estimator's own type for NumPy input, a dask array
# chunked as X along the samples for dask input, with the dtype of the estimator's own method
EXPECTED = {
    ("predict", "numpy"): (np.ndarray, (480,)),
    ("predict", "dask"): (da.Array, (480,)),
    ("predict_proba", "numpy"): (np.ndarray, (480, 3)),
    ("predict_proba", "dask"): (da.Array, (480, 3)),
}


@pytest.fixture(scope="module")
def fitted():
    return LogisticRegression(max_iter=1000).fit(X, Y)


@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("method", ["predict", "predict_proba"])
def test_types_as_parallel_post_fit(process_client, fitted, method, kind):
    wrapped = gd.CodedPostFit(fitted, client=process_client, **CONFIG)
    out = getattr(wrapped, method)(X if kind == "numpy" else DX)
    cls, shape = EXPECTED[(method, kind)]
    own = getattr(fitted, method)(X)
    assert isinstance(out, cls) and out.shape == shape and out.dtype == own.dtype
    if kind == "dask":
        assert out.chunks[0] == DX.chunks[0]
        out = out.compute(scheduler="sync")
    if method == "predict":
        assert np.mean(out == own) > 0.97  # argmax of the decoded (linear) decision function
    else:
        assert np.abs(out - own).mean() < 0.02
    assert wrapped.last_result_.schemes == ("gcc",)


def test_same_types_as_dask_ml(process_client, fitted):
    wrappers = pytest.importorskip("dask_ml.wrappers")
    ours = gd.CodedPostFit(fitted, client=process_client, **CONFIG)
    theirs = wrappers.ParallelPostFit(fitted)
    for method in ("predict", "predict_proba"):
        for data in (X, DX):
            a, b = getattr(ours, method)(data), getattr(theirs, method)(data)
            assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype, (method, type(data))
            assert getattr(a, "chunks", None) == getattr(b, "chunks", None)


def test_fit_passes_through_and_clone_works(process_client):
    from sklearn.base import clone

    est = RandomForestClassifier(n_estimators=8, random_state=0)
    wrapped = gd.CodedPostFit(est, client=process_client, **CONFIG)
    assert wrapped.fit(X, Y) is wrapped
    np.testing.assert_array_equal(wrapped.classes_, [0, 1, 2])  # learned attributes copied, as ParallelPostFit
    assert hasattr(est, "estimators_")  # the estimator itself was fitted
    again = clone(wrapped)
    assert again.config == wrapped.config and again.estimator is not est
    assert again.get_params()["code"] == CONFIG["code"]
    pred = wrapped.predict(X)  # no decision_function: the argmax of the decoded predict_proba
    assert pred.dtype == est.predict(X).dtype and np.mean(pred == est.predict(X)) > 0.95
    assert 0.9 < wrapped.score(X, Y) <= 1.0


def test_transform_and_regressor(process_client):
    pca = PCA(n_components=2).fit(X)
    wrapped = gd.CodedPostFit(pca, client=process_client, **CONFIG)
    out = wrapped.transform(DX)
    assert isinstance(out, da.Array) and out.shape == (480, 2) and out.dtype == pca.transform(X).dtype
    assert np.abs(out.compute(scheduler="sync") - pca.transform(X)).mean() < 0.05

    target = X @ np.arange(1, 7, dtype=np.float32)
    reg = LinearRegression().fit(X, target)
    wrapped = gd.CodedPostFit(reg, client=process_client, **CONFIG)
    pred = wrapped.predict(X)  # a regressor's predict is decoded directly: (n,) outputs
    assert pred.shape == (480,) and np.abs(pred - reg.predict(X)).mean() < 0.1 * np.abs(target).mean()


def test_a_multi_output_regressor_and_a_transform_are_scored_as_regressions(process_client, fitted):
    """A reviewer's find: a multi-output regressor's ``predict`` (and ``transform``) ran with ``output_kind:
    auto``, which takes two or more outputs for class scores, so the summary gave the RelAcc of their argmax.
    CodedPostFit now runs them as ``regression`` (the relative RMSE against the reference), unless the user says
    otherwise; a classifier's ``predict_proba`` keeps ``auto`` (classifier)."""
    from gcc_dask import metrics

    XS = X[:192]
    targets = XS @ np.random.default_rng(5).random((6, 3)).astype(np.float32)
    reg = LinearRegression().fit(XS, targets)
    scored = {**CONFIG, "run": {"reference": True}}
    wrapped = gd.CodedPostFit(reg, client=process_client, **scored)
    pred = wrapped.predict(XS)
    summary = wrapped.last_result_.summary
    assert summary.attrs["output_kind"] == "regression" and "rel_acc" not in summary.columns
    assert summary.loc["gcc", "rel_rmse"] == pytest.approx(metrics.relative_rmse(pred, reg.predict(XS)), rel=1e-3)
    assert wrapped.config == scored  # the wrapper's own config is left as given
    pca = gd.CodedPostFit(PCA(n_components=3).fit(XS), client=process_client, **scored)
    pca.transform(XS)
    assert pca.last_result_.summary.attrs["output_kind"] == "regression"
    said = gd.CodedPostFit(reg, client=process_client, **{**CONFIG, "run": {"output_kind": "classifier"}})
    said.predict(XS)
    assert said.last_result_.summary.attrs["output_kind"] == "classifier"  # the user's choice stands
    proba = gd.CodedPostFit(fitted, client=process_client, **scored)
    proba.predict_proba(XS)
    assert proba.last_result_.summary.attrs["output_kind"] == "classifier"


def test_missing_method_and_bad_scores(fitted):
    with pytest.raises(AttributeError, match="does not have a 'transform' method"):
        gd.CodedPostFit(fitted).transform(X)
    with pytest.raises(ConfigError, match=r"scores: got 'proba'; expected one of auto, decision_function"):
        gd.CodedPostFit(fitted, scores="proba")


# --------------------------------------------------------------------------- the collections users hold (item 9)
# On the exact `uncoded` scheme every post-fit method equals the estimator's own, whatever holds X: NumPy, a dask
# array, a pandas or dask DataFrame, a dask array whose chunk sizes are unknown (dask-ml's ParallelPostFit takes all
# of them). The decoded values are stored in float32: equal up to that rounding.
EXACT = {"schemes": ("uncoded",), "code": {"num_inputs": 4, "num_workers": 4, "block_size": 8},
         "cutoff": {"stragglers": 0}, "stragglers": {"model": "none"}}
SMALL = 96
COLUMNS = [f"f{i}" for i in range(X.shape[1])]
KINDS = ["numpy", "dask", "pandas", "dask-dataframe", "unknown-chunks"]


def _as(kind: str, data: np.ndarray):
    import pandas as pd

    if kind == "numpy":
        return data
    if kind == "dask":
        return da.from_array(data, chunks=40)
    if kind == "unknown-chunks":
        arr = da.from_array(data, chunks=40)
        unknown = arr[arr[:, 0] > -np.inf]  # boolean indexing: every row kept, chunk sizes NaN
        assert np.isnan(unknown.chunks[0][0])
        return unknown
    frame = pd.DataFrame(data, columns=COLUMNS)
    if kind == "pandas":
        return frame
    dd = pytest.importorskip("dask.dataframe")
    return dd.from_pandas(frame, npartitions=3)


def _fit(estimator, kind: str, y):
    import pandas as pd

    on = pd.DataFrame(X[:SMALL * 2], columns=COLUMNS) if "dataframe" in kind or kind == "pandas" else X[:SMALL * 2]
    return estimator.fit(on, y[:SMALL * 2])


def _eager(a):
    return a.compute(scheduler="sync") if hasattr(a, "compute") else a


@pytest.mark.parametrize("kind", KINDS)
def test_every_post_fit_method_is_the_estimators_own_on_the_exact_scheme(process_client, kind, recwarn):
    XS = X[:SMALL]
    data = _as(kind, XS)
    own_input = _as("pandas", XS) if kind in ("pandas", "dask-dataframe") else XS
    clf = _fit(LogisticRegression(max_iter=1000), kind, Y)
    wrapped = gd.CodedPostFit(clf, client=process_client, **EXACT)
    for method in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        got, own = getattr(wrapped, method)(data), getattr(clf, method)(own_input)
        assert got.shape == own.shape and got.dtype == own.dtype, method
        assert isinstance(got, da.Array) == (kind in ("dask", "dask-dataframe", "unknown-chunks")), method
        if method == "predict":
            np.testing.assert_array_equal(_eager(got), own)
        else:
            np.testing.assert_allclose(_eager(got), own, rtol=1e-5, atol=1e-6, err_msg=method)
    assert wrapped.score(data, Y[:SMALL]) == clf.score(own_input, Y[:SMALL])

    pca = _fit(PCA(n_components=3), kind, Y)
    got = gd.CodedPostFit(pca, client=process_client, **EXACT).transform(data)
    np.testing.assert_allclose(_eager(got), pca.transform(own_input), rtol=1e-5, atol=1e-5)

    target = X[:SMALL * 2] @ np.arange(1, 7, dtype=np.float32)
    reg = _fit(LinearRegression(), kind, target)
    wrapped = gd.CodedPostFit(reg, client=process_client, **EXACT)
    np.testing.assert_allclose(_eager(wrapped.predict(data)), reg.predict(own_input), rtol=1e-5, atol=1e-4)
    assert wrapped.score(data, target[:SMALL]) == pytest.approx(reg.score(own_input, target[:SMALL]), abs=1e-6)
    # a model fitted on a DataFrame gets DataFrames with its columns: no "X does not have valid feature names"
    assert not [w for w in recwarn if "feature names" in str(w.message)]


@pytest.mark.parametrize("kind", ["dask", "dask-dataframe", "numpy"])
def test_score_compute_false(process_client, kind):
    import pandas as pd

    XS, ys = X[:SMALL], Y[:SMALL]
    clf = _fit(LogisticRegression(max_iter=1000), kind, Y)
    wrapped = gd.CodedPostFit(clf, client=process_client, **EXACT)
    data = _as(kind, XS)
    y = ys if kind == "numpy" else da.from_array(ys, chunks=40)
    if kind == "dask-dataframe":
        dd = pytest.importorskip("dask.dataframe")
        y = dd.from_pandas(pd.Series(ys), npartitions=3)
    lazy = wrapped.score(data, y, compute=False)
    own = clf.score(_as("pandas", XS) if kind == "dask-dataframe" else XS, ys)
    if kind == "numpy":  # as ParallelPostFit: NumPy in, a float out
        assert isinstance(lazy, float) and lazy == own
    else:
        assert isinstance(lazy, da.Array) and lazy.ndim == 0 and lazy.dtype == np.float64
        assert float(lazy.compute(scheduler="sync")) == own
    assert wrapped.score(data, y) == own


def test_dataframe_refusals():
    import pandas as pd

    frame = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]})
    with pytest.raises(ConfigError, match=r"^X: got column 'b' of dtype \S+; expected numeric columns"):
        gd.coded_map(np.tanh, frame)
    with pytest.raises(ConfigError, match=r"^X: got a pandas Series 'a'; expected rows of features"):
        gd.coded_map(np.tanh, frame["a"])


def test_coded_map_takes_dataframes_and_unknown_chunks(process_client):
    import pandas as pd

    dd = pytest.importorskip("dask.dataframe")
    XS = X[:SMALL]
    w = np.arange(6, dtype=np.float32)[:, None]
    ref = XS @ w
    for data in (pd.DataFrame(XS), dd.from_pandas(pd.DataFrame(XS), npartitions=3), _as("unknown-chunks", XS)):
        res = gd.coded_map(_linear, data, client=process_client, **EXACT)
        est = res.estimates
        assert est.shape == (SMALL, 1)
        if isinstance(est, da.Array):
            assert sum(est.chunks[0]) == SMALL
        np.testing.assert_allclose(_eager(est), ref, rtol=1e-5, atol=1e-5)


def _linear(x):
    return x @ np.arange(6, dtype=x.dtype)[:, None]


def test_score_of_dask_x_against_a_y_of_one_column(client):
    """A breaker's find: with dask X and a 2-d y of one column, score built y's chunks from the 1-d prediction's
    and failed ('Chunks and shape must be of the same length/dimension')."""
    import dask.array as da
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(1)
    X = rng.normal(size=(301, 4))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0]))[:, None]
    model = gd.CodedPostFit(Ridge(), schemes=("uncoded",), client=client).fit(X, y.ravel())
    got = model.score(da.from_array(X, chunks=100), y)
    assert got == pytest.approx(model.estimator.score(X, y.ravel()), abs=1e-5)


def test_predict_of_integer_labels_without_classes_is_one_line_naming_the_estimator(client):
    """A breaker's find: KMeans.predict gives int labels and KMeans has no classes_: the run refused f's integer
    outputs, telling the user to cast an f they never wrote. The line now names the estimator and what to do."""
    from sklearn.cluster import KMeans

    X = np.random.default_rng(2).normal(size=(200, 3))
    model = gd.CodedPostFit(KMeans(3, n_init=2, random_state=0), schemes=("uncoded",), client=client).fit(X)
    with pytest.raises(gd.errors.WorkloadError, match=r"^CodedPostFit.predict: KMeans.predict returns int32 labels "
                                                       r".*decode its transform"):
        model.predict(X)
    np.testing.assert_allclose(model.transform(X), model.estimator.transform(X), rtol=1e-5, atol=1e-5)
