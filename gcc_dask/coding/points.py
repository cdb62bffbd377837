"""Point placement on Ω = [-1, 1]: data points α (K,) and worker points β (N,), and α/β coincidences.

Defaults follow the BACC/ApproxIFER construction (docs/methods.rst, section 'Point placement'): α are Chebyshev
points of the first kind (strictly inside Ω, so no data point sits at an end where a straggling end worker would
force extrapolation) and β are Chebyshev points of the second kind (they include ±1). ``"equispaced"`` is the
uniform analogue: α at the midpoints of K equal cells, β on an even grid that includes ±1.

Every array returned here is sorted ascending, so worker index order equals point order: a contiguous
range of worker indices is a contiguous stretch of Ω.

A worker point equal to a data point (β_n = α_k) makes a smooth scheme partly systematic: the decoder
returns f(x_k) exactly while worker n survives, which flatters convergence plots
(docs/methods.rst, section 'Point placement'). With these defaults it happens exactly when ``(2k+1)(N-1) = 2nK`` for some k, n, e.g. N - 1 a
multiple of 2K (never for even N). :func:`coincidences` finds such pairs and :func:`nudge` moves the affected
workers.
"""

from __future__ import annotations

import numpy as np

__all__ = ["POINTS", "at_node", "coincidences", "data_points", "nudge", "worker_points"]

POINTS = ("chebyshev", "equispaced")

#: Two points closer than this (absolute, on Ω = [-1, 1]) count as coincident.
COINCIDENCE_TOL = 1e-12


def _symmetrise(x: np.ndarray) -> np.ndarray:
    """Sort ascending and make the set exactly symmetric about 0 (cos rounding breaks the symmetry)."""
    x = np.sort(x)
    return (x - x[::-1]) / 2.0


def data_points(kind: str, num_inputs: int) -> np.ndarray:
    """Data points α, shape (K,), float64, ascending, strictly inside (-1, 1).

    ``"chebyshev"``: α_k = cos((2k+1)π / (2K)) (first kind). ``"equispaced"``: α_k = -1 + (2k+1)/K.
    """
    k = np.arange(num_inputs, dtype=np.float64)
    if kind == "chebyshev":
        return _symmetrise(np.cos((2.0 * k + 1.0) * np.pi / (2.0 * num_inputs)))
    return _symmetrise(-1.0 + (2.0 * k + 1.0) / num_inputs)


def worker_points(kind: str, num_workers: int) -> np.ndarray:
    """Worker points β, shape (N,), float64, ascending; β_0 = -1 and β_{N-1} = 1 when N ≥ 2.

    ``"chebyshev"``: β_n = cos(nπ / (N-1)) (second kind). ``"equispaced"``: ``linspace(-1, 1, N)``.
    A single worker sits at 0.
    """
    if num_workers == 1:
        return np.zeros(1)
    n = np.arange(num_workers, dtype=np.float64)
    if kind == "chebyshev":
        return _symmetrise(np.cos(n * np.pi / (num_workers - 1)))
    return _symmetrise(np.linspace(-1.0, 1.0, num_workers))


def at_node(nodes: np.ndarray, queries: np.ndarray, weights: np.ndarray | float = 1.0) -> np.ndarray:
    """For barycentric formulas: the node each query sits at, or -1; shape (q,), int64.

    A query sits at node j when ``z == x_j``, or when it is so close that the barycentric term
    ``w_j / (z - x_j)`` overflows (a subnormal offset such as ``x_j + 1e-310``): the formula then gives
    inf/inf = NaN, while its limit, and its value to every digit a float64 holds, is the node's own
    value. Callers put the unit row of that node there. No tolerance is involved: a query whose term
    is finite keeps the formula's value.
    """
    diff = queries[:, None] - nodes[None, :]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        term = np.asarray(weights, dtype=np.float64) / diff
    hit = (diff == 0.0) | np.isinf(term)
    nearest = np.argmin(np.abs(diff), axis=1) if nodes.size else np.zeros(queries.size, dtype=np.int64)
    return np.where(hit.any(axis=1), nearest, -1).astype(np.int64)


def coincidences(alpha: np.ndarray, beta: np.ndarray, tol: float = COINCIDENCE_TOL) -> np.ndarray:
    """Pairs (k, n) with ``|α_k - β_n| <= tol``, shape (m, 2), int64, sorted by n."""
    k, n = np.nonzero(np.abs(alpha[:, None] - beta[None, :]) <= tol)
    pairs = np.stack([k, n], axis=1).astype(np.int64)
    return pairs[np.argsort(pairs[:, 1], kind="stable")]


def nudge(alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Move every worker point that coincides with a data point off it.

    Each coincident β_n moves a quarter of the way towards its neighbour on the side of the centre of Ω
    (towards β_{n+1} when β_n ≤ 0, else towards β_{n-1}); the order of β is kept and the ends ±1 stay.
    Should the new point hit another α (it cannot for the built-in placements, but a check is cheap) the
    fraction is raised until it does not.

    Returns
    -------
    beta : ndarray of shape (N,), float64
        The nudged worker points (a new array).
    moved : ndarray of int64
        Indices of the workers that moved.
    """
    beta = beta.copy()
    moved = np.unique(coincidences(alpha, beta)[:, 1])
    if beta.size < 2:
        return beta, moved
    for n in moved:
        step = 1 if (beta[n] <= 0 and n + 1 < beta.size) or n == 0 else -1
        gap = beta[n + step] - beta[n]
        for frac in (0.25, 0.3, 0.35, 0.4, 0.45):
            candidate = beta[n] + frac * gap
            if np.min(np.abs(alpha - candidate)) > COINCIDENCE_TOL:
                beta[n] = candidate
                break
    return beta, moved
