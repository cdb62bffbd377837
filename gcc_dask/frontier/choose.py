"""How advice chooses among the candidates it measured: :func:`choose` (docs/frontier.rst, section 'Advice').

With a target, the fewest workers N whose best candidate reaches it; without, the best overall. Candidates within
``TIE_SE`` paired standard errors of the best are tied, and the cheapest of them is taken (the fewest workers,
then an estimator that copies over one that codes). A code is recommended over the best estimator that copies
at the same N only when it gains more than that plus ``margin`` (:data:`DEFAULT_MARGIN`). Pure pandas and NumPy
over the measured table.
"""

from __future__ import annotations

import numbers
from typing import Mapping

import numpy as np
import pandas as pd

from gcc_dask.config import AdviseConfig
from gcc_dask.errors import ConfigError

__all__ = ["COPYING", "DEFAULT_MARGIN", "TIE_SE", "choose"]

TIE_SE = 2.0
#: the codes that copy f's outputs (no encoder, no decoder to fit): what a code must beat by the margin
COPYING = ("replication", "uncoded")
#: the RelAcc (for the MSE: the fraction of the copying estimator's MSE) a code must gain over copying at the
#: same N, beyond TIE_SE paired standard errors, to be recommended: ``advise.margin``'s default
DEFAULT_MARGIN = AdviseConfig.model_fields["margin"].default


def choose(table: pd.DataFrame, values: Mapping[str, np.ndarray], metric: str, *,
           target: float | None = None, margin: float = DEFAULT_MARGIN) -> tuple[str, list[str], str]:
    """The recommended candidate of `table` (the decision pattern's rows), the candidates tied with it, and why.

    Parameters
    ----------
    table : DataFrame
        One row per candidate, with ``candidate``, ``code``, ``N``, ``value``.
    values : mapping
        Per-group scores of each candidate (pairs the comparisons).
    metric : {"rel_acc", "mse"}
    target : float, optional
        With a target: the fewest workers N whose best candidate reaches it; without: the best overall.
    margin : float
        In [0, 1]. What a coded candidate must gain over the best copying one (:data:`COPYING`) at its N,
        beyond ``TIE_SE`` paired standard errors: RelAcc, or for the MSE a fraction of the copying one's MSE. A
        code that gains less is set aside before the target and the ties are looked at (the copying one stands
        for it), and `reason` says so when it would have looked better than the pick.

    Returns
    -------
    (candidate, tied, reason)
        ``tied``: the others within 2 paired standard errors of the best, and the codes set aside that looked
        better than the pick.

    Raises
    ------
    ConfigError
        For a margin outside [0, 1] or not a number.
    """
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not 0 <= float(margin) <= 1:
        raise ConfigError(f"margin: got {margin!r}; expected a number in [0, 1]")
    sign = 1.0 if metric == "rel_acc" else -1.0
    rows = table.dropna(subset=["value"])
    if metric == "mse" and "decodable" in rows:  # an MSE over the outputs it kept says nothing of those it lost
        rows = rows[rows["decodable"] >= 1.0 - 1e-12]
    set_aside = _set_aside(rows, values, metric, float(margin))
    pick, best, tied, reason = _cheapest_tied(rows[~rows["candidate"].isin(list(set_aside))], values, metric,
                                              target)
    # the codes set aside that would have been chosen, or looked better than the pick: say why they were not
    naive = str(_cheapest_tied(rows, values, metric, target)[0]["candidate"]) if set_aside else ""
    better = [c for c in set_aside if c == naive
              or sign * float(rows.loc[rows["candidate"] == c, "value"].iloc[0]) > sign * float(pick["value"])]
    reason = "; ".join([*([reason] if reason else []), *(set_aside[c] for c in better)])
    others = [c for c in dict.fromkeys([best, *tied, *better]) if c != pick["candidate"]]
    return str(pick["candidate"]), others, reason


def _within(d: float, se: float, sign: float, extra: float = 0.0) -> bool:
    """Whether a paired difference ``d ± se`` (in the metric's direction `sign`) is at most ``TIE_SE`` standard
    errors plus `extra`: a NaN difference never is, a NaN SE counts as 0."""
    return bool(np.isfinite(d) and sign * d <= TIE_SE * (se if np.isfinite(se) else 0.0) + extra)


def _set_aside(rows: pd.DataFrame, values: Mapping[str, np.ndarray], metric: str, margin: float) -> dict[str, str]:
    """The coded candidates whose gain over the best copying one at their N is within ``TIE_SE`` paired SE plus
    `margin` (:func:`choose`): candidate -> the line that says so. The copying one stands for each of them."""
    from gcc_dask.analysis.frontier import paired_difference

    sign = 1.0 if metric == "rel_acc" else -1.0
    copies = rows["code"].isin(COPYING)
    out: dict[str, str] = {}
    for _, r in rows[~copies].iterrows():
        copying = rows[copies & (rows["N"] == r["N"])]
        if copying.empty:
            continue
        alt = copying.loc[(sign * copying["value"]).idxmax()]
        d, se = paired_difference(values[r["candidate"]], values[alt["candidate"]])
        scale = 1.0 if metric == "rel_acc" else abs(float(alt["value"]))
        if _within(d, se, sign, margin * scale):
            fmt = ".4f" if metric == "rel_acc" else ".3g"
            out[str(r["candidate"])] = (
                f"{r['candidate']} gains {sign * d:+{fmt}} ± {se:{fmt}} {metric} over {alt['candidate']} at N = "
                f"{int(r['N'])}, within 2 paired standard errors plus the margin {margin:g}: copying is "
                "recommended over it")
    return out


def _cheapest_tied(rows: pd.DataFrame, values: Mapping[str, np.ndarray], metric: str, target: float | None):
    """The tie rule of :func:`choose` on `rows`: (the pick's row, the best, the others tied with it, why)."""
    from gcc_dask.analysis.frontier import MSE_ROUNDING, paired_difference

    sign = 1.0 if metric == "rel_acc" else -1.0
    reason = ""
    if target is not None:
        ok = rows[(sign * rows["value"]) >= sign * target]
        if ok.empty:
            reason = (f"no candidate reaches {metric} {target:g} at N <= {int(rows['N'].max())}; the best one is "
                      "recommended instead")
        else:
            rows = ok[ok["N"] == ok["N"].min()]
    best = rows.loc[(sign * rows["value"]).idxmax()]
    rounding = MSE_ROUNDING if metric == "mse" else 0.0
    tied = []
    for _, r in rows.iterrows():
        d, se = paired_difference(values[best["candidate"]], values[r["candidate"]])
        if r["candidate"] != best["candidate"] and _within(d, se, sign, rounding):
            tied.append(r["candidate"])
    pool = rows[rows["candidate"].isin([best["candidate"], *tied])].copy()
    # the cheapest of the tied: fewest workers, then copying over coding, then the better value
    pool["coded"] = ~pool["code"].isin(COPYING)
    pool = pool.assign(_v=-sign * pool["value"]).sort_values(["N", "coded", "_v"])
    return pool.iloc[0], str(best["candidate"]), tied, reason


def _reached(table: pd.DataFrame, metric: str, target: float) -> bool:
    """Whether a candidate reaches `target` (with the MSE: one that estimates every output, as :func:`choose`)."""
    sign = 1.0 if metric == "rel_acc" else -1.0
    rows = table.dropna(subset=["value"])
    if metric == "mse" and "decodable" in rows:
        rows = rows[rows["decodable"] >= 1.0 - 1e-12]
    return bool(((sign * rows["value"]) >= sign * target).any())
