"""GCC: general coded computing with kernel-ridge-regression encoder and decoder (arXiv 2608.28910).

Both maps are fitted by kernel ridge regression on Ω = [-1, 1] in the *mean* form
(docs/methods.rst, section 'GCC and LeTCC')

    u_enc = argmin (1/K)   Σ_k        ||u(α_k) − x_k||² + λ_enc ||u||²_H
    u_dec = argmin (1/|F|) Σ_{n ∈ F}  ||u(β_n) − ỹ_n||² + λ_dec ||u||²_H

and the estimate is ``f̂(x_k) = u_dec(α_k)``. Normalisation: λ multiplies the RKHS norm against the
*mean* squared error on this fixed interval, so for ``sobolev2`` the decoder equals
``scipy.interpolate.make_smoothing_spline(β_F, ỹ_F, lam=|F|·λ_dec)`` (sum form, ``∫ u''²`` penalty).
Stretching Ω by a factor L would need λ·L³ for the same fit: do not copy λ between normalisations.

``sobolev2`` (the default, LeTCC's decoder) is computed by banded natural-spline solves
(:mod:`gcc_dask.coding.splines`); the strictly positive-definite kernels by a symmetric eigensolver
(:mod:`gcc_dask.coding.kernels`). λ = 0 interpolates (noiseless workers); λ_dec > 0 smooths noisy
results. ``lambda_dec="gcv"`` picks λ_dec per batch by generalised cross-validation,
``GCV(λ) = (1/n)||(I − H_λ) ỹ||² / (1 − tr H_λ / n)²`` summed over output coordinates, minimised over a
log grid and refined by Brent's method; the decoder then depends on the results, so
:meth:`GCC.decoder_matrix` is undefined and :meth:`GCC.decode` does two matmuls instead of one.

Leave-one-out residuals ``ỹ_n − u_dec^{(−n)}(β_n)`` come from the linear smoother in closed form,
``(M ỹ)_n / M_nn`` (``e_n / (1 − H_nn)`` for λ > 0, its limit at λ = 0), with no refits: see
:meth:`GCC.loo_residuals` and ``decode(..., return_error=True)``.
"""

from __future__ import annotations

import functools

import numpy as np
from array_api_compat import device

from gcc_dask.errors import ConfigError

from .base import CodingScheme, _Entry
from .kernels import KERNELS, KernelSmoother
from .registry import register_code
from .splines import LinearSplineSmoother, SplineSmoother
from .validation import check_choice, check_nonneg, check_positive, to_numpy

__all__ = ["GCC", "LeTCC", "gcv_select"]

AUX_CACHE_SIZE = 16


