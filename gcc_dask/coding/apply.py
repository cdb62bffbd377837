"""How a code's matrices are applied to data, on any array library (the base of
:class:`~gcc_dask.coding.CodingScheme`).

Applying a matrix is one matmul in the namespace, dtype and device of the data (NumPy, CuPy, or any Array API
library via ``array_api_compat``), over the data reshaped to (rows, d); the matrices themselves are built on the
host in float64 and converted once per namespace, dtype and device.

NaN/Inf checks cost no extra pass over the input: with ``nan_policy="raise"`` one output row whose
coefficients are all non-zero (a *probe row*) is scanned, since a NaN or Inf anywhere in column j of the
input makes entry j of that row non-finite. A matrix without such a row (some B-spline decoders) gets an
extra row of ones. Only when the probe is non-finite is the input scanned: NaN/Inf there raise, and finite
input whose output overflowed the dtype raises an overflow error rather than returning inf.

Selection schemes (``replication``, ``uncoded``) have one-hot matrices: they are applied as a gather of rows,
never as a matmul, so a NaN in one input stays in that input's output.
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat.numpy as _NP
import numpy as np
from array_api_compat import array_namespace, device

from gcc_dask.errors import InvalidInputError


def _host_dtype(dtype) -> np.dtype:
    """The NumPy dtype of any namespace's floating dtype: NumPy/CuPy dtypes are NumPy's; ``torch.float32`` and
    ``array_api_strict.float32`` are matched by name. Unknown names give float64."""
    try:
        return np.dtype(dtype)
    except TypeError:
        try:
            return np.dtype(str(dtype).rsplit(".", 1)[-1])
        except TypeError:
            return np.dtype(np.float64)


class _ArrayApply:
    """The apply path of :class:`~gcc_dask.coding.CodingScheme`: validate an input array, apply a host matrix
    to it in its own namespace (:meth:`_apply`) or gather its rows (:meth:`_select`), and raise on NaN/Inf
    or overflow as the scheme's ``nan_policy`` says. Uses the scheme's ``name`` and ``nan_policy``."""

    def _as_array(self, name: str, A: Any, rows: int):
        if type(A) is np.ndarray:  # fast path: skip namespace detection
            xp = _NP
            floating = A.dtype.kind == "f"
        else:
            try:
                xp = array_namespace(A)
            except TypeError:
                A = np.asarray(A, dtype=np.float64)
                xp = _NP
            floating = xp.isdtype(A.dtype, "real floating")
        if A.ndim < 1 or A.shape[0] != rows:
            raise InvalidInputError(
                f"{name} must have shape ({rows}, ...) for code {self.name!r}; got shape {tuple(A.shape)}"
            )
        if not floating:
            raise InvalidInputError(
                f"{name} must be a real floating array (float16, float32 or float64); got dtype {A.dtype}. "
                f"Cast it first, e.g. {name}.astype('float32')"
            )
        return xp, A

    def _apply(self, xp, M: np.ndarray, A, cache: dict, name: str):
        """``M @ A`` with `A` of shape ``(q, *shape)`` in its own namespace/dtype; returns ``(p, *shape)``.

        `cache` keeps `M` converted per (namespace, dtype, device), with the row that the NaN/Inf check
        reads (the *probe*, see the module docs), so a repeated call converts nothing and moves nothing to
        the device.
        """
        p = M.shape[0]
        shape = tuple(A.shape[1:])
        A2 = xp.reshape(A, (A.shape[0], math.prod(shape)))
        check = self.nan_policy == "raise"
        dev = device(A)
        ckey = (xp.__name__, A.dtype, dev)
        hit = cache.get(ckey)
        if hit is None:
            hit = cache[ckey] = self._converted(xp, M, A.dtype, dev, check)
        Mx, probe = hit
        if not check:
            return xp.reshape(Mx @ A2, (p, *shape))
        if xp is _NP:
            with np.errstate(over="ignore", invalid="ignore"):
                out = Mx @ A2
            seen = out[probe] if type(probe) is int else out[list(probe)]
            bad = not np.isfinite(seen).all()
        else:
            out = Mx @ A2
            seen = out[probe, :] if type(probe) is int else xp.take(out, xp.asarray(probe, device=dev), axis=0)
            bad = not bool(xp.all(xp.isfinite(seen)))
        if bad:
            self._raise_non_finite(xp, A2, out[:p, ...], name)
        if out.shape[0] > p:  # the fallback's extra row of ones
            out = out[:p, ...]
        return xp.reshape(out, (p, *shape))

    @staticmethod
    def _converted(xp, M: np.ndarray, dtype, dev, check: bool) -> tuple[Any, Any]:
        """`M` in the data's namespace, dtype and device, and the rows the NaN/Inf check reads.

        The probe rows cover every column of `M` with a coefficient that, once converted, is finite and at
        least the dtype's smallest normal number in magnitude: row p's entry j is then non-finite whenever
        an input that row p weighs holds a NaN or Inf in column j, whatever the BLAS does with zeros. One
        row covers everything for most matrices; smooth decoders at large N weigh far inputs by less than
        float32 can hold, and need a few (chosen greedily). When the probes would cost more than 1/16 of
        the matmul's memory traffic, a row of ones is appended instead (and sliced off the result).
        Returns ``(Mx, probe)`` with `probe` an int (one row), a tuple of ints, or None without a check.
        """
        host = np.ascontiguousarray(M)
        Mx = xp.asarray(host, dtype=dtype, device=dev)
        if not check:
            return Mx, None
        low = host.astype(_host_dtype(dtype))
        good = np.isfinite(low) & (np.abs(low) >= np.finfo(low.dtype).smallest_normal)
        uncovered = np.ones(host.shape[1], dtype=bool)
        probes: list[int] = []
        budget = max(1, (host.shape[0] + host.shape[1]) // 16)
        while uncovered.any() and len(probes) < budget:
            gain = (good & uncovered).sum(axis=1)
            best = int(np.argmax(gain))
            if gain[best] == 0:
                break
            probes.append(best)
            uncovered &= ~good[best]
        if not uncovered.any():
            return Mx, probes[0] if len(probes) == 1 else tuple(sorted(probes))
        host = np.vstack([host, np.ones((1, host.shape[1]))])
        return xp.asarray(host, dtype=dtype, device=dev), host.shape[0] - 1

    def _raise_non_finite(self, xp, A2, out, name: str) -> None:
        """The slow path of the check, when a probe row is not finite: NaN/Inf in the input raise; so does
        an output that overflowed the dtype on finite input; a probe that overflowed alone (the fallback's
        row of ones sums the inputs) is no error."""
        if not bool(xp.all(xp.isfinite(A2))):
            raise self._non_finite(name)
        if not bool(xp.all(xp.isfinite(out))):
            raise self._overflow(name, A2.dtype, float(xp.max(xp.abs(A2))))

    def _overflow(self, name: str, dtype, largest: float) -> InvalidInputError:
        host = _host_dtype(dtype)
        verb = "encoding" if name == "X" else "decoding"
        return InvalidInputError(
            f"{name} is finite but {verb} it overflows {host.name} with code {self.name!r} (largest |{name}| "
            f"{largest:.3g}, largest {host.name} {float(np.finfo(host).max):.3g}; the code's weights amplify "
            f"it): cast {name} to float64 or scale it down (nan_policy='raise'; nan_policy='propagate' returns "
            "the inf instead)"
        )

    def _non_finite(self, name: str) -> InvalidInputError:
        return InvalidInputError(
            f"{name} holds NaN or Inf (nan_policy='raise'); clean the input or pass "
            "nan_policy='propagate' to let non-finite values flow through"
        )

    def _select(self, xp, rows: np.ndarray, A, cache: dict, name: str, blend=None):
        """Rows ``A[rows[i]]`` of `A` (shape ``(q, *shape)``) as ``(p, *shape)``; NaN rows where ``rows[i] < 0``.

        The apply path of selection schemes (one-hot matrices): a gather, so a NaN stays in its own row.
        With `blend` ``(outputs, a, b, w)`` (a linear fill), output ``outputs[j]`` is instead
        ``(1 − w[j])·A[a[j]] + w[j]·A[b[j]]``: the m mixed rows are appended to `A` and gathered with the
        others (one extra weighted sum of m rows, no matmul). With ``nan_policy="raise"`` all of `A` is
        checked (one pass), unused copies included, as for the other schemes.
        """
        if self.nan_policy == "raise" and not bool(xp.all(xp.isfinite(A))):
            raise self._non_finite(name)
        dev = device(A)
        ckey = (xp.__name__, "rows", dev, A.dtype, A.ndim)
        hit = cache.get(ckey)
        missing = rows < 0
        if hit is None:
            idx = np.where(missing, 0, rows).astype(np.int64)
            mix = None
            if blend is not None:
                outputs, a, b, w = blend
                idx = idx.copy()
                idx[outputs] = A.shape[0] + np.arange(outputs.size)
                w_shape = (outputs.size,) + (1,) * (A.ndim - 1)
                mix = (xp.asarray(a, device=dev), xp.asarray(b, device=dev),
                       xp.asarray(np.reshape(w, w_shape), dtype=A.dtype, device=dev))
            keep = xp.asarray(~missing, device=dev) if missing.any() else None
            hit = cache[ckey] = (xp.asarray(idx, device=dev), keep, mix)
        idx, keep, mix = hit
        if mix is not None:
            a, b, w = mix
            mixed = (1 - w) * xp.take(A, a, axis=0) + w * xp.take(A, b, axis=0)
            A = xp.concat([A, mixed], axis=0)
        out = xp.take(A, idx, axis=0)
        if keep is None:
            return out
        keep = xp.reshape(keep, (rows.size,) + (1,) * (out.ndim - 1))
        return xp.where(keep, out, xp.full_like(out, float("nan")))
