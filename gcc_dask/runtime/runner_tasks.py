"""The batches' tasks, for :class:`~.executor.BatchRunner`: a batch's tasks in one graph update (its shards placed
round-robin over the workers, spares below every batch in flight, a scheme that keeps every result with its
decode), a shard's report turned into its machine's event (:mod:`~.batch_machine`) and the machine's actions into
tasks (backup copies, spares promoted, the cutoff's decode), the batches in flight ordered (:mod:`~.window`: a
batch overtaken by a later one promotes its spares; the oldest waiting takes its turn for backups of late
shards), the decode and the score."""

from __future__ import annotations

import math
import time

import numpy as np
from distributed import KilledWorker

from gcc_dask import dashboard
from gcc_dask.runtime.batch_machine import BackUp, Copy, Cut, Promote
from gcc_dask.runtime.graph import GraphUpdate
from gcc_dask.runtime.keys import (
    BACKUP, PROMOTED, decode_key, inputs_key, load_key, restart_suffix, score_key, shard_key,
)
from gcc_dask.runtime.inflight import (checks_data, decode_meta, inputs_again, late_report, not_kept, overtaken_by,
                                       reread, scheme_futures, settle_copy, waiting_for_turn)
from gcc_dask.runtime.page_events import cutoff_event, submit_event
from gcc_dask.runtime.placement import backup_place, by_place, copy_slot, loose, round_robin, shard_place
from gcc_dask.runtime.plans import INF, SchemePlan, _BatchState, _SchemeState, draw_delays
from gcc_dask.runtime.runner_results import _error_of
from gcc_dask.runtime.tasks import decode_task, evaluate_shard, load_batch, reference_task, score_task
from gcc_dask.runtime.window import priority, turns

__all__ = ["TasksRunner"]


