"""Analytic fs (``xsinx``, ``polynomial``, ``smooth``): closed forms for accuracy experiments, on any array
library.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask.errors import ConfigError
from gcc_dask.workloads.base import Workload, register_workload


# -------------------------------------------------------------------------------------------- analytic
_ANALYTIC = ("xsinx", "polynomial", "smooth")


@register_workload("analytic")
class AnalyticWorkload(Workload):
    """Closed-form test functions, written against the array API (run on NumPy, CuPy, array-api-strict).

    ``name="xsinx"``: f(x) = x sin x elementwise (the GCC paper's running example; output shape = input
    shape). ``name="polynomial"``: f(x) = sum_i coeffs[i] x**i elementwise (Horner; ``coeffs`` lowest
    order first, default [0, 0, 1]). ``name="smooth"``: a fixed random-feature network R^d -> R^m,
    f(x) = V tanh(W x + b) / sqrt(hidden) with W ~ N(0, 1/d), b ~ N(0, 1), V ~ N(0, 1) drawn from
    ``numpy.random.default_rng(seed)`` once d is known (params ``out_dim`` m = 10, ``hidden`` = 64,
    ``seed`` = 0); x is the flattened sample. Integer input is promoted to float64.
    """

    def __init__(self, name: str = "xsinx", coeffs: Sequence[float] | None = None, out_dim: int = 10,
                 hidden: int = 64, seed: int = 0) -> None:
        if name not in _ANALYTIC:
            raise ConfigError(f"workload.name: got {name!r}; expected one of {list(_ANALYTIC)}")
        if coeffs is not None and name != "polynomial":
            raise ConfigError(f"workload.coeffs: got {coeffs!r}; only valid with name='polynomial'")
        self.name = name
        self.coeffs = [0.0, 0.0, 1.0] if coeffs is None else [float(c) for c in coeffs]
        if not self.coeffs:
            raise ConfigError("workload.coeffs: got []; expected at least one coefficient")
        for key, val in (("out_dim", out_dim), ("hidden", hidden)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ConfigError(f"workload.{key}: got {val!r}; expected a positive integer")
        self.out_dim, self.hidden, self.seed = int(out_dim), int(hidden), int(seed)
        self.params = {"kind": "analytic", "name": name}
        if name == "polynomial":
            self.params["coeffs"] = self.coeffs
        if name == "smooth":
            self.params.update(out_dim=self.out_dim, hidden=self.hidden, seed=self.seed)

    def _weights(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, d])
        W = rng.standard_normal((d, self.hidden)) / np.sqrt(d)
        b = rng.standard_normal(self.hidden)
        V = rng.standard_normal((self.hidden, self.out_dim)) / np.sqrt(self.hidden)
        return W, b, V

    def load(self) -> Callable[[Any], Any]:
        from array_api_compat import array_namespace

        name, coeffs, cache = self.name, self.coeffs, {}

        def f(X: Any) -> Any:
            xp = array_namespace(X)
            if not xp.isdtype(X.dtype, "real floating"):
                X = xp.astype(X, xp.float64)
            if name == "xsinx":
                return X * xp.sin(X)
            if name == "polynomial":
                out = xp.full_like(X, coeffs[-1])
                for c in coeffs[-2::-1]:
                    out = out * X + c
                return out
            n, d = X.shape[0], int(np.prod(X.shape[1:], dtype=np.int64))
            if d not in cache:
                cache[d] = self._weights(d)
            W, b, V = (xp.asarray(a, dtype=X.dtype) for a in cache[d])
            return xp.tanh(xp.reshape(X, (n, d)) @ W + b) @ V

        return f

    def output_shape(self, input_shape: Sequence[int]) -> tuple[int, ...]:
        return (self.out_dim,) if self.name == "smooth" else tuple(int(s) for s in input_shape)
