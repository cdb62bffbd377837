"""What a run writes to its store while it runs: the workers' writer and the driver's buffer of batch records.

:class:`StoreSink` is the picklable writer the worker tasks call (the runtime gets it as an object, never imports
the store); :class:`RecordBuffer` collects finished batches' records on the driver and writes them in few, large
flushes; :class:`DecodedRows` keeps the decoded rows that came back in the records (``keep_estimates``). All are
used by :func:`gcc_dask.pipeline.run_pipeline`.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from gcc_dask import store as store_mod

__all__ = ["StoreSink", "RecordBuffer", "DecodedRows"]


class DecodedRows:
    """The estimates of a run as its batches' records bring them to the driver, in the dataset's order: what
    :func:`gcc_dask.coded_map` hands back for NumPy input without reading the store a second time.

    Each record of a run with ``keep_decoded`` carries its batch's decoded rows in slot order (float32,
    ``(samples of the batch, output size)``); :meth:`add` takes them out of the record (the store's writer never
    sees them) and puts row i at the dataset index ``layout.samples(batch)[i]``, as the store's ``sample``
    coordinate does. :meth:`complete` gives a scheme's array only when every batch's rows came (a resumed run,
    a batch that failed on the driver, or one decoded again after its worker died may not bring them: the store
    then has them, and the caller reads it).

    Parameters
    ----------
    layout : gcc_dask.batch_layout.BatchLayout
        The run's composition (:meth:`~gcc_dask.batch_layout.BatchLayout.samples`).
    schemes : sequence of str
    num_samples : int
    output_shape : tuple of int
        f's output shape per sample.
    """

    def __init__(self, layout: Any, schemes: Sequence[str], num_samples: int, output_shape: tuple[int, ...]) -> None:
        self.layout = layout
        self.shape = (int(num_samples), *(int(d) for d in output_shape))
        self._values: dict[str, np.ndarray] = {}
        self._batches: dict[str, set[int]] = {s: set() for s in schemes}

    def add(self, records: list[dict]) -> None:
        """Take the decoded rows out of `records` (one batch's, one per scheme) and keep them."""
        for r in records:
            rows = r.pop("decoded", None)
            r.pop("keep_decoded", None)
            scheme = r.get("scheme")
            if rows is None or scheme not in self._batches:
                continue
            where = self.layout.samples(int(r["batch"]))
            if scheme not in self._values:
                self._values[scheme] = np.empty(self.shape, dtype=np.float32)
            self._values[scheme][where] = np.asarray(rows, dtype=np.float32).reshape(where.size, *self.shape[1:])
            self._batches[scheme].add(int(r["batch"]))

    def complete(self, num_batches: int) -> dict[str, np.ndarray]:
        """The schemes whose `num_batches` batches all brought their rows: ``{scheme: (n, *output_shape)
        float32}``, NaN in the rows of a batch that could not be decoded (as in the store)."""
        return {s: self._values[s] for s, got in self._batches.items()
                if s in self._values and len(got) == int(num_batches)}


class StoreSink:
    """Picklable writer the worker tasks call: ``sink(kind, batch, **arrays)`` with kind "inputs" or a scheme.

    With `token` (the run's :attr:`~gcc_dask.store.RunStore.token`) every write is refused unless the store
    still carries it (:class:`~gcc_dask.errors.WriteRefusedError`)."""

    def __init__(self, path: str, token: str | None = None) -> None:
        self.path = path
        self.token = token

    def __call__(self, kind: str, batch: int, **arrays: Any) -> Any:
        """Write; for a scheme, return what :func:`~gcc_dask.store.write_decoded` returns (the batch's
        ``chunk_digest``, for its record)."""
        token = getattr(self, "token", None)
        if kind == "inputs":
            store_mod.write_inputs(self.path, batch, labels=arrays.get("labels"), reference=arrays.get("reference"),
                                   token=token)
            return None
        return store_mod.write_decoded(self.path, kind, batch, arrays["decoded"], filled=arrays.get("filled"),
                                       token=token)


class RecordBuffer:
    """Collects finished batches' records on the driver and writes them in few, large flushes.

    Flushes every ``max_batches`` batches or ``max_age_s`` seconds, and on :meth:`flush`. The writes run in
    a thread of their own, one flush after another (each writes its batches' ``status`` last), so that the
    driver's loop goes on submitting and deciding meanwhile (bench: a flush blocked it for about 0.1 s).
    A write that failed raises its error from the next :meth:`add` or :meth:`flush`. A batch whose record
    is lost with the driver (SIGKILL between two flushes) is still pending in the store and is recomputed
    on resume: its ``decoded`` rows are rewritten with the same values.
    """

    def __init__(self, store, max_batches: int = 64, max_age_s: float = 2.0) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.store = store
        self.max_batches = max_batches
        self.max_age_s = max_age_s
        self._records: dict[str, list[dict]] = {}
        self._batches = 0
        self._since = time.monotonic()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="gcc-dask-records-writer")
        self._writes: list = []
        self._closed = False

    def add(self, records: list[dict]) -> None:
        for r in records:
            self._records.setdefault(r["scheme"], []).append(r)
        self._batches += 1
        if self._batches >= self.max_batches or time.monotonic() - self._since >= self.max_age_s:
            self._start_flush()

    def _start_flush(self) -> None:
        self._raise_failed()
        if self._records:
            batch, self._records = self._records, {}
            self._writes.append(self._writer.submit(self._write, batch))
        self._batches = 0
        self._since = time.monotonic()

    def _write(self, records: dict[str, list[dict]]) -> None:
        for scheme, rs in records.items():
            self.store.write_records(scheme, rs)

    def _raise_failed(self, wait: bool = False) -> None:
        finished = [f for f in self._writes if wait or f.done()]
        self._writes = [f for f in self._writes if f not in finished]
        for fut in finished:
            fut.result()  # raises the write's error (once)

    def flush(self) -> None:
        """Write every record collected so far and wait until it is written (raising a write's error)."""
        self._start_flush()
        self._raise_failed(wait=True)

    def close(self) -> None:
        """Flush, then stop the writing thread (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
        finally:
            self._writer.shutdown(wait=True)
