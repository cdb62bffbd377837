"""The cluster side of a run, for :class:`~.executor.BatchRunner`: the plugin registered on the workers (frozen ones
not waited for), the workers checked (every one lost, or all replaced: :class:`~.window.WorkerLoss`), the
scheduler lost, stragglers cancelled off the loop, and quiet workers (docs/pipeline.rst, section 'Unresponsive
workers'): what the batches in flight wait for on a worker that missed its heartbeats runs again on the others
(:meth:`ClusterRunner._rerun_quiet`; what runs again: :func:`~.rescue.reruns`), and the shards a cutoff cannot
do without run again elsewhere (:meth:`~.batch_machine.BatchMachine.short_of`). What needs no runner is in plain
functions: :mod:`~.registration` (the plugin), :mod:`~.quiet` (what the batches wait for, task by task) and
:mod:`~.scheduler_loss` (a lost scheduler)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from gcc_dask import dashboard
from gcc_dask.errors import ClusterError
from gcc_dask.runtime.inflight import scheme_futures, split_fetch, unrecorded
from gcc_dask.runtime.keys import rescue_suffix
from gcc_dask.runtime.lines import replaced_line, rerun_what, worker_loss_line, workers_lost_error
from gcc_dask.runtime.liveness import keys_stuck_on
from gcc_dask.runtime.placement import away_from_quiet
from gcc_dask.runtime.plans import _BatchState
from gcc_dask.runtime.quiet import records_waiting, refetched, rescue_plan, scores_to_rejoin, waits_on
from gcc_dask.runtime.registration import confirm_when_ready, register, unregister
from gcc_dask.runtime.rescue import quiet_line
from gcc_dask.runtime.scheduler_loss import LostFetchLogFilter as _LostFetchLogFilter  # noqa: F401 (executor's)
from gcc_dask.runtime.scheduler_loss import lost_scheduler_error, scheduler_lost

logger = logging.getLogger("gcc_dask.runtime.executor")

__all__ = ["ClusterRunner"]


class ClusterRunner:
    """Plugin registration, worker checks, quiet workers, a lost scheduler and cancels of :class:`~.executor.BatchRunner`."""

    def _cancel(self, futures: list) -> None:
        """Cancel `futures` (stragglers past a cutoff, spares submitted again, a failed batch's shards) from a
        thread of its own, in order. ``client.cancel`` waits for the scheduler's answer (about 30 ms a call with
        the scheduler in this process on 2 cores), and the loop need not: every later use of these tasks has
        keys of its own. :meth:`run` waits for the last calls when it ends cleanly."""
        if not futures:
            return
        if self._canceller is None:
            self._canceller = ThreadPoolExecutor(1, thread_name_prefix="gcc-dask-cancel")
        self._canceller.submit(self._cancel_now, list(futures))

    def _cancel_now(self, futures: list) -> None:
        try:
            self.client.cancel(futures)
        except Exception:  # pragma: no cover - the cluster is going away: its tasks go with it
            logger.debug("could not cancel %d tasks", len(futures), exc_info=True)

    def _scheduler_lost(self, exc: BaseException | None = None) -> bool:
        """Whether the client has lost its scheduler for good (:func:`~.scheduler_loss.scheduler_lost`)."""
        return scheduler_lost(self.client, exc)

    def _lost_scheduler_error(self, exc: BaseException | None = None) -> ClusterError:
        """The one line that stops a run whose scheduler is gone (:func:`~.scheduler_loss.lost_scheduler_error`)."""
        return lost_scheduler_error(self._scheduler_address, exc)

    def _check_workers(self) -> None:
        """Stop the run when no worker has been there for ``worker_timeout`` seconds (they were all lost), or
        when the scheduler is gone (the client closed); wait while the client reconnects."""
        if self._scheduler_lost():
            raise self._lost_scheduler_error()
        if self.client.status != "running":  # reconnecting: the client gives up (and closes) after its timeout
            return
        workers = self._workers.refresh()
        self._tell_page_quiet()
        step = self._loss.step(len(workers), time.monotonic())  # (:class:`~.window.WorkerLoss`)
        if step == "stop":
            raise workers_lost_error(self.worker_timeout)
        if line := worker_loss_line(step, len(workers), self.worker_timeout):
            self.echo(line)

    def _tell_page_quiet(self) -> None:
        """Tell the run page which workers are quiet and which were ended, when that changed
        (:class:`~.page_events.QuietPage`)."""
        if event := self._page_quiet.update(self._workers.behind_heartbeats, self._workers.unresponsive):
            dashboard.publish(self.client, event)

    def _restart_in_flight(self, held: list[_BatchState]) -> list[_BatchState]:
        """Every worker seen before is gone and others took their place (all killed and restarted, say): run
        again, under new keys, every scheme of the batches in flight whose record the driver does not hold
        yet, ``held`` (those finished but not fetched) included, with the batch's read, reference or labels,
        and cancel the old tasks. Returns the batches of `held` with every record on the driver already (a
        fetch that stopped half-way): nothing of theirs runs again, they wait for their hand-over.

        Needed because the scheduler gives a task placed on a worker (a loose restriction: a shard, see
        :meth:`_placement`, or a batch's read, :meth:`_load`) that went to the ``no-worker`` state while no worker
        was left only to a worker its restriction names, never to a new one (distributed 2026.8,
        ``Scheduler.bulk_schedule_unrunnable_after_adding_worker``): those tasks, the decodes, references and
        labels that need them, and any lost result that Dask would recompute from them, waited forever. On the
        virtual clock a scheme's batch run again keeps the same received set (docs/pipeline.rst, 'Failures and
        erasures').
        """
        recorded = []
        for state in held:
            if unrecorded([state]):
                self._inflight[state.batch] = state
            else:
                recorded.append(state)
        old, again = [], 0
        for state in list(self._inflight.values()):
            schemes = unrecorded([state])  # (a scheme whose record is on the driver already is left alone)
            if not schemes and state.labels is None:
                continue
            state.load, state.load_key = None, None  # (its worker may be gone: the schemes read the batch anew)
            for s in schemes:
                old += scheme_futures(s)
                self._submit_scheme(state, s.plan, restarts=s.restarts + 1)
                again += 1
            if state.reference is not None or state.labels is not None:
                # its worker, or its read's, may be gone: again, with the new read (the old one is let go, not
                # cancelled: cancelling a task cancels those that depend on it, finished scores among them)
                state.attempt += 1
                self._submit_reference(state)
        if old:
            self._cancel(old)
        if line := replaced_line(again):
            self.echo(line)
            logger.warning("every worker was replaced; %d scheme batches in flight run again", again)
        return recorded

    def _catch_sigint(self) -> Callable[[], None]:
        """While the loop runs, Ctrl-C or SIGTERM sets a flag that the loop turns into ``KeyboardInterrupt``
        (:class:`~gcc_dask.errors.Terminated` for SIGTERM) within ``MAX_WAIT_S``: Python's own handler raises
        it wherever the main thread happens to be, and inside a finaliser (a distributed ``Future.__del__``)
        it is discarded and the run goes on. A second signal raises at once. Returns the function that puts
        the previous handlers back (main thread only; :class:`~.signals.SignalFlag`)."""
        return self._signals.install()

    def suspect(self, addresses, said: bool = False) -> None:
        """Workers found frozen before the run (its set-up, :func:`~.cluster.past_frozen`): no shards while
        they stay silent, ended as any unresponsive worker, and not waited for by the plugin's registration.
        `said`: the caller told the user already (the run does not say it again when it acts on them)."""
        self._suspected |= set(addresses)
        if said:
            self._said_quiet |= set(addresses)
        self._workers.suspect(addresses)

    def _register(self) -> None:
        """Register the run's plugin on the workers (:func:`~.registration.register`); a frozen worker is not
        waited for: no shards there until it has the plugin (:meth:`suspect`,
        :func:`~.registration.confirm_when_ready`)."""
        frozen = register(self.client, self.plugin, self._suspected)
        if frozen - self._suspected:
            self.suspect(frozen)
        self._workers.unready(frozen)
        confirm_when_ready(self.client, self.plugin.name, frozen, self._workers.ready)

    def _unregister(self) -> None:
        """Remove the run's plugin from the workers (:func:`~.registration.unregister`)."""
        unregister(self.client, self.plugin.name)

    def _away_from_quiet(self) -> dict:
        """Where a task the scheduler places (an exact scheme's shards, as a plain map's tasks; a decode,
        next to its inputs; a batch's labels or reference) may run: anywhere, or, while a worker is quiet
        (:attr:`~.workers.WorkerList.quiet`), on the others."""
        return away_from_quiet(self._workers.refresh()) if self._workers.quiet else {}

    def _rerun_quiet(self, fetching: list[_BatchState] | None,
                     ready: list[_BatchState]) -> tuple[list[_BatchState] | None, list[_BatchState]]:
        """Run again, on the other workers, what the batches wait for on a quiet worker (one that missed
        :data:`~.liveness.MISSED_HEARTBEATS` heartbeats while others sent theirs; it may be frozen: SIGSTOP,
        swapping hard): the scheduler says which of the tasks they wait for are stuck there
        (:func:`~.liveness.keys_stuck_on`), :func:`~.quiet.rescue_plan` what runs again (schemes' batches under
        new keys, same draws; a batch's labels or reference with the scores that wait for it; the shards a cutoff
        cannot do without), and this carries it out.

        `fetching` (the batches whose records are being fetched) and `ready` (finished, not fetched yet) are
        the loop's; returned as they are, or, when a record of the fetch under way waits for a quiet worker,
        with that fetch abandoned: its batches are back in flight (those with a record to make again) or in
        `ready`."""
        quiet = self._workers.quiet
        if not quiet or not (self._inflight or fetching):
            return fetching, ready
        # what waits for which task (:func:`~.quiet.waits_on`); the pure policies pick what runs again
        # (:func:`~.quiet.rescue_plan`)
        waits, shards = waits_on(self._inflight.values())
        records = records_waiting(fetching or ())
        if not waits and not records and not shards:
            return fetching, ready
        try:
            stuck = keys_stuck_on(self.client, [*waits, *records, *shards], quiet)
        except Exception as e:  # the scheduler is busy or going away: look again at the next check
            logger.debug("could not ask which tasks wait for %s: %r", sorted(quiet), e)
            return fetching, ready
        again, short = rescue_plan(waits, records, shards, stuck, time.monotonic())
        if not again and not short:
            return fetching, ready
        if again_records := refetched(again):  # abandon the fetch: its batches go back
            back, done = split_fetch(fetching, again_records)
            self._inflight.update((state.batch, state) for state in back)
            ready.extend(done)
            fetching, self._fetch_gen = None, self._fetch_gen + 1
            # its gather may wait for the quiet worker as long as the worker stays frozen: the next fetches
            # get a thread of their own (the old one ends with that gather)
            self._fetcher.shutdown(wait=False)
            self._fetcher = ThreadPoolExecutor(1, thread_name_prefix="gcc-dask-records")
        old: list = []
        for _, _, _, state, _ in again.values():  # a read stuck there is let go: what runs again reads elsewhere
            if state.load is not None and state.load.key in stuck:
                state.load = None
        for _, _, _, state, s in again.values():
            if s is not None:  # a decode, or a record, that waits for the quiet worker: the scheme runs again
                old += scheme_futures(s)
                self._submit_scheme(state, s.plan, restarts=s.restarts + 1)
                continue
            # (the old labels or reference are let go, not cancelled: cancelling a task cancels the tasks that
            # depend on it, the finished scores of the batch's other schemes among them)
            state.attempt += 1
            self._submit_reference(state)
            for other in scores_to_rejoin(state):  # scores joined with the old reference: join the new one
                old.append(other.score)
                other.attempt += 1  # a key of its own: the old one is being cancelled
                self._submit_score(state, other)
        if short:  # the shards a cutoff cannot do without: the same shards again, elsewhere, at the batch's priority
            update = self._update()
            for state, s, ws in short.values():
                old += [s.shards[w] for w in ws]
                self._map_placed(state, s, ws, update, sfx=rescue_suffix(s.rescues))
            update.send()
        self._cancel(old)
        what = rerun_what(again, short)
        line = quiet_line(quiet, what, self._said_quiet)
        if line:
            self.echo(line)
        elif what:
            logger.info("quiet workers %s: %s run again on the other workers", sorted(quiet), ", ".join(what))
        return fetching, ready
