"""Straggler models: which workers are missing, and how long each worker takes (pure, seeded).

Two kinds of model (docs/pipeline.rst, section 'Straggler injection'; docs/concepts.rst, section 'Stragglers'):

* **Received-set models** draw the set ``F`` of surviving workers directly, for accuracy sweeps that need
  no cluster timing: :class:`FixedCount` (exactly ``S`` stragglers: random, a contiguous window, or
  adversarial) and :class:`Bernoulli` (independent straggling). Both have
  ``received(num_workers, rng, *, code=None, X=None, f=None) -> (|F|,) int64`` sorted.
* **Latency models** draw per-worker latencies in seconds for the runtime's virtual clock:
  :class:`ShiftedExponential` and :class:`Pareto`, with a hang probability and persistently slow
  workers. ``latencies(seed, batch, num_workers) -> (N,) float64``.

Worker ``w``'s base latency and hang depend only on ``(seed, batch, w)``: they come from a counter-based
``numpy.random.Philox`` stream keyed on ``(seed, batch)``, one 4-word block per worker, so schemes with
different ``N`` share the draws of the workers they have in common (a paired comparison), and the two
models use the same uniforms (common random numbers).

One module per kind of model: :mod:`~gcc_dask.stragglers.received` (the received-set models),
:mod:`~gcc_dask.stragglers.latency` (the latency models), and :mod:`~gcc_dask.stragglers.checks` (the checks
they share).
"""

from __future__ import annotations

from gcc_dask.stragglers.latency import Pareto, ShiftedExponential, latency_model_from_config
from gcc_dask.stragglers.latency import LATENCY_MODELS  # noqa: F401  (importable from here, as before the split)
from gcc_dask.stragglers.received import Bernoulli, FixedCount, SearchResult
from gcc_dask.stragglers.received import PATTERNS  # noqa: F401  (importable from here, as before the split)

__all__ = [
    "Bernoulli",
    "FixedCount",
    "Pareto",
    "SearchResult",
    "ShiftedExponential",
    "latency_model_from_config",
]

