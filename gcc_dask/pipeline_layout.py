"""How a run lays its samples out in batches: the block size B, and the composition (which samples are coded
together, in which order; :mod:`gcc_dask.composition`), with the windows of a large source as Dask tasks."""

from __future__ import annotations

import numpy as np

from gcc_dask.composition import (  # noqa: F401 (AUTO_CHAIN_MIN_SECONDS_PER_ROW: named here too)
    AUTO_CHAIN_MIN_SECONDS_PER_ROW, COMPOSED, BatchLayout, auto_composition, compose, composition_items,
    composition_key, window_unit,
)
from gcc_dask.composition_cache import CompositionCache
from gcc_dask.config import PipelineConfig
from gcc_dask.runtime.cluster import map_on_cluster, run_on_cluster
from gcc_dask.sizing import BlockChoice, batches_in_flight, choose_block_size

__all__ = ["AUTO_CHAIN_MIN_SECONDS_PER_ROW", "auto_composition", "composition_blind", "composition_policy"]


def _block_choice(cfg: PipelineConfig, source, cost, fixed: int | None, store=None) -> BlockChoice:
    """The run's block size B and batches in flight: ``code.block_size`` when it is a number; with ``auto``, the
    one a resumed `store` was made with, else :func:`~gcc_dask.sizing.choose_block_size` for f's `cost`."""
    configured = cfg.run.max_batches_in_flight
    if cfg.code.block_size != "auto":
        return BlockChoice(int(cfg.code.block_size), configured, "code.block_size")
    row_bytes = int(np.prod(source.sample_shape, dtype=np.int64)) * source.dtype.itemsize
    if store is not None:
        block = int(store.attrs["block_size"])
        return BlockChoice(block, batches_in_flight(block, cfg.code.num_inputs, max(1, row_bytes), configured),
                           store.attrs.get("block_size_reason") or "stored")

    def choice(seconds_per_row: float) -> BlockChoice:
        return choose_block_size(seconds_per_row, num_samples=source.num_samples, group_size=cfg.code.num_inputs,
                                 row_bytes=max(1, row_bytes), chunks=source.chunks, max_in_flight=configured,
                                 multiple=fixed or 1)

    measured = choice(cost.seconds_per_row)
    return _cached_choice(cfg, source, cost.seconds_per_row, measured, choice) or measured


#: ``code.block_size: auto`` takes the block size of a cached composition of the same data when it is what f
#: would get at a cost within this factor of the measured one (one timing of f on a busy machine was 16 times
#: the idle one); every bound of :func:`~gcc_dask.sizing.choose_block_size` holds for the B taken
CACHED_COST_FACTOR = 16


def _cached_choice(cfg: PipelineConfig, source, seconds_per_row: float, measured: BlockChoice,
                   choice) -> BlockChoice | None:
    """The block size of a cached composition of `source` with the run's composition parameters, where B is
    :func:`~gcc_dask.sizing.choose_block_size`'s choice for an f up to :data:`CACHED_COST_FACTOR` times cheaper
    or costlier than measured (the closest such, the measured one first); None when there is none.

    The composition's windows hold whole batches, so its cache entry is keyed by B: without this, the auto
    block size of a second run over the same data, timed on a busier machine, composed everything again."""
    policy = composition_policy(cfg, seconds_per_row, source.num_samples)
    cache = CompositionCache.default()
    if policy not in COMPOSED or cache is None:
        return None
    comp = cfg.composition
    steps = int(np.log2(CACHED_COST_FACTOR))
    for step in sorted(range(-steps, steps + 1), key=lambda j: (abs(j), j)):
        candidate = measured if step == 0 else choice(seconds_per_row * 2.0 ** step)
        key = composition_key(source, group_size=cfg.code.num_inputs, block_size=candidate.block_size,
                              policy=policy, seed=comp.seed, window=comp.window, dims=comp.dims,
                              fit_samples=comp.fit_samples, leaf=comp.leaf)
        if cache.has(key):
            if step == 0:
                return None
            return BlockChoice(candidate.block_size, candidate.max_in_flight,
                               f"{measured.reason}; B = {candidate.block_size} instead, the block size of this "
                               f"data's cached composition (what f would get at {2.0 ** step:g} times the "
                               "measured cost)")
    return None


