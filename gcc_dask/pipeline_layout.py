"""How a run lays its samples out in batches: the block size B, and the composition (which samples are coded
together, in which order; :mod:`gcc_dask.composition`), with the windows of a large source as Dask tasks."""

from __future__ import annotations

import numpy as np

from gcc_dask.composition import BatchLayout, compose, composition_items, window_unit
from gcc_dask.composition_cache import CompositionCache
from gcc_dask.config import PipelineConfig
from gcc_dask.runtime.cluster import map_on_cluster, run_on_cluster
from gcc_dask.sizing import BlockChoice, batches_in_flight, choose_block_size

__all__ = ["composition_blind", "composition_policy"]


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
    return choose_block_size(cost.seconds_per_row, num_samples=source.num_samples, group_size=cfg.code.num_inputs,
                             row_bytes=max(1, row_bytes), chunks=source.chunks, max_in_flight=configured,
                             multiple=fixed or 1)


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


def composition_policy(cfg: PipelineConfig) -> str:
    """The composition the run uses: ``composition.policy``, or ``as_stored`` when every scheme of the run is
    :func:`composition_blind` (composing would cost a pass over the data, and, from a chunked source, reads of
    a batch's samples spread over its window's chunks, for the same estimates; docs/pipeline.rst, section
    'Reads that follow the chunks')."""
    if all(composition_blind(cfg, s) for s in cfg.schemes):
        return "as_stored"
    return cfg.composition.policy


def _compose(cfg: PipelineConfig, block: int, source, client, say) -> BatchLayout:
    """The run's composition and batch layout (blocks of `block` groups), with the windows of a large source as
    Dask tasks."""
    comp = cfg.composition
    policy = composition_policy(cfg)
    unit = window_unit(cfg.code.num_inputs, block, source.chunks, comp.window)
    windows = len(composition_items(source.num_samples, comp.window, cfg.code.num_inputs, unit, policy,
                                    source.chunks)) \
        if policy in ("similarity", "pc1") else 1
    if policy in ("similarity", "pc1"):
        say(f"composing {source.num_samples:,} samples into groups of {cfg.code.num_inputs} ({policy}, "
            f"{windows} window{'s' if windows != 1 else ''})")
    elif policy != comp.policy:
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
                   map_windows=mapper, run_task=run_task, cache=CompositionCache.default(), say=say)
