"""Code that runs on the Dask workers: the reference, shard, decode and score tasks.

Task functions live in the package (never in ``__main__``) so that workers import them instead of
receiving pickled closures. Every task takes the plugin's name and looks up the heavy state (the loaded
workload, the coding schemes, the source, the store sink) on its worker: it is shipped once per worker
by :class:`~gcc_dask.runtime.plugin.RunPlugin` (:mod:`gcc_dask.runtime.plugin`), never once per task. How a task
stops when it is cancelled is :mod:`gcc_dask.runtime.cancel`'s. Both modules' names are importable from here too.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcc_dask import metrics
from gcc_dask.errors import GccDaskError, InvalidInputError, StoreError, WorkloadError, WriteRefusedError
from gcc_dask.runtime.cancel import POLL_INTERVAL_S, _GONE, cooperative_sleep, is_cancelled  # noqa: F401
from gcc_dask.runtime.plugin import (  # noqa: F401
    _BAD_BATCH, Loaded, RunPlugin, _ErasureLogFilter, _HeldChunks, _marking, _plugin, _read_batch, _Slot, is_cupy,
)

logger = logging.getLogger(__name__)

def is_bad_batch(exc: BaseException) -> bool:
    """True for an error raised while reading or encoding a batch (bad data), not by f or a dead worker
    (:class:`~gcc_dask.runtime.plugin.RunPlugin` marks it)."""
    return isinstance(exc, GccDaskError) and getattr(exc, _BAD_BATCH, False)


def is_storage_error(exc: BaseException) -> bool:
    """True for the :class:`~gcc_dask.errors.StoreError` a task raises when it cannot write the store."""
    return isinstance(exc, StoreError)


def _write(p: "RunPlugin", kind: str, batch: int, **arrays: Any) -> Any:
    """``p.sink(...)`` (returning what it returns: a scheme's ``chunk_digest`` for the batch's record), turning a file-system failure (``OSError``) into one :class:`StoreError` line naming what
    failed.

    An orphan writes nothing: a task whose plugin was torn down (its run ended, or a new run on the same store
    removed it) returns without writing, and a write the store refuses (:class:`WriteRefusedError`: another
    run's token, or no store) is dropped quietly when the task was cancelled (its driver is gone). A live run
    whose write is refused stops with that error's one line."""
    if p.closed:
        logger.debug("not writing %s of batch %s: the run's plugin was removed", kind, batch)
        return None
    try:
        return p.sink(kind, batch, **arrays)
    except WriteRefusedError as e:
        if p.closed or is_cancelled():
            logger.info("an orphaned task of an ended run did not write %s of batch %s: %s", kind, batch, e)
            return None
        raise
    except OSError as e:
        where = getattr(p.sink, "path", "the store")
        arrays_text = ", ".join(f"{kind}/{name}" for name in arrays)
        raise StoreError(f"store: cannot write {arrays_text} of batch {batch} to {where!r} "
                         f"({type(e).__name__}: {e}); fix the store's file system and run the same command "
                         "again to resume") from None


def to_host(a: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or CuPy array (``cupy.ndarray.get``), or ``numpy.asarray`` of anything else."""
    return a.get() if is_cupy(a) else np.asarray(a)


def as_array(y: Any) -> Any:
    """f's output as an array: a NumPy or CuPy array as it is, anything else (a pandas DataFrame or Series, as an
    estimator set to ``set_output(transform="pandas")`` returns; a list) through ``numpy.asarray``."""
    return y if isinstance(y, np.ndarray) or is_cupy(y) else np.asarray(y)


#: how far row 0 of a square output block may be from f on that row alone (relative to the row's largest value)
SQUARE_CHECK_RTOL = 1e-3


def check_output(p: RunPlugin, y: Any, rows: int, what: str, x: Any = None) -> Any:
    """`y`, f's output on `rows` samples of `what`, once its shape is ``(rows, *p.output_shape)``: the shape f gave
    on its probe (one sample, on the driver) with `rows` rows. A shape comparison, nothing per row, except where
    the shape cannot tell a transposed block: an output of one axis of `rows` values (a square ``(rows, rows)``
    block), whose row 0 is then compared with f on the block's first sample alone (`x`, the block f was given;
    one more call of f on one sample, within :data:`SQUARE_CHECK_RTOL`).

    Raises
    ------
    WorkloadError
        One line naming f, the shape it returned and the one expected. It is an error of f like any other: a
        shard's is an erasure (said once per scheme when a batch has no estimate), a reference's leaves the
        batch's reference unknown (NaN). Without it an output of the same size in another layout (f transposing
        a block of several rows, not one) would be reshaped into wrong rows without a word.
    """
    y = as_array(y)  # (row 0 of a DataFrame is not y[0]; its .get is not CuPy's)
    expected = getattr(p, "output_shape", None)
    if expected is None:
        return y
    got = tuple(int(d) for d in np.shape(y))
    want = (int(rows), *expected)
    params = getattr(p.workload, "params", None) or {}
    label = params.get("function") or params.get("path") or params.get("name") or params.get("kind", "f")
    if got == want and x is not None and rows > 1 and tuple(expected) == (int(rows),):
        try:
            alone = to_host(p.fn(x[:1])).reshape(-1).astype(np.float64)
        except Exception:  # f fails on one sample: nothing to compare with (its probe passed on one)
            alone = None
        first = to_host(y[0]).reshape(-1).astype(np.float64)
        if alone is not None and alone.shape == first.shape and np.isfinite(alone).all() and np.isfinite(first).all():
            scale = max(float(np.abs(alone).max(initial=0.0)), np.finfo(np.float32).tiny)
            if float(np.abs(first - alone).max(initial=0.0)) > SQUARE_CHECK_RTOL * scale:
                raise WorkloadError(
                    f"workload: f ({label}) returned a square block {got} for {what} of {rows} samples whose row 0 "
                    f"is not f of that sample alone (largest difference {np.abs(first - alone).max():.3g}, against "
                    f"{scale:.3g}): f must map sample i to row i of its output for every n (a block transposed "
                    "has the right shape and the wrong rows)")
    if got != want:
        raise WorkloadError(
            f"workload: f ({label}) returned shape {got} for {what} of {rows} samples; expected {want}, the "
            f"shape it gave for one sample ({(1, *expected)}) with {rows} rows: f must map (n, ...) samples to "
            "(n, ...) outputs for every n")
    return y


def load_batch(name: str, batch: int) -> Loaded | None:
    """The run's one read of batch `batch`: its samples in slot order, and their labels
    (:meth:`~gcc_dask.runtime.plugin.RunPlugin.read`; each chunk of a chunked source that holds some of them read
    once, whole).

    The batch's coded shards, and its reference or labels task, take the result as an argument, so the batch is
    read, decompressed and gathered once for the whole run and reaches each other worker that runs a shard of
    it by one transfer, instead of once in every worker (docs/pipeline.rst, section 'Reads that follow the
    chunks'). A :class:`~gcc_dask.errors.GccDaskError` raised by the read is marked as the batch's own
    (:func:`is_bad_batch`) and reaches the driver through every task that takes the result. None once the run
    has ended.
    """
    p = _plugin(name)
    if p is None:
        return None
    return p.read(batch)


def _given(inputs: list | None) -> Loaded | None:
    """The batch a task was given (``[Loaded]``, Dask's result of :func:`load_batch`), or None."""
    return inputs[0] if inputs else None


def reference_task(name: str, batch: int, write: bool = True, evaluate: bool = True,
                   output_size: int | None = None, inputs: list | None = None) -> np.ndarray | None:
    """Compute f(x) uncoded for the batch's samples (slot order); write labels and reference; return it.

    With ``evaluate=False`` (a run without a reference) only the labels are written, and None is returned.
    When f raises on the uncoded batch, the batch's reference is unknown: with ``output_size`` (f's flattened
    output size) it is written as NaN rows with the labels, so that the batch is not pending work (an outcome of
    f, which a resume would only meet again), and the error is raised (the batch's records keep no metrics).
    A batch whose reference could not be *written* stays pending (docs/pipeline.rst, section 'Resuming').
    `inputs`, ``[Loaded]``: the batch as :func:`load_batch` read it (else it is read here).
    """
    p = _plugin(name)
    if p is None:
        return None
    loaded = _given(inputs)
    if loaded is None:
        loaded = p.load(batch)
    if not evaluate:
        if write:
            _write(p, "inputs", batch, labels=loaded.labels)
        return None
    try:
        ref = check_output(p, p.fn(loaded.x), loaded.n_real, "the batch", loaded.x)
        ref = to_host(ref).reshape(loaded.n_real, -1)
    except Exception:
        if write and output_size is not None:
            unknown = np.full((loaded.n_real, int(output_size)), np.nan, dtype=np.float32)
            _write(p, "inputs", batch, reference=unknown, labels=loaded.labels)
        raise
    if write:
        _write(p, "inputs", batch, reference=ref, labels=loaded.labels)
    return ref


@dataclass(frozen=True)
class ShardResult:
    """What a shard sends back: its output, and when it started and finished (``time.time()``)."""

    worker: int
    output: Any  # (G, *out) numpy or cupy: f on the shard's coded block of G samples
    started: float
    finished: float


_SHARD_SECONDS: dict[str, float] = {}
_SHARD_SECONDS_LOCK = threading.Lock()


def shard_seconds() -> dict[str, float]:
    """Seconds that shard tasks have held a thread of this process, per scheme label, since it started: every
    :func:`evaluate_shard` from its start to its return, an injected delay included, and a shard cancelled
    while it slept until it stopped. Summed over a cluster (``client.run(shard_seconds)``) before and after a
    run, it is the compute the run's shards spent (what ``gcc-dask bench pipeline``'s ``tail`` section
    compares with a plain map's)."""
    with _SHARD_SECONDS_LOCK:
        return dict(_SHARD_SECONDS)


def evaluate_shard(name: str, scheme: str, batch: int, worker: int, delay_s: float = 0.0,
                   inputs: list | None = None) -> ShardResult | None:
    """Evaluate f on coded block ``worker`` of ``batch`` for ``scheme``, after an injected (cooperative) delay.

    One call of f on the block's G samples. The coded block comes from :meth:`RunPlugin.shard_input`: the
    shard's own row encoded from `inputs` (``[Loaded]``, the batch as :func:`load_batch` read it once for the
    run; a shard of a selection scheme is given none, and reads its own samples). Returns None when the
    shard was cancelled during its delay: it frees its thread at once. An exception raised by f, or by
    reading or encoding the batch, propagates: the driver records the shard as an erasure, never retries
    it (and stops the run with one line when every shard of a batch failed on bad data). The time it held
    its thread is added to :func:`shard_seconds`.
    """
    started = time.time()
    t0 = time.perf_counter()
    try:
        p = _plugin(name)
        if p is None:
            return None
        x = p.shard_input(batch, scheme, worker, _given(inputs))
        if delay_s > 0 and not cooperative_sleep(delay_s, p):
            return None
        y = check_output(p, p.fn(x), x.shape[0], "a shard's block", x)
        return ShardResult(worker=worker, output=y, started=started, finished=time.time())
    finally:
        spent = time.perf_counter() - t0
        with _SHARD_SECONDS_LOCK:
            _SHARD_SECONDS[scheme] = _SHARD_SECONDS.get(scheme, 0.0) + spent


def decode_by_row(code: Any, Y: Any, received: np.ndarray) -> np.ndarray:
    """``code.decode(Y, received)`` when some of f's output rows hold NaN or Inf (f's own NaN on a few samples,
    or a value beyond float32's range): each non-finite row of a worker's block, ``Y[n, b]``, is left out, and the
    estimates that use it (``decoder_matrix(received)[k, n] != 0``: one sample for an exact selection such as
    ``uncoded``, the whole group ``b`` for a code that mixes every result) are NaN; every other estimate is
    decoded as usual. Without it one NaN row failed the decode of the whole batch in every scheme (uncoded's exact
    rows included).

    Raises
    ------
    InvalidInputError
        When `Y` is finite (the decode itself overflowed): as :meth:`decode` raises it.
    """
    Yh = np.asarray(to_host(Y))
    bad = ~np.isfinite(Yh).reshape(Yh.shape[0], Yh.shape[1] if Yh.ndim > 1 else 1, -1).all(axis=-1)  # (|F|, B)
    if not bad.any():
        return to_host(code.decode(Y, received))  # raises what it raised
    clean = np.where(np.isfinite(Yh), Yh, 0).astype(Yh.dtype, copy=False)
    decoded = np.array(to_host(code.decode(clean, received)), dtype=Yh.dtype)
    uses = (np.abs(np.asarray(code.decoder_matrix(received))) > 0).astype(np.float64)  # (K, |F|)
    affected = (uses @ bad.astype(np.float64)) > 0  # (K, B)
    decoded.reshape(affected.shape + (-1,))[affected] = np.nan
    return decoded


def decode_task(
    name: str,
    scheme: str,
    batch: int,
    n_real: int,
    received: list[int],
    results: list[ShardResult],
    meta: dict,
) -> dict:
    """Decode the kept shard results, write ``decoded``, and return the batch's record.

    Nothing but the kept shards is an input: the uncoded reference is joined later (:func:`score_task`),
    off the latency path. ``meta`` carries what the driver decided: ``status`` (int), ``cutoff_s``,
    ``latency_s`` (N,), ``failed`` (N,) bool, ``batch_start`` (``time.time()`` at submission),
    ``score`` (bool: keep the decoded rows in the record for :func:`score_task`), ``keep`` (bool, optional: keep
    them in the record for the driver, ``keep_decoded``) and ``backups`` (the backup
    copies the batch launched, ``speculative``; 0 if absent). ``latency_s`` None: the
    decode was submitted with its shards (a scheme that keeps every result, on the wall clock), and each
    shard's latency is taken from its result (``finished - batch_start``), the cutoff as the largest. The record (status,
    received/failed masks, latencies) goes back to the driver, which writes it to the store after this
    task has written ``decoded``: the status is always written last. The record's ``chunk_digest`` is what
    the write of ``decoded`` returned (:func:`~gcc_dask.store.write_decoded`), written with it.
    """
    from gcc_dask.errors import NotEnoughResultsError

    p = _plugin(name)
    if p is None:
        return None
    code = p.codes[scheme]
    status = meta["status"]
    decoded = None
    error_estimate = float("nan")
    nonfinite = overflow = 0  # rows of f's outputs that held NaN or Inf; estimates beyond float32's range
    if results and status != 4:
        ys = [r.output for r in results]
        if p.use_gpu and any(not isinstance(y, np.ndarray) for y in ys):
            import cupy

            Y = cupy.stack([cupy.asarray(y) for y in ys])
        else:
            Y = np.stack([to_host(y) for y in ys])
        idx = np.asarray(received, dtype=np.int64)
        try:
            # the plain decode, so that code.decode(Y, received) on the stored received set reproduces
            # these estimates bit for bit (the return_error path's stacked matmul rounds differently)
            by_row = False
            try:
                decoded = code.decode(Y, idx)
            except InvalidInputError:  # NaN or Inf in f's output: those rows only, when there are any
                decoded, by_row = decode_by_row(code, Y, idx), True
                Yh = np.asarray(to_host(Y))
                nonfinite = int((~np.isfinite(Yh.reshape(Yh.shape[0] * max(Yh.shape[1] if Yh.ndim > 1 else 1, 1),
                                                         -1))).any(axis=1).sum())
            if code.name in ("gcc", "letcc") and not by_row:
                error_estimate = float(np.mean(to_host(code.decode(Y, idx, return_error=True)[1])))
            decoded = to_host(decoded)
        except NotEnoughResultsError:
            decoded = None
    if decoded is None:
        if status != 4:
            status = 3
        decoded = np.full((n_real, meta["output_size"]), np.nan, dtype=np.float32)
    else:
        decoded = p.layout.from_blocks(decoded, n_real)
        decoded = decoded.reshape(n_real, -1)
        if status in (1, 2) and not metrics.decodable_rows(decoded).any():
            status = 3
    received_mask = np.zeros(code.num_workers, dtype=bool)
    received_mask[np.asarray(received, dtype=np.int64)] = True
    if np.issubdtype(decoded.dtype, np.floating) and np.finfo(decoded.dtype).max > np.finfo(np.float32).max:
        with np.errstate(invalid="ignore"):
            overflow = int((np.abs(decoded) > np.finfo(np.float32).max).any(axis=1).sum())
    with np.errstate(over="ignore"):  # beyond float32's range: ±inf, counted and said once by the run
        decoded = decoded.astype(np.float32)
    filled = code.filled(received_mask) if status in (1, 2) else np.zeros(code.num_inputs, dtype=bool)
    if filled.any():  # the positions a fill estimated, for every group of the batch, in slot order
        if getattr(code, "nan_policy", None) == "raise":
            # samples no shard read (their copies straggled): read them now, so NaN or Inf there stops the run
            # as it does where a shard read them, instead of hiding under a finite fill
            for k in np.flatnonzero(filled).tolist():
                p.shard_input(batch, scheme, next(w for w in range(code.num_workers) if code.selected_input(w) == k))
        g = p.layout.batch_groups(batch)
        filled = p.layout.from_blocks(np.repeat(filled[:, None], g, axis=1), n_real)
        digest = _write(p, scheme, batch, decoded=decoded, filled=filled)
    else:
        digest = _write(p, scheme, batch, decoded=decoded)
    latency, cutoff = meta["latency_s"], float(meta["cutoff_s"])
    if latency is None:  # submitted with its shards (a scheme that keeps every result): time them here
        latency = np.full(code.num_workers, np.nan)
        latency[np.asarray(received, dtype=np.int64)] = [r.finished - meta["batch_start"] for r in results]
        cutoff = float(np.max(latency[np.asarray(received, dtype=np.int64)])) if received else math.nan
    record = {
        "scheme": scheme, "batch": batch, "status": status, "mse": float("nan"), "rel_acc": float("nan"),
        "cutoff_s": cutoff, "batch_latency_s": time.time() - meta["batch_start"],
        "error_estimate": error_estimate, "received_mask": received_mask,
        "latency_s": np.asarray(latency, dtype=np.float64),
        "failed_mask": np.asarray(meta["failed"], dtype=bool),
        "n_backups": int(meta.get("backups", 0)),
        "chunk_digest": digest,  # binds the chunks just written to their place (docs/store.rst, 'Integrity')
        "nonfinite_rows": nonfinite, "overflow_rows": overflow,  # said once by the run, with their counts
    }
    if meta.get("score") or meta.get("keep"):
        record["decoded"] = decoded
    if meta.get("keep"):
        record["keep_decoded"] = True  # (score_task hands the rows on instead of dropping them)
    return record


def score_task(record: dict, reference: np.ndarray) -> dict:
    """Join a decoded batch with its uncoded reference: the record with ``mse`` and ``rel_acc`` filled in.

    Runs after :func:`decode_task` and the batch's :func:`reference_task`, so the reference never delays a
    decode. Drops the record's ``decoded`` rows (they are in the store already), unless the decode was told to
    keep them for the driver (``keep_decoded``).
    """
    if record is None:  # the run ended before its decode ran
        return None
    record = dict(record)
    decoded = record.pop("decoded", None)
    if decoded is not None and record["status"] in (1, 2):
        record["mse"] = metrics.mse(decoded, reference)
        record["rel_acc"] = metrics.rel_acc(decoded, reference)
    if decoded is not None and record.get("keep_decoded"):
        record["decoded"] = decoded
    return record


def strip_record(record: dict) -> dict:
    """A record without the decoded rows that :func:`decode_task` keeps for scoring (or for the driver)."""
    return {k: v for k, v in record.items() if k not in ("decoded", "keep_decoded")}


def failed_record(scheme: str, batch: int, num_workers: int, batch_start: float) -> dict:
    """The record of a batch that could not run at all (its load or encode failed): status 4, failed.

    Built on the driver: its ``decoded`` rows keep the store's NaN fill.
    """
    return {
        "scheme": scheme, "batch": batch, "status": 4, "mse": float("nan"), "rel_acc": float("nan"),
        "cutoff_s": float("nan"), "batch_latency_s": time.time() - batch_start, "error_estimate": float("nan"),
        "received_mask": np.zeros(num_workers, dtype=bool), "latency_s": np.full(num_workers, np.nan),
        "failed_mask": np.ones(num_workers, dtype=bool), "n_backups": 0,
    }
