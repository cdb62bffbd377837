"""The per-scheme summary table of a pipeline run, read from its Zarr store only.

One row per scheme: the metrics that fit what f returns (a classifier: RelAcc, accuracy and the uncoded
model's, RMSE; one value per sample: RMSE, relative RMSE, R², the largest error), batch latency p50/p99,
cutoff p50/p99, samples/s, and how many batches were undecodable or failed (docs/concepts.rst, section
'Metrics').
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import zarr

from gcc_dask import metrics
from gcc_dask.analysis.stores import names_corrupt_chunks
from gcc_dask.store.layout import REQUIRED_ATTRS

__all__ = ["summarize_run", "format_summary", "poor_line"]

def _schemes(path: str) -> list[str]:
    root = zarr.open_group(path, mode="r")
    return sorted(name for name, _ in root.groups() if name != "inputs")


#: samples read at once when the sample-level metrics are pooled (bounds the memory of a summary)
SUMMARY_ROWS = 1 << 16


class _Pooled:
    """The relative RMSE, R² and largest error of a run, pooled block by block in bounded memory: the sums of
    squared errors and of squared reference values, and the reference's mean and sum of squared deviations
    merged as Chan et al.'s parallel variance (no cancellation when f's values are large and close)."""

    def __init__(self) -> None:
        self.rows, self.sq, self.ref_sq, self.m2, self.max_abs = 0, 0.0, 0.0, 0.0, float("nan")
        self.mean: np.ndarray | None = None

    def add(self, est: np.ndarray, ref: np.ndarray) -> None:
        e, r = metrics._scored(est, ref)
        n = e.shape[0]
        if n == 0:
            return
        self.sq += float(np.sum((e - r) ** 2))
        self.ref_sq += float(np.sum(r**2))
        top = float(np.max(np.abs(e - r)))
        self.max_abs = top if not np.isfinite(self.max_abs) else max(self.max_abs, top)
        mean = r.mean(axis=0)
        m2 = float(np.sum((r - mean) ** 2))
        if self.mean is None:
            self.mean, self.m2 = mean, m2
        else:
            total = self.rows + n
            delta = mean - self.mean
            self.mean = self.mean + delta * (n / total)
            self.m2 += m2 + float(np.sum(delta**2)) * self.rows * n / total
        self.rows += n

    def result(self) -> dict:
        nan = float("nan")
        return {"rel_rmse": float(np.sqrt(self.sq / self.ref_sq)) if self.rows and self.ref_sq > 0 else nan,
                "r2": 1.0 - self.sq / self.m2 if self.rows >= 2 and self.m2 > 0 else nan,
                "max_abs_err": self.max_abs}


def _sample_metrics(decoded, reference, labels, status: np.ndarray, k: int, filled=None) -> dict:
    """RelAcc, RMSE, accuracy (and f's own), the relative RMSE, R² and largest error, and the missing and filled
    counts, pooled over the samples of the done batches (of ``k`` rows each), read block by block (whole batches
    at a time) so that a long run is summarised in bounded memory. Each block's :mod:`gcc_dask.metrics` are
    weighted by the rows they average over."""
    n = decoded.shape[0]
    step = max(k, (SUMMARY_ROWS // k) * k)
    sums = dict.fromkeys(("agree", "scored", "sq", "sq_rows", "hit", "hit_uncoded", "labelled", "missing", "done",
                          "filled", "est_sq", "est_values"), 0.0)
    pooled = _Pooled()
    for start in range(0, n, step):
        stop = min(start + step, n)
        done = np.repeat(status[start // k:-(-stop // k)] > 0, k)[: stop - start]
        if not done.any():
            continue
        est = np.asarray(decoded[start:stop])[done]
        ok = metrics.decodable_rows(est)
        sums["done"] += est.shape[0]
        sums["missing"] += int((~ok).sum())
        known = np.asarray(est[ok], dtype=np.float64)  # the estimates' own scale, for the LOO error's
        sums["est_sq"] += float(np.sum(known**2))
        sums["est_values"] += known.size
        if filled is not None:
            sums["filled"] += int(np.asarray(filled[start:stop])[done].sum())
        ref = None
        if reference is not None:
            ref = np.asarray(reference[start:stop])[done]
            has_ref = metrics.decodable_rows(ref)  # a batch whose reference f could not compute is not scored
            if has_ref.any():
                sums["scored"] += int(has_ref.sum())
                sums["agree"] += metrics.rel_acc(est[has_ref], ref[has_ref]) * int(has_ref.sum())
                both = int((ok & has_ref).sum())
                if both:
                    sums["sq"] += metrics.mse(est[has_ref], ref[has_ref]) * both
                    sums["sq_rows"] += both
                    pooled.add(est, ref)
        if labels is not None:
            lab = np.asarray(labels[start:stop])[done]
            sums["labelled"] += lab.size
            sums["hit"] += metrics.accuracy(est, lab) * lab.size
            if ref is not None:
                sums["hit_uncoded"] += metrics.accuracy(ref, lab) * lab.size
    nan = float("nan")
    return {
        "rel_acc": sums["agree"] / sums["scored"] if sums["scored"] else nan,
        "accuracy": sums["hit"] / sums["labelled"] if sums["labelled"] else nan,
        "accuracy_uncoded": sums["hit_uncoded"] / sums["labelled"] if sums["labelled"] and reference is not None else nan,
        "rmse": float(np.sqrt(sums["sq"] / sums["sq_rows"])) if sums["sq_rows"] else nan,
        **pooled.result(),
        "missing": int(sums["missing"]),
        "filled": int(sums["filled"]),
        "_done_samples": int(sums["done"]),
        "_est_ms": sums["est_sq"] / sums["est_values"] if sums["est_values"] else nan,
    }


#: the metric columns of each output kind (:func:`gcc_dask.metrics.output_kind`); the others are left out
KIND_COLUMNS = {"classifier": ("rel_acc", "accuracy", "accuracy_uncoded", "rmse"),
                "regression": ("rmse", "rel_rmse", "r2", "max_abs_err")}
_METRIC_COLUMNS = ("rel_acc", "accuracy", "accuracy_uncoded", "rmse", "rel_rmse", "r2", "max_abs_err")


def _output_kind(attrs: Any, shape: Any) -> str:
    """The run's ``run.output_kind`` as its stored config gives it, or (``auto``, or a store made before the
    key existed) the kind inferred from f's output shape (:func:`gcc_dask.metrics.output_kind`)."""
    config = attrs.get("config")
    run = config.get("run") if isinstance(config, Mapping) else None
    given = run.get("output_kind") if isinstance(run, Mapping) else None
    return given if given in metrics.OUTPUT_KINDS else metrics.output_kind(tuple(shape or ()))


