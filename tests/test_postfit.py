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


def test_missing_method_and_bad_scores(fitted):
    with pytest.raises(AttributeError, match="does not have a 'transform' method"):
        gd.CodedPostFit(fitted).transform(X)
    with pytest.raises(ConfigError, match=r"scores: got 'proba'; expected one of auto, decision_function"):
        gd.CodedPostFit(fitted, scores="proba")
