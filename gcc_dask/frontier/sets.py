"""The received sets a frontier cell is measured on: every straggler set, the contiguous windows, or seeded draws.

Pure NumPy. A set is a boolean mask of shape (N,) over the workers (True: the result arrived), so that
every estimator at the same N is measured on the same sets (a paired comparison; docs/frontier.rst,
section 'Protocol').

* ``random`` stragglers: every one of the C(N, S) straggler sets, each equally likely, so the mean over them
  is the exact expectation under S random stragglers (no sampling noise) — when C(N, S) is at most
  ``exhaustive_limit``; otherwise ``draws`` seeded sets, shared by every group and estimator of the cell.
* ``contiguous``: the N − S + 1 windows of S consecutive workers in worker-index order (a rack or a switch
  failing; replication's copies are K workers apart, so a window shorter than K never loses every copy).
* ``worst``: each estimator's own worst set per group, searched over the same sets as ``random`` (the true
  worst case when the enumeration is exhaustive; a lower bound on it otherwise).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from gcc_dask.errors import ConfigError

__all__ = ["PATTERNS", "all_sets", "bernoulli_sets", "contiguous_sets", "drawn_sets", "latency_sets", "random_sets"]

PATTERNS = ("random", "contiguous", "worst")


def _check(num_workers: int, stragglers: int) -> tuple[int, int]:
    n, s = int(num_workers), int(stragglers)
    if n < 1 or not 0 <= s < n:
        raise ConfigError(f"stragglers: got S={stragglers!r} with N={num_workers!r}; expected 0 <= S < N")
    return n, s


def all_sets(num_workers: int, stragglers: int) -> np.ndarray:
    """Every received set with exactly S of the N workers missing: bool of shape (C(N, S), N).

    Rows are in lexicographic order of the straggler indices.
    """
    n, s = _check(num_workers, stragglers)
    count = math.comb(n, s)
    out = np.ones((count, n), dtype=bool)
    if s:
        idx = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), s)), dtype=np.int64,
                          count=count * s).reshape(count, s)
        out[np.arange(count)[:, None], idx] = False
    return out


def contiguous_sets(num_workers: int, stragglers: int) -> np.ndarray:
    """The N − S + 1 sets missing S consecutive workers (in worker-index order): bool of shape (N − S + 1, N)."""
    n, s = _check(num_workers, stragglers)
    out = np.ones((n - s + 1, n), dtype=bool)
    for i in range(n - s + 1):
        out[i, i:i + s] = False
    return out


def drawn_sets(num_workers: int, stragglers: int, draws: int, seed: int) -> np.ndarray:
    """`draws` sets of S stragglers drawn uniformly (seeded by ``(seed, N, S)``): bool of shape (draws, N)."""
    n, s = _check(num_workers, stragglers)
    rng = np.random.default_rng([int(seed), 0xF407, n, s])
    out = np.ones((int(draws), n), dtype=bool)
    for i in range(int(draws)):
        out[i, rng.choice(n, size=s, replace=False)] = False
    return out


def random_sets(num_workers: int, stragglers: int, *, exhaustive_limit: int, draws: int,
                seed: int) -> tuple[np.ndarray, bool]:
    """The sets of the ``random`` pattern and whether they are exhaustive (every set, equally weighted).

    Returns ``(all_sets(N, S), True)`` when ``C(N, S) <= exhaustive_limit``, else
    ``(drawn_sets(N, S, draws, seed), False)``.
    """
    n, s = _check(num_workers, stragglers)
    if math.comb(n, s) <= int(exhaustive_limit):
        return all_sets(n, s), True
    return drawn_sets(n, s, draws, seed), False


def bernoulli_sets(num_workers: int, p: float, draws: int, seed: int) -> np.ndarray:
    """`draws` received sets with each of the N workers straggling independently with probability p (seeded by
    ``(seed, N, p)``): bool of shape (draws, N). A draw in which every worker straggled keeps none."""
    n = int(num_workers)
    if n < 1 or not 0.0 <= float(p) < 1.0:
        raise ConfigError(f"stragglers: got p={p!r} with N={num_workers!r}; expected 0 <= p < 1")
    rng = np.random.default_rng([int(seed), 0xF407, n, int(round(float(p) * 1e9))])
    return rng.random((int(draws), n)) >= float(p)


def latency_sets(latency_model, policy, draws: int, seed: int) -> np.ndarray:
    """The received sets a pipeline's latency model and cutoff keep, for `draws` batches: bool (draws, N).

    Batch d draws its N latencies ``latency_model.latencies(seed, d, N)`` (:mod:`gcc_dask.stragglers`) and keeps
    the results that arrive by the cutoff of `policy` (:func:`gcc_dask.runtime.cutoff.cutoff_time`, on the
    virtual clock of those latencies), as a run of that pipeline does.
    """
    from gcc_dask.runtime.cutoff import cutoff_time

    n = policy.num_workers
    out = np.zeros((int(draws), n), dtype=bool)
    for d in range(int(draws)):
        lat = np.asarray(latency_model.latencies(int(seed), d, n), dtype=float)
        decision = cutoff_time(lat, policy)
        t = decision.time if np.isfinite(decision.time) else np.max(lat)
        out[d] = lat <= t
    return out