@names_corrupt_chunks
def summarize_run(path: str) -> pd.DataFrame:
    """Summarise a run store: one row per scheme, indexed by scheme name.

    Columns: ``code`` (the registered code the scheme runs), ``num_workers`` (its N), ``output_kind``
    (``"classifier"`` or ``"regression"``: the run's ``run.output_kind``, or with ``auto`` inferred from f's
    output shape by :func:`gcc_dask.metrics.output_kind`: two or more values per sample, or one), the metrics
    of that kind
    (:data:`KIND_COLUMNS`): for a classifier ``rel_acc``, ``accuracy``, ``accuracy_uncoded``, ``rmse``; for
    a regression ``rmse``, ``rel_rmse`` (relative RMSE, √MSE over the RMS of f), ``r2`` (R² of the estimates
    against f) and ``max_abs_err`` (the largest absolute error), and never a RelAcc or an accuracy (the
    argmax of one value is always 0); then ``latency_p50_s``, ``latency_p99_s``, ``cutoff_p50_s``,
    ``cutoff_p99_s``, ``samples_per_s``, ``batches``, ``decoded``, ``undecodable``, ``failed``, ``pending``,
    ``missing``, ``filled``, ``mean_received``, ``mean_backups`` (the backup copies a ``speculative`` batch
    launched, on average; 0 for the other schemes, NaN for a store without the count). Every metric is a
    float64, NaN when it cannot be computed (no reference stored: ``run.reference`` false; no labels for the
    accuracy). ``attrs["output_kind"]`` is the kind too. Sample-level metrics pool every decoded sample of the
    run; samples without an estimate (NaN rows: an undecodable batch, or a replicated input whose copies all
    straggled, without a fill) are counted in ``missing``, count as wrong in ``rel_acc``/``accuracy`` and are
    left out of ``rmse``, ``rel_rmse``, ``r2`` and ``max_abs_err``; samples whose estimate a fill took from
    their neighbours' results are counted in ``filled`` (and scored like the others). ``est_rel_rmse`` is gcc's
    (and letcc's) leave-one-out estimate of the relative RMSE, from the decoded outputs alone (NaN for the other
    schemes); ``poor`` says why a scheme's estimates are poor ("" when they are not: :func:`poor_reason`), and
    ``attrs["poor"]`` maps each such scheme to it.
    ``samples_per_s`` is samples over the summed batch latencies (the throughput one batch at a time).

    Raises
    ------
    gcc_dask.errors.StoreError
        If ``path`` is not a readable run store, or a chunk of it cannot be decoded (the message names the
        array, the chunk and its batch).
    """
    from gcc_dask.errors import StoreError

    path = os.path.expanduser(os.fspath(path))  # "~/run.zarr", as the store's own readers take it
    try:
        schemes = _schemes(path)
        root = zarr.open_group(path, mode="r", use_consolidated=False)
        inputs = root["inputs"]
    except Exception as e:
        raise StoreError(f"store: cannot read run store {path!r}: {type(e).__name__}: {e}") from None
    missing = [key for key in REQUIRED_ATTRS if key not in root.attrs]
    if missing:  # never a KeyError from deep inside: one line naming what the damage took
        raise StoreError(f"store: cannot read run store {path!r}: its zarr.json lacks the attribute"
                         f"{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} (damaged: a key edited "
                         "or misspelt)")
    labels = inputs["labels"] if "labels" in inputs else None
    reference = inputs["reference"] if "reference" in inputs else None
    shape = root.attrs.get("output_shape")
    if shape is None and schemes:
        shape = root[schemes[0]]["decoded"].shape[1:]
    kind = _output_kind(root.attrs, shape)
    rows = []
    for scheme in schemes:
        # the per-batch arrays straight from zarr: xarray would build a pandas index over the million-row
        # ``sample`` coordinate (about 30 MB of the driver's memory at a million samples, BENCHMARKS.md)
        group = root[scheme]
        status = group["status"][...]
        done_batches = np.flatnonzero(status > 0)
        attrs = group.attrs
        row = {"scheme": scheme, "code": attrs.get("code_name", scheme),
               "num_workers": int(attrs.get("num_workers", group["received"].shape[1])),
               "output_kind": kind}
        scores = _sample_metrics(group["decoded"], reference, labels, status, int(root.attrs["batch_size"]),
                                 group["filled"] if "filled" in group else None)
        row.update({name: value for name, value in scores.items()
                    if name not in _METRIC_COLUMNS or name in KIND_COLUMNS[kind]})
        done_samples = row.pop("_done_samples")
        est_ms = row.pop("_est_ms")
        row["est_rel_rmse"] = _loo_relative_error(group, done_batches, est_ms, int(root.attrs["batch_size"]),
                                                  int(np.prod(tuple(shape or ()), dtype=np.int64)))
        lat = group["batch_latency_s"][...][done_batches] if "batch_latency_s" in group else np.array([])
        cut = group["cutoff_s"][...][done_batches]
        lat, cut = lat[np.isfinite(lat)], cut[np.isfinite(cut)]
        row["latency_p50_s"] = float(np.percentile(lat, 50)) if lat.size else np.nan
        row["latency_p99_s"] = float(np.percentile(lat, 99)) if lat.size else np.nan
        row["cutoff_p50_s"] = float(np.percentile(cut, 50)) if cut.size else np.nan
        row["cutoff_p99_s"] = float(np.percentile(cut, 99)) if cut.size else np.nan
        row["samples_per_s"] = float(done_samples / lat.sum()) if lat.size and lat.sum() > 0 else np.nan
        row["batches"] = int(status.size)
        row["decoded"] = int(np.isin(status, (1, 2)).sum())
        row["undecodable"] = int((status == 3).sum())
        row["failed"] = int((status == 4).sum())
        # shards that failed (f raised on them, or their worker was lost): erasures, decoded around
        row["failed_shards"] = int(group["n_failed"][...][done_batches].sum()) if "n_failed" in group else 0
        row["pending"] = int((status == 0).sum())
        received = group["received"][...][done_batches]
        row["mean_received"] = float(received.sum(axis=1).mean()) if received.size else np.nan
        backups = group["n_backups"][...][done_batches] if "n_backups" in group else np.array([])
        row["mean_backups"] = float(backups.mean()) if backups.size else np.nan
        row["poor"] = poor_reason(row, kind, done_samples)
        rows.append(row)
    df = pd.DataFrame(rows).set_index("scheme")
    df.attrs["output_kind"] = kind
    df.attrs["poor"] = {name: why for name, why in df["poor"].items() if why} if len(df) else {}
    return df


