"""The driver's side of the batch machine (:mod:`~.batch_machine`): a shard's report becomes the machine's event,
the machine's actions become tasks (backup copies, spares promoted, the cutoff's decode), and the batches in
flight are ordered (a batch overtaken by a later one promotes its spares; the oldest waiting takes its turn
for backups of late shards). A mixin of :class:`~.executor.BatchRunner`."""

from __future__ import annotations

import math
import time

from gcc_dask import dashboard
from gcc_dask.runtime.batch_machine import BackUp, Copy, Cut, Promote
from gcc_dask.runtime.plans import INF, _BatchState, _SchemeState

__all__ = ["MachineRunner"]


class MachineRunner:
    """Events into the machine and its actions into tasks, for :class:`~.executor.BatchRunner`."""

    def _give_turn(self, name: str, older_than: int | None = None) -> None:
        """Give the oldest batch of scheme `name` still waiting (with `older_than`: every waiting batch submitted
        before that seq, which a later one has overtaken) its turn for backups of its late shards, from now on
        (:meth:`~.batch_machine.BatchMachine.take_turn`; the loop looks at its cutoff again at once). Only a
        batch whose turn has come launches backups, and its shards count as launched no earlier than that: the
        shards of the batches behind the oldest may wait for a thread, behind its own, so their time since the
        batch's start is no sign of a slow worker (on 2 cores with 16 batches in flight it made many of them
        late)."""
        waiting = [(other.seq, o) for other in self._inflight.values() if (o := other.schemes.get(name)) is not None
                   and o.machine.wants_turn]
        if older_than is None:
            waiting = [min(waiting, key=lambda x: x[0])] if waiting else []
        for seq, o in waiting:
            if (older_than is None or seq < older_than) and o.machine.take_turn(time.monotonic() - o.start_mono):
                o.wake = None

    def _cut_early(self, state: _BatchState, s: _SchemeState) -> None:
        """On the virtual clock the cutoff may be final before any shard reports (every injected latency
        beyond the deadline): decide once the shards are submitted, not on the first arrival."""
        if s.virtual:
            s.wake = self._maybe_cut(state, s)

    def _maybe_promote(self, state: _BatchState, s: _SchemeState) -> None:
        """Run spares at the batch's own priority when a regular shard failed, or when a batch submitted
        later has reached its cutoff first (:meth:`~.batch_machine.BatchMachine.promote`)."""
        overtaken = self._decided.get(s.plan.name, -1) > state.seq
        self._act(state, s, s.machine.promote(overtaken, time.monotonic() - s.start_mono))

    def _on_shard(self, t: float, batch: int, scheme: str, w: int, fut, status: str) -> None:
        state = self._inflight.get(batch)
        if state is None:
            return
        s = state.schemes[scheme]
        copy = s.backup.get(w)
        if (fut is not s.shards[w] and fut is not copy) or s.decode is not None or s.done or s.known[w]:
            return  # a late report (decided already, or from a resubmitted scheme's first attempt)
        if copy is not None:  # a late shard with a backup copy: the first result wins, a failure waits for the other
            other = copy if fut is s.shards[w] else s.shards[w]
            del s.backup[w]
            s.shards[w] = other if status != "finished" else fut
            if status != "finished" and other.status in ("pending", "finished"):
                return  # (the other's own report may still be on its way: it decides)
            if status == "finished":
                self._cancel([other])
        if status == "finished":
            s.machine.arrive(w, t - s.start_mono)
        else:  # erred, or lost with its worker: an erasure, never retried
            s.machine.erase(w)
        s.wake = self._maybe_cut(state, s)
        if s.failed[w]:
            self._maybe_promote(state, s)

    def _maybe_cut(self, state: _BatchState, s: _SchemeState) -> float:
        """Act on the machine's :meth:`~.batch_machine.BatchMachine.tick` (backups due, the cutoff once final);
        return the wall time (monotonic) to look again, or inf."""
        actions, wake = s.machine.tick(time.monotonic() - s.start_mono)
        self._act(state, s, actions)
        return s.start_mono + wake if math.isfinite(wake) else INF

    def _act(self, state: _BatchState, s: _SchemeState, actions: list) -> None:
        """Turn the machine's actions into tasks: backup copies, spares promoted, the cutoff's decode."""
        plan = s.plan
        for a in actions:
            if isinstance(a, Copy):  # a speculative plan's next copies, each at its round-robin slot
                groups: dict[str, tuple[dict, list[int]]] = {}
                for w in a.shards:
                    place = self._placement(state.batch, self._slot(plan, w))
                    groups.setdefault(repr(place), (place, []))[1].append(w)
                update = self._update()
                for place, batch_ws in groups.values():
                    self._map_shards(state, s, batch_ws, place, update, priority=-state.seq)
                update.send()
            elif isinstance(a, BackUp):  # a copy of each late shard, on a worker that sent a result of the batch
                update = self._update()
                for i, w in enumerate(a.shards):
                    self._map_shards(state, s, [w], self._backup_place(state, s, w, a.first + i), update,
                                     priority=-state.seq, sfx="-b", backup=True)
                update.send()
            elif isinstance(a, Promote):  # again under new keys; the low-priority copies cancelled
                picked = list(a.shards)
                self._cancel([s.shards[w] for w in picked])
                update = self._update()
                self._map_placed(state, s, picked, update, sfx="-p")
                update.send()
            elif isinstance(a, Cut):
                self._decode(state, s, a)

    def _decode(self, state: _BatchState, s: _SchemeState, cut: Cut) -> None:
        """The machine's :class:`~.batch_machine.Cut`: cancel the shards not kept, submit the decode of the kept
        ones."""
        plan = s.plan
        received = s.received
        if s.failed.any() and (not received or self._selects(plan.name)):
            self._raise_if_bad_data(state, s, every=bool(received))
        keep = set(received)
        drop = [f for w, f in enumerate(s.shards) if w not in keep and f is not None] + list(s.backup.values())
        s.backup.clear()
        if drop:
            self._cancel(drop)
        dashboard.publish(self.client, {"kind": "cutoff", "run": self.token, "batch": state.batch, "scheme": plan.name,
                                        "kept": received, "cutoff_s": cut.cutoff_s, "status": cut.status})
        self._overtake(plan.name, state.seq)
        s.meta = {
            "status": cut.status,
            "cutoff_s": cut.cutoff_s,
            "latency_s": s.machine.latency(),
            "failed": s.failed.copy(),
            "batch_start": s.start_wall,
            "output_size": self.output_size,
            "score": self.reference,
            "backups": s.backups,
        }
        self._submit_decode(state, s)
        self._give_turn(plan.name)

    def _overtake(self, scheme: str, seq: int) -> None:
        """The batch submitted ``seq``-th reached its cutoff for ``scheme``: the batches submitted before it
        that still wait for regular results of that scheme are overtaken, and run spares for them
        (:meth:`_maybe_promote`)."""
        if seq <= self._decided.get(scheme, -1):
            return
        self._decided[scheme] = seq
        for older in self._inflight.values():
            s = older.schemes.get(scheme)
            if older.seq < seq and s is not None:
                self._maybe_promote(older, s)
        self._give_turn(scheme, older_than=seq)
