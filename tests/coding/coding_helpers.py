"""Helpers shared by the coding tests (imported as a plain module: tests/ has no packages)."""

from __future__ import annotations

import numpy as np

#: Every registered scheme with the extra parameters it needs in the shared tests.
EXTRA = {"lcc": {"degree": 2}}


def to_host(a) -> np.ndarray:
    """Any namespace's array as a NumPy array."""
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def xsinx(x):
    return x * np.sin(x)


def worst_case_mse(code, X: np.ndarray, f, S: int, rng: np.random.Generator, n_random: int = 5) -> np.ndarray:
    """Per-trial worst MSE over every contiguous window of `S` stragglers plus `n_random` random sets.

    X has shape (K, T): T independent trials of K scalar inputs. Workers are in point order, so a
    contiguous index window is a contiguous stretch of Ω. Returns shape (T,): for each trial the max
    over the candidate sets of ``(1/K) Σ_k (f̂(x_k) − f(x_k))²``.
    """
    N = code.num_workers
    FX = f(X)
    Y = f(code.encode(X))
    sets = [np.setdiff1d(np.arange(N), np.arange(w, w + S)) for w in range(N - S + 1)]
    sets += [np.sort(rng.choice(N, N - S, replace=False)) for _ in range(n_random)]
    worst = np.zeros(X.shape[1])
    for F in sets:
        D = code.decoder_matrix(F)
        worst = np.maximum(worst, ((D @ Y[F] - FX) ** 2).mean(axis=0))
    return worst


def bernoulli_mse(code, X: np.ndarray, f, p: float, rng: np.random.Generator) -> np.ndarray:
    """Per-trial MSE with each worker straggling independently with probability `p`, shape (T,).

    A draw with fewer survivors than ``code.min_received`` keeps every worker (the runtime would wait).
    """
    N = code.num_workers
    FX = f(X)
    Y = f(code.encode(X))
    out = np.empty(X.shape[1])
    for i in range(X.shape[1]):
        F = np.flatnonzero(rng.random(N) >= p)
        if F.size < code.min_received:
            F = np.arange(N)
        out[i] = ((code.decoder_matrix(F) @ Y[F, i] - FX[:, i]) ** 2).mean()
    return out


def slope(Ns, values) -> float:
    """Least-squares slope of log(values) against log(Ns)."""
    return float(np.polyfit(np.log(np.asarray(Ns, float)), np.log(np.asarray(values, float)), 1)[0])