#: the thresholds above which the summary says a scheme's estimates are poor (docs/concepts.rst, section
#: 'When estimates are poor'): the relative RMSE against f (or, without f, gcc's leave-one-out estimate of it,
#: which overstates the error, hence its higher threshold), the fraction of samples whose argmax disagrees
#: with f's, and the fraction of samples that were filled from neighbours or left without an estimate
POOR_REL_RMSE = 0.1
POOR_EST_REL_RMSE = 0.5
POOR_DISAGREEMENT = 0.05
POOR_LOST = 0.1


def _loo_relative_error(group, done_batches: np.ndarray, est_ms: float, batch_size: int, out_size: int) -> float:
    """gcc's leave-one-out error estimate (``<scheme>/error_estimate``, per batch the mean over k of the squared
    LOO residual norm over a block's B groups and f's outputs), as a relative RMSE: √(its mean per value) over
    the RMS of the estimates. NaN for the schemes that do not record one (only gcc and letcc do)."""
    if "error_estimate" not in group or not np.isfinite(est_ms) or est_ms <= 0:
        return float("nan")
    ee = group["error_estimate"][...][done_batches]
    ee = ee[np.isfinite(ee)]
    if not ee.size:
        return float("nan")
    code_k = int(group.attrs.get("num_inputs", 0)) or None
    per_value = float(ee.mean()) / max(1, out_size) / max(1, batch_size // code_k if code_k else 1)
    return float(np.sqrt(per_value / est_ms))


def _beyond(value: float, limit: float) -> str:
    """`value` with the fewest significant digits (2 at least) that show it differs from `limit`: a relative RMSE
    of 0.1004 against a limit of 0.1 reads ``0.1004``, not ``0.1 > 0.1``."""
    for digits in range(2, 10):
        text = f"{value:.{digits}g}"
        if float(text) != float(f"{limit:.{digits}g}"):
            return text
    return repr(float(value))


def poor_reason(row, kind: str, done_samples: int) -> str:
    """Why a summary row's estimates are poor, in a few words ("" when they are not): the first of its relative
    RMSE (a regression) or RelAcc (a classifier) against f beyond :data:`POOR_REL_RMSE` /
    :data:`POOR_DISAGREEMENT`; a regression's errors against f's spread about its mean, √(1 − R²), beyond
    :data:`POOR_REL_RMSE` too (an f far from 0 hides them in its relative RMSE); without f, gcc's leave-one-out estimate beyond :data:`POOR_EST_REL_RMSE`; the
    samples filled or missing beyond :data:`POOR_LOST` of those done."""
    def value(name: str) -> float:
        v = row.get(name, np.nan)
        return float(v) if v is not None and np.isfinite(v) else np.nan

    rel_rmse, rel_acc, est, r2 = value("rel_rmse"), value("rel_acc"), value("est_rel_rmse"), value("r2")
    if kind == "regression" and rel_rmse > POOR_REL_RMSE:
        return f"relative RMSE {_beyond(rel_rmse, POOR_REL_RMSE)} > {POOR_REL_RMSE:g}"
    if kind == "regression" and r2 < 1 - POOR_REL_RMSE ** 2:
        # the same limit on the errors against f's spread about its mean, √(1 − R²): an f far from 0 (a price, a
        # temperature in kelvin) makes its relative RMSE small whatever the errors against its variation
        spread = float(np.sqrt(1 - r2))
        return (f"errors {_beyond(spread, POOR_REL_RMSE)} of f's spread about its mean > {POOR_REL_RMSE:g} (R² "
                f"{r2:.3g}; the relative RMSE, {rel_rmse:.2g}, is small only because f is far from 0)")
    if kind == "classifier" and 1.0 - rel_acc > POOR_DISAGREEMENT:
        return f"RelAcc {_beyond(rel_acc, 1 - POOR_DISAGREEMENT)} < {1 - POOR_DISAGREEMENT:g}"
    if np.isnan(rel_rmse) and np.isnan(rel_acc) and est > POOR_EST_REL_RMSE:
        return (f"estimated relative error {_beyond(est, POOR_EST_REL_RMSE)} > {POOR_EST_REL_RMSE:g} (leave-one-out, "
                "no reference)")
    lost = (value("filled") + value("missing")) / done_samples if done_samples > 0 else np.nan
    if lost > POOR_LOST:
        return f"{lost:.0%} of samples filled or missing > {POOR_LOST:.0%}"
    return ""


#: the columns ``gcc-dask run`` prints, and their short names (the table fits 100 columns)
SHORT_COLUMNS = {"num_workers": "N", "rel_acc": "rel_acc", "accuracy": "acc", "rmse": "rmse",
                 "rel_rmse": "rel_rmse", "r2": "r2", "max_abs_err": "max_err", "latency_p99_s": "p99_s",
                 "cutoff_p99_s": "cut99_s",
                 "mean_received": "recv", "missing": "missing", "filled": "filled", "failed": "failed"}


def poor_line(summary: pd.DataFrame, name: str, why: str) -> str:
    """The line that says scheme `name`'s estimates are poor (`why`, from ``summary.attrs["poor"]``), with what
    gives f itself: speculative or uncoded waiting for every result, or (for ``uncoded`` at a cutoff, whose
    missing rows are what made it poor) the same scheme with ``cutoff.stragglers: 0``, or speculative."""
    code = summary.at[name, "code"] if "code" in summary.columns and name in summary.index else None
    exact = ("uncoded with every result (cutoff.stragglers: 0) or speculative gives f itself" if code == "uncoded"
             else "an exact scheme, speculative or uncoded, gives f itself")
    return f"poor estimates: {name}: {why} ({exact}; docs/concepts.rst, section 'When estimates are poor')"


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as a Markdown table of its main columns, under 100 characters wide (what ``gcc-dask run``
    prints at the end; every column stays in the store and in the report's CSV).

    The metric columns are those of the run's output kind (:func:`summarize_run`): ``rel_acc``, ``acc`` (the
    accuracy against the labels) and ``rmse`` for a classifier; ``rel_rmse``, ``r2`` and ``max_err``
    (``max_abs_err``) for a regression (its ``rmse`` stays in the full table), with a line under the table
    naming the kind. ``N`` is the scheme's workers, ``p99_s`` the 99th percentile of the batch latency,
    ``cut99_s`` the 99th percentile of when the cutoff fired, ``recv`` the mean number of results used, ``missing`` the samples
    without an estimate, ``filled`` those a fill estimated from their neighbours, ``failed`` the failed
    batches (an undecodable batch's samples are ``missing``). Under the table, a line for each
    ``speculative`` scheme gives the mean backup copies its batches launched (``mean_backups``), and one for
    each scheme with failed shards counts them (``failed_shards``: f raised on them, or their worker was lost;
    erasures, decoded around, which the ``failed`` column of batches does not count).
    """
    kind = summary.attrs.get("output_kind")
    if kind is None and "output_kind" in summary.columns and len(summary):
        kind = summary["output_kind"].iloc[0]
    hidden = {"rmse"} if kind == "regression" else set()  # the relative RMSE says it, in f's own scale
    cols = [c for c in SHORT_COLUMNS if c in summary.columns and c not in hidden]
    header = ["scheme", *(SHORT_COLUMNS[c] for c in cols)]
    def cell(value, column: str) -> str:
        if isinstance(value, (int, np.integer)):
            return str(value)
        text = f"{value:.4g}" if column == "r2" else f"{value:.3g}"  # R² 0.9995 is not 1
        return text if len(text) <= 7 else f"{value:.1e}"

    body = [[str(name), *(cell(summary.at[name, c], c) for c in cols)] for name in summary.index]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i else (":" + "-" * (w + 1)) for i, w in enumerate(widths)) + "|"
    notes = []
    if "code" in summary.columns and "mean_backups" in summary.columns:
        notes = [f"{name}: {summary.at[name, 'mean_backups']:.3g} backup copies a batch (mean)"
                 for name in summary.index if summary.at[name, "code"] == "speculative"]
    if "failed_shards" in summary.columns:  # (a newcomer read "failed 0" while f raised on shards)
        notes += [f"{name}: {int(summary.at[name, 'failed_shards']):,} shards failed (f raised, or their worker "
                  "was lost): erasures, decoded around (the failed column counts batches without an estimate)"
                  for name in summary.index if summary.at[name, "failed_shards"] > 0]
    for name, why in (summary.attrs.get("poor") or {}).items():
        notes.append(poor_line(summary, name, why))
    if kind == "regression":
        notes.append("output_kind regression (one value per sample, or set): relative RMSE, R², largest "
                     "error; no RelAcc")
    # each note under the table wrapped to 100 columns, as the table fits them, its later lines indented
    wrapped = [part for note in notes for part in textwrap.wrap(note, 100, subsequent_indent="  ",
                                                                break_on_hyphens=False)]
    return "\n".join([line(header), rule, *(line(r) for r in body), *wrapped])
