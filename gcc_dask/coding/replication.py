"""Exact baselines without coding: replication (full or partial) and uncoded (N = K), with fills.

Layout (docs/methods.rst, section 'Replication and uncoded'): worker n < ⌊N/K⌋·K evaluates f on input
``x_{n mod K}``, so full copies of one input sit K workers apart and a contiguous block of fewer than K
stragglers never removes every copy; the other ``m = N mod K`` workers hold one more copy each of the positions
chosen by ``extra`` (partial replication, K ≤ N < 2K when ⌊N/K⌋ = 1). The estimate of f(x_k) is the result of
the first worker in `received` that holds a copy of x_k (the runtime lists results in arrival order; any copy
is exact).

An input none of whose copies survived is *lost*. What it gets is the ``fill``:

``none``
    nothing: its row of the decoder matrix is NaN, the decoded row is NaN and
    :meth:`~CodingScheme.decodable` is False there;
``nearest``
    the result of the received input nearest to it along the group's positions (the lower one on a tie);
``linear``
    the linear interpolation, along the group's positions, between the nearest received inputs on each side
    (``(1 − w)·ŷ_a + w·ŷ_b`` with ``w = (k − a)/(b − a)`` for received positions a < k < b), or the nearest
    received one beyond the last received position at either end.

Under a similarity composition (docs/pipeline.rst, section 'Composition') neighbouring positions of a group
hold similar samples, so a fill is an estimate from neighbours; it is marked (:meth:`Replication.filled`, the
store's ``filled`` array). Every fill is a linear decoder, as gcc's and bacc's are: ``D_F`` is a (K, |F|)
matrix. Encode and decode are gathers of rows (``selection = True``), not matmuls (a linear fill adds one
weighted sum of two rows per filled output), so a NaN in one input stays in that input's output and in the
outputs filled from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_BACKUP_COPIES

from .base import CodingScheme, _Entry
from .registry import register_code
from .validation import check_choice

__all__ = ["EXTRA_RULES", "FILLS", "Replication", "Speculative", "Uncoded", "extra_positions", "fill_weights"]

FILLS = ("none", "nearest", "linear")
#: rules for the positions that get the extra copies of partial replication (:func:`extra_positions`)
EXTRA_RULES = ("spread", "ends")


def extra_positions(rule: str | Sequence[int], num_inputs: int, count: int) -> np.ndarray:
    """Which positions of a group get the `count` extra copies of partial replication (0 <= count < K).

    Parameters
    ----------
    rule : {"spread", "ends"} or sequence of int
        ``"spread"`` (the default): ``round(linspace(0, K − 1, count))``, spread over the group and the two
        end positions first (a lost end position is an extrapolation for every fill; RESULTS.md, section
        'The frontier', chose it on training digits); ``"ends"``: from the outside in, 0, K − 1, 1, K − 2, …;
        or the positions themselves (distinct, in [0, K)).
    num_inputs : int
        K.
    count : int
        m = N mod K, the extra copies.

    Returns
    -------
    ndarray of int64, shape (count,)
        Ascending positions.

    Raises
    ------
    ConfigError
        An unknown rule, or explicit positions that are repeated, out of range or not `count` of them.
    """
    K, m = int(num_inputs), int(count)
    if isinstance(rule, str):
        check_choice("extra", rule, EXTRA_RULES)
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        if rule == "spread":
            out = np.unique(np.round(np.linspace(0, K - 1, m)).astype(np.int64))
            if out.size < m:  # count close to K: fill the gaps from the start
                rest = np.setdiff1d(np.arange(K), out)[: m - out.size]
                out = np.sort(np.concatenate([out, rest]))
            return out
        outside_in = np.ravel(np.column_stack([np.arange(K), np.arange(K)[::-1]]))[:K]  # 0, K-1, 1, K-2, ...
        return np.sort(outside_in[:m])
    pos = np.asarray(list(rule), dtype=np.int64) if not isinstance(rule, np.ndarray) else rule.astype(np.int64)
    if pos.ndim != 1 or pos.size != m or (pos.size and (pos.min() < 0 or pos.max() >= K)) \
            or np.unique(pos).size != pos.size:
        raise ConfigError(f"extra: got {list(rule)!r}; expected 'spread', 'ends' or {m} distinct positions in "
                          f"[0, {K}) (N mod K = {m} extra copies)")
    return np.sort(pos)


def fill_weights(fill: str, received: np.ndarray, num_inputs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fill of the lost positions of a group from its received ones (see the module docs).

    Parameters
    ----------
    fill : {"nearest", "linear"}
    received : ndarray of bool, shape (K,)
        Positions with a result; at least one.
    num_inputs : int
        K.

    Returns
    -------
    lost : ndarray of int64, shape (m,)
        The lost positions.
    (a, b) : tuple of two ndarray of int64, shape (m,)
        The received positions each lost one is filled from.
    weight : ndarray of float64, shape (m,)
        The weight w of ``b``: the estimate is ``(1 − w)·ŷ_a + w·ŷ_b`` (``a == b`` and ``w = 0`` for a copy
        of one neighbour: ``nearest``, or beyond the last received position at an end).
    """
    got = np.flatnonzero(received)
    lost = np.flatnonzero(~np.asarray(received, dtype=bool))
    # the received position at or below / at or above each lost one (-1 / K where there is none)
    below = np.searchsorted(got, lost, side="right") - 1
    above = np.searchsorted(got, lost, side="left")
    has_left, has_right = below >= 0, above < got.size
    left = np.where(has_left, got[np.clip(below, 0, got.size - 1)], -1)
    right = np.where(has_right, got[np.clip(above, 0, got.size - 1)], num_inputs)
    if fill == "nearest":
        take_right = ~has_left | (has_right & (right - lost < lost - left))
        pick = np.where(take_right, right, left)
        return lost, (pick, pick), np.zeros(lost.size)
    a = np.where(has_left, left, right)  # an end: the nearest received one, twice
    b = np.where(has_right, right, left)
    span = (b - a).astype(np.float64)
    w = np.divide(lost - a, span, out=np.zeros(lost.size), where=span > 0)
    return lost, (a, b), w


