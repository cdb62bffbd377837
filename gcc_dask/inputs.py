"""The pipeline's inputs, built from its configuration and checked: the source, the workload (f), and f run
once on a real sample of the source (the data must fit the model).

Shared by :mod:`gcc_dask.pipeline` and :mod:`gcc_dask.frontier.advise` (which measures the frontier on the
pipeline's own data and model), and below both: neither imports the other for them.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from gcc_dask.config import PipelineConfig
from gcc_dask.errors import GccDaskError, InvalidInputError, SourceError, WorkloadError
from gcc_dask.sizing import probe_rows, time_f
from gcc_dask.sources import make_source
from gcc_dask.workloads import load_workload, make_workload


def build_source_and_workload(cfg: PipelineConfig) -> tuple[Any, Any]:
    """The pipeline's :class:`~gcc_dask.sources.Source` and :class:`~gcc_dask.workloads.Workload` (relative data
    paths resolved from the cwd, then the YAML's folder).

    Raises
    ------
    SourceError, WorkloadError, ConfigError
        The data or the model cannot be found or read.
    """
    src = cfg.source.model_dump(exclude_none=True)
    for key in ("path", "labels"):
        if isinstance(src.get(key), str):
            src[key] = _resolve_path(src[key], cfg.base_dir)
    source = make_source(src.pop("kind"), **src)
    wl = cfg.workload.model_dump(exclude_none=True)
    wl.update(wl.pop("params", None) or {})
    return source, make_workload(wl.pop("kind"), base_dir=cfg.base_dir, **wl)


def _resolve_path(path: str, base_dir: str) -> str:
    """A relative data path: as given if it exists from the cwd, else relative to the YAML's folder."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    candidate = os.path.join(base_dir, path)
    return candidate if os.path.exists(candidate) else path


def _check_model_fits(workload, source, nan_policy: str = "raise") -> tuple[int, ...]:
    """Run f on one real sample on the driver: the data must fit the model. Returns f's output shape.

    With ``nan_policy="propagate"`` non-finite values are allowed (in the sample and in f's output)."""
    return _probe_model(workload, source, nan_policy)[0]


def _probe_model(workload, source, nan_policy: str = "raise", timed: bool | str = False):
    """:func:`_check_model_fits`, and with `timed` f's cost on the source's first samples too
    (:func:`gcc_dask.sizing.time_f`, for ``code.block_size: auto`` and ``composition.policy: auto``):
    ``(output_shape, FCost or None)``.

    An f that fails on the timing's blocks of several samples (it passed on one) raises one
    :class:`~gcc_dask.errors.WorkloadError` line, or, with ``timed="optional"`` (only ``composition.policy: auto``
    asks: its choice has a default), gives no cost: the run then meets the failure in its shards, as erasures."""
    # the first samples read once, for the check of sample 0 and f's timing alike: a compressed chunked source
    # decodes its first chunk once (at 100,000 rows a chunk, 25-50 ms a read)
    row_bytes = math.prod(int(d) for d in source.sample_shape) * np.dtype(source.dtype).itemsize
    rows = probe_rows(source.num_samples, row_bytes) if timed else 1
    try:
        first, _ = source.read(0, rows)
        x = first[:1]
    except (MemoryError, ValueError, OSError) as e:  # an absurd source.shape; a corrupt file (data that cannot be
        # decoded, a damaged compressed chunk among them, is Source.read's own SourceError line)
        what = "sample 0" if rows == 1 else f"first {rows} samples"
        raise SourceError(f"source: got {source.name!r}, whose {what} cannot be read ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}); expected a readable source: check its "
                          "shape and files") from None
    if not np.issubdtype(x.dtype, np.floating):
        fix = ("set source.dtype: float32 to cast on read" if source.kind in ("zarr", "npy")
               else "store the data as float32 or float64")
        raise SourceError(f"source: got {x.dtype} samples in {source.name!r}; expected real floating data "
                          f"(float32 or float64: the codes mix samples linearly); {fix}")
    if nan_policy == "raise" and np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        raise InvalidInputError("source: got NaN or Inf in sample 0 (run.nan_policy: raise); expected finite "
                                "data: clean it, or set run.nan_policy: propagate")
    try:
        y = np.asarray(load_workload(workload)(x))  # the session stays loaded for the next run
    except WorkloadError:
        raise
    except Exception as e:
        text = " ".join(str(e).split())
        # a 1-D X has scalar samples: f gets blocks of shape (m,), which a model of (m, p) rows refuses
        scalar = (" (each sample of a 1-D X is one value, so f gets blocks of shape (m,): reshape X to (n, 1) "
                  "if f takes rows)") if x.ndim == 1 else ""
        raise WorkloadError(
            f"workload: got an f that fails on a sample of the source (shape {tuple(x.shape[1:])}, dtype "
            f"{x.dtype}: {type(e).__name__}: {text}){scalar}; expected an f that maps (n, ...) samples to (n, ...) "
            "outputs") from None
    if y.ndim < 1 or y.shape[0] != 1:
        raise WorkloadError(f"workload: got output shape {y.shape} for n = 1; expected f to map (n, ...) to "
                            "(n, ...)")
    if not np.issubdtype(y.dtype, np.floating):
        raise WorkloadError(f"workload: got {y.dtype} outputs from f; expected float32 or float64 (the decoders "
                            "mix results linearly): cast f's output")
    if nan_policy == "raise" and not np.isfinite(y).all():
        raise InvalidInputError("workload: got NaN or Inf from f on sample 0 of the source (run.nan_policy: "
                                "raise); expected finite outputs, or set run.nan_policy: propagate")
    shape = tuple(int(s) for s in y.shape[1:])
    if not timed:
        return shape, None
    fn = load_workload(workload)
    try:
        return shape, time_f(fn, lambda start, stop: first[start:stop], first.shape[0])
    except (GccDaskError, MemoryError):
        raise
    except Exception as e:
        if timed == "optional":
            return shape, None
        text = " ".join(str(e).split())
        raise WorkloadError(
            f"workload: got an f that fails on a block of the source's first samples while it is timed for "
            f"code.block_size: auto ({type(e).__name__}: {text}), after it passed on one sample; expected an f "
            "that maps (n, ...) samples to (n, ...) outputs for every n and every sample: fix f for these samples "
            "(or blocks of them), or set code.block_size to a number (a shard on which f raises is then an "
            "erasure, decoded around)"
        ) from None
