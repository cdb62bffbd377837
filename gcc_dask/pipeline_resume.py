"""What a resume finds in a run's store: the digest of the inputs it is checked against, the batches still to
run (pending, failed, or whose chunks are missing or misplaced), and the batches a ``run.limit_batches`` leaves."""

from __future__ import annotations

import hashlib
from typing import Callable, Sequence

import numpy as np

from gcc_dask import store as store_mod
from gcc_dask._digest import files_digest
from gcc_dask.config import PipelineConfig
from gcc_dask.errors import SourceError


def _inputs_digest(source, workload, sources: bool | list[str] = True, stored: bool = True,
                   labels: bool = True) -> str:
    """A digest of the model and data files the run reads (see :mod:`gcc_dask._digest`), of the source file of a
    model's module (an import path ``module:function``: ``workload.sources()``; not with ``sources=False``, the
    digest of the stores made before it counted; a list: those files, as a store lists them, a file gone
    counting as changed), of the local Zarr folders that an in-memory array reads (``source.data_folders()``: a
    dask array's graph over ``dask.array.from_zarr``; not with ``stored=False``, the digest of the stores made
    before they counted), of the label arrays that ``source.files()`` leaves out (``source.label_files()``: a Zarr
    source's labels; not with ``labels=False``, the digest of the stores made before they counted), and of an
    in-memory f (its cloudpickle bytes: ``workload.params["token"]``)."""
    listed = isinstance(sources, list)
    modules = list(sources) if listed else list(getattr(workload, "sources", list)()) if sources else []
    data = list(source.files())
    data += [f for f in (source.data_folders() if stored else []) if f not in data]
    data += [f for f in (source.label_files() if labels else []) if f not in data]
    try:
        digest = files_digest([*workload.files(), *modules, *data])
    except OSError as e:
        if listed:  # a module file the store lists is gone: not the model it was made with
            return f"gone: {e}"
        raise SourceError(f"source: got model or data files that cannot be read to fingerprint them ({e}); "
                          "expected readable files") from None
    token = getattr(workload, "params", {}).get("token")
    return digest if token is None else hashlib.sha256(f"{digest}\n{token}".encode()).hexdigest()


def _tell_misplaced(store, schemes: Sequence[str], warn: Callable[[str], None], shown: int = 4) -> None:
    """One warning naming the chunks of done batches that are not the ones written there (moved or swapped
    within the store, or copied from another run: :meth:`~gcc_dask.store.RunStore.misplaced_chunks`), which the
    resume runs again; nothing when there are none."""
    found = [(name, b) for group in (store_mod.INPUTS, *schemes)
             for b, names in store.misplaced_chunks(group).items() for name in names]
    if not found:
        return
    listed = ", ".join(f"{name} (batch {b})" for name, b in found[:shown])
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    warn(f"store: {len(found)} chunk{'s' if len(found) > 1 else ''} of {store.path} "
         f"{'are' if len(found) > 1 else 'is'} not the one{'s' if len(found) > 1 else ''} this store wrote there "
         f"(moved or swapped within it, or copied from another run): {listed}{more}; running "
         f"{'those batches' if len(found) > 1 else 'that batch'} again")


def _inputs_pending(store) -> np.ndarray:
    """The batches whose ``inputs`` (the reference, the labels) were never written, when the store records
    any: bool (num_batches,). Such a batch is not done, whatever its schemes' status says: without its
    reference its MSE and RelAcc are unknown (docs/pipeline.rst, section 'Resuming')."""
    attrs = store.attrs
    if not (attrs.get("has_reference") or attrs.get("has_labels")):
        return np.zeros(store.num_batches, dtype=bool)
    return store.batch_status(store_mod.INPUTS) == 0


def _pending(store, schemes: Sequence[str], num_batches: int) -> list[tuple[int, list[str]]]:
    """(batch, schemes) still to run: pending batches, those failed by the environment (retried on resume, see
    :meth:`~gcc_dask.store.RunStore.pending_batches`), and, for every scheme, the batches whose reference or
    labels were never written or whose chunk of them is missing (:meth:`~gcc_dask.store.RunStore.missing_batches`)
    or misplaced (:meth:`~gcc_dask.store.RunStore.misplaced_chunks`;
    their records are rewritten with the metrics)."""
    todo = {s: set(store.pending_batches(s, retry_failed=True).tolist()) for s in schemes}
    lost_inputs = set(np.flatnonzero(_inputs_pending(store)).tolist())
    lost_inputs |= set(store.missing_batches(store_mod.INPUTS).tolist())  # their labels/reference chunk is gone
    lost_inputs |= set(store.misplaced_chunks(store_mod.INPUTS))  # or is not the one written there
    todo = {s: batches | lost_inputs for s, batches in todo.items()}
    work = [(b, [s for s in schemes if b in todo[s]]) for b in range(num_batches)]
    return [(b, ss) for b, ss in work if ss]


def _limit_note(cfg: PipelineConfig, store, num_batches: int) -> str:
    """The line that says a run stopped on purpose at ``run.limit_batches``, and what is left."""
    pending = {s: int((store.batch_status(s) == 0).sum()) for s in cfg.schemes}
    counts = set(pending.values())
    left = (f"{counts.pop()} of {store.num_batches} batches still pending per scheme" if len(counts) == 1 else
            "batches still pending: " + ", ".join(f"{s} {n} of {store.num_batches}" for s, n in pending.items()))
    return (f"stopped at run.limit_batches = {cfg.run.limit_batches} (the first {num_batches} of "
            f"{store.num_batches} batches); {left}, so the store is 'incomplete': run the same command without "
            "run.limit_batches, or with a larger one, to go on")


def _limited(cfg: PipelineConfig, num_batches: int) -> int:
    return num_batches if cfg.run.limit_batches is None else min(num_batches, cfg.run.limit_batches)
