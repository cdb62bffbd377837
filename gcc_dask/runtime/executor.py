"""The driver loop: submit coded batches, apply the cutoff, cancel stragglers, decode, bound the work in flight.

Per batch ``b`` and scheme ``s`` (docs/pipeline.rst, section 'Cutoff'): N shard futures with unique
keys ``eval-b{b}-w{n}-{s}-{token}`` (``pure=False``, ``retries=0``; each reads and encodes the batch on its
worker, once per worker: :meth:`~.tasks.RunPlugin.encoded`, so shards depend on no other task and no coded
input moves between workers), then, once :func:`~.cutoff.decide`
says the cutoff is final, one decode task over the kept shards; the other shards are cancelled and stop
cooperatively. The driver never calls ``.result()`` per shard: futures report through
``add_done_callback`` into one queue, which the loop drains with a timeout (for wall-clock deadlines).

Worker death: a shard lost with its worker is an erasure, never re-run (``allowed-failures: 0``). The
batch's other tasks (reference, decode) are deterministic and are submitted again when they
die with a worker (``KilledWorker``), at most :data:`MAX_ATTEMPTS` times; a batch's shards are spread over
the workers round-robin, so one death erases about N/W of them, not all.

Clocks: with a latency model the cutoff runs on the *virtual clock* (a shard's arrival time is its
injected latency, seeded by run seed, batch and worker), so the kept set depends on the seed alone; without
one it runs on the wall clock and the store records what arrived.
"""

from __future__ import annotations

import logging
import math
import queue
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
from distributed import KilledWorker

from gcc_dask.errors import GccDaskError
from gcc_dask.runtime.cluster import _accepts_n_workers
from gcc_dask.runtime.cutoff import CutoffPolicy, cutoff_time, decide
from gcc_dask.runtime.tasks import (
    RunPlugin,
    decode_task,
    evaluate_shard,
    failed_record,
    is_bad_batch,
    reference_task,
)

logger = logging.getLogger(__name__)

__all__ = ["SchemePlan", "BatchRunner"]

INF = math.inf
#: submissions of a batch's reference or decode task, in all, when they die with a worker
MAX_ATTEMPTS = 3
#: seconds between refreshes of the worker list that shards are spread over
WORKERS_TTL_S = 1.0


def _error_of(fut) -> BaseException:
    """The exception of an erred future (a ``KilledWorker`` when its worker, or a dependency's, died)."""
    try:
        return fut.exception(timeout=30)
    except Exception as e:  # pragma: no cover - the scheduler is gone
        return e


@dataclass(frozen=True)
class SchemePlan:
    """One scheme of a run: its name, its code (driver copy) and its cutoff policy."""

    name: str
    num_workers: int
    policy: CutoffPolicy


@dataclass
class _SchemeState:
    plan: SchemePlan
    start_wall: float
    start_mono: float
    delays: np.ndarray | None  # injected latencies (virtual clock) or None (wall clock)
    shards: list = field(default_factory=list)
    arrivals: np.ndarray = None  # type: ignore[assignment]
    known: np.ndarray = None  # type: ignore[assignment]
    failed: np.ndarray = None  # type: ignore[assignment]
    decode: Any = None
    done: bool = False
    result: dict | None = None
    attempt: int = 0  # submissions of this scheme's decode lost with a worker so far
    received: list | None = None  # the kept shards, once the cutoff is final
    meta: dict | None = None
    wake: float | None = None  # wall clock: when to look at the cutoff again (monotonic); None: now

    def __post_init__(self) -> None:
        n = self.plan.num_workers
        self.arrivals = np.full(n, INF)
        self.known = np.zeros(n, dtype=bool)
        self.failed = np.zeros(n, dtype=bool)


@dataclass
class _BatchState:
    batch: int
    n_real: int
    reference: Any
    schemes: dict[str, _SchemeState]
    attempt: int = 0  # resubmissions of the reference task lost with a worker so far

    @property
    def done(self) -> bool:
        return all(s.done for s in self.schemes.values())


