"""The driver's handle on a run store: :class:`RunStore` (create, resume, inspect, finish).

Where a store may go and what an interrupted run left beside it are :mod:`.target`'s (:func:`check_target`,
:func:`remove_leftovers`, importable from here too); whether a run may resume a store is :mod:`.resume_checks`'s.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Callable

import numpy as np

from gcc_dask.composition import permutation_or_raise
from gcc_dask.errors import InvalidInputError, StoreError, WriteRefusedError

from .integrity import (_DECODED_WRITTEN, _DECODED_WRITTEN_ALL, check_structure, lost_records, misplaced_chunks,
                        missing_batches, missing_filled, read_checked)
from .layout import (
    BatchStatus,
    _MARKER,
    DONE_STATUSES,
    INPUTS,
    INTEGRITY,
    INTEGRITY_ATTR,
    STORE_FORMAT,
    STORE_ID_ATTR,
    _batch_rows,
    _check_layout,
    _create_arrays,
    _git_sha,
    _local,
    _now,
    _open_root,
    _root_meta,
    _versions,
    _zarr,
)
from .resume_checks import MODEL_SOURCES, _config_diff, _user_key, check_resumable  # noqa: F401
from .target import _aside, _check_replaceable, _swap_in, check_target, remove_leftovers, store_remains  # noqa: F401
from .writes import (TOKEN_ATTR, _array, _handles, _naming_failures, _write_records, _write_status, write_batch,
                     write_inputs)

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------- RunStore
class RunStore:
    """The driver's handle on a run store: create, resume, inspect and finish it.

    Use :meth:`create`, :meth:`open` or :meth:`open_or_create`; workers use :func:`write_batch`.
    """

    def __init__(self, path: str | os.PathLike, *, resumed: bool = False, _root: Any = None):
        self.path = _local(path)
        self.resumed = resumed
        self._root = _root if _root is not None else _open_root(self.path)
        self._token = self._root.attrs.get(TOKEN_ATTR)

    def __repr__(self) -> str:
        return (f"RunStore({str(self.path)!r}, status={self.attrs.get('status')!r}, "
                f"schemes={self.schemes}, num_batches={self.num_batches})")

    # ------------------------------------------------------------------------------- construction
    @classmethod
    def create(cls, path: str | os.PathLike, *, config_resolved: Mapping[str, Any], fingerprint: str,
               schemes: Mapping[str, int], num_samples: int, batch_size: int,
               output_shape: Iterable[int], has_labels: bool, has_reference: bool, seed: int,
               overwrite: bool = False, dtype: Any = "float32",
               scheme_attrs: Mapping[str, Mapping[str, Any]] | None = None,
               attrs: Mapping[str, Any] | None = None, sample_index: Any = None,
               group_size: int | None = None, worker_points: Mapping[str, Any] | None = None,
               inputs_digest: str | None = None,
               groups: tuple[np.ndarray, np.ndarray] | None = None) -> RunStore:
        """Create an empty store with every array of the layout (all batches pending).

        Parameters
        ----------
        path : str or os.PathLike
            Directory of the new store (``*.zarr``).
        config_resolved : mapping
            JSON-able resolved config (``PipelineConfig.resolved()``), stored as ``attrs["config"]``.
        fingerprint : str
            ``PipelineConfig.fingerprint()``; a resume with another fingerprint is refused.
        schemes : mapping of str to int
            Scheme name -> number of workers N (the width of its ``worker`` axis).
        num_samples : int
            Length of the ``sample`` axis (>= 1).
        batch_size : int
            Samples per batch (K·B, one chunk of every ``sample`` array); ``num_batches = ceil(num_samples /
            batch_size)``.
        output_shape : tuple of int
            Shape of one f(x) (the trailing axes of ``decoded`` and ``reference``).
        has_labels, has_reference : bool
            Whether ``inputs/labels`` / ``inputs/reference`` are created.
        seed : int
            The run seed (root attribute).
        overwrite : bool
            Replace an existing gcc-dask store at `path` (other directories are never deleted).
        dtype : numpy dtype, default float32
            dtype of ``decoded`` and ``reference``.
        scheme_attrs, attrs : mapping, optional
            Extra JSON-able attributes per scheme group / for the root.
        sample_index : array of int, shape (num_samples,), optional
            The composition: the dataset index of the sample in each slot (the ``sample`` coordinate), a
            permutation of ``range(num_samples)``. Default: the identity.
        group_size : int, optional
            K, samples per coding group; default `batch_size`.
        groups : (array of int, array of int), each of shape (num_samples,), optional
            The coding group and the position in it of each slot (the ``group`` and ``position``
            coordinates); default: slot s is position ``s % K`` of group ``s // K``.
        worker_points : mapping of str to array, optional
            Each scheme's worker points β, shape (N,) (the ``worker_point`` coordinate); default NaN.
        inputs_digest : str, optional
            A digest of the model and data files the run reads; a resume with another digest is refused.

        The store is built in a hidden folder next to `path` and renamed into place; with `overwrite`, the old
        store is renamed aside first and removed once the new one is in place, so that a driver killed at any
        moment leaves the old store, or the new one, at `path`. What such a kill leaves aside is removed
        (:func:`remove_leftovers`). The store gets a new :attr:`token`.

        Raises
        ------
        StoreError
            If `path` exists (and `overwrite` is false or it is not a gcc-dask store), or cannot be
            written.
        InvalidInputError
            If a size or scheme name is invalid.
        """
        path = _local(path)
        output_shape = tuple(int(s) for s in output_shape)
        _check_layout(schemes, num_samples, batch_size, output_shape)
        k, n = int(batch_size), int(num_samples)
        num_batches = -(-n // k)
        if sample_index is not None:  # checked before an existing store is replaced
            sample_index = permutation_or_raise("sample_index", sample_index, n, InvalidInputError)
        if store_remains(path) is not None:
            remove_leftovers(path)  # what late writes left of a removed store: no store
        if path.exists():
            if not overwrite and not (path.is_dir() and not any(path.iterdir())):
                raise StoreError(f"store path: got {str(path)!r}; it already exists (resume it, or pass "
                                 "--overwrite / store.overwrite: true to start over)")
            _check_replaceable(path)  # an empty directory (e.g. made by mkdtemp) is as good as nothing
        remove_leftovers(path)
        root_attrs = {
            _MARKER: STORE_FORMAT,
            "gcc_dask_version": _versions().get("gcc-dask", "unknown"),
            "created": _now(),
            "finished": None,
            "status": "running",
            "config": dict(config_resolved),
            "config_fingerprint": str(fingerprint),
            "inputs_digest": inputs_digest,
            "git_sha": _git_sha(),
            "versions": _versions(),
            "seed": int(seed),
            "num_samples": n,
            "batch_size": k,
            "num_batches": num_batches,
            "num_inputs": int(group_size or k),
            "output_shape": list(output_shape),
            "schemes": {str(s): int(w) for s, w in schemes.items()},
            "has_labels": bool(has_labels),
            "has_reference": bool(has_reference),
            "dtype": np.dtype(dtype).name,
            "resumed_at": [],
            INTEGRITY_ATTR: dict(INTEGRITY),
            STORE_ID_ATTR: uuid.uuid4().hex,  # kept by every resume: the chunks' digests are bound to it
            TOKEN_ATTR: uuid.uuid4().hex,
            **dict(attrs or {}),
        }
        # built next to its final place and renamed into it: a reader (or a resume after a crash) sees the
        # whole layout or no store at all, never a root whose groups or arrays are still missing
        tmp = _aside(path, "creating")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _create_arrays(tmp, root_attrs, schemes, n, k, num_batches, output_shape, np.dtype(dtype),
                           has_labels, has_reference, scheme_attrs or {}, sample_index=sample_index,
                           group_size=group_size, worker_points=worker_points, groups=groups)
            _swap_in(tmp, path)
        except (OSError, PermissionError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StoreError(f"store path: got {str(path)!r}; cannot create the store there ({exc}); make room or fix "
                             "the permissions there, or choose another store path, then run the same command "
                             "again") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls(path)

    @classmethod
    def open(cls, path: str | os.PathLike) -> RunStore:
        """Open an existing store for the driver. Raises StoreError if missing or not a gcc-dask store."""
        return cls(path)

    @classmethod
    def resume(cls, path: str | os.PathLike, *, fingerprint: str, overwrite: bool = False,
               inputs_digest: str | None = None, fingerprint_for: Callable[[dict], str] | None = None,
               config_for: Callable[[dict], dict] | None = None, legacy_inputs_digest: str | None = None,
               inputs_digest_for: Callable[[list[str], bool, bool], str] | None = None,
               **expected: Any) -> RunStore | None:
        """The store at `path` ready to resume (status "running"), or None when a new one must be created.

        None when `path` does not exist, is an empty directory, or `overwrite` is true. Takes the layout
        arguments of :meth:`create` as `expected` (``num_samples``, ``batch_size``, ``output_shape``,
        ``schemes``, ``has_labels``, ``has_reference``, ``dtype``; others are ignored) and checks them
        against the store, and `inputs_digest` (when given) against the digest of the model and data files
        the store was made with. The returned store has ``resumed=True`` and a new :attr:`token` (the writes
        of an earlier run still under way are refused). With ``config_resolved`` (the new run's resolved
        config) among `expected`, a refusal names the keys that differ from the stored config, except those
        under a dotted prefix in ``config_ignore``. `fingerprint_for`, given the stored config, gives the
        fingerprint this run would have had when that store was made (keys added since, at their defaults, left
        out): a store whose fingerprint is that one is resumed too; `config_for` gives that config, which a
        refusal compares with the stored one. A store made before the source files of a model's module counted in
        its inputs digest (no ``model_sources`` attribute) is compared with `legacy_inputs_digest` when given
        (the digest without them); one that lists them is compared with
        ``inputs_digest_for(listed, folders, labels)``, the digest over the module files it lists, over the data
        folders of an in-memory array when the store has a ``data_folders`` attribute (``folders`` true; made
        since they counted), and over a Zarr source's labels array when it has a ``label_files`` attribute
        (``labels`` true; likewise), when given. What an interrupted creation or replacement left next to the
        store is removed (:func:`remove_leftovers`).

        Raises
        ------
        StoreError
            If `path` holds a store from a different config (another fingerprint) or with another
            layout, something that is not a gcc-dask store, or a damaged one (a group or array whose
            metadata is missing or unreadable, named in the message: :func:`~.integrity.check_structure`).
        """
        path = _local(path)
        remove_leftovers(path)
        if overwrite or not path.exists() or (path.is_dir() and not any(path.iterdir())):
            return None
        store = cls(path)
        check_resumable(store, fingerprint, inputs_digest=inputs_digest, fingerprint_for=fingerprint_for,
                        config_for=config_for, legacy_inputs_digest=legacy_inputs_digest,
                        inputs_digest_for=inputs_digest_for, **expected)
        check_structure(path, store.attrs)
        store._token = None  # the update below is this run's first write: it takes the store over
        store.update_attrs(status="running", finished=None, **{TOKEN_ATTR: uuid.uuid4().hex},
                           resumed_at=[*store.attrs.get("resumed_at", []), _now()])
        store.resumed = True
        store._forget_lost_records()
        return store

    def _forget_lost_records(self) -> None:
        """Mark pending the done batches whose chunk of a per-batch array is gone (:func:`~.integrity.lost_records`:
        a deleted ``received``, ``rel_acc``, ``mse`` ... chunk, which holds up to 1,024 batches' values), so that
        this run recomputes them all; their status is reset before any of them is rewritten, so a run stopped
        midway leaves the rest pending, never done with fill values in place of their record."""
        if self.attrs.get(INTEGRITY_ATTR, {}).get("empty_chunks") != "written":
            return
        for scheme in self.schemes:
            try:
                lost = lost_records(self.path, scheme)
            except StoreError:
                continue  # a damaged status chunk: named where the batches are read (pending_batches)
            batches = np.unique(np.concatenate([b for name, b in lost.items() if name != "status"] or
                                               [np.zeros(0, np.int64)]))
            if batches.size:
                with _naming_failures(self.path, f"{scheme}/status", batches):
                    _write_status(_array(_handles(self.path, self._token), scheme, "status"), batches,
                                  np.zeros(batches.size, np.int8))

    @classmethod
    def open_or_create(cls, path: str | os.PathLike, *, fingerprint: str, overwrite: bool = False,
                       **create_kwargs: Any) -> RunStore:
        """Resume the store at `path` if it was made by the same config (:meth:`resume`), else create it.

        Takes the arguments of :meth:`create`. With ``overwrite=True`` an existing gcc-dask store is
        replaced. The returned store has ``resumed=True`` when existing batches were kept.

        Raises
        ------
        StoreError
            As :meth:`resume` and :meth:`create`.
        """
        store = cls.resume(path, fingerprint=fingerprint, overwrite=overwrite, **create_kwargs)
        if store is not None:
            return store
        return cls.create(path, fingerprint=fingerprint, overwrite=overwrite, **create_kwargs)

    # ------------------------------------------------------------------------------------ queries
    @property
    def token(self) -> str | None:
        """The identity of the run that writes this store: a new random hex string at every :meth:`create`
        and :meth:`resume`, stored as the root attribute ``run_token``. Writes that carry another one
        (``write_decoded(..., token=)``, the workers' writes of a run) are refused, so that the tasks of a
        killed driver never write into the store of the run that replaced or resumed it. None for a store
        made before tokens existed."""
        return self._token

    @property
    def attrs(self) -> dict[str, Any]:
        """The root attributes (a copy)."""
        return dict(self._root.attrs)

    @property
    def num_batches(self) -> int:
        return int(self._root.attrs["num_batches"])

    @property
    def num_samples(self) -> int:
        return int(self._root.attrs["num_samples"])

    @property
    def batch_size(self) -> int:
        return int(self._root.attrs["batch_size"])

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(self._root.attrs["output_shape"])

    @property
    def schemes(self) -> dict[str, int]:
        """Scheme name -> number of workers."""
        return dict(self._root.attrs["schemes"])

    def sample_index(self) -> np.ndarray:
        """The stored composition: the dataset index of the sample in each slot, int64 of shape (num_samples,)."""
        try:
            index = np.asarray(self._read(INPUTS, "sample"), dtype=np.int64)
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"store: cannot read the stored composition ({INPUTS}/sample) of {str(self.path)!r}: "
                             f"{type(e).__name__}: {e}") from None
        return permutation_or_raise(f"store {str(self.path)!r}: {INPUTS}/sample", index, self.num_samples,
                                    StoreError)

    def batch_rows(self, batch: int) -> tuple[int, int]:
        """The ``[start, stop)`` sample rows of `batch`."""
        return _batch_rows(self._root.attrs, batch)

    def batch_status(self, scheme: str) -> np.ndarray:
        """Status of every batch of `scheme` (or ``"inputs"``): int8 array of shape (num_batches,).

        Raises
        ------
        StoreError
            If the array cannot be read (a damaged chunk is named with its batches).
        """
        return np.asarray(self._read(scheme, "status"), dtype=np.int8)

    def batch_values(self, scheme: str, name: str) -> np.ndarray:
        """A per-batch array of `scheme` (``cutoff_s``, ``mse``, ...), shape (num_batches,)."""
        return np.asarray(self._read(scheme, name))

    def missing_batches(self, scheme: str) -> np.ndarray:
        """Batches of `scheme` (or ``"inputs"``) marked done whose chunk of a sample array is missing (a chunk
        file deleted, or lost with a disk): int64, ascending. Their rows would read back as fill values.

        A scheme's ``decoded`` chunk is checked for decoded batches (status 1, 2; also 3 in a store that writes
        every chunk, :data:`~.layout.INTEGRITY`), the inputs' ``labels`` and ``reference`` for batches whose
        inputs are written (those stores only). A failed batch (status 4) may have no chunk. In those stores, a
        scheme's ``filled`` chunk recorded as written (:func:`~.integrity.missing_filled`) and its per-batch
        arrays' chunks (``received``, ``mse``, ``rel_acc``, ...: :func:`~.integrity.lost_records`) are checked
        too.
        """
        status = self.batch_status(scheme)
        full = self.attrs.get(INTEGRITY_ATTR, {}).get("empty_chunks") == "written"
        if scheme == INPUTS:
            if not full:
                return np.zeros(0, dtype=np.int64)
            names = [n for n in ("labels", "reference") if self.attrs.get(f"has_{n}")]
            return missing_batches(self.path, INPUTS, names, status, (1,), self.batch_size)
        decoded = missing_batches(self.path, scheme, ("decoded",), status,
                                  _DECODED_WRITTEN_ALL if full else _DECODED_WRITTEN, self.batch_size)
        if not full:
            return decoded
        filled = missing_filled(self.path, scheme, status, DONE_STATUSES, self.batch_size)
        records = [b for name, b in lost_records(self.path, scheme, status).items() if name != "status"]
        return np.unique(np.concatenate([decoded, filled, *records])).astype(np.int64)

    def misplaced_chunks(self, scheme: str) -> dict[int, list[str]]:
        """Batches of `scheme` (or ``"inputs"``) marked done whose chunk of a sample array is not the one written
        there: moved or swapped within the store, or copied from another store or run. Batch index to the names
        of those chunks (``"gcc/decoded/c/3/0"``), batches ascending; empty for a store made before chunks were
        bound (no ``store_id``). See :func:`~.integrity.misplaced_chunks`.

        Raises
        ------
        StoreError
            When the batches' statuses or digests cannot be read (a damaged chunk is named).
        """
        store_id = self.attrs.get(STORE_ID_ATTR)
        if not store_id:
            return {}
        done = (1,) if scheme == INPUTS else DONE_STATUSES
        return misplaced_chunks(self.path, scheme, self.batch_status(scheme), done, str(store_id), self.batch_size)

    def pending_batches(self, scheme: str, retry_failed: bool = False) -> np.ndarray:
        """Indices (int64, ascending) of the batches of `scheme` that are not done (status 0), and of those
        marked done whose chunks are missing (:meth:`missing_batches`) or misplaced (:meth:`misplaced_chunks`),
        which a resume runs again.

        With ``retry_failed``, also the batches that failed for a reason of the environment (status 4 with no
        cutoff recorded: a lost decode, a worker error), which a resume runs again; a batch failed by the cutoff
        itself (``cutoff.on_shortfall: fail``, its cutoff time recorded) is an outcome and stays.
        """
        status = self.batch_status(scheme)
        todo = ~np.isin(status, list(DONE_STATUSES))
        if retry_failed and scheme != INPUTS:
            todo |= (status == int(BatchStatus.FAILED)) & np.isnan(self.batch_values(scheme, "cutoff_s"))
        todo[self.missing_batches(scheme)] = True
        todo[list(self.misplaced_chunks(scheme))] = True
        return np.flatnonzero(todo).astype(np.int64)

    def read_batch(self, scheme: str, batch: int) -> dict[str, np.ndarray]:
        """Every array of `scheme` restricted to `batch` (decoded: its samples; others: its row)."""
        start, stop = self.batch_rows(batch)
        group = self._group(scheme)
        out = {}
        for name, arr in group.arrays():
            dims = arr.metadata.dimension_names or ()
            if dims and dims[0] == "sample":
                out[name] = read_checked(self.path, f"{scheme}/{name}", arr, (slice(start, stop),), self.batch_size)
            else:
                out[name] = read_checked(self.path, f"{scheme}/{name}", arr, (slice(batch, batch + 1),),
                                         self.batch_size)[0]
        return out

    def _group(self, scheme: str):
        if scheme != INPUTS and scheme not in self.schemes:
            raise StoreError(f"scheme: got {scheme!r}; expected one of {sorted(self.schemes)} or 'inputs'")
        try:
            return self._root[scheme]
        except Exception:  # a group folder or zarr.json gone or damaged: name it
            check_structure(self.path, self.attrs)
            raise

    def _read(self, scheme: str, name: str) -> np.ndarray:
        """A whole array of `scheme`, a damaged chunk or metadata named in one StoreError line."""
        group = self._group(scheme)
        try:
            arr = group[name]
        except Exception:
            check_structure(self.path, self.attrs)
            raise
        return read_checked(self.path, f"{scheme}/{name}", arr, (slice(None),), self.batch_size)

    # ------------------------------------------------------------------------------ driver edits
    def _check_owned(self) -> None:
        """Before a driver write: the store is still at :attr:`path` and still this run's (:attr:`token`).

        Raises
        ------
        WriteRefusedError
            If it was removed or moved (zarr would otherwise write a skeleton of a store there), or another
            run took it over.
        """
        meta = _root_meta(self.path)
        if meta is None:
            raise WriteRefusedError(f"store path: got {str(self.path)!r}; the store is gone (removed or moved while "
                               "this run was writing it): nothing was written; run the same command again to "
                               "start a new store there")
        now = (meta.get("attributes") or {}).get(TOKEN_ATTR)
        if self._token is not None and now != self._token:
            raise WriteRefusedError(f"store path: got {str(self.path)!r}, which another run now writes (its token "
                               f"{str(now)[:8]}, this run's {self._token[:8]}): nothing was written")

    def update_attrs(self, **attrs: Any) -> None:
        """Set root attributes (driver only; JSON-able values).

        Raises
        ------
        StoreError
            If the store is gone or another run's (:class:`WriteRefusedError`), or its ``zarr.json`` cannot be
            written (a full disk, a read-only file system: one line naming the store).
        """
        self._check_owned()
        with _naming_failures(self.path, "the root attributes (zarr.json)", None):
            self._root.attrs.update(attrs)
        if TOKEN_ATTR in attrs:
            self._token = attrs[TOKEN_ATTR]

    def set_scheme_attrs(self, scheme: str, **attrs: Any) -> None:
        """Set attributes of a scheme group (driver only; JSON-able values)."""
        self._check_owned()
        with _naming_failures(self.path, f"the attributes of {scheme} ({scheme}/zarr.json)", None):
            self._group(scheme).attrs.update(attrs)

    def write_inputs(self, batch: int, labels: Any = None, reference: Any = None) -> None:
        """Write one batch of inputs (see :func:`write_inputs`), as this run (:attr:`token`)."""
        write_inputs(self.path, batch, labels=labels, reference=reference, token=self._token)

    def write_batch(self, scheme: str, batch: int, **kwargs: Any) -> None:
        """Write one batch of `scheme` (see :func:`write_batch`), as this run (:attr:`token`)."""
        write_batch(self.path, scheme, batch, token=self._token, **kwargs)

    def write_records(self, scheme: str, records: Iterable[Mapping[str, Any]]) -> None:
        """Write many batches' per-batch records of `scheme` at once (driver only), ``status`` last.

        Each record is a mapping with ``batch``, ``received_mask`` (N,) bool, ``latency_s`` (N,) float s,
        ``cutoff_s``, ``status`` and optionally ``failed_mask``, ``mse``, ``rel_acc``,
        ``batch_latency_s``, ``error_estimate``. Write the batches' ``decoded`` first
        (:func:`write_decoded`): a record's status marks its batch done.
        """
        records = list(records)
        if records:
            _write_records(self.path, scheme, records, token=self._token)

    def finish(self, status: str = "complete") -> None:
        """Mark the run finished (``status``, ``finished`` attrs) and consolidate the metadata once.

        Raises
        ------
        StoreError
            As :meth:`update_attrs`.
        """
        if status not in ("complete", "incomplete", "failed", "interrupted", "cancelled"):
            raise InvalidInputError(f"status: got {status!r}; expected 'complete', 'incomplete', 'failed', "
                                    "'interrupted' or 'cancelled'")
        self.update_attrs(status=status, finished=_now())
        self._check_owned()
        with _naming_failures(self.path, "the consolidated metadata (zarr.json)", None), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "consolidated metadata is not part of the v3 spec"
            _zarr().consolidate_metadata(str(self.path))
        self._root = _open_root(self.path)


class SampleIndex:
    """Picklable reader of a store's composition: ``SampleIndex(path)()`` is
    :meth:`RunStore.sample_index` of the store at `path`, int64 of shape (num_samples,).

    Shipped to the workers instead of the index itself: a 1,000,000-sample run's index is 8 MB, which a
    pickled worker plugin would carry through the driver's scheduler (about 35 MB of the driver's peak
    memory at a million samples, BENCHMARKS.md); this object pickles to its path.

    Raises
    ------
    StoreError
        If `path` is not a readable run store, or its composition is damaged.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)

    def __repr__(self) -> str:
        return f"SampleIndex({self.path!r})"

    def __call__(self) -> np.ndarray:
        return RunStore.open(self.path).sample_index()
