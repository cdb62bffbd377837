"""Failures: a decode, score or labels task that failed (run again when it died with a worker, at most
:data:`~.batch_machine.MAX_ATTEMPTS` times; the machine decides for a decode), a batch whose data is bad (the run
stops with one line), and the one line that tells the user the first batch of a scheme without an estimate.
A mixin of :class:`~.executor.BatchRunner`."""

from __future__ import annotations

import logging

import numpy as np
from distributed import KilledWorker

from gcc_dask.runtime.batch_machine import Fail, Redecode, Restart, WatchShards
from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState, _SchemeState
from gcc_dask.runtime.tasks import failed_record, is_bad_batch, is_storage_error, strip_record

logger = logging.getLogger("gcc_dask.runtime.executor")

__all__ = ["FailuresRunner"]


def _error_of(fut) -> BaseException:
    """The exception of an erred future (a ``KilledWorker`` when its worker, or a dependency's, died)."""
    try:
        return fut.exception(timeout=30)
    except Exception as e:  # pragma: no cover - the scheduler is gone
        return e


def _samples_text(samples: np.ndarray, limit: int = 8) -> str:
    """The dataset indices of a batch's samples, for an error line ("samples 8 to 11" when contiguous)."""
    if samples.size > 1 and (np.diff(samples) == 1).all():
        return f"samples {int(samples[0])} to {int(samples[-1])}"
    shown = ", ".join(str(int(i)) for i in samples[:limit])
    more = f", ... ({samples.size} in all)" if samples.size > limit else ""
    return f"samples {shown}{more}"


