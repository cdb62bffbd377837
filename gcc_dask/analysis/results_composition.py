"""The composition / placement / kernel section of RESULTS.md, from the stores of the composition sweeps.

Reads ``runs/composition_{mnist,fashion}.zarr`` (training data) and ``runs/composition_{mnist,fashion}_test.zarr``
(held out), made by ``gcc-dask sweep pipelines/composition_<dataset>.yaml`` (``--set function.source.split=test
--out ...`` for the held-out ones): one RelAcc table per dataset and split, the issue's targets checked on held-out
data, and one figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

__all__ = ["CELLS", "DEFAULT", "composition_section", "relacc_table"]

#: (K, N, S) cells shown, the first three are the targets
CELLS = ((8, 16, 4), (8, 12, 2), (16, 32, 8), (8, 12, 4), (8, 16, 2), (16, 32, 4))
#: the pipeline's defaults, as labelled in the sweeps
DEFAULT = "gcc/similarity/systematic"
BASELINE = "replication/similarity"
DATASETS = {"mnist": "MNIST (LeNet-5)", "fashion": "Fashion-MNIST (the small CNN)"}


def relacc_table(ds) -> pd.DataFrame:
    """Mean RelAcc per scheme label (rows) and (K, N, S) cell (columns) of a composition sweep."""
    rows = {}
    for label in ds["scheme"].values.tolist():
        row = {}
        for k, n, s in CELLS:
            try:
                v = ds["rel_acc"].sel(scheme=label, num_inputs=k, num_workers=n, S=s).values
            except KeyError:
                v = np.array([np.nan])
            row[f"({k}, {n}, {s})"] = float(np.nanmean(v)) if np.isfinite(v).any() else np.nan
        rows[label] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("scheme / composition / points")


def _targets(name: str, test: pd.DataFrame) -> list[str]:
    c1, c2, c3 = (f"({k}, {n}, {s})" for k, n, s in CELLS[:3])
    g, r = test.loc[DEFAULT], test.loc[BASELINE]
    lines = [f"| {name} | gcc RelAcc at {c1} ≥ 0.98 | {g[c1]:.4f} | {'yes' if g[c1] >= 0.98 else 'no'} |",
             f"| {name} | gcc ≥ replication at the same cutoff + 0.02 at {c1} | {g[c1]:.4f} vs {r[c1]:.4f} "
             f"(+{g[c1] - r[c1]:.4f}) | {'yes' if g[c1] >= r[c1] + 0.02 else 'no'} |",
             f"| {name} | gcc RelAcc at {c2} ≥ 0.98 (replication cannot run) | {g[c2]:.4f} | "
             f"{'yes' if g[c2] >= 0.98 else 'no'} |",
             f"| {name} | gcc RelAcc at {c3} ≥ 0.98 | {g[c3]:.4f} | {'yes' if g[c3] >= 0.98 else 'no'} |"]
    gain = test.loc["gcc/similarity", c1] - test.loc["gcc/as_stored", c1]
    lines.append(f"| {name} | similarity − as_stored at {c1} ≥ +0.03 | +{gain:.4f} | {'yes' if gain >= 0.03 else 'no'} |")
    return lines


def _figure(tables: dict[str, tuple[pd.DataFrame, pd.DataFrame]]):
    import matplotlib.pyplot as plt

    cell = "({}, {}, {})".format(*CELLS[0])
    fig, axes = plt.subplots(1, len(tables), figsize=(6.5 * len(tables), 5.8), squeeze=False)
    for ax, (dataset, (train, test)) in zip(axes[0], tables.items()):
        labels = list(train.index)
        y = np.arange(len(labels))
        ax.barh(y - 0.2, train[cell].values, height=0.4, label="training data")
        ax.barh(y + 0.2, test.reindex(labels)[cell].values, height=0.4, label="held out")
        ax.set_yticks(y, labels, fontsize=9)
        ax.invert_yaxis()
        ax.set_xlim(0.7, 1.0)
        ax.set_xlabel("RelAcc (agreement with the uncoded model)", fontsize=10)
        ax.set_title(f"{DATASETS.get(dataset, dataset)}, (K, N, S) = {cell}", fontsize=11)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.suptitle("Which samples are coded together matters most: RelAcc by composition, placement and kernel",
                 fontsize=12)
    fig.tight_layout()
    return fig


def composition_section(runs: Path, fig: Callable[[object, str], str], load_sweep: Callable) -> tuple[list[str], list[str]]:
    """The Markdown of the section and the stores it missed. `fig(figure, name)` saves a figure and returns its
    Markdown; `load_sweep(path)` reads a sweep store."""
    md = ["## 8. Composition, placement and kernel on neural networks (how the pipeline's defaults were chosen)", "",
          "`pipelines/composition_mnist.yaml` and `pipelines/composition_fashion.yaml`: each trial codes one group of "
          "K samples of the scheme's composition of the dataset (docs/pipeline.rst, section 'Composition') and "
          "loses S random workers, the same set for every scheme of the trial; 200 trials per cell. RelAcc is the "
          "agreement with the uncoded model's argmax. `replication/...` stops at the same cutoff (N − S results): "
          "an input whose two copies both straggled is missing and counts as wrong; `replication-fill` gives it "
          "the result of its nearest neighbour in the group. Between K and 2K replication is partial (the extra "
          "copies at the group's ends first). The defaults "
          f"were chosen on the training data: the `similarity` composition and `systematic` points (`{DEFAULT}`); "
          "the kernel stays sobolev2 with λ = 0 (the gaussian kernel was no better). Then they were checked on "
          "the held-out data.", ""]
    missing, tables, targets = [], {}, []
    for dataset in DATASETS:
        paths = {split: runs / f"composition_{dataset}{suffix}.zarr" for split, suffix in (("train", ""),
                                                                                           ("test", "_test"))}
        absent = [str(p) for p in paths.values() if not p.exists()]
        if absent:
            missing += absent
            continue
        train, test = (relacc_table(load_sweep(paths[s])) for s in ("train", "test"))
        tables[dataset] = (train, test)
        for split, table in (("training data", train), ("held out", test)):
            md += [f"{DATASETS[dataset]}, {split}, mean RelAcc by (K, N, S):", "",
                   table.astype(object).where(table.notna(), None).reset_index()
                   .to_markdown(index=False, floatfmt=".4f", missingval="—"), ""]
        targets += _targets(DATASETS[dataset], test)
    if targets:
        md += ["Targets, on held-out data:", "", "| dataset | target | measured | met |", "|---|---|---|---|",
               *targets, "",
               "What the tables say: grouping similar samples is by far the largest lever (+0.07 to +0.23 over the "
               "stored order), for every estimator alike; `systematic` points add a little on MNIST and more on "
               "Fashion-MNIST. Replication stopped at the cutoff loses the inputs whose copies all straggled, and "
               "gcc beats it; replication that fills a lost input from its neighbours in a similarity group is as "
               "good as gcc or better. These trials draw one random group each (a standard error of 0.005 to 0.01): "
               "section 1 measures every estimator on every group under every straggler set, which can decide "
               "between them.", ""]
        md += [fig(_figure(tables), "composition.png"), ""]
    return md, missing
