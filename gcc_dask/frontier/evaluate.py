"""Decode every group of a frontier under every received set of a cell: per-group scores (pure NumPy).

A group is K inputs coded together (positions in α order). For an estimator (a :class:`~gcc_dask.coding.
CodingScheme`) the workers' results on every group are computed once (:func:`coded_outputs`: f on the N coded
inputs of each group; for a selection scheme they are rows of the reference, f is not called again), and each
received set F is then one decode of all G groups at once: ``D_F Ỹ_F`` along the K axis with the groups as a
trailing axis (docs/frontier.rst, section 'Protocol'). Nothing here imports Dask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gcc_dask.errors import ConfigError, NotEnoughResultsError

__all__ = ["GroupScores", "coded_outputs", "score_sets", "summarize_scores"]

#: rows of coded inputs evaluated by one call of f in :func:`coded_outputs` (bounds its memory)
F_CHUNK = 4096


def coded_outputs(code: Any, X: np.ndarray, f: Callable[[np.ndarray], Any], reference: np.ndarray | None = None,
                  chunk: int = F_CHUNK) -> np.ndarray:
    """The workers' results on every group: f on the N coded inputs of each of the G groups.

    Parameters
    ----------
    code : CodingScheme
        K = ``code.num_inputs``, N = ``code.num_workers``.
    X : ndarray of shape ``(G, K, *shape)``
        The groups' inputs, position k of group g at ``X[g, k]``.
    f : callable
        ``f((n, *shape)) -> (n, *out)``, a batch at a time.
    reference : ndarray of shape ``(G, K, *out)``, optional
        f(X). For a selection scheme (replication, uncoded, whose coded input n is input
        ``code.selected_input(n)`` bit for bit) the results are its rows and f is not called.
    chunk : int
        Coded inputs per call of f.

    Returns
    -------
    ndarray of shape ``(G, N, *out)``
        float64.
    """
    G = X.shape[0]
    N = code.num_workers
    if reference is not None and code.selection:
        holds = np.array([code.selected_input(n) for n in range(N)], dtype=np.int64)
        return np.asarray(reference, dtype=np.float64)[:, holds]
    # encode along K with the groups as a trailing axis: (K, G, *shape) -> (N, G, *shape)
    coded = np.moveaxis(code.encode(np.moveaxis(np.asarray(X), 0, 1)), 0, 1)  # (G, N, *shape)
    flat = coded.reshape(G * N, *coded.shape[2:])
    parts = [np.asarray(f(flat[i:i + chunk]), dtype=np.float64) for i in range(0, flat.shape[0], chunk)]
    out = np.concatenate(parts)
    return out.reshape(G, N, *out.shape[1:])


@dataclass(frozen=True)
class GroupScores:
    """Scores of one estimator on G groups under M received sets.

    Attributes
    ----------
    correct : ndarray of int16, shape (G, M)
        Positions whose decoded argmax equals f's argmax (an estimate with a NaN counts as wrong).
    sq_error : ndarray of float64, shape (G, M)
        Sum over the group's decodable positions of ``||f̂(x_k) − f(x_k)||²``.
    decodable : ndarray of int16, shape (G, M)
        Positions with an estimate.
    num_inputs : int
        K.
    """

    correct: np.ndarray
    sq_error: np.ndarray
    decodable: np.ndarray
    num_inputs: int


def score_sets(code: Any, outputs: np.ndarray, reference: np.ndarray, sets: np.ndarray,
               chunk_sets: int = 64) -> GroupScores:
    """Decode every group under every received set; score each against f.

    Parameters
    ----------
    code : CodingScheme
    outputs : ndarray of shape ``(G, N, *out)``
        The workers' results (:func:`coded_outputs`).
    reference : ndarray of shape ``(G, K, *out)``
        f on the groups' inputs.
    sets : ndarray of bool, shape (M, N)
        Received sets (True: the worker's result arrived).
    chunk_sets : int
        Sets decoded per stacked evaluation of the argmax (bounds the memory to
        ``chunk_sets · G · K · out`` floats).

    Returns
    -------
    GroupScores
        A set the scheme cannot decode from (fewer results than ``min_received``) scores every position as
        undecodable (wrong).
    """
    G, N = outputs.shape[0], outputs.shape[1]
    K = reference.shape[1]
    M = sets.shape[0]
    ref = np.asarray(reference, dtype=np.float64).reshape(G, K, -1)
    out_dim = ref.shape[2]
    ref_arg = np.argmax(ref, axis=2)  # (G, K)
    Y = np.moveaxis(np.asarray(outputs, dtype=np.float64).reshape(G, N, -1), 0, 1)  # (N, G, out)
    Y2 = Y.reshape(N, G * out_dim)
    correct = np.zeros((G, M), dtype=np.int16)
    sq = np.zeros((G, M), dtype=np.float64)
    ok = np.zeros((G, M), dtype=np.int16)
    for lo in range(0, M, chunk_sets):
        hi = min(lo + chunk_sets, M)
        est = _decode_chunk(code, Y, Y2, sets[lo:hi], K, G, out_dim)  # (m, G, K, out), NaN: no estimate
        good = ~np.isnan(est).any(axis=3)  # (m, G, K)
        agree = good & (np.argmax(np.where(good[..., None], est, 0.0), axis=3) == ref_arg[None])
        err = np.where(good[..., None], est - ref[None], 0.0)
        ok[:, lo:hi] = good.sum(axis=2).T
        correct[:, lo:hi] = agree.sum(axis=2).T
        sq[:, lo:hi] = np.einsum("mgko,mgko->gm", err, err)
    return GroupScores(correct=correct, sq_error=sq, decodable=ok, num_inputs=K)


def _decode_chunk(code: Any, Y: np.ndarray, Y2: np.ndarray, sets: np.ndarray, K: int, G: int,
                  out_dim: int) -> np.ndarray:
    """Estimates of every group under each received set of `sets` (m, N): ``(m, G, K, out)``.

    A fixed linear decoder (every scheme but ``lambda_dec="gcv"``) is one matmul for all the sets: each
    ``D_F`` (:meth:`~gcc_dask.coding.CodingScheme.decoder_matrix`, NaN rows where an output cannot be
    estimated) is placed in the columns of its workers, and the (m·K, N) stack multiplies the results of
    every group at once. A data-dependent decoder is applied set by set with ``code.decode``. A set with too
    few results for the scheme gives NaN.
    """
    m, N = sets.shape
    est = np.full((m, G, K, out_dim), np.nan)
    D = np.zeros((m, K, N))
    linear = np.zeros(m, dtype=bool)
    for i in range(m):
        received = np.flatnonzero(sets[i])
        try:
            D[i][:, received] = code.decoder_matrix(received)
            linear[i] = True
        except NotEnoughResultsError:
            continue
        except ConfigError:  # a decoder chosen from the results (GCV): one decode of this set
            e = np.asarray(code.decode(Y[received], received))  # (K, G, out)
            est[i] = np.moveaxis(e, 0, 1)
    if linear.any():
        rows = D[linear]  # (m', K, N); a NaN row (no estimate) stays NaN whatever it multiplies
        with np.errstate(invalid="ignore"):
            prod = rows.reshape(-1, N) @ Y2  # (m'·K, G·out)
        nan_rows = np.isnan(rows).any(axis=2).reshape(-1)
        prod[nan_rows] = np.nan
        est[linear] = np.moveaxis(prod.reshape(-1, K, G, out_dim), 1, 2)
    return est


def summarize_scores(scores: GroupScores, worst: bool = False) -> dict[str, np.ndarray]:
    """Per-group RelAcc, MSE and decodable fraction: the mean over the sets, or each group's worst set.

    Parameters
    ----------
    scores : GroupScores
    worst : bool
        False: the mean over the sets (every set equally weighted). True: for each group the set with the
        fewest correct positions (ties: the largest squared error), as RelAcc; and the largest MSE over the
        sets, as MSE (each is that metric's own worst case).

    Returns
    -------
    dict
        ``rel_acc``, ``mse``, ``decodable_frac``: float64 arrays of shape (G,). The MSE of a set is the mean
        over its decodable positions (NaN without any); the mean over sets skips NaN.
    """
    K = scores.num_inputs
    has = scores.decodable > 0
    mse = np.where(has, scores.sq_error / np.maximum(scores.decodable, 1), np.nan)  # (G, M)
    rel = scores.correct.astype(np.float64) / K
    dec = scores.decodable.astype(np.float64) / K
    finite = has.any(axis=1)
    if worst:
        # fewest correct first, then the largest error (an undecodable set, NaN, counts as the largest)
        pick = np.lexsort((-np.where(has, mse, np.inf), rel), axis=1)[:, 0]
        rows = np.arange(rel.shape[0])
        mse_worst = np.where(finite, np.max(np.where(has, mse, -np.inf), axis=1, initial=-np.inf), np.nan)
        return {"rel_acc": rel[rows, pick], "mse": mse_worst, "decodable_frac": dec[rows, pick]}
    total = np.where(has, mse, 0.0).sum(axis=1)
    mse_mean = np.where(finite, total / np.maximum(has.sum(axis=1), 1), np.nan)
    return {"rel_acc": rel.mean(axis=1), "mse": mse_mean, "decodable_frac": dec.mean(axis=1)}
