"""Scheme-specific guarantees: interpolation, Berrut weights, LCC exactness, replication and uncoded."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from scipy.interpolate import make_smoothing_spline

from gcc_dask.coding import ConditioningWarning, berrut_matrix, make_code
from gcc_dask.errors import ConfigError, NotEnoughResultsError

RNG = np.random.default_rng(1234)


def random_received(N: int, size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(N)[:size]


# -- gcc / letcc -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("letcc", {}),
        ("gcc", {"kernel": "sobolev2"}),
        ("gcc", {"kernel": "sobolev1"}),
        ("gcc", {"kernel": "matern32"}),
        ("gcc", {"kernel": "matern52"}),
        ("gcc", {"kernel": "gaussian", "length_scale": 0.1}),
    ],
    ids=["letcc", "sobolev2", "sobolev1", "matern32", "matern52", "gaussian"],
)
@pytest.mark.parametrize("points", ["chebyshev", "equispaced"])
def test_gcc_interpolates_at_lambda_zero(name, params, points):
    """u_enc(α_k) = x_k and u_dec(β_n) = ỹ_n when λ_enc = λ_dec = 0."""
    code = make_code(name, num_inputs=7, num_workers=30, points=points, on_coincidence="ignore", **params)
    tol = 1e-12 if params.get("kernel", "sobolev2") in ("sobolev2", "sobolev1") else 1e-6  # PD Gram: cond ~1e12
    np.testing.assert_allclose(code.encoder_at(code.data_points), np.eye(7), atol=tol)
    F = random_received(30, 22, 0)
    np.testing.assert_allclose(code.decoder_at(F, code.worker_points[F]), np.eye(22), atol=tol)


@pytest.mark.parametrize("lam", [1e-9, 1e-6, 1e-3])
def test_gcc_sobolev2_is_make_smoothing_spline_in_mean_form(lam):
    """Decoder = make_smoothing_spline(β_F, ỹ_F, lam=|F|·λ_dec); encoder likewise with K·λ_enc."""
    K, N = 8, 40
    code = make_code("gcc", num_inputs=K, num_workers=N, lambda_enc=lam, lambda_dec=lam)
    F = np.sort(random_received(N, 33, 1))
    beta = code.worker_points[F]
    inside = (code.data_points >= beta[0]) & (code.data_points <= beta[-1])
    ref = make_smoothing_spline(beta, np.eye(F.size), lam=F.size * lam)(code.data_points)
    np.testing.assert_allclose(code.decoder_matrix(F)[inside], ref[inside], atol=1e-8)
    ref_e = make_smoothing_spline(code.data_points, np.eye(K), lam=K * lam)(code.worker_points)
    inside_e = (code.worker_points >= code.data_points[0]) & (code.worker_points <= code.data_points[-1])
    np.testing.assert_allclose(code.encoder_matrix[inside_e], ref_e[inside_e], atol=1e-8)


def test_letcc_is_gcc_sobolev2():
    a = make_code("letcc", num_inputs=6, num_workers=20, lambda_dec=1e-5)
    b = make_code("gcc", num_inputs=6, num_workers=20, kernel="sobolev2", lambda_dec=1e-5)
    F = random_received(20, 15, 2)
    np.testing.assert_array_equal(a.encoder_matrix, b.encoder_matrix)
    np.testing.assert_array_equal(a.decoder_matrix(F), b.decoder_matrix(F))


def test_sobolev2_reproduces_lines_including_extrapolation():
    """Natural splines reproduce affine data exactly, also at α outside the survivors' hull."""
    code = make_code("gcc", num_inputs=10, num_workers=20)
    F = np.arange(6, 20)  # the left end straggles: α_0.. lie left of every survivor
    assert code.data_points[0] < code.worker_points[F].min()
    y = 2.0 - 3.0 * code.worker_points[F]
    np.testing.assert_allclose(code.decode(y, F), 2.0 - 3.0 * code.data_points, atol=1e-12)


