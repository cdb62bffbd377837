"""Where every sample of a run sits: slots, batches, groups and positions (:class:`BatchLayout`).

The batch model (docs/pipeline.rst, section 'Batches, groups and blocks'):

* a **group** is K samples coded together; position k of the group sits on the data point α_k (α ascending);
* a **block** stacks B groups: coded input n of a batch is the (B, ...) array of the n-th coded sample of
  each of its groups, so one shard task evaluates f once on B samples;
* a **batch** is one block: K·B samples, N shard tasks, one cutoff, one decode, one chunk of the store.

The run's samples sit in *slots*: batch b owns slots ``[b·K·B, (b+1)·K·B)`` (one chunk of the store), and
within a batch of G groups the slots are position-major: local slot ``j`` holds position ``k = j // G`` of
group ``g = j % G``. So the batch's samples in slot order, reshaped to ``(K, G, ...)``, are the encoder's
input as they are (no copy), and the G samples of one position are contiguous: an uncoded or replicated
shard reads only its own block. A composition (:mod:`gcc_dask.composition`) is the permutation ``order`` of
the dataset's sample indices over the slots (slot s holds sample ``order[s]``; the store's ``sample``
coordinate). Only the last batch can hold fewer than K·B samples; its groups then lack their last positions,
and the encode pads each short group by repeating the group's last sample (:meth:`BatchLayout.to_blocks`; the
padded outputs are dropped).

Pure NumPy; :func:`is_permutation` and :func:`permutation_or_raise` check an ``order`` (the store checks the
stored one with them too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gcc_dask.errors import ConfigError

__all__ = ["BatchLayout", "is_permutation", "permutation_or_raise"]


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name}: got {value!r}; expected an integer >= 1")
    return int(value)


@dataclass(frozen=True)
class BatchLayout:
    """Where every sample of a run sits: slots, batches, groups and positions (see the module docs).

    Parameters
    ----------
    num_samples : int
        n, samples in the run (>= 1).
    group_size : int
        K, samples per coding group (the code's ``num_inputs``).
    block_size : int
        B, groups per batch (one shard evaluates f on B samples at once).
    order : ndarray of int64, shape (n,), or None
        ``order[s]`` is the dataset index of the sample in slot s (a permutation of ``range(n)``); None means
        the identity (``as_stored``).

    Raises
    ------
    ConfigError
        A size below 1, or an ``order`` that is not a permutation of ``range(num_samples)``.
    """

    num_samples: int
    group_size: int
    block_size: int = 1
    order: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("num_samples", "group_size", "block_size"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        if self.order is not None:
            order = permutation_or_raise("order", self.order, self.num_samples, ConfigError)
            order.setflags(write=False)
            object.__setattr__(self, "order", order)

    @classmethod
    def from_sequence(cls, sequence: np.ndarray | None, group_size: int, block_size: int,
                      num_samples: int | None = None) -> BatchLayout:
        """The layout whose groups are consecutive runs of `sequence` (a composition policy's output).

        Batch b takes the ``b``-th run of K·B samples of the sequence; its G groups take consecutive runs of
        it, group g as many samples as it has slots (K, or fewer in a short last batch), in position order.
        ``sequence=None`` is the identity *sequence* (consecutive K samples form a group).
        """
        n = int(num_samples if sequence is None else len(sequence))
        seq = np.arange(n, dtype=np.int64) if sequence is None else np.asarray(sequence, dtype=np.int64)
        shell = cls(n, group_size, block_size)
        order = np.empty(n, dtype=np.int64)
        for b in range(shell.num_batches):
            start, stop = shell.batch_slots(b)
            g = shell.batch_groups(b)
            local = np.arange(stop - start)
            # slot j is position j // g of group j % g; within the batch, group-major order of the slots
            slot_of_rank = np.lexsort((local // g, local % g))
            order[start + slot_of_rank] = seq[start:stop]
        return cls(n, group_size, block_size, order)

    @property
    def batch_samples(self) -> int:
        """K·B, the slots of a full batch."""
        return self.group_size * self.block_size

    @property
    def num_batches(self) -> int:
        return -(-self.num_samples // self.batch_samples)

    @property
    def num_groups(self) -> int:
        return sum(self.batch_groups(b) for b in range(self.num_batches)) if self.num_batches else 0

    def batch_slots(self, batch: int) -> tuple[int, int]:
        """``[start, stop)`` slots of `batch` (``stop - start`` <= K·B; the last batch may be short)."""
        if not 0 <= batch < self.num_batches:
            raise ConfigError(f"batch: got {batch!r}; expected an integer in [0, {self.num_batches})")
        start = batch * self.batch_samples
        return start, min(start + self.batch_samples, self.num_samples)

    def batch_groups(self, batch: int) -> int:
        """G, the groups in `batch`: B, or fewer in a short last batch."""
        start, stop = self.batch_slots(batch)
        return -(-(stop - start) // self.group_size)

    def samples(self, batch: int) -> np.ndarray:
        """Dataset indices of the samples of `batch`, in slot order, int64 of shape (stop - start,)."""
        start, stop = self.batch_slots(batch)
        if self.order is None:
            return np.arange(start, stop, dtype=np.int64)
        return self.order[start:stop]

    def position_samples(self, batch: int, position: int) -> np.ndarray:
        """Dataset indices of position `position` of every group of `batch`, int64 of shape (G,): the block
        that an uncoded (or replicated) shard evaluates. A group without that position repeats its last one."""
        if not 0 <= position < self.group_size:
            raise ConfigError(f"position: got {position!r}; expected an integer in [0, {self.group_size})")
        samples = self.samples(batch)
        g = self.batch_groups(batch)
        local = _block_rows(samples.size, self.group_size)[position * g:(position + 1) * g]
        return samples[local]

    def sample_index(self) -> np.ndarray:
        """The dataset index of every slot, int64 of shape (n,) (the store's ``sample`` coordinate)."""
        return np.arange(self.num_samples, dtype=np.int64) if self.order is None else self.order

    def group_of_slot(self) -> tuple[np.ndarray, np.ndarray]:
        """(group, position) of every slot: int64 and int32 arrays of shape (n,); groups numbered over the run."""
        group = np.empty(self.num_samples, dtype=np.int64)
        position = np.empty(self.num_samples, dtype=np.int32)
        k, g = self.group_size, self.block_size
        full = self.num_samples // self.batch_samples  # full batches: (K, B) slots each, position-major
        if full:  # broadcast, not divided slot by slot (2,000,000 slots: 12 ms against 19 idle)
            group[:full * k * g].reshape(full, k, g)[...] = (np.arange(full, dtype=np.int64)[:, None, None] * g
                                                              + np.arange(g, dtype=np.int64))
            position[:full * k * g].reshape(full, k, g)[...] = np.arange(k, dtype=np.int32)[:, None]
        first = full * g
        for b in range(full, self.num_batches):
            start, stop = self.batch_slots(b)
            g = self.batch_groups(b)
            local = np.arange(stop - start)
            group[start:stop] = first + local % g
            position[start:stop] = local // g
            first += g
        return group, position

    def to_blocks(self, x: np.ndarray) -> np.ndarray:
        """A batch's samples in slot order, ``(n_b, *shape)``, as the encoder's input ``(K, G, *shape)``.

        ``blocks[k, g]`` is position k of group g: a reshape (a view) for a full batch. In a short batch
        (`n_b` < K·B, G = ceil(n_b / K)) a group's missing positions repeat its last sample;
        :meth:`from_blocks` drops their outputs.
        """
        k, n_b = self.group_size, x.shape[0]
        if n_b % k:
            x = x[_block_rows(n_b, k)]
        return x.reshape((k, -(-n_b // k), *x.shape[1:]))

    @staticmethod
    def from_blocks(y: Any, n_real: int) -> Any:
        """The inverse of :meth:`to_blocks` on outputs: ``(K, G, *out)`` -> ``(n_real, *out)`` in slot order.

        Works on NumPy and CuPy arrays alike (``reshape`` only).
        """
        k, g = y.shape[0], y.shape[1]
        return y.reshape((k * g, *y.shape[2:]))[:n_real]


def _block_rows(n_b: int, k: int) -> np.ndarray:
    """For a batch of `n_b` samples in slot order, the row read for each of the K·G entries of its blocks:
    the identity for a full batch; in a short one a missing position repeats the group's previous one."""
    g = -(-n_b // k)
    rows = np.arange(k * g)
    for j in range(n_b, rows.size):
        rows[j] = rows[j - g]
    return rows


def is_permutation(order: Any) -> bool:
    """True if `order` is a 1-D integer array holding each of 0..n-1 exactly once (n = its length): one bool
    per entry, no sorted copy (a million-sample layout is checked without two more 8 MB arrays)."""
    order = np.asarray(order)
    if order.ndim != 1 or order.dtype.kind not in "iu":
        return False
    n = order.size
    if n and (order.min() < 0 or order.max() >= n):
        return False
    seen = np.zeros(n, dtype=bool)
    seen[order] = True
    return bool(seen.all())


def permutation_or_raise(name: str, values: Any, n: int, error: type[Exception]) -> np.ndarray:
    """`values` as an int64 array if it is a permutation of ``range(n)``, else `error` with one line that names
    `name`, what is wrong (the shape, a non-integer dtype, the first value out of range or repeated) and what
    is valid."""
    want = f"expected a permutation of range({n}) (integers, each once)"
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise error(f"{name}: {want}; got an array of shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise error(f"{name}: {want}; got dtype {arr.dtype} (cast integral values with .astype('int64'))")
    arr = arr.astype(np.int64, copy=False)
    if not is_permutation(arr):
        bad = np.flatnonzero((arr < 0) | (arr >= n))
        if bad.size:
            raise error(f"{name}: {want}; got {int(arr[bad[0]])} at position {int(bad[0])}")
        _, first, counts = np.unique(arr, return_index=True, return_counts=True)
        dup = int(np.flatnonzero(counts > 1)[0])
        raise error(f"{name}: {want}; got {int(arr[first[dup]])} more than once (first at position "
                    f"{int(first[dup])})")
    return arr
