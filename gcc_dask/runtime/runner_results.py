"""The outcomes of a batch's tasks, for :class:`~.executor.BatchRunner`: the records of finished batches (fetched in
the background in one round trip, gathered batch by batch when one was lost, a lost decode's record made again;
the few waits outside the loop end with the run's one line when the scheduler is lost), and failures: a decode,
score or labels task that failed (run again when it died with a worker, at most
:data:`~.batch_machine.MAX_ATTEMPTS` times; the machine decides for a decode and a score), a batch whose data is
bad (the run stops with one line), and the one line that tells the user the first batch of a scheme without an
estimate."""

from __future__ import annotations

import logging

import numpy as np
from distributed import KilledWorker

from gcc_dask.errors import ClusterError
from gcc_dask.runtime.batch_machine import Fail, Redecode, Rescore, Restart, WatchShards
from gcc_dask.runtime.inflight import final as _final  # (importable from here, as before)
from gcc_dask.runtime.inflight import inputs_again, lost_kept, task_report, unrecorded
from gcc_dask.runtime.lines import bad_batch_text, failure_line, in_place_hint, raised_line, unscored_line
from gcc_dask.runtime.lines import samples_text as _samples_text  # noqa: F401 (importable from here, as before)
from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState, _SchemeState
from gcc_dask.runtime.tasks import failed_record, is_bad_batch, is_storage_error, strip_record
from gcc_dask.runtime.workers import WorkersReplaced

logger = logging.getLogger("gcc_dask.runtime.executor")

__all__ = ["ResultsRunner"]


def _error_of(fut) -> BaseException:
    """The exception of an erred future (a ``KilledWorker`` when its worker, or a dependency's, died)."""
    try:
        return fut.exception(timeout=30)
    except Exception as e:  # pragma: no cover - the scheduler is gone
        return e


