"""A run's coding schemes and the cutoff plan of each: :func:`build_codes` and :func:`build_plans`.

Both read the validated :class:`~gcc_dask.config.PipelineConfig` only; :func:`gcc_dask.pipeline.run_pipeline` hands
their results to the runtime.
"""

from __future__ import annotations

from typing import Any, Mapping

from gcc_dask.coding import make_code
from gcc_dask.coding.points import spread_order
from gcc_dask.config import PipelineConfig
from gcc_dask.runtime.cutoff import CutoffPolicy, Speculation
from gcc_dask.runtime.executor import SchemePlan

__all__ = ["build_codes", "build_plans"]


def build_codes(cfg: PipelineConfig) -> dict:
    """One coding scheme per configured scheme label (``make_code`` with the entry's code and parameters)."""
    k = cfg.code.num_inputs
    return {s: make_code(cfg.code_of(s), num_inputs=k, num_workers=cfg.workers_for(s), **cfg.code_params(s))
            for s in cfg.schemes}


def build_plans(cfg: PipelineConfig, codes: Mapping[str, Any]) -> list[SchemePlan]:
    """The cutoff policy of each scheme (:meth:`~gcc_dask.config.PipelineConfig.stop_of`).

    Schemes that stop at the cutoff (the approximate codes; ``replication`` with ``stop: cutoff``, the default;
    ``uncoded`` with ``stop: cutoff``) use the configured cutoff (``wait_for`` N-S by default, the deadline,
    the adaptive rule): every such scheme stops at the same rule. The others wait for their recovery
    condition, as users run them today: ``uncoded`` (``stop: all``, the default) for all K results,
    ``replication`` with ``stop: recovery`` for one copy of every input, ``lcc`` for its recovery threshold;
    a failed shard still ends the wait (its output is then missing, or filled). ``speculative`` waits for one
    copy of every input too, and its plan carries the ``speculation`` rule for its backup copies (in index
    order: the K originals first). The schemes that stop at the cutoff carry the same rule for one backup
    copy of a late shard they cannot do without (``cutoff.backups``, wall clock only).
    """
    c = cfg.cutoff
    plans = []
    for name, code in codes.items():
        n = code.num_workers
        if cfg.stop_of(name) != "cutoff":
            groups = None
            if code.selection:
                groups = tuple(int(code.selected_input(w)) for w in range(n))
            wait_for = code.recovery_threshold if cfg.code_of(name) == "lcc" else n
            policy = CutoffPolicy(num_workers=n, wait_for=wait_for, min_results=code.min_received,
                                  on_shortfall="wait", groups=groups)
        else:
            policy = CutoffPolicy(
                num_workers=n, wait_for=cfg.wait_for_count(name), min_results=code.min_received,
                deadline=c.deadline, quantile=c.quantile, multiplier=c.multiplier, min_runtime=c.min_runtime,
                on_shortfall=c.on_shortfall,
            )
        order = speculation = backups = None
        wall = cfg.stragglers.model == "none" or cfg.stragglers.clock == "wall"
        if cfg.code_of(name) == "speculative":
            rule = cfg.section_for(name)
            speculation = Speculation(quantile=rule.quantile, multiplier=rule.multiplier,
                                      min_runtime=rule.min_runtime, copies=rule.copies)
        else:
            if cfg.cutoff.spares == "lazy" and wall:
                order = tuple(int(w) for w in spread_order(code.data_points, code.worker_points))
            if cfg.stop_of(name) == "cutoff" and c.backups and wall:  # one copy per late shard (cutoff.backups)
                rule = cfg.speculation
                backups = Speculation(quantile=c.backup_quantile, multiplier=rule.multiplier,
                                      min_runtime=rule.min_runtime)
        plans.append(SchemePlan(name=name, num_workers=n, policy=policy, order=order, speculation=speculation,
                                backups=backups))
    return plans