class FailuresRunner:
    """Failed tasks and bad data of :class:`~.executor.BatchRunner`."""

    def _raise_if_bad_data(self, state: _BatchState, s: _SchemeState, every: bool = False) -> None:
        """Stop the run with one line when the batch's shards failed on its data, not on f or a worker.

        Every shard reads and encodes its batch, so bad data (NaN with ``nan_policy: raise``, an unreadable
        slice) fail them all with the same :class:`~gcc_dask.errors.GccDaskError`, marked by the worker
        (:func:`~.tasks.is_bad_batch`). Only for a batch with no result at all is one error fetched (a round
        trip); an f that raised (even a ``WorkloadError``) or a dead worker leaves erasures, decoded around.

        A selection scheme's shard (uncoded, speculative, replication) reads only its own samples of the batch,
        so bad data fail only the shards that hold them while the others send results: with `every`, each
        failed shard's error is fetched (a round trip each; failures are rare), and none is told of but bad data.

        Known limit: a wall-clock deadline that fires before any shard has even started (shorter than the
        queue) leaves such a batch undecodable (status 3) without this check, as nothing has failed yet.
        """
        failed = np.flatnonzero(s.failed)
        for w in failed if every else failed[:1]:
            exc = _error_of(s.shards[int(w)])
            self._raise_bad_batch(state, exc)
        if not every and not isinstance(exc, KilledWorker):  # f raised on every shard: say why once, go on
            self._tell_failure(s, state.batch, f"every shard that ran failed; shard {int(failed[0])}: {exc!r}")

    def _raise_bad_batch(self, state: _BatchState, exc: BaseException) -> None:
        """Stop the run with one line naming the batch and its samples when `exc` was raised by its data."""
        if is_bad_batch(exc):
            # the codes' own advice names their keyword; a run is configured by its run section
            why = str(exc).replace("pass nan_policy='propagate'", "set run.nan_policy: propagate")
            raise type(exc)(f"source: batch {state.batch} ({_samples_text(self.layout.samples(state.batch))}): "
                            f"{why}") from None

    def _selects(self, scheme: str) -> bool:
        """Whether `scheme`'s shards each read their own samples of a batch (a selection scheme: uncoded,
        speculative, replication), so bad data fail only some of them."""
        code = getattr(self.plugin, "codes", {}).get(scheme)
        return code is not None and code.selected_input(0) is not None

    def _tell_failure(self, s: _SchemeState, batch: int, why: str) -> None:
        """One line for the user the first time a batch of a scheme has no estimate because f (or the decode of
        its outputs) failed, with the error: otherwise it would show only as NaN rows and a count in the summary
        (a wrong output shape, an f that raises on every block). Later failures are counted there only."""
        if s.plan.name in self._told:
            return
        self._told.add(s.plan.name)
        self.warn(f"{s.plan.name}: batch {batch} has no estimate: {why} (its rows are NaN; the summary counts the "
                  "batches that failed)")

    def _fail(self, state: _BatchState, s: _SchemeState, reason: str) -> None:
        logger.warning("batch %d of %s failed: %s", state.batch, s.plan.name, reason)
        self._cancel([f for f in s.shards if f is not None])
        s.result = failed_record(s.plan.name, state.batch, s.plan.num_workers, s.start_wall)
        s.result["error"] = reason
        s.machine.fail(reason)

    def _on_decode(self, batch: int, scheme: str, fut) -> None:
        state = self._inflight.get(batch)
        s = state.schemes[scheme] if state is not None else None
        if s is None or fut is not s.decode or s.done or s.score is not None:
            return
        if fut.status == "finished":
            if self.reference and state.reference is not None:
                self._submit_score(state, s)
            else:
                s.done = True  # its record is gathered with the batch's others, in one round trip
            return
        exc = _error_of(fut)
        if is_storage_error(exc):  # the store cannot be written: stop the run with that one line
            raise exc
        self._raise_bad_batch(state, exc)  # NaN in samples that a fill would have estimated
        killed = isinstance(exc, KilledWorker)
        lost = [w for w in s.received if s.shards[w].status in ("error", "lost", "cancelled")] \
            if killed and not s.direct else []
        for a in s.machine.decode_failed(repr(exc), killed, lost):
            if isinstance(a, WatchShards):
                # a shard failed (or was lost): watch the shards and let the cutoff decide, as for other schemes
                s.decode = None
                self._events.watch([(f, ("shard", batch, scheme, w)) for w, f in enumerate(s.shards)])
            elif isinstance(a, Restart):
                # kept shards were lost with their workers: run this scheme's batch again
                logger.warning("batch %d (%s): kept shards %s were lost; running the batch again", batch,
                               scheme, lost)
                self._cancel([f for f in s.shards if f is not None])
                self._submit_scheme(state, s.plan, restarts=s.restarts + 1)
            elif isinstance(a, Redecode):
                # the decode died with its worker: decode the same shards again
                logger.warning("decode of batch %d (%s): %r; submitting it again", batch, scheme, exc)
                self._submit_decode(state, s)
            elif isinstance(a, Fail):
                self._fail(state, s, a.reason)
                self._tell_failure(s, batch, f"its decode failed: {exc!r}")

    def _on_score(self, batch: int, scheme: str, fut) -> None:
        state = self._inflight.get(batch)
        s = state.schemes[scheme] if state is not None else None
        if s is None or fut is not s.score or s.done:
            return
        if fut.status == "finished":
            s.done = True
            return
        exc = _error_of(fut)
        if is_storage_error(exc):  # the reference (or the labels) cannot be written: stop with that one line
            raise exc
        if isinstance(exc, KilledWorker) and s.attempt + 1 < MAX_ATTEMPTS:
            # the score, the reference or the decode's record died with a worker: join them again
            s.attempt += 1
            if s.decode.status != "finished":
                self._submit_decode(state, s)  # its record was lost: decode again, then score
                s.score = None
            else:
                self._submit_score(state, s)
            return
        # no reference for this batch (f raised on the uncoded batch): keep the record without metrics
        logger.warning("batch %d (%s): no reference to score against (%r)", batch, scheme, exc)
        try:
            s.result = strip_record(s.decode.result())
        except Exception as e:
            s.result = dict(failed_record(s.plan.name, batch, s.plan.num_workers, s.start_wall),
                            error=f"lost: {e!r}")
        s.done = True

    def _on_labels(self, batch: int, fut) -> None:
        """The labels task of a run without a reference ended: nothing to do when it wrote them; a store that
        cannot be written stops the run (as for ``decoded``); labels lost with their worker are submitted again
        (at most :data:`MAX_ATTEMPTS` times in all); else the batch's ``inputs/status`` stays pending, which a
        resume runs again (docs/pipeline.rst, section 'Resuming')."""
        state = self._inflight.get(batch)
        if state is None or fut is not state.labels or fut.status == "finished":
            return
        exc = _error_of(fut)
        if is_storage_error(exc):
            raise exc
        if isinstance(exc, KilledWorker) and state.attempt + 1 < MAX_ATTEMPTS:
            state.attempt += 1
            self._submit_reference(state)
            return
        logger.warning("batch %d: its labels were not written (%r); a resume runs the batch again", batch, exc)
        state.labels_given_up = True