@register_code("replication")
class Replication(CodingScheme):
    """Full or partial replication: N workers hold copies of the K inputs, K ≤ N.

    Parameters
    ----------
    num_inputs, num_workers : int
        K ≥ 1 and N ≥ K. Worker n < ⌊N/K⌋·K holds input ``n mod K`` (r = ⌊N/K⌋ full copies, K apart); the
        other N mod K workers hold one more copy each of the positions `extra` chooses.
    points : {"chebyshev", "equispaced"}
        Only labels the inputs (``worker_points[n]`` is the data point of the input worker n holds).
    nan_policy : {"raise", "propagate"}
    fill : {"none", "nearest", "linear"}
        What a lost input gets (see the module docs): NaN, the nearest received neighbour's result along the
        group's positions, or the linear interpolation between the received neighbours on each side.
    extra : {"spread", "ends"} or sequence of int
        The positions of the extra copies of partial replication (:func:`extra_positions`).

    Notes
    -----
    ``recovery_threshold = N − c + 1`` with c the fewest copies of any input (any that many results hold a
    copy of every input); ``min_received = 1`` (fewer results decode partially, with NaN rows or fills).
    A fill estimates a lost output from other inputs' results: it is exact only where f is linear along the
    group (:func:`fill_weights`).
    """

    check_coincidence = False
    selection = True

    def __init__(
        self,
        *,
        num_inputs: int,
        num_workers: int,
        points: str = "chebyshev",
        nan_policy: str = "raise",
        fill: str = "none",
        extra: str | Sequence[int] = "spread",
    ) -> None:
        super().__init__(
            num_inputs=num_inputs,
            num_workers=num_workers,
            points=points,
            nan_policy=nan_policy,
            on_coincidence="ignore",
        )
        self.fill = check_choice("fill", fill, FILLS)
        self._check_layout()
        K, N = self.num_inputs, self.num_workers
        self.replicas = N // K
        self.extra = extra if isinstance(extra, str) else [int(p) for p in extra]
        self.extra_positions = extra_positions(self.extra, K, N - self.replicas * K)
        self.extra_positions.setflags(write=False)
        holds = np.concatenate([np.arange(self.replicas * K) % K, self.extra_positions]).astype(np.int64)
        holds.setflags(write=False)
        #: the input (position) each worker holds, shape (N,)
        self.holds = holds
        copies = np.bincount(holds, minlength=K)
        self.recovery_threshold = N - int(copies.min()) + 1
        self._finish()
        del self.params["on_coincidence"]

    def _scheme_params(self) -> dict:
        out: dict[str, Any] = {}
        if self.fill != "none":
            out["fill"] = self.fill
        if self.num_workers % self.num_inputs:
            out["extra"] = self.extra
        return out

    def _check_layout(self) -> None:
        K, N = self.num_inputs, self.num_workers
        if N < K:
            raise ConfigError(
                f"num_workers must be at least num_inputs for code 'replication'; got num_workers={N!r}, "
                f"num_inputs={K!r} (N = K is uncoded; K < N < 2K copies some inputs twice)"
            )

    def _make_points(self) -> tuple[np.ndarray, np.ndarray]:
        alpha, _ = super()._make_points()
        return alpha, alpha[self.holds].copy()

    def _build_encoder(self) -> np.ndarray:
        E = np.zeros((self.num_workers, self.num_inputs))
        E[np.arange(self.num_workers), self.holds] = 1.0
        return E

    def _build_entry(self, received: np.ndarray) -> _Entry:
        K = self.num_inputs
        held = self.holds[received]
        # first position in `received` holding each input (np.unique returns first occurrences)
        inputs, first = np.unique(held, return_index=True)
        D = np.full((K, received.size), np.nan)
        D[inputs] = 0.0
        D[inputs, first] = 1.0
        mask = np.zeros(K, dtype=bool)
        mask[inputs] = True
        rows = np.full(K, -1, dtype=np.int64)
        rows[inputs] = first
        blend = None
        if self.fill != "none" and inputs.size and inputs.size < K:
            lost, (a, b), w = fill_weights(self.fill, mask, K)
            col_a, col_b = rows[a], rows[b]
            D[lost] = 0.0
            D[lost, col_a] += 1.0 - w
            D[lost, col_b] += w
            rows[lost] = col_a
            mixed = w > 0
            if mixed.any():
                blend = (lost[mixed], col_a[mixed], col_b[mixed], w[mixed])
            mask = np.ones(K, dtype=bool)
        rows.setflags(write=False)
        return _Entry(D, mask, received, rows, blend)

    def filled(self, received: Any) -> np.ndarray:
        """Mask of shape (K,), bool: the outputs that the fill estimates from other inputs (none of their own
        copies is in `received`); all False with ``fill="none"`` or when nothing was received."""
        r = np.asarray(received)
        r = np.flatnonzero(r) if r.dtype == bool else r.astype(np.int64)
        out = np.ones(self.num_inputs, dtype=bool)
        held = np.unique(self.holds[r])
        out[held] = False
        return out if self.fill != "none" and held.size else np.zeros(self.num_inputs, dtype=bool)