class TasksRunner:
    """Submission, events into the machine and its actions into tasks, of :class:`~.executor.BatchRunner`."""

    def _submit(self, func, *args, key: str, priority: int, **kwargs):
        return self.client.submit(func, *args, key=key, pure=False, retries=0, priority=priority,
                                  **self._resources, **kwargs)

    def _update(self) -> GraphUpdate:
        """An empty graph update for this run's tasks (one scheduler round for all of them)."""
        return GraphUpdate(self.client, self._resources.get("resources"))

    def _placement(self, batch: int, w: int) -> dict:
        """Where the shard at round-robin slot `w` of `batch` runs (:func:`~.placement.shard_place`)."""
        return shard_place(self._workers.refresh(), batch, w)

    def _priority(self, state: _BatchState, what: str) -> int:
        """The priority of a task of the batch (:func:`~.window.priority`)."""
        return priority(state.seq, what, self.max_in_flight)

    def _submit_reference(self, state: _BatchState, update: GraphUpdate | None = None) -> None:
        """(Re)submit the batch's reference task, if the run has one; attempts > 0 get new keys. A run without
        a reference still writes the batch's labels (a task of its own, off the latency path). Added to
        `update` when given, else submitted at once."""
        priority = self._priority(state, "background")
        own = update is None
        update = self._update() if own else update
        given = self._taken_load(state, update, "inputs")  # the batch's read, when its shards have one
        if self.reference:
            def bind(futs):
                state.reference = futs[0]

            update.add(reference_task, [(self.plugin.name, state.batch, True, True, self.output_size, *given)],
                       priority=priority, then=bind, **self._away_from_quiet(),
                       keys=[inputs_key("reference", state.batch, self.token, state.attempt)])
        elif getattr(self.plugin.source, "has_labels", False):
            def bind(futs):
                state.labels = futs[0]
                self._events.watch([(state.labels, ("labels", state.batch, "", -1))])

            update.add(reference_task, [(self.plugin.name, state.batch, True, False, None, *given)],
                       priority=priority, then=bind, keys=[inputs_key("labels", state.batch, self.token, state.attempt)],
                       **self._away_from_quiet())
        if own:
            update.send()

    def _submit_scheme(self, state: _BatchState, plan: SchemePlan, restarts: int = 0,
                       update: GraphUpdate | None = None) -> None:
        """Submit one scheme of a batch: the shards its machine starts with (each encodes its batch on its
        worker), and its decode with them when it keeps every result (:meth:`_submit_direct`).

        ``restarts > 0`` runs the scheme's batch again (its kept shards were lost): new keys, same draws.
        The tasks are added to `update` when given (the caller sends it), else sent at once.
        """
        batch = state.batch
        work = float(self.layout.batch_groups(batch)) if self.latency_per_sample else 1.0
        delays = draw_delays(self.latency_model, self.seed, batch, plan.num_workers, work)
        s = _SchemeState(plan=plan, start_wall=time.time(), start_mono=time.monotonic(), delays=delays,
                         virtual=self.virtual_clock, restarts=restarts, regular=self._regular[plan.name])
        s.sfx = restart_suffix(restarts)
        # one layer per target worker (and priority) of one graph update, not one submit per shard: each
        # update costs the scheduler a round of its own (bench: 3.6 vs 6.3 ms of driver+scheduler CPU per
        # shard, BENCHMARKS.md). Spares rank below the regular shards of every batch in flight (and above the
        # next batches'): a busy cluster runs them only when a thread comes free, or once _maybe_promote
        # submits them again.
        own = update is None
        update = self._update() if own else update
        start, *decode = s.machine.start()
        # a scheme that keeps every result gains nothing from spreading its shards (any loss means a rerun,
        # which Dask does): the scheduler places them as a plain map's tasks, queued until a thread is free
        # and next to their decode (bench: 0.82 vs 0.71 of the plain map's throughput, placed)
        direct = bool(decode)
        away = self._away_from_quiet() if direct else {}
        place_of = (lambda w: away) if direct else (lambda w: self._placement(batch, self._slot(plan, w)))
        s.shards = [None] * plan.num_workers
        for place, is_regular, ws in by_place(start.shards, place_of, start.regular):  # (regular ones first)
            self._map_shards(state, s, ws, place, update, watch=not direct,
                             priority=self._priority(state, "shard" if is_regular else "spare"))
        state.schemes[plan.name] = s
        if direct:
            self._submit_direct(state, s, decode[0], update)
        if own:
            update.send()
            self._cut_early(state, s)
            if state.batch in self._inflight:  # run again: it may be the oldest waiting
                self._give_turn(plan.name)

    @staticmethod
    def _slot(plan: SchemePlan, w: int) -> int:
        """The round-robin slot of shard `w` (:func:`~.placement.copy_slot`)."""
        return copy_slot(plan.num_inputs, w, plan.speculation is not None)

    def _backup_place(self, state: _BatchState, s: _SchemeState, w: int, nth: int) -> dict:
        """Where the `nth` backup copy of the batch, of shard `w`, runs (:func:`~.placement.backup_place`)."""
        return backup_place(self._workers.refresh(), state.batch, w, nth, s.arrivals, s.known, s.failed)

    def _shard_key(self, batch: int, w: int, s: _SchemeState, sfx: str = "") -> str:
        return shard_key(batch, w, s.plan.name, self.token, s.sfx, sfx)

    def _load(self, state: _BatchState, update: GraphUpdate) -> list:
        """The argument that hands a coded shard the batch's one read (:func:`~.tasks.load_batch`): ``[key]`` of a
        read added to `update` now (the batch has none yet, or let its last one go), else ``[future]``. The read
        runs above the batch's shards (:func:`~.window.priority`) on a worker of its own, round-robin over the
        batches (away from quiet workers; loose, as the shards' placement): a task with no worker named would
        wait in the scheduler's queue of root tasks behind every shard sent to the workers already, and the
        shards that take it could not start; the lazy spares of the batches before it would take their threads
        instead. It is held while the batch is in flight, and Dask runs it again if its worker is lost."""
        if state.load is not None and state.load.status not in ("cancelled", "lost"):
            return [state.load]  # (one that erred is given as it is: its shards fail with it, erasures)
        if state.load_key is not None and update.has(state.load_key):
            return [state.load_key]
        key = state.load_key = load_key(state.batch, self.token, state.loads)
        state.loads += 1
        state.load_by = set()

        def bind(futs):
            state.load, state.load_key = futs[0], None

        workers = self._workers.refresh()
        place = loose([round_robin(workers, state.batch, 0)]) if workers else {}
        update.add(load_batch, [(self.plugin.name, state.batch)], keys=[key], then=bind,
                   priority=self._priority(state, "load"), **place)
        return [key]

    def _taken_load(self, state: _BatchState, update: GraphUpdate, by: str) -> list:
        """``[ref]`` (an argument list of one) of the batch's read for a task of `by` (a scheme, or ``"inputs"``),
        when the batch's shards have one in use or in `update` (:meth:`_load`); ``[]`` when they have none: the
        task reads the batch itself. A read that died with its worker is not taken again: the schemes that took it
        run again first (:meth:`_read_lost`, as a failed shard of theirs would make them), and the task takes their
        new read (a reference or labels lost with that read may be submitted again before any shard reports)."""
        self._read_lost(state)
        if (state.load is None or state.load.status in ("cancelled", "lost")) \
                and not (state.load_key is not None and update.has(state.load_key)):
            return []
        state.load_by.add(by)
        return [self._load(state, update)]

    def _map_shards(self, state: _BatchState, s: _SchemeState, ws: list[int], place: dict, update: GraphUpdate,
                    priority: int, sfx: str = "", watch: bool = True, backup: bool = False) -> None:
        """Add shards ``ws`` of a scheme's batch, at one placement, to `update` (and watch them once sent);
        with `backup`, as the backup copies of those shards (``s.backup``), the originals left running. On a
        cluster of several workers, from a source whose reads decode (a chunked one, ``source.chunks``, or a dask
        array, ``source.remote``), a coded shard (one that reads the whole batch: no input of its own,
        ``code.selected_input``) takes the batch's one read (:meth:`_load`). A selection scheme's shard reads its
        own samples, and so does every shard of a source held in memory (a gather, cheaper than a transfer) or
        on a single worker (which reads a batch once anyway, and whose shards then depend on no task: the
        scheduler's queue keeps the lazy spares behind every batch's shards)."""
        name, batch, plan = self.plugin.name, state.batch, s.plan
        code = self.plugin.codes[plan.name]
        # (one worker reads each batch once anyway, through its plugin's cache; a source held in memory is read
        # by a gather, cheaper than a transfer: no read task to wait for)
        source = self.plugin.source
        costly = getattr(source, "chunks", None) is not None or getattr(source, "remote", False)
        coded = [w for w in ws if code.selected_input(w) is None] \
            if costly and len(self._workers.refresh()) > 1 else []
        given = self._load(state, update) if coded else None
        if coded:
            state.load_by.add(plan.name)

        def bind(futs):
            for w, fut in zip(ws, futs):
                if backup:
                    s.backup[w] = fut
                else:
                    s.shards[w] = fut
            if watch:
                self._events.watch([(fut, ("shard", batch, plan.name, w)) for w, fut in zip(ws, futs)])

        update.add(evaluate_shard,
                   [(name, plan.name, batch, w, 0.0 if s.delays is None else float(s.delays[w]),
                     *([given] if w in coded else [])) for w in ws],
                   keys=[self._shard_key(batch, w, s, sfx) for w in ws], priority=priority, then=bind, **place)

    def _submit_direct(self, state: _BatchState, s: _SchemeState, decode, update: GraphUpdate) -> None:
        """A scheme whose cutoff keeps every result (``uncoded``; the machine's :class:`~.batch_machine.Decode`):
        submit its decode now, over all N shards, and watch only the decode. No shard event reaches the driver
        (bench: a tenth of its CPU for uncoded); the decode times the shards itself (``latency_s`` from each
        result's end, on the wall clock). If any shard fails, the decode fails with it and :meth:`_on_decode`
        goes back to watching the shards, so the cutoff decides as for any other scheme."""
        latency = s.delays.copy() if s.virtual else None  # (on the wall clock the decode measures them)
        s.meta = decode_meta(s, decode.status, decode.cutoff_s, latency, np.zeros(s.plan.num_workers, dtype=bool),
                             self.output_size, self.reference, keep=self.keep_decoded)
        self._submit_decode(state, s, update)

    def _map_placed(self, state: _BatchState, s: _SchemeState, ws: list[int], update: GraphUpdate, sfx: str = "",
                    slots: bool = False) -> None:
        """Add shards ``ws`` (again), each at its :meth:`_placement` (at its :meth:`_slot` with `slots`), at the
        batch's priority, under keys ending in `sfx` (:meth:`_map_shards`, one call per placement)."""
        slot = (lambda w: self._slot(s.plan, w)) if slots else (lambda w: w)
        for place, _, group in by_place(ws, lambda w: self._placement(state.batch, slot(w))):
            self._map_shards(state, s, group, place, update, priority=self._priority(state, "shard"), sfx=sfx)

    def _submit_batch(self, batch: int, schemes: list[str]) -> None:
        """Submit one batch (its tasks in one graph update)."""
        self._submit_batches([(batch, schemes)])

    def _submit_batches(self, work: list[tuple[int, list[str]]]) -> None:
        """Submit batches ``(batch, schemes)``, every task of all of them in one graph update."""
        update = self._update()
        states = []
        for batch, schemes in work:
            start, stop = self.layout.batch_slots(batch)
            state = _BatchState(batch=batch, n_real=stop - start, reference=None, schemes={}, seq=self._submitted)
            self._submitted += 1
            for plan in self.plans:
                if plan.name in schemes:
                    self._submit_scheme(state, plan, update=update)
            self._submit_reference(state, update)  # (after the shards: it takes their read of the batch, if any)
            states.append(state)
        update.send()
        dashboard.publish(self.client, submit_event(self.token, work))
        for state in states:
            for s in state.schemes.values():
                self._cut_early(state, s)
            self._inflight[state.batch] = state
        for plan in self.plans:
            self._give_turn(plan.name)

    def _submit_decode(self, state: _BatchState, s: _SchemeState, update: GraphUpdate | None = None) -> None:
        """Submit the decode of the kept shards (again, under a new key, when the last one died). With
        `update` (the shards are in it too), the decode is added to it; else submitted at once."""
        plan = s.plan
        key = decode_key(state.batch, plan.name, self.token, s.restarts, s.attempt, direct=s.direct)

        def bind(futs):
            s.decode = futs[0]
            self._events.watch([(s.decode, ("decode", state.batch, plan.name, -1))])

        away, rank = self._away_from_quiet(), self._priority(state, "decode")
        if update is None:
            bind([self._submit(decode_task, self.plugin.name, plan.name, state.batch, state.n_real, s.received,
                               [s.shards[w] for w in s.received], s.meta, key=key, priority=rank, **away)])
            return
        update.add(decode_task, [(self.plugin.name, plan.name, state.batch, state.n_real, s.received,
                                  [self._shard_key(state.batch, w, s) for w in s.received], s.meta)],
                   keys=[key], priority=rank, then=bind, **away)

    def _submit_score(self, state: _BatchState, s: _SchemeState) -> None:
        """Join the scheme's decoded batch with the batch's reference (a reference lost with its worker is
        submitted again first)."""
        reference = state.reference
        if reference.status == "error" and inputs_again(isinstance(_error_of(reference), KilledWorker), state.attempt):
            state.attempt += 1
            self._submit_reference(state)
            reference = state.reference
        s.score = self.client.submit(
            score_task, s.decode, reference,
            key=score_key(state.batch, s.plan.name, self.token, s.restarts, s.attempt), pure=False, retries=0,
            priority=self._priority(state, "background"),
        )
        self._events.watch([(s.score, ("score", state.batch, s.plan.name, -1))])

    def _give_turn(self, name: str, older_than: int | None = None) -> None:
        """Give the batches of scheme `name` whose turn for backups of their late shards comes now
        (:func:`~.window.turns`) that turn, from now on (:meth:`~.batch_machine.BatchMachine.take_turn`; the loop
        looks at their cutoff again at once)."""
        waiting = waiting_for_turn(self._inflight.values(), name)
        for seq in turns(waiting, older_than):
            o = waiting[seq]
            if o.machine.take_turn(time.monotonic() - o.start_mono):
                o.wake = None

    def _cut_early(self, state: _BatchState, s: _SchemeState) -> None:
        """On the virtual clock the cutoff may be final before any shard reports (every injected latency
        beyond the deadline): decide once the shards are submitted, not on the first arrival."""
        if s.virtual:
            s.wake = self._maybe_cut(state, s)

    def _maybe_promote(self, state: _BatchState, s: _SchemeState) -> None:
        """Run spares at the batch's own priority when a regular shard failed, or when a batch submitted
        later has reached its cutoff first (:meth:`~.batch_machine.BatchMachine.promote`)."""
        overtaken = self._window.overtaken(s.plan.name, state.seq)
        self._act(state, s, s.machine.promote(overtaken, time.monotonic() - s.start_mono))

    def _on_shard(self, t: float, batch: int, scheme: str, w: int, fut, status: str) -> None:
        state = self._inflight.get(batch)
        if state is None:
            return
        s = state.schemes[scheme]
        if late_report(s, w, fut):
            return  # (decided already, or from a resubmitted scheme's first attempt)
        if status != "finished" and scheme in self._read_lost(state):
            return  # (it runs again; a scheme that took no read keeps its erasure, below)
        if w in s.backup:  # a late shard with a backup copy: which of the two stands for it
            outcome, other = settle_copy(s, w, fut, status)
            if outcome == "wait":
                return
            if outcome == "won":
                self._cancel([other])
        if status == "finished":
            s.machine.arrive(w, t - s.start_mono)
        else:  # erred, or lost with its worker: an erasure, never retried
            s.machine.erase(w)
        s.wake = self._maybe_cut(state, s)
        if s.failed[w]:
            self._maybe_promote(state, s)

    def _read_lost(self, state: _BatchState) -> set[str]:
        """When the batch's read (:meth:`_load`) died with its worker (a ``KilledWorker``: the embedded cluster
        runs no task twice), every shard that took it fails with it, whatever its own worker: each scheme that
        took it and is not cut yet runs again instead, with a read elsewhere (new keys, the same draws; at most
        :data:`~.plans.MAX_ATTEMPTS` runs of a scheme's batch, as when its kept shards are lost). The names of the
        schemes that run again (a failed shard of one of them is a late report); a shard of any other scheme is an
        erasure as usual, whether or not the read died (bad data among them: the read's error is the batch's own,
        :func:`~.tasks.is_bad_batch`, and stops the run)."""
        load = state.load
        if load is None or load.status != "error" or not isinstance(_error_of(load), KilledWorker):
            return set()
        state.load = None
        schemes, old = reread(state), []  # (:func:`~.inflight.reread`)
        for s in schemes:
            old += scheme_futures(s)
            self._submit_scheme(state, s.plan, restarts=s.restarts + 1)
        self._cancel(old)
        return {s.plan.name for s in schemes}

    def _maybe_cut(self, state: _BatchState, s: _SchemeState) -> float:
        """Act on the machine's :meth:`~.batch_machine.BatchMachine.tick` (backups due, the cutoff once final);
        return the wall time (monotonic) to look again, or inf."""
        actions, wake = s.machine.tick(time.monotonic() - s.start_mono)
        self._act(state, s, actions)
        return s.start_mono + wake if math.isfinite(wake) else INF

    def _act(self, state: _BatchState, s: _SchemeState, actions: list) -> None:
        """Turn the machine's actions into tasks: backup copies, spares promoted, the cutoff's decode."""
        for a in actions:
            if isinstance(a, Copy):  # a speculative plan's next copies, each at its round-robin slot
                update = self._update()
                self._map_placed(state, s, list(a.shards), update, slots=True)
                update.send()
            elif isinstance(a, BackUp):  # a copy of each late shard, on a worker that sent a result of the batch
                update = self._update()
                for i, w in enumerate(a.shards):
                    self._map_shards(state, s, [w], self._backup_place(state, s, w, a.first + i), update,
                                     priority=self._priority(state, "shard"), sfx=BACKUP, backup=True)
                update.send()
            elif isinstance(a, Promote):  # again under new keys; the low-priority copies cancelled
                picked = list(a.shards)
                self._cancel([s.shards[w] for w in picked])
                update = self._update()
                self._map_placed(state, s, picked, update, sfx=PROMOTED)
                update.send()
            elif isinstance(a, Cut):
                self._decode(state, s, a)

    def _decode(self, state: _BatchState, s: _SchemeState, cut: Cut) -> None:
        """The machine's :class:`~.batch_machine.Cut`: cancel the shards not kept, submit the decode of the kept
        ones."""
        plan = s.plan
        received = s.received
        if checks_data(s, getattr(self.plugin, "codes", {}).get(plan.name)):
            self._raise_if_bad_data(state, s, every=bool(received))
        if received and s.failed.any():
            self._tell_raised(state, s)  # f raised on a shard: said once per scheme
        if drop := not_kept(s):
            self._cancel(drop)
        dashboard.publish(self.client, cutoff_event(self.token, state.batch, plan.name, received, cut.cutoff_s,
                                                    cut.status))
        self._overtake(plan.name, state.seq)
        s.meta = decode_meta(s, cut.status, cut.cutoff_s, s.machine.latency(), s.failed.copy(), self.output_size,
                             self.reference, backups=s.backups, keep=self.keep_decoded)
        self._submit_decode(state, s)
        self._give_turn(plan.name)

    def _overtake(self, scheme: str, seq: int) -> None:
        """The batch submitted ``seq``-th reached its cutoff for ``scheme``: the batches submitted before it
        that still wait for regular results of that scheme are overtaken (:class:`~.window.Window`), and run
        spares for them (:meth:`_maybe_promote`)."""
        if not self._window.cut(scheme, seq):
            return
        for older, s in overtaken_by(self._inflight.values(), scheme, seq):
            self._maybe_promote(older, s)
        self._give_turn(scheme, older_than=seq)
