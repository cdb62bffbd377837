"""LCC: Lagrange coded computing over the reals (Yu et al., arXiv 1806.00939).

Encoder: the Lagrange interpolant through the K inputs, ``u(z) = Σ_j x_j ℓ_j(z)`` over the data points α
(docs/methods.rst, section 'LCC'; arXiv 1806.00939, eq. (3)), evaluated at the worker points β by the barycentric
formula. For f a polynomial of degree D (applied elementwise or as any polynomial map), ``f(u(z))`` is a
polynomial of degree ``(K − 1)·D``, so any ``R = (K − 1)·D + 1`` results determine it; the decoder fits
that polynomial to the survivors (least squares in the Chebyshev basis, exact when |F| = R and exact
for exact data when |F| > R, better conditioned than a monomial Vandermonde) and evaluates it at α.
Below ``R`` results the code raises: it never guesses.

Over the reals LCC is ill-conditioned as K·D grows even with Chebyshev points: see
:meth:`LCC.condition_number`. On equispaced points the encoder itself amplifies the data (the Runge
phenomenon: coded inputs up to 60 times the data's scale at K = 8): `encoder_amplification` records
``‖E‖_∞``, and a :class:`~gcc_dask.coding.ConditioningWarning` is given above
:data:`AMPLIFICATION_WARN_AT`.
"""

from __future__ import annotations

import warnings

import numpy as np
from numpy.polynomial import chebyshev
from scipy import linalg

from gcc_dask.errors import ConfigError

from .base import CodingScheme, ConditioningWarning
from .points import at_node
from .registry import register_code
from .validation import check_int

__all__ = ["LCC"]

#: Encoder amplification ‖E‖_∞ above which LCC warns (Chebyshev points stay near 2-3 up to K = 32).
AMPLIFICATION_WARN_AT = 10.0


@register_code("lcc")
class LCC(CodingScheme):
    """Lagrange coded computing for polynomial f of a declared degree (arXiv 1806.00939).

    Parameters
    ----------
    num_inputs, num_workers : int
        K ≥ 1 and N ≥ (K − 1)·degree + 1.
    degree : int
        D ≥ 1, the total degree of the polynomial f the workers evaluate. Required: a wrong degree
        silently gives wrong results, so there is no default.
    points : {"chebyshev", "equispaced"}
    nan_policy : {"raise", "propagate"}
    on_coincidence : {"warn", "nudge", "ignore"}
        Default ``"ignore"``: coincidences do not matter to an exact code; they are still recorded in
        `coincident_points`.

    Attributes
    ----------
    encoder_amplification : float
        ``‖E‖_∞ = max_n Σ_k |E_nk|``, the most a coded input can exceed the largest input in magnitude
        (a Lebesgue constant over the worker points). Above 10 a
        :class:`~gcc_dask.coding.ConditioningWarning` is given at construction.

    Notes
    -----
    ``recovery_threshold = min_received = (K − 1)·D + 1``. References: Q. Yu, S. Li, N. Raviv,
    S. M. M. Kalan, M. Soltanolkotabi, S. Avestimehr, "Lagrange Coded Computing: Optimal Design for
    Resiliency, Security and Privacy", AISTATS 2019, arXiv:1806.00939, eq. (3) and Theorem 1.
    """

    def __init__(
        self,
        *,
        num_inputs: int,
        num_workers: int,
        degree: int,
        points: str = "chebyshev",
        nan_policy: str = "raise",
        on_coincidence: str = "ignore",
    ) -> None:
        super().__init__(
            num_inputs=num_inputs,
            num_workers=num_workers,
            points=points,
            nan_policy=nan_policy,
            on_coincidence=on_coincidence,
        )
        self.degree = check_int("degree", degree, 1)
        self.recovery_threshold = self.min_received = (self.num_inputs - 1) * self.degree + 1
        if self.num_workers < self.recovery_threshold:
            raise ConfigError(
                f"num_workers must be at least (num_inputs - 1) * degree + 1 = {self.recovery_threshold} "
                f"for code 'lcc'; got num_workers={self.num_workers!r} with num_inputs={self.num_inputs}, "
                f"degree={self.degree}. Increase num_workers or lower num_inputs/degree."
            )
        self._finish()
        self.encoder_amplification = self._check_amplification()

    def _check_amplification(self) -> float:
        """``‖E‖_∞``, with a :class:`ConditioningWarning` when it exceeds :data:`AMPLIFICATION_WARN_AT`."""
        factor = float(np.abs(self.encoder_matrix).sum(axis=1).max())
        if factor > AMPLIFICATION_WARN_AT:
            warnings.warn(
                f"code 'lcc' with points={self.points!r}, num_inputs={self.num_inputs}, "
                f"num_workers={self.num_workers}: the encoder amplifies the data up to {factor:.3g} times "
                "(max row abs-sum of the encoder matrix, the Runge phenomenon), so coded inputs leave the "
                "data's range and rounding errors grow as much; use points='chebyshev' (under 3.2 for "
                "num_inputs <= 32) or fewer inputs per batch",
                ConditioningWarning,
                stacklevel=4,
            )
        return factor

    def _scheme_params(self) -> dict:
        return {"degree": self.degree}

    def encoder_at(self, z) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        K = self.num_inputs
        if K == 1:
            return np.ones((z.size, 1))
        # imported here: scipy.interpolate (with scipy.optimize) adds ~0.45 s to every process's import
        from scipy.interpolate import BarycentricInterpolator

        interp = BarycentricInterpolator(self.data_points, np.eye(K))
        z = np.atleast_1d(z)
        node = at_node(self.data_points, z, interp.wi)  # w_j / (z - α_j) overflows: z is α_j to every digit
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            E = np.atleast_2d(interp(np.where(node >= 0, self.data_points[np.maximum(node, 0)], z)))
        return E

    def _decoder_map(self, rs: np.ndarray, z: np.ndarray) -> np.ndarray:
        # D = T(z) V⁺ with V = T(β_F) the (|F|, R) Chebyshev–Vandermonde matrix, R = deg + 1 ≤ |F|: with the
        # economic QR V = Q R', V⁺ = R'⁻¹ Qᵀ, so D = (T(z) R'⁻¹) Qᵀ. O(|F|·R²), where a least-squares
        # solve against the |F| x |F| identity cost O(|F|²·R) (N = 1024, K = 128: 4 ms instead of 205 ms).
        deg = self.recovery_threshold - 1
        V = chebyshev.chebvander(self.worker_points[rs], deg)  # (|F|, R)
        Q, R = linalg.qr(V, mode="economic")  # (|F|, R), (R, R) upper triangular
        T = linalg.solve_triangular(R, chebyshev.chebvander(z, deg).T, trans="T").T  # T(z) R⁻¹: (len(z), R)
        return T @ Q.T

    def condition_number(self, received) -> float:
        """2-norm condition number of the Chebyshev–Vandermonde matrix the decoder solves for `received`."""
        r = self._validated(self._key(received))
        V = chebyshev.chebvander(self.worker_points[r], self.recovery_threshold - 1)
        return float(np.linalg.cond(V))

