"""Coded computing schemes: encode K inputs into N coded inputs, decode from any subset of results.

Every scheme is linear (docs/methods.rst, section 'Linear maps'): ``encode(X) = E X`` and
``decode(Y, F) = D_F Y_F`` with float64 matrices built on the host, applied as one matmul in the data's own
namespace and dtype (NumPy, CuPy or any Array API library). This package never imports dask, distributed, zarr or
matplotlib.

>>> from gcc_dask.coding import make_code
>>> code = make_code("gcc", num_inputs=8, num_workers=16)
>>> code.encoder_matrix.shape
(16, 8)
"""

from __future__ import annotations

from .base import CodingScheme, CoincidenceWarning, ConditioningWarning
from .berrut import BACC, berrut_matrix
from .bspline import BSplineCode
from .gcc import GCC, LeTCC
from .lagrange import LCC
from .registry import list_codes, make_code, register_code
from .replication import Replication, Speculative, Uncoded

__all__ = [
    "BACC",
    "BSplineCode",
    "CodingScheme",
    "CoincidenceWarning",
    "ConditioningWarning",
    "GCC",
    "LCC",
    "LeTCC",
    "Replication",
    "Speculative",
    "Uncoded",
    "berrut_matrix",
    "list_codes",
    "make_code",
    "register_code",
]
