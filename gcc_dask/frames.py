"""Dask's collections as users hold them, made into the arrays a coded run reads (docs/own_model.rst).

:func:`as_rows` is the first step of :func:`gcc_dask.coded_map` and of every :class:`gcc_dask.CodedPostFit`
method: a pandas DataFrame becomes a NumPy array, a dask DataFrame a dask array chunked by its partitions (their
lengths computed, as ``to_dask_array(lengths=True)``), and a dask array with unknown chunk sizes (NaN, as after
boolean indexing) has them computed (``compute_chunk_sizes``, as dask-ml does before it needs them). A run
store needs the number of rows before the first batch, and every batch owns a known range of rows: that is why
the sizes are computed, once, on the cluster, and never a row of the data on this machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError

__all__ = ["Rows", "as_rows", "as_target", "is_dataframe", "WithColumns"]


@dataclass(frozen=True)
class Rows:
    """What :func:`as_rows` made of X.

    Attributes
    ----------
    array : numpy.ndarray or dask.array.Array or other
        X as an array of rows (X itself when it needed no conversion).
    columns : list or None
        A DataFrame's column labels (None for an array): a model fitted on a DataFrame gets them back.
    kind : str
        ``"pandas"``, ``"dask-dataframe"``, ``"dask-unknown-chunks"`` or ``"array"`` (anything else, unchanged).
    """

    array: Any
    columns: list | None = None
    kind: str = "array"


def _module(X: Any) -> str:
    return type(X).__module__.split(".")[0]


def is_dataframe(X: Any) -> bool:
    """Whether X is a pandas or dask DataFrame (without importing dask.dataframe)."""
    name = type(X).__name__
    return _module(X) in ("pandas", "dask", "dask_expr") and name == "DataFrame"


def _is_series(X: Any) -> bool:
    return _module(X) in ("pandas", "dask", "dask_expr") and type(X).__name__ == "Series"


def _frame_dtype(X: Any, name: str) -> np.dtype:
    """One floating dtype for every column: float32 when all are float32, else float64.

    Raises
    ------
    ConfigError
        A column that is not numeric (named, with its dtype).
    """
    dtypes = dict(X.dtypes.items())
    if not dtypes:
        raise ConfigError(f"{name}: got a DataFrame without columns; expected numeric columns, one feature each")
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    for column, dtype in dtypes.items():
        if not (is_numeric_dtype(dtype) or is_bool_dtype(dtype)):
            raise ConfigError(f"{name}: got column {column!r} of dtype {dtype}; expected numeric columns (int, "
                              "float or bool): encode or drop it first")
    if all(str(d) == "float32" for d in dtypes.values()):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def as_rows(X: Any, name: str = "X") -> Rows:
    """X as an array of rows for a coded run.

    Parameters
    ----------
    X : any
        A pandas DataFrame ``(n, p)`` → a NumPy array ``(n, p)``; a dask DataFrame → a dask array ``(n, p)``
        chunked by its partitions (their lengths computed on the cluster); a dask array whose chunk sizes are
        unknown → the same array with them computed (``X`` itself is left as it is). Numeric columns become
        float32 when every column is float32, else float64. Anything else is returned unchanged (NumPy, a dask
        array with known chunks, Zarr, a DataArray; :func:`gcc_dask.coded_map` checks them).
    name : str
        The argument's name in error messages.

    Returns
    -------
    Rows

    Raises
    ------
    gcc_dask.errors.ConfigError
        A Series (one column, not rows of features), a DataFrame without columns, or a column that is not
        numeric (named).
    """
    if _is_series(X):
        raise ConfigError(f"{name}: got a {type(X).__module__.split('.')[0]} Series {getattr(X, 'name', None)!r}; "
                          "expected rows of features: a DataFrame or a 2-d array (X.to_frame() for one feature)")
    if is_dataframe(X):
        dtype = _frame_dtype(X, name)
        columns = list(X.columns)
        if _module(X) == "pandas":
            return Rows(X.to_numpy(dtype=dtype), columns, "pandas")
        array = X.to_dask_array(lengths=True)
        if array.dtype != dtype:
            array = array.astype(dtype)
        return Rows(array, columns, "dask-dataframe")
    chunks = getattr(X, "chunks", None)
    if callable(getattr(X, "__dask_graph__", None)) and chunks and _unknown(chunks):
        known = X.copy()  # compute_chunk_sizes works in place: the caller's array is left as it is
        known.compute_chunk_sizes()
        return Rows(known, None, "dask-unknown-chunks")
    return Rows(X)


def _unknown(chunks: Any) -> bool:
    return any(isinstance(c, float) and math.isnan(c) for axis in chunks for c in axis)


def as_target(y: Any) -> Any:
    """y (labels or targets) as an array: a pandas Series or DataFrame → NumPy, a dask one → a dask array with
    its partition lengths computed, a dask array with unknown chunk sizes → with them computed; else y."""
    module = _module(y)
    if module == "pandas" and hasattr(y, "to_numpy"):
        return y.to_numpy()
    if (_is_series(y) or is_dataframe(y)) and hasattr(y, "to_dask_array"):
        return y.to_dask_array(lengths=True)
    chunks = getattr(y, "chunks", None)
    if callable(getattr(y, "__dask_graph__", None)) and chunks and _unknown(chunks):
        known = y.copy()
        known.compute_chunk_sizes()
        return known
    return y


class WithColumns:
    """``fn`` called on a pandas DataFrame with `columns` made of its array argument: a model fitted on a
    DataFrame sees the feature names it was fitted with (scikit-learn warns otherwise). Picklable."""

    def __init__(self, fn: Any, columns: list) -> None:
        self.fn, self.columns = fn, list(columns)

    def __call__(self, rows: Any) -> Any:
        import pandas as pd

        rows = np.asarray(rows)
        return self.fn(pd.DataFrame(rows.reshape(rows.shape[0], -1), columns=self.columns))

    def __repr__(self) -> str:
        return f"WithColumns({self.fn!r}, {len(self.columns)} columns)"
