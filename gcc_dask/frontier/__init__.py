"""The accuracy frontier: every estimator at equal cost, on every group of a split, paired, with standard errors.

Coded computing is one way to survive stragglers; copying inputs (replication, full or partial) and filling a
lost output from its neighbours in a group of similar inputs are others, at the same number of workers N. The
frontier measures them all on the same groups and the same received sets (docs/frontier.rst):

* :mod:`.sets` — the received sets of a cell (every straggler set, contiguous windows, seeded draws);
* :mod:`.evaluate` — f on every coded input once, then every group decoded under every set (pure NumPy);
* :mod:`.config` — the frontier file (``kind: frontier``) and the default estimators;
* :mod:`.run` — the Dask job and the store (:func:`run_frontier`);
* :mod:`.advise` — ``gcc-dask advise`` and ``schemes: [auto]``, with :mod:`.choose` (which candidate it
  recommends) and :mod:`.recommendation` (what it says and writes);

and :mod:`gcc_dask.analysis.frontier` turns a store into the table of cells and the figure.
"""

from .config import CandidateSpec, FrontierConfig, default_candidates, load_frontier_config
from .evaluate import GroupScores, coded_outputs, score_sets, summarize_scores
from .run import FrontierResult, run_frontier
from .sets import PATTERNS, all_sets, contiguous_sets, drawn_sets, random_sets

__all__ = [
    "PATTERNS",
    "CandidateSpec",
    "FrontierConfig",
    "FrontierResult",
    "GroupScores",
    "all_sets",
    "coded_outputs",
    "contiguous_sets",
    "default_candidates",
    "drawn_sets",
    "load_frontier_config",
    "random_sets",
    "run_frontier",
    "score_sets",
    "summarize_scores",
]