@pytest.mark.parametrize("kernel", ["sobolev2", "matern52"])
@pytest.mark.parametrize("lam", [0.0, 1e-4])
def test_loo_residuals_equal_refits(kernel, lam):
    """loo_residuals(Y, F)[j] = ỹ_j − u_dec fitted without worker F[j] (same sum-form λ), at β_{F[j]}."""
    code = make_code("gcc", num_inputs=5, num_workers=16, kernel=kernel, lambda_dec=lam)
    F = random_received(16, 12, 3)
    Y = RNG.standard_normal((12, 2))
    loo = code.loo_residuals(Y, F)
    n = F.size
    for j in range(n):
        rest = np.delete(F, j)
        fit = code.decoder_at(rest, code.worker_points[F[j : j + 1]], lambda_dec=lam * n / (n - 1))
        np.testing.assert_allclose(loo[j], Y[j] - (fit @ np.delete(Y, j, axis=0))[0], atol=1e-9)


@pytest.mark.parametrize("lambda_dec", [0.0, 1e-6, "gcv"])
def test_return_error_gives_estimates_and_a_per_sample_error(lambda_dec):
    code = make_code("gcc", num_inputs=6, num_workers=24, lambda_dec=lambda_dec)
    F = np.sort(random_received(24, 20, 4))
    X = RNG.uniform(-3, 3, (6, 3)).astype(np.float32)
    Y = np.sin(code.encode(X))[F]
    est, err = code.decode(Y, F, return_error=True)
    np.testing.assert_array_equal(est, code.decode(Y, F))
    assert err.shape == (6,) and err.dtype == np.float32
    assert np.all(np.isfinite(err)) and np.all(err >= 0)


def test_gcv_matrix_is_data_dependent():
    code = make_code("gcc", num_inputs=6, num_workers=24, lambda_dec="gcv")
    F = np.arange(24)
    with pytest.raises(ConfigError, match="gcv"):
        code.decoder_matrix(F)
    y = np.sin(2 * code.worker_points)[:, None] + 0.1 * RNG.standard_normal((24, 4))
    lam = code.select_lambda(y, F)
    assert lam > 0
    np.testing.assert_allclose(code.decode(y, F), code.decoder_at(F, code.data_points, lambda_dec=lam) @ y)


# -- bacc / bspline ----------------------------------------------------------------------------------


