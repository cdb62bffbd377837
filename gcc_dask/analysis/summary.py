"""The per-scheme summary table of a pipeline run, read from its Zarr store only.

One row per scheme: RelAcc, accuracy (and the uncoded model's), RMSE, batch latency p50/p99, cutoff
p50/p99, samples/s, and how many batches were undecodable or failed (docs/concepts.rst, section 'Metrics').
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import zarr

from gcc_dask import metrics
from gcc_dask.analysis.stores import names_corrupt_chunks

__all__ = ["summarize_run", "format_summary"]

def _schemes(path: str) -> list[str]:
    root = zarr.open_group(path, mode="r")
    return sorted(name for name, _ in root.groups() if name != "inputs")


#: samples read at once when the sample-level metrics are pooled (bounds the memory of a summary)
SUMMARY_ROWS = 1 << 16


def _sample_metrics(decoded, reference, labels, status: np.ndarray, k: int, filled=None) -> dict:
    """RelAcc, RMSE, accuracy (and f's own), and the missing and filled counts, pooled over the samples of the done
    batches (of ``k`` rows each), read block by block (whole batches at a time) so that a long run is
    summarised in bounded memory. Each block's :mod:`gcc_dask.metrics` are weighted by the rows they average
    over."""
    n = decoded.shape[0]
    step = max(k, (SUMMARY_ROWS // k) * k)
    sums = dict.fromkeys(("agree", "scored", "sq", "sq_rows", "hit", "hit_uncoded", "labelled", "missing", "done",
                          "filled"), 0.0)
    for start in range(0, n, step):
        stop = min(start + step, n)
        done = np.repeat(status[start // k:-(-stop // k)] > 0, k)[: stop - start]
        if not done.any():
            continue
        est = np.asarray(decoded[start:stop])[done]
        ok = metrics.decodable_rows(est)
        sums["done"] += est.shape[0]
        sums["missing"] += int((~ok).sum())
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
        if labels is not None:
            lab = np.asarray(labels[start:stop])[done]
            sums["labelled"] += lab.size
            sums["hit"] += metrics.accuracy(est, lab) * lab.size
            if ref is not None:
                sums["hit_uncoded"] += metrics.accuracy(ref, lab) * lab.size
    nan = float("nan")
    return {
        "rel_acc": sums["agree"] / sums["scored"] if sums["scored"] else nan,
        "rmse": float(np.sqrt(sums["sq"] / sums["sq_rows"])) if sums["sq_rows"] else nan,
        "accuracy": sums["hit"] / sums["labelled"] if sums["labelled"] else nan,
        "accuracy_uncoded": sums["hit_uncoded"] / sums["labelled"] if sums["labelled"] and reference is not None else nan,
        "missing": int(sums["missing"]),
        "filled": int(sums["filled"]),
        "_done_samples": int(sums["done"]),
    }


@names_corrupt_chunks
def summarize_run(path: str) -> pd.DataFrame:
    """Summarise a run store: one row per scheme, indexed by scheme name.

    Columns: ``code`` (the registered code the scheme runs), ``num_workers`` (its N), ``rel_acc``,
    ``accuracy``, ``accuracy_uncoded``, ``rmse``, ``latency_p50_s``, ``latency_p99_s``, ``cutoff_p50_s``,
    ``cutoff_p99_s``, ``samples_per_s``, ``batches``, ``decoded``, ``undecodable``, ``failed``, ``pending``,
    ``missing``, ``filled``, ``mean_received``, ``mean_backups`` (the backup copies a ``speculative`` batch
    launched, on average; 0 for the other schemes, NaN for a store without the count). Sample-level metrics
    pool every decoded sample of the run;
    samples without an estimate (NaN rows: an undecodable batch, or a replicated input whose copies all
    straggled, without a fill) are counted in ``missing``, count as wrong in ``rel_acc``/``accuracy`` and are
    left out of ``rmse``; samples whose estimate a fill took from their neighbours' results are counted in
    ``filled`` (and scored like the others).
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
    labels = inputs["labels"] if "labels" in inputs else None
    reference = inputs["reference"] if "reference" in inputs else None
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
               **_sample_metrics(group["decoded"], reference, labels, status, int(root.attrs["batch_size"]),
                                 group["filled"] if "filled" in group else None)}
        done_samples = row.pop("_done_samples")
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
        row["pending"] = int((status == 0).sum())
        received = group["received"][...][done_batches]
        row["mean_received"] = float(received.sum(axis=1).mean()) if received.size else np.nan
        backups = group["n_backups"][...][done_batches] if "n_backups" in group else np.array([])
        row["mean_backups"] = float(backups.mean()) if backups.size else np.nan
        rows.append(row)
    return pd.DataFrame(rows).set_index("scheme")


#: the columns ``gcc-dask run`` prints, and their short names (the table fits 100 columns)
SHORT_COLUMNS = {"num_workers": "N", "rel_acc": "rel_acc", "accuracy": "acc", "rmse": "rmse",
                 "latency_p99_s": "p99_s", "cutoff_p99_s": "cut99_s",
                 "mean_received": "recv", "missing": "missing", "filled": "filled", "failed": "failed"}


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as a Markdown table of its main columns, under 100 characters wide (what ``gcc-dask run``
    prints at the end; every column stays in the store and in the report's CSV).

    ``N`` is the scheme's workers, ``acc`` the accuracy against the labels, ``p99_s`` the 99th percentile of
    the batch latency, ``cut99_s`` the 99th
    percentile of when the cutoff fired, ``recv`` the mean number of results used, ``missing`` the samples
    without an estimate, ``filled`` those a fill estimated from their neighbours, ``failed`` the failed
    batches (an undecodable batch's samples are ``missing``). Under the table, a line for each
    ``speculative`` scheme gives the mean backup copies its batches launched (``mean_backups``).
    """
    cols = [c for c in SHORT_COLUMNS if c in summary.columns]
    header = ["scheme", *(SHORT_COLUMNS[c] for c in cols)]
    def cell(value) -> str:
        if isinstance(value, (int, np.integer)):
            return str(value)
        text = f"{value:.3g}"
        return text if len(text) <= 7 else f"{value:.1e}"

    body = [[str(name), *(cell(summary.at[name, c]) for c in cols)] for name in summary.index]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i else (":" + "-" * (w + 1)) for i, w in enumerate(widths)) + "|"
    notes = []
    if "code" in summary.columns and "mean_backups" in summary.columns:
        notes = [f"{name}: {summary.at[name, 'mean_backups']:.3g} backup copies a batch (mean)"
                 for name in summary.index if summary.at[name, "code"] == "speculative"]
    return "\n".join([line(header), rule, *(line(r) for r in body), *notes])
