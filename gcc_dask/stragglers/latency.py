"""Latency models: per-worker latencies in seconds for the runtime's virtual clock, :class:`ShiftedExponential`
and :class:`Pareto`, with a hang probability and persistently slow workers, and
:func:`latency_model_from_config`.

Worker ``w``'s base latency and hang depend only on ``(seed, batch, w)``: they come from a counter-based
``numpy.random.Philox`` stream keyed on ``(seed, batch)``, one 4-word block per worker, so schemes with
different ``N`` share the draws of the workers they have in common (a paired comparison).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_DURATION
from gcc_dask.stragglers.checks import _check_float, _check_int, _check_positive, _duration


_WORDS = 4  # Philox4x64 words per worker: [latency, hang, reserved, reserved]
_SLOW_STREAM = 0x5107  # keys the seed-only stream that picks the persistently slow workers


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
