"""Straggler models: which workers are missing, and how long each worker takes (pure, seeded).

Two kinds of model (docs/pipeline.rst, section 'Straggler injection'; docs/concepts.rst, section 'Stragglers'):

* **Received-set models** draw the set ``F`` of surviving workers directly, for accuracy sweeps that need
  no cluster timing: :class:`FixedCount` (exactly ``S`` stragglers: random, a contiguous window, or
  adversarial) and :class:`Bernoulli` (independent straggling). Both have
  ``received(num_workers, rng, *, code=None, X=None, f=None) -> (|F|,) int64`` sorted.
* **Latency models** draw per-worker latencies in seconds for the runtime's virtual clock:
  :class:`ShiftedExponential` and :class:`Pareto`, with a hang probability and persistently slow
  workers. ``latencies(seed, batch, num_workers) -> (N,) float64``.

Worker ``w``'s base latency and hang depend only on ``(seed, batch, w)``: they come from a counter-based
``numpy.random.Philox`` stream keyed on ``(seed, batch)``, one 4-word block per worker, so schemes with
different ``N`` share the draws of the workers they have in common (a paired comparison), and the two
models use the same uniforms (common random numbers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from itertools import combinations
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError, NotEnoughResultsError
from gcc_dask.limits import parse_seconds, MAX_DURATION

__all__ = [
    "Bernoulli",
    "FixedCount",
    "Pareto",
    "SearchResult",
    "ShiftedExponential",
    "latency_model_from_config",
]

PATTERNS = ("random", "contiguous", "adversarial")
_REFINE_RADIUS = 2  # the refinement moves one straggler by up to this many places in point order
_REFINE_MAX_PASSES = 50
_WORDS = 4  # Philox4x64 words per worker: [latency, hang, reserved, reserved]
_SLOW_STREAM = 0x5107  # keys the seed-only stream that picks the persistently slow workers
_NUMBER = (int, float, np.integer, np.floating)


# --------------------------------------------------------------------------------------- validation
def _check_int(name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer >= {lo}; got {name}={value!r}")
    if value < lo:
        raise ConfigError(f"{name} must be >= {lo}; got {name}={value!r}")
    return int(value)


def _check_float(name: str, value: Any, lo: float, hi: float, *, open_hi: bool = False) -> float:
    ok = isinstance(value, _NUMBER) and not isinstance(value, bool)
    if not ok or not (lo <= float(value) < hi if open_hi else lo <= float(value) <= hi):
        raise ConfigError(
            f"{name} must be a number in [{lo}, {hi}{')' if open_hi else ']'}; got {name}={value!r}"
        )
    return float(value)


def _check_positive(name: str, value: Any) -> float:
    ok = isinstance(value, _NUMBER) and not isinstance(value, bool)
    if not ok or not 0 < float(value) < math.inf:
        raise ConfigError(f"{name} must be a positive finite number; got {name}={value!r}")
    return float(value)


def _duration(name: str, value: Any) -> float:
    """Seconds (float64) from a number of seconds or a string such as ``"50ms"``, at most one day
    (:func:`gcc_dask.limits.parse_seconds`: a string needs a unit, no underscores)."""
    try:
        return parse_seconds(value)
    except ValueError as exc:
        raise ConfigError(f"{name} must be {exc}; got {name}={value!r}") from None


def _as_generator(rng: Any) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise ConfigError(f"rng must be a numpy.random.Generator or a non-negative int seed; got {rng!r}")


def _check_code(code: Any, num_workers: int) -> None:
    if code is not None and int(code.num_workers) != num_workers:
        raise ConfigError(
            f"num_workers must equal code.num_workers; got num_workers={num_workers!r}, "
            f"code.num_workers={code.num_workers!r}"
        )


def _point_order(code: Any, num_workers: int) -> np.ndarray:
    """Worker indices sorted by worker point (index order without a code or its points)."""
    points = getattr(code, "worker_points", None)
    if points is None:
        return np.arange(num_workers)
    return np.argsort(np.asarray(points, dtype=np.float64), kind="stable")


def _complement(stragglers: np.ndarray, n: int) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[stragglers] = False
    return np.flatnonzero(mask).astype(np.int64)


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


# ---------------------------------------------------------------------------------- latency models
def _uniforms(seed: Any, batch: Any, num_workers: Any) -> np.ndarray:
    """(N, 4) uniforms in [0, 1); row w depends only on (seed, batch, w)."""
    key = np.random.SeedSequence([_check_int("seed", seed, 0), _check_int("batch", batch, 0)])
    n = _check_int("num_workers", num_workers, 1)
    raw = np.random.Philox(key=key.generate_state(2, np.uint64)).random_raw(_WORDS * n)
    return ((raw >> np.uint64(11)) * 2.0**-53).reshape(n, _WORDS)


class _LatencyModel(ABC):
    """Hangs, slow workers and the draw; subclasses are frozen dataclasses with these fields."""

    hang_prob: float
    hang_delay: float
    slow_workers: int
    slow_factor: float

    def _validate(self, **durations: Any) -> None:
        for name, value in durations.items():
            object.__setattr__(self, name, _duration(name, value))
        object.__setattr__(self, "hang_prob", _check_float("hang_prob", self.hang_prob, 0.0, 1.0))
        object.__setattr__(self, "hang_delay", _duration("hang_delay", self.hang_delay))
        object.__setattr__(self, "slow_workers", _check_int("slow_workers", self.slow_workers, 0))
        object.__setattr__(self, "slow_factor", _check_positive("slow_factor", self.slow_factor))

    @abstractmethod
    def _base(self, u: np.ndarray) -> np.ndarray:
        """Base latencies (s) from uniforms `u` in (0, 1), before hangs and slow workers."""

    def slow_set(self, seed: int, num_workers: int) -> np.ndarray:
        """The persistently slow workers, ``(slow_workers,) int64`` sorted.

        The ``slow_workers`` indices in ``[0, N)`` of smallest seed-derived priority: the same in every
        batch, a function of ``(seed, num_workers)``. A worker slow at N workers is slow at any smaller N
        that includes it. Raises ``ConfigError`` if ``slow_workers > num_workers``.
        """
        n = _check_int("num_workers", num_workers, 1)
        if self.slow_workers > n:
            raise ConfigError(
                f"slow_workers must be at most num_workers={n}; got slow_workers={self.slow_workers!r}"
            )
        key = np.random.SeedSequence([_check_int("seed", seed, 0), _SLOW_STREAM])
        priority = np.random.Philox(key=key.generate_state(2, np.uint64)).random_raw(n)
        return np.sort(np.argsort(priority, kind="stable")[: self.slow_workers]).astype(np.int64)

    def latencies(self, seed: int, batch: int, num_workers: int, work: float = 1.0) -> np.ndarray:
        """Draw one batch's worker latencies.

        ``latency_w = work · base_w · (slow_factor if w is slow else 1) + hang_delay · [w hangs]``, capped at
        one day (:data:`gcc_dask.limits.MAX_DURATION`); ``w`` hangs with probability ``hang_prob``. ``base_w`` and the hang depend only on ``(seed, batch, w)``;
        the slow set only on ``(seed, num_workers)`` (:meth:`slow_set`).

        Parameters
        ----------
        seed : int
            Run seed, ``>= 0``.
        batch : int
            Batch index, ``>= 0``.
        num_workers : int
            N, ``>= 1``.
        work : float
            Units of work per shard (``> 0``): the base latency is drawn per unit and scaled by it, as in the
            classic model where a task with load ℓ runs ``ℓ·(shift + Exp)`` ([1] of
            :class:`ShiftedExponential`). A hang's delay is not scaled. The pipeline passes the block size
            with ``stragglers.unit: sample``, else 1.

        Returns
        -------
        latencies : ndarray of float64, shape (N,)
            Seconds.

        Raises
        ------
        ConfigError
            Negative ``seed`` or ``batch``, ``num_workers < 1``, ``slow_workers > num_workers`` or
            ``work <= 0``.
        """
        u = _uniforms(seed, batch, num_workers)
        lat = np.minimum(self._base(u[:, 0]), MAX_DURATION)  # a heavy tail must not draw a run-long hang
        if work != 1.0:
            lat *= _check_positive("work", work)
        if self.slow_workers:
            lat[self.slow_set(seed, num_workers)] *= self.slow_factor
        if self.hang_prob > 0:
            lat[u[:, 1] < self.hang_prob] += self.hang_delay
        return np.minimum(lat, MAX_DURATION)


@dataclass(frozen=True)
class ShiftedExponential(_LatencyModel):
    """Shifted-exponential latency ``shift + Exp(mean=scale)`` seconds: the classic coded-computing model.

    ``Pr[T <= t] = 1 − exp(−(t − shift)/scale)`` for ``t >= shift`` ([1], with ``μ = 1/scale``).

    Parameters
    ----------
    shift : float or str
        Minimum latency: seconds or a duration string (``"50ms"``), ``>= 0``.
    scale : float or str
        Mean of the exponential tail, ``>= 0``.
    hang_prob : float
        Probability in ``[0, 1]`` that a worker also hangs for ``hang_delay`` in a batch.
    hang_delay : float or str
        Extra delay of a hanging worker, ``>= 0``.
    slow_workers : int
        Number of persistently slow workers (same indices in every batch), ``>= 0``.
    slow_factor : float
        Multiplier (> 0) on a slow worker's base latency.

    Raises
    ------
    ConfigError
        A negative, infinite or unparsable duration, ``hang_prob`` outside ``[0, 1]``,
        ``slow_workers < 0`` or ``slow_factor <= 0``.

    References
    ----------
    .. [1] K. Lee, M. Lam, R. Pedarsani, D. Papailiopoulos, K. Ramchandran, "Speeding Up Distributed
       Machine Learning Using Codes", IEEE Trans. Inf. Theory 64(3), 2018, arXiv:1512.02673
       (shifted-exponential run time of each subtask).
    """

    shift: float | str = "50ms"
    scale: float | str = "20ms"
    hang_prob: float = 0.0
    hang_delay: float | str = "5s"
    slow_workers: int = 0
    slow_factor: float = 1.0

    def __post_init__(self) -> None:
        self._validate(shift=self.shift, scale=self.scale)

    def _base(self, u: np.ndarray) -> np.ndarray:
        return self.shift - self.scale * np.log1p(-u)  # inverse CDF; u < 1 keeps it finite


@dataclass(frozen=True)
class Pareto(_LatencyModel):
    """Heavy-tailed Pareto (type I) latency ``shift + scale · (1 − U)^(−1/alpha)`` seconds.

    ``Pr[T − shift > t] = (t/scale)^(−alpha)`` for ``t >= scale`` [1]: the minimum is ``shift + scale``;
    the mean is infinite for ``alpha <= 1``.

    Parameters
    ----------
    scale : float or str
        Pareto scale ``x_m``: seconds or a duration string, ``>= 0``.
    alpha : float
        Tail index, ``> 0``.
    shift : float or str
        Added constant, ``>= 0``.
    hang_prob, hang_delay, slow_workers, slow_factor
        As in :class:`ShiftedExponential`.

    Raises
    ------
    ConfigError
        ``alpha <= 0`` and the cases of :class:`ShiftedExponential`.

    References
    ----------
    .. [1] B. C. Arnold, "Pareto Distributions", 2nd ed., CRC Press, 2015, §3.2 (the type I survival
       function ``(x/x_m)^(−α)``).
    """

    scale: float | str
    alpha: float
    shift: float | str = 0.0
    hang_prob: float = 0.0
    hang_delay: float | str = "5s"
    slow_workers: int = 0
    slow_factor: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", _check_positive("alpha", self.alpha))
        if self.alpha < 0.5:
            raise ConfigError(f"alpha must be at least 0.5 (a heavier tail than that draws latencies of years); "
                              f"got alpha={self.alpha!r}")
        self._validate(scale=self.scale, shift=self.shift)

    def _base(self, u: np.ndarray) -> np.ndarray:
        return self.shift + self.scale * (1.0 - u) ** (-1.0 / self.alpha)


LATENCY_MODELS: dict[str, type[ShiftedExponential] | type[Pareto]] = {
    "shifted_exponential": ShiftedExponential,
    "pareto": Pareto,
}


def latency_model_from_config(
    config: Mapping[str, Any], *, strict: bool = True
) -> ShiftedExponential | Pareto | None:
    """Build a latency model from a mapping such as the YAML ``stragglers`` section.

    Parameters
    ----------
    config : mapping
        ``{"model": "shifted_exponential" | "pareto" | "none", **constructor parameters}``; ``"seed"``,
        ``"unit"`` and ``"clock"`` keys are allowed and ignored (the seed and the work per shard go to
        ``latencies``; the clock is the runtime's).
    strict : bool
        If False, keys that belong to the *other* latency model (``alpha`` under
        ``shifted_exponential``, as in a flattened config section) are dropped instead of rejected.
        Keys of no model are rejected either way.

    Returns
    -------
    ShiftedExponential, Pareto or None
        None for ``model: none`` (no injected latency: the runtime uses the wall clock).

    Raises
    ------
    ConfigError
        A missing or unknown ``model``, an unknown key (the message lists the valid ones), a missing
        required key (``scale`` and ``alpha`` for ``pareto``), or a bad value.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"stragglers must be a mapping with a 'model' key; got {config!r}")
    model = config.get("model")
    if model == "none":
        return None
    if model not in LATENCY_MODELS:
        valid_models = [*sorted(LATENCY_MODELS), "none"]
        raise ConfigError(f"stragglers.model must be one of {valid_models}; got {model!r}")
    cls = LATENCY_MODELS[model]
    valid = sorted(f.name for f in fields(cls))
    params = {k: v for k, v in config.items() if k not in ("model", "seed", "unit", "clock")}
    if not strict:
        others = {f.name for c in LATENCY_MODELS.values() for f in fields(c)} - set(valid)
        params = {k: v for k, v in params.items() if k not in others}
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ConfigError(
            f"stragglers: unknown key(s) {unknown} for model {model!r}; valid keys: "
            f"{['model', 'seed', *valid]}"
        )
    missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in params]
    if missing:
        raise ConfigError(f"stragglers: model {model!r} needs key(s) {missing}; got {dict(config)!r}")
    return cls(**params)
