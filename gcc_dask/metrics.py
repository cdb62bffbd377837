"""Per-batch accuracy metrics (docs/concepts.rst, section 'Metrics'), shared by the runtime and the analysis.

All functions take host NumPy arrays of shape ``(n, *out)``; rows that could not be decoded are NaN.

Which metrics fit depends on what f returns (:func:`output_kind`): a classifier's outputs (logits or
probabilities, two or more values per sample) are scored by RelAcc and accuracy; any other f (one value per
sample: a regressor) by the relative RMSE, R² and the largest absolute error, never by an argmax.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mse", "rel_acc", "accuracy", "decodable_rows", "output_kind", "relative_rmse", "r2", "max_abs_error",
           "OUTPUT_KINDS"]

#: what f returns, as :func:`output_kind` names it
OUTPUT_KINDS = ("classifier", "regression")


def _flat(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(a.shape[0], -1)


def output_kind(output_shape: tuple[int, ...]) -> str:
    """Which metrics fit an f whose output per sample has shape `output_shape` (the store's ``output_shape``).

    ``"classifier"`` when f returns two or more values per sample (logits or probabilities over classes: RelAcc
    and accuracy); ``"regression"`` when it returns one (shape ``()``, ``(1,)``, ``(1, 1)``...: relative RMSE,
    R² and the largest absolute error; the argmax of one value is always 0, so RelAcc would always be 1).
    Inferred from the shape only: an f with several outputs that are not class scores counts as a classifier.
    """
    return "classifier" if int(np.prod(tuple(output_shape), dtype=np.int64)) > 1 else "regression"


def _scored(estimates: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows where both the estimate and the reference are known, flattened to ``(rows, values)``."""
    e, r = _flat(estimates), _flat(reference)
    ok = decodable_rows(e) & decodable_rows(r)
    return e[ok], r[ok]


def relative_rmse(estimates: np.ndarray, reference: np.ndarray) -> float:
    """Relative RMSE: ``√MSE / RMS(f)``, i.e. ``√(Σ_k ‖f̂(x_k) − f(x_k)‖² / Σ_k ‖f(x_k)‖²)``.

    Over the rows where both the estimate and the reference are known (undecodable rows are left out, as in
    :func:`mse`); NaN if there are none or the reference is all zeros there. 0 is exact; 1 is as far off as
    estimating 0 everywhere.
    """
    e, r = _scored(estimates, reference)
    denom = float(np.sum(r**2))
    if e.shape[0] == 0 or denom == 0.0:
        return float("nan")
    return float(np.sqrt(np.sum((e - r) ** 2) / denom))


def r2(estimates: np.ndarray, reference: np.ndarray) -> float:
    """R², the coefficient of determination of the estimates against f: ``1 − Σ‖f̂ − f‖² / Σ‖f − mean(f)‖²``.

    Over the rows where both are known; the mean is per output value over those rows. 1 is exact, 0 is no
    better than f's mean, negative is worse. NaN if there are fewer than 2 such rows or f is constant there.
    """
    e, r = _scored(estimates, reference)
    denom = float(np.sum((r - r.mean(axis=0)) ** 2)) if e.shape[0] else 0.0
    if e.shape[0] < 2 or denom == 0.0:
        return float("nan")
    return float(1.0 - np.sum((e - r) ** 2) / denom)


def max_abs_error(estimates: np.ndarray, reference: np.ndarray) -> float:
    """The largest absolute error ``max_k max_j |f̂(x_k)_j − f(x_k)_j|`` over the rows where both are known;
    NaN if there are none."""
    e, r = _scored(estimates, reference)
    if e.size == 0:
        return float("nan")
    return float(np.max(np.abs(e - r)))


def decodable_rows(estimates: np.ndarray) -> np.ndarray:
    """Boolean mask (n,) of rows with no NaN (the samples that were decoded)."""
    return ~np.isnan(_flat(estimates)).any(axis=1)


def mse(estimates: np.ndarray, reference: np.ndarray) -> float:
    """Mean squared error ``(1/n) Σ_k ||f̂(x_k) − f(x_k)||²`` over decodable rows; NaN if none.

    The end-to-end loss of GCC (arXiv 2608.28910, eq. (1)): a sum over the output coordinates, a mean
    over the samples. Undecodable (NaN) rows are left out, not counted as zero.
    """
    e, r = _flat(estimates), _flat(reference)
    ok = decodable_rows(e)
    if not ok.any():
        return float("nan")
    return float(np.mean(np.sum((e[ok] - r[ok]) ** 2, axis=1)))


def rel_acc(estimates: np.ndarray, reference: np.ndarray) -> float:
    """Fraction of samples whose argmax agrees with the uncoded output's argmax (RelAcc).

    Undecodable rows count as disagreements (a missing answer is not a right answer).
    """
    e, r = _flat(estimates), _flat(reference)
    if e.shape[0] == 0:
        return float("nan")
    ok = decodable_rows(e)
    agree = np.zeros(e.shape[0], dtype=bool)
    agree[ok] = np.argmax(e[ok], axis=1) == np.argmax(r[ok], axis=1)
    return float(agree.mean())


def accuracy(estimates: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of samples whose argmax equals the ground-truth label; undecodable rows count as wrong."""
    e = _flat(estimates)
    labels = np.asarray(labels)
    if e.shape[0] == 0:
        return float("nan")
    ok = decodable_rows(e)
    hit = np.zeros(e.shape[0], dtype=bool)
    hit[ok] = np.argmax(e[ok], axis=1) == labels[ok]
    return float(hit.mean())