class BatchRunner:
    """Run batches of a coded pipeline on a Dask client.

    Parameters
    ----------
    client : distributed.Client
    plugin : RunPlugin
        Registered on the workers by :meth:`run` and unregistered at the end.
    plans : list of SchemePlan
    latency_model : object with ``latencies(seed, batch, num_workers)`` or None
        None runs the cutoff on the wall clock (no injected stragglers).
    seed : int
        Seeds the latency draws per (seed, batch, worker): every scheme sees the same draws.
    num_samples : int
        Samples in the source (to size the last, partial batch).
    output_size : int
        Flattened size of f's output, for batches that fail before producing any output.
    max_in_flight : int
        Batches submitted but not finished, at most.
    reference : bool
        Compute f(x_k) uncoded per batch (for MSE and RelAcc), and write it with the labels.
    use_gpu : bool
        Pin encode, shards and decode to workers with a ``GPU`` resource.
    """

    def __init__(
        self,
        client,
        plugin: RunPlugin,
        plans: list[SchemePlan],
        *,
        latency_model=None,
        seed: int = 0,
        num_samples: int,
        output_size: int,
        max_in_flight: int = 4,
        reference: bool = True,
        use_gpu: bool = False,
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
        self.token = uuid.uuid4().hex[:8]
        self._resources = {"resources": {"GPU": 1}} if use_gpu else {}
        self._events: queue.Queue = queue.Queue()
        self._inflight: dict[int, _BatchState] = {}
        self._workers: list[str] = []
        self._workers_at = -INF

    # -- submission -------------------------------------------------------------------------------
    def _watch(self, fut, tag: tuple) -> None:
        # the status is read when the future finishes: by the time the loop handles the event, a shard whose
        # worker died after finishing may already be released and recomputed (it must count as arrived)
        fut.add_done_callback(lambda f, tag=tag: self._events.put((time.monotonic(), tag, f, f.status)))

    def _submit(self, func, *args, key: str, priority: int, **kwargs):
        return self.client.submit(
            func, *args, key=f"{key}-{self.token}", pure=False, retries=0, priority=priority,
            **self._resources, **kwargs,
        )

    def _placement(self, batch: int, w: int) -> dict:
        """Where shard ``w`` of ``batch`` should run: the workers round-robin, so that one death erases
        about N/W of a batch's shards, never all of them (shards depend on no task, so the scheduler would
        otherwise pack a batch onto whichever worker has free threads). Loose: the scheduler picks another
        worker when that one is gone."""
        now = time.monotonic()
        if now - self._workers_at > WORKERS_TTL_S:
            self._workers_at = now
            try:
                client = self.client
                info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
                gpu = bool(self._resources)
                self._workers = sorted(a for a, ws in info.get("workers", {}).items()
                                       if not gpu or ws.get("resources", {}).get("GPU", 0) > 0)
            except Exception:  # pragma: no cover - placement is an optimisation only
                self._workers = []
        if len(self._workers) < 2:
            return {}
        return {"workers": [self._workers[(batch + w) % len(self._workers)]], "allow_other_workers": True}

    def _submit_reference(self, state: _BatchState) -> None:
        """(Re)submit the batch's reference task, if the run has one; attempts > 0 get new keys."""
        if self.reference:
            sfx = f"-a{state.attempt}" if state.attempt else ""
            state.reference = self._submit(reference_task, self.plugin.name, state.batch,
                                           key=f"reference-b{state.batch}{sfx}", priority=-state.batch)

    def _submit_scheme(self, state: _BatchState, plan: SchemePlan) -> None:
        """Submit one scheme of a batch: its N shards (each encodes its batch on its worker)."""
        name, batch = self.plugin.name, state.batch
        delays = None
        if self.latency_model is not None:
            delays = np.asarray(self.latency_model.latencies(self.seed, batch, plan.num_workers), dtype=float)
        s = _SchemeState(plan=plan, start_wall=time.time(), start_mono=time.monotonic(), delays=delays)
        # one client.map per target worker, not one submit per shard: each submit is its own graph update
        # on the scheduler (bench: 3.6 vs 6.3 ms of driver+scheduler CPU per shard, BENCHMARKS.md)
        groups: dict[str, tuple[dict, list[int]]] = {}
        for w in range(plan.num_workers):
            place = self._placement(batch, w)
            groups.setdefault(repr(place), (place, []))[1].append(w)
        s.shards = [None] * plan.num_workers
        for place, ws in groups.values():
            futs = self.client.map(
                evaluate_shard, [name] * len(ws), [plan.name] * len(ws), [batch] * len(ws), ws,
                [0.0 if delays is None else float(delays[w]) for w in ws],
                key=[f"eval-b{batch}-w{w}-{plan.name}-{self.token}" for w in ws],
                pure=False, retries=0, priority=-batch, **self._resources, **place,
            )
            for w, fut in zip(ws, futs):
                s.shards[w] = fut
        for w, fut in enumerate(s.shards):
            self._watch(fut, ("shard", batch, plan.name, w))
        state.schemes[plan.name] = s

    def _submit_batch(self, batch: int, schemes: list[str]) -> None:
        k = self.plugin.batch_size
        n_real = min(k, self.num_samples - batch * k)
        state = _BatchState(batch=batch, n_real=n_real, reference=None, schemes={})
        self._submit_reference(state)
        for plan in self.plans:
            if plan.name in schemes:
                self._submit_scheme(state, plan)
        self._inflight[batch] = state

    # -- events -----------------------------------------------------------------------------------
    def _on_shard(self, t: float, batch: int, scheme: str, w: int, fut, status: str) -> None:
        state = self._inflight.get(batch)
        if state is None:
            return
        s = state.schemes[scheme]
        if fut is not s.shards[w] or s.decode is not None or s.done or s.known[w]:
            return  # a late report (decided already, or from a resubmitted scheme's first attempt)
        s.known[w] = True
        if status == "finished":
            s.arrivals[w] = s.delays[w] if s.delays is not None else t - s.start_mono
        else:  # erred, or lost with its worker: an erasure, never retried
            s.failed[w] = True
        s.wake = self._maybe_cut(state, s)

    def _maybe_cut(self, state: _BatchState, s: _SchemeState) -> float:
        """Decode if the cutoff is final; else return the wall time (monotonic) to look again, or inf."""
        if s.decode is not None or s.done:
            return INF
        outstanding = int((~s.known).sum())
        c = cutoff_time(s.arrivals, s.plan.policy)
        if s.delays is not None:
            unknown = s.delays[~s.known]
            horizon = float(unknown.min()) if unknown.size else INF
            d = decide(s.arrivals, s.plan.policy, horizon=horizon, outstanding=outstanding, cutoff=c)
        else:
            d = decide(s.arrivals, s.plan.policy, now=time.monotonic() - s.start_mono, outstanding=outstanding,
                       cutoff=c)
        if d is None:
            if s.delays is None:
                return s.start_mono + c.time if math.isfinite(c.time) else INF
            return INF
        self._decode(state, s, d)
        return INF

    def _decode(self, state: _BatchState, s: _SchemeState, d) -> None:
        plan = s.plan
        received = [w for w in range(plan.num_workers) if s.arrivals[w] <= d.time and not s.failed[w]]
        if not received and s.failed.any():
            self._raise_if_bad_data(state, s)
        keep = set(received)
        drop = [f for w, f in enumerate(s.shards) if w not in keep]
        if drop:
            self.client.cancel(drop)
        if s.delays is not None:
            latency = np.where(np.isin(np.arange(plan.num_workers), received), s.arrivals, np.nan)
        else:
            latency = np.where(np.isfinite(s.arrivals), s.arrivals, np.nan)
        if d.failed:
            status = 4
        elif d.reason in ("wait_for",) and not d.shortfall:
            status = 1
        elif d.reason == "exhausted" and len(received) >= plan.policy.wait_for:
            status = 1
        else:
            status = 2
        s.received = received
        s.meta = {
            "status": status,
            "cutoff_s": float(d.time),
            "latency_s": latency,
            "failed": s.failed.copy(),
            "batch_start": s.start_wall,
            "output_size": self.output_size,
        }
        self._submit_decode(state, s)

    def _submit_decode(self, state: _BatchState, s: _SchemeState) -> None:
        """Submit the decode of the kept shards (again, under a new key, when the last one died)."""
        plan = s.plan
        reference = state.reference
        if reference is not None and reference.status == "error":
            if isinstance(_error_of(reference), KilledWorker) and state.attempt + 1 < MAX_ATTEMPTS:
                state.attempt += 1
                self._submit_reference(state)
                reference = state.reference
            else:  # f raised on the uncoded batch: no reference, no MSE for this batch
                reference = None
        sfx = f"-a{s.attempt}" if s.attempt else ""
        s.decode = self.client.submit(
            decode_task, self.plugin.name, plan.name, state.batch, state.n_real, s.received,
            [s.shards[w] for w in s.received], reference, s.meta,
            key=f"decode-b{state.batch}-{plan.name}{sfx}-{self.token}", pure=False, retries=0,
            priority=-state.batch + 1, **self._resources,
        )
        self._watch(s.decode, ("decode", state.batch, plan.name, -1))

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
            start = state.batch * self.plugin.batch_size
            raise type(exc)(f"source: batch {state.batch} (samples {start} to {start + state.n_real - 1}): "
                            f"{exc}") from None

    def _fail(self, state: _BatchState, s: _SchemeState, reason: str) -> None:
        logger.warning("batch %d of %s failed: %s", state.batch, s.plan.name, reason)
        self.client.cancel(s.shards)
        s.result = failed_record(s.plan.name, state.batch, s.plan.num_workers, s.start_wall)
        s.result["error"] = reason
        s.done = True

    def _on_decode(self, batch: int, scheme: str, fut) -> None:
        state = self._inflight.get(batch)
        s = state.schemes[scheme] if state is not None else None
        if s is None or fut is not s.decode or s.done:
            return
        if fut.status == "finished":
            s.done = True  # its record is gathered with the batch's others, in one round trip
            return
        exc = _error_of(fut)
        if isinstance(exc, KilledWorker) and s.attempt + 1 < MAX_ATTEMPTS:
            # the decode (or an input it needed) died with its worker: decode the same shards again
            logger.warning("decode of batch %d (%s): %r; submitting it again", batch, scheme, exc)
            s.attempt += 1
            self._submit_decode(state, s)
        else:
            self._fail(state, s, f"decode failed: {exc!r}")

    def _redecode(self, state: _BatchState, s: _SchemeState) -> dict | None:
        """Decode the same kept shards again and wait for the record (a rare recovery path): the decode's
        result, and what Dask needed to recompute it, died with a worker after the decode had finished.
        None when that fails too (MAX_ATTEMPTS in all), or when the batch never got to a decode."""
        while s.received is not None and s.attempt + 1 < MAX_ATTEMPTS:
            s.attempt += 1
            self._submit_decode(state, s)
            try:
                return s.decode.result()
            except Exception as e:
                logger.warning("batch %d (%s): decoding again failed (%r)", state.batch, s.plan.name, e)
        return None

    def _gather(self, state: _BatchState) -> list[dict]:
        """The batch's records (one per scheme), fetched in one round trip."""
        pending = [s for s in state.schemes.values() if s.result is None]
        if pending:
            try:
                fetched = self.client.gather([s.decode for s in pending])
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
        pending = [s.decode for st in states for s in st.schemes.values() if s.result is None]
        fetch = self._fetcher.submit(self.client.gather, pending) if pending else None
        tag = ("records", -1, "", -1)
        if fetch is None:
            self._events.put((time.monotonic(), tag, None, "finished"))
        else:
            fetch.add_done_callback(lambda f: self._events.put((time.monotonic(), tag, f, "finished")))
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
    def run(self, work: Iterable[tuple[int, list[str]]], on_batch_done: Callable[[int, list[dict]], None] | None = None) -> list[dict]:
        """Run every ``(batch, schemes)`` of ``work``; return one metrics dict per (scheme, batch).

        ``on_batch_done(batch, records)`` is called on the driver as each batch completes, with one record
        per scheme (status, metrics, received/failed masks, latencies; see ``decode_task``): the caller
        writes them to the store. Batches are submitted lazily, at most ``max_in_flight`` at once.
        The records are returned only when there is no ``on_batch_done``: a caller that takes them as they
        come gets an empty list, so that a long run keeps nothing per batch on the driver.
        """
        self.client.register_plugin(self.plugin, name=self.plugin.name)
        self._fetcher = ThreadPoolExecutor(1, thread_name_prefix="gcc-dask-records")
        self._fetch_future = None
        results: list[dict] = []
        ready: list[_BatchState] = []  # finished batches whose records are not fetched yet
        fetching: list[_BatchState] | None = None  # the batches of the fetch under way
        todo = iter(work)
        exhausted = False
        try:
            while True:
                while not exhausted and len(self._inflight) < self.max_in_flight:
                    try:
                        batch, schemes = next(todo)
                    except StopIteration:
                        exhausted = True
                        break
                    self._submit_batch(batch, schemes)
                if ready and fetching is None:
                    fetching, ready = self._fetch(ready), []
                if not self._inflight and fetching is None:
                    break
                wake = INF
                for state in list(self._inflight.values()):
                    for s in state.schemes.values():
                        if s.delays is None and s.decode is None and not s.done:
                            # the cutoff time moves only when a result arrives (_on_shard): look again
                            # when it is due, not on every event (bench: 1 ms per shard with 4 in flight)
                            if s.wake is None or s.wake <= time.monotonic():
                                s.wake = self._maybe_cut(state, s)
                            wake = min(wake, s.wake)
                timeout = None if not math.isfinite(wake) else max(0.0, wake - time.monotonic())
                try:
                    t, tag, fut, status = self._events.get(timeout=timeout)
                except queue.Empty:
                    continue
                kind, batch, scheme, w = tag
                if kind == "records":
                    for st, batch_results in zip(fetching, self._fetched(fetching, fut)):
                        if on_batch_done is not None:
                            on_batch_done(st.batch, batch_results)
                        else:
                            results.extend(batch_results)
                    fetching = None
                    continue
                try:
                    if kind == "shard":
                        self._on_shard(t, batch, scheme, w, fut, status)
                    else:
                        self._on_decode(batch, scheme, fut)
                except GccDaskError:
                    # bad data: the run stops, but batches that finished keep their records (else a resume
                    # would redo them, and their status would stay 0 next to their written `decoded` rows)
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
        finally:
            self._fetcher.shutdown(wait=True)
            leftovers = [f for st in self._inflight.values() for s in st.schemes.values()
                         for f in [*s.shards, s.decode, st.reference] if f is not None]
            if leftovers:
                self.client.cancel(leftovers)
            self._inflight.clear()
            try:
                self.client.unregister_worker_plugin(self.plugin.name)
            except Exception:  # pragma: no cover - the cluster may be gone already
                logger.debug("could not unregister plugin %s", self.plugin.name, exc_info=True)
        return results
