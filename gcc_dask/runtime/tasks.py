"""Code that runs on the Dask workers: the run plugin, and the reference/shard/decode/score tasks.

Task functions live in the package (never in ``__main__``) so that workers import them instead of
receiving pickled closures. Every task takes the plugin's name and looks up the heavy state (the loaded
workload, the coding schemes, the source, the store sink) on its worker: it is shipped once per worker
by :class:`RunPlugin`, never once per task.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from distributed import WorkerPlugin, get_worker
from distributed.worker import thread_state

from gcc_dask import metrics
from gcc_dask.errors import GccDaskError, InvalidInputError, StoreError, WorkloadError, WriteRefusedError
from gcc_dask.workloads import load_workload

logger = logging.getLogger(__name__)

#: a sleeping straggler is woken by its plugin's transition hook; it also re-checks its own state this
#: often, in seconds, in case a wake-up is missed
POLL_INTERVAL_S = 0.1
_GONE = ("cancelled", "released", "forgotten")


class RunPlugin(WorkerPlugin):
    """Per-run worker state: the workload (loaded once per worker), the codes, the source, the sink.

    Parameters
    ----------
    name : str
        Unique per run; tasks find the plugin as ``get_worker().plugins[name]``.
    workload : gcc_dask.workloads.Workload
        Picklable description of f; ``workload.load()`` is called once, in :meth:`setup`.
    codes : dict of str to CodingScheme
    source : gcc_dask.sources.Source
    sink : callable
        ``sink(kind, batch, **arrays)`` writes a batch's arrays from a worker: ``kind="inputs"`` with
        ``labels`` and ``reference``, or a scheme name with ``decoded``.
    layout : gcc_dask.composition.BatchLayout
        Which samples each batch holds, in which groups and positions (K = ``layout.group_size``).
    use_gpu : bool
        Move inputs to CuPy before encoding.
    cache_batches : int
        Batches kept per worker, read (:meth:`load`, :meth:`blocks`); the run's batches in
        flight.
    order_from : callable, optional
        ``order_from()`` returns ``layout.order`` (int64, shape (num_samples,)), e.g. a
        :class:`gcc_dask.store.SampleIndex` of the run's store. When given, the plugin is pickled without
        the order (O(num_samples) bytes that would pass through the scheduler) and each worker reads it in
        :meth:`setup`.
    output_shape : tuple of int, optional
        f's output shape for one sample, as its probe on the driver gave it: every output of f on n rows
        (a shard's block, a batch's reference) must then have shape ``(n, *output_shape)``
        (:func:`check_output`). None checks nothing.
    """

    def __init__(self, name, workload, codes, source, sink, layout, use_gpu=False, cache_batches=4,
                 order_from: Callable[[], np.ndarray] | None = None,
                 output_shape: tuple[int, ...] | None = None):
        self.name = name
        self.workload = workload
        self.codes = codes
        self.source = source
        self.sink = sink
        self.layout = layout
        self.order_from = order_from if layout.order is not None else None
        self.use_gpu = use_gpu
        self.output_shape = None if output_shape is None else tuple(int(d) for d in output_shape)
        self.cache_batches = max(1, int(cache_batches))
        self.fn: Callable | None = None
        self.closed = False
        self._sleepers: dict[str, threading.Event] = {}
        self._batches: OrderedDict[int, dict[str, _Slot]] = OrderedDict()
        self._batches_lock = threading.Lock()
        self._chunk_pool: weakref.WeakValueDictionary[int, _Slot] = weakref.WeakValueDictionary()

    def setup(self, worker) -> None:
        if self.order_from is not None and self.layout.order is None:
            self.layout = dataclasses.replace(self.layout, order=self.order_from())
        self.fn = load_workload(self.workload)
        self._quiet = _ErasureLogFilter(self.name_token)
        logging.getLogger("distributed.worker").addFilter(self._quiet)

    def teardown(self, worker) -> None:
        """Unregistered (the run ended, or a new run on the same store removed it): from now on the run's tasks
        still running on this worker write nothing (:func:`_write`)."""
        self.closed = True
        quiet = getattr(self, "_quiet", None)
        if quiet is not None:
            logging.getLogger("distributed.worker").removeFilter(quiet)

    @property
    def name_token(self) -> str:
        """The run's token, the last part of its task keys (``eval-b3-w7-gcc-<token>``)."""
        return self.name.rsplit("-", 1)[-1]

    def transition(self, key, start, finish, **kwargs) -> None:
        """Wake a sleeping straggler the moment the client cancels it (WorkerPlugin hook)."""
        if finish in _GONE:
            event = self._sleepers.get(key)
            if event is not None:
                event.set()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["fn"] = None  # never ship a loaded model
        state["closed"] = False
        state.pop("_quiet", None)
        state["_sleepers"] = {}
        state["_batches"] = OrderedDict()
        del state["_batches_lock"]
        del state["_chunk_pool"]
        if self.order_from is not None:  # read back by setup on the worker
            state["layout"] = dataclasses.replace(self.layout, order=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._sleepers = {}
        self._batches_lock = threading.Lock()
        self._chunk_pool = weakref.WeakValueDictionary()

    def _memo(self, batch: int, what: str, build: Callable[[], Any]) -> Any:
        """``build()`` once per (batch, what) on this worker, whatever the number of threads asking.

        The last ``cache_batches`` batches are kept. A build that raises is not kept: the next task asks
        again (and, for bad data, raises the same error).
        """
        with self._batches_lock:
            slots = self._batches.get(batch)
            if slots is None:
                slots = self._batches[batch] = {}
                while len(self._batches) > self.cache_batches:
                    self._batches.popitem(last=False)
            else:
                self._batches.move_to_end(batch)
            slot = slots.get(what)
            if slot is None:
                slot = slots[what] = _Slot()
        return slot.get(build)

    def chunk(self, batch: int, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Chunk `index` of a chunked source (:meth:`~gcc_dask.sources.Source.read_chunk`), as `batch` reads it.

        Read once per worker while any batch that holds it is kept (:meth:`_memo`): the batch keeps the
        chunks it read, and a batch of the same window asking for one of them gets the same arrays (a pool of
        weak references), so a worker decodes each chunk of a batch's samples at most once per batch, and
        usually once for all the batches in flight (docs/pipeline.rst, section 'Reads that follow the chunks').
        """
        held = self._memo(batch, "chunks", _HeldChunks)
        slot = held.get(index)
        if slot is None:
            with self._batches_lock:
                slot = self._chunk_pool.get(index)
                if slot is None:
                    slot = self._chunk_pool[index] = _Slot()
            slot = held.setdefault(index, slot)
        return slot.get(lambda: self.source.read_chunk(index))

    def _chunk_reader(self, batch: int) -> Callable[[int], Any] | None:
        """``chunk(i)`` for :meth:`~gcc_dask.sources.Source.take` of `batch`; None for a source without chunks."""
        if getattr(self.source, "chunks", None) is None:
            return None
        return functools.partial(self.chunk, batch)

    def load(self, batch: int) -> Loaded:
        """Batch ``batch``'s samples read from the source, in slot order (once per worker, see :meth:`_memo`;
        a chunked source's chunks through :meth:`chunk`).

        A :class:`~gcc_dask.errors.GccDaskError` raised here (or in :meth:`blocks` and the encode of
        :meth:`shard_input`) is marked as the batch's own (:func:`is_bad_batch`): the driver stops the run on
        it, where an error of f is an erasure.
        """
        return self._memo(batch, "", _marking(
            lambda: _read_batch(self.source, self.layout, batch, self._chunk_reader(batch))))

    def blocks(self, batch: int) -> Any:
        """Batch ``batch``'s samples as the encoder's input: ``(K, G, *shape)``, CuPy when the run uses a GPU.

        :meth:`load` laid out by :meth:`~gcc_dask.composition.BatchLayout.to_blocks` (G groups, position k of
        every group on α_k; no copy on the host), moved to the device once per worker (see :meth:`_memo`).
        """
        def build():
            x = self.layout.to_blocks(self.load(batch).x)
            if self.use_gpu:
                import cupy

                x = cupy.asarray(x)
            return x

        return self._memo(batch, "blocks", _marking(build))

    def shard_input(self, batch: int, scheme: str, worker: int) -> Any:
        """What shard `worker` of `batch` evaluates for `scheme`: its coded block, ``(G, *shape)``.

        For a selection scheme (uncoded, replication) that is one position of every group unchanged, read
        from the source on its own (:meth:`~gcc_dask.composition.BatchLayout.position_samples`: G contiguous
        slots), with no encode and without reading the rest of the batch (from a chunked source: only the
        chunks that hold those samples, through :meth:`chunk`, so the worker's other shards of the batch
        read none of them again). For the others, the shard's own coded block,
        ``code.encode(blocks, workers=[worker])`` of :meth:`blocks`: each worker reads the batch once and
        encodes only the rows of the shards it runs, so a batch costs N rows of encoding in all and no coded
        input moves between workers. It is the same encode of the same data on every worker, so a copy of a
        shard run elsewhere holds the same bits.
        """
        code = self.codes[scheme]
        k = code.selected_input(worker)
        if k is None:
            x = self.blocks(batch)
            return _marking(lambda: code.encode(x, workers=(worker,))[0])()

        def build():
            x, _ = self.source.take(self.layout.position_samples(batch, k), self._chunk_reader(batch))
            code.check_input(x)
            if self.use_gpu:
                import cupy

                x = cupy.asarray(x)
            return x

        return self._memo(batch, f"position-{k}", _marking(build))


#: attribute set on a GccDaskError raised while reading or encoding a batch (it survives pickling: exceptions
#: pickle their ``__dict__``)
_BAD_BATCH = "gcc_dask_bad_batch"


def _marking(build: Callable[[], Any]) -> Callable[[], Any]:
    def run():
        try:
            return build()
        except GccDaskError as exc:
            setattr(exc, _BAD_BATCH, True)
            raise

    return run


def is_bad_batch(exc: BaseException) -> bool:
    """True for an error raised while reading or encoding a batch (bad data), not by f or a dead worker."""
    return isinstance(exc, GccDaskError) and getattr(exc, _BAD_BATCH, False)


def is_storage_error(exc: BaseException) -> bool:
    """True for the :class:`~gcc_dask.errors.StoreError` a task raises when it cannot write the store."""
    return isinstance(exc, StoreError)


def _write(p: "RunPlugin", kind: str, batch: int, **arrays: Any) -> Any:
    """``p.sink(...)`` (returning what it returns: a scheme's ``chunk_digest`` for the batch's record), turning a file-system failure (``OSError``) into one :class:`StoreError` line naming what
    failed.

    An orphan writes nothing: a task whose plugin was torn down (its run ended, or a new run on the same store
    removed it) returns without writing, and a write the store refuses (:class:`WriteRefusedError`: another
    run's token, or no store) is dropped quietly when the task was cancelled (its driver is gone). A live run
    whose write is refused stops with that error's one line."""
    if p.closed:
        logger.debug("not writing %s of batch %s: the run's plugin was removed", kind, batch)
        return None
    try:
        return p.sink(kind, batch, **arrays)
    except WriteRefusedError as e:
        if p.closed or is_cancelled():
            logger.info("an orphaned task of an ended run did not write %s of batch %s: %s", kind, batch, e)
            return None
        raise
    except OSError as e:
        where = getattr(p.sink, "path", "the store")
        arrays_text = ", ".join(f"{kind}/{name}" for name in arrays)
        raise StoreError(f"store: cannot write {arrays_text} of batch {batch} to {where!r} "
                         f"({type(e).__name__}: {e}); fix the store's file system and run the same command "
                         "again to resume") from None


class _Slot:
    """A value built once by the first thread that asks; the others wait for it."""

    __slots__ = ("lock", "done", "value", "__weakref__")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = False
        self.value: Any = None

    def get(self, build: Callable[[], Any]) -> Any:
        with self.lock:
            if not self.done:
                self.value = build()
                self.done = True
            return self.value


class _HeldChunks(dict):
    """The chunk slots a batch has read (chunk index -> :class:`_Slot`), kept while the batch is: the strong
    references that keep them in :attr:`RunPlugin._chunk_pool`. ``setdefault`` is atomic under the GIL."""

    __slots__ = ()


class _ErasureLogFilter(logging.Filter):
    """Drop the worker's "Compute Failed" record of one of this run's shards (an erasure the run records in the
    store, ``<scheme>/failed``) and log it at DEBUG level instead: a failing shard is decoded around, and a
    terminal full of worker tracebacks buries the one line that matters. Errors of other tasks pass."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        try:
            text = record.getMessage()
        except Exception:  # pragma: no cover - a record whose arguments do not format
            return True
        key = text.split("Key:", 1)[1].split(None, 1)[0] if "Key:" in text else ""
        if text.startswith("Compute Failed") and key.startswith("eval-b") and key.endswith(self.token):
            logger.debug("shard failed (an erasure): %s", text.splitlines()[1:2])
            return False
        return True


def _plugin(name: str) -> RunPlugin | None:
    """The run's plugin on this worker; None once the run has ended (its plugin unregistered): a task still
    running then returns None quietly, nobody waits for its result."""
    plugin = get_worker().plugins.get(name)
    if plugin is not None and plugin.fn is None:  # setup() not run on this worker yet (it joined mid-run)
        plugin.setup(get_worker())
    return plugin


def to_host(a: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or CuPy array (``cupy.ndarray.get``)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def is_cancelled() -> bool:
    """True when the running task has been cancelled (released) by the client.

    ``client.cancel`` does not interrupt a running task; the worker only marks it ``cancelled`` and waits
    for it to return. This reads the task's own state on its worker (free, but an internal API of
    distributed: ``tests/runtime/test_cancel.py`` pins it). If the internal API moves, it returns False:
    the straggler then runs to the end of its injected delay instead of stopping early.
    """
    try:
        ts = get_worker().state.tasks.get(thread_state.key)
    except Exception:  # pragma: no cover - internal API moved
        return False
    return ts is None or ts.state in ("cancelled", "released", "forgotten")


def cooperative_sleep(seconds: float, plugin: RunPlugin | None = None) -> bool:
    """Sleep ``seconds`` unless the running task is cancelled first. Returns False if cancelled.

    With ``plugin``, the sleep waits on an event that :meth:`RunPlugin.transition` sets when the worker
    marks this task cancelled, so the thread is freed at once; either way the task's own state is re-checked
    every ``POLL_INTERVAL_S``.
    """
    end = time.monotonic() + seconds
    event = threading.Event()
    key = getattr(thread_state, "key", None)
    if plugin is not None and key is not None:
        plugin._sleepers[key] = event
    try:
        while True:
            if is_cancelled():
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            if event.wait(min(POLL_INTERVAL_S, left)):
                return False
    finally:
        if plugin is not None and key is not None:
            plugin._sleepers.pop(key, None)


@dataclass(frozen=True)
class Loaded:
    """A batch's samples read from the source, in slot order (see :class:`~gcc_dask.composition.BatchLayout`)."""

    x: np.ndarray  # (n_real, *sample_shape)
    labels: np.ndarray | None  # (n_real,)
    n_real: int


def _read_batch(source, layout, batch: int, chunk: Callable[[int], Any] | None = None) -> Loaded:
    """Read the samples of ``batch`` (``layout.samples(batch)``, dataset indices in slot order), a chunked
    source's chunks through `chunk` (see :meth:`RunPlugin.chunk`)."""
    x, labels = source.take(layout.samples(batch), chunk)
    return Loaded(x=x, labels=None if labels is None else np.asarray(labels), n_real=x.shape[0])


def check_output(p: RunPlugin, y: Any, rows: int, what: str) -> Any:
    """`y`, f's output on `rows` samples of `what`, once its shape is ``(rows, *p.output_shape)``: the shape f gave
    on its probe (one sample, on the driver) with `rows` rows. A shape comparison, nothing per row.

    Raises
    ------
    WorkloadError
        One line naming f, the shape it returned and the one expected. It is an error of f like any other: a
        shard's is an erasure (said once per scheme when a batch has no estimate), a reference's leaves the
        batch's reference unknown (NaN). Without it an output of the same size in another layout (f transposing
        a block of several rows, not one) would be reshaped into wrong rows without a word.
    """
    expected = getattr(p, "output_shape", None)
    if expected is None:
        return y
    got = tuple(int(d) for d in np.shape(y))
    want = (int(rows), *expected)
    if got != want:
        params = getattr(p.workload, "params", None) or {}
        label = params.get("function") or params.get("path") or params.get("name") or params.get("kind", "f")
        raise WorkloadError(
            f"workload: f ({label}) returned shape {got} for {what} of {rows} samples; expected {want}, the "
            f"shape it gave for one sample ({(1, *expected)}) with {rows} rows: f must map (n, ...) samples to "
            "(n, ...) outputs for every n")
    return y


def reference_task(name: str, batch: int, write: bool = True, evaluate: bool = True,
                   output_size: int | None = None) -> np.ndarray | None:
    """Compute f(x) uncoded for the batch's samples (slot order); write labels and reference; return it.

    With ``evaluate=False`` (a run without a reference) only the labels are written, and None is returned.
    When f raises on the uncoded batch, the batch's reference is unknown: with ``output_size`` (f's flattened
    output size) it is written as NaN rows with the labels, so that the batch is not pending work (an outcome of
    f, which a resume would only meet again), and the error is raised (the batch's records keep no metrics).
    A batch whose reference could not be *written* stays pending (docs/pipeline.rst, section 'Resuming').
    """
    p = _plugin(name)
    if p is None:
        return None
    loaded = p.load(batch)
    if not evaluate:
        if write:
            _write(p, "inputs", batch, labels=loaded.labels)
        return None
    try:
        ref = to_host(check_output(p, p.fn(loaded.x), loaded.n_real, "the batch")).reshape(loaded.n_real, -1)
    except Exception:
        if write and output_size is not None:
            unknown = np.full((loaded.n_real, int(output_size)), np.nan, dtype=np.float32)
            _write(p, "inputs", batch, reference=unknown, labels=loaded.labels)
        raise
    if write:
        _write(p, "inputs", batch, reference=ref, labels=loaded.labels)
    return ref


@dataclass(frozen=True)
class ShardResult:
    """What a shard sends back: its output, and when it started and finished (``time.time()``)."""

    worker: int
    output: Any  # (G, *out) numpy or cupy: f on the shard's coded block of G samples
    started: float
    finished: float


_SHARD_SECONDS: dict[str, float] = {}
_SHARD_SECONDS_LOCK = threading.Lock()


def shard_seconds() -> dict[str, float]:
    """Seconds that shard tasks have held a thread of this process, per scheme label, since it started: every
    :func:`evaluate_shard` from its start to its return, an injected delay included, and a shard cancelled
    while it slept until it stopped. Summed over a cluster (``client.run(shard_seconds)``) before and after a
    run, it is the compute the run's shards spent (what ``gcc-dask bench pipeline``'s ``tail`` section
    compares with a plain map's)."""
    with _SHARD_SECONDS_LOCK:
        return dict(_SHARD_SECONDS)


def evaluate_shard(name: str, scheme: str, batch: int, worker: int, delay_s: float = 0.0) -> ShardResult | None:
    """Evaluate f on coded block ``worker`` of ``batch`` for ``scheme``, after an injected (cooperative) delay.

    One call of f on the block's G samples. The coded block comes from :meth:`RunPlugin.shard_input` (the
    batch read once per worker, the shard's own row encoded). Returns None when the
    shard was cancelled during its delay: it frees its thread at once. An exception raised by f, or by
    reading or encoding the batch, propagates: the driver records the shard as an erasure, never retries
    it (and stops the run with one line when every shard of a batch failed on bad data). The time it held
    its thread is added to :func:`shard_seconds`.
    """
    started = time.time()
    t0 = time.perf_counter()
    try:
        p = _plugin(name)
        if p is None:
            return None
        x = p.shard_input(batch, scheme, worker)
        if delay_s > 0 and not cooperative_sleep(delay_s, p):
            return None
        y = check_output(p, p.fn(x), x.shape[0], "a shard's block")
        return ShardResult(worker=worker, output=y, started=started, finished=time.time())
    finally:
        spent = time.perf_counter() - t0
        with _SHARD_SECONDS_LOCK:
            _SHARD_SECONDS[scheme] = _SHARD_SECONDS.get(scheme, 0.0) + spent


def decode_by_row(code: Any, Y: Any, received: np.ndarray) -> np.ndarray:
    """``code.decode(Y, received)`` when some of f's output rows hold NaN or Inf (f's own NaN on a few samples,
    or a value beyond float32's range): each non-finite row of a worker's block, ``Y[n, b]``, is left out, and the
    estimates that use it (``decoder_matrix(received)[k, n] != 0``: one sample for an exact selection such as
    ``uncoded``, the whole group ``b`` for a code that mixes every result) are NaN; every other estimate is
    decoded as usual. Without it one NaN row failed the decode of the whole batch in every scheme (uncoded's exact
    rows included).

    Raises
    ------
    InvalidInputError
        When `Y` is finite (the decode itself overflowed): as :meth:`decode` raises it.
    """
    Yh = np.asarray(to_host(Y))
    bad = ~np.isfinite(Yh).reshape(Yh.shape[0], Yh.shape[1] if Yh.ndim > 1 else 1, -1).all(axis=-1)  # (|F|, B)
    if not bad.any():
        return to_host(code.decode(Y, received))  # raises what it raised
    clean = np.where(np.isfinite(Yh), Yh, 0).astype(Yh.dtype, copy=False)
    decoded = np.array(to_host(code.decode(clean, received)), dtype=Yh.dtype)
    uses = (np.abs(np.asarray(code.decoder_matrix(received))) > 0).astype(np.float64)  # (K, |F|)
    affected = (uses @ bad.astype(np.float64)) > 0  # (K, B)
    decoded.reshape(affected.shape + (-1,))[affected] = np.nan
    return decoded


def decode_task(
    name: str,
    scheme: str,
    batch: int,
    n_real: int,
    received: list[int],
    results: list[ShardResult],
    meta: dict,
) -> dict:
    """Decode the kept shard results, write ``decoded``, and return the batch's record.

    Nothing but the kept shards is an input: the uncoded reference is joined later (:func:`score_task`),
    off the latency path. ``meta`` carries what the driver decided: ``status`` (int), ``cutoff_s``,
    ``latency_s`` (N,), ``failed`` (N,) bool, ``batch_start`` (``time.time()`` at submission),
    ``score`` (bool: keep the decoded rows in the record for :func:`score_task`) and ``backups`` (the backup
    copies the batch launched, ``speculative``; 0 if absent). ``latency_s`` None: the
    decode was submitted with its shards (a scheme that keeps every result, on the wall clock), and each
    shard's latency is taken from its result (``finished - batch_start``), the cutoff as the largest. The record (status,
    received/failed masks, latencies) goes back to the driver, which writes it to the store after this
    task has written ``decoded``: the status is always written last. The record's ``chunk_digest`` is what
    the write of ``decoded`` returned (:func:`~gcc_dask.store.write_decoded`), written with it.
    """
    from gcc_dask.errors import NotEnoughResultsError

    p = _plugin(name)
    if p is None:
        return None
    code = p.codes[scheme]
    status = meta["status"]
    decoded = None
    error_estimate = float("nan")
    nonfinite = overflow = 0  # rows of f's outputs that held NaN or Inf; estimates beyond float32's range
    if results and status != 4:
        ys = [r.output for r in results]
        if p.use_gpu and any(not isinstance(y, np.ndarray) for y in ys):
            import cupy

            Y = cupy.stack([cupy.asarray(y) for y in ys])
        else:
            Y = np.stack([to_host(y) for y in ys])
        idx = np.asarray(received, dtype=np.int64)
        try:
            # the plain decode, so that code.decode(Y, received) on the stored received set reproduces
            # these estimates bit for bit (the return_error path's stacked matmul rounds differently)
            by_row = False
            try:
                decoded = code.decode(Y, idx)
            except InvalidInputError:  # NaN or Inf in f's output: those rows only, when there are any
                decoded, by_row = decode_by_row(code, Y, idx), True
                Yh = np.asarray(to_host(Y))
                nonfinite = int((~np.isfinite(Yh.reshape(Yh.shape[0] * max(Yh.shape[1] if Yh.ndim > 1 else 1, 1),
                                                         -1))).any(axis=1).sum())
            if code.name in ("gcc", "letcc") and not by_row:
                error_estimate = float(np.mean(to_host(code.decode(Y, idx, return_error=True)[1])))
            decoded = to_host(decoded)
        except NotEnoughResultsError:
            decoded = None
    if decoded is None:
        if status != 4:
            status = 3
        decoded = np.full((n_real, meta["output_size"]), np.nan, dtype=np.float32)
    else:
        decoded = p.layout.from_blocks(decoded, n_real)
        decoded = decoded.reshape(n_real, -1)
        if status in (1, 2) and not metrics.decodable_rows(decoded).any():
            status = 3
    received_mask = np.zeros(code.num_workers, dtype=bool)
    received_mask[np.asarray(received, dtype=np.int64)] = True
    if np.issubdtype(decoded.dtype, np.floating) and np.finfo(decoded.dtype).max > np.finfo(np.float32).max:
        with np.errstate(invalid="ignore"):
            overflow = int((np.abs(decoded) > np.finfo(np.float32).max).any(axis=1).sum())
    with np.errstate(over="ignore"):  # beyond float32's range: ±inf, counted and said once by the run
        decoded = decoded.astype(np.float32)
    filled = code.filled(received_mask) if status in (1, 2) else np.zeros(code.num_inputs, dtype=bool)
    if filled.any():  # the positions a fill estimated, for every group of the batch, in slot order
        g = p.layout.batch_groups(batch)
        filled = p.layout.from_blocks(np.repeat(filled[:, None], g, axis=1), n_real)
        digest = _write(p, scheme, batch, decoded=decoded, filled=filled)
    else:
        digest = _write(p, scheme, batch, decoded=decoded)
    latency, cutoff = meta["latency_s"], float(meta["cutoff_s"])
    if latency is None:  # submitted with its shards (a scheme that keeps every result): time them here
        latency = np.full(code.num_workers, np.nan)
        latency[np.asarray(received, dtype=np.int64)] = [r.finished - meta["batch_start"] for r in results]
        cutoff = float(np.max(latency[np.asarray(received, dtype=np.int64)])) if received else math.nan
    record = {
        "scheme": scheme, "batch": batch, "status": status, "mse": float("nan"), "rel_acc": float("nan"),
        "cutoff_s": cutoff, "batch_latency_s": time.time() - meta["batch_start"],
        "error_estimate": error_estimate, "received_mask": received_mask,
        "latency_s": np.asarray(latency, dtype=np.float64),
        "failed_mask": np.asarray(meta["failed"], dtype=bool),
        "n_backups": int(meta.get("backups", 0)),
        "chunk_digest": digest,  # binds the chunks just written to their place (docs/store.rst, 'Integrity')
        "nonfinite_rows": nonfinite, "overflow_rows": overflow,  # said once by the run, with their counts
    }
    if meta.get("score"):
        record["decoded"] = decoded
    return record


def score_task(record: dict, reference: np.ndarray) -> dict:
    """Join a decoded batch with its uncoded reference: the record with ``mse`` and ``rel_acc`` filled in.

    Runs after :func:`decode_task` and the batch's :func:`reference_task`, so the reference never delays a
    decode. Drops the record's ``decoded`` rows (they are in the store already).
    """
    if record is None:  # the run ended before its decode ran
        return None
    record = dict(record)
    decoded = record.pop("decoded", None)
    if decoded is not None and record["status"] in (1, 2):
        record["mse"] = metrics.mse(decoded, reference)
        record["rel_acc"] = metrics.rel_acc(decoded, reference)
    return record


def strip_record(record: dict) -> dict:
    """A record without the decoded rows that :func:`decode_task` keeps for scoring."""
    return {k: v for k, v in record.items() if k != "decoded"}


def failed_record(scheme: str, batch: int, num_workers: int, batch_start: float) -> dict:
    """The record of a batch that could not run at all (its load or encode failed): status 4, failed.

    Built on the driver: its ``decoded`` rows keep the store's NaN fill.
    """
    return {
        "scheme": scheme, "batch": batch, "status": 4, "mse": float("nan"), "rel_acc": float("nan"),
        "cutoff_s": float("nan"), "batch_latency_s": time.time() - batch_start, "error_estimate": float("nan"),
        "received_mask": np.zeros(num_workers, dtype=bool), "latency_s": np.full(num_workers, np.nan),
        "failed_mask": np.ones(num_workers, dtype=bool), "n_backups": 0,
    }
