"""Natural cubic (smoothing) splines as linear maps, by banded solves: the stable ``sobolev2`` path.

For knots ``t_0 < … < t_{n-1}`` the natural cubic smoothing spline of

    Σ_i (y_i − g(t_i))² + a ∫ g''²                                            (a ≥ 0, "sum form")

has fitted values ``g = y − a Q γ`` and interior second derivatives ``γ = (R + a QᵀQ)⁻¹ Qᵀ y``
(Reinsch 1967; Green & Silverman 1994, §2.3), with ``h_i = t_{i+1} − t_i``, ``R`` the (n−2)×(n−2)
tridiagonal ``R_ii = (h_{i−1} + h_i)/3``, ``R_{i,i+1} = h_i/6`` and ``Q`` the n×(n−2) second-difference
matrix ``Q_{i−1,i} = 1/h_{i−1}``, ``Q_{ii} = −1/h_{i−1} − 1/h_i``, ``Q_{i+1,i} = 1/h_i``. ``a = 0`` is the
natural interpolating spline. Between knots the spline is the cubic through (g, γ); outside
``[t_0, t_{n−1}]`` it is continued *linearly*, as the RKHS solution ``Σ c_i |s − t_i|³/12 + d_0 + d_1 s``
with ``Σ c_i = Σ c_i t_i = 0`` is (docs/methods.rst, section 'GCC and LeTCC'). So the map from ``y`` to the values
at query points ``s`` is

    S(s) = P + (W − a P Q)(R + a QᵀQ)⁻¹ Qᵀ        shape (len(s), n)

with ``P`` the piecewise-linear part and ``W`` the weights of the interior second derivatives. The
solve is pentadiagonal and symmetric positive definite (``scipy.linalg.solveh_banded``) with only
``len(s)`` right-hand sides, so building a decoder costs O(n·K), with no dense ``|s−t|³`` system (whose
reciprocal condition number is ~1e-19 at n = 641, docs/methods.rst, section 'GCC and LeTCC').

The same solve gives the leave-one-out matrix ``M = Q (R + a QᵀQ)⁻¹ Qᵀ``: the LOO residual of knot i is
``(M y)_i / M_ii`` for every ``a ≥ 0`` (for ``a > 0`` this is ``e_i / (1 − H_ii)``; ``a = 0`` is its
limit, the LOO residual of the interpolating spline). ``M`` at ``a = 0`` is the penalty matrix
``∫ g''² = gᵀ M g``, whose eigenpairs (Demmler–Reinsch basis) drive the GCV search.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

__all__ = ["LinearSplineSmoother", "SplineSmoother"]


class SplineSmoother:
    """Natural cubic smoothing splines on fixed knots `t` (ascending, distinct), as linear maps.

    Parameters
    ----------
    t : ndarray of shape (n,), float64
        Knots, strictly ascending.
    """

    def __init__(self, t: np.ndarray) -> None:
        t = np.asarray(t, dtype=np.float64)
        self.t = t
        self.n = n = t.size
        self.h = h = np.diff(t)
        m = max(n - 2, 0)
        self.m = m
        if m:
            # R in upper banded form for solveh_banded (3 rows: 2nd super, 1st super, diagonal)
            self._R_diag = (h[:-1] + h[1:]) / 3.0
            self._R_sup = h[1:-1] / 6.0
            # Q's three non-zero entries per column c (rows c, c+1, c+2)
            q0, q2 = 1.0 / h[:-1], 1.0 / h[1:]
            q1 = -q0 - q2
            self._q = (q0, q1, q2)
        self._spectrum: tuple[np.ndarray, np.ndarray] | None = None

    # ---------------------------------------------------------------------------------------------

    def _banded(self, a: float) -> np.ndarray:
        """``R + a QᵀQ`` in solveh_banded's upper form, shape (3, m)."""
        m = self.m
        q0, q1, q2 = self._q
        ab = np.zeros((3, m))
        ab[2] = self._R_diag + a * (q0 * q0 + q1 * q1 + q2 * q2)
        if m > 1:
            ab[1, 1:] = self._R_sup + a * (q1[:-1] * q0[1:] + q2[:-1] * q1[1:])
        if m > 2:
            ab[0, 2:] = a * (q2[:-2] * q0[2:])
        return ab

    def _Q(self, z: np.ndarray) -> np.ndarray:
        """``Q @ z`` for z of shape (m, q) -> (n, q)."""
        q0, q1, q2 = self._q
        out = np.zeros((self.n, z.shape[1]))
        out[:-2] += q0[:, None] * z
        out[1:-1] += q1[:, None] * z
        out[2:] += q2[:, None] * z
        return out

    def _QT(self, v: np.ndarray) -> np.ndarray:
        """``Qᵀ @ v`` for v of shape (n, q) -> (m, q)."""
        q0, q1, q2 = self._q
        return q0[:, None] * v[:-2] + q1[:, None] * v[1:-1] + q2[:, None] * v[2:]

    def _solve(self, a: float, rhs: np.ndarray) -> np.ndarray:
        return linalg.solveh_banded(self._banded(a), rhs, lower=False, check_finite=False)

    def _local(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``P`` (len(s), n) and ``W`` (len(s), m): values from knot values and interior 2nd derivatives."""
        t, h, n, m = self.t, self.h, self.n, self.m
        q = s.size
        P = np.zeros((q, n))
        W = np.zeros((q, m))
        if n == 1:
            P[:, 0] = 1.0
            return P, W
        rows = np.arange(q)
        j = np.clip(np.searchsorted(t, s, side="right") - 1, 0, n - 2)
        left, right = s < t[0], s > t[-1]
        inside = ~(left | right)
        # inside [t_j, t_{j+1}]: g = A y_j + B y_{j+1} + ((A³−A) M_j + (B³−B) M_{j+1}) h²/6
        ri, ji = rows[inside], j[inside]
        hj = h[ji]
        A = (t[ji + 1] - s[inside]) / hj
        B = 1.0 - A
        P[ri, ji] = A
        P[ri, ji + 1] = B
        # knot j ↔ interior column j − 1 (M_0 = M_{n−1} = 0 are dropped)
        cA, cB = (A**3 - A) * hj**2 / 6.0, (B**3 - B) * hj**2 / 6.0
        okA, okB = (ji >= 1) & (ji <= n - 2), (ji + 1 >= 1) & (ji + 1 <= n - 2)
        W[ri[okA], ji[okA] - 1] = cA[okA]
        W[ri[okB], ji[okB]] = cB[okB]
        # linear continuation: g'(t_0) = Δy_0/h_0 − h_0 M_1/6 ; g'(t_{n−1}) = Δy/h + h M_{n−2}/6
        if left.any():
            rl, dl = rows[left], s[left] - t[0]
            P[rl, 0] = 1.0 - dl / h[0]
            P[rl, 1] = dl / h[0]
            if m:
                W[rl, 0] = -dl * h[0] / 6.0
        if right.any():
            rr, dr = rows[right], s[right] - t[-1]
            P[rr, n - 2] = -dr / h[-1]
            P[rr, n - 1] = 1.0 + dr / h[-1]
            if m:
                W[rr, m - 1] = dr * h[-1] / 6.0
        return P, W

    # ---------------------------------------------------------------------------------------------

    def map(self, s: np.ndarray, a: float) -> np.ndarray:
        """Linear map from knot data y (n,) to the smoothing spline's values at `s`, shape (len(s), n).

        Parameters
        ----------
        s : ndarray of shape (q,), float64
            Query points (any order; outside the knots the spline is linear).
        a : float
            Smoothing parameter of the *sum* form, ``a = n·λ`` for the mean form
            (docs/methods.rst, section 'GCC and LeTCC').
        """
        s = np.asarray(s, dtype=np.float64)
        P, W = self._local(s)
        if not self.m:
            return P
        Vt = W.T - a * self._QT(P.T) if a else W.T  # (m, q)
        Z = self._solve(a, Vt)  # (m, q)
        return P + self._Q(Z).T

    def loo_matrix(self, a: float) -> np.ndarray:
        """``M = Q (R + a QᵀQ)⁻¹ Qᵀ``, shape (n, n); LOO residuals are ``(M y)_i / M_ii``."""
        if not self.m:
            return np.zeros((self.n, self.n))
        Z = self._solve(a, self._QT(np.eye(self.n)))  # (m, n)
        return self._Q(Z)

    def spectrum(self) -> tuple[np.ndarray, np.ndarray]:
        """Demmler–Reinsch basis: ``(U, κ)`` with ``M(0) = U diag(κ) Uᵀ``, κ ≥ 0 (2 zeros: {1, t}).

        The hat matrix of the sum-form smoother is ``H(a) = U diag(1 / (1 + a κ)) Uᵀ``.
        """
        if self._spectrum is None:
            K = self.loo_matrix(0.0)
            kappa, U = linalg.eigh((K + K.T) / 2.0)
            self._spectrum = (U, np.clip(kappa, 0.0, None))
        return self._spectrum


class LinearSplineSmoother:
    """Natural *linear* smoothing splines on fixed knots `t`: the ``sobolev1`` kernel's maps.

    The minimiser of ``Σ_i (y_i − g(t_i))² + a ∫ g'²`` (sum form, a ≥ 0) is piecewise linear between the
    knots and constant outside them (the RKHS of ``k(s, t) = −|s − t|/2`` with null space {1}), with knot
    values ``g = (I + a L)⁻¹ y``, ``L`` the tridiagonal weighted Laplacian of ``∫ g'² = Σ (g_{i+1} − g_i)²/h_i
    = gᵀ L g``. ``a = 0`` interpolates: between two knots the estimate is the straight line through them, which
    is replication's ``linear`` fill with the coded points as knots (docs/methods.rst, section 'GCC and
    LeTCC'). ``M(a) = L (I + a L)⁻¹`` gives the LOO residuals ``(M y)_i / M_ii`` and ``M(0) = L`` the
    spectrum, as :class:`SplineSmoother` does for the cubic case.

    Parameters
    ----------
    t : ndarray of shape (n,), float64
        Knots, strictly ascending.
    """

    def __init__(self, t: np.ndarray) -> None:
        t = np.asarray(t, dtype=np.float64)
        self.t, self.n = t, t.size
        self.h = np.diff(t)
        self._spectrum: tuple[np.ndarray, np.ndarray] | None = None

    def _laplacian(self) -> np.ndarray:
        n = self.n
        L = np.zeros((n, n))
        if n > 1:
            w = 1.0 / self.h
            i = np.arange(n - 1)
            L[i, i] += w
            L[i + 1, i + 1] += w
            L[i, i + 1] -= w
            L[i + 1, i] -= w
        return L

    def _banded(self, a: float) -> np.ndarray:
        """``I + a L`` in solveh_banded's upper form, shape (2, n)."""
        n = self.n
        ab = np.zeros((2, n))
        ab[1] = 1.0
        if n > 1:
            w = 1.0 / self.h
            ab[1, :-1] += a * w
            ab[1, 1:] += a * w
            ab[0, 1:] = -a * w
        return ab

    def _interp(self, s: np.ndarray) -> np.ndarray:
        """``P`` (len(s), n): the piecewise-linear interpolant's weights, constant beyond the ends."""
        t, n = self.t, self.n
        P = np.zeros((s.size, n))
        if n == 1:
            P[:, 0] = 1.0
            return P
        sc = np.clip(s, t[0], t[-1])
        j = np.clip(np.searchsorted(t, sc, side="right") - 1, 0, n - 2)
        B = (sc - t[j]) / self.h[j]
        rows = np.arange(s.size)
        P[rows, j] = 1.0 - B
        P[rows, j + 1] += B
        return P

    def map(self, s: np.ndarray, a: float) -> np.ndarray:
        """Linear map from knot data y (n,) to the smoothing spline's values at `s`, shape (len(s), n)
        (``a = n·λ`` for the mean form)."""
        P = self._interp(np.asarray(s, dtype=np.float64))
        if not a or self.n < 2:
            return P
        return linalg.solveh_banded(self._banded(a), P.T, lower=False, check_finite=False).T

    def loo_matrix(self, a: float) -> np.ndarray:
        """``M = L (I + a L)⁻¹``, shape (n, n); LOO residuals are ``(M y)_i / M_ii``."""
        L = self._laplacian()
        if not a or self.n < 2:
            return L
        return linalg.solveh_banded(self._banded(a), L, lower=False, check_finite=False).T

    def spectrum(self) -> tuple[np.ndarray, np.ndarray]:
        """``(U, κ)`` with ``L = U diag(κ) Uᵀ``, κ ≥ 0 (one zero: the constants); the hat matrix is
        ``H(a) = U diag(1 / (1 + a κ)) Uᵀ``."""
        if self._spectrum is None:
            kappa, U = linalg.eigh(self._laplacian())
            self._spectrum = (U, np.clip(kappa, 0.0, None))
        return self._spectrum
