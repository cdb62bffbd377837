"""The run's state on each Dask worker: :class:`RunPlugin`, shipped once per worker, never once per task.

It holds the workload (loaded once per worker), the codes, the source, the store sink and the batch layout, and
keeps what a worker's tasks share: a batch's samples, its encoder input and the chunks it read, built once by the
first task that asks (:meth:`RunPlugin.load`, :meth:`RunPlugin.blocks`, :meth:`RunPlugin.shard_input`). The tasks
(:mod:`gcc_dask.runtime.tasks`) find it by name (:func:`_plugin`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from distributed import WorkerPlugin, get_worker

from gcc_dask.errors import GccDaskError
from gcc_dask.runtime.cancel import _GONE
from gcc_dask.runtime.lines import BAD_SAMPLES
from gcc_dask.workloads import load_workload

logger = logging.getLogger(__name__)

__all__ = ["Loaded", "RunPlugin"]


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
    layout : gcc_dask.batch_layout.BatchLayout
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
        fn = load_workload(self.workload)
        prepare = getattr(self.source, "prepare", None)  # a dataset decoded whole: here, not in the first batch
        if prepare is not None:
            prepare()
        # set last: fn None is how the registration tells a set-up that failed (runtime.registration)
        self.fn = fn
        self._quiet = _ErasureLogFilter(self.name_token)
        logging.getLogger("distributed.worker").addFilter(self._quiet)

    def teardown(self, worker) -> None:
        """Unregistered (the run ended, or a new run on the same store removed it): from now on the run's tasks
        still running on this worker write nothing (:func:`gcc_dask.runtime.tasks._write`)."""
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
        :meth:`shard_input`) is marked as the batch's own (:func:`~gcc_dask.runtime.tasks.is_bad_batch`): the
        driver stops the run on it, where an error of f is an erasure.
        """
        return self._memo(batch, "", _marking(
            lambda: _read_batch(self.source, self.layout, batch, self._chunk_reader(batch))))

    def read(self, batch: int) -> Loaded:
        """Batch ``batch``'s samples read from the source, in slot order, for the run's one read of the batch
        (:func:`~gcc_dask.runtime.tasks.load_batch`): every chunk that holds some of them read once, whole, and
        nothing kept on this worker afterwards (the task's result is what the batch's shards are given).
        Errors as :meth:`load`'s (marked as the batch's own)."""
        chunked = getattr(self.source, "chunks", None) is not None  # (a dask array reads through its chunks too)
        return _marking(lambda: _read_batch(self.source, self.layout, batch,
                                            self.source.read_chunk if chunked else None))()

    def blocks(self, batch: int, loaded: Loaded | None = None) -> Any:
        """Batch ``batch``'s samples as the encoder's input: ``(K, G, *shape)``, CuPy when the run uses a GPU.

        `loaded` (the batch as :meth:`read` returned it, in another task) laid out by
        :meth:`~gcc_dask.batch_layout.BatchLayout.to_blocks` (G groups, position k of every group on α_k; no copy
        on the host); without it, :meth:`load` (read once per worker, see :meth:`_memo`). Moved to the device once
        per worker; copied once per worker where Dask handed the samples over unaligned (out of a message's
        bytes), which would make every encode copy them.
        """
        if loaded is not None and not self.use_gpu and loaded.x.flags.aligned:
            return self.layout.to_blocks(loaded.x)

        def build():
            x = self.layout.to_blocks((self.load(batch) if loaded is None else loaded).x)
            if not x.flags.aligned:  # as Dask may hand over a transferred array: every encode would copy it
                x = np.array(x)
            if self.use_gpu:
                import cupy

                x = cupy.asarray(x)
            return x

        return self._memo(batch, "blocks", _marking(build))

    def shard_input(self, batch: int, scheme: str, worker: int, loaded: Loaded | None = None) -> Any:
        """What shard `worker` of `batch` evaluates for `scheme`: its coded block, ``(G, *shape)``.

        For a selection scheme (uncoded, replication) that is one position of every group unchanged, read
        from the source on its own (:meth:`~gcc_dask.batch_layout.BatchLayout.position_samples`: G contiguous
        slots), with no encode and without reading the rest of the batch (from a chunked source: only the
        chunks that hold those samples, through :meth:`chunk`, so the worker's other shards of the batch
        read none of them again; a block that this shard alone reads is kept by nobody, :meth:`_read_alone`).
        For the others, the shard's own coded block,
        ``code.encode(blocks, workers=[worker])`` of :meth:`blocks`, from `loaded`: the batch as the run's one
        read of it (:func:`~gcc_dask.runtime.tasks.load_batch`) returned it, which Dask hands to the shard (on
        another worker, by one transfer of the batch's samples per worker, not a read of its chunks). Without
        `loaded` the worker reads the batch itself, once (:meth:`blocks`). Each worker encodes only the rows of
        the shards it runs, so a batch costs N rows of encoding in all and no coded input moves between workers.
        It is the same encode of the same data on every worker, so a copy of a shard run elsewhere holds the
        same bits.
        """
        code = self.codes[scheme]
        k = code.selected_input(worker)
        if k is None:
            x = self.blocks(batch, loaded)
            return _marking(lambda: _naming_bad_samples(lambda: code.encode(x, workers=(worker,))[0], x,
                                                        lambda: self.layout.samples(batch)))()

        alone = self._read_alone(k)

        def build():
            idx = self.layout.position_samples(batch, k)
            # whole chunks that no other shard reads (a block of the stored order as long as a chunk): read fresh,
            # held for nobody; a chunk that other shards share is held while the batch runs (:meth:`chunk`)
            fresh = alone and self.source.whole_chunks(idx)
            x, _ = self.source.take(idx, None if fresh else self._chunk_reader(batch))
            x = x if alone else _read_only(x)  # (kept for the worker's other shards of the position: _memo below)
            _naming_bad_samples(lambda: code.check_input(x), x, lambda: idx)
            if self.use_gpu:
                import cupy

                x = cupy.asarray(x)
            return x

        if alone:  # nothing to keep for another shard
            return _marking(build)()
        return self._memo(batch, f"position-{k}", _marking(build))

    def _read_alone(self, k: int) -> bool:
        """Whether one shard alone reads the samples of input position `k` on a worker: every scheme of the run
        is a selection scheme (no code reads the whole batch) and one worker of one scheme evaluates `k`
        (uncoded or speculative, not beside replication). A speculative backup copy does not count: it runs only
        when its original is late, and on another worker (:func:`~gcc_dask.runtime.placement.copy_slot`).

        Such a block is read for its shard and kept by nobody, nor are its chunks when they are its own: a
        worker that kept every block it read while the batch was in flight faulted in fresh memory for every
        array f allocated (a user's MLP on blocks of 100,000 rows: f took 2.0-2.6x longer in the shards than in a
        plain map on the same worker, with 16,000-20,000 page faults against none). A backup copy reads it again.
        """
        alone = self.__dict__.get("_alone")
        if alone is None:
            counts: dict[int, int] = {}
            mixing = False
            for code in self.codes.values():
                originals = code.num_inputs if getattr(code, "name", "") == "speculative" else code.num_workers
                for w in range(originals):
                    j = code.selected_input(w)
                    if j is None:
                        mixing = True
                    else:
                        counts[j] = counts.get(j, 0) + 1
            alone = self._alone = frozenset() if mixing else frozenset(j for j, c in counts.items() if c == 1)
        return k in alone


