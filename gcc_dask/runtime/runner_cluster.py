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
from gcc_dask.runtime.liveness import keys_stuck_on
from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState
from gcc_dask.runtime.quiet import input_blocked, waits_on
from gcc_dask.runtime.registration import confirm_when_ready, register, unregister
from gcc_dask.runtime.rescue import quiet_line, reruns, stuck_shards
from gcc_dask.runtime.runner_results import _final
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
        if step == "back":
            self.echo(f"{len(workers)} Dask worker(s) back; the run goes on")
        elif step == "gone":
            self.echo(f"every Dask worker is gone; waiting up to {self.worker_timeout:g} s for workers to come "
                      "back (cluster.connect_timeout)")
        elif step == "stop":
            raise ClusterError(
                f"cluster: every Dask worker was lost and none came back within {self.worker_timeout:g} s "
                "(cluster.connect_timeout); finished batches are in the store: run the same command again "
                "to resume")

    def _tell_page_quiet(self) -> None:
        """Tell the run page which workers are quiet (missed their heartbeats) and which were ended, when that
        changed since it was told last."""
        now = (frozenset(self._workers.behind_heartbeats), frozenset(self._workers.unresponsive))
        if now == self._page_quiet:
            return
        ended = now[1] - self._page_quiet[1]
        self._page_quiet = now
        dashboard.publish(self.client, {"kind": "quiet", "run": self.token, "workers": sorted(now[0]),
                                        "ended": sorted(ended)})

    def _restart_in_flight(self, held: list[_BatchState]) -> None:
        """Every worker seen before is gone and others took their place (all killed and restarted, say): run
        again, under new keys, every scheme of the batches in flight whose record the driver does not hold
        yet, ``held`` (those finished but not fetched) included, and cancel the old tasks.

        Needed because the scheduler gives a shard placed on a worker (a loose restriction, see
        :meth:`_placement`) that went to the ``no-worker`` state while no worker was left only to a worker its
        restriction names, never to a new one (distributed 2026.8,
        ``Scheduler.bulk_schedule_unrunnable_after_adding_worker``): those shards, the decodes that need
        them, and any lost result that Dask would recompute from them, waited forever. On the virtual clock
        a scheme's batch run again keeps the same received set (docs/pipeline.rst, 'Failures and erasures').
        """
        for state in held:
            self._inflight[state.batch] = state
        old, again = [], 0
        for state in list(self._inflight.values()):
            for s in list(state.schemes.values()):
                if s.result is not None:  # its record is on the driver already
                    continue
                old += [f for f in (*s.shards, *s.backup.values(), s.decode, s.score) if f is not None]
                self._submit_scheme(state, s.plan, restarts=s.restarts + 1)
                again += 1
        if old:
            self._cancel(old)
        if again:
            self.echo(f"every Dask worker was replaced: {again} scheme batch(es) in flight run again on the new "
                      "workers")
            logger.warning("every worker was replaced; %d scheme batches in flight run again", again)

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
        if not self._workers.quiet:
            return {}
        workers = self._workers.refresh()
        return {"workers": list(workers), "allow_other_workers": True} if workers else {}

    def _rerun_quiet(self, fetching: list[_BatchState] | None,
                     ready: list[_BatchState]) -> tuple[list[_BatchState] | None, list[_BatchState]]:
        """Run again, on the other workers, what the batches wait for on a quiet worker (one that missed
        :data:`~.liveness.MISSED_HEARTBEATS` heartbeats while others sent theirs): a scheme's batch whose decode
        runs there, or needs a result that worker runs or holds alone (an exact scheme's shards, a cutoff's
        kept results), or whose record only it holds (new keys, same draws, as when kept shards are lost), and a batch's labels or
        reference (with the scores that wait for it). A quiet worker may be frozen (SIGSTOP, swapping hard):
        without this, those batches waited until it came back or was ended (``cluster.unresponsive_after``).
        Its shards that a cutoff waits for are left to the cutoff, unless the batch cannot reach its cutoff
        without them: then the missing ones run again elsewhere (:meth:`_short_of`).

        `fetching` (the batches whose records are being fetched) and `ready` (finished, not fetched yet) are
        the loop's; returned as they are, or, when a record of the fetch under way waits for a quiet worker,
        with that fetch abandoned: its batches are back in flight (those with a record to make again) or in
        `ready`."""
        quiet = self._workers.quiet
        if not quiet or not (self._inflight or fetching):
            return fetching, ready
        # what waits for which task (:func:`~.quiet.waits_on`); the pure policies pick what runs again
        # (:func:`~.rescue.reruns`, :func:`~.rescue.stuck_shards`)
        waits, shards = waits_on(self._inflight.values())
        records: dict[str, list[tuple]] = {}
        for state in fetching or ():
            for s in state.schemes.values():
                if s.result is None and s.restarts + 1 < MAX_ATTEMPTS:
                    records.setdefault(_final(s).key, []).append(("record", state.batch, s.plan.name, state, s))
        if not waits and not records and not shards:
            return fetching, ready
        try:
            stuck = keys_stuck_on(self.client, [*waits, *records, *shards], quiet)
        except Exception as e:  # the scheduler is busy or going away: look again at the next check
            logger.debug("could not ask which tasks wait for %s: %r", sorted(quiet), e)
            return fetching, ready
        both = {key: waits.get(key, []) + records.get(key, []) for key in {*waits, *records}}
        again = reruns(both, stuck, lambda entry: input_blocked(entry[4], stuck))
        short = self._short_of(shards, stuck, again)
        if not again and not short:
            return fetching, ready
        if any(e[0] == "record" for e in again.values()):  # abandon the fetch: its batches go back
            back = {batch for why, batch, *_ in again.values() if why == "record"}
            for state in fetching:
                if state.batch in back:
                    self._inflight[state.batch] = state
                else:
                    ready.append(state)
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
                old += [f for f in (*s.shards, *s.backup.values(), s.decode, s.score) if f is not None]
                self._submit_scheme(state, s.plan, restarts=s.restarts + 1)
                continue
            # (the old labels or reference are let go, not cancelled: cancelling a task cancels the tasks that
            # depend on it, the finished scores of the batch's other schemes among them)
            state.attempt += 1
            self._submit_reference(state)
            for other in state.schemes.values():  # scores joined with the old reference: join the new one
                if other.score is not None and other.score.status != "finished" and other.result is None:
                    old.append(other.score)
                    other.attempt += 1  # a key of its own: the old one is being cancelled
                    self._submit_score(state, other)
        if short:  # the shards a cutoff cannot do without: the same shards again, elsewhere, at the batch's priority
            update = self._update()
            for state, s, ws in short.values():
                old += [s.shards[w] for w in ws]
                self._map_placed(state, s, ws, update, sfx=f"-q{s.rescues}")
            update.send()
        self._cancel(old)
        what = sorted([f"{b} ({scheme or 'inputs'})" for b, scheme in again]
                      + [f"{b} ({scheme}: {len(ws)} shard{'s' if len(ws) > 1 else ''})"
                         for (b, scheme), (_, _, ws) in short.items()])
        line = quiet_line(quiet, what, self._said_quiet)
        if line:
            self.echo(line)
        elif what:
            logger.info("quiet workers %s: %s run again on the other workers", sorted(quiet), ", ".join(what))
        return fetching, ready

    def _short_of(self, shards: dict, stuck: set[str], again: dict) -> dict:
        """The shards on a quiet worker that a cutoff cannot do without: per (batch, scheme) not run again
        whole (`again`), the state, the scheme's state and as many of its `stuck` shards as the results in
        hand plus the shards awaited elsewhere fall short of :func:`~.cutoff.needed_results` (a batch with
        more than N - needed of its awaited shards there waited for its deadline, or for the worker to be
        ended; a smaller shortfall is the spares' to cover, as before)."""
        found = stuck_shards(shards, stuck, again)  # (:func:`~.rescue.stuck_shards`)
        short = {}
        for name, ((_, _, _, state, s), ws) in found.items():
            rescue = s.machine.short_of(ws, time.monotonic() - s.start_mono)
            if rescue:
                short[name] = (state, s, list(rescue[0].shards))
        return short
