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

__all__ = ["MIN_GAP", "POINTS", "at_node", "check_points", "coincidences", "data_points", "nudge", "placement",
           "spread_order", "worker_points"]

POINTS = ("chebyshev", "equispaced", "systematic", "twins")
#: Placements whose worker points sit on (or next to) data points on purpose: no coincidence warning.
INTENDED_COINCIDENCE = ("systematic", "twins")
#: The smallest gap between two explicit points (on Ω = [-1, 1], length 2).
MIN_GAP = 1e-6

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
    if kind == "equispaced":
        return _symmetrise(-1.0 + (2.0 * k + 1.0) / num_inputs)
    return _symmetrise(np.cos((2.0 * k + 1.0) * np.pi / (2.0 * num_inputs)))


def worker_points(kind: str, num_workers: int) -> np.ndarray:
    """Worker points β, shape (N,), float64, ascending; β_0 = -1 and β_{N-1} = 1 when N ≥ 2.

    ``"chebyshev"``: β_n = cos(nπ / (N-1)) (second kind). ``"equispaced"``: ``linspace(-1, 1, N)``.
    A single worker sits at 0.
    """
    if num_workers == 1:
        return np.zeros(1)
    n = np.arange(num_workers, dtype=np.float64)
    if kind == "equispaced":
        return _symmetrise(np.linspace(-1.0, 1.0, num_workers))
    return _symmetrise(np.cos(n * np.pi / (num_workers - 1)))


def placement(points, num_inputs: int, num_workers: int, name: str = "points") -> tuple[np.ndarray, np.ndarray]:
    """The data points α (K,) and worker points β (N,) of a placement, both float64 and ascending.

    Parameters
    ----------
    points : str or mapping
        ``"chebyshev"`` (α first kind, β second kind), ``"equispaced"``; ``"systematic"``: α Chebyshev and
        the data points among the worker points (β = α together with N − K Chebyshev points of the second
        kind, each moved off any α it hits), so a surviving worker at α_k returns f(x_k) exactly;
        ``"twins"``: α Chebyshev and ⌊N/K⌋ workers next to each data point (spread over a quarter of the
        smallest gap between data points on each side; one worker sits on α_k when ⌊N/K⌋ = 1), the other
        N mod K at Chebyshev points of the second kind; or explicit points ``{"alpha": [...], "beta":
        [...]}`` (either may be left out: it is then Chebyshev), each strictly increasing in [-1, 1] with
        gaps of at least :data:`MIN_GAP`.
    num_inputs, num_workers : int
        K and N.
    name : str
        The argument's name in error messages.

    Raises
    ------
    ConfigError
        An unknown name, or explicit points of the wrong length, out of [-1, 1], not finite, or not strictly
        increasing by :data:`MIN_GAP` (the message names the pair).
    """
    from gcc_dask.errors import ConfigError

    K, N = int(num_inputs), int(num_workers)
    if isinstance(points, str):
        if points not in POINTS:
            raise ConfigError(f"{name}: got {points!r}; expected one of {list(POINTS)} or a mapping with "
                              "'alpha' and/or 'beta' lists")
        alpha = data_points(points, K)
        if points == "systematic":
            if N < K:
                raise ConfigError(f"{name}: 'systematic' needs num_workers >= num_inputs; got N={N}, K={K}")
            extra = worker_points("chebyshev", N - K) if N > K else np.zeros(0)
            return alpha, np.sort(np.concatenate([alpha, _avoid(alpha, extra)]))
        if points == "twins":
            r, m = divmod(N, K)
            if r == 0:
                raise ConfigError(f"{name}: 'twins' needs num_workers >= num_inputs; got N={N}, K={K}")
            delta = 0.25 * (float(np.min(np.diff(alpha))) if K > 1 else 1.0)
            delta = np.minimum(delta, 1.0 - np.abs(alpha))  # the twins of an end point stay in [-1, 1]
            offsets = np.linspace(-1.0, 1.0, r) if r > 1 else np.zeros(1)
            beta = (alpha[:, None] + delta[:, None] * offsets[None, :]).ravel()
            if m:
                beta = np.concatenate([beta, _avoid(beta, worker_points("chebyshev", m))])
            return alpha, np.sort(beta)
        return alpha, worker_points(points, N)
    if not isinstance(points, dict) or not points or set(points) - {"alpha", "beta"}:
        raise ConfigError(f"{name}: got {points!r}; expected one of {list(POINTS)} or a mapping with 'alpha' "
                          "and/or 'beta' lists")
    alpha = check_points(points["alpha"], K, f"{name}.alpha", "data") if "alpha" in points else \
        data_points("chebyshev", K)
    beta = check_points(points["beta"], N, f"{name}.beta", "worker") if "beta" in points else \
        worker_points("chebyshev", N)
    return alpha, beta


