"""What a run says (pure): the lines the Dask shell (:class:`~.executor.BatchRunner`) echoes, warns or raises, built
from plain values. Which of them a run says, and when, is the shell's; what they say is here, with the rule of
the ones said only once (per scheme, per worker). The line about quiet workers is
:func:`~.rescue.quiet_line`; a lost scheduler's, :func:`~.scheduler_loss.lost_scheduler_error`.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from gcc_dask.errors import ClusterError

__all__ = ["BAD_SAMPLES", "LOAD_SAY_S", "bad_batch_text", "failure_line", "load_line", "raised_line", "replaced_line",
           "rerun_what", "samples_text", "unscored_line", "worker_loss_line", "workers_lost_error"]

#: the attribute of an error for NaN or Inf in a batch's samples that holds their dataset indices (int64), set on
#: the workers where the samples are known (:mod:`~gcc_dask.runtime.plugin`) and named by :func:`bad_batch_text`
BAD_SAMPLES = "gcc_dask_bad_samples"

#: a run says how long loading f on the workers took when it took longer than this (seconds)
LOAD_SAY_S = 2.0


def load_line(seconds: float) -> str | None:
    """The line said when loading f on the workers (the plugin's set-up, before the first batch) took `seconds`:
    None up to :data:`LOAD_SAY_S`."""
    if seconds > LOAD_SAY_S:
        return f"f loaded on the workers in {seconds:.1f} s, before the first batch (not in its latency)"
    return None


def worker_loss_line(step: str | None, workers: int, timeout: float) -> str | None:
    """The line said on a step of :class:`~.window.WorkerLoss` (``"back"`` with `workers` there again, ``"gone"``);
    None for the others (``"stop"`` raises :func:`workers_lost_error`)."""
    if step == "back":
        return f"{workers} Dask worker(s) back; the run goes on"
    if step == "gone":
        return (f"every Dask worker is gone; waiting up to {timeout:g} s for workers to come back "
                "(cluster.connect_timeout)")
    return None


def workers_lost_error(timeout: float) -> ClusterError:
    """The error that stops a run when no worker came back within `timeout` seconds of the last one's loss."""
    return ClusterError(
        f"cluster: every Dask worker was lost and none came back within {timeout:g} s "
        "(cluster.connect_timeout); finished batches are in the store: run the same command again "
        "to resume")


def replaced_line(again: int) -> str | None:
    """The line said when every worker was replaced and `again` scheme batches in flight run again (None: none)."""
    if not again:
        return None
    return f"every Dask worker was replaced: {again} scheme batch(es) in flight run again on the new workers"


def samples_text(samples: np.ndarray, limit: int = 8) -> str:
    """The dataset indices of a batch's samples, for an error line ("samples 8 to 11" when contiguous).

    >>> samples_text(np.arange(8, 12)), samples_text(np.array([3, 1])), samples_text(np.arange(0, 20, 2), limit=3)
    ('samples 8 to 11', 'samples 3, 1', 'samples 0, 2, 4, ... (10 in all)')
    >>> samples_text(np.array([7]))
    'sample 7'
    """
    if samples.size == 1:
        return f"sample {int(samples[0])}"
    if samples.size > 1 and (np.diff(samples) == 1).all():
        return f"samples {int(samples[0])} to {int(samples[-1])}"
    shown = ", ".join(str(int(i)) for i in samples[:limit])
    more = f", ... ({samples.size} in all)" if samples.size > limit else ""
    return f"samples {shown}{more}"


def bad_batch_text(batch: int, samples: np.ndarray, exc: BaseException) -> str:
    """The line that stops a run whose batch `batch` (its dataset indices `samples`) has bad data, raised by the
    workers as `exc`. The codes' own advice names their keyword; a run is configured by its run section.

    The samples named are those that hold the bad values when the workers said which (the error's
    ``gcc_dask_bad_samples``), else the batch's.

    >>> bad_batch_text(2, np.arange(8, 12), ValueError("NaN in x; pass nan_policy='propagate' to go on"))
    'source: batch 2 (samples 8 to 11): NaN in x; set run.nan_policy: propagate to go on'
    >>> e = ValueError("NaN in x"); e.gcc_dask_bad_samples = np.array([9]); bad_batch_text(2, np.arange(8, 12), e)
    'source: batch 2 (sample 9, of its 4 samples): NaN in x'
    """
    why = str(exc).replace("pass nan_policy='propagate'", "set run.nan_policy: propagate")
    bad = getattr(exc, BAD_SAMPLES, None)
    if bad is not None and len(bad):
        return f"source: batch {batch} ({samples_text(np.asarray(bad))}, of its {len(samples):,} samples): {why}"
    return f"source: batch {batch} ({samples_text(samples)}): {why}"


def failure_line(scheme: str, batch: int, why: str, told: set[str]) -> str | None:
    """The line for the user the first time a batch of `scheme` has no estimate because f (or the decode of its
    outputs) failed, with the error (`why`): otherwise it would show only as NaN rows and a count in the summary (a
    wrong output shape, an f that raises on every block). Once per scheme: `told`, updated, holds the schemes
    told already; later failures are counted in the summary only (None)."""
    if scheme in told:
        return None
    told.add(scheme)
    return (f"{scheme}: batch {batch} has no estimate: {why} (its rows are NaN; the summary counts such batches "
            "in undecodable, or in failed when its decode failed)")


def in_place_hint(exc: BaseException) -> str:
    """What to add to the line of f's error `exc` when f wrote into its input: the blocks f is given are read-only
    (several shards, and the batch's reference, share them on a worker), so NumPy refuses the write.

    >>> in_place_hint(ValueError("assignment destination is read-only"))[:38]
    '; f wrote into its input, which is rea'
    >>> in_place_hint(ValueError("bad row"))
    ''
    """
    if isinstance(exc, ValueError) and "read-only" in str(exc):
        return ("; f wrote into its input, which is read-only: the shards of a worker and the batch's reference "
                "share the samples they are given, so f must copy before changing them (x = x.copy())")
    return ""


def raised_line(scheme: str, batch: int, shard: int, exc: BaseException, told: set[str]) -> str | None:
    """The line for the user the first time f raised on a shard of `scheme` in a batch that was decoded anyway:
    the shard is an erasure, decoded around as a straggler's would be, and without this line only the store's
    ``failed`` and ``n_failed`` would show it. Once per scheme (`told`, updated); None after.

    >>> raised_line("gcc", 4, 7, ValueError("bad row"), set())
    "gcc: f raised on shard 7 of batch 4 (ValueError('bad row')): its result is an erasure, decoded around as a \
straggler's would be; later failures of f are not said again, the store counts them per batch (gcc/n_failed)"
    """
    key = f"{scheme}:raised"
    if key in told:
        return None
    told.add(key)
    return (f"{scheme}: f raised on shard {shard} of batch {batch} ({exc!r}{in_place_hint(exc)}): its result is "
            "an erasure, decoded "
            f"around as a straggler's would be; later failures of f are not said again, the store counts them "
            f"per batch ({scheme}/n_failed)")


def unscored_line(batch: int, samples: int, exc: BaseException, told: set[str]) -> str | None:
    """The line for the user the first time f raised on a batch's samples uncoded, so that the batch has no
    reference: its `samples` are left out of every metric scored against the reference (RelAcc, MSE, RMSE),
    which then describe the other batches only. Once a run (`told`, updated); None after.

    >>> unscored_line(2, 512, ValueError("bad row"), set())
    "batch 2: f raised on its 512 samples uncoded (ValueError('bad row')), so it has no reference: its samples \
are left out of the metrics scored against the reference (rel_acc, rmse, ...), which describe the other batches \
only; later such batches are not said again (their inputs/reference rows are NaN)"
    """
    if "reference:raised" in told:
        return None
    told.add("reference:raised")
    return (f"batch {batch}: f raised on its {samples:,} sample{'s' if samples != 1 else ''} uncoded "
            f"({exc!r}{in_place_hint(exc)}), so "
            "it has no reference: its samples are left out of the metrics scored against the reference (rel_acc, "
            "rmse, ...), which describe the other batches only; later such batches are not said again (their "
            "inputs/reference rows are NaN)")


def rerun_what(again: Iterable[tuple[int, str]], short: Mapping[tuple[int, str], tuple]) -> list[str]:
    """What runs again because of a quiet worker, for its line (:func:`~.rescue.quiet_line`): each ``(batch,
    scheme)`` run again whole (`again`; scheme ``""``: the batch's inputs), and each with shards rescued (`short`:
    per ``(batch, scheme)``, a tuple whose last item is the shards), sorted.

    >>> rerun_what([(3, "gcc"), (1, "")], {(2, "bacc"): (None, None, [4, 5])})
    ['1 (inputs)', '2 (bacc: 2 shards)', '3 (gcc)']
    """
    return sorted([f"{b} ({scheme or 'inputs'})" for b, scheme in again]
                  + [f"{b} ({scheme}: {len(ws)} shard{'s' if len(ws) > 1 else ''})"
                     for (b, scheme), (*_, ws) in short.items()])
