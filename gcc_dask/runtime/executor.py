"""The driver loop: submit coded batches, apply the cutoff, cancel stragglers, decode, bound the work in flight.

Per batch ``b`` and scheme ``s`` (DESIGN.md, "The cutoff"): one encode task, N shard futures with unique
keys ``eval-b{b}-w{n}-{s}-{token}`` (``pure=False``, ``retries=0``), then, once :func:`~.cutoff.decide`
says the cutoff is final, one decode task over the kept shards; the other shards are cancelled and stop
cooperatively. The driver never calls ``.result()`` per shard: futures report through
``add_done_callback`` into one queue, which the loop drains with a timeout (for wall-clock deadlines).

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
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from gcc_dask.runtime.cutoff import CutoffPolicy, cutoff_time, decide
from gcc_dask.runtime.tasks import (
    RunPlugin,
    decode_task,
    encode_task,
    evaluate_shard,
    failed_record,
    load_task,
    reference_task,
)

logger = logging.getLogger(__name__)

__all__ = ["SchemePlan", "BatchRunner"]

INF = math.inf


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
    encode: Any = None
    shards: list = field(default_factory=list)
    arrivals: np.ndarray = None  # type: ignore[assignment]
    known: np.ndarray = None  # type: ignore[assignment]
    failed: np.ndarray = None  # type: ignore[assignment]
    decode: Any = None
    done: bool = False
    result: dict | None = None

    def __post_init__(self) -> None:
        n = self.plan.num_workers
        self.arrivals = np.full(n, INF)
        self.known = np.zeros(n, dtype=bool)
        self.failed = np.zeros(n, dtype=bool)


@dataclass
class _BatchState:
    batch: int
    n_real: int
    loaded: Any
    reference: Any
    schemes: dict[str, _SchemeState]

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

    # -- submission -------------------------------------------------------------------------------
    def _watch(self, fut, tag: tuple) -> None:
        fut.add_done_callback(lambda f, tag=tag: self._events.put((time.monotonic(), tag, f)))

    def _submit(self, func, *args, key: str, priority: int, **kwargs):
        return self.client.submit(
            func, *args, key=f"{key}-{self.token}", pure=False, retries=0, priority=priority,
            **self._resources, **kwargs,
        )

    def _submit_batch(self, batch: int, schemes: list[str]) -> None:
        name = self.plugin.name
        k = self.plugin.batch_size
        n_real = min(k, self.num_samples - batch * k)
        prio = -batch
        loaded = self._submit(load_task, name, batch, key=f"load-b{batch}", priority=prio)
        reference = None
        if self.reference:
            reference = self._submit(reference_task, name, batch, loaded, key=f"reference-b{batch}", priority=prio)
        state = _BatchState(batch=batch, n_real=n_real, loaded=loaded, reference=reference, schemes={})
        for plan in self.plans:
            if plan.name not in schemes:
                continue
            delays = None
            if self.latency_model is not None:
                delays = np.asarray(self.latency_model.latencies(self.seed, batch, plan.num_workers), dtype=float)
            s = _SchemeState(plan=plan, start_wall=time.time(), start_mono=time.monotonic(), delays=delays)
            s.encode = self._submit(encode_task, name, plan.name, loaded, key=f"encode-b{batch}-{plan.name}",
                                    priority=prio)
            for w in range(plan.num_workers):
                delay = 0.0 if delays is None else float(delays[w])
                fut = self._submit(evaluate_shard, name, s.encode, w, delay,
                                   key=f"eval-b{batch}-w{w}-{plan.name}", priority=prio)
                s.shards.append(fut)
                self._watch(fut, ("shard", batch, plan.name, w))
            state.schemes[plan.name] = s
        self._inflight[batch] = state

    # -- events -----------------------------------------------------------------------------------
    def _on_shard(self, t: float, batch: int, scheme: str, w: int, fut) -> None:
        state = self._inflight.get(batch)
        if state is None:
            return
        s = state.schemes[scheme]
        if s.decode is not None or s.done or s.known[w]:
            return
        s.known[w] = True
        if fut.status == "finished":
            s.arrivals[w] = s.delays[w] if s.delays is not None else t - s.start_mono
        else:  # erred, or lost with its worker: an erasure, never retried
            s.failed[w] = True
        self._maybe_cut(state, s)

    def _maybe_cut(self, state: _BatchState, s: _SchemeState) -> float:
        """Decode if the cutoff is final; else return the wall time (monotonic) to look again, or inf."""
        if s.decode is not None or s.done:
            return INF
        outstanding = int((~s.known).sum())
        if s.delays is not None:
            unknown = s.delays[~s.known]
            horizon = float(unknown.min()) if unknown.size else INF
            d = decide(s.arrivals, s.plan.policy, horizon=horizon, outstanding=outstanding)
        else:
            d = decide(s.arrivals, s.plan.policy, now=time.monotonic() - s.start_mono, outstanding=outstanding)
        if d is None:
            if s.delays is None:
                t = cutoff_time(s.arrivals, s.plan.policy).time
                return s.start_mono + t if math.isfinite(t) else INF
            return INF
        self._decode(state, s, d)
        return INF

    def _decode(self, state: _BatchState, s: _SchemeState, d) -> None:
        plan = s.plan
        if s.encode.status == "error" or state.loaded.status == "error":
            self._fail(state, s, "its load or encode task failed")
            return
        received = [w for w in range(plan.num_workers) if s.arrivals[w] <= d.time and not s.failed[w]]
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
        meta = {
            "status": status,
            "cutoff_s": float(d.time),
            "latency_s": latency,
            "failed": s.failed.copy(),
            "batch_start": s.start_wall,
            "output_size": self.output_size,
        }
        reference = state.reference
        if reference is not None and reference.status == "error":
            reference = None
        s.decode = self.client.submit(
            decode_task, self.plugin.name, plan.name, state.batch, state.loaded, received,
            [s.shards[w] for w in received], reference, meta,
            key=f"decode-b{state.batch}-{plan.name}-{self.token}", pure=False, retries=0,
            priority=-state.batch + 1, **self._resources,
        )
        self._watch(s.decode, ("decode", state.batch, plan.name, -1))

    def _fail(self, state: _BatchState, s: _SchemeState, reason: str) -> None:
        logger.warning("batch %d of %s failed: %s", state.batch, s.plan.name, reason)
        self.client.cancel(s.shards)
        s.result = failed_record(s.plan.name, state.batch, s.plan.num_workers, s.start_wall)
        s.result["error"] = reason
        s.done = True

    def _on_decode(self, batch: int, scheme: str, fut) -> None:
        state = self._inflight[batch]
        s = state.schemes[scheme]
        if fut.status == "finished":
            s.done = True  # its record is gathered with the batch's others, in one round trip
        else:
            self._fail(state, s, f"decode failed: {fut.exception()!r}")

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
                s.result = r if r is not None else dict(
                    failed_record(s.plan.name, state.batch, s.plan.num_workers, s.start_wall), error="lost")
        return [s.result for s in state.schemes.values()]

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, work: Iterable[tuple[int, list[str]]], on_batch_done: Callable[[int, list[dict]], None] | None = None) -> list[dict]:
        """Run every ``(batch, schemes)`` of ``work``; return one metrics dict per (scheme, batch).

        ``on_batch_done(batch, records)`` is called on the driver as each batch completes, with one record
        per scheme (status, metrics, received/failed masks, latencies; see ``decode_task``): the caller
        writes them to the store. Batches are submitted lazily, at most ``max_in_flight`` at once.
        """
        self.client.register_plugin(self.plugin, name=self.plugin.name)
        results: list[dict] = []
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
                if not self._inflight:
                    break
                wake = INF
                for state in list(self._inflight.values()):
                    for s in state.schemes.values():
                        if s.delays is None and s.decode is None and not s.done:
                            wake = min(wake, self._maybe_cut(state, s))
                timeout = None if not math.isfinite(wake) else max(0.0, wake - time.monotonic())
                try:
                    t, tag, fut = self._events.get(timeout=timeout)
                except queue.Empty:
                    continue
                kind, batch, scheme, w = tag
                if kind == "shard":
                    self._on_shard(t, batch, scheme, w, fut)
                else:
                    self._on_decode(batch, scheme, fut)
                state = self._inflight.get(batch)
                if state is not None and state.done:
                    del self._inflight[batch]
                    batch_results = self._gather(state)
                    results.extend(batch_results)
                    if on_batch_done is not None:
                        on_batch_done(batch, batch_results)
        finally:
            leftovers = [f for st in self._inflight.values() for s in st.schemes.values() for f in s.shards]
            if leftovers:
                self.client.cancel(leftovers)
            self._inflight.clear()
            try:
                self.client.unregister_worker_plugin(self.plugin.name)
            except Exception:  # pragma: no cover - the cluster may be gone already
                logger.debug("could not unregister plugin %s", self.plugin.name, exc_info=True)
        return results
