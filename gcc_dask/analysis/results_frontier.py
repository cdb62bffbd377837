"""RESULTS.md's frontier section: every estimator at equal cost on held-out data, the coded estimator chosen on
training data against the best cheap one, and where coding wins and where it does not (docs/frontier.rst).

Reads the frontier stores made by ``gcc-dask sweep pipelines/frontier_*.yaml`` (``runs/<name>.zarr``).
"""

from __future__ import annotations

from pathlib import Path
import pandas as pd

from gcc_dask.analysis.frontier import CHEAP, CODED, cluster_mean, frontier_cells, open_frontier, paired_difference
from gcc_dask.analysis.frontier_report import cells_markdown

__all__ = ["chosen_on_training", "frontier_section", "verdict_table", "where_coding_wins"]

#: (held-out store, training store or None, title)
IMAGE_FRONTIERS = (
    ("frontier-mnist", "frontier-gcc-search", "LeNet-5 on the 1,000 MNIST test digits"),
    ("frontier-fashion", "frontier-fashion-search", "the small CNN on the 10,000 Fashion-MNIST test images"),
    ("frontier-vit", "frontier-vit-search", "the Vision Transformer on the 10,000 Fashion-MNIST test images"),
)
FUNCTION_FRONTIERS = (
    ("frontier-smooth", "x·sin x (K = 10, 500 groups of drawn inputs, MSE)"),
    ("frontier-smooth-net", "the random-feature network R⁸ → R¹⁰ (K = 10, 500 groups, MSE)"),
    ("frontier-polynomial", "1 + x + x² (K = 3, 500 groups, MSE): where LCC is exact"),
)


def chosen_on_training(train, test, pattern: str = "random") -> pd.DataFrame:
    """For every cell (N, S): the coded estimator best on the training store, measured on the held-out store,
    against the held-out store's best cheap estimator (chosen on the held-out data itself: the strongest
    alternative), paired over the held-out groups.

    Columns: ``ratio``, ``N``, ``S``, ``coded`` (the training choice), ``coded_value``, ``coded_se``, ``cheap``,
    ``cheap_value``, ``cheap_se``, ``diff`` (coded − cheap), ``diff_se``, ``verdict``.
    """
    metric = test.attrs.get("metric", "rel_acc")
    sign = 1.0 if metric == "rel_acc" else -1.0
    rows = []
    p_tr = list(train["pattern"].values).index(pattern)
    p_te = list(test["pattern"].values).index(pattern)
    test_labels = {str(c): i for i, c in enumerate(test["candidate"].values)}
    for N in sorted(set(int(n) for n in test["num_workers"].values)):
        for s in test["S"].values:
            if s not in train["S"].values:
                continue
            j_tr = list(train["S"].values).index(s)
            j_te = list(test["S"].values).index(s)
            tr = [i for i in range(train.sizes["candidate"]) if int(train["num_workers"].values[i]) == N
                  and str(train["code"].values[i]) in CODED and str(train["candidate"].values[i]) in test_labels]
            if not tr:
                continue
            best_tr = max(tr, key=lambda i: sign * cluster_mean(train[metric].values[i, j_tr, p_tr])[0])
            coded = test_labels[str(train["candidate"].values[best_tr])]
            cheap_pool = [i for i in range(test.sizes["candidate"]) if int(test["num_workers"].values[i]) == N
                          and str(test["code"].values[i]) in CHEAP]
            if not cheap_pool:
                continue
            cheap = max(cheap_pool, key=lambda i: sign * cluster_mean(test[metric].values[i, j_te, p_te])[0])
            a, b = test[metric].values[coded, j_te, p_te], test[metric].values[cheap, j_te, p_te]
            d, se = paired_difference(a, b)
            ca, cb = cluster_mean(a), cluster_mean(b)
            margin = sign * d
            rows.append({"ratio": float(test["ratio"].values[coded]), "N": N, "S": int(s),
                         "coded": str(test["estimator"].values[coded]), "coded_value": ca[0], "coded_se": ca[1],
                         "cheap": str(test["estimator"].values[cheap]), "cheap_value": cb[0], "cheap_se": cb[1],
                         "diff": d, "diff_se": se,
                         "verdict": "coded" if margin > 2 * se else "cheap" if margin < -2 * se else "tie"})
    return pd.DataFrame(rows)