@pytest.mark.parametrize("N", [1, 2, 9, 40])
def test_bacc_weights_sum_to_one(N):
    code = make_code("bacc", num_inputs=6, num_workers=N, on_coincidence="ignore")
    np.testing.assert_allclose(code.encoder_matrix.sum(axis=1), 1.0, atol=1e-12)
    for seed in range(5):
        F = random_received(N, max(1, N - 3), seed)
        D = code.decoder_matrix(F)
        np.testing.assert_allclose(D.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(code.decode(np.full((F.size, 2), 4.5), F), 4.5, atol=1e-12)


def test_bacc_signs_alternate_over_sorted_survivors():
    """Signs run over the sorted survivor list, not the worker index (docs/methods.rst, section 'BACC')."""
    code = make_code("bacc", num_inputs=5, num_workers=20)
    F = np.array([17, 2, 3, 9, 11, 12, 19, 5])  # unsorted, with gaps
    order = np.argsort(code.worker_points[F])
    z = code.data_points
    nodes = code.worker_points[F][order]
    signs = (-1.0) ** np.arange(F.size)
    C = signs / (z[:, None] - nodes[None, :])
    expected = np.empty((5, F.size))
    expected[:, order] = C / C.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(code.decoder_matrix(F), expected, atol=1e-13)
    # the original-index signs differ once survivors have gaps (they put poles inside Ω)
    bad = (-1.0) ** F[order]
    assert not np.allclose(bad, signs)


def test_berrut_exact_node_hits():
    nodes = np.array([-1.0, -0.2, 0.3, 1.0])
    W = berrut_matrix(nodes, np.array([-0.2, 1.0, 0.0]))
    np.testing.assert_array_equal(W[0], [0, 1, 0, 0])
    np.testing.assert_array_equal(W[1], [0, 0, 0, 1])
    assert np.all(np.isfinite(W))
    code = make_code("bacc", num_inputs=4, num_workers=9, on_coincidence="ignore")
    np.testing.assert_array_equal(code.decoder_at([0, 3, 4, 8], code.worker_points[[0, 3, 4, 8]]), np.eye(4))


# A query a subnormal distance from a node: 1/(z - node) overflows, and the barycentric formula gave
# inf/inf = NaN. The nodes at 0 (odd N or odd K, Chebyshev points) are where this happens.
NEAR_NODE = [
    (lambda: make_code("bacc", num_inputs=4, num_workers=9, on_coincidence="ignore").decoder_at(range(9), [1e-310]),
     4),
    (lambda: make_code("bacc", num_inputs=4, num_workers=9, on_coincidence="ignore").decoder_at(range(9), [-5e-324]),
     4),
    (lambda: make_code("bacc", num_inputs=4, num_workers=9, on_coincidence="ignore").decoder_at([8, 4, 0, 2], [1e-310]),
     1),
    (lambda: make_code("bacc", num_inputs=5, num_workers=16).encoder_at([1e-310]), 2),
    (lambda: make_code("lcc", num_inputs=5, num_workers=9, degree=1).encoder_at([1e-310]), 2),
    (lambda: make_code("lcc", num_inputs=5, num_workers=9, degree=1).encoder_at([-5e-324]), 2),
    (lambda: berrut_matrix(np.array([-1.0, 0.0, 1.0]), np.array([2e-320])), 1),
]


@pytest.mark.parametrize(("weights", "node"), NEAR_NODE,
                         ids=["bacc-decoder", "bacc-decoder-smallest-subnormal", "bacc-decoder-unsorted-subset",
                              "bacc-encoder", "lcc-encoder", "lcc-encoder-negative", "berrut-matrix"])
def test_barycentric_row_at_a_subnormal_offset_is_the_node(weights, node):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        W = weights()
    expected = np.zeros_like(W)
    expected[0, node] = 1.0
    np.testing.assert_array_equal(W, expected)


def test_barycentric_rows_near_a_node_keep_the_formula():
    code = make_code("bacc", num_inputs=4, num_workers=9, on_coincidence="ignore")
    W = code.decoder_at(range(9), [1e-300])  # 1/1e-300 is finite: the formula's value, not a snapped row
    assert W[0, 4] == 1.0 and 0 < abs(W[0, 3]) < 1e-299
    lcc = make_code("lcc", num_inputs=5, num_workers=9, degree=1)
    np.testing.assert_allclose(lcc.encoder_at([0.3]).sum(), 1.0)


def test_bspline_reproduces_cubics_and_needs_four():
    code = make_code("bspline", num_inputs=6, num_workers=20)
    F = random_received(20, 14, 5)
    b = code.worker_points[F]
    y = 1 - b + 0.5 * b**2 - 2 * b**3
    a = code.data_points
    np.testing.assert_allclose(code.decode(y, F), 1 - a + 0.5 * a**2 - 2 * a**3, atol=1e-11)
    with pytest.raises(NotEnoughResultsError, match="at least 4"):
        code.decode(y[:3], F[:3])
    assert not code.decodable(F[:3]).any()


# -- lcc -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("K", "D"), [(1, 2), (3, 1), (4, 2), (5, 3), (8, 2)])
def test_lcc_exact_at_threshold_and_raises_below(K, D):
    R = (K - 1) * D + 1
    code = make_code("lcc", num_inputs=K, num_workers=R + 5, degree=D)
    assert code.recovery_threshold == code.min_received == R
    rng = np.random.default_rng(K * 10 + D)
    coef = rng.standard_normal(D + 1)

    def f(x):
        return sum(c * x**i for i, c in enumerate(coef))

    X = rng.uniform(-1, 1, (K, 4))
    Yall = f(code.encode(X))
    for size in (R, R + 3):
        F = random_received(R + 5, size, size)
        np.testing.assert_allclose(code.decode(Yall[F], F), f(X), atol=1e-8, rtol=1e-8)
    assert np.isfinite(code.condition_number(np.arange(R)))
    if R > 1:
        F = random_received(R + 5, R - 1, 0)
        with pytest.raises(NotEnoughResultsError, match=f"at least {R}"):
            code.decode(Yall[F], F)
        assert not code.decodable(F).any()


LCC_AMPLIFICATION = [  # (points, K, N, ‖E‖_∞, warns)
    ("equispaced", 8, 16, 59.5, True),
    ("equispaced", 5, 9, 10.4, True),
    ("equispaced", 4, 12, 6.0, False),
    ("chebyshev", 8, 16, 2.29, False),
    ("chebyshev", 32, 64, 3.17, False),
]


@pytest.mark.parametrize(("points", "K", "N", "factor", "warns"), LCC_AMPLIFICATION,
                         ids=["equispaced-K8", "equispaced-K5", "equispaced-K4", "chebyshev-K8", "chebyshev-K32"])
def test_lcc_warns_when_the_encoder_amplifies_the_data(points, K, N, factor, warns):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = make_code("lcc", num_inputs=K, num_workers=N, degree=1, points=points)
    assert code.encoder_amplification == pytest.approx(factor, rel=1e-2)
    X = np.ones((K, 1))
    X[::2] = -1  # alternating data: the coded inputs reach the amplification
    assert np.abs(code.encode(X)).max() == pytest.approx(factor, rel=1e-2)
    found = [w for w in caught if issubclass(w.category, ConditioningWarning)]
    assert len(found) == int(warns)
    if warns:
        assert str(found[0].message).startswith(
            f"code 'lcc' with points='equispaced', num_inputs={K}, num_workers={N}: the encoder amplifies the "
            f"data up to {code.encoder_amplification:.3g} times")
        assert "use points='chebyshev'" in str(found[0].message)
        assert found[0].filename == __file__  # points at the caller of make_code
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConditioningWarning)
            pickle.loads(pickle.dumps(code))  # warned once, where it was built: not again on each worker


