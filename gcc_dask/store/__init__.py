"""The Zarr v3 results store: one store per run (docs/store.rst).

Layout::

    run.zarr/
      attrs: gcc_dask_version, created, finished, status, config, config_fingerprint, git_sha,
             versions, seed, run_token, store_id, integrity (+ num_samples, batch_size, num_batches, output_shape,
             schemes, ...)
      inputs/labels          (sample,)            int64   -1 where unknown
      inputs/reference       (sample, output)     float   f(x_k) computed uncoded; NaN until written
      inputs/status          (batch,)             int8    1 once the batch's inputs are written
      inputs/chunk_digest    (batch, bound_array) uint64  binds the batch's labels, reference chunks to their place
      <scheme>/decoded       (sample, output)     float   estimates f^(x_k); NaN where undecodable
      <scheme>/received      (batch, worker)      bool    the set F used for decoding
      <scheme>/failed        (batch, worker)      bool    shards that raised or whose worker died
      <scheme>/latency_s     (batch, worker)      float64 shard start to result, s; NaN if cancelled
      <scheme>/cutoff_s      (batch,)             float64 when the cutoff fired, from the batch start, s
      <scheme>/batch_latency_s (batch,)           float64 batch start to decode done, s
      <scheme>/n_received, n_failed, n_backups (batch,) int32 -1 until written
      <scheme>/mse, rel_acc, error_estimate (batch,) float64 NaN when unknown
      <scheme>/chunk_digest  (batch, bound_array) uint64  binds the batch's decoded, filled chunks to their place
      <scheme>/status        (batch,)             int8    BatchStatus; written last

(with more than one output axis, ``output`` becomes ``output_0, output_1, ...``).

Who writes what. One batch owns exactly one chunk of every ``sample`` array (K rows), so Dask workers write
``decoded``, ``labels`` and ``reference`` concurrently without locks (:func:`write_decoded`,
:func:`write_inputs`; ``inputs/status`` keeps one chunk per batch for the same reason). The small per-batch
records of a scheme (``received`` ... ``status``) are written by one process only, the driver, in buffered
flushes (:meth:`RunStore.write_records`): their chunks hold :data:`BATCH_CHUNK` batches, because reading
one-row chunks back costs ~1 ms each (a 5,000-sample run took 58 s to summarise with one-batch chunks,
0.5 s with these). In every write path a batch's ``status`` is written after all its other arrays, so a
crash never leaves a batch that looks done but is not. Only the driver creates the store or edits
attributes; metadata is consolidated once, by :meth:`RunStore.finish`.

Integrity (docs/store.rst, section 'Integrity'). Every chunk carries a ``crc32c`` checksum and is written even
when it holds only fill values, so a flipped byte is an error naming the array and its batch, and a done batch
whose chunk is missing, or is not the one written there (moved, swapped, copied from another run: each batch's
``chunk_digest`` binds its chunks to the store's ``store_id``, their array and their place), is run again by a
resume (:mod:`.integrity`). Every write of a run carries the run's
token (``run_token``, new at every create and resume) and is refused
(:class:`~gcc_dask.errors.WriteRefusedError`) when the store no longer carries it or is gone: the tasks of a
killed driver never write into the store that replaced it, and a store moved away mid-run is not recreated as
a skeleton. ``--overwrite`` builds the new store aside and swaps it in with two renames.

Modules, imported one way: :mod:`.layout` (format, statuses, array creation, codecs) ← :mod:`.integrity`
(structure and chunk checks), :mod:`.writes` (worker writes, the driver's records), :mod:`.target` (what may
stand at a store's path, leftovers, the swap of a new store into place), :mod:`.resume_checks` (whether a run
may resume a store) ← :mod:`.run_store` (:class:`RunStore`); :mod:`.readers` (xarray views) needs only
:mod:`.layout`.
"""

from gcc_dask.errors import WriteRefusedError

from .integrity import check_structure
from .layout import BATCH_CHUNK, DONE_STATUSES, INPUTS, STORE_FORMAT, STORE_ID_ATTR, BatchStatus
from .lock import StoreLock
from .readers import check_writable, open_run, open_scheme, read_in_dataset_order, store_path
from .run_store import RunStore, SampleIndex
from .target import check_target, remove_leftovers
from .writes import write_batch, write_decoded, write_inputs

__all__ = [
    "BatchStatus",
    "DONE_STATUSES",
    "STORE_ID_ATTR",
    "WriteRefusedError",
    "RunStore",
    "SampleIndex",
    "StoreLock",
    "check_structure",
    "check_target",
    "check_writable",
    "open_run",
    "open_scheme",
    "read_in_dataset_order",
    "remove_leftovers",
    "store_path",
    "write_batch",
    "write_decoded",
    "write_inputs",
    # layout constants, for readers of the raw store
    "BATCH_CHUNK",
    "INPUTS",
    "STORE_FORMAT",
]
