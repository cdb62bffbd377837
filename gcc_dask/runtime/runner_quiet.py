"""Quiet workers (docs/pipeline.rst, section 'Unresponsive workers'): what the batches in flight wait for on a worker
that missed its heartbeats runs again on the others (:meth:`QuietRunner._rerun_quiet`), and the shards a cutoff
cannot do without run again elsewhere (:meth:`~.batch_machine.BatchMachine.short_of`). A mixin of
:class:`~.executor.BatchRunner`."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gcc_dask.runtime.liveness import keys_stuck_on
from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState, _SchemeState
from gcc_dask.runtime.rescue import blocked, quiet_line, reruns, stuck_shards
from gcc_dask.runtime.runner_records import _final

logger = logging.getLogger("gcc_dask.runtime.executor")

__all__ = ["QuietRunner", "quiet_line"]  # (quiet_line: :func:`~.rescue.quiet_line`)


class QuietRunner:
    """The quiet-worker reruns of :class:`~.executor.BatchRunner`."""

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
        # what waits for which task, as (why, batch, scheme, state, scheme state) (scheme "": the batch's inputs);
        # the pure policies pick what runs again (:func:`~.rescue.reruns`, :func:`~.rescue.stuck_shards`)
        waits: dict[str, list[tuple]] = {}
        shards: dict[str, tuple] = {}  # key -> (batch, scheme, w, state, scheme state): a shard a cutoff waits for

        def wait(fut, why, state, s=None):  # (a finished task counts while its result is held there alone)
            if fut is not None:
                waits.setdefault(fut.key, []).append((why, state.batch, "" if s is None else s.plan.name, state, s))

        for state in self._inflight.values():
            for s in state.schemes.values():
                if s.result is None and not s.done and s.decode is not None and s.received is not None \
                        and s.restarts + 1 < MAX_ATTEMPTS:
                    for fut in (s.decode, s.score, *(s.shards[w] for w in s.received)):
                        wait(fut, "scheme", state, s)
                if s.plan.speculation is not None and s.received is None and not s.done \
                        and s.restarts + 1 < MAX_ATTEMPTS:  # its copies running there (see below)
                    for w in np.flatnonzero(s.launched & ~s.known).tolist():
                        wait(s.shards[w], "copy", state, s)
                if s.plan.speculation is None and s.received is None and s.decode is None and not s.done \
                        and not s.direct:  # the shards a cutoff waits for (run again only if it needs them)
                    for w in np.flatnonzero(self._awaited(s)).tolist():
                        if s.shards[w] is not None and w not in s.backup:
                            shards[s.shards[w].key] = (state.batch, s.plan.name, w, state, s)
            if state.attempt + 1 < MAX_ATTEMPTS:
                if state.labels is not None and state.labels.status != "finished":  # (written once finished)
                    wait(state.labels, "inputs", state)
                wait(state.reference, "inputs", state)  # (the scores join its result)
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
        again = reruns(both, stuck, lambda entry: self._blocked(entry[4], stuck))
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

    @staticmethod
    def _awaited(s: _SchemeState) -> np.ndarray:
        """The shards a cutoff scheme's batch waits for (:meth:`~.batch_machine.BatchMachine.awaited`), bool (N,)."""
        return s.machine.awaited()

    @staticmethod
    def _blocked(s: _SchemeState, stuck: set[str]) -> bool:
        """Whether an input of a speculative scheme's batch can get no copy: :func:`~.rescue.blocked` on the keys
        `stuck` on a quiet worker (a shard not submitted counts as not launched)."""
        launched = np.array([bool(s.launched[w]) and s.shards[w] is not None for w in range(s.plan.num_workers)])
        held = np.array([s.shards[w] is not None and s.shards[w].key in stuck for w in range(s.plan.num_workers)])
        return blocked(s.plan.num_inputs, s.known, s.failed, launched, held)