#: attribute set on a GccDaskError raised while reading or encoding a batch (it survives pickling: exceptions
#: pickle their ``__dict__``)
_BAD_BATCH = "gcc_dask_bad_batch"


def is_cupy(a: Any) -> bool:
    """Whether `a` is a CuPy array (by its type's module: a pandas object has a ``get`` method too)."""
    return type(a).__module__.split(".")[0] == "cupy"


def _naming_bad_samples(call: Callable[[], Any], x: Any, samples: Callable[[], np.ndarray]) -> Any:
    """``call()``; when it raises :class:`~gcc_dask.errors.InvalidInputError` for NaN or Inf in `x` (rows of
    samples in the order of ``samples()``, their dataset indices; `x` of shape ``(n, ...)`` or ``(K, G, ...)`` in
    slot order), the error is given the indices of the samples that hold them (:data:`BAD_SAMPLES`): the line that
    stops the run then names those, not the batch's first samples."""
    from gcc_dask.errors import InvalidInputError

    try:
        return call()
    except InvalidInputError as exc:
        try:
            host = np.asarray(x.get() if is_cupy(x) else x)
            idx = np.asarray(samples())
            rows = host.reshape(idx.size, -1)
            bad = ~np.isfinite(rows).all(axis=1)
            if bad.any():
                setattr(exc, BAD_SAMPLES, idx[bad].astype(np.int64))
        except Exception:  # pragma: no cover - the error as it is, without the samples
            pass
        raise


def _marking(build: Callable[[], Any]) -> Callable[[], Any]:
    def run():
        try:
            return build()
        except GccDaskError as exc:
            setattr(exc, _BAD_BATCH, True)
            raise

    return run


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


@dataclass(frozen=True)
class Loaded:
    """A batch's samples read from the source, in slot order (see :class:`~gcc_dask.batch_layout.BatchLayout`)."""

    x: np.ndarray  # (n_real, *sample_shape)
    labels: np.ndarray | None  # (n_real,)
    n_real: int


def _read_batch(source, layout, batch: int, chunk: Callable[[int], Any] | None = None) -> Loaded:
    """Read the samples of ``batch`` (``layout.samples(batch)``, dataset indices in slot order), a chunked
    source's chunks through `chunk` (see :meth:`RunPlugin.chunk`)."""
    x, labels = source.take(layout.samples(batch), chunk)
    return Loaded(x=_read_only(x), labels=None if labels is None else np.asarray(labels), n_real=x.shape[0])


def _read_only(x: Any) -> Any:
    """`x` made read-only when it is a NumPy array (a view of it when it is not its own data): a batch's samples,
    or a block of them, are shared on a worker by the shards that evaluate them and by the batch's reference, so an
    f that wrote into its input would hand the next one altered rows. NumPy refuses the write instead (an error of
    f, said with :func:`~.lines.in_place_hint`), as documented in docs/own_model.rst."""
    if isinstance(x, np.ndarray) and x.flags.writeable:
        if not x.flags.owndata:  # (a view: the caller's array, e.g. an in-memory source, stays writable)
            x = x.view()
        x.flags.writeable = False
    return x