def gcv_select(kappa: np.ndarray, energy: np.ndarray, n: int, null_dim: int) -> float:
    """Sum-form smoothing parameter ``a`` minimising GCV, from a spectral decomposition of the smoother.

    Parameters
    ----------
    kappa : ndarray of shape (n,)
        Penalty eigenvalues: the hat matrix is ``H(a) = U diag(1 / (1 + a κ)) Uᵀ`` (κ = inf: a mode
        the smoother never fits).
    energy : ndarray of shape (n,)
        ``||(Uᵀ Y)_j||²`` summed over output coordinates.
    n : int
        Number of data points.
    null_dim : int
        Dimension of the unpenalised null space; with ``n <= null_dim`` GCV is undefined and 0 is
        returned (the fit interpolates).

    Returns
    -------
    a : float
        ``n · λ`` for the mean-form λ.
    """
    finite = np.isfinite(kappa)
    kpos = kappa[finite & (kappa > 0)]
    if n <= null_dim or kpos.size == 0 or not np.all(np.isfinite(energy)):
        return 0.0

    def score(log_a: np.ndarray) -> np.ndarray:
        a = 10.0 ** np.atleast_1d(log_a)[:, None]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            h = np.where(finite, 1.0 / (1.0 + a * np.where(finite, kappa, 0.0)), 0.0)
            rss = ((1.0 - h) ** 2 * energy).sum(axis=1) / n
            v = rss / (1.0 - h.sum(axis=1) / n) ** 2
        return np.where(np.isfinite(v), v, np.inf)

    grid = np.linspace(np.log10(1e-4 / kpos.max()), np.log10(1e4 / kpos.min()), 161)
    vals = score(grid)
    i = int(np.argmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    from scipy import optimize  # imported here: it adds ~0.3 s to every process's import of gcc_dask

    res = optimize.minimize_scalar(lambda x: float(score(x)[0]), bounds=(lo, hi), method="bounded")
    best = res.x if res.success and score(res.x)[0] <= vals[i] else grid[i]
    return float(10.0**best)


class _Aux:
    """Per-received-set data beyond the decoder matrix: the smoother and the sort permutation."""

    def __init__(self, smoother, order: np.ndarray) -> None:
        self.smoother = smoother
        self.order = order
        self.pos = np.argsort(order)  # received position p sits at sorted position pos[p]
        self.loo: dict[float, np.ndarray] = {}
        self.stacked: np.ndarray | None = None  # [D; L] at the scheme's fixed λ_dec
        self.applied: dict = {}


@register_code("gcc")
class GCC(CodingScheme):
    """General coded computing: kernel ridge regression encoder and decoder (arXiv 2608.28910).

    Parameters
    ----------
    num_inputs, num_workers : int
        K ≥ 1 and N ≥ `min_received` (N < K is allowed: the code is approximate).
    kernel : {"sobolev2", "sobolev1", "matern32", "matern52", "gaussian"}
        RKHS kernel (docs/methods.rst, section 'GCC and LeTCC'). ``sobolev2``: ``|s − t|³/12`` with null space {1,
        t}, the natural cubic smoothing spline; ``sobolev1``: ``−|s − t|/2`` with null space {1}, the natural
        linear smoothing spline (piecewise linear); the others are strictly positive definite with length scale ℓ.
    lambda_enc : float
        λ_enc ≥ 0, mean form on Ω = [-1, 1] (0: the encoder interpolates the inputs).
    lambda_dec : float or "gcv"
        λ_dec ≥ 0, mean form on Ω = [-1, 1]; ``"gcv"`` chooses it per batch (see module docs).
    length_scale : float
        ℓ > 0 in units of Ω for the Matérn and Gaussian kernels; ignored by ``sobolev2``.
    points : {"chebyshev", "equispaced"}
    nan_policy : {"raise", "propagate"}
    on_coincidence : {"warn", "nudge", "ignore"}

    Notes
    -----
    ``recovery_threshold`` is None; ``min_received`` is 2 for ``sobolev2`` (a line needs two points)
    and 1 otherwise (``sobolev1`` fits a constant to one point). Claimed rates: worst-case MSE O(S³/N³) with S stragglers, O(log³_{1/p}(N)/N³) with
    independent straggling [1]_; smooth f decays faster in practice
    (docs/methods.rst, section 'Convergence rates').

    References
    ----------
    .. [1] "General coded computing", arXiv:2608.28910, eqs. for the RKHS encoder/decoder and rates.
    .. [2] P. Moradi, B. Tahmasebi, M. A. Maddah-Ali, "Coded Computing for Resilient Distributed
       Computing: A Learning-Theoretic Framework" (LeTCC), NeurIPS 2024, arXiv:2406.00300.
    .. [3] C. H. Reinsch, "Smoothing by spline functions", Numer. Math. 10, 1967;
       P. J. Green and B. W. Silverman, "Nonparametric Regression and GLMs", 1994, §2.3 and §3.3.
    """

    def __init__(
        self,
        *,
        num_inputs: int,
        num_workers: int,
        kernel: str = "sobolev2",
        lambda_enc: float = 0.0,
        lambda_dec: float | str = 0.0,
        length_scale: float = 1.0,
        points: str = "chebyshev",
        nan_policy: str = "raise",
        on_coincidence: str = "warn",
    ) -> None:
        super().__init__(
            num_inputs=num_inputs,
            num_workers=num_workers,
            points=points,
            nan_policy=nan_policy,
            on_coincidence=on_coincidence,
        )
        self.kernel = check_choice("kernel", kernel, tuple(KERNELS))
        self.lambda_enc = check_nonneg("lambda_enc", lambda_enc)
        self.lambda_dec = check_nonneg("lambda_dec", lambda_dec, extra=("gcv",))
        self.length_scale = check_positive("length_scale", length_scale)
        self._null_dim = KERNELS[self.kernel][1]
        self.min_received = 2 if self._null_dim == 2 else 1
        self._aux = functools.lru_cache(maxsize=AUX_CACHE_SIZE)(self._aux_from_key)
        self._finish()

    def _scheme_params(self) -> dict:
        return {
            "kernel": self.kernel,
            "lambda_enc": self.lambda_enc,
            "lambda_dec": self.lambda_dec,
            "length_scale": self.length_scale,
        }

    # -- maps -----------------------------------------------------------------------------------------

    def _smoother(self, t: np.ndarray):
        if self.kernel == "sobolev1":
            return LinearSplineSmoother(t)
        if self._null_dim:
            return SplineSmoother(t)
        return KernelSmoother(t, self.kernel, self.length_scale)

    def encoder_at(self, z) -> np.ndarray:
        sm = self._smoother(self.data_points)
        return sm.map(np.asarray(z, dtype=np.float64), self.num_inputs * self.lambda_enc)

    def _decoder_map(self, rs: np.ndarray, z: np.ndarray, lam: float | None = None) -> np.ndarray:
        lam = self.lambda_dec if lam is None else lam
        if lam == "gcv":
            raise _gcv_has_no_matrix()
        return self._smoother(self.worker_points[rs]).map(z, rs.size * lam)

    def decoder_at(self, received, z, *, lambda_dec: float | None = None) -> np.ndarray:
        """u_dec as weights on the results of `received` at `z`, shape ``(len(z), |F|)``.

        `lambda_dec` (mean form) overrides the scheme's value, e.g. with :meth:`select_lambda`'s.
        """
        r = self._validated(self._key(received))
        rs, order = self._sorted(r)
        lam = None if lambda_dec is None else check_nonneg("lambda_dec", lambda_dec)
        z = np.asarray(z, dtype=np.float64)
        return self._unsort_columns(self._decoder_map(rs, z, lam), order)

    def _build_entry(self, received: np.ndarray) -> _Entry:
        mask = np.ones(self.num_inputs, dtype=bool)
        if self.lambda_dec == "gcv":
            return _Entry(None, mask, received)
        return super()._build_entry(received)

    def decoder_matrix(self, received) -> np.ndarray:
        entry = self._entry(received)
        if entry.matrix is None:
            raise _gcv_has_no_matrix()
        return entry.matrix

    def _aux_from_key(self, key: bytes) -> _Aux:
        r = self._validated(key)
        rs, order = self._sorted(r)
        return _Aux(self._smoother(self.worker_points[rs]), order)

    # -- data-driven parts ------------------------------------------------------------------------------

    def _select(self, xp, Y, aux: _Aux) -> float:
        U, kappa = aux.smoother.spectrum()
        Z = self._apply(xp, np.ascontiguousarray(U[aux.pos].T), Y, {}, "Y")
        Z = xp.reshape(Z, (Z.shape[0], -1))
        energy = to_numpy(xp.sum(Z * Z, axis=1)).astype(np.float64)
        n = U.shape[0]
        return gcv_select(kappa, energy, n, self._null_dim) / n

    def select_lambda(self, Y, received) -> float:
        """The mean-form λ_dec that GCV picks for results `Y` of workers `received` (float ≥ 0)."""
        entry = self._entry(received)
        xp, Y = self._as_array("Y", Y, entry.received.size)
        return self._select(xp, Y, self._aux(self._key(received)))

    def _loo_matrix(self, aux: _Aux, lam: float) -> np.ndarray:
        L = aux.loo.get(lam)
        if L is None:
            n = aux.order.size
            M = aux.smoother.loo_matrix(n * lam)[np.ix_(aux.pos, aux.pos)]
            with np.errstate(divide="ignore", invalid="ignore"):
                L = M / np.diag(M)[:, None]
            if len(aux.loo) >= 4:
                aux.loo.clear()
            aux.loo[lam] = L
        return L

    def loo_residuals(self, Y, received, *, lambda_dec: float | None = None):
        """Leave-one-out residuals ``ỹ_n − u_dec^{(−n)}(β_n)``, shape ``(|F|, *out)``, namespace of `Y`.

        Closed form for the linear smoother, no refits. NaN where undefined (``sobolev2`` with
        ``|F| = 2``). `lambda_dec` defaults to the scheme's (GCV's choice for ``"gcv"``).
        """
        entry = self._entry(received)
        xp, Y = self._as_array("Y", Y, entry.received.size)
        aux = self._aux(self._key(received))
        if lambda_dec is None:
            lam = self._select(xp, Y, aux) if self.lambda_dec == "gcv" else self.lambda_dec
        else:
            lam = check_nonneg("lambda_dec", lambda_dec)
        return self._apply(xp, self._loo_matrix(aux, lam), Y, {}, "Y")

    def decode(self, Y, received, *, return_error: bool = False):
        """Estimates of f(x_k) (see :meth:`CodingScheme.decode`), optionally with an error estimate.

        With ``return_error=True`` returns ``(estimates, error)``; ``error`` has shape (K,), the
        namespace and dtype of `Y`: the squared leave-one-out residual norms ``||ỹ_n − u^{(−n)}(β_n)||²``
        interpolated linearly (over β) at each α_k. It needs no ground truth. It is an indicator, not
        a calibrated MSE: removing a point widens the local gap, so it overstates the error of the full
        fit (error ∝ gap⁴ for cubic splines, so up to 2⁸ in squared error: on x·sin x, K = 10, S = 4,
        the median ratio to the true MSE was 5 at N = 20, 28 at N = 40 and ~180 at N ≥ 80, with log-log
        correlation 0.5–0.8 across batches). Use it to rank batches and flag bad ones, not as an MSE.
        Its mean over k is a per-batch estimate. An estimate that is f(x_k) itself is given 0 (:func:`exact_rows`:
        its decoder row takes one result alone, whose coded input is x_k alone: a systematic worker point on α_k,
        received, with λ_dec = 0), where the interpolated residuals of its neighbours said otherwise.
        """
        if self.lambda_dec != "gcv" and not return_error:
            return super().decode(Y, received)
        entry = self._entry(received)
        xp, Y = self._as_array("Y", Y, entry.received.size)
        aux = self._aux(self._key(received))
        if self.lambda_dec == "gcv":
            lam = self._select(xp, Y, aux)
            D = self._unsort_columns(aux.smoother.map(self.data_points, aux.order.size * lam), aux.order)
        else:
            lam, D = self.lambda_dec, entry.matrix
        if not return_error:
            return self._apply(xp, D, Y, {}, "Y")
        # one matmul for estimates and LOO residuals: [D; L] @ Y
        K = self.num_inputs
        if self.lambda_dec == "gcv":
            both = self._apply(xp, np.vstack([D, self._loo_matrix(aux, lam)]), Y, {}, "Y")
        else:
            if aux.stacked is None:
                aux.stacked = np.vstack([D, self._loo_matrix(aux, lam)])
            both = self._apply(xp, aux.stacked, Y, aux.applied, "Y")
        est, loo = both[:K, ...], both[K:, ...]
        loo = xp.reshape(loo, (loo.shape[0], -1))
        sq = to_numpy(xp.sum(loo * loo, axis=1)).astype(np.float64)
        order = aux.order
        err = np.interp(self.data_points, self.worker_points[entry.received[order]], sq[order])
        err[exact_rows(np.asarray(to_numpy(D), dtype=np.float64), self.encoder_matrix[entry.received])] = 0.0
        return est, xp.asarray(err, dtype=Y.dtype, device=device(Y))


#: how far from a unit vector a decoder or encoder row may be and still select one result or one input
#: (:func:`exact_rows`; systematic points give exact unit rows, λ > 0 rows far from it)
UNIT_ROW_TOL = 1e-12


def exact_rows(decoder: np.ndarray, encoder: np.ndarray, tol: float = UNIT_ROW_TOL) -> np.ndarray:
    """Which estimates of a decode are f(x_k) itself: bool of shape (K,).

    Row k of `decoder` (K, |F|) takes result j alone (1 there, 0 elsewhere, within `tol`), and row j of `encoder`
    (|F|, K: the encoder rows of the received workers, in the decoder's column order) is the unit vector at k: that
    worker's coded input is x_k, so the estimate D_k·Y = y_j = f(x_k) exactly (a systematic worker point on α_k,
    received and interpolated, λ_dec = 0: docs/methods.rst, section 'Point placement').

    >>> exact_rows(np.array([[0., 1.], [0.5, 0.5]]), np.array([[0.3, 0.7], [1., 0.]]))
    array([ True, False])
    """
    k = np.arange(decoder.shape[0])
    j = np.argmax(np.abs(decoder), axis=1)
    picked = decoder[k, j]
    one_result = (np.abs(picked - 1.0) <= tol) & (np.abs(decoder).sum(axis=1) - np.abs(picked) <= tol)
    rows = encoder[j]  # (K, K): the coded input of the result each estimate takes
    own = rows[k, k]
    one_input = (np.abs(own - 1.0) <= tol) & (np.abs(rows).sum(axis=1) - np.abs(own) <= tol)
    return one_result & one_input


def _gcv_has_no_matrix() -> ConfigError:
    return ConfigError(
        "lambda_dec='gcv' chooses λ from the results, so there is no fixed decoder matrix; call "
        "select_lambda(Y, received) and pass that value to decoder_at(received, z, lambda_dec=...), or "
        "build the code with a float lambda_dec"
    )


@register_code("letcc")
class LeTCC(GCC):
    """LeTCC: GCC with the ``sobolev2`` kernel (natural cubic smoothing splines), arXiv 2406.00300.

    Same parameters as :class:`GCC` without `kernel` and `length_scale`.

    References
    ----------
    .. [1] P. Moradi, B. Tahmasebi, M. A. Maddah-Ali, "Coded Computing for Resilient Distributed
       Computing: A Learning-Theoretic Framework", NeurIPS 2024, arXiv:2406.00300.
    """

    def __init__(
        self,
        *,
        num_inputs: int,
        num_workers: int,
        lambda_enc: float = 0.0,
        lambda_dec: float | str = 0.0,
        points: str = "chebyshev",
        nan_policy: str = "raise",
        on_coincidence: str = "warn",
    ) -> None:
        super().__init__(
            num_inputs=num_inputs,
            num_workers=num_workers,
            kernel="sobolev2",
            lambda_enc=lambda_enc,
            lambda_dec=lambda_dec,
            points=points,
            nan_policy=nan_policy,
            on_coincidence=on_coincidence,
        )

    def _scheme_params(self) -> dict:
        return {"lambda_enc": self.lambda_enc, "lambda_dec": self.lambda_dec}
