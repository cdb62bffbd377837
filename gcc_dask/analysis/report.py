"""``gcc-dask report STORE``: Markdown and CSV tables plus PNG figures for a run store or a sweep store.

Files written under the output directory (default: ``<store without .zarr>-report/`` next to the store):

* sweep store: ``report.md``, ``cells.csv`` (per cell: mean/std of the metrics over trials),
  ``rates.csv`` (fitted slopes), ``figures/mse_vs_n_K{K}.png``, ``figures/mse_vs_{S|p}_K{K}.png``, and when
  f has more than one output ``comparison.csv`` (RMSE/RelAcc mean ± std) and ``figures/rel_acc_vs_n_K{K}.png``;
* run store: ``report.md``, ``summary.csv`` (per scheme, with the metrics of f's output kind: RelAcc and
  accuracy for a classifier, relative RMSE, R² and the largest error for one value per sample),
  ``latency.csv`` (p50/p90/p99),
  ``deadline.csv`` (accuracy against deadline), ``figures/latency_cdf.png``, ``figures/deadline.png``,
  ``figures/shards.png`` (each batch's coded shards: kept with their latency, not kept, late, failed);
* frontier store: ``report.md`` (the cells per straggler pattern: best estimator, best coded, best cheap, their
  paired difference), ``cells.csv``, ``estimators.csv`` and ``figures/frontier_{pattern}.png``.

:func:`make_report` returns the list of files it wrote (the report's promise, checked by the tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gcc_dask.analysis import plots
from gcc_dask.analysis.metrics import comparison_table, format_pm, run_table, straggler_dim, sweep_table
from gcc_dask.analysis.rates import dominance, rate_table
from gcc_dask.analysis.shard_view import plot_shard_view
from gcc_dask.analysis.stores import load_sweep, names_corrupt_chunks, root_attrs, store_kind

__all__ = ["Report", "make_report", "mse_pivot"]


@dataclass
class Report:
    """What :func:`make_report` wrote: the directory, every file (Markdown first), the Markdown text, and
    `left_out`: one line saying what a run report left out and why (a store without an uncoded reference or
    without labels, as :func:`gcc_dask.coded_map` makes by default), or None when nothing was."""

    out_dir: Path
    files: list[Path] = field(default_factory=list)
    markdown: str = ""
    left_out: str | None = None

    def _repr_markdown_(self) -> str:  # Jupyter shows the report itself
        return self.markdown


def _default_out(store: Path) -> Path:
    name = store.name[: -len(".zarr")] if store.name.endswith(".zarr") else store.name
    return store.parent / f"{name}-report"


def _md(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    if df.empty:
        return "_(no data)_"
    return df.to_markdown(floatfmt=floatfmt)


def mse_pivot(ds, *, num_inputs: int | None = None, sci: bool = True) -> pd.DataFrame:
    """MSE ``"mean ± std"`` by (S|p, scheme) rows and N columns, as in the tables of docs/methods.rst, section 'Convergence rates'."""
    table = sweep_table(ds)
    if table.empty:
        return table
    sdim = straggler_dim(ds)
    K = table["num_inputs"].iloc[0] if num_inputs is None else num_inputs
    table = table[table["num_inputs"] == K].copy()
    table["value"] = [f"{m:.2e}" if sci and pd.notna(m) else format_pm(m, s) for m, s in
                      zip(table["mse_mean"], table["mse_std"])]
    out = table.pivot_table(index=[sdim, "scheme"], columns="num_workers", values="value", aggfunc="first",
                            sort=False)
    out.columns = [f"N={c}" for c in out.columns]
    return out.reset_index()


def _header(attrs: dict, kind: str, path: Path) -> list[str]:
    lines = [f"# gcc-dask {kind} report: {attrs.get('name') or attrs.get('config', {}).get('name', path.name)}", "",
             f"- store: `{path}` (status {attrs.get('status')!r}, created {attrs.get('created')}, "
             f"finished {attrs.get('finished')})",
             f"- gcc-dask {attrs.get('gcc_dask_version')}, git {str(attrs.get('git_sha'))[:10]}, seed {attrs.get('seed')}"]
    return lines


def _sweep_report(path: Path, out: Path, n_boot: int) -> Report:
    ds = load_sweep(path)
    attrs, sdim = dict(ds.attrs), straggler_dim(ds)
    rep = Report(out)
    cells, rates = sweep_table(ds), rate_table(ds, n_boot=n_boot)
    md = _header(attrs, "sweep", path)
    cfg = attrs.get("config", {})
    md += [f"- function: {attrs.get('function')}",
           f"- stragglers: {attrs.get('straggler_model')} over {sdim} = {list(ds[sdim].values.tolist())}"
           + (f", pattern {attrs.get('pattern')}" if sdim == "S" else ""),
           f"- schemes: {', '.join(ds['scheme'].values.tolist())}; K = {ds['num_inputs'].values.tolist()}; "
           f"N = {ds['num_workers'].values.tolist()}; {ds.sizes['trial']} trials; points "
           f"{cfg.get('code', {}).get('points')}", ""]
    for name, df in (("cells.csv", cells), ("rates.csv", rates)):
        df.to_csv(out / name, index=False)
        rep.files.append(out / name)
    md += ["## Rates: slope of log MSE on log N (95% bootstrap interval)", "",
           _md(rates[[c for c in ("scheme", "num_inputs", sdim, "slope", "ci_low", "ci_high", "n_points",
                                  "mse_at_N_min", "mse_at_N_max") if c in rates]].set_index("scheme"), ".3g")
           if not rates.empty else "_(fewer than two N values)_", ""]
    schemes = list(ds["scheme"].values)
    if "gcc" in schemes and "bacc" in schemes:
        md += ["## gcc against bacc (mean MSE)", "", _md(dominance(ds, "gcc", "bacc"), ".3g"), ""]
    for K in ds["num_inputs"].values.tolist():
        pivot = mse_pivot(ds, num_inputs=K)
        md += [f"## MSE (mean over trials), K = {K}", "", pivot.to_markdown(index=False) if len(pivot) else
               "_(no data)_", ""]
        for fname, fig in ((f"mse_vs_n_K{K}.png", plots.plot_mse_vs_n(ds, num_inputs=K, n_boot=min(n_boot, 1000))),
                           (f"mse_vs_{sdim}_K{K}.png", plots.plot_mse_vs_s(ds, num_inputs=K))):
            rep.files.append(plots.save(fig, out / "figures" / fname))
            md += [f"![{fname}](figures/{fname})", ""]
        if "rel_acc" in ds:
            fname = f"rel_acc_vs_n_K{K}.png"
            rep.files.append(plots.save(plots.plot_metric_vs_n(ds, "rel_acc", num_inputs=K), out / "figures" / fname))
            md += [f"![{fname}](figures/{fname})", ""]
    if "rel_acc" in ds:
        comp = comparison_table(ds)
        comp.to_csv(out / "comparison.csv")
        rep.files.append(out / "comparison.csv")
        md += ["## RMSE and RelAcc, mean ± std over trials", "", _md(comp), ""]
    notes = []
    if attrs.get("skipped"):
        notes.append(f"skipped cells: {'; '.join(attrs['skipped'][:10])}" + (" ..." if len(attrs["skipped"]) > 10 else ""))
    if "coincident_points" in ds and int(ds["coincident_points"].values.max(initial=0)) > 0:
        notes.append("some (scheme, K, N) have worker points equal to data points (column coincident_points of "
                     "cells.csv): those schemes are partly systematic there (docs/methods.rst, section 'Point placement')")
    if "exhaustive_frac" in cells and (cells["exhaustive_frac"] < 1).any():
        notes.append("adversarial cells with exhaustive_frac < 1 used the heuristic search: their MSE is a lower "
                     "bound on the true worst case")
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return _finish(rep, md)


#: the per-scheme columns scored against the uncoded reference, and those scored against the labels
_REFERENCE_COLUMNS = ("rel_acc", "accuracy_uncoded", "rmse", "rel_rmse", "r2", "max_abs_err", "rmse_mean", "rmse_std",
                      "rel_acc_std")
_LABEL_COLUMNS = ("accuracy", "accuracy_uncoded")


def _left_out(attrs: dict, classifier: bool) -> str | None:
    """One line: what a run report leaves out of a store without an uncoded reference or without labels, and
    why; None when it has what the report scores against."""
    parts = []
    if not attrs.get("has_reference", True):
        shown = [c for c in _REFERENCE_COLUMNS if c != "accuracy_uncoded" and (classifier or "acc" not in c)]
        parts.append(f"no uncoded reference in this store (run.reference: false): the errors against f "
                     f"({', '.join(shown)}) and the accuracy-against-deadline table are left out (run.reference: "
                     "true stores f of every sample)")
    if classifier and not attrs.get("has_labels", True):
        parts.append("no labels in this store (its source has none): accuracy and accuracy_uncoded are left out")
    return "; ".join(parts) or None


def _run_report(path: Path, out: Path, recompute) -> Report:
    from gcc_dask.analysis.deadline import deadline_curve, deadline_table, latency_table

    attrs = root_attrs(path)
    rep = Report(out)
    summary, latency = run_table(path), latency_table(path)
    curve = deadline_curve(path, recompute=recompute)
    for name, df, index in (("summary.csv", summary, True), ("latency.csv", latency, True),
                            ("deadline.csv", curve, False)):
        df.to_csv(out / name, index=index)
        rep.files.append(out / name)
    cfg = attrs.get("config", {})
    rep.left_out = _left_out(attrs, summary.attrs.get("output_kind") != "regression")
    dropped = set(_REFERENCE_COLUMNS if not attrs.get("has_reference", True) else ()) | set(
        _LABEL_COLUMNS if not attrs.get("has_labels", True) else ())
    md = _header(attrs, "run", path)
    if "pending" in summary.columns and (summary["pending"] > 0).any():  # (an interrupted or limited run)
        md += ["- not finished: " + ", ".join(
            f"{name} {int(summary.at[name, 'batches']) - int(summary.at[name, 'pending'])} of "
            f"{int(summary.at[name, 'batches'])} batches done" for name in summary.index)
            + " (the same `gcc-dask run` command resumes it)"]
    md += [f"- {attrs.get('num_samples')} samples in {attrs.get('num_batches')} batches of "
           f"{attrs.get('batch_size')} (groups of K = {attrs.get('num_inputs', attrs.get('batch_size'))}, blocks of "
           f"B = {attrs.get('block_size', 1)}); workers per scheme {attrs.get('schemes')}",
           f"- stragglers: {cfg.get('stragglers')}", f"- cutoff: {cfg.get('cutoff')}", "",
           f"- output kind: {_kind_line(summary)}", "",
           *([f"- note: {rep.left_out}", ""] if rep.left_out else []),
           "## Per scheme", "",
           _md(summary[[c for c in ("rel_acc", "accuracy", "accuracy_uncoded", "rmse", "rel_rmse", "r2",
                                    "max_abs_err", "rmse_mean", "rmse_std", "rel_acc_std", "cutoff_p50_s",
                                    "cutoff_p99_s", "latency_p50_s", "latency_p99_s", "decoded", "undecodable",
                                    "failed", "missing", "filled", "mean_received")
                        if c in summary and c not in dropped] + _backups_column(summary)], ".4g"), "",
           *_poor_lines(summary),
           "## Latency percentiles (s)", "", _md(latency, ".4g"), ""]
    for fname, fig in (("latency_cdf.png", plots.plot_latency_cdf(path)), ("deadline.png", plots.plot_deadline(curve)),
                       ("shards.png", plot_shard_view(path))):
        rep.files.append(plots.save(fig, out / "figures" / fname))
    md += ["![latency CDF](figures/latency_cdf.png)", "",
           "## Shards by batch", "",
           "Each batch's coded shards, as the run page draws them live (docs/dashboard.rst): a kept shard coloured "
           "by its latency, the others by their fate. The store does not record which Dask worker ran a shard, nor "
           "when a batch started on the wall clock, so this view is by coded shard and batch.", "",
           "![shards by batch](figures/shards.png)", "",
           "## Accuracy against deadline", "",
           f"Basis: {curve.attrs.get('mode')} ({curve['basis'].iloc[0] if len(curve) else ''}). A batch whose cutoff "
           "fired before the deadline keeps its recorded result; a later one is decoded from the results that had "
           "arrived by the deadline" + (" (f re-evaluated offline; largest difference from the stored estimates "
                                        f"when re-decoding the recorded sets: {curve.attrs['recompute_max_abs_diff']:.2g})"
                                        if curve.attrs.get("mode") == "recompute" else
                                        "; without re-evaluating f only complete batches are scored") + ".", "",
           _md(deadline_table(curve), ".4g") if attrs.get("has_reference", True) else
           "_(left out: no uncoded reference in this store; the figure shows the results in by each deadline)_", "",
           "![accuracy against deadline](figures/deadline.png)", ""]
    return _finish(rep, md)


def _poor_lines(summary) -> list[str]:
    """A line for each scheme whose estimates are poor (the summary's ``poor`` column), and a blank line."""
    if "poor" not in summary.columns:
        return []
    lines = [f"- poor estimates: {name}: {why} (docs/concepts.rst, section 'When estimates are poor')"
             for name, why in summary["poor"].items() if isinstance(why, str) and why]
    return [*lines, ""] if lines else []


def _kind_line(summary) -> str:
    """What f returns and which metrics score it (:func:`gcc_dask.metrics.output_kind`)."""
    if summary.attrs.get("output_kind") == "regression":
        return ("regression (f returns one value per sample, inferred from its output shape): relative RMSE "
                "(rel_rmse), R² (r2) and the largest absolute error (max_abs_err); no RelAcc")
    return ("classifier (f returns two or more values per sample, inferred from its output shape): RelAcc "
            "(rel_acc) and accuracy")


def _backups_column(summary) -> list[str]:
    """``["mean_backups"]`` when a scheme of the run is ``speculative`` (the backup copies its batches launched,
    mean per batch); nothing otherwise."""
    if "code" in summary.columns and "mean_backups" in summary.columns and (summary["code"] == "speculative").any():
        return ["mean_backups"]
    return []


def _finish(rep: Report, md: list[str]) -> Report:
    rep.markdown = "\n".join(md).rstrip() + "\n"
    (rep.out_dir / "report.md").write_text(rep.markdown, encoding="utf-8")
    rep.files.insert(0, rep.out_dir / "report.md")
    return rep


@names_corrupt_chunks
def make_report(store: str | os.PathLike, out: str | os.PathLike | None = None, *,
                recompute: bool | str = "auto", n_boot: int = 2000) -> Report:
    """Write the tables and figures of a run, sweep or frontier store (see the module docstring for the files).

    Parameters
    ----------
    store : str or os.PathLike
        A run store (``gcc-dask run``) or a sweep store (``gcc-dask sweep``).
    out : str or os.PathLike, optional
        Output directory (created). Default ``<store without .zarr>-report`` next to the store.
    recompute : bool or "auto"
        Run stores: re-evaluate f offline for the accuracy–deadline curve
        (:func:`gcc_dask.analysis.deadline.deadline_curve`).
    n_boot : int
        Bootstrap replicates for the slope intervals (sweep stores).

    Returns
    -------
    Report

    Raises
    ------
    StoreError
        If `store` is neither kind of store, or a chunk of it cannot be decoded (named in the message).
    """
    path = Path(os.fspath(store)).expanduser().absolute()
    kind = store_kind(path)
    out_dir = Path(os.fspath(out)).expanduser().absolute() if out is not None else _default_out(path)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    if kind == "sweep":
        return _sweep_report(path, out_dir, n_boot)
    if kind == "frontier":
        from gcc_dask.analysis.frontier_report import frontier_report

        rep = Report(out_dir)
        rep.files, rep.markdown = frontier_report(path, out_dir)
        return rep
    return _run_report(path, out_dir, recompute)
