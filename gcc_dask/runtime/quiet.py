"""What the batches in flight wait for, task by task: the bookkeeping behind a quiet worker's rescue (pure).

:class:`~.runner_cluster.ClusterRunner` asks the scheduler which of these tasks (:func:`waits_on`,
:func:`records_waiting`) are stuck on a quiet worker (one that missed its heartbeats, docs/pipeline.rst, section
'Unresponsive workers'); :func:`rescue_plan` then picks, with the pure policies of :mod:`~.rescue` and each
batch's machine, what runs again elsewhere, and the shell carries it out. These functions only read the driver's
state of the batches (:class:`~.plans._BatchState`, :class:`~.plans._SchemeState`) and the futures' keys and
statuses; they change nothing but what the machines record of a rescue (:meth:`~.batch_machine.BatchMachine.short_of`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from gcc_dask.runtime.inflight import final
from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState, _SchemeState
from gcc_dask.runtime.rescue import blocked, reruns, stuck_shards

__all__ = ["awaited_shards", "input_blocked", "records_waiting", "refetched", "rescue_plan", "scores_to_rejoin",
           "short_of", "waits_on"]


def waits_on(inflight: Iterable[_BatchState]) -> tuple[dict[str, list[tuple]], dict[str, tuple]]:
    """The tasks the batches `inflight` wait for, by key.

    Returns
    -------
    waits : dict of str to list of tuple
        Per key, who waits for that task, as ``(why, batch, scheme, batch state, scheme state)``: ``"scheme"``, a
        cut scheme's decode, score or kept shards (a finished task counts while its result is held on its worker
        alone), or the batch's one read (:func:`~.tasks.load_batch`) that a scheme not cut yet takes; ``"copy"``, a speculative scheme's copies still running; ``"inputs"`` (scheme ``""``, scheme state
        None), the batch's reference or unfinished labels, or the read they take. Only what may still run again (fewer than
        :data:`~.plans.MAX_ATTEMPTS` runs so far).
    shards : dict of str to tuple
        Per key, a shard a cutoff waits for, without a backup copy, as ``(batch, scheme, shard, batch state,
        scheme state)``: run again only if the cutoff cannot do without it (:func:`~.rescue.stuck_shards`).
    """
    waits: dict[str, list[tuple]] = {}
    shards: dict[str, tuple] = {}

    def wait(fut, why, state, s=None):
        if fut is not None:
            waits.setdefault(fut.key, []).append((why, state.batch, "" if s is None else s.plan.name, state, s))

    for state in inflight:
        for s in state.schemes.values():
            if s.result is None and not s.done and s.decode is not None and s.received is not None \
                    and s.restarts + 1 < MAX_ATTEMPTS:
                for fut in (s.decode, s.score, *(s.shards[w] for w in s.received)):
                    wait(fut, "scheme", state, s)
            if s.plan.speculation is not None and s.received is None and not s.done \
                    and s.restarts + 1 < MAX_ATTEMPTS:  # its copies running there
                for w in np.flatnonzero(s.launched & ~s.known).tolist():
                    wait(s.shards[w], "copy", state, s)
            if s.plan.speculation is None and s.received is None and s.decode is None and not s.done \
                    and not s.direct:  # the shards a cutoff waits for (run again only if it needs them)
                for w in np.flatnonzero(awaited_shards(s)).tolist():
                    if s.shards[w] is not None and w not in s.backup:
                        shards[s.shards[w].key] = (state.batch, s.plan.name, w, state, s)
        if state.attempt + 1 < MAX_ATTEMPTS:
            if state.labels is not None and state.labels.status != "finished":  # (written once finished)
                wait(state.labels, "inputs", state)
            wait(state.reference, "inputs", state)  # (the scores join its result)
        if state.load is not None:  # the batch's one read: what still takes it runs again, with a read elsewhere
            for s in state.schemes.values():
                if s.plan.name in state.load_by and s.decode is None and not s.done \
                        and s.restarts + 1 < MAX_ATTEMPTS:
                    wait(state.load, "scheme", state, s)
            unfinished = [t for t in (state.reference, state.labels) if t is not None and t.status != "finished"]
            if "inputs" in state.load_by and unfinished and state.attempt + 1 < MAX_ATTEMPTS:
                wait(state.load, "inputs", state)
    return waits, shards


def awaited_shards(s: _SchemeState) -> np.ndarray:
    """The shards a cutoff scheme's batch waits for (:meth:`~.batch_machine.BatchMachine.awaited`), bool (N,)."""
    return s.machine.awaited()


