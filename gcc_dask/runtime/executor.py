"""The driver loop: submit coded batches, apply the cutoff, cancel stragglers, decode, bound the work in flight.

This is the Dask shell of the runtime (docs/architecture.rst, section 'The shell'): every decision is taken by
pure code, a scheme's batch by its :class:`~.batch_machine.BatchMachine` and the window of batches by
:mod:`~.window`, and what the shell keeps of the batches in flight by :mod:`~.inflight`, :mod:`~.quiet`,
:mod:`~.keys`, :mod:`~.lines` and :mod:`~.page_events`; :class:`BatchRunner` turns futures into their events and
their actions into futures. This module keeps the loop; :mod:`~.runner_tasks` submits tasks and carries out the
machine's actions, :mod:`~.runner_results` fetches records and handles failed tasks, :mod:`~.runner_cluster` the
plugin, the workers (quiet ones included), a lost scheduler and the cancels.

Per batch ``b`` and scheme ``s`` (docs/pipeline.rst, sections 'Cutoff' and 'Failures and erasures'): N shard
futures with keys ``eval-b{b}-w{n}-{s}-{token}`` (``pure=False``, ``retries=0``; each encodes its own input, a
coded one from the batch's one read ``load-b{b}-{token}`` on a cluster of several workers), then one decode over the kept shards once the cutoff
is final; the others are cancelled and stop cooperatively. A score task joins the decode with the uncoded
reference, off the latency path. Futures report through ``add_done_callback`` into one queue, which the loop
drains with a timeout (wall-clock deadlines, the worker watchdog). A shard lost with its worker is an erasure,
never re-run; the other tasks of a batch are submitted again when they die with a worker, at most
:data:`MAX_ATTEMPTS` times. With a latency model the cutoff runs on the *virtual clock* of the drawn latencies
(the kept set depends on the seed alone); without one, or with ``stragglers.clock: wall``, on the wall clock.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

from gcc_dask import dashboard
from gcc_dask.errors import GccDaskError
from gcc_dask.runtime.events import FutureEvents
from gcc_dask.runtime.inflight import finished, hand_over, leftovers, loop_timeout, take, wall_clock_cutoffs
from gcc_dask.runtime.lines import LOAD_SAY_S, load_line  # noqa: F401 (LOAD_SAY_S: importable from here)
from gcc_dask.runtime.page_events import QuietPage, done_event, end_event
from gcc_dask.runtime.plans import INF, MAX_ATTEMPTS, SchemePlan, _BatchState, _SchemeState  # noqa: F401
from gcc_dask.runtime.plans import clock_and_spares
from gcc_dask.runtime.rescue import quiet_line
from gcc_dask.runtime.runner_cluster import ClusterRunner, _LostFetchLogFilter  # noqa: F401
from gcc_dask.runtime.runner_results import ResultsRunner, _error_of, _final, _samples_text  # noqa: F401
from gcc_dask.runtime.runner_tasks import TasksRunner
from gcc_dask.runtime.signals import SignalFlag
from gcc_dask.runtime.tasks import RunPlugin
from gcc_dask.runtime.window import Window, WorkerLoss, refill_size, takes_more
from gcc_dask.runtime.workers import WorkerList, WorkersReplaced

logger = logging.getLogger(__name__)

# the names other modules and tests import from here, as before the split, stay importable from here:
# quiet_line, _LostFetchLogFilter, _error_of, _final, _samples_text, _BatchState, _SchemeState, MAX_ATTEMPTS, INF
__all__ = ["SchemePlan", "BatchRunner", "quiet_line"]

#: the loop wakes at least this often (seconds) to check the workers and to stay responsive to Ctrl-C
MAX_WAIT_S = 0.5


class BatchRunner(TasksRunner, ResultsRunner, ClusterRunner):
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
    keep_decoded : bool
        Hand each scheme's decoded rows back to the driver in its batch record (``record["decoded"]``, float32 of
        shape (samples of the batch, output size), in slot order), beside writing them to the store: what
        :func:`gcc_dask.coded_map` returns without reading the store again. Records that lost them on a rare
        recovery path (a decode redone after its worker died) come without.
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
        keep_decoded: bool = False,
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
        self.keep_decoded = bool(keep_decoded)
        self.latency_per_sample = bool(latency_per_sample)
        self.worker_timeout = float(worker_timeout)
        self._told: set[str] = set()  # schemes whose first failed batch was told to the user (_tell_failure)
        self.virtual_clock, lazy = clock_and_spares(latency_model, virtual_clock, spares)
        self._regular = {p.name: p.regular(lazy) for p in plans}
        self.echo = echo or (lambda _msg: None)
        self.warn = warn or self.echo  # what the user must see even without echo (a RuntimeWarning in the library)
        self.layout = plugin.layout
        self.token = plugin.name_token  # the keys end with it (the workers' log filter recognises them)
        self._resources = {"resources": {"GPU": 1}} if use_gpu else {}
        self._events = FutureEvents(client)
        self._window = Window()  # per scheme: the latest batch that reached its cutoff (the others overtaken)
        self._loss = WorkerLoss(worker_timeout)  # the wait once every worker is gone
        self._submitted = 0  # batches submitted so far (the next batch's seq)
        self.load_s = 0.0  # seconds f took to load on the workers (the plugin's set-up), once run() started
        self._inflight: dict[int, _BatchState] = {}
        # the workers shards are spread over (refreshed off the loop; unresponsive ones ended)
        self._workers = WorkerList(client, gpu=use_gpu, unresponsive_after=unresponsive_after, echo=self.echo)
        self._suspected: set[str] = set()  # workers found frozen before the run (suspect)
        self._said_quiet: set[str] = set()  # quiet workers the run has said it acted on: said once per run
        self._page_quiet = QuietPage(self.token)  # the quiet workers as the run page last heard of them
        self._canceller: ThreadPoolExecutor | None = None  # cancels stragglers, off the loop (_cancel)
        self._fetch_gen = 0  # the fetch whose records the loop takes (an abandoned one's are dropped)
        self._signals = SignalFlag()
        self._scheduler_address = getattr(getattr(client, "scheduler", None), "address", None)

    # -- the loop ---------------------------------------------------------------------------------
    @property
    def refill_size(self) -> int:
        """Batches submitted together once that many slots are free (:func:`~.window.refill_size`)."""
        return refill_size(self.max_in_flight)

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
        self.load_s = time.perf_counter() - loading
        if line := load_line(self.load_s):
            self.echo(line)
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
                if not exhausted and takes_more(free, len(self._inflight), self.max_in_flight):
                    batches, exhausted = take(todo, free)
                    if batches:
                        self._submit_batches(batches)
                if self._workers.due or self._workers.answered:
                    self._check_workers()  # also while events flow: an unresponsive worker stalls only some
                    fetching, ready = self._rerun_quiet(fetching, ready)
                if self._workers.replaced:  # every worker was replaced: rerun what was lost with them
                    self._workers.replaced = False
                    held = ready + (fetching or [])
                    if fetching is not None:  # abandon the fetch (its old tasks are cancelled below)
                        fetching, self._fetch_gen = None, self._fetch_gen + 1
                    ready = self._restart_in_flight(held)
                if ready and fetching is None:
                    fetching, ready = self._fetch(ready), []
                if not self._inflight and fetching is None:
                    break
                wake = INF
                for state, s in wall_clock_cutoffs(self._inflight.values()):
                    # the cutoff time moves only when a result arrives (_on_shard): look again when it is due,
                    # not on every event (bench: 1 ms per shard with 4 in flight)
                    if s.wake is None or s.wake <= time.monotonic():
                        s.wake = self._maybe_cut(state, s)
                    wake = min(wake, s.wake)
                timeout = loop_timeout(wake, time.monotonic(), MAX_WAIT_S)
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
                    try:
                        fetched = self._fetched(fetching, fut)
                    except WorkersReplaced:  # a record lost with the workers: the restart above makes it again
                        fetching, ready = None, fetching + ready
                        continue
                    for st, batch_results in zip(fetching, fetched):
                        dashboard.publish(self.client, done_event(self.token, st.batch,
                                                                  dashboard.record_summary(batch_results)))
                        hand_over([(st, batch_results)], on_batch_done, results)
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
                except WorkersReplaced:  # a handler's wait met new workers: the restart above runs its batch again
                    continue
                except GccDaskError:
                    # bad data, or a store that cannot be written: the run stops, but batches that finished
                    # keep their records (else a resume would redo them, and their status would stay 0 next to
                    # their written `decoded` rows)
                    done = list(zip(fetching, self._fetched(fetching, self._fetch_future))) if fetching else []
                    done += [(st, self._gather(st)) for st in finished(ready, self._inflight.values())]
                    fetching, ready = None, []
                    hand_over(done, on_batch_done, results)
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
            dashboard.publish(self.client, end_event(self.token, clean))
            restore()
            self._events.close()
            logging.getLogger("distributed.client").removeFilter(quiet)
            # after an error or Ctrl-C a fetch may hang on a lost cluster: never wait for it then
            self._fetcher.shutdown(wait=clean, cancel_futures=not clean)
            self._workers.close()
            if self._canceller is not None:  # a clean end waits for the last cancels (never a lost cluster)
                self._canceller.shutdown(wait=clean, cancel_futures=not clean)
                self._canceller = None
            left = leftovers(self._inflight.values())
            self._inflight.clear()
            try:
                if left:
                    self.client.cancel(left)
                if self._workers.quiet:  # a frozen worker would hold the run until it resumes: not waited for
                    threading.Thread(target=self._unregister, name="gcc-dask-unregister", daemon=True).start()
                else:
                    self._unregister()
            except Exception:  # pragma: no cover - the cluster may be gone already
                logger.debug("could not clean up plugin %s", self.plugin.name, exc_info=True)
        return results