def _chosen_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "_(no cells)_"
    rows = [{"N/K": f"{r.ratio:g}", "N": r.N, "S": r.S,
             "coded (chosen on training)": f"{r.coded} {r.coded_value:.4f} ± {r.coded_se:.4f}",
             "best cheap (held out)": f"{r.cheap} {r.cheap_value:.4f} ± {r.cheap_se:.4f}",
             "coded − cheap (paired)": f"{r.diff:+.4f} ± {r.diff_se:.4f}", "verdict": r.verdict}
            for r in table.itertuples()]
    return pd.DataFrame(rows).to_markdown(index=False)


def _verdicts(cells: pd.DataFrame) -> str:
    parts = []
    for pattern in ("random", "contiguous", "worst"):
        c = cells[cells["pattern"] == pattern]
        if c.empty:
            continue
        v = c["verdict"].value_counts().to_dict()
        parts.append(f"{pattern}: coded better in {v.get('coded', 0)}, cheap better in {v.get('cheap', 0)}, "
                     f"tied in {v.get('tie', 0)} of {len(c)} cells")
    return "; ".join(parts)


def frontier_section(runs: Path, figures: Path, rel: Path) -> tuple[list[str], list[str], dict]:
    """The Markdown of the section, the stores it missed, and the cells of every frontier (by store name).
    Figures are written to `figures` and linked as `rel`/name."""
    from gcc_dask.analysis.frontier import plot_frontier

    md = ["## 1. The frontier: every estimator at equal cost, on held-out data", "",
          "`pipelines/frontier_*.yaml` (docs/frontier.rst). Every estimator runs at the same number of workers N "
          "(the same N shard evaluations per K inputs): replication (at N = K: uncoded cut off at K − S results; "
          "between K and 2K: partial replication) with each fill, and the coded schemes. Every group of K similar "
          "inputs of the held-out split is decoded under *every* straggler set of the cell (so `random` is the "
          "exact expectation under S random stragglers, with no sampling noise), under every contiguous window "
          "of S workers, and under each estimator's own worst set; ± is one standard error with the groups as "
          "clusters; `coded − cheap` is the paired difference between the best coded and the best cheap "
          "estimator of the cell, with its paired standard error, and the verdict needs it beyond 2 SE. The "
          "coded candidates are the pipeline's gcc and the GCC-family members (kernels `sobolev2`, `sobolev1`, "
          "`matern32`; points `systematic`, `chebyshev`, `twins`) that searches on each model's *training* data "
          "found best (`pipelines/frontier_*search.yaml`).", ""]
    missing, counts = [], {}
    blocks = [(name, train, title, True) for name, train, title in IMAGE_FRONTIERS]
    blocks += [(name, None, title, False) for name, title in FUNCTION_FRONTIERS]
    for name, train_name, title, images in blocks:
        path = runs / f"{name}.zarr"
        if not path.exists():
            missing.append(str(path))
            continue
        ds = open_frontier(path)
        cells = frontier_cells(ds)
        counts[name] = cells
        groups = f"{int(ds.sizes['group'])} groups; " if images else ""
        md += [f"### {title}", "", f"{groups}{_verdicts(cells)}.", "",
               f"Random stragglers ({'RelAcc' if ds.attrs.get('metric') == 'rel_acc' else 'MSE'}):", "",
               cells_markdown(cells, "random"), ""]
        if images:
            for pattern in ("contiguous", "worst"):
                if pattern in ds["pattern"].values:
                    md += [f"{pattern.capitalize()} stragglers:", "", cells_markdown(cells, pattern), ""]
        plot_frontier(ds, figures / f"{name}.png", pattern="random")
        md += [f"![{name}]({(rel / f'{name}.png').as_posix()})", ""]
        if train_name is None:
            continue
        train_path = runs / f"{train_name}.zarr"
        if not train_path.exists():
            missing.append(str(train_path))
            continue
        chosen = chosen_on_training(open_frontier(train_path), ds)
        md += ["The coded estimator chosen on the training data for each cell, on the held-out data, against "
               "the held-out data's best cheap estimator (random stragglers):", "", _chosen_markdown(chosen), ""]
        counts[f"{name}/chosen"] = chosen
    if counts:
        md += where_coding_wins(counts)
    return md, missing, counts


