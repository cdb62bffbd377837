"""A fitted scikit-learn estimator's predictions, coded: :class:`CodedPostFit` (docs/own_model.rst).

Like ``dask_ml.wrappers.ParallelPostFit``: ``fit`` is the estimator's own, and the post-fit methods run on a
Dask cluster, but through :func:`gcc_dask.coded_map`, so that slow workers do not hold up a prediction job.
scikit-learn is not a dependency of gcc-dask: any object with the scikit-learn methods works.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError

__all__ = ["CodedPostFit"]

_SCORES = ("auto", "decision_function", "predict_proba")

#: the post-fit methods whose outputs are not class scores when they reach :meth:`CodedPostFit._coded` (``predict``
#: of a classifier decodes its scores instead): their run is scored as a regression (``run.output_kind``)
_REGRESSION = ("predict", "transform")


def _is_dask(a: Any) -> bool:
    return callable(getattr(a, "__dask_graph__", None))




class CodedPostFit:
    """Wrap a scikit-learn estimator: ``fit`` passes through, ``predict``, ``predict_proba``,
    ``predict_log_proba``, ``decision_function`` and ``transform`` run coded on a Dask cluster.

    It takes what ``dask_ml.wrappers.ParallelPostFit`` takes: NumPy and dask arrays (unknown chunk sizes are
    computed first, as dask-ml does), pandas and dask DataFrames of numeric columns (the estimator gets a
    DataFrame with the same columns, so a model fitted on one sees its feature names;
    :func:`gcc_dask.frames.as_rows`). The same types come back: NumPy for NumPy or pandas input, a dask
    array (reading the run's store) for dask input, chunked along the samples as the input (a dask
    DataFrame's partitions), with the dtypes of the estimator's own methods (found, as ParallelPostFit finds
    its ``meta``, by calling the method on one row of zeros: never on a row of X; ``predict`` of a classifier
    has the dtype of ``classes_``). Unlike ParallelPostFit, a call runs its coded job at once (the dask array
    it returns only reads the results; ``score(..., compute=False)`` defers only the scoring).

    Decoding is linear, and a class label is not: ``predict`` of a classifier is computed from decoded
    scores, the argmax (the sign, for one score per sample) mapped to ``classes_``. The scores are those the
    estimator's own ``predict`` uses: ``decision_function`` when the estimator has one (linear models, SVMs,
    gradient boosting), else ``predict_proba`` (trees, forests, neighbours, naive Bayes, MLPs); ``scores=``
    chooses. ``predict`` of a regressor is decoded directly. The decoded values are estimates (stored in
    float32), not the estimator's own outputs: how close they come depends on the scheme, N − S and how
    smooth the method is along a group of similar rows (a linear ``decision_function`` decodes best); run
    with ``run={"reference": True}`` to have ``last_result_.summary`` report RelAcc and the RMSE
    (docs/own_model.rst, section 'scikit-learn'). ``predict`` of a regressor and ``transform`` run with
    ``run.output_kind: regression`` (scored by the relative RMSE, R² and the largest error, not by the RelAcc
    of an argmax) unless ``run={"output_kind": ...}`` says otherwise; the class scores keep ``auto``.

    Parameters
    ----------
    estimator : scikit-learn estimator
        Fitted before a post-fit call (here with :meth:`fit`, or beforehand).
    scores : {"auto", "decision_function", "predict_proba"}
        What ``predict`` of a classifier decodes (see above).
    schemes, client, out, performance_report, **config
        As :func:`gcc_dask.coded_map` (e.g. ``code={"num_inputs": 8, "num_workers": 12}``). ``client`` is not
        an estimator parameter (``get_params`` leaves it out, so a clone uses Dask's default client). ``out`` is
        a folder: each call writes ``<method>.zarr`` in it, replacing that of the call before (a dask result of
        the call before then raises :class:`~gcc_dask.errors.StoreError` when computed, instead of reading the
        new call's rows: compute it first, or leave ``out`` unset); by default every call gets a temporary store.

    Attributes
    ----------
    last_result_ : gcc_dask.CodedResult
        The coded run of the last post-fit call (its store and summary).

    Raises
    ------
    AttributeError
        From a post-fit method the estimator lacks (as ParallelPostFit).
    gcc_dask.errors.ConfigError
        An unknown or invalid config keyword, or an unknown `scores`.
    """

    def __init__(self, estimator=None, *, scores: str = "auto", schemes=("gcc",), client=None, out=None,
                 performance_report=None, **config: Any) -> None:
        if scores not in _SCORES:
            raise ConfigError(f"scores: got {scores!r}; expected one of {', '.join(_SCORES)}")
        self.estimator, self.scores, self.schemes = estimator, scores, schemes
        self.client, self.out, self.performance_report = client, out, performance_report
        self.config = dict(config)

    # ------------------------------------------------------------------------------ scikit-learn protocol
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments (``**config`` spread out), so that ``sklearn.base.clone`` works; not
        ``client`` (a connection is not copied: a clone uses Dask's default client)."""
        params = {"estimator": self.estimator, "scores": self.scores, "schemes": self.schemes,
                  "out": self.out, "performance_report": self.performance_report, **self.config}
        if deep and hasattr(self.estimator, "get_params"):
            params.update({f"estimator__{k}": v for k, v in self.estimator.get_params(deep=True).items()})
        return params

    def set_params(self, **params: Any) -> CodedPostFit:
        inner = {k.split("__", 1)[1]: v for k, v in params.items() if k.startswith("estimator__")}
        if inner:
            self.estimator.set_params(**inner)
        for key, value in params.items():
            if key.startswith("estimator__"):
                continue
            if key in ("estimator", "scores", "schemes", "client", "out", "performance_report"):
                setattr(self, key, value)
            else:
                self.config[key] = value
        return self

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.config.items())
        return f"CodedPostFit(estimator={self.estimator!r}, scores={self.scores!r}{extra})"

    @property
    def _estimator_type(self) -> str | None:
        return getattr(self.estimator, "_estimator_type", None)

    def fit(self, X, y=None, **kwargs: Any) -> CodedPostFit:
        """Fit the estimator (``estimator.fit(X, y, **kwargs)``, in this process) and copy its learned
        attributes (``classes_``, ``coef_``, ...) onto the wrapper; returns the wrapper."""
        fitted = self.estimator.fit(X, y, **kwargs)
        self._copy_learned(fitted)
        return self

    def partial_fit(self, X, y=None, **kwargs: Any) -> CodedPostFit:
        """``estimator.partial_fit(X, y, **kwargs)``, in this process; returns the wrapper."""
        fitted = self.estimator.partial_fit(X, y, **kwargs)
        self._copy_learned(fitted)
        return self

    def _copy_learned(self, fitted: Any) -> None:
        for key, value in vars(fitted).items():
            if key.endswith("_") and not key.startswith("_"):
                setattr(self, key, value)

    # ------------------------------------------------------------------------------------ post-fit
    def _coded(self, method: str, X, prepared=None):
        """The decoded outputs of ``estimator.<method>`` on X (float32; NumPy or dask like X, a dask DataFrame
        giving a dask array). `prepared`: ``(fn, rows)`` from :meth:`_rows`, when made already."""
        from gcc_dask.coded import coded_map

        fn, rows = prepared if prepared is not None else self._rows(method, X)
        out = None
        if self.out is not None:
            import os

            out = os.path.join(os.fspath(self.out), f"{method}.zarr")
        config = dict(self.config)
        run = config.get("run")
        if method in _REGRESSION and (run is None or (isinstance(run, dict) and "output_kind" not in run)):
            # outputs that are not class scores: not scored by the RelAcc of their argmax
            config["run"] = {**(run or {}), "output_kind": "regression"}
        if out is not None:
            config["store"] = {**config.get("store", {}), "overwrite": True}
        result = coded_map(fn, rows.array, schemes=self.schemes, client=self.client, out=out,
                           performance_report=self.performance_report, **config)
        self.last_result_ = result
        return result.estimates

    def _rows(self, method: str, X):
        """``estimator.<method>`` (given a DataFrame of the original columns when X was a DataFrame) and X as
        rows (:func:`gcc_dask.frames.as_rows`: a dask DataFrame's partition lengths, or a dask array's unknown
        chunk sizes, are computed here, once a call)."""
        from gcc_dask.frames import WithColumns, as_rows

        fn = self._method(method)
        rows = as_rows(X)
        if rows.columns is not None:
            fn = WithColumns(fn, rows.columns)
        return fn, rows

    def _method(self, method: str):
        if not hasattr(self.estimator, method):
            raise AttributeError(f"The wrapped estimator '{self.estimator}' does not have a '{method}' method.")
        return getattr(self.estimator, method)

    @staticmethod
    def _dtype(fn, X) -> np.dtype:
        """The dtype of `fn` (an estimator's method) on one row of zeros of X's shape and dtype (not X's data)."""
        row = np.zeros((1, *X.shape[1:]), dtype=getattr(X, "dtype", np.float64))
        try:
            return np.asarray(fn(row)).dtype
        except Exception:  # an estimator that refuses zeros: float64, as scikit-learn mostly returns
            return np.dtype(np.float64)

    def _decoded(self, method: str, X):
        """``estimator.<method>`` decoded, in its own floating dtype (float64 for another); a method that returns
        integer labels (a clusterer's ``predict``: no class scores to take the argmax of) is one
        :class:`~gcc_dask.errors.WorkloadError` line naming the estimator and what to decode instead."""
        fn, rows = self._rows(method, X)
        dtype = self._dtype(fn, rows.array)
        if dtype.kind in "iub":  # nothing real to decode
            from gcc_dask.errors import WorkloadError

            raise WorkloadError(
                f"CodedPostFit.{method}: {type(self.estimator).__name__}.{method} returns {dtype} labels and the "
                f"estimator has no classes_ (no class scores whose argmax gives them), so there is nothing real "
                "to decode; expected an estimator whose predict returns real values, or a classifier: decode "
                "its transform (for KMeans, the distances to the centres; the label is their argmin) instead")
        return self._coded(method, X, (fn, rows)).astype(dtype if dtype.kind == "f" else np.float64)

    def predict_proba(self, X):
        """Class probabilities, decoded: ``(n, n_classes)`` (NumPy, or dask for dask input), in the dtype of the
        estimator's own ``predict_proba``. Each probability is estimated: a row sums to 1 up to rounding, but
        an approximate scheme's values can fall below 0 or above 1 (docs/own_model.rst, section 'scikit-learn')."""
        return self._decoded("predict_proba", X)

    def predict_log_proba(self, X):
        """``log`` of :meth:`predict_proba` (NaN where a decoded probability is not positive)."""
        proba = self.predict_proba(X)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(proba)

    def decision_function(self, X):
        """Decision scores, decoded: ``(n,)`` or ``(n, n_classes)``, in the estimator's own dtype."""
        return self._decoded("decision_function", X)

    def transform(self, X):
        """``estimator.transform`` decoded: ``(n, n_components)``, in the estimator's own dtype."""
        return self._decoded("transform", X)

    def predict(self, X):
        """Predictions: for a classifier, ``classes_`` at the argmax of the decoded scores (see the class
        docs), shape ``(n,)`` with the dtype of ``classes_`` (``classes_[0]`` in the rows of a batch that could
        not be decoded, counted as ``missing`` in ``last_result_.summary``); for a regressor, the decoded
        ``predict``."""
        classes = getattr(self.estimator, "classes_", None)
        if classes is None:
            return self._decoded("predict", X)
        method = self.scores
        if method == "auto":
            method = "decision_function" if hasattr(self.estimator, "decision_function") else "predict_proba"
        scores = self._coded(method, X)
        classes = np.asarray(classes)
        if _is_dask(scores):
            return scores.map_blocks(_to_classes, classes, drop_axis=list(range(1, scores.ndim)),
                                     dtype=classes.dtype)
        return _to_classes(scores, classes)

    def score(self, X, y, compute: bool = True):
        """Accuracy of :meth:`predict` (a classifier) or R² of it (a regressor), against y.

        Parameters
        ----------
        X : array-like or DataFrame
            As :meth:`predict`: ``(n, n_features)``.
        y : array-like, pandas or dask Series
            ``(n,)`` labels (a classifier) or ``(n,)`` / ``(n, n_targets)`` targets (a regressor).
        compute : bool
            As ``ParallelPostFit.score``: False returns the score as a 0-d dask array when X or y is a dask
            collection (a float otherwise). Only the scoring is deferred: the coded run that predicts X is
            eager (its cutoff acts on the arrival times of its shards, so it runs when called), and the lazy
            score reads its results from the run store.

        Returns
        -------
        float, or a 0-d dask array (float64) with ``compute=False`` and dask input.

        Raises
        ------
        ValueError
            y does not have one entry per row of X.
        """
        from gcc_dask.frames import as_target

        pred = self.predict(X)
        y = as_target(y)
        if not _is_dask(y):
            y = np.asarray(y)
        if y.shape[0] != pred.shape[0]:
            raise ValueError(f"y: got {y.shape[0]} entries; expected one per row of X ({pred.shape[0]})")
        lazy = _is_dask(pred) or _is_dask(y)
        if lazy:
            import dask.array as da

            # along the samples the other's chunks, whole along any other axis (pred and y may differ in
            # dimensions: a 1-d prediction against a y of one column)
            if not _is_dask(pred):
                pred = da.from_array(pred, chunks=(y.chunks[0], *((d,) for d in pred.shape[1:])))
            if not _is_dask(y):
                y = da.from_array(y, chunks=(pred.chunks[0], *((d,) for d in y.shape[1:])))
            elif y.chunks[0] != pred.chunks[0]:
                y = y.rechunk({0: pred.chunks[0]})
            xp = da
        else:
            xp = np
        if getattr(self.estimator, "classes_", None) is not None:
            value = xp.mean(pred == y)
        else:
            pred = pred.reshape(y.shape) if pred.ndim != y.ndim else pred
            residual = ((y - pred) ** 2).sum(axis=0)
            total = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
            value = (1.0 - residual / xp.where(total > 0, total, xp.nan)).mean()  # per target, averaged
        if lazy and not compute:
            return value.astype(np.float64)
        return float(value.compute() if lazy else value)


def _to_classes(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The class of each row of decoded scores: the argmax, or for one score per row (a binary
    ``decision_function``) ``classes[1]`` where it is positive, as scikit-learn's ``predict``."""
    scores = np.asarray(scores)
    if scores.ndim == 1:
        return classes[(scores > 0).astype(np.intp)]
    filled = np.where(np.isnan(scores), -np.inf, scores)  # an undecodable row: the first class
    return classes[np.argmax(filled, axis=1)]
