"""BSCC: Berrut encoder with a cubic B-spline interpolation decoder (arXiv 2601.10616).

The encoder is BACC's (docs/methods.rst, section 'BACC'). The decoder interpolates the survivors' results
``{(β_n, ỹ_n) : n ∈ F}`` with a cubic B-spline (``scipy.interpolate.make_interp_spline``, k = 3,
"not-a-knot" end conditions, knots at the sorted β_F) and evaluates it at α
(docs/methods.rst, section 'B-spline decoder'). Outside ``[min β_F, max β_F]`` the end polynomial pieces are continued. Local support: a block of
stragglers degrades only nearby estimates. Needs |F| ≥ 4.
"""

from __future__ import annotations

import numpy as np

from .berrut import BACC
from .registry import register_code

__all__ = ["BSplineCode"]


@register_code("bspline")
class BSplineCode(BACC):
    """Berrut encoder, cubic B-spline interpolation decoder (arXiv 2601.10616).

    The constructor and the encoder are BACC's (:class:`~gcc_dask.coding.berrut.BACC`); only the decoder
    differs.

    Parameters
    ----------
    num_inputs, num_workers : int
        K ≥ 1 and N ≥ 4.
    points : {"chebyshev", "equispaced"}
    nan_policy : {"raise", "propagate"}
    on_coincidence : {"warn", "nudge", "ignore"}

    Notes
    -----
    ``recovery_threshold`` is None; ``min_received`` is 4 (a cubic B-spline needs 4 nodes).
    References: "B-spline coded computing" decoder, arXiv:2601.10616; docs/methods.rst, section 'B-spline decoder'.
    """

    min_received = 4

    def _decoder_map(self, rs: np.ndarray, z: np.ndarray) -> np.ndarray:
        # imported here: scipy.interpolate (with scipy.optimize) adds ~0.45 s to every process's import
        from scipy.interpolate import make_interp_spline

        nodes = self.worker_points[rs]
        spline = make_interp_spline(nodes, np.eye(nodes.size), k=3)
        return spline(z, extrapolate=True)
