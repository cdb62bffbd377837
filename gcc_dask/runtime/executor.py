"""The driver loop: submit coded batches, apply the cutoff, cancel stragglers, decode, bound the work in flight.

Per batch ``b`` and scheme ``s`` (docs/pipeline.rst, section 'Cutoff'): N shard futures with unique
keys ``eval-b{b}-w{n}-{s}-{token}`` (``pure=False``, ``retries=0``; each reads the batch on its worker, once
per worker, and encodes its own row: :meth:`~.tasks.RunPlugin.shard_input`, so shards depend on no other task
and no coded input moves between workers), then, once :func:`~.cutoff.decide`
says the cutoff is final, one decode task over the kept shards; the other shards are cancelled and stop
cooperatively. The uncoded reference (for MSE and RelAcc) is never an input of the decode: a score task
joins the two afterwards, off the latency path. The driver never calls ``.result()`` per shard: futures
report through ``add_done_callback`` into one queue, which the loop drains with a timeout (for wall-clock
deadlines and the worker watchdog).

Worker death: a shard lost with its worker is an erasure, never re-run (``allowed-failures: 0``; except for a
scheme decoded with its shards, :meth:`BatchRunner._submit_direct`, whose finished shards Dask recomputes). The
batch's other tasks (reference, decode, score) are deterministic and are submitted again when they
die with a worker (``KilledWorker``), at most :data:`MAX_ATTEMPTS` times; when a decode's kept shards were
lost too, the scheme's batch is run again from its shards (on the virtual clock it keeps the same set).
A batch's shards are spread over the workers round-robin, so one death erases about N/W of them, not all
(except a scheme decoded with its shards, whose shards the scheduler places).
When every worker is gone for longer than ``worker_timeout`` the run stops with a
:class:`~gcc_dask.errors.ClusterError` (the store keeps what finished; a rerun resumes).

Clocks: with a latency model the cutoff runs on the *virtual clock* (a shard's arrival time is its
injected latency, seeded by run seed, batch and worker), so the kept set depends on the seed alone; without
one, or with ``stragglers.clock: wall``, it runs on the wall clock and the store records what arrived.

Spares (``cutoff.spares: lazy``, wall clock only): a batch runs the shards its cutoff needs
(:meth:`SchemePlan.regular`) at its own priority and the others below every batch in flight, so a busy
cluster computes them only when a thread is free. When a regular shard fails, or a batch submitted later
reaches its cutoff first, the batch's spares are submitted again at its own priority (:meth:`_maybe_promote`).

Backups (a plan with a :class:`~.backups.Speculation`, the ``speculative`` scheme): the batch runs its K
originals only; the next copy of an input is submitted, at the batch's priority and on another worker, when
its copies so far failed or the latest is late by Spark's rule on the batch's own results
(:func:`~.backups.backups_due`; :meth:`BatchRunner._speculate`), up to ``speculation.copies`` backups. The
cutoff waits for one copy of every input; the others are cancelled.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import numpy as np
from distributed import KilledWorker

from gcc_dask import dashboard
from gcc_dask.errors import ClusterError, GccDaskError
from gcc_dask.runtime.batch_machine import BackUp, Copy, Cut, Fail, Promote, Redecode, Restart, WatchShards
from gcc_dask.runtime.cluster import DebugOnly, past_frozen
from gcc_dask.runtime.events import FutureEvents
from gcc_dask.runtime.graph import GraphUpdate
from gcc_dask.runtime.liveness import MISSED_HEARTBEATS, keys_stuck_on

#: a run says how long loading f on the workers took when it took longer than this (seconds)
LOAD_SAY_S = 2.0


def quiet_line(quiet, what: list[str], said: set[str]) -> str | None:
    """The line a run says when it runs `what` again because of the `quiet` workers, or None: only when
    something runs again, and once per worker per run (`said`, updated, holds those said already; a worker
    behind on its heartbeats on a busy machine would otherwise be named at every look)."""
    new = sorted(set(quiet) - said)
    if not what or not new:
        return None
    said.update(new)
    return (f"Dask worker{'s' if len(new) > 1 else ''} {', '.join(new)} missed {MISSED_HEARTBEATS} heartbeats: "
            f"{'what batches' if len(what) > 1 else 'what batch'} {', '.join(what)} waited for there runs again "
            "on the other workers (said once a run)")
from gcc_dask.runtime.placement import backup_worker, copy_slot, round_robin
from gcc_dask.runtime.rescue import blocked
from gcc_dask.runtime.plans import INF, MAX_ATTEMPTS, SchemePlan, _BatchState, _SchemeState
from gcc_dask.runtime.signals import SignalFlag
from gcc_dask.runtime.tasks import (
    RunPlugin,
    decode_task,
    evaluate_shard,
    failed_record,
    is_bad_batch,
    is_storage_error,
    reference_task,
    score_task,
    strip_record,
)
from gcc_dask.runtime.workers import WorkerList

logger = logging.getLogger(__name__)

__all__ = ["SchemePlan", "BatchRunner"]

#: the loop wakes at least this often (seconds) to check the workers and to stay responsive to Ctrl-C
MAX_WAIT_S = 0.5


def _error_of(fut) -> BaseException:
    """The exception of an erred future (a ``KilledWorker`` when its worker, or a dependency's, died)."""
    try:
        return fut.exception(timeout=30)
    except Exception as e:  # pragma: no cover - the scheduler is gone
        return e


def _final(s: "_SchemeState"):
    """The future whose result is the scheme's record: the score task when there is one, else the decode."""
    return s.score if s.score is not None else s.decode


def _samples_text(samples: np.ndarray, limit: int = 8) -> str:
    """The dataset indices of a batch's samples, for an error line ("samples 8 to 11" when contiguous)."""
    if samples.size > 1 and (np.diff(samples) == 1).all():
        return f"samples {int(samples[0])} to {int(samples[-1])}"
    shown = ", ".join(str(int(i)) for i in samples[:limit])
    more = f", ... ({samples.size} in all)" if samples.size > limit else ""
    return f"samples {shown}{more}"


class _LostFetchLogFilter(DebugOnly):
    """Drop the client's "Couldn't gather N keys, rescheduling" warning about this run's own keys (log it at
    DEBUG level instead): results lost with a worker are the runner's to handle (a decode is run again, a
    batch restarted, or the run stops with one line when every worker is gone), not the user's to read. The
    same for "Failed to reconnect to scheduler": the run then stops with its own line about it."""

    def __init__(self, token: str) -> None:
        super().__init__(lambda text: (text.startswith("Couldn't gather") and token in text)
                         or text.startswith("Failed to reconnect"))
        self.token = token


class BatchRunner:
    """Run batches of a coded pipeline on a Dask client.

    Parameters
    ----------
    client : distributed.Client
    plugin : RunPlugin
        Registered on the workers by :meth:`run` and unregistered at the end.
    plans : list of SchemePlan
    latency_model : object with ``latencies(seed, batch, num_workers)`` or None
        Injected latencies, slept by the shards; None injects none (the cutoff runs on the wall clock).
    virtual_clock : bool
        With a latency model: the cutoff runs on the virtual clock of the drawn latencies (a result
        arrives at its latency), and every shard runs at its batch's priority (no lazy spares, whose start
        would depend on the wall clock). False: the wall clock, as without injected latencies.
    seed : int
        Seeds the latency draws per (seed, batch, worker): every scheme sees the same draws.
    num_samples : int
        Samples in the source (to size the last, partial batch).
    output_size : int
        Flattened size of f's output, for batches that fail before producing any output.
    max_in_flight : int
        Batches submitted but not finished, at most.
    reference : bool
        Compute f(x_k) uncoded per batch (for MSE and RelAcc), write it with the labels, and join it with
        each scheme's decoded batch in a score task (never an input of the decode).
    use_gpu : bool
        Pin encode, shards and decode to workers with a ``GPU`` resource.
    latency_per_sample : bool
        Draw injected latencies per sample (``stragglers.unit: sample``): a shard's work is the number of
        groups of its batch (B, or fewer in a short last batch); else per shard (work 1).
    worker_timeout : float
        Seconds the run waits for workers to come back when every worker is gone, before it stops with a
        :class:`~gcc_dask.errors.ClusterError`.
    unresponsive_after : float or None
        Seconds without a heartbeat after which a worker is ended as if it had died (its nanny kills and
        restarts it), so that its shards become erasures (:mod:`~.liveness`; docs/pipeline.rst, section
        'Unresponsive workers'). None: never.
    spares : {"lazy", "eager"}
        ``"lazy"``: a batch's spares (the shards beyond what its cutoff needs, :meth:`SchemePlan.regular`)
        are submitted below the priority of every batch in flight, so a busy cluster runs them only when a
        thread is free and cancels them unstarted otherwise; when a regular shard fails, or a batch
        submitted later reaches its cutoff first (:func:`~.spares.spares_due`), spares are submitted again
        at the batch's own priority. ``"eager"``: every shard at the batch's priority.
    echo : callable, optional
        Where to say what the user should know while the run goes on (all workers lost, ...).
    warn : callable, optional
        Where to say what the user must see even when nothing is echoed: the first batch of a scheme that has
        no estimate because f or its decode failed, with the error (the library passes a RuntimeWarning);
        default `echo`.
    """

    def __init__(
        self,
        client,
        plugin: RunPlugin,
        plans: list[SchemePlan],
        *,
        latency_model=None,
        virtual_clock: bool = True,
        seed: int = 0,
        num_samples: int,
        output_size: int,
        max_in_flight: int = 4,
        reference: bool = True,
        use_gpu: bool = False,
        latency_per_sample: bool = False,
        worker_timeout: float = 10.0,
        unresponsive_after: float | None = 5.0,
        spares: str = "lazy",
        echo: Callable[[str], None] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.plugin = plugin
        self.plans = plans
        self.latency_model = latency_model
        self.seed = seed
        self.num_samples = num_samples
        self.output_size = output_size
        self.max_in_flight = max(1, int(max_in_flight))
        self.reference = reference
        self.latency_per_sample = bool(latency_per_sample)
        self.worker_timeout = float(worker_timeout)
        self._told: set[str] = set()  # schemes whose first failed batch was told to the user (_tell_failure)
        if spares not in ("lazy", "eager"):
            raise ValueError(f"spares: got {spares!r}; expected 'lazy' or 'eager'")
        self.virtual_clock = latency_model is not None and bool(virtual_clock)
        lazy = spares == "lazy" and not self.virtual_clock
        self._regular = {p.name: p.regular(lazy) for p in plans}
        self.echo = echo or (lambda _msg: None)
        self.warn = warn or self.echo  # what the user must see even without echo (a RuntimeWarning in the library)
        self.layout = plugin.layout
        self.token = plugin.name_token  # the keys end with it (the workers' log filter recognises them)
        self._resources = {"resources": {"GPU": 1}} if use_gpu else {}
        self._events = FutureEvents(client)
        self._decided: dict[str, int] = {}  # per scheme: the latest batch (its seq) that reached its cutoff
        self._submitted = 0  # batches submitted so far (the next batch's seq)
        self._inflight: dict[int, _BatchState] = {}
        # the workers shards are spread over (refreshed off the loop; unresponsive ones ended)
        self._workers = WorkerList(client, gpu=use_gpu, unresponsive_after=unresponsive_after, echo=self.echo)
        self._suspected: set[str] = set()  # workers found frozen before the run (suspect)
        self._said_quiet: set[str] = set()  # quiet workers the run has said it acted on: said once per run
        self._canceller: ThreadPoolExecutor | None = None  # cancels stragglers, off the loop (_cancel)
        self._fetch_gen = 0  # the fetch whose records the loop takes (an abandoned one's are dropped)
        self._no_workers_since: float | None = None
        self._signals = SignalFlag()
        self._scheduler_address = getattr(getattr(client, "scheduler", None), "address", None)

    # -- submission -------------------------------------------------------------------------------
    def _submit(self, func, *args, key: str, priority: int, **kwargs):
        return self.client.submit(
            func, *args, key=f"{key}-{self.token}", pure=False, retries=0, priority=priority,
            **self._resources, **kwargs,
        )

    def _update(self) -> GraphUpdate:
        """An empty graph update for this run's tasks (one scheduler round for all of them)."""
        return GraphUpdate(self.client, self._resources.get("resources"))

    def _placement(self, batch: int, w: int) -> dict:
        """Where shard ``w`` of ``batch`` should run: the workers round-robin, so that one death erases
        about N/W of a batch's shards, never all of them (shards depend on no task, so the scheduler would
        otherwise pack a batch onto whichever worker has free threads). Loose: the scheduler picks another
        worker when that one is gone. (Backup copy c of original k is placed as shard k + c: on the c-th worker
        after its original's, :meth:`_slot`.)"""
        workers = self._workers.refresh()
        if len(workers) < 2:
            return {}
        return {"workers": [round_robin(workers, batch, w)], "allow_other_workers": True}

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
        waits: dict[str, list[tuple[str, _BatchState, _SchemeState | None]]] = {}
        shards: dict[str, tuple[_BatchState, _SchemeState, int]] = {}  # key -> a shard a cutoff waits for

        def wait(fut, why, state, s=None):  # (a finished task counts while its result is held there alone)
            if fut is not None:
                waits.setdefault(fut.key, []).append((why, state, s))

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
                            shards[s.shards[w].key] = (state, s, w)
            if state.attempt + 1 < MAX_ATTEMPTS:
                if state.labels is not None and state.labels.status != "finished":  # (written once finished)
                    wait(state.labels, "inputs", state)
                wait(state.reference, "inputs", state)  # (the scores join its result)
        records: dict[str, list] = {}
        for state in fetching or ():
            for s in state.schemes.values():
                if s.result is None and s.restarts + 1 < MAX_ATTEMPTS:
                    records.setdefault(_final(s).key, []).append(("record", state, s))
        if not waits and not records and not shards:
            return fetching, ready
        try:
            stuck = keys_stuck_on(self.client, [*waits, *records, *shards], quiet)
        except Exception as e:  # the scheduler is busy or going away: look again at the next check
            logger.debug("could not ask which tasks wait for %s: %r", sorted(quiet), e)
            return fetching, ready
        again: dict[tuple[int, str], tuple[str, _BatchState, _SchemeState | None]] = {}
        for key in stuck:
            for why, state, s in waits.get(key, []) + records.get(key, []):
                if why != "copy" or self._blocked(s, stuck):
                    again[(state.batch, "" if s is None else s.plan.name)] = (why, state, s)
        short = self._short_of(shards, stuck, again)
        if not again and not short:
            return fetching, ready
        if any(why == "record" for why, _, _ in again.values()):  # abandon the fetch: its batches go back
            back = {state.batch for why, state, _ in again.values() if why == "record"}
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
        for why, state, s in again.values():
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
        found: dict[tuple[int, str], tuple[_BatchState, _SchemeState, list[int]]] = {}
        for key in sorted(stuck & shards.keys()):
            state, s, w = shards[key]
            if (state.batch, s.plan.name) not in again:
                found.setdefault((state.batch, s.plan.name), (state, s, []))[2].append(w)
        short = {}
        for name, (state, s, ws) in found.items():
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
        """Whether the client has lost its scheduler for good: it has closed (after failing to reconnect within
        its timeout), or `exc` is the client's own "closed" error. An error of the driver's own code while
        the client is connected is a bug, and is not taken for a lost scheduler."""
        from distributed.client import ClosedClientError
        from distributed.comm import CommClosedError

        if self.client.status in ("closing", "closed"):
            return True
        return isinstance(exc, (ClosedClientError, CommClosedError)) and self.client.status != "running"

    def _lost_scheduler_error(self, exc: BaseException | None = None) -> ClusterError:
        """The one line that stops a run whose scheduler is gone (docs/pipeline.rst, 'Failures and erasures')."""
        why = f" ({type(exc).__name__})" if exc is not None else ""
        return ClusterError(
            f"cluster: lost the connection to the Dask scheduler at {self._scheduler_address!r}{why}; the "
            "batches finished before are in the store: run the same command again to resume once the scheduler "
            "is back")

    def _check_workers(self) -> None:
        """Stop the run when no worker has been there for ``worker_timeout`` seconds (they were all lost), or
        when the scheduler is gone (the client closed); wait while the client reconnects."""
        if self._scheduler_lost():
            raise self._lost_scheduler_error()
        if self.client.status != "running":  # reconnecting: the client gives up (and closes) after its timeout
            return
        workers = self._workers.refresh()
        if workers:
            if self._no_workers_since is not None:
                self.echo(f"{len(workers)} Dask worker(s) back; the run goes on")
            self._no_workers_since = None
            return
        now = time.monotonic()
        if self._no_workers_since is None:
            self._no_workers_since = now
            self.echo(f"every Dask worker is gone; waiting up to {self.worker_timeout:g} s for workers to come "
                      "back (cluster.connect_timeout)")
        elif now - self._no_workers_since > self.worker_timeout:
            raise ClusterError(
                f"cluster: every Dask worker was lost and none came back within {self.worker_timeout:g} s "
                "(cluster.connect_timeout); finished batches are in the store: run the same command again "
                "to resume")

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

    def _background_priority(self, state: _BatchState) -> int:
        """Below every shard of the batches in flight, spares included: a reference, the labels and a score
        are needed only for the metrics, never by a decode."""
        return -state.seq - 2 * self.max_in_flight - 1

    def _submit_reference(self, state: _BatchState, update: GraphUpdate | None = None) -> None:
        """(Re)submit the batch's reference task, if the run has one; attempts > 0 get new keys. A run without
        a reference still writes the batch's labels (a task of its own, off the latency path). Added to
        `update` when given, else submitted at once."""
        sfx = f"-a{state.attempt}" if state.attempt else ""
        priority = self._background_priority(state)
        own = update is None
        update = self._update() if own else update
        if self.reference:
            def bind(futs):
                state.reference = futs[0]

            update.add(reference_task, [(self.plugin.name, state.batch, True, True, self.output_size)],
                       priority=priority, then=bind, keys=[f"reference-b{state.batch}{sfx}-{self.token}"],
                       **self._away_from_quiet())
        elif getattr(self.plugin.source, "has_labels", False):
            def bind(futs):
                state.labels = futs[0]
                self._events.watch([(state.labels, ("labels", state.batch, "", -1))])

            update.add(reference_task, [(self.plugin.name, state.batch, True, False)], priority=priority,
                       then=bind, keys=[f"labels-b{state.batch}{sfx}-{self.token}"], **self._away_from_quiet())
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
        delays = None
        if self.latency_model is not None:
            work = float(self.layout.batch_groups(batch)) if self.latency_per_sample else 1.0
            delays = np.asarray(self.latency_model.latencies(self.seed, batch, plan.num_workers, work=work),
                                dtype=float)
        s = _SchemeState(plan=plan, start_wall=time.time(), start_mono=time.monotonic(), delays=delays,
                         virtual=self.virtual_clock, restarts=restarts, regular=self._regular[plan.name])
        s.sfx = f"-r{restarts}" if restarts else ""
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
        regular = set(start.regular)
        groups: dict[tuple[str, bool], tuple[dict, list[int]]] = {}
        away = self._away_from_quiet() if direct else {}
        for w in start.shards:
            place = away if direct else self._placement(batch, self._slot(plan, w))
            groups.setdefault((repr(place), w in regular), (place, []))[1].append(w)
        s.shards = [None] * plan.num_workers
        # regular shards first: an idle worker starts whatever reaches it first
        for (_, is_regular), (place, ws) in sorted(groups.items(), key=lambda g: not g[0][1]):
            self._map_shards(state, s, ws, place, update, watch=not direct,
                             priority=-state.seq if is_regular else -state.seq - self.max_in_flight)
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

    def _backup_place(self, state: _BatchState, s: _SchemeState, w: int, nth: int) -> dict:
        """Where the `nth` backup copy of the batch (0 first), of shard `w`, runs: one of the faster half of the
        workers (round-robin, :meth:`_placement`) that have sent a result of the batch, by their first result,
        other than `w`'s own, one after the other over the copies; any other worker when none has. (A slow
        worker sends its results too, last: a copy there would be as late.)"""
        workers = self._workers.refresh()
        if len(workers) < 2:
            return {}
        where = backup_worker(workers, state.batch, w, nth, s.arrivals, s.known, s.failed)
        return {"workers": [where], "allow_other_workers": True}

    def _cut_early(self, state: _BatchState, s: _SchemeState) -> None:
        """On the virtual clock the cutoff may be final before any shard reports (every injected latency
        beyond the deadline): decide once the shards are submitted, not on the first arrival."""
        if s.virtual:
            s.wake = self._maybe_cut(state, s)

    def _shard_key(self, batch: int, w: int, s: _SchemeState, sfx: str = "") -> str:
        return f"eval-b{batch}-w{w}-{s.plan.name}{s.sfx}{sfx}-{self.token}"

    def _map_shards(self, state: _BatchState, s: _SchemeState, ws: list[int], place: dict, update: GraphUpdate,
                    priority: int, sfx: str = "", watch: bool = True, backup: bool = False) -> None:
        """Add shards ``ws`` of a scheme's batch, at one placement, to `update` (and watch them once sent);
        with `backup`, as the backup copies of those shards (``s.backup``), the originals left running."""
        name, batch, plan = self.plugin.name, state.batch, s.plan

        def bind(futs):
            for w, fut in zip(ws, futs):
                if backup:
                    s.backup[w] = fut
                else:
                    s.shards[w] = fut
            if watch:
                self._events.watch([(fut, ("shard", batch, plan.name, w)) for w, fut in zip(ws, futs)])

        update.add(evaluate_shard,
                   [(name, plan.name, batch, w, 0.0 if s.delays is None else float(s.delays[w])) for w in ws],
                   keys=[self._shard_key(batch, w, s, sfx) for w in ws], priority=priority, then=bind, **place)

    def _submit_direct(self, state: _BatchState, s: _SchemeState, decode, update: GraphUpdate) -> None:
        """A scheme whose cutoff keeps every result (``uncoded``; the machine's :class:`~.batch_machine.Decode`):
        submit its decode now, over all N shards, and watch only the decode. No shard event reaches the driver
        (bench: a tenth of its CPU for uncoded); the decode times the shards itself (``latency_s`` from each
        result's end, on the wall clock). If any shard fails, the decode fails with it and :meth:`_on_decode`
        goes back to watching the shards, so the cutoff decides as for any other scheme."""
        n = s.plan.num_workers
        latency = s.delays.copy() if s.virtual else None  # (on the wall clock the decode measures them)
        s.meta = {"status": decode.status, "cutoff_s": decode.cutoff_s, "latency_s": latency,
                  "failed": np.zeros(n, dtype=bool), "batch_start": s.start_wall, "output_size": self.output_size,
                  "score": self.reference}
        self._submit_decode(state, s, update)

    def _maybe_promote(self, state: _BatchState, s: _SchemeState) -> None:
        """Run spares at the batch's own priority when a regular shard failed, or when a batch submitted
        later has reached its cutoff first (:meth:`~.batch_machine.BatchMachine.promote`)."""
        overtaken = self._decided.get(s.plan.name, -1) > state.seq
        self._act(state, s, s.machine.promote(overtaken, time.monotonic() - s.start_mono))

    def _map_placed(self, state: _BatchState, s: _SchemeState, ws: list[int], update: GraphUpdate, sfx: str) -> None:
        """Add shards ``ws`` again, each at its :meth:`_placement` (away from quiet workers), at the batch's
        priority, under keys ending in `sfx` (:meth:`_map_shards`, one call per placement)."""
        groups: dict[str, tuple[dict, list[int]]] = {}
        for w in ws:
            place = self._placement(state.batch, w)
            groups.setdefault(repr(place), (place, []))[1].append(w)
        for place, group in groups.values():
            self._map_shards(state, s, group, place, update, priority=-state.seq, sfx=sfx)

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
            self._submit_reference(state, update)
            for plan in self.plans:
                if plan.name in schemes:
                    self._submit_scheme(state, plan, update=update)
            states.append(state)
        update.send()
        dashboard.publish(self.client, {"kind": "submit", "run": self.token, "work": [[b, list(s)] for b, s in work]})
        for state in states:
            for s in state.schemes.values():
                self._cut_early(state, s)
            self._inflight[state.batch] = state
        for plan in self.plans:
            self._give_turn(plan.name)

    @property
    def refill_size(self) -> int:
        """Batches submitted together once that many slots of the window are free (one graph update for all
        of them, not one per batch): a quarter of ``max_in_flight``, at least 1."""
        return max(1, self.max_in_flight // 4)

    # -- events -----------------------------------------------------------------------------------
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
        if not received and s.failed.any():
            self._raise_if_bad_data(state, s)
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

    def _keys_suffix(self, s: _SchemeState) -> str:
        return "".join(f"-{c}{n}" for c, n in (("r", s.restarts), ("a", s.attempt)) if n)

    def _submit_decode(self, state: _BatchState, s: _SchemeState, update: GraphUpdate | None = None) -> None:
        """Submit the decode of the kept shards (again, under a new key, when the last one died). With
        `update` (the shards are in it too), the decode is added to it; else submitted at once."""
        plan = s.plan
        key = f"decode-b{state.batch}-{plan.name}{self._keys_suffix(s)}"

        def bind(futs):
            s.decode = futs[0]
            self._events.watch([(s.decode, ("decode", state.batch, plan.name, -1))])

        away = self._away_from_quiet()
        if update is None:
            bind([self._submit(decode_task, self.plugin.name, plan.name, state.batch, state.n_real, s.received,
                               [s.shards[w] for w in s.received], s.meta, key=key, priority=-state.seq + 1,
                               **away)])
            return
        update.add(decode_task, [(self.plugin.name, plan.name, state.batch, state.n_real, s.received,
                                  [self._shard_key(state.batch, w, s) for w in s.received], s.meta)],
                   keys=[f"{key}-{self.token}"], priority=-state.seq + 1, then=bind, **away)

    def _submit_score(self, state: _BatchState, s: _SchemeState) -> None:
        """Join the scheme's decoded batch with the batch's reference (a reference lost with its worker is
        submitted again first)."""
        reference = state.reference
        if reference.status == "error" and isinstance(_error_of(reference), KilledWorker) \
                and state.attempt + 1 < MAX_ATTEMPTS:
            state.attempt += 1
            self._submit_reference(state)
            reference = state.reference
        s.score = self.client.submit(
            score_task, s.decode, reference,
            key=f"score-b{state.batch}-{s.plan.name}{self._keys_suffix(s)}-{self.token}", pure=False, retries=0,
            priority=self._background_priority(state),
        )
        self._events.watch([(s.score, ("score", state.batch, s.plan.name, -1))])

    def _raise_if_bad_data(self, state: _BatchState, s: _SchemeState) -> None:
        """Stop the run with one line when the batch's shards failed on its data, not on f or a worker.

        Every shard reads and encodes its batch, so bad data (NaN with ``nan_policy: raise``, an unreadable
        slice) fail them all with the same :class:`~gcc_dask.errors.GccDaskError`, marked by the worker
        (:func:`~.tasks.is_bad_batch`). Only for a batch with no result at all is one error fetched (a round
        trip); an f that raised (even a ``WorkloadError``) or a dead worker leaves erasures, decoded around.

        Known limit: a wall-clock deadline that fires before any shard has even started (shorter than the
        queue) leaves such a batch undecodable (status 3) without this check, as nothing has failed yet.
        """
        first = int(np.flatnonzero(s.failed)[0])
        exc = _error_of(s.shards[first])
        if is_bad_batch(exc):
            # the codes' own advice names their keyword; a run is configured by its run section
            why = str(exc).replace("pass nan_policy='propagate'", "set run.nan_policy: propagate")
            raise type(exc)(f"source: batch {state.batch} ({_samples_text(self.layout.samples(state.batch))}): "
                            f"{why}") from None
        if not isinstance(exc, KilledWorker):  # f raised on every shard: say why once, the run goes on
            self._tell_failure(s, state.batch, f"every shard that ran failed; shard {first}: {exc!r}")

    def _tell_failure(self, s: _SchemeState, batch: int, why: str) -> None:
        """One line for the user the first time a batch of a scheme has no estimate because f (or the decode of
        its outputs) failed, with the error: otherwise it would show only as NaN rows and a count in the summary
        (a wrong output shape, an f that raises on every block). Later failures are counted there only."""
        if s.plan.name in self._told:
            return
        self._told.add(s.plan.name)
        self.warn(f"{s.plan.name}: batch {batch} has no estimate: {why} (its rows are NaN; the summary counts the "
                  "batches that failed)")

    def _fail(self, state: _BatchState, s: _SchemeState, reason: str) -> None:
        logger.warning("batch %d of %s failed: %s", state.batch, s.plan.name, reason)
        self._cancel([f for f in s.shards if f is not None])
        s.result = failed_record(s.plan.name, state.batch, s.plan.num_workers, s.start_wall)
        s.result["error"] = reason
        s.machine.fail(reason)

    def _on_decode(self, batch: int, scheme: str, fut) -> None:
        state = self._inflight.get(batch)
        s = state.schemes[scheme] if state is not None else None
        if s is None or fut is not s.decode or s.done or s.score is not None:
            return
        if fut.status == "finished":
            if self.reference and state.reference is not None:
                self._submit_score(state, s)
            else:
                s.done = True  # its record is gathered with the batch's others, in one round trip
            return
        exc = _error_of(fut)
        if is_storage_error(exc):  # the store cannot be written: stop the run with that one line
            raise exc
        killed = isinstance(exc, KilledWorker)
        lost = [w for w in s.received if s.shards[w].status in ("error", "lost", "cancelled")] \
            if killed and not s.direct else []
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
        state = self._inflight.get(batch)
        s = state.schemes[scheme] if state is not None else None
        if s is None or fut is not s.score or s.done:
            return
        if fut.status == "finished":
            s.done = True
            return
        exc = _error_of(fut)
        if is_storage_error(exc):  # the reference (or the labels) cannot be written: stop with that one line
            raise exc
        if isinstance(exc, KilledWorker) and s.attempt + 1 < MAX_ATTEMPTS:
            # the score, the reference or the decode's record died with a worker: join them again
            s.attempt += 1
            if s.decode.status != "finished":
                self._submit_decode(state, s)  # its record was lost: decode again, then score
                s.score = None
            else:
                self._submit_score(state, s)
            return
        # no reference for this batch (f raised on the uncoded batch): keep the record without metrics
        logger.warning("batch %d (%s): no reference to score against (%r)", batch, scheme, exc)
        try:
            s.result = strip_record(s.decode.result())
        except Exception as e:
            s.result = dict(failed_record(s.plan.name, batch, s.plan.num_workers, s.start_wall),
                            error=f"lost: {e!r}")
        s.done = True

    def _on_labels(self, batch: int, fut) -> None:
        """The labels task of a run without a reference ended: nothing to do when it wrote them; a store that
        cannot be written stops the run (as for ``decoded``); labels lost with their worker are submitted again
        (at most :data:`MAX_ATTEMPTS` times in all); else the batch's ``inputs/status`` stays pending, which a
        resume runs again (docs/pipeline.rst, section 'Resuming')."""
        state = self._inflight.get(batch)
        if state is None or fut is not state.labels or fut.status == "finished":
            return
        exc = _error_of(fut)
        if is_storage_error(exc):
            raise exc
        if isinstance(exc, KilledWorker) and state.attempt + 1 < MAX_ATTEMPTS:
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

    # -- the loop ---------------------------------------------------------------------------------
    def _catch_sigint(self) -> Callable[[], None]:
        """While the loop runs, Ctrl-C or SIGTERM sets a flag that the loop turns into ``KeyboardInterrupt``
        (:class:`~gcc_dask.errors.Terminated` for SIGTERM) within ``MAX_WAIT_S``: Python's own handler raises
        it wherever the main thread happens to be, and inside a finaliser (a distributed ``Future.__del__``)
        it is discarded and the run goes on. A second signal raises at once. Returns the function that puts
        the previous handlers back (main thread only; :class:`~.signals.SignalFlag`)."""
        return self._signals.install()

    def run(self, work: Iterable[tuple[int, list[str]]], on_batch_done: Callable[[int, list[dict]], None] | None = None) -> list[dict]:
        """Run every ``(batch, schemes)`` of ``work``; return one metrics dict per (scheme, batch).

        ``on_batch_done(batch, records)`` is called on the driver as each batch completes, with one record
        per scheme (status, metrics, received/failed masks, latencies; see ``decode_task``): the caller
        writes them to the store. Batches are submitted lazily, at most ``max_in_flight`` at once.
        The records are returned only when there is no ``on_batch_done``: a caller that takes them as they
        come gets an empty list, so that a long run keeps nothing per batch on the driver.
        """
        loading = time.perf_counter()
        self._register()  # loads f on every worker (the plugin's setup): before the first batch's clock starts
        loading = time.perf_counter() - loading
        if loading > LOAD_SAY_S:
            self.echo(f"f loaded on the workers in {loading:.1f} s, before the first batch (not in its latency)")
        quiet = _LostFetchLogFilter(self.token)
        logging.getLogger("distributed.client").addFilter(quiet)
        restore = self._catch_sigint()
        dashboard.publish(self.client, dashboard.start_event(self.token, self.plans, self.output_size,
                                                             len(work) if hasattr(work, "__len__") else None))
        self._fetcher = ThreadPoolExecutor(1, thread_name_prefix="gcc-dask-records")
        self._fetch_future = None
        results: list[dict] = []
        ready: list[_BatchState] = []  # finished batches whose records are not fetched yet
        fetching: list[_BatchState] | None = None  # the batches of the fetch under way
        todo = iter(work)
        exhausted = False
        clean = False
        try:
            while True:
                free = self.max_in_flight - len(self._inflight)
                if not exhausted and (free >= self.refill_size or not self._inflight):
                    batches = []
                    while len(batches) < free:
                        try:
                            batches.append(next(todo))
                        except StopIteration:
                            exhausted = True
                            break
                    if batches:
                        self._submit_batches(batches)
                if self._workers.due or self._workers.answered:
                    self._check_workers()  # also while events flow: an unresponsive worker stalls only some
                    fetching, ready = self._rerun_quiet(fetching, ready)
                if self._workers.replaced:  # every worker was replaced: rerun what was lost with them
                    self._workers.replaced = False
                    held, ready = ready + (fetching or []), []
                    if fetching is not None:  # abandon the fetch (its old tasks are cancelled below)
                        fetching, self._fetch_gen = None, self._fetch_gen + 1
                    self._restart_in_flight(held)
                if ready and fetching is None:
                    fetching, ready = self._fetch(ready), []
                if not self._inflight and fetching is None:
                    break
                wake = INF
                for state in list(self._inflight.values()):
                    for s in state.schemes.values():
                        if not s.virtual and s.decode is None and not s.done:
                            # the cutoff time moves only when a result arrives (_on_shard): look again
                            # when it is due, not on every event (bench: 1 ms per shard with 4 in flight)
                            if s.wake is None or s.wake <= time.monotonic():
                                s.wake = self._maybe_cut(state, s)
                            wake = min(wake, s.wake)
                timeout = MAX_WAIT_S if not math.isfinite(wake) else min(MAX_WAIT_S, max(0.0, wake - time.monotonic()))
                self._signals.check()
                try:
                    t, tag, fut, status = self._events.next(timeout)
                except queue.Empty:
                    self._check_workers()
                    fetching, ready = self._rerun_quiet(fetching, ready)
                    continue
                kind, batch, scheme, w = tag
                if kind == "records":
                    if batch != self._fetch_gen:  # an abandoned fetch (_restart_in_flight)
                        continue
                    for st, batch_results in zip(fetching, self._fetched(fetching, fut)):
                        dashboard.publish(self.client, {"kind": "done", "run": self.token, "batch": st.batch,
                                                        "records": dashboard.record_summary(batch_results)})
                        if on_batch_done is not None:
                            on_batch_done(st.batch, batch_results)
                        else:
                            results.extend(batch_results)
                    fetching = None
                    continue
                try:
                    if kind == "shard":
                        self._on_shard(t, batch, scheme, w, fut, status)
                    elif kind == "decode":
                        self._on_decode(batch, scheme, fut)
                    elif kind == "score":
                        self._on_score(batch, scheme, fut)
                    elif kind == "labels":
                        self._on_labels(batch, fut)
                except GccDaskError:
                    # bad data, or a store that cannot be written: the run stops, but batches that finished
                    # keep their records (else a resume would redo them, and their status would stay 0 next to
                    # their written `decoded` rows)
                    done = list(zip(fetching, self._fetched(fetching, self._fetch_future))) if fetching else []
                    others = ready + [st for st in self._inflight.values() if st.done]
                    done += [(st, self._gather(st)) for st in others]
                    fetching, ready = None, []
                    for st, batch_results in done:
                        if on_batch_done is not None:
                            on_batch_done(st.batch, batch_results)
                        else:
                            results.extend(batch_results)
                    raise
                state = self._inflight.get(batch)
                if state is not None and state.done:
                    del self._inflight[batch]
                    ready.append(state)
            clean = True
        except GccDaskError:
            raise
        except Exception as e:
            if self._scheduler_lost(e):  # the scheduler died: one line, not a traceback of the client's calls
                raise self._lost_scheduler_error(e) from None
            raise
        finally:
            dashboard.publish(self.client, {"kind": "end", "run": self.token, "status": "complete" if clean else "stopped"})
            restore()
            self._events.close()
            logging.getLogger("distributed.client").removeFilter(quiet)
            # after an error or Ctrl-C a fetch may hang on a lost cluster: never wait for it then
            self._fetcher.shutdown(wait=clean, cancel_futures=not clean)
            self._workers.close()
            if self._canceller is not None:  # a clean end waits for the last cancels (never a lost cluster)
                self._canceller.shutdown(wait=clean, cancel_futures=not clean)
                self._canceller = None
            leftovers = [f for st in self._inflight.values() for s in st.schemes.values()
                         for f in [*s.shards, *s.backup.values(), s.decode, s.score, st.reference, st.labels]
                         if f is not None]
            self._inflight.clear()
            try:
                if leftovers:
                    self.client.cancel(leftovers)
                if self._workers.quiet:  # a frozen worker would hold the run until it resumes: not waited for
                    threading.Thread(target=self._unregister, name="gcc-dask-unregister", daemon=True).start()
                else:
                    self._unregister()
            except Exception:  # pragma: no cover - the cluster may be gone already
                logger.debug("could not clean up plugin %s", self.plugin.name, exc_info=True)
        return results

    def suspect(self, addresses, said: bool = False) -> None:
        """Workers found frozen before the run (its set-up, :func:`~.cluster.past_frozen`): no shards while
        they stay silent, ended as any unresponsive worker, and not waited for by the plugin's registration.
        `said`: the caller told the user already (the run does not say it again when it acts on them)."""
        self._suspected |= set(addresses)
        if said:
            self._said_quiet |= set(addresses)
        self._workers.suspect(addresses)

    def _register(self) -> None:
        """Register the run's plugin on the workers; a frozen worker is not waited for (it gets the plugin when
        it answers, and no shards before: :meth:`suspect`)."""
        name = self.plugin.name

        def has_plugin(dask_worker, name):  # runs on a worker (shipped by value)
            plugin = dask_worker.plugins.get(name)
            if plugin is not None and getattr(plugin, "fn", True) is None:
                plugin.setup(dask_worker)  # its setup failed there: raise its error here
            return plugin is not None

        started = []

        def register(workers):
            if workers is None:
                started.append(True)
                return self.client.register_plugin(self.plugin, name=name)
            if not started:  # workers known frozen from the start: the registration waits for them, in a thread
                started.append(True)
                threading.Thread(target=self._register_all, name="gcc-dask-register", daemon=True).start()
            # the registration under way (still waiting for the frozen workers) reaches the others
            while not all(self.client.run(has_plugin, workers=workers, name=name).values()):
                time.sleep(0.05)

        _, frozen = past_frozen(self.client, register, self._suspected)
        if frozen - self._suspected:
            self.suspect(frozen)
        # no shard for a worker left out until it has the plugin (a task there would find none); asked in a
        # thread per worker: the question waits for the worker to answer
        self._workers.unready(frozen)

        def confirm(address):
            while True:
                try:
                    if self.client.run(has_plugin, workers=[address], name=name).get(address):
                        self._workers.ready([address])
                        return
                except Exception as e:  # ended, gone, or its set-up failed there: it stays without shards
                    logger.debug("worker %s: the run's plugin is not there (%r)", address, e)
                    return
                time.sleep(0.2)

        for address in sorted(frozen):
            threading.Thread(target=confirm, args=(address,), name="gcc-dask-plugin-check", daemon=True).start()

    def _register_all(self) -> None:
        try:
            self.client.register_plugin(self.plugin, name=self.plugin.name)
        except Exception:  # a worker's own error is raised by has_plugin (see _register)
            logger.debug("registering plugin %s", self.plugin.name, exc_info=True)

    def _unregister(self) -> None:
        """Remove the run's plugin from the workers (what the next run of the store does, if this fails)."""
        try:
            self.client.unregister_worker_plugin(self.plugin.name)
        except Exception:  # pragma: no cover - the cluster may be gone already
            logger.debug("could not remove plugin %s", self.plugin.name, exc_info=True)
