"""What a run writes to its store while it runs: the workers' writer and the driver's buffer of batch records.

:class:`StoreSink` is the picklable writer the worker tasks call (the runtime gets it as an object, never imports
the store); :class:`RecordBuffer` collects finished batches' records on the driver and writes them in few, large
flushes. Both are used by :func:`gcc_dask.pipeline.run_pipeline`.
"""

from __future__ import annotations

import time
from typing import Any

from gcc_dask import store as store_mod

__all__ = ["StoreSink", "RecordBuffer"]


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