def test_lcc_sweep_and_pipeline_codes_do_not_warn():
    from gcc_dask.config import load_config
    from gcc_dask.sweep_config import load_sweep_config

    cfg = load_sweep_config("pipelines/lcc_polynomial.yaml")
    pipe = load_config("pipelines/smoke.yaml", ["schemes=[lcc]"], check_paths=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConditioningWarning)
        for spec in cfg.schemes:
            for K in cfg.code.num_inputs:
                for N in cfg.code.num_workers:
                    make_code(spec.code, num_inputs=K, num_workers=N, **cfg.code_params(spec))
        make_code("lcc", num_inputs=pipe.code.num_inputs, num_workers=pipe.code.num_workers, **pipe.code_params("lcc"))


# -- replication / uncoded ------------------------------------------------------------------------------


def test_replication_exact_when_a_copy_survives_else_nan():
    K, r = 4, 3
    code = make_code("replication", num_inputs=K, num_workers=K * r)
    assert code.recovery_threshold == K * r - r + 1
    X = RNG.standard_normal((K, 2, 2))
    Y = np.tanh(code.encode(X))
    F = np.array([5, 1, 9, 2, 6])  # holds inputs 1, 1, 1, 2, 2 -> inputs 0 and 3 missing
    mask = code.decodable(F)
    np.testing.assert_array_equal(mask, [False, True, True, False])
    out = code.decode(Y[F], F)
    np.testing.assert_array_equal(out[mask], np.tanh(X)[mask])
    assert np.isnan(out[~mask]).all()
    assert np.isnan(code.decoder_matrix(F)[~mask]).all()


def test_replication_uses_first_listed_copy():
    code = make_code("replication", num_inputs=2, num_workers=4)
    F = np.array([2, 0, 3])  # workers 2 and 0 both hold input 0
    out = code.decode(np.array([10.0, 20.0, 30.0]), F)
    np.testing.assert_array_equal(out, [10.0, 30.0])


