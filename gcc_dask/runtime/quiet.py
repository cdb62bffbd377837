"""What the batches in flight wait for, task by task: the bookkeeping behind a quiet worker's rescue.

:class:`~.runner_cluster.ClusterRunner` asks the scheduler which of these tasks are stuck on a quiet worker (one
that missed its heartbeats, docs/pipeline.rst, section 'Unresponsive workers'), and the pure policies of
:mod:`~.rescue` pick what runs again elsewhere; these functions only read the driver's state of the batches
(:class:`~.plans._BatchState`, :class:`~.plans._SchemeState`), and change nothing.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState, _SchemeState
from gcc_dask.runtime.rescue import blocked

__all__ = ["awaited_shards", "input_blocked", "waits_on"]


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