def input_blocked(s: _SchemeState, stuck: set[str]) -> bool:
    """Whether an input of a speculative scheme's batch `s` can get no copy: :func:`~.rescue.blocked` on the keys
    `stuck` on a quiet worker (a shard not submitted counts as not launched)."""
    n = s.plan.num_workers
    launched = np.array([bool(s.launched[w]) and s.shards[w] is not None for w in range(n)])
    held = np.array([s.shards[w] is not None and s.shards[w].key in stuck for w in range(n)])
    return blocked(s.plan.num_inputs, s.known, s.failed, launched, held)


def records_waiting(fetching: Iterable[_BatchState]) -> dict[str, list[tuple]]:
    """The records that the fetch under way waits for, by the key of the task that holds each
    (:func:`~.inflight.final`), as ``("record", batch, scheme, batch state, scheme state)``: only those that may
    still be made again (fewer than :data:`~.plans.MAX_ATTEMPTS` runs of the scheme's batch so far)."""
    records: dict[str, list[tuple]] = {}
    for state in fetching:
        for s in state.schemes.values():
            if s.result is None and s.restarts + 1 < MAX_ATTEMPTS:
                records.setdefault(final(s).key, []).append(("record", state.batch, s.plan.name, state, s))
    return records


def short_of(shards: dict[str, tuple], stuck: set[str], again: dict, now: float) -> dict:
    """The shards on a quiet worker that a cutoff cannot do without: per ``(batch, scheme)`` not run again whole
    (`again`), ``(batch state, scheme state, shards)``, as many of its `stuck` shards (:func:`~.rescue.stuck_shards`)
    as the results in hand plus the shards awaited elsewhere fall short of :func:`~.cutoff.needed_results` (the
    machine's :meth:`~.batch_machine.BatchMachine.short_of`, at `now` on the monotonic clock; a batch with more
    than N - needed of its awaited shards there waited for its deadline, or for the worker to be ended; a smaller
    shortfall is the spares' to cover)."""
    short = {}
    for name, ((_, _, _, state, s), ws) in stuck_shards(shards, stuck, again).items():
        rescue = s.machine.short_of(ws, now - s.start_mono)
        if rescue:
            short[name] = (state, s, list(rescue[0].shards))
    return short


def rescue_plan(waits: dict[str, list[tuple]], records: dict[str, list[tuple]], shards: dict[str, tuple],
                stuck: set[str], now: float) -> tuple[dict, dict]:
    """What runs again because of the tasks `stuck` on a quiet worker, of those the batches in flight wait for
    (`waits` and `shards`, :func:`waits_on`) and the fetch under way (`records`, :func:`records_waiting`):

    - ``again``, per ``(batch, scheme)`` run again whole, the entry that calls for it (:func:`~.rescue.reruns`; a
      speculative scheme's copies only when an input of it is :func:`input_blocked`);
    - ``short``, per ``(batch, scheme)`` with shards rescued, ``(batch state, scheme state, shards)``
      (:func:`short_of`, at `now` on the monotonic clock).
    """
    both = {key: waits.get(key, []) + records.get(key, []) for key in {*waits, *records}}
    again = reruns(both, stuck, lambda entry: input_blocked(entry[4], stuck))
    return again, short_of(shards, stuck, again, now)


def refetched(again: dict) -> set[int]:
    """The batches whose record is made again (a ``"record"`` entry of :func:`rescue_plan`'s ``again``): the fetch
    under way is given up (:func:`~.inflight.split_fetch`)."""
    return {batch for why, batch, *_ in again.values() if why == "record"}


def scores_to_rejoin(state: _BatchState) -> list[_SchemeState]:
    """The schemes of a batch whose score, not finished, joins the batch's old reference (submitted again): each is
    joined with the new one, under a key of its own."""
    return [s for s in state.schemes.values() if s.score is not None and s.score.status != "finished"
            and s.result is None]
