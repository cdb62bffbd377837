"""The CodingScheme interface: registry, validation messages, caching, pickling, NaN policy, coincidences."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
from coding_helpers import EXTRA

from gcc_dask.coding import CodingScheme, CoincidenceWarning, list_codes, make_code, register_code
from gcc_dask.errors import ConfigError, GccDaskError, InvalidInputError, NotEnoughResultsError

ALL = ["bacc", "bspline", "gcc", "lcc", "letcc", "replication", "speculative", "uncoded"]


def build(name: str, K: int = 4, N: int = 12, **kw) -> CodingScheme:
    N = {"uncoded": K, "speculative": 2 * K}.get(name, N)
    return make_code(name, num_inputs=K, num_workers=N, **{**EXTRA.get(name, {}), **kw})


def test_list_codes_is_sorted_and_complete():
    assert list_codes() == ALL


@pytest.mark.parametrize("name", ALL)
def test_interface_attributes(name):
    code = build(name)
    K, N = code.num_inputs, code.num_workers
    assert code.name == name
    assert code.data_points.shape == (K,) and code.data_points.dtype == np.float64
    assert code.worker_points.shape == (N,) and code.worker_points.dtype == np.float64
    assert code.encoder_matrix.shape == (N, K) and code.encoder_matrix.dtype == np.float64
    assert code.recovery_threshold is None or isinstance(code.recovery_threshold, int)
    assert isinstance(code.min_received, int) and 1 <= code.min_received <= N
    with pytest.raises(ValueError, match="read-only"):
        code.encoder_matrix[0, 0] = 1.0
    D = code.decoder_matrix(np.arange(N))
    assert D.shape == (K, N) and D.dtype == np.float64
    with pytest.raises(ValueError, match="read-only"):
        D[0, 0] = 1.0
    # params are JSON-able and rebuild the same scheme
    again = make_code(name, **json.loads(json.dumps(code.params)))
    np.testing.assert_array_equal(again.encoder_matrix, code.encoder_matrix)


@pytest.mark.parametrize("name", ALL)
def test_pickle_round_trip(name):
    code = build(name)
    code.decoder_matrix(np.arange(code.num_workers))  # warm the cache: it must not break pickling
    clone = pickle.loads(pickle.dumps(code))
    assert type(clone) is type(code) and clone.params == code.params
    np.testing.assert_array_equal(clone.encoder_matrix, code.encoder_matrix)
    F = np.arange(code.num_workers)
    np.testing.assert_array_equal(clone.decoder_matrix(F), code.decoder_matrix(F))


def test_decoder_cache_hits_and_is_bounded():
    code = make_code("gcc", num_inputs=4, num_workers=12)
    F = np.array([0, 2, 3, 5, 7, 11])
    assert code.decoder_matrix(F) is code.decoder_matrix(F.copy())
    assert code.decoder_matrix(F) is code.decoder_matrix(F.tolist())  # same indices, other container
    assert code.decoder_matrix(F) is code.decoder_matrix(F.astype(np.int32))
    for i in range(300):
        code.decoder_matrix(np.random.default_rng(i).permutation(12)[:8])
    assert code._lookup.cache_info().currsize <= 256


def test_boolean_mask_is_accepted_as_received():
    code = make_code("bacc", num_inputs=4, num_workers=12)
    mask = np.zeros(12, dtype=bool)
    mask[[1, 4, 5, 9]] = True
    np.testing.assert_array_equal(code.decoder_matrix(mask), code.decoder_matrix([1, 4, 5, 9]))


def test_register_code_adds_a_scheme():
    @register_code("test-identity")
    class Identity(CodingScheme):
        check_coincidence = False

        def __init__(self, *, num_inputs, num_workers, points="chebyshev", nan_policy="raise"):
            super().__init__(num_inputs=num_inputs, num_workers=num_workers, points=points, nan_policy=nan_policy)
            self._finish()

        def _build_encoder(self):
            return np.eye(self.num_workers, self.num_inputs)

        def _decoder_map(self, rs, z):
            return np.eye(z.size, rs.size)

    try:
        code = make_code("test-identity", num_inputs=3, num_workers=3)
        np.testing.assert_array_equal(code.encode(np.arange(3.0)), np.arange(3.0))
        assert "test-identity" in list_codes()
    finally:
        from gcc_dask.coding import registry

        registry._CODES.pop("test-identity")


# -- bad configuration ---------------------------------------------------------------------------------

BAD_PARAMS = [
    ("nope", {"num_inputs": 4, "num_workers": 8}, "unknown code 'nope'"),
    ("gcc", {"num_inputs": 0, "num_workers": 8}, r"num_inputs must be an integer in \[1, 65536\]; got num_inputs=0"),
    ("gcc", {"num_inputs": 2.5, "num_workers": 8}, "num_inputs=2.5"),
    ("gcc", {"num_inputs": 4, "num_workers": True}, "num_workers=True"),
    ("gcc", {"num_inputs": 4, "num_workers": 1}, "min_received=2"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "lambda_dec": -1.0}, "lambda_dec must be a finite float >= 0"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "lambda_dec": float("nan")}, "lambda_dec=nan"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "lambda_dec": "auto"}, "'gcv'"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "lambda_enc": "gcv"}, "lambda_enc="),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "kernel": "rbf"}, "kernel must be one of"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "length_scale": 0.0}, "length_scale must be a finite float > 0"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "points": "random"}, "points must be one of"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "nan_policy": "omit"}, "nan_policy must be one of"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "on_coincidence": "fix"}, "on_coincidence must be one of"),
    ("gcc", {"num_inputs": 4, "num_workers": 8, "lambda": 0.1}, r"unknown parameter\(s\) \['lambda'\]"),
    ("letcc", {"num_inputs": 4, "num_workers": 8, "kernel": "matern32"}, "unknown parameter"),
    ("lcc", {"num_inputs": 4, "num_workers": 8}, r"needs parameter\(s\) \['degree'\]"),
    ("lcc", {"num_inputs": 4, "num_workers": 8, "degree": 0}, "degree must be an integer >= 1"),
    ("lcc", {"num_inputs": 4, "num_workers": 6, "degree": 2}, "at least .* = 7"),
    ("bspline", {"num_inputs": 4, "num_workers": 3}, "min_received=4"),
    ("replication", {"num_inputs": 4, "num_workers": 10, "extra": [0, 0]}, r"extra: got \[0, 0\]; expected"),
    ("replication", {"num_inputs": 4, "num_workers": 2}, "at least num_inputs"),
    ("replication", {"num_inputs": 4, "num_workers": 8, "on_coincidence": "warn"}, "unknown parameter"),
    ("uncoded", {"num_inputs": 4, "num_workers": 8}, "num_workers must equal num_inputs"),
]


@pytest.mark.parametrize(
    ("name", "params", "match"),
    BAD_PARAMS,
    ids=[
        "unknown-code", "zero-inputs", "float-inputs", "bool-workers", "gcc-one-worker", "negative-lambda",
        "nan-lambda", "unknown-lambda-string", "gcv-encoder", "unknown-kernel", "zero-length-scale",
        "unknown-points", "unknown-nan-policy", "unknown-coincidence", "unknown-param", "letcc-kernel",
        "lcc-no-degree", "lcc-zero-degree", "lcc-too-few-workers", "bspline-three-workers",
        "replication-repeated-extra", "replication-fewer-workers", "replication-coincidence", "uncoded-n-ne-k",
    ],
)
def test_make_code_rejects(name, params, match):
    with pytest.raises(ConfigError, match=match) as info:
        make_code(name, **params)
    assert isinstance(info.value, GccDaskError) and isinstance(info.value, ValueError)


TOO_LARGE = [
    ("gcc", {"num_inputs": 8, "num_workers": 100_000},
     r"num_workers must be an integer in \[1, 65536\] \(one Dask task per worker per batch.*num_workers=100000"),
    ("bacc", {"num_inputs": 8, "num_workers": 2 * 10**9}, r"num_workers=2000000000$"),
    ("bacc", {"num_inputs": 100_000, "num_workers": 8}, r"num_inputs must be an integer in \[1, 65536\]"),
    ("bacc", {"num_inputs": 8192, "num_workers": 16384},
     r"num_inputs \* num_workers must be at most 67,108,864 .* would take 1.0 GiB"),
    ("uncoded", {"num_inputs": 16384, "num_workers": 16384}, r"num_inputs \* num_workers must be at most"),
    ("replication", {"num_inputs": 8, "num_workers": 8 * 10**6}, r"num_workers=8000000$"),
]


@pytest.mark.parametrize(("name", "params", "match"), TOO_LARGE,
                         ids=["gcc-1e5-workers", "bacc-2e9-workers", "bacc-1e5-inputs", "bacc-encoder-1GiB",
                              "uncoded-encoder-2GiB", "replication-8e6-workers"])
def test_make_code_refuses_sizes_no_cluster_meets_before_allocating(name, params, match):
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=match):
            make_code(name, **params)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"allocated {peak} bytes before refusing"


def test_make_code_accepts_the_largest_sizes():
    code = make_code("bacc", num_inputs=8, num_workers=65_536)
    assert code.encoder_matrix.shape == (65_536, 8)


# -- bad data ------------------------------------------------------------------------------------------

GCC = dict(num_inputs=4, num_workers=10)
Y_OK = np.ones((6, 3))
F_OK = np.array([0, 1, 3, 5, 8, 9])

BAD_CALLS = [
    ("decode", (Y_OK, [0, 1, 3, 5, 8, 10]), InvalidInputError, r"outside \[0, 10\)"),
    ("decode", (Y_OK, [0, 1, 3, 5, -1, 9]), InvalidInputError, r"\[-1\] outside"),
    ("decode", (Y_OK, [0, 1, 3, 3, 8, 9]), InvalidInputError, r"repeated indices \[3\]"),
    ("decode", (Y_OK, [0.0, 1.0, 3.0, 5.0, 8.0, 9.0]), InvalidInputError, "integer worker indices"),
    ("decode", (Y_OK, [[0, 1, 3], [5, 8, 9]]), InvalidInputError, "must be 1-D"),
    ("decode", (np.ones((1, 3)), [4]), NotEnoughResultsError, "needs at least 2"),
    ("decode", (np.ones((0, 3)), []), NotEnoughResultsError, "received has 0 result"),
    ("decode", (np.ones((5, 3)), F_OK), InvalidInputError, r"Y must have shape \(6, ...\)"),
    ("decode", (np.ones((6, 3), dtype=np.int64), F_OK), InvalidInputError, "real floating"),
    ("decode", (np.full((6, 3), np.inf), F_OK), InvalidInputError, "Y holds NaN or Inf"),
    ("encode", (np.ones((3, 2)),), InvalidInputError, r"X must have shape \(4, ...\)"),
    ("encode", (np.ones((4, 2), dtype=np.int32),), InvalidInputError, "got dtype int32"),
    ("encode", (np.array([[1.0, np.nan]] * 4),), InvalidInputError, "X holds NaN or Inf"),
    ("encode", (np.float64(3.0),), InvalidInputError, "X must have shape"),
]


@pytest.mark.parametrize(
    ("method", "args", "exc", "match"),
    BAD_CALLS,
    ids=[
        "index-too-large", "negative-index", "repeated-index", "float-indices", "2d-received",
        "below-min-received", "empty-received", "rows-ne-received", "int-results", "inf-results",
        "wrong-batch-size", "int-inputs", "nan-inputs", "scalar-input",
    ],
)
def test_bad_data_is_rejected(method, args, exc, match):
    code = make_code("gcc", **GCC)
    with pytest.raises(exc, match=match):
        getattr(code, method)(*args)


def test_return_error_only_for_gcc():
    code = make_code("bacc", **GCC)
    with pytest.raises(ConfigError, match="return_error"):
        code.decode(Y_OK, F_OK, return_error=True)


def test_decodable_does_not_raise_below_min_received():
    code = make_code("gcc", **GCC)
    assert not code.decodable([3]).any()
    assert code.decodable(F_OK).all()
    with pytest.raises(InvalidInputError):
        code.decodable([3, 3])


def test_nan_policy_propagate_lets_nan_through():
    code = make_code("bacc", **GCC, nan_policy="propagate")
    X = np.ones((4, 2))
    X[1, 0] = np.nan
    out = code.encode(X)
    assert np.isnan(out[:, 0]).all() and np.isfinite(out[:, 1]).all()
    Y = np.ones((6, 2))
    Y[2, 1] = np.inf
    assert not np.isfinite(code.decode(Y, F_OK)[:, 1]).all()


def test_huge_finite_values_are_not_mistaken_for_nan():
    """Replication gathers rows: values near the float32 limit pass through unchanged."""
    code = make_code("replication", num_inputs=4, num_workers=8)
    X = np.full((4, 3), 3e38, dtype=np.float32)
    out = code.encode(X)
    np.testing.assert_array_equal(out, np.vstack([X, X]))


def _near_max(shape, dtype, flip):
    A = np.full(shape, 0.97 * np.finfo(dtype).max, dtype=dtype)
    A[flip] *= -1  # rows of E and D mix neighbours with coefficients of both signs and |sum| > 1
    return A


OVERFLOW = [
    ("gcc", "encode", _near_max((4, 3), np.float32, 1), "X is finite but encoding it overflows float32 with code "
     r"'gcc' \(largest \|X\| 3.3e\+38, largest float32 3.4e\+38; the code's weights amplify it\): cast X to float64 "
     r"or scale it down"),
    ("gcc", "encode", _near_max((4, 3), np.float16, 1), "X is finite but encoding it overflows float16"),
    ("bacc", "decode", _near_max((10, 3), np.float32, slice(None, None, 2)),
     "Y is finite but decoding it overflows float32 with code 'bacc'"),
]


@pytest.mark.parametrize(("name", "method", "A", "match"), OVERFLOW,
                         ids=["gcc-encode-float32", "gcc-encode-float16", "bacc-decode-float32"])
def test_coded_values_that_overflow_the_dtype_raise_unless_propagate(name, method, A, match):
    """Finite data whose coded values overflow the dtype: an error with nan_policy='raise' (not a silent inf),
    the bare matmul's inf with nan_policy='propagate'."""
    args = (A,) if method == "encode" else (A, np.arange(10))
    with pytest.raises(InvalidInputError, match=match):
        getattr(make_code(name, num_inputs=4, num_workers=10), method)(*args)
    code = make_code(name, num_inputs=4, num_workers=10, nan_policy="propagate")
    M = code.encoder_matrix if method == "encode" else code.decoder_matrix(np.arange(10))
    with np.errstate(over="ignore", invalid="ignore"):
        expected = M.astype(A.dtype) @ A
        out = getattr(code, method)(*args)
    assert not np.isfinite(expected).all()
    np.testing.assert_array_equal(out, expected)


