"""The batches in flight, as the Dask shell keeps them (pure): which of their tasks, schemes and records a step of
the driver loop (:class:`~.executor.BatchRunner`) acts on.

Each function reads, and a few update, the driver's plain state of the batches (:class:`~.plans._BatchState` per
batch, :class:`~.plans._SchemeState` per scheme); the futures in it are only compared, and their ``key`` and
``status`` read, never waited for. The shell does the Dask calls: it submits, cancels and fetches what these
functions pick. The straggler decisions are the batch machine's (:mod:`~.batch_machine`) and the window's
(:mod:`~.window`); what is left here is bookkeeping:

- the loop: which batches it takes (:func:`take`), which schemes' cutoffs it looks at on the wall clock
  (:func:`wall_clock_cutoffs`) and how long it then waits (:func:`loop_timeout`);
- a report: whether a shard's comes too late to count (:func:`late_report`), which of a shard and its backup
  copy it settles (:func:`settle_copy`), whose decode, score or labels it is, if it still counts
  (:func:`task_report`);
- the cutoff: the tasks it cancels (:func:`not_kept`), what the decode is told (:func:`decode_meta`), the
  batches overtaken (:func:`overtaken_by`) and those waiting for their turn for backups
  (:func:`waiting_for_turn`);
- failures: whether a cut is checked for bad data (:func:`checks_data`, :func:`selects`), the kept shards lost
  with a worker (:func:`lost_kept`), whether a batch's inputs run again (:func:`inputs_again`);
- records and the end: the task whose result is a scheme's record (:func:`final`), the schemes without a
  record yet (:func:`unrecorded`), a fetch given up (:func:`split_fetch`), the records kept when the run stops
  (:func:`finished`, :func:`hand_over`), and every task of a scheme or of the run left to cancel
  (:func:`scheme_futures`, :func:`leftovers`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from gcc_dask.runtime.late_shards import first_copy
from gcc_dask.runtime.plans import MAX_ATTEMPTS, _BatchState, _SchemeState

__all__ = ["checks_data", "decode_meta", "final", "finished", "hand_over", "inputs_again", "late_report",
           "leftovers", "loop_timeout", "lost_kept", "not_kept", "overtaken_by", "reread", "scheme_futures", "selects",
           "settle_copy", "split_fetch", "take", "task_report", "unrecorded", "waiting_for_turn", "wall_clock_cutoffs"]

#: the Dask statuses of a kept shard whose result is gone (its worker died, or it was cancelled)
LOST = ("error", "lost", "cancelled")


# -- the loop ---------------------------------------------------------------------------------------------------
def take(todo: Iterator, n: int) -> tuple[list, bool]:
    """Up to `n` items of `todo`, and whether `todo` is exhausted (it ran out before `n`).

    >>> it = iter(range(5))
    >>> take(it, 3), take(it, 3), take(it, 3)
    (([0, 1, 2], False), ([3, 4], True), ([], True))
    """
    items: list = []
    while len(items) < n:
        try:
            items.append(next(todo))
        except StopIteration:
            return items, True
    return items, False


def wall_clock_cutoffs(inflight: Iterable[_BatchState]) -> Iterator[tuple[_BatchState, _SchemeState]]:
    """The schemes whose cutoff the loop looks at on the wall clock: not on the virtual clock (those decide when
    their shards are submitted and as results arrive), not cut, not done. Lazy: each is checked when reached, after
    the loop acted on the ones before (an action may cut another scheme)."""
    for state in list(inflight):
        for s in state.schemes.values():
            if not s.virtual and s.decode is None and not s.done:
                yield state, s


def loop_timeout(wake: float, now: float, max_wait: float) -> float:
    """How long the loop waits for the next report: until the earliest `wake` (a machine's next look at its
    cutoff; ``inf``: none), at most `max_wait`, never negative.

    >>> loop_timeout(math.inf, 5.0, 0.5), loop_timeout(5.25, 5.0, 0.5), loop_timeout(4.0, 5.0, 0.5)
    (0.5, 0.25, 0.0)
    """
    return max_wait if not math.isfinite(wake) else min(max_wait, max(0.0, wake - now))


# -- a shard's report -------------------------------------------------------------------------------------------
def late_report(s: _SchemeState, w: int, fut: Any) -> bool:
    """Whether the report of `fut`, shard `w` of scheme `s` (or its backup copy), comes too late to count: it is
    neither the shard's future nor its copy's (a resubmitted scheme's first attempt), the cutoff is decided, the
    scheme is done, or the shard has its outcome already."""
    copy = s.backup.get(w)
    return (fut is not s.shards[w] and fut is not copy) or s.decode is not None or s.done or bool(s.known[w])


def settle_copy(s: _SchemeState, w: int, fut: Any, status: str) -> tuple[str, Any]:
    """Shard `w` of `s` has a backup copy, and one of the two (`fut`) reported `status`: settle which stands for the
    shard (:func:`~.late_shards.first_copy`). The copy is forgotten (``s.backup``), and ``s.shards[w]`` is `fut` if
    it won, else the other one. Returns the outcome (``"won"``: the other is to be cancelled; ``"wait"``: the other
    may still bring a result, its report decides; ``"erased"``) and the other future."""
    copy = s.backup.pop(w)
    other = copy if fut is s.shards[w] else s.shards[w]
    outcome = first_copy(status, other.status)
    s.shards[w] = fut if outcome == "won" else other
    return outcome, other


def task_report(inflight: Mapping[int, _BatchState], batch: int, scheme: str, fut: Any,
                task: str) -> tuple[_BatchState, _SchemeState | None] | None:
    """The batch (and scheme) whose `task` (``"decode"``, ``"score"`` or ``"labels"``, scheme ``""``) `fut` is, if its
    report still counts, else None: the batch is in flight, `fut` is its current task of that kind (not one
    submitted before it again), and the scheme is not done (its record made, or failed) and, for a decode, not
    already being scored; a labels task counts unless it finished (nothing to do then)."""
    state = inflight.get(batch)
    if task == "labels":
        return None if state is None or fut is not state.labels or fut.status == "finished" else (state, None)
    s = state.schemes[scheme] if state is not None else None
    if s is None or fut is not getattr(s, task) or s.done or (task == "decode" and s.score is not None):
        return None
    return state, s


# -- the cutoff -------------------------------------------------------------------------------------------------
def not_kept(s: _SchemeState) -> list:
    """The tasks a scheme's cutoff cancels: the submitted shards it does not keep (``s.received``), and every
    backup copy still running (forgotten: ``s.backup`` is emptied)."""
    keep = set(s.received)
    drop = [f for w, f in enumerate(s.shards) if w not in keep and f is not None] + list(s.backup.values())
    s.backup.clear()
    return drop


def decode_meta(s: _SchemeState, status: int, cutoff_s: float, latency_s: np.ndarray | None, failed: np.ndarray,
                output_size: int, score: bool, backups: int | None = None, keep: bool = False) -> dict:
    """What the decode of scheme `s`'s batch is told (``decode_task``'s `meta`): its status and cutoff time, the
    shards' latencies (None: the decode measures them on the wall clock), which shards failed, the batch's start
    (wall clock), f's output size, whether to keep the decoded rows for a score, whether to keep them in the
    record for the driver (`keep`: the caller wants the estimates back without reading the store), and (a cut
    decode) the backup copies launched."""
    meta = {"status": status, "cutoff_s": cutoff_s, "latency_s": latency_s, "failed": failed,
            "batch_start": s.start_wall, "output_size": output_size, "score": score}
    if keep:
        meta["keep"] = True
    if backups is not None:
        meta["backups"] = backups
    return meta


def overtaken_by(inflight: Iterable[_BatchState], scheme: str, seq: int) -> list[tuple[_BatchState, _SchemeState]]:
    """The batches submitted before the `seq`-th that run `scheme`, with their scheme's state (the `seq`-th reached
    its cutoff first: they are overtaken, :class:`~.window.Window`)."""
    return [(older, s) for older in inflight if older.seq < seq and (s := older.schemes.get(scheme)) is not None]


def waiting_for_turn(inflight: Iterable[_BatchState], scheme: str) -> dict[int, _SchemeState]:
    """The batches (by seq) whose `scheme` waits for its turn for backups of late shards
    (:attr:`~.batch_machine.BatchMachine.wants_turn`; :func:`~.window.turns` picks whose comes)."""
    return {state.seq: s for state in inflight
            if (s := state.schemes.get(scheme)) is not None and s.machine.wants_turn}


# -- failures ---------------------------------------------------------------------------------------------------
def selects(code: Any) -> bool:
    """Whether the shards of a scheme whose code is `code` (None: not known) each read their own samples of a batch
    (a selection scheme: uncoded, speculative, replication), so that bad data fail only some of them."""
    return code is not None and code.selected_input(0) is not None


def checks_data(s: _SchemeState, code: Any) -> bool:
    """Whether a cut scheme's failed shards are looked at for bad data: some failed, and either none sent a
    result, or the scheme, of code `code`, :func:`selects`."""
    return bool(s.failed.any()) and (not s.received or selects(code))


def lost_kept(s: _SchemeState, killed: bool) -> list[int]:
    """The kept shards whose results are gone (:data:`LOST`) when the decode failed with its worker (`killed`); none
    for a decode submitted with its shards (``s.direct``: it waits for them all)."""
    if not killed or s.direct:
        return []
    return [w for w in s.received if s.shards[w].status in LOST]


def inputs_again(killed: bool, attempt: int) -> bool:
    """Whether a batch's reference (or labels) lost with its worker (`killed`) is submitted again: fewer than
    :data:`~.plans.MAX_ATTEMPTS` submissions so far (`attempt` again)."""
    return killed and attempt + 1 < MAX_ATTEMPTS


# -- records and the end ----------------------------------------------------------------------------------------
def final(s: _SchemeState) -> Any:
    """The future whose result is the scheme's record: the score task when there is one, else the decode."""
    return s.score if s.score is not None else s.decode


