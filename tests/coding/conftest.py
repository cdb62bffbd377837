"""Fixtures for the coding tests: the array namespaces every scheme must preserve."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(
    scope="session",
    params=["numpy", "array_api_strict", pytest.param("cupy", marks=pytest.mark.gpu)],
)
def xp(request):
    """The array module under test: numpy, array_api_strict, or cupy (``gpu`` marker, needs a device)."""
    if request.param == "numpy":
        return np
    return pytest.importorskip(request.param)