@register_code("uncoded")
class Uncoded(Replication):
    """No coding: worker k evaluates f(x_k); ``num_workers`` must equal ``num_inputs``.

    A missing result gives a NaN row, or a fill from the received neighbours with ``fill`` (see
    :class:`Replication`): uncoded at a cutoff of K − S results with a fill has no redundancy at all.
    ``recovery_threshold = K``, ``min_received = 1``.
    """

    def __init__(self, *, num_inputs: int, num_workers: int, points: str = "chebyshev",
                 nan_policy: str = "raise", fill: str = "none") -> None:
        super().__init__(num_inputs=num_inputs, num_workers=num_workers, points=points, nan_policy=nan_policy,
                         fill=fill)

    def _check_layout(self) -> None:
        if self.num_workers != self.num_inputs:
            raise ConfigError(
                f"num_workers must equal num_inputs for code 'uncoded'; got num_workers="
                f"{self.num_workers!r}, num_inputs={self.num_inputs!r}"
            )


@register_code("speculative")
class Speculative(Replication):
    """Uncoded with backup copies (Spark's speculative execution): ``num_workers = (copies + 1) · num_inputs``.

    Worker k < K evaluates f(x_k), the original; worker c · K + k holds the c-th *backup copy* of input k
    (c = 1 .. copies; Spark launches one, ``speculation.copies = 1``, N = 2K), which the runtime launches only
    when the copy before it is late by the speculation rule (``speculation.quantile`` of the inputs done, the
    copy running longer than ``speculation.multiplier`` × their median, and than ``speculation.min_runtime``;
    docs/pipeline.rst, section 'Speculative execution'). The batch ends once every input has a result from any
    copy; the first copy to arrive wins and the others are cancelled. Decoding is replication's gather
    (:class:`Replication` with ``copies + 1`` copies), so the estimates are uncoded's, bit for bit (any copy is
    exact). Nothing is filled: an input all of whose copies failed is NaN.

    ``recovery_threshold = N − copies`` (as replication with ``copies + 1`` copies of each input),
    ``min_received = 1``.
    """

    def __init__(self, *, num_inputs: int, num_workers: int, points: str = "chebyshev",
                 nan_policy: str = "raise") -> None:
        super().__init__(num_inputs=num_inputs, num_workers=num_workers, points=points, nan_policy=nan_policy)

    @property
    def copies(self) -> int:
        """Backup copies per input: ``N / K − 1``."""
        return self.num_workers // self.num_inputs - 1

    def _check_layout(self) -> None:
        k, n = self.num_inputs, self.num_workers
        if n < 2 * k or n % k or n > (MAX_BACKUP_COPIES + 1) * k:
            raise ConfigError(
                f"num_workers must be (copies + 1) * num_inputs for code 'speculative' (K originals and 1 to "
                f"{MAX_BACKUP_COPIES} backup copies of each); got num_workers={n!r}, num_inputs={k!r}. Use "
                f"num_workers={2 * k} (one backup copy each, speculation.copies: 1)."
            )

    def backup_of(self, worker: int, copy: int = 1) -> int:
        """The worker that holds backup copy `copy` (1 .. copies) of original `worker` (in [0, K)):
        ``copy · K + worker``."""
        if isinstance(worker, bool) or not isinstance(worker, (int, np.integer)) or not 0 <= worker < self.num_inputs:
            raise ConfigError(f"worker: got {worker!r}; expected an original in [0, {self.num_inputs})")
        if isinstance(copy, bool) or not isinstance(copy, (int, np.integer)) or not 1 <= copy <= self.copies:
            raise ConfigError(f"copy: got {copy!r}; expected a backup copy in [1, {self.copies}]")
        return int(copy) * self.num_inputs + int(worker)
