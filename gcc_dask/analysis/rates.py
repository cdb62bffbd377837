"""Convergence rates: the least-squares slope of log MSE on log N, a bootstrap interval, reference lines.

The GCC paper bounds the worst-case loss with at most S stragglers by ``O(S³ N⁻³)`` and the expected loss
with independent straggling (probability p) by ``O(log³_{1/p}(N) · N⁻³)`` (arXiv:2608.28910). These are upper
bounds: on smooth f the observed decay is steeper (slopes ≈ −6 to −7 for x·sin x, see
docs/methods.rst, section 'Convergence rates'). The reference lines drawn here have the bound's shape with
the constant fixed by one measured point (the bound's constant is not known), so they show slopes, not
levels.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gcc_dask.errors import InvalidInputError

#: A scheme whose mean MSE stays below this at every N is exact (to rounding): no slope is fitted.
EXACT_MSE = 1e-20

__all__ = ["EXACT_MSE", "RateFit", "dominance", "fit_rate", "rate_table", "reference_bernoulli", "reference_worst_case"]


@dataclass(frozen=True)
class RateFit:
    """A fitted power law ``mse ≈ exp(intercept) · N^slope``.

    Attributes
    ----------
    slope, intercept : float
        Least squares of ``log(mean MSE)`` on ``log N`` (natural logs).
    ci_low, ci_high : float
        Percentile bootstrap interval of the slope at `confidence` (trials resampled within each N;
        points resampled when only means are given). NaN when it cannot be formed.
    n_points : int
        Number of N values used (those with a positive, finite mean MSE).
    confidence : float
    """

    slope: float
    intercept: float
    ci_low: float
    ci_high: float
    n_points: int
    confidence: float = 0.95

    def predict(self, num_workers) -> np.ndarray:
        """The fitted MSE at `num_workers` (array-like), float64."""
        return np.exp(self.intercept) * np.asarray(num_workers, dtype=np.float64) ** self.slope

    def label(self) -> str:
        """``"slope −6.8 [−7.1, −6.5]"`` for legends and tables."""
        if not np.isfinite(self.slope):
            return "slope n/a"
        ci = f" [{self.ci_low:.1f}, {self.ci_high:.1f}]" if np.isfinite(self.ci_low) else ""
        return f"slope {self.slope:.1f}{ci}".replace("-", "−")


def _ls(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slopes and intercepts of y (..., n) on x (n,) by least squares."""
    xc = x - x.mean()
    slope = (y * xc).sum(-1) / (xc**2).sum()
    return slope, y.mean(-1) - slope * x.mean()


