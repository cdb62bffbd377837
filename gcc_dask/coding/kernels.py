"""Kernels of the GCC encoder/decoder RKHS, and kernel ridge regression as a linear map.

Kernel ridge regression in the mean form (docs/methods.rst, section 'GCC and LeTCC'; GCC, arXiv 2608.28910,
representer theorem)

    min_u (1/n) Σ_i ||u(t_i) − y_i||² + λ ||u||²_H      ⇔   [ G + aI  T ] [c]   [y]
                                                           [ Tᵀ      0 ] [d] = [0],   a = n·λ,

with ``G_ij = k(t_i, t_j)`` and ``T`` a basis of the kernel's polynomial null space at the ``t_i``.

* ``sobolev1``: ``k(s, t) = −|s − t| / 2``, null space {1}; ``||u||²_H = ∫ u'²``: the natural *linear*
  smoothing spline (piecewise linear, constant beyond the ends), a kernel of lower order than LeTCC's;
  production code uses :class:`~gcc_dask.coding.splines.LinearSplineSmoother`.
* ``sobolev2``: ``k(s, t) = |s − t|³ / 12``, null space {1, t}; ``||u||²_H = ∫ u''²``: the natural cubic
  smoothing spline. Production code uses the banded :class:`~gcc_dask.coding.splines.SplineSmoother`;
  :func:`dense_krr_map` here is the reference it is tested against on small n.
* ``matern32``, ``matern52``, ``gaussian``: strictly positive definite with length scale ℓ, no null
  space. :class:`KernelSmoother` factorises ``G = U diag(μ) Uᵀ`` once per knot set (``scipy.linalg.eigh``,
  no explicit inverse); eigenvalues below ``n·eps·max(μ)`` are treated as zero, so ``a = 0`` on an
  ill-conditioned Gram matrix (Gaussian kernel, many points) gives the minimum-norm near-interpolant
  instead of amplified round-off.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

__all__ = ["KERNELS", "KernelSmoother", "dense_krr_map", "kernel_matrix"]

_S3, _S5 = np.sqrt(3.0), np.sqrt(5.0)


def _sobolev1(r: np.ndarray, ell: float) -> np.ndarray:
    return -r / 2.0


def _sobolev2(r: np.ndarray, ell: float) -> np.ndarray:
    return r**3 / 12.0


def _matern32(r: np.ndarray, ell: float) -> np.ndarray:
    z = _S3 * r / ell
    return (1.0 + z) * np.exp(-z)


def _matern52(r: np.ndarray, ell: float) -> np.ndarray:
    z = _S5 * r / ell
    return (1.0 + z + z * z / 3.0) * np.exp(-z)


def _gaussian(r: np.ndarray, ell: float) -> np.ndarray:
    return np.exp(-0.5 * (r / ell) ** 2)


#: name -> (k(r, ℓ) as a function of ``r = |s − t|``, dimension of the polynomial null space)
KERNELS = {
    "sobolev1": (_sobolev1, 1),
    "sobolev2": (_sobolev2, 2),
    "matern32": (_matern32, 0),
    "matern52": (_matern52, 0),
    "gaussian": (_gaussian, 0),
}


def kernel_matrix(kernel: str, s: np.ndarray, t: np.ndarray, length_scale: float = 1.0) -> np.ndarray:
    """``k(s_i, t_j)``, shape (len(s), len(t)), float64."""
    fn, _ = KERNELS[kernel]
    return fn(np.abs(np.asarray(s, float)[:, None] - np.asarray(t, float)[None, :]), length_scale)


def _null_basis(x: np.ndarray, dim: int) -> np.ndarray:
    return np.vander(x, dim, increasing=True) if dim else np.zeros((x.size, 0))


def dense_krr_map(
    kernel: str, t: np.ndarray, s: np.ndarray, a: float, length_scale: float = 1.0
) -> np.ndarray:
    """Map from data at `t` (n,) to the KRR solution at `s`, shape (len(s), n), by the dense system.

    Solves the saddle-point system above (``a`` is the sum-form parameter ``n·λ``) with a symmetric
    indefinite factorisation (``scipy.linalg.solve(assume_a="sym")``). Well conditioned only for
    small n with ``sobolev2``; kept as the reference for the banded path.
    """
    _, dim = KERNELS[kernel]
    n = t.size
    T = _null_basis(t, dim)
    A = np.zeros((n + dim, n + dim))
    A[:n, :n] = kernel_matrix(kernel, t, t, length_scale) + a * np.eye(n)
    A[:n, n:] = T
    A[n:, :n] = T.T
    rhs = np.zeros((n + dim, n))
    rhs[:n] = np.eye(n)
    coef = linalg.solve(A, rhs, assume_a="sym")
    left = np.hstack([kernel_matrix(kernel, s, t, length_scale), _null_basis(s, dim)])
    return left @ coef


class KernelSmoother:
    """KRR with a strictly positive-definite kernel on fixed points `t`, as linear maps.

    Parameters
    ----------
    t : ndarray of shape (n,), float64
    kernel : {"matern32", "matern52", "gaussian"}
    length_scale : float
        ℓ, in units of Ω = [-1, 1].
    """

    def __init__(self, t: np.ndarray, kernel: str, length_scale: float) -> None:
        self.t = np.asarray(t, dtype=np.float64)
        self.n = self.t.size
        self.kernel, self.length_scale = kernel, length_scale
        G = kernel_matrix(kernel, self.t, self.t, length_scale)
        mu, U = linalg.eigh(G)
        self.mu = np.clip(mu, 0.0, None)
        self.U = U
        self.tol = max(self.n, 1) * np.finfo(float).eps * float(self.mu.max(initial=0.0))

    def _inv(self, a: float) -> np.ndarray:
        d = self.mu + a
        with np.errstate(divide="ignore"):
            return np.where(d > self.tol, 1.0 / d, 0.0)

    def map(self, s: np.ndarray, a: float) -> np.ndarray:
        """Values at `s` of the fit to data at the knots: ``k(s, t) (G + aI)⁻¹``, shape (len(s), n)."""
        Ks = kernel_matrix(self.kernel, s, self.t, self.length_scale)
        return ((Ks @ self.U) * self._inv(a)) @ self.U.T

    def loo_matrix(self, a: float) -> np.ndarray:
        """``M = (G + aI)⁻¹`` (pseudo-inverse); LOO residuals are ``(M y)_i / M_ii`` (Rippa 1999)."""
        return (self.U * self._inv(a)) @ self.U.T

    def spectrum(self) -> tuple[np.ndarray, np.ndarray]:
        """``(U, κ)`` with hat matrix ``H(a) = U diag(1 / (1 + a κ)) Uᵀ``: κ = 1/μ (inf where μ ≈ 0)."""
        with np.errstate(divide="ignore"):
            kappa = np.where(self.mu > self.tol, 1.0 / np.where(self.mu > 0, self.mu, 1.0), np.inf)
        return self.U, kappa