def unrecorded(states: Iterable[_BatchState]) -> list[_SchemeState]:
    """The schemes of `states` whose record the driver does not hold yet, in order."""
    return [s for state in states for s in state.schemes.values() if s.result is None]


def split_fetch(fetching: Iterable[_BatchState], back: set[int]) -> tuple[list[_BatchState], list[_BatchState]]:
    """A fetch of records given up: its batches numbered in `back` (a record to make again) go back in flight,
    the others back to the finished batches waiting for a fetch. Returns both lists, in order."""
    states = list(fetching)
    return [st for st in states if st.batch in back], [st for st in states if st.batch not in back]


def finished(ready: list[_BatchState], inflight: Iterable[_BatchState]) -> list[_BatchState]:
    """The batches whose records a run keeps when it stops on an error: those finished, waiting for a fetch
    (`ready`), then those in flight that are done."""
    return ready + [state for state in inflight if state.done]


def hand_over(done: Iterable[tuple[_BatchState, list[dict]]], on_batch_done: Callable[[int, list[dict]], None] | None,
              results: list[dict]) -> None:
    """Give each finished batch's records to `on_batch_done` (``(batch, records)``), or, without one, add them to
    `results`."""
    for state, records in done:
        if on_batch_done is not None:
            on_batch_done(state.batch, records)
        else:
            results.extend(records)


def reread(state: _BatchState) -> list[_SchemeState]:
    """The schemes of a batch that run again because its one read (:func:`~.tasks.load_batch`) died with its
    worker: those that took it (``state.load_by``), not cut yet, and run fewer than :data:`~.plans.MAX_ATTEMPTS`
    times (a scheme that has run that often keeps its shards' failures, erasures)."""
    return [s for s in state.schemes.values() if s.plan.name in state.load_by and s.decode is None and not s.done
            and s.restarts + 1 < MAX_ATTEMPTS]


def scheme_futures(s: _SchemeState) -> list:
    """Every task of a scheme's batch that may still run: its shards, their backup copies, its decode and score."""
    return [f for f in (*s.shards, *s.backup.values(), s.decode, s.score) if f is not None]


def leftovers(inflight: Iterable[_BatchState]) -> list:
    """Every task of the batches `inflight` (a run that ends: they are cancelled), with each scheme's batch's
    reference and labels."""
    return [f for st in inflight for s in st.schemes.values()
            for f in [*s.shards, *s.backup.values(), s.decode, s.score, st.reference, st.labels] if f is not None]