def test_uncoded_missing_outputs_are_nan():
    code = make_code("uncoded", num_inputs=5, num_workers=5)
    assert code.recovery_threshold == 5
    np.testing.assert_array_equal(code.encoder_matrix, np.eye(5))
    F = np.array([4, 0, 2])
    out = code.decode(np.array([[4.0], [0.0], [2.0]]), F)
    np.testing.assert_array_equal(out[[0, 2, 4], 0], [0.0, 2.0, 4.0])
    assert np.isnan(out[[1, 3]]).all()
    with pytest.raises(ConfigError, match="num_workers must equal num_inputs"):
        make_code("uncoded", num_inputs=5, num_workers=6)


@pytest.mark.parametrize("name", ["gcc", "letcc", "bacc", "bspline"])
def test_decoded_probabilities_sum_to_one_but_can_leave_the_unit_interval(name):
    """What docs/own_model.rst (section 'scikit-learn') and docs/concepts.rst say of decoded class probabilities:
    every row of D_F sums to 1 and some weights are negative, so a decoded softmax row sums to 1 while values leave
    [0, 1]; clipping at 0 and renormalising keeps each row's argmax."""
    rng = np.random.default_rng(7)
    code = make_code(name, num_inputs=8, num_workers=16)
    W = rng.normal(size=(5, 3))

    def softmax(x):
        z = np.exp(3 * x @ W)
        return z / z.sum(axis=1, keepdims=True)

    est = []
    for _ in range(4):
        F = np.sort(random_received(16, 12, int(rng.integers(1 << 30))))
        D = code.decoder_matrix(F)
        np.testing.assert_allclose(D.sum(axis=1), 1.0, atol=1e-12)
        assert (D < 0).any()
        est.append(D @ softmax(code.encoder_matrix @ rng.normal(size=(8, 5)))[F])
    est = np.concatenate(est)
    np.testing.assert_allclose(est.sum(axis=1), 1.0, atol=1e-12)
    assert est.min() < 0 or est.max() > 1
    p = np.clip(est, 0, None)
    p /= p.sum(axis=1, keepdims=True)
    assert (p >= 0).all() and (p <= 1).all() and (p.argmax(axis=1) == est.argmax(axis=1)).all()


def test_return_error_is_zero_for_an_estimate_that_is_f_itself():
    """With systematic points (a worker point on each data point) and λ_dec = 0, a received systematic worker's
    result is f(x_k) and the decoder interpolates through it: that estimate is exact, and its error estimate is 0
    (the interpolated leave-one-out residuals said 0.15 of f's scale on a pipeline's MLP). Where that worker is
    missing, or λ_dec > 0 smooths, the estimate is not f(x_k) and the error estimate stays positive."""
    from gcc_dask.coding.gcc import exact_rows

    code = make_code("gcc", num_inputs=8, num_workers=16, points="systematic")
    X = RNG.uniform(-2, 2, (8, 5))
    Y = np.sin(code.encode(X))
    truth = np.sin(X)
    on_alpha = [int(np.argmin(np.abs(code.worker_points - a))) for a in code.data_points]
    np.testing.assert_allclose(code.worker_points[on_alpha], code.data_points, atol=1e-12)  # systematic
    every = np.array(sorted(set(on_alpha) | {0, 6, 9, 15}))  # all 8 systematic workers and 4 others
    est, err = code.decode(Y[every], every, return_error=True)
    np.testing.assert_allclose(est, truth, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(err, 0.0)
    lost = np.array([w for w in range(16) if w != on_alpha[3]])  # the worker on α_3 missing
    est, err = code.decode(Y[lost], lost, return_error=True)
    assert err[3] > 0 and np.abs(est[3] - truth[3]).max() > 1e-6
    np.testing.assert_array_equal(np.delete(err, 3), 0.0)
    smooth = make_code("gcc", num_inputs=8, num_workers=16, points="systematic", lambda_dec=1e-6)
    assert (smooth.decode(Y[every], every, return_error=True)[1] > 0).all()
    assert not exact_rows(smooth.decoder_matrix(every), smooth.encoder_matrix[every]).any()
