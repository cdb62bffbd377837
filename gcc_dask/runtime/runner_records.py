"""The records of finished batches: fetched in the background in one round trip, gathered batch by batch when one
was lost, a lost decode's record made again; the few waits outside the loop end with the run's one line when
the scheduler is lost. A mixin of :class:`~.executor.BatchRunner`."""

from __future__ import annotations

import logging

from gcc_dask.errors import ClusterError
from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState, _SchemeState
from gcc_dask.runtime.tasks import failed_record, strip_record

logger = logging.getLogger("gcc_dask.runtime.executor")

__all__ = ["RecordsRunner"]


def _final(s: "_SchemeState"):
    """The future whose result is the scheme's record: the score task when there is one, else the decode."""
    return s.score if s.score is not None else s.decode


class RecordsRunner:
    """Fetches, gathers and results of :class:`~.executor.BatchRunner`."""

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
            except ClusterError:  # the scheduler is gone: the run stops with its one line
                raise
            except Exception as e:
                logger.warning("batch %d (%s): decoding again failed (%r)", state.batch, s.plan.name, e)
        return None

    def _result(self, fut):
        return self._results([fut])[0]

    def _results(self, futs: list, poll: float = 0.5) -> list:
        """``client.gather(futs)``, for the few waits outside the loop: a lost scheduler ends it with the run's
        one line (:meth:`_lost_scheduler_error`; the futures of a client that lost its scheduler may never
        resolve, and the run used to hang there, on a loaded machine), and so does Ctrl-C or SIGTERM."""
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

    def _gather(self, state: _BatchState) -> list[dict]:
        """The batch's records (one per scheme), fetched in one round trip."""
        pending = [s for s in state.schemes.values() if s.result is None]
        if pending:
            try:
                fetched = self._results([_final(s) for s in pending])
            except ClusterError:
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
        pending = [_final(s) for st in states for s in st.schemes.values() if s.result is None]
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
        pending = [s for st in states for s in st.schemes.values() if s.result is None]
        if pending:
            try:
                fetched = fetch.result()
            except Exception:  # a record was lost: let _gather sort out which, batch by batch
                return [self._gather(st) for st in states]
            for s, r in zip(pending, fetched):
                s.result = r
        return [self._gather(st) for st in states]
