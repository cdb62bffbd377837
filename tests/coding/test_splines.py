"""The numerical cores: banded natural splines against SciPy and the dense RKHS system.

See docs/methods.rst, section 'GCC and LeTCC'.
"""

from __future__ import annotations

import decimal

import numpy as np
import pytest
from scipy.interpolate import CubicSpline, make_smoothing_spline

from gcc_dask.coding.kernels import KernelSmoother, dense_krr_map
from gcc_dask.coding.splines import LinearSplineSmoother, SplineSmoother


def cheb2(n: int, scale: float = 1.0) -> np.ndarray:
    return np.sort(np.cos(np.arange(n) * np.pi / (n - 1))) * scale


@pytest.mark.parametrize("n", [2, 3, 7, 64])
def test_interpolating_spline_matches_cubicspline_natural(n):
    t = cheb2(n)
    s = np.linspace(-1, 1, 101)
    y = np.random.default_rng(n).standard_normal((n, 3))
    S = SplineSmoother(t).map(s, 0.0)
    np.testing.assert_allclose(S @ y, CubicSpline(t, y, bc_type="natural")(s), atol=1e-12)
    np.testing.assert_allclose(SplineSmoother(t).map(t, 0.0), np.eye(n), atol=1e-14)


@pytest.mark.parametrize("knots", ["uniform-random", "chebyshev"])
@pytest.mark.parametrize("n", [5, 20, 40])
@pytest.mark.parametrize("lam_s", [1e-8, 1e-5, 1e-2, 1.0])
def test_smoothing_spline_matches_make_smoothing_spline(n, lam_s, knots):
    """Sum-form a = λ_s of make_smoothing_spline (= n·λ in the mean form), inside the knots.

    For larger n with heavy smoothing the two drift apart (1e-7 at n = 160, λ_s = 1): SciPy's
    B-spline design-matrix solve is then the less accurate one (see the mpmath test below).
    """
    rng = np.random.default_rng(n)
    t = np.sort(rng.uniform(-1, 1, n)) if knots == "uniform-random" else cheb2(n)
    s = np.linspace(t[0], t[-1], 57)
    y = rng.standard_normal((n, 2))
    ours = SplineSmoother(t).map(s, lam_s) @ y
    ref = make_smoothing_spline(t, y, lam=lam_s)(s)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-8 * np.abs(ref).max())


@pytest.mark.parametrize("n", [2, 3, 5, 12])
@pytest.mark.parametrize("a", [0.0, 1e-4, 1e-1, 3.0])
def test_banded_equals_dense_saddle_point_system(n, a):
    """The banded path is the RKHS solution Σ c_i |s − t_i|³/12 + d_0 + d_1 s, extrapolation included."""
    t = cheb2(n, 0.9)
    s = np.linspace(-1.5, 1.5, 61)
    dense = dense_krr_map("sobolev2", t, s, a)
    np.testing.assert_allclose(SplineSmoother(t).map(s, a), dense, atol=1e-9)


def test_spline_continues_linearly_outside_the_knots():
    t = cheb2(9, 0.8)
    y = np.random.default_rng(0).standard_normal(9)
    for a in (0.0, 0.1):
        s = np.array([-2.0, -1.5, -1.0, 1.0, 1.5, 2.0])
        v = SplineSmoother(t).map(s, a) @ y
        assert np.isclose(v[1] - v[0], v[2] - v[1]) and np.isclose(v[4] - v[3], v[5] - v[4])


@pytest.mark.parametrize("kernel", ["matern32", "matern52", "gaussian"])
@pytest.mark.parametrize("a", [1e-3, 1.0])
def test_kernel_smoother_equals_dense_system(kernel, a):
    t = cheb2(15)
    s = np.linspace(-1.2, 1.2, 31)
    ours = KernelSmoother(t, kernel, 0.5).map(s, a)
    np.testing.assert_allclose(ours, dense_krr_map(kernel, t, s, a, 0.5), atol=1e-8)


@pytest.mark.parametrize("n", [1, 2, 5, 12])
@pytest.mark.parametrize("a", [0.0, 1e-3, 0.3, 3.0])
def test_linear_spline_is_the_sobolev1_rkhs_solution(n, a):
    """The banded natural linear smoothing spline equals the dense system of k = −|s − t|/2 with null space {1},
    extrapolation (constant beyond the ends) included; at a = 0 it is np.interp."""
    t = cheb2(n, 0.9) if n > 1 else np.array([0.3])
    s = np.linspace(-1.5, 1.5, 61)
    ours = LinearSplineSmoother(t).map(s, a)
    np.testing.assert_allclose(ours, dense_krr_map("sobolev1", t, s, a), atol=1e-10)
    if a == 0.0 and n > 1:
        y = np.random.default_rng(n).standard_normal(n)
        np.testing.assert_allclose(ours @ y, np.interp(s, t, y), atol=1e-13)


