"""Lazy spares (pure): when a batch's spare shards, run below every batch in flight, are promoted to the batch's
own priority (docs/pipeline.rst, section 'Spares'; ``cutoff.spares: lazy``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["spares_due"]


def spares_due(known: np.ndarray, failed: np.ndarray, regular: np.ndarray, promoted: np.ndarray,
               overtaken: bool) -> int:
    """How many more of a batch's spares to run at the batch's own priority now.

    One for every regular shard that failed (and every promoted spare that failed), and, once the batch
    is *overtaken* (a batch submitted after it has reached its cutoff while it still waits for regular
    results), one for every regular result still missing: on a busy cluster the batches in flight finish
    in order, so a batch that falls behind one submitted later waits for a straggler. Spares already
    promoted count against that, so a promoted spare that is itself slow brings in no further one.

    Parameters
    ----------
    known, failed, regular, promoted : arrays of bool, shape (N,)
        Shards with an outcome (a result or a failure); that failed; that run at the batch's priority from
        the start; spares already promoted.
    overtaken : bool

    Returns
    -------
    int
        The spares to promote now, >= 0 (the caller caps it by the spares left).

    Examples
    --------
    >>> regular = np.array([True, True, True, False])
    >>> none = np.zeros(4, dtype=bool)
    >>> spares_due(np.array([True, False, False, False]), none, regular, none, overtaken=True)
    2
    >>> spares_due(np.array([True, True, False, False]), np.array([False, True, False, False]), regular,
    ...            none, overtaken=False)
    1
    """
    regular = np.asarray(regular, dtype=bool)
    failed = np.asarray(failed, dtype=bool)
    promoted = np.asarray(promoted, dtype=bool)
    due = int((failed & (regular | promoted)).sum())
    if overtaken:
        due += int((regular & ~np.asarray(known, dtype=bool)).sum())
    return max(0, due - int(promoted.sum()))
