"""Exact baselines without coding: replication (r copies of each input) and uncoded (N = K).

Worker n evaluates f on input ``x_{n mod K}`` (docs/methods.rst, section 'Replication and uncoded'): copies of one
input sit K workers apart, so a contiguous block of fewer than K stragglers never removes every copy. The estimate
of f(x_k) is the result of the first worker in `received` that holds a copy of x_k (the runtime lists results in
arrival order; any copy is exact). An input none of whose copies survived is *missing*: its row of the decoder
matrix is NaN, so the decoded row is NaN, and :meth:`~CodingScheme.decodable` is False there. Nothing
is ever filled in. Encode and decode are gathers of rows (``selection = True``), not matmuls, so a NaN in
one input stays in that input's output.
"""

from __future__ import annotations

import numpy as np

from gcc_dask.errors import ConfigError

from .base import CodingScheme, _Entry
from .registry import register_code
from .validation import check_choice

__all__ = ["FILLS", "Replication", "Uncoded"]

FILLS = ("none", "nearest")


@register_code("replication")
class Replication(CodingScheme):
    """r-fold replication, ``num_workers = r · num_inputs``.

    Parameters
    ----------
    num_inputs, num_workers : int
        K ≥ 1 and N, a multiple of K (r = N / K copies of each input).
    points : {"chebyshev", "equispaced"}
        Only labels the inputs (``worker_points[n] = data_points[n % K]``).
    nan_policy : {"raise", "propagate"}
    fill : {"none", "nearest"}
        What a missing input gets: NaN (``"none"``), or the result of the received input with the nearest
        data point (``"nearest"``).

    Notes
    -----
    ``recovery_threshold = N − r + 1`` (any that many results hold a copy of every input);
    ``min_received = 1`` (fewer results decode partially, with NaN rows).
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
        self.replicas = self.num_workers // self.num_inputs
        self.recovery_threshold = self.num_workers - self.replicas + 1
        self._finish()
        del self.params["on_coincidence"]

    def _scheme_params(self) -> dict:
        return {"fill": self.fill} if self.fill != "none" else {}

    def _check_layout(self) -> None:
        K, N = self.num_inputs, self.num_workers
        if N % K or N < K:
            raise ConfigError(
                f"num_workers must be a multiple r*num_inputs (r >= 1) for code 'replication'; got "
                f"num_workers={N!r}, num_inputs={K!r}. Use num_workers={K * max(1, round(N / K))}."
            )

    def _make_points(self) -> tuple[np.ndarray, np.ndarray]:
        alpha, _ = super()._make_points()
        return alpha, alpha[np.arange(self.num_workers) % self.num_inputs].copy()

    def _build_encoder(self) -> np.ndarray:
        E = np.zeros((self.num_workers, self.num_inputs))
        E[np.arange(self.num_workers), np.arange(self.num_workers) % self.num_inputs] = 1.0
        return E

    def _build_entry(self, received: np.ndarray) -> _Entry:
        K = self.num_inputs
        holds = received % K
        # first position in `received` holding each input (np.unique returns first occurrences)
        inputs, first = np.unique(holds, return_index=True)
        D = np.full((K, received.size), np.nan)
        D[inputs] = 0.0
        D[inputs, first] = 1.0
        mask = np.zeros(K, dtype=bool)
        mask[inputs] = True
        rows = np.full(K, -1, dtype=np.int64)
        rows[inputs] = first
        if self.fill == "nearest" and inputs.size and inputs.size < K:
            alpha = self.data_points
            lost = np.flatnonzero(~mask)
            # the received input whose data point is nearest (argmin keeps the lower one on a tie)
            nearest = inputs[np.argmin(np.abs(alpha[lost, None] - alpha[None, inputs]), axis=1)]
            rows[lost] = rows[nearest]
            D[lost] = D[nearest]
            mask = np.ones(K, dtype=bool)
        rows.setflags(write=False)
        return _Entry(D, mask, received, rows)

    def filled(self, received) -> np.ndarray:
        """Mask of shape (K,), bool: the outputs that ``fill="nearest"`` estimates from another input (their
        own copies all straggled); all False with ``fill="none"``."""
        holds = np.unique(np.asarray(received, dtype=np.int64) % self.num_inputs)
        out = np.ones(self.num_inputs, dtype=bool)
        out[holds] = False
        return out if self.fill == "nearest" and holds.size else np.zeros(self.num_inputs, dtype=bool)


@register_code("uncoded")
class Uncoded(Replication):
    """No coding: worker k evaluates f(x_k); ``num_workers`` must equal ``num_inputs``.

    Missing results give NaN rows (see :class:`Replication`). ``recovery_threshold = K``,
    ``min_received = 1``.
    """

    def _check_layout(self) -> None:
        if self.num_workers != self.num_inputs:
            raise ConfigError(
                f"num_workers must equal num_inputs for code 'uncoded'; got num_workers="
                f"{self.num_workers!r}, num_inputs={self.num_inputs!r}"
            )