@pytest.mark.parametrize("kernel", ["sobolev2", "sobolev1", "matern32", "matern52"])
@pytest.mark.parametrize("a", [0.0, 1e-3, 0.5])
def test_loo_closed_form_equals_refits(kernel, a):
    """(M y)_i / M_ii is y_i minus the fit without point i (same sum-form a), for a = 0 too."""
    t = np.sort(np.random.default_rng(1).uniform(-1, 1, 11))
    y = np.random.default_rng(2).standard_normal(11)

    def smoother(pts):
        if kernel == "sobolev1":
            return LinearSplineSmoother(pts)
        return SplineSmoother(pts) if kernel == "sobolev2" else KernelSmoother(pts, kernel, 0.7)

    M = smoother(t).loo_matrix(a)
    closed = (M @ y) / np.diag(M)
    brute = [y[i] - (smoother(np.delete(t, i)).map(t[i : i + 1], a) @ np.delete(y, i))[0] for i in range(11)]
    np.testing.assert_allclose(closed, brute, atol=1e-7 * np.abs(y).max())


def test_linear_spline_spectrum_reproduces_its_hat_matrix():
    t = cheb2(10)
    U, kappa = LinearSplineSmoother(t).spectrum()
    assert np.sum(kappa < 1e-10 * kappa.max()) == 1  # null space {1}
    a = 0.05
    H = LinearSplineSmoother(t).map(t, a)
    np.testing.assert_allclose((U / (1.0 + a * kappa)) @ U.T, H, atol=1e-12)


def test_spectrum_reproduces_the_hat_matrix():
    t = cheb2(12)
    sm = SplineSmoother(t)
    U, kappa = sm.spectrum()
    assert np.sum(kappa < 1e-8 * kappa.max()) == 2  # null space {1, t}
    a = 1e-3
    H_spec = (U / (1.0 + a * kappa)) @ U.T
    np.testing.assert_allclose(H_spec, sm.map(t, a), atol=1e-9)


def _hp_smoothing_fit(t, y, a, digits=50):
    """Fitted values of the sum-form smoothing spline in `digits`-digit decimal arithmetic.

    Reinsch's system (R + a QᵀQ) γ = Qᵀ y, g = y − a Q γ, solved by banded Gaussian elimination.
    """
    ctx = decimal.Context(prec=digits)
    D = lambda v: ctx.create_decimal_from_float(float(v))  # noqa: E731  (floats are exact in decimal)
    n, m = len(t), len(t) - 2
    T = [D(x) for x in t]
    Y = [D(v) for v in y]
    A_ = D(a)
    h = [ctx.subtract(T[i + 1], T[i]) for i in range(n - 1)]
    q = [(ctx.divide(1, h[c]), -ctx.divide(1, h[c]) - ctx.divide(1, h[c + 1]), ctx.divide(1, h[c + 1]))
         for c in range(m)]

    def Q(r, c):
        return q[c][r - c] if 0 <= r - c <= 2 else D(0)

    with decimal.localcontext(ctx):
        A = {}
        for i in range(m):
            for j in range(max(0, i - 2), min(m, i + 3)):
                qtq = sum((Q(r, i) * Q(r, j) for r in range(max(i, j), min(i, j) + 3)), D(0))
                R = (h[i] + h[i + 1]) / 3 if i == j else (h[max(i, j)] / 6 if abs(i - j) == 1 else D(0))
                A[i, j] = R + A_ * qtq
        b = [sum((Q(r, c) * Y[r] for r in range(c, c + 3)), D(0)) for c in range(m)]
        for k in range(m):  # banded elimination, no pivoting (symmetric positive definite)
            for i in range(k + 1, min(k + 3, m)):
                f = A[i, k] / A[k, k]
                for j in range(k, min(k + 3, m)):
                    A[i, j] = A[i, j] - f * A[k, j]
                b[i] -= f * b[k]
        gam = [D(0)] * m
        for i in reversed(range(m)):
            gam[i] = (b[i] - sum((A[i, j] * gam[j] for j in range(i + 1, min(i + 3, m))), D(0))) / A[i, i]
        g = [Y[r] - A_ * sum((Q(r, c) * gam[c] for c in range(max(0, r - 2), min(r + 1, m))), D(0))
             for r in range(n)]
    return np.array([float(v) for v in g])


def test_banded_smoothing_spline_against_high_precision():
    """n = 160 Chebyshev knots, heavy smoothing: the banded path is accurate to ~1e-11 (SciPy: ~1e-7)."""
    n, a = 160, 1.0
    t = cheb2(n)
    y = np.random.default_rng(0).standard_normal(n)
    ref = _hp_smoothing_fit(t, y, a)
    np.testing.assert_allclose(SplineSmoother(t).map(t, a) @ y, ref, atol=1e-10)
