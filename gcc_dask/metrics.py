"""Per-batch accuracy metrics (docs/concepts.rst, section 'Metrics'), shared by the runtime and the analysis.

All functions take host NumPy arrays of shape ``(n, *out)``; rows that could not be decoded are NaN.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mse", "rel_acc", "accuracy", "decodable_rows"]


def _flat(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(a.shape[0], -1)


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