def test_an_overflowing_row_of_ones_alone_is_no_error():
    """The fallback probe (a row of ones) sums the inputs and may overflow where no output does."""
    import array_api_compat.numpy as xp

    code = make_code("gcc", num_inputs=2, num_workers=4)
    A = np.full((2, 3), 3e38, dtype=np.float32)
    out = code._apply(xp, np.eye(2), A, {}, "X")  # no row weighs both inputs: the row of ones is the probe
    np.testing.assert_array_equal(out, A)


SCHEMES_AND_SIZES = [("gcc", 4, 10), ("gcc", 8, 256), ("letcc", 4, 10), ("bacc", 4, 10), ("bspline", 4, 10),
                     ("bspline", 8, 256), ("lcc", 4, 10),
                     ("replication", 4, 8), ("uncoded", 4, 4)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,k,n", SCHEMES_AND_SIZES)
def test_nan_or_inf_anywhere_is_found(name, k, n, dtype):
    """Every position of X and of Y: a NaN or an Inf there raises (the probe row sees every column)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = make_code(name, num_inputs=k, num_workers=n, **EXTRA.get(name, {}))
    received = np.arange(n)
    rng = np.random.default_rng(0)
    for bad in (np.nan, np.inf, -np.inf):
        for i in range(k):
            X = rng.random((k, 5)).astype(dtype)
            X[i, (i * 3) % 5] = bad
            with pytest.raises(InvalidInputError, match="X holds NaN or Inf"):
                code.encode(X)
        for i in range(n):
            Y = rng.random((n, 5)).astype(dtype)
            Y[i, (i * 3) % 5] = bad
            with pytest.raises(InvalidInputError, match="Y holds NaN or Inf"):
                code.decode(Y, received)
        code.encode(rng.random((k, 5)).astype(dtype))  # and clean data pass
        code.decode(rng.random((n, 5)).astype(dtype), received)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,k,n", SCHEMES_AND_SIZES)
def test_encode_of_some_workers_is_those_rows(name, k, n, dtype):
    """``encode(X, workers=...)``: rows ``E[workers] X`` in that order (what one shard encodes for itself), equal
    to the whole encode's rows to rounding (bit for bit for the selection schemes, a gather); NaN/Inf found."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = make_code(name, num_inputs=k, num_workers=n, **EXTRA.get(name, {}))
    X = np.random.default_rng(1).random((k, 3, 7)).astype(dtype)
    whole = code.encode(X)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for workers in ([n - 1], [0, n - 1, 1], list(range(n))):
        some = code.encode(X, workers=workers)
        assert some.shape == (len(workers), 3, 7) and some.dtype == X.dtype
        if code.selection:
            np.testing.assert_array_equal(some, whole[workers])
        else:
            np.testing.assert_allclose(some, whole[workers], rtol=tol, atol=tol * np.abs(whole).max())
    np.testing.assert_array_equal(code.encode(X, workers=(n - 1,)), code.encode(X, workers=np.array([n - 1])))
    for i in range(k):  # a NaN in any input reaches every coded input that weighs it, or is found in X
        bad = X.copy()
        bad[i, 1, 2] = np.nan
        for w in range(0, n, max(1, n // 5)):
            if code.selection and code.selected_input(w) != i:
                continue
            with pytest.raises(InvalidInputError, match="X holds NaN or Inf"):
                code.encode(bad, workers=[w])


@pytest.mark.parametrize("workers", [[], [-1], [12], [0.5], [[0, 1]], "0", [1, True], (np.True_,), None])
def test_encode_refuses_bad_workers(workers):
    code = build("gcc", K=4, N=12)
    X = np.ones((4, 2))
    if workers is None:
        assert code.encode(X, workers=None).shape == (12, 2)
        return
    with pytest.raises(InvalidInputError, match=r"workers: got .*; expected a non-empty sequence of worker indices "
                                                r"in \[0, 12\) for code 'gcc'"):
        code.encode(X, workers=workers)


def test_a_matrix_without_a_probe_row_gets_a_row_of_ones():
    """Rows with a zero coefficient (or one that float32 flushes to zero) cannot serve as the probe."""
    import array_api_compat.numpy as xp

    M = np.array([[1.0, 0.0], [0.0, 1.0], [1e-300, 2.0]])
    Mx, probe = CodingScheme._converted(xp, M, np.dtype("float64"), "cpu", True)
    assert probe == 2 and Mx.shape == (3, 2)  # one row weighs both inputs
    Mx, probe = CodingScheme._converted(xp, M, np.dtype("float32"), "cpu", True)
    assert probe == 3 and Mx.shape == (4, 2) and (Mx[3] == 1).all()  # 1e-300 is 0 in float32: 2 rows needed
    Mx, probe = CodingScheme._converted(xp, M, np.dtype("float32"), "cpu", False)
    assert probe is None and Mx.shape == (3, 2)
    wide = np.kron(np.eye(2), np.ones((1, 20)))  # 2 rows, 40 columns: two probes are within budget
    Mx, probe = CodingScheme._converted(xp, wide, np.dtype("float32"), "cpu", True)
    assert probe == (0, 1) and Mx.shape == (2, 40)


@pytest.mark.parametrize("name", ["uncoded", "replication"])
def test_selection_schemes_keep_a_nan_in_its_own_row(name):
    """Replication and uncoded gather rows (no matmul): a NaN input spoils its own output only."""
    k = 4
    code = make_code(name, num_inputs=k, num_workers=k if name == "uncoded" else 2 * k, nan_policy="propagate")
    X = np.arange(k * 3, dtype=np.float64).reshape(k, 3)
    X[2, 1] = np.nan
    coded = code.encode(X)
    bad_rows = np.flatnonzero(np.isnan(coded).any(axis=1))
    np.testing.assert_array_equal(bad_rows % k, np.full(bad_rows.size, 2))
    received = np.arange(code.num_workers)[::-1]  # the last copies first
    out = code.decode(coded[received], received)
    np.testing.assert_array_equal(np.flatnonzero(np.isnan(out).any(axis=1)), [2])
    np.testing.assert_array_equal(np.nan_to_num(out), np.nan_to_num(X))
    np.testing.assert_array_equal(code.decoder_matrix(received) @ np.nan_to_num(coded[received]), np.nan_to_num(X))


# -- coincidences ----------------------------------------------------------------------------------------


def test_coincident_points_warn_by_default():
    with pytest.warns(CoincidenceWarning, match="worker point"):
        code = make_code("gcc", num_inputs=10, num_workers=41)
    assert code.coincident_points.shape == (10, 2)
    k, n = code.coincident_points.T
    np.testing.assert_allclose(code.data_points[k], code.worker_points[n], atol=1e-12)


def test_even_worker_counts_never_coincide():
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoincidenceWarning)
        for N in (16, 40, 80, 640):
            assert make_code("gcc", num_inputs=10, num_workers=N).coincident_points.size == 0


@pytest.mark.parametrize("points", ["chebyshev", "equispaced"])
def test_nudge_removes_coincidences(points):
    code = make_code("bacc", num_inputs=10, num_workers=41, points=points, on_coincidence="nudge")
    assert code.coincident_points.size == 0
    assert code.nudged_workers.size == 10
    beta = code.worker_points
    assert np.all(np.diff(beta) > 0) and beta[0] == -1.0 and beta[-1] == 1.0
    ref = make_code("bacc", num_inputs=10, num_workers=41, points=points, on_coincidence="ignore")
    untouched = np.setdiff1d(np.arange(41), code.nudged_workers)
    np.testing.assert_array_equal(beta[untouched], ref.worker_points[untouched])


def test_ignore_keeps_coincidences_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoincidenceWarning)
        code = make_code("gcc", num_inputs=10, num_workers=41, on_coincidence="ignore")
    assert code.coincident_points.shape == (10, 2)


def test_probe_rows_use_the_data_dtype_of_any_namespace():
    """Namespaces with dtype objects of their own (torch.float32, ...) are matched to NumPy's by name, so the
    probe rows are chosen on the coefficients as the data's dtype holds them."""
    from gcc_dask.coding.base import _host_dtype

    class _Dtype:  # str() like torch.float32
        def __init__(self, name):
            self.name_ = name

        def __str__(self):
            return f"somelib.{self.name_}"

    assert _host_dtype(_Dtype("float32")) == np.float32 and _host_dtype(_Dtype("float64")) == np.float64
    assert _host_dtype(np.dtype("float32")) == np.float32
    assert _host_dtype(_Dtype("no_such_type")) == np.float64