def fit_rate(num_workers, mse, *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> RateFit:
    """Fit ``log mse = a + slope · log N`` by least squares, with a percentile bootstrap interval.

    Parameters
    ----------
    num_workers : array-like of shape (n,)
        N values (> 0).
    mse : array-like of shape (n,) or (n, trials)
        MSE per N: means, or per-trial values (NaN = undecodable, ignored). With trials, the fit is to
        the per-N mean and the bootstrap resamples trials within each N; with means only, it resamples
        the (N, mse) points (needs at least 3 distinct N for an interval).
    n_boot : int
        Bootstrap replicates (0: no interval).
    confidence : float
        In (0, 1).
    seed : int
        Seeds the bootstrap.

    Returns
    -------
    RateFit
        NaN slope when fewer than 2 N values have a positive finite mean MSE (e.g. an exact scheme).

    Raises
    ------
    InvalidInputError
        Shapes that do not match, N ≤ 0, or `confidence` outside (0, 1).
    """
    N = np.asarray(num_workers, dtype=np.float64).ravel()
    m = np.asarray(mse, dtype=np.float64)
    m = m[:, None] if m.ndim == 1 else m
    if m.ndim != 2 or m.shape[0] != N.size:
        raise InvalidInputError(f"mse: got shape {np.shape(mse)}; expected ({N.size},) or ({N.size}, trials) "
                                f"to match num_workers")
    if np.any(N <= 0):
        raise InvalidInputError(f"num_workers: got {N.tolist()!r}; expected positive values")
    if not 0 < confidence < 1:
        raise InvalidInputError(f"confidence: got {confidence!r}; expected a number in (0, 1)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(m, axis=1)
    ok = np.isfinite(means) & (means > 0)
    nan = RateFit(np.nan, np.nan, np.nan, np.nan, int(ok.sum()), confidence)
    if ok.sum() < 2:
        return nan
    x, rows = np.log(N[ok]), [r[np.isfinite(r)] for r in m[ok]]
    slope, intercept = _ls(x, np.log(means[ok]))
    lo = hi = np.nan
    rng = np.random.default_rng(seed)
    if n_boot > 0 and m.shape[1] > 1:
        boot = np.stack([r[rng.integers(0, r.size, (n_boot, r.size))].mean(1) for r in rows], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            slopes = _ls(x, np.log(boot))[0]
    elif n_boot > 0 and ok.sum() >= 3:
        y = np.log(means[ok])
        idx = rng.integers(0, x.size, (n_boot, x.size))
        keep = np.array([np.unique(x[i]).size >= 2 for i in idx])
        xs, ys = x[idx[keep]], y[idx[keep]]
        xc = xs - xs.mean(1, keepdims=True)
        slopes = (xc * ys).sum(1) / (xc**2).sum(1)
    else:
        slopes = np.array([])
    slopes = slopes[np.isfinite(slopes)]
    if slopes.size:
        lo, hi = np.quantile(slopes, [(1 - confidence) / 2, (1 + confidence) / 2])
    return RateFit(float(slope), float(intercept), float(lo), float(hi), int(ok.sum()), confidence)


def reference_worst_case(num_workers, S: int, *, anchor: tuple[float, float]) -> np.ndarray:
    """The worst-case bound's shape ``c · S³ · N⁻³``, with c set so it passes through ``anchor = (N₀, mse₀)``.

    References: arXiv:2608.28910 (loss O(S³ N⁻³) with at most S stragglers).
    """
    N = np.asarray(num_workers, dtype=np.float64)
    s3 = float(max(S, 1)) ** 3
    n0, m0 = anchor
    c = m0 / (s3 * float(n0) ** -3)
    return c * s3 * N**-3


def reference_bernoulli(num_workers, p: float, *, anchor: tuple[float, float]) -> np.ndarray:
    """The independent-straggling bound's shape ``c · log³_{1/p}(N) · N⁻³`` through ``anchor = (N₀, mse₀)``.

    References: arXiv:2608.28910 (expected loss O(log³_{1/p}(N) · N⁻³)). Needs ``0 < p < 1``.
    """
    if not 0 < p < 1:
        raise InvalidInputError(f"p: got {p!r}; expected a probability in (0, 1) for the log_(1/p) reference")
    N = np.asarray(num_workers, dtype=np.float64)

    def shape(n):
        return (np.log(n) / np.log(1.0 / p)) ** 3 * np.asarray(n, dtype=np.float64) ** -3

    n0, m0 = anchor
    return m0 / shape(float(n0)) * shape(N)


def rate_table(ds, *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Fitted MSE-vs-N slopes of a sweep Dataset, one row per (scheme, num_inputs, S|p).

    Columns: ``scheme, code, num_inputs, S|p, slope, ci_low, ci_high, n_points, N_min, N_max,
    mse_at_N_min, mse_at_N_max, exact``. Only done cells enter; rows with fewer than 2 N values are left
    out. ``exact`` rows (mean MSE below :data:`EXACT_MSE` at every N, e.g. LCC on a polynomial) get a NaN
    slope: rounding noise has no rate.
    """
    from gcc_dask.analysis.metrics import straggler_dim

    sdim = straggler_dim(ds)
    if ds.sizes["num_workers"] < 2:
        return pd.DataFrame()
    mse = np.where((ds["status"].values == 1)[..., None], ds["mse"].values, np.nan)
    N = ds["num_workers"].values
    rows = []
    for i, scheme in enumerate(ds["scheme"].values):
        for a, K in enumerate(ds["num_inputs"].values):
            for c, s in enumerate(ds[sdim].values):
                m = mse[i, a, :, c, :]
                ran = np.isfinite(m).any(axis=1)
                if ran.sum() < 2:
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    means = np.nanmean(m[ran], axis=1)
                exact = bool(np.nanmax(means) < EXACT_MSE)
                fit = fit_rate(N[ran], m[ran], n_boot=0 if exact else n_boot, confidence=confidence, seed=seed)
                if exact:  # rounding noise has no rate
                    fit = RateFit(np.nan, np.nan, np.nan, np.nan, fit.n_points, confidence)
                rows.append({"scheme": str(scheme), "code": str(ds["code"].values[i]), "num_inputs": int(K),
                             sdim: s.item(), "slope": fit.slope, "ci_low": fit.ci_low, "ci_high": fit.ci_high,
                             "n_points": fit.n_points, "N_min": int(N[ran].min()), "N_max": int(N[ran].max()),
                             "mse_at_N_min": float(means[0]), "mse_at_N_max": float(means[-1]), "exact": exact})
    return pd.DataFrame(rows)


def dominance(ds, scheme: str, baseline: str) -> pd.DataFrame:
    """Where `scheme`'s mean MSE is below `baseline`'s: one row per (num_inputs, S|p).

    Columns: ``num_inputs, S|p, below_at_every_N`` (bool), ``below_at_largest_N`` (bool),
    ``decreasing`` (bool: mean MSE falls from each N to the next), ``worst_ratio`` (max over N of
    scheme / baseline mean MSE).
    """
    from gcc_dask.analysis.metrics import straggler_dim

    sdim = straggler_dim(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = ds["mse"].where(ds["status"] == 1).mean("trial", skipna=True)
    a, b = mean.sel(scheme=scheme), mean.sel(scheme=baseline)
    rows = []
    for K in ds["num_inputs"].values:
        for s in ds[sdim].values:
            x, y = a.sel(num_inputs=K, **{sdim: s}).values, b.sel(num_inputs=K, **{sdim: s}).values
            ok = np.isfinite(x) & np.isfinite(y)
            if not ok.any():
                continue
            x, y = x[ok], y[ok]
            rows.append({"num_inputs": int(K), sdim: s.item(), "below_at_every_N": bool((x < y).all()),
                         "below_at_largest_N": bool(x[-1] < y[-1]), "decreasing": bool((np.diff(x) < 0).all()),
                         "worst_ratio": float(np.max(x / y))})
    return pd.DataFrame(rows)