def _layout(cfg: PipelineConfig, block: int, num_samples: int, order) -> BatchLayout:
    return BatchLayout(num_samples, cfg.code.num_inputs, block, order)


def composition_blind(cfg: PipelineConfig, scheme: str) -> bool:
    """True when the estimates of the scheme labelled `scheme` do not depend on which samples are coded
    together: ``speculative``, and a selection scheme (``uncoded``, ``replication``, full or partial) that
    fills nothing (its ``fill: none``). Its shards evaluate f on the samples themselves, so any composition
    gives the same estimates."""
    code = cfg.code_of(scheme)
    if code == "speculative":
        return True
    if code not in ("uncoded", "replication"):
        return False
    return cfg.section_for(scheme).fill == "none"


def composition_policy(cfg: PipelineConfig, seconds_per_row: float | None = None,
                       num_samples: int | None = None) -> str:
    """The composition the run uses: ``composition.policy`` (``auto`` made concrete for f's measured
    `seconds_per_row` over `num_samples`, :func:`auto_composition`), or ``as_stored`` when every scheme of the
    run is :func:`composition_blind` (composing would cost a pass over the data, and, from a chunked source,
    reads of a batch's samples spread over its window's chunks, for the same estimates; docs/pipeline.rst,
    section 'Reads that follow the chunks')."""
    if all(composition_blind(cfg, s) for s in cfg.schemes):
        return "as_stored"
    if cfg.composition.policy == "auto":
        return auto_composition(seconds_per_row, num_samples, cfg.composition.window)
    return cfg.composition.policy


def _compose(cfg: PipelineConfig, block: int, source, client, say, policy: str | None = None) -> BatchLayout:
    """The run's composition and batch layout (blocks of `block` groups), with the windows of a large source as
    Dask tasks; `policy` the concrete one (:func:`composition_policy`; default: for an f of unknown cost)."""
    comp = cfg.composition
    policy = composition_policy(cfg) if policy is None else policy
    unit = window_unit(cfg.code.num_inputs, block, source.chunks, comp.window)
    windows = len(composition_items(source.num_samples, comp.window, cfg.code.num_inputs, unit, policy,
                                    source.chunks)) \
        if policy in COMPOSED else 1
    if policy in COMPOSED:
        chosen = " by composition.policy auto" if comp.policy == "auto" else ""
        say(f"composing {source.num_samples:,} samples into groups of {cfg.code.num_inputs} ({policy}{chosen}, "
            f"{windows} window{'s' if windows != 1 else ''})")
    elif policy != comp.policy and policy == "as_stored":
        say(f"composition: as_stored (the estimates of {', '.join(cfg.schemes)} do not depend on it; "
            f"composition.policy {comp.policy} applies to the approximate schemes and fills)")
    mapper = run_task = None
    remote = getattr(source, "remote", False)  # a dask array: read on the workers only
    if windows > 1 or remote:
        def mapper(func, items, *shared):
            return map_on_cluster(client, func, items, *shared, worker_timeout=cfg.cluster.connect_timeout,
                                  what="composing the samples")
    if remote:
        def run_task(func, *args):
            return run_on_cluster(client, func, *args, worker_timeout=cfg.cluster.connect_timeout,
                                  what="composing the samples")
    return compose(source, group_size=cfg.code.num_inputs, block_size=block, policy=policy,
                   seed=comp.seed, window=comp.window, dims=comp.dims, fit_samples=comp.fit_samples,
                   leaf=comp.leaf, map_windows=mapper, run_task=run_task, cache=CompositionCache.default(), say=say)