def _avoid(taken: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """`extra` with every point that hits a point of `taken` moved a quarter of the smallest gap of `taken`
    towards the centre (points stay in [-1, 1] and distinct)."""
    extra = extra.copy()
    gap = 0.25 * (float(np.min(np.diff(np.sort(taken)))) if taken.size > 1 else 1.0)
    for i, p in enumerate(extra):
        if taken.size and np.min(np.abs(taken - p)) <= COINCIDENCE_TOL:
            extra[i] = p - gap if p > 0 else p + gap
    return extra


def check_points(values, count: int, name: str, what: str) -> np.ndarray:
    """Explicit points as a float64 array, checked: `count` finite values in [-1, 1], strictly increasing with
    gaps of at least :data:`MIN_GAP`.

    Raises
    ------
    ConfigError
        Naming `name`, the offending pair (indices and values) or value, and what is valid.
    """
    from gcc_dask.errors import ConfigError

    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: got {values!r}; expected a list of {count} numbers in [-1, 1]") from None
    if arr.shape != (count,):
        raise ConfigError(f"{name}: got {arr.size} {what} points; expected {count} (one per "
                          f"{'input' if what == 'data' else 'worker'})")
    bad = np.flatnonzero(~np.isfinite(arr) | (np.abs(arr) > 1.0))
    if bad.size:
        i = int(bad[0])
        raise ConfigError(f"{name}: {what} point {i} is {float(arr[i])!r}; expected finite values in [-1, 1]")
    gaps = np.diff(arr)
    close = np.flatnonzero(gaps < MIN_GAP)
    if close.size:
        i = int(close[0])
        raise ConfigError(f"{name}: {what} points {i} and {i + 1} ({float(arr[i])!r} and {float(arr[i + 1])!r}) are not "
                          f"increasing by at least {MIN_GAP:g}; expected strictly increasing points in [-1, 1], "
                          f"{MIN_GAP:g} apart or more")
    return arr


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


def spread_order(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Worker indices in the order a cutoff would best keep them: any prefix is a well-spread set of points.

    First the workers that sit on a data point (β_n = α_k, the systematic ones; one per data point, so the
    first copy of each input of a replication code), then every other worker; within each stage, farthest
    point first (the worker farthest from every point taken so far, starting from the leftmost; ties go to
    the lowest index). The runtime runs the first ``wait_for`` workers of this order at the batch's priority
    and the rest as spares (docs/pipeline.rst, section 'Spares').

    Parameters
    ----------
    alpha : array of float, shape (K,)
    beta : array of float, shape (N,)

    Returns
    -------
    ndarray of int64, shape (N,)
        A permutation of ``range(N)``.

    Examples
    --------
    >>> spread_order(np.array([0.0]), np.array([-1.0, 0.0, 0.5, 1.0])).tolist()
    [1, 0, 3, 2]
    """
    alpha = np.asarray(alpha, dtype=np.float64).ravel()
    beta = np.asarray(beta, dtype=np.float64).ravel()
    on_data: list[int] = []
    taken: set[int] = set()
    for a in alpha:
        for n in np.flatnonzero(np.abs(beta - a) <= COINCIDENCE_TOL):
            if int(n) not in taken:
                on_data.append(int(n))
                taken.add(int(n))
                break
    rest = [n for n in range(beta.size) if n not in taken]
    order: list[int] = []
    gap = np.full(beta.size, np.inf)  # distance from each point to the nearest point taken so far
    for stage in (on_data, rest):
        left = np.asarray(stage, dtype=np.int64)
        alive = np.ones(left.size, dtype=bool)
        for _ in range(left.size):
            if order:
                i = int(np.argmax(np.where(alive, gap[left], -1.0)))  # ties: the earliest in the stage
            else:
                i = int(np.lexsort((left, beta[left]))[0])
            pick = int(left[i])
            alive[i] = False
            order.append(pick)
            gap = np.minimum(gap, np.abs(beta - beta[pick]))
    return np.asarray(order, dtype=np.int64)