def verdict_table(counts: dict) -> pd.DataFrame:
    """Per frontier (and the training-chosen comparison): the cells each side won, per straggler pattern."""
    titles = {name: title for name, _, title in IMAGE_FRONTIERS} | dict(FUNCTION_FRONTIERS)
    rows = []
    for name, cells in counts.items():
        if name.endswith("/chosen"):
            continue
        row = {"workload": titles.get(name, name)}
        for pattern in ("random", "contiguous", "worst"):
            c = cells[cells["pattern"] == pattern]
            if c.empty:
                continue
            v = c["verdict"].value_counts().to_dict()
            row[pattern] = f"{v.get('coded', 0)} / {v.get('cheap', 0)} / {v.get('tie', 0)}"
        chosen = counts.get(f"{name}/chosen")
        if chosen is not None and not chosen.empty:
            v = chosen["verdict"].value_counts().to_dict()
            row["training-chosen coded vs best cheap"] = f"{v.get('coded', 0)} / {v.get('cheap', 0)} / {v.get('tie', 0)}"
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


def where_coding_wins(counts: dict) -> list[str]:
    """The subsection 'Where coding wins and where it does not', from the cells measured."""
    table = verdict_table(counts)
    images = [n for n, _, _ in IMAGE_FRONTIERS if n in counts]
    image_random = pd.concat([counts[n][counts[n]["pattern"] == "random"] for n in images]) if images else None
    md = ["### Where coding wins and where it does not", "",
          "Cells won by the best coded estimator / by the best cheap one / tied (paired difference within 2 SE), "
          "per straggler pattern:", "", table.to_markdown(index=False), ""]
    if image_random is not None and len(image_random):
        v = image_random["verdict"].value_counts().to_dict()
        worst = pd.concat([counts[n][counts[n]["pattern"] == "worst"] for n in images])["verdict"].value_counts().to_dict()
        gaps = image_random.loc[image_random["verdict"] == "cheap", "diff"].abs()
        md += [f"- **Neural networks on images (the three models, held out): coding does not win.** Over "
               f"{len(image_random)} cells with random stragglers the best coded estimator is better in "
               f"{v.get('coded', 0)}, worse in {v.get('cheap', 0)} and tied in {v.get('tie', 0)}; where it is worse "
               f"it is by {gaps.min():.4f} to {gaps.max():.4f} RelAcc. The strongest cheap estimator is almost always "
               "replication (partial below 2K) with the linear fill from the received neighbours in a group of "
               "similar inputs. Contiguous stragglers favour replication further (its copies sit K workers apart). "
               "The GCC family members that won on the training data (the linear-spline kernel `sobolev1`, "
               "Chebyshev points, `matern32`) at best tie on held-out data with random stragglers (MNIST at "
               f"N/K = 1.5); under each estimator's own worst case a coded one wins {worst.get('coded', 0)} of "
               f"{int(sum(worst.values()))} image cells.", ""]
    md += ["- **Where coded computing earns its place:** an exact code on a polynomial f (LCC decodes every output "
           "exactly from its recovery threshold, where replication loses the inputs whose copies all straggled); "
           "and inputs without near neighbours (the random-feature network on uniform inputs in R⁸: gcc's smooth "
           "interpolation beats the fill from distant neighbours at N/K ≥ 1.5, while the fill wins at N/K ≤ 1.2). "
           "On x·sin x with sorted inputs every cell is a tie: the groups' inputs are so close that both decoders "
           "are near exact, and a few groups dominate the MSE.", "",
           "- **What moves every estimator:** the composition. Coding similar samples together (the `similarity` "
           "composition, section 8) lifts the cheap estimators as much as the coded ones: it is what makes a fill "
           "from neighbours accurate in the first place.", "",
           "- **So the product chooses:** `gcc-dask advise` measures this on a sample of your own data and model "
           "and recommends the estimator and N; `schemes: [auto]` runs its choice (docs/frontier.rst, section "
           "'Advice').", ""]
    return md
