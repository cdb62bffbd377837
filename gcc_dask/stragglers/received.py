"""Received-set models: the set F of surviving workers drawn directly, for accuracy sweeps that need no cluster
timing. :class:`FixedCount` (exactly S stragglers: random, a contiguous window, or adversarial, found by a
search scored on the code's own decode) and :class:`Bernoulli` (independent straggling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError, NotEnoughResultsError
from gcc_dask.stragglers.checks import _as_generator, _check_code, _check_float, _check_int, _complement, _point_order


PATTERNS = ("random", "contiguous", "adversarial")
_REFINE_RADIUS = 2  # the refinement moves one straggler by up to this many places in point order
_REFINE_MAX_PASSES = 50


# ------------------------------------------------------------------------------ received-set models
@dataclass(frozen=True)
class SearchResult:
    """Outcome of :meth:`FixedCount.search`.

    Attributes
    ----------
    received : ndarray of int64, shape (N - S,)
        The surviving workers, sorted.
    mse : float
        Its loss ``(1/K) Σ_k ||f̂(x_k) − f(x_k)||²``; ``inf`` if the set cannot be decoded.
    mode : {"exhaustive", "heuristic"}
        ``exhaustive``: the true worst case. ``heuristic``: a lower bound on it.
    evaluated : int
        Number of distinct received sets scored.
    """

    received: np.ndarray = field(repr=False)
    mse: float
    mode: str
    evaluated: int


class FixedCount:
    """Exactly ``S`` of the ``N`` workers straggle: the worst-case model (docs/concepts.rst, section 'Stragglers').

    Parameters
    ----------
    S : int
        Number of stragglers, ``>= 0`` (and ``< num_workers`` when drawing).
    pattern : {"random", "contiguous", "adversarial"}
        ``random``: a uniformly random ``S``-subset straggles. ``contiguous``: a uniformly random window
        of ``S`` consecutive workers in worker-point order (``code.worker_points`` when a code is given,
        index order otherwise; windows do not wrap). ``adversarial``: the set maximising the end-to-end
        MSE for the given code, data and f (:meth:`search`).
    exhaustive_limit : int
        ``adversarial`` scores all ``C(N, S)`` straggler sets when there are at most this many.
    restarts : int
        ``adversarial`` above the limit: random straggler sets scored besides every contiguous window.

    Attributes
    ----------
    last_search : {"exhaustive", "heuristic"} or None
        How the last adversarial draw was found (``heuristic``: a lower bound on the worst case).
    last_mse : float or None
        The MSE of the last adversarial draw.

    Raises
    ------
    ConfigError
        ``S < 0``, an unknown ``pattern``, ``exhaustive_limit < 1`` or ``restarts < 0``.

    References
    ----------
    .. [1] "General Coded Computing", arXiv:2608.28910: loss ``O(S³ N⁻³)`` with at most S stragglers.
    """

    def __init__(
        self, S: int, pattern: str = "random", *, exhaustive_limit: int = 2000, restarts: int = 32
    ) -> None:
        self.S = _check_int("S", S, 0)
        if pattern not in PATTERNS:
            raise ConfigError(f"pattern must be one of {list(PATTERNS)}; got pattern={pattern!r}")
        self.pattern = pattern
        self.exhaustive_limit = _check_int("exhaustive_limit", exhaustive_limit, 1)
        self.restarts = _check_int("restarts", restarts, 0)
        self.last_search: str | None = None
        self.last_mse: float | None = None

    def __repr__(self) -> str:
        return (
            f"FixedCount(S={self.S!r}, pattern={self.pattern!r}, "
            f"exhaustive_limit={self.exhaustive_limit!r}, restarts={self.restarts!r})"
        )

    def _check_n(self, num_workers: Any) -> int:
        n = _check_int("num_workers", num_workers, 1)
        if self.S >= n:
            raise ConfigError(f"S must be in [0, num_workers) = [0, {n}); got S={self.S!r}")
        return n

    def received(
        self, num_workers: int, rng: Any, *, code: Any = None, X: Any = None, f: Any = None
    ) -> np.ndarray:
        """Draw the surviving workers.

        Parameters
        ----------
        num_workers : int
            N.
        rng : numpy.random.Generator or int
            Randomness (an int is a seed): same seed, same draw.
        code : CodingScheme, optional
            Orders the workers for ``contiguous``; required for ``adversarial``.
        X : array of shape ``(K, *shape)``, optional
            The batch (``adversarial``).
        f : callable, optional
            ``f((n, *shape)) -> (n, *out)`` (``adversarial``).

        Returns
        -------
        received : ndarray of int64, shape (N - S,)
            Sorted indices of the surviving workers.

        Raises
        ------
        ConfigError
            ``S >= num_workers``, ``code.num_workers != num_workers``, a bad ``rng``, or
            ``adversarial`` without ``code``, ``X`` and ``f``.
        """
        n = self._check_n(num_workers)
        _check_code(code, n)
        gen = _as_generator(rng)
        if self.pattern == "adversarial":
            return self.search(code, X, f, gen).received
        if self.pattern == "random":
            return _complement(gen.choice(n, size=self.S, replace=False), n)
        start = int(gen.integers(0, n - self.S + 1))
        return _complement(_point_order(code, n)[start : start + self.S], n)

    def search(self, code: Any, X: Any, f: Callable[[Any], Any] | None, rng: Any = 0) -> SearchResult:
        """Find the received set of size ``N − S`` with the largest loss ``(1/K) Σ_k ||f̂(x_k) − f(x_k)||²``.

        ``f`` is evaluated once on the K inputs and once on the N coded inputs; each candidate ``F`` is
        then scored by decoding ``Ỹ_F`` alone. Candidates are scored in batches: with the CodingScheme's
        ``decoder_matrix``/``decodable`` one stacked product ``D_F Ỹ_F`` per chunk in float64 (checked
        once against ``code.decode``; a data-dependent decoder such as ``lambda_dec="gcv"`` falls back to
        ``decode`` per set). An undecodable set (``NotEnoughResultsError``, or NaN estimates such as a
        replicated input whose copies all straggled) scores ``inf``, the worst.

        If ``C(N, S) <= exhaustive_limit`` every straggler set is scored and the result is the true worst
        case (``mode="exhaustive"``). Otherwise (``mode="heuristic"``) every window of ``S`` consecutive
        workers in point order and ``restarts`` random sets are scored, and the best is refined by local
        search (move one straggler up to 2 places in point order while the loss grows). **The heuristic
        result is only a lower bound on the true worst-case loss**: it is at least the loss of every
        contiguous window, but need not be the maximum. Ties go to the first set found.

        Parameters
        ----------
        code : CodingScheme
            Uses ``num_workers``, ``encode``, ``decode`` (and, when present, ``worker_points``,
            ``decoder_matrix``, ``decodable``).
        X : array of shape ``(K, *shape)``
            The batch (NumPy or CuPy).
        f : callable
            ``f((n, *shape)) -> (n, *out)``.
        rng : numpy.random.Generator or int
            Randomness of the restarts (unused by the exhaustive search).

        Returns
        -------
        SearchResult
            Also recorded in ``last_search`` and ``last_mse``.

        Raises
        ------
        ConfigError
            ``code``, ``X`` or ``f`` missing, or ``S >= code.num_workers``.
        """
        missing = [k for k, v in (("code", code), ("X", X), ("f", f)) if v is None]
        if missing:
            raise ConfigError(f"pattern='adversarial' needs code, X and f; got None for {', '.join(missing)}")
        n = self._check_n(int(code.num_workers))
        gen = _as_generator(rng)
        score = _Scorer(code, X, f)
        if math.comb(n, self.S) <= self.exhaustive_limit:
            mode = "exhaustive"
            cands = np.array(list(combinations(range(n), self.S)), dtype=np.int64)
            best, mse = _best_of(score, cands.reshape(math.comb(n, self.S), self.S))
        else:
            mode = "heuristic"
            order = _point_order(code, n)
            windows = order[np.arange(n - self.S + 1)[:, None] + np.arange(self.S)]
            rand = [gen.choice(n, self.S, replace=False)[None] for _ in range(self.restarts)]
            best, mse = _refine(score, *_best_of(score, np.concatenate([windows, *rand])), order)
        self.last_search, self.last_mse = mode, mse
        return SearchResult(_complement(best, n), mse, mode, score.evaluated)


class _Scorer:
    """Loss of straggler sets, memoised; f is evaluated once (see :meth:`FixedCount.search`)."""

    CHUNK = 128

    def __init__(self, code: Any, X: Any, f: Callable[[Any], Any]) -> None:
        self.code, self.n = code, int(code.num_workers)
        self.Y = f(code.encode(X))  # (N, *out), the data's namespace and dtype
        ref = _host(f(X))
        self.ref = ref.reshape(ref.shape[0], -1)  # (K, m)
        self.Yh = _host(self.Y).reshape(self.n, -1)  # (N, m)
        has_matrix = hasattr(code, "decoder_matrix") and hasattr(code, "decodable")
        self.fast: bool | None = None if has_matrix else False  # None: not yet checked
        self.cache: dict[bytes, float] = {}

    @property
    def evaluated(self) -> int:
        return len(self.cache)

    def __call__(self, stragglers: np.ndarray) -> np.ndarray:
        """Losses (B,) float64 of the straggler sets (B, S)."""
        out = np.empty(len(stragglers))
        todo = []
        for i, s in enumerate(stragglers):
            key = np.sort(s).tobytes()
            if key in self.cache:
                out[i] = self.cache[key]
            else:
                todo.append((i, key, _complement(s, self.n)))
        for lo in range(0, len(todo), self.CHUNK):
            chunk = todo[lo : lo + self.CHUNK]
            for (i, key, _), mse in zip(chunk, self._score([r for _, _, r in chunk]), strict=True):
                out[i] = self.cache[key] = mse
        return out

    def _score(self, received: list[np.ndarray]) -> list[float]:
        mats = []
        for r in received:
            if self.fast is False:
                break
            mats.append(self._matrix(r))
        if self.fast is False:  # no matrix path, or its one check just failed
            return [self._by_decode(r) for r in received]
        losses = [math.inf] * len(received)
        ok = [j for j, D in enumerate(mats) if D is not None]
        if ok:
            err = np.stack([mats[j] for j in ok]) @ self.Yh[np.stack([received[j] for j in ok])]
            err -= self.ref  # (B, K, m)
            for j, mse in zip(ok, np.einsum("bkm,bkm->b", err, err) / self.ref.shape[0], strict=True):
                losses[j] = float(mse) if math.isfinite(mse) else math.inf
        return losses

    def _by_decode(self, received: np.ndarray) -> float:
        try:
            est = _host(self.code.decode(self.Y[received], received)).reshape(self.ref.shape)
        except NotEnoughResultsError:
            return math.inf
        mse = float(np.sum((est - self.ref) ** 2) / self.ref.shape[0])
        return mse if math.isfinite(mse) else math.inf

    def _matrix(self, received: np.ndarray) -> np.ndarray | None:
        """``D_F`` ``(K, |F|)`` float64, or None when F cannot be decoded."""
        try:
            if not np.all(self.code.decodable(received)):
                return None
            D = np.asarray(self.code.decoder_matrix(received), dtype=np.float64)
        except NotEnoughResultsError:
            return None
        except Exception:
            if self.fast is not None:
                raise
            self.fast = False  # no usable matrix (e.g. refused for a data-driven decoder): use decode
            return None
        if self.fast is None:  # once: is decode this matrix (not a data-driven decoder)?
            est = _host(self.code.decode(self.Y[received], received)).reshape(self.ref.shape)
            tol = 1e-5 * max(float(np.max(np.abs(self.Yh), initial=0.0)), 1e-300)
            self.fast = bool(np.allclose(D @ self.Yh[received], est, rtol=1e-4, atol=tol))
        return D


def _host(a: Any) -> np.ndarray:
    """A float64 NumPy copy of a NumPy or CuPy array."""
    if type(a).__module__.split(".")[0] == "cupy":
        a = a.get()
    return np.asarray(a, dtype=np.float64)


def _best_of(score: _Scorer, cands: np.ndarray) -> tuple[np.ndarray, float]:
    losses = score(cands)
    i = int(np.argmax(losses))  # the first maximum: deterministic ties
    return np.sort(cands[i]), float(losses[i])


def _refine(score: _Scorer, best: np.ndarray, mse: float, order: np.ndarray) -> tuple[np.ndarray, float]:
    """Best-improvement local search over moves of one straggler by ±1..±_REFINE_RADIUS ranks."""
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    steps = [s for r in range(1, _REFINE_RADIUS + 1) for s in (r, -r)]
    for _ in range(_REFINE_MAX_PASSES):
        moves = [
            np.concatenate([best[:i], order[[r]], best[i + 1 :]])
            for i in range(best.size)
            for r in (int(rank[best[i]]) + s for s in steps)
            if 0 <= r < order.size and order[r] not in best
        ]
        if mse == math.inf or not moves:
            break
        cand, cand_mse = _best_of(score, np.stack(moves))
        if cand_mse <= mse:
            break
        best, mse = cand, cand_mse
    return best, mse


class Bernoulli:
    """Each worker straggles independently with probability ``p`` (docs/concepts.rst, section 'Stragglers').

    Parameters
    ----------
    p : float
        Straggling probability, in ``[0, 1)``.

    Raises
    ------
    ConfigError
        ``p`` outside ``[0, 1)``.

    References
    ----------
    .. [1] "General Coded Computing", arXiv:2608.28910: expected loss ``O(log³_{1/p}(N) · N⁻³)``.
    """

    def __init__(self, p: float) -> None:
        self.p = _check_float("p", p, 0.0, 1.0, open_hi=True)

    def __repr__(self) -> str:
        return f"Bernoulli(p={self.p!r})"

    def received(
        self, num_workers: int, rng: Any, *, code: Any = None, X: Any = None, f: Any = None
    ) -> np.ndarray:
        """Draw the surviving workers: ``(|F|,) int64`` sorted, ``|F| ~ Binomial(N, 1 − p)`` (may be 0).

        ``X`` and ``f`` are accepted for a uniform interface and ignored; ``code`` is only checked against
        ``num_workers``. Raises ``ConfigError`` for a bad ``num_workers``, ``rng`` or code.
        """
        n = _check_int("num_workers", num_workers, 1)
        _check_code(code, n)
        return np.flatnonzero(_as_generator(rng).random(n) >= self.p).astype(np.int64)