class ResultsRunner:
    """Records, failed tasks and bad data of :class:`~.executor.BatchRunner`."""

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
            self._tell_failure(s, state.batch, f"every shard that ran failed; shard {int(failed[0])}: "
                                               f"{exc!r}{in_place_hint(exc)}")

    def _raise_bad_batch(self, state: _BatchState, exc: BaseException) -> None:
        """Stop the run with one line naming the batch and its samples when `exc` was raised by its data."""
        if is_bad_batch(exc):
            raise type(exc)(bad_batch_text(state.batch, self.layout.samples(state.batch), exc)) from None

    def _tell_failure(self, s: _SchemeState, batch: int, why: str) -> None:
        """Warn the user the first time a batch of a scheme has no estimate (:func:`~.lines.failure_line`)."""
        if line := failure_line(s.plan.name, batch, why, self._told):
            self.warn(line)

    def _tell_raised(self, state: _BatchState, s: _SchemeState) -> None:
        """Warn the user the first time f raised on a shard of a scheme whose batch is decoded anyway
        (:func:`~.lines.raised_line`): the error of its first failed shards (a round trip each, at most a few,
        once per scheme), a shard lost with its worker (``KilledWorker``) not counting."""
        if f"{s.plan.name}:raised" in self._told:
            return
        for w in np.flatnonzero(s.failed)[:3]:
            fut = s.shards[int(w)]
            if fut is None or fut.status != "error":
                continue
            exc = _error_of(fut)
            if isinstance(exc, KilledWorker) or is_bad_batch(exc):
                continue
            if line := raised_line(s.plan.name, state.batch, int(w), exc, self._told):
                self.warn(line)
            return

    def _fail(self, state: _BatchState, s: _SchemeState, reason: str) -> None:
        logger.warning("batch %d of %s failed: %s", state.batch, s.plan.name, reason)
        self._cancel([f for f in s.shards if f is not None])
        s.result = failed_record(s.plan.name, state.batch, s.plan.num_workers, s.start_wall)
        s.result["error"] = reason
        s.machine.fail(reason)

    def _on_decode(self, batch: int, scheme: str, fut) -> None:
        if (report := task_report(self._inflight, batch, scheme, fut, "decode")) is None:
            return
        state, s = report
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
        lost = lost_kept(s, killed)
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
        if (report := task_report(self._inflight, batch, scheme, fut, "score")) is None:
            return
        state, s = report
        if fut.status == "finished":
            s.done = True
            return
        exc = _error_of(fut)
        if is_storage_error(exc):  # the reference (or the labels) cannot be written: stop with that one line
            raise exc
        action = s.machine.score_failed(isinstance(exc, KilledWorker), s.decode.status == "finished")[0]
        if isinstance(action, Redecode):  # the decode's record died with a worker: decode again, then score
            self._submit_decode(state, s)
            s.score = None
            return
        if isinstance(action, Rescore):  # the score or the reference died with a worker: join them again
            self._submit_score(state, s)
            return
        # (Unscored) no reference for this batch (f raised on the uncoded batch): keep the record without metrics
        logger.warning("batch %d (%s): no reference to score against (%r)", batch, scheme, exc)
        if not isinstance(exc, KilledWorker) and (line := unscored_line(batch, len(self.layout.samples(batch)), exc,
                                                                        self._told)):
            self.warn(line)
        try:
            s.result = strip_record(self._result(s.decode))
        except (ClusterError, WorkersReplaced):  # (the loop: the run stops; or its batches run again)
            raise
        except Exception as e:
            s.result = dict(failed_record(s.plan.name, batch, s.plan.num_workers, s.start_wall),
                            error=f"lost: {e!r}")
        s.done = True

    def _on_labels(self, batch: int, fut) -> None:
        """The labels task of a run without a reference ended: nothing to do when it wrote them; a store that
        cannot be written stops the run (as for ``decoded``); labels lost with their worker are submitted again
        (at most :data:`MAX_ATTEMPTS` times in all); else the batch's ``inputs/status`` stays pending, which a
        resume runs again (docs/pipeline.rst, section 'Resuming')."""
        if (report := task_report(self._inflight, batch, "", fut, "labels")) is None:
            return
        state, _ = report
        exc = _error_of(fut)
        if is_storage_error(exc):
            raise exc
        if inputs_again(isinstance(exc, KilledWorker), state.attempt):
            state.attempt += 1
            self._submit_reference(state)
            return
        logger.warning("batch %d: its labels were not written (%r); a resume runs the batch again", batch, exc)
        state.labels_given_up = True

    def _redecode(self, state: _BatchState, s: _SchemeState) -> dict | None:
        """Decode the same kept shards again and wait for the record (a rare recovery path): the decode's
        result, and what Dask needed to recompute it, died with a worker after the decode had finished.
        None when that fails too (MAX_ATTEMPTS in all), or when the batch never got to a decode."""
        while s.received is not None and s.attempt + 1 < MAX_ATTEMPTS:
            s.attempt += 1
            self._submit_decode(state, s)
            try:
                record = self._result(s.decode)
                if self.reference and state.reference is not None:
                    self._submit_score(state, s)
                    return self._result(s.score)
                return strip_record(record)
            except (ClusterError, WorkersReplaced):  # the scheduler is gone, or every worker was replaced
                raise
            except Exception as e:
                logger.warning("batch %d (%s): decoding again failed (%r)", state.batch, s.plan.name, e)
        return None

    def _result(self, fut):
        return self._results([fut])[0]

    def _results(self, futs: list, poll: float = 0.5) -> list:
        """``client.gather(futs)``, for the few waits outside the loop. Each `poll` seconds it looks at the cluster,
        as the loop does: a lost scheduler ends it with the run's one line (:meth:`_lost_scheduler_error`; the
        futures of a client that lost its scheduler may never resolve, and the run used to hang there, on a loaded
        machine), and so does Ctrl-C or SIGTERM, and no worker for ``worker_timeout`` seconds
        (:meth:`_check_workers`); every worker replaced by others raises :class:`~.workers.WorkersReplaced`, which
        the loop answers by running its batches in flight again (a task placed on a gone worker waits for ever: a
        run waited there after every worker was killed and replaced)."""
        from distributed import wait

        while True:
            try:
                with self.client.as_current():  # distributed.wait takes the default client, maybe not the run's
                    wait(futs, timeout=poll)
                return self.client.gather(futs)
            except TimeoutError:
                if self._scheduler_lost():
                    raise self._lost_scheduler_error() from None
                self._signals.check()
                self._check_workers()
                if self._workers.replaced:
                    raise WorkersReplaced() from None

    def _gather(self, state: _BatchState) -> list[dict]:
        """The batch's records (one per scheme), fetched in one round trip."""
        pending = unrecorded([state])
        if pending:
            try:
                fetched = self._results([_final(s) for s in pending])
            except (ClusterError, WorkersReplaced):
                raise
            except Exception as e:  # the worker holding a record died between finishing and the fetch
                fetched = [None] * len(pending)
                logger.warning("batch %d: lost decode results (%r)", state.batch, e)
            for s, r in zip(pending, fetched):
                if r is None:
                    r = self._redecode(state, s)
                s.result = r if r is not None else dict(
                    failed_record(s.plan.name, state.batch, s.plan.num_workers, s.start_wall), error="lost")
        return [s.result for s in state.schemes.values()]

    def _fetch(self, states: list[_BatchState]):
        """Start fetching the records of finished batches in the background (one round trip for all).

        A blocking gather stalled the loop for a round trip per batch, with nothing new submitted meanwhile
        (bench: 26 ms per gather, a third of the wall time of a no-op run at N = 16). The fetch runs in a
        thread of its own; its outcome comes back through the event queue as a ``("records", ...)`` event.
        """
        pending = [_final(s) for s in unrecorded(states)]
        fetch = self._fetcher.submit(self.client.gather, pending) if pending else None
        tag = ("records", self._fetch_gen, "", -1)
        if fetch is None:
            self._events.put(tag)
        else:
            fetch.add_done_callback(lambda f: self._events.put(tag, f))
        self._fetch_future = fetch
        return states

    def _fetched(self, states: list[_BatchState], fetch) -> list[list[dict]]:
        """The records of ``states`` from a finished :meth:`_fetch` (one batch at a time on a failure)."""
        pending = unrecorded(states)
        if pending:
            try:
                fetched = fetch.result()
            except Exception:  # a record was lost: let _gather sort out which, batch by batch
                return [self._gather(st) for st in states]
            for s, r in zip(pending, fetched):
                s.result = r
        return [self._gather(st) for st in states]
