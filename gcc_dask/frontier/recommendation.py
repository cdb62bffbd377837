"""What advice tells the user: the :class:`Advice` it returns, built from the frontier store it measured (the
table of candidates, the recommendation in plain sentences, the scheme entry and the ``--set`` lines that apply
it) and the files it writes (``advice.md``, ``advice.csv``, ``advice.png``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from .choose import _reached, choose

__all__ = ["Advice"]


@dataclass
class Advice:
    """What :func:`advise` found.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per candidate (its N): ``estimator``, ``code``, ``N``, ``ratio`` (N/K, the compute per sample
        relative to uncoded), the decision pattern's ``value`` ± ``se`` and ``decodable`` fraction, the paired
        difference to the best ``vs_best`` ± ``vs_best_se``, and the ``worst`` case ± ``worst_se`` when it was
        measured. With the MSE (an f with one output) a candidate that leaves outputs without an estimate
        (``decodable`` below 1) is never recommended: its MSE counts only the outputs it estimates, so it is listed
        last at its N, without a ``vs_best``, and :attr:`text` says so.
    choice : dict
        The recommended scheme entry ``{"label", "code", "params"}`` (``params`` holds ``num_workers``).
    text : str
        The recommendation, with the ties it resolved.
    set_lines : list of str
        ``--set`` options that apply it to the pipeline: the scheme entry, the number of stragglers S it was
        measured for (``cutoff.stragglers``; not with p, independent stragglers, which leave the pipeline's
        cutoff as it is), and a store of its own (``store.path`` with ``-<label>`` before ``.zarr``: the
        pipeline's own store holds another configuration's run).
    pattern : str
        The received sets the choice was made on: ``latency`` (the pipeline's latency model and cutoff),
        ``random`` (S random stragglers) or ``bernoulli`` (each worker lost with probability p).
    metric : str
        ``rel_acc`` or ``mse``.
    path : str
        The advice's frontier store (``gcc-dask report`` reads it).
    wall_s : float
    """

    table: pd.DataFrame
    choice: dict
    text: str
    set_lines: list[str]
    pattern: str
    metric: str
    path: str
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)

    def to_attrs(self) -> dict:
        """JSON-able summary of the advice (what a pipeline with ``schemes: [auto]`` records in its store)."""
        return {"choice": self.choice, "text": self.text, "pattern": self.pattern, "metric": self.metric,
                "table": json.loads(self.table.to_json(orient="records"))}


def _advice(ds, pattern: str, target: float | None, cfg, path: Path, wall: float, margin: float) -> Advice:
    from gcc_dask.analysis.frontier import cluster_mean, paired_difference

    metric = ds.attrs.get("metric", "rel_acc")
    pidx = list(ds["pattern"].values).index(pattern)
    values, rows = {}, []
    for i, cand in enumerate(ds["candidate"].values):
        v = ds[metric].values[i, 0, pidx]
        mean, se, _ = cluster_mean(v)
        row = {"candidate": str(cand), "estimator": str(ds["estimator"].values[i]), "code": str(ds["code"].values[i]),
               "N": int(ds["num_workers"].values[i]), "ratio": float(ds["ratio"].values[i]), "value": mean, "se": se,
               "decodable": cluster_mean(ds["decodable_frac"].values[i, 0, pidx])[0]}
        if "worst" in ds["pattern"].values:
            row["worst"], row["worst_se"], _ = cluster_mean(ds[metric].values[i, 0, list(ds["pattern"].values).index("worst")])
        values[str(cand)] = v
        rows.append(row)
    table = pd.DataFrame(rows)
    pick, tied, reason = choose(table, values, metric, target=target, margin=margin)
    sign = 1.0 if metric == "rel_acc" else -1.0
    # an MSE over the outputs a candidate estimated says nothing of those it left without one: such a candidate
    # is no best, has no vs_best and is listed last at its N (a RelAcc counts a missing output as wrong)
    partial = (table["decodable"] < 1.0 - 1e-12) if metric == "mse" else pd.Series(False, index=table.index)
    ranked = table[~partial] if (~partial).any() else table
    best = ranked.loc[(sign * ranked["value"]).idxmax(), "candidate"]
    table["vs_best"], table["vs_best_se"] = zip(*(paired_difference(values[c], values[best]) if not cut
                                                  else (np.nan, np.nan)
                                                  for c, cut in zip(table["candidate"], partial)))
    ref_ms = float(ds.attrs.get("reference_mean_square", np.nan))
    if metric == "mse" and ref_ms > 0:  # one output: its error relative to f's own size, as the run summary
        table["rel_rmse"] = np.sqrt(table["value"] / ref_ms)
    table = (table.assign(_partial=partial).sort_values(["N", "_partial", "value"],
                                                        ascending=[True, True, metric != "rel_acc"])
             .drop(columns="_partial").reset_index(drop=True))
    chosen = table[table["candidate"] == pick].iloc[0]
    spec_params = json.loads(json.dumps(ds.attrs["params"][pick]))
    label = _entry_label(str(chosen["estimator"]))
    choice = {"label": label, "code": str(chosen["code"]),
              "params": _entry_params(str(chosen["code"]), int(chosen["N"]), spec_params)}
    what = {"latency": "the pipeline's latency model and cutoff", "random": "S random stragglers (every set)",
            "bernoulli": "independent stragglers"}[pattern]
    lines = [_sentence(chosen, metric, what)]
    if target is not None and not _reached(table, metric, target):  # exact: f itself, at the cost of waiting
        lines = [_exact_sentence(metric, target, int(table["N"].max()), chosen)]
        label, choice = "speculative", {"label": "speculative", "code": "speculative", "params": {}}
        reason = ""
    if not math.isfinite(float(chosen["se"])):  # one group: no spread, no paired difference, nothing told apart
        lines.append(f"warning: the sample holds one group of K = {int(round(chosen['N'] / chosen['ratio']))} "
                     "only, so no standard error can be given and no two "
                     "estimators told apart: this advice is a guess; measure at least 2 groups (--samples of 2·K "
                     "or more, from a dataset that has them)")
    if partial.any():
        lines.append(_partial_note(table))
    if tied:
        lines.append(f"As good within 2 standard errors, or a code gaining less than the margin {margin:g} over "
                     f"copying: {', '.join(tied)}; the cheapest was taken.")
    if reason:
        lines.append(f"Why: {reason}.")
    set_lines = [f"--set \"schemes=[{{label: {label}, code: {choice['code']}, params: "
                 f"{json.dumps(choice['params']).replace(chr(34), '')}}}]\"",
                 *([f"--set cutoff.stragglers={int(ds['S'].values[0])}"] if pattern != "bernoulli" else []),
                 f"--set store.path={_store_for(cfg, _store_label(label, choice, ds, pattern))}"]
    return Advice(table=table, choice=choice, text="\n".join(lines), set_lines=set_lines, pattern=pattern,
                  metric=metric, path=str(path), wall_s=wall)


def _partial_note(table: pd.DataFrame) -> str:
    """The line that says which candidates leave outputs without an estimate (MSE), and why they rank last."""
    rows = table[table["decodable"] < 1.0 - 1e-12]
    named = "; ".join(
        f"{est} at N = " + ", ".join(f"{int(r['N'])} ({100 * r['decodable']:.1f}%)" for _, r in group.iterrows())
        for est, group in rows.groupby("estimator", sort=False))
    return (f"Listed last at their N and never recommended, as they leave outputs without an estimate (the share "
            f"estimated in brackets) and their MSE counts only the outputs they estimate: {named}.")


def _sentence(chosen, metric: str, what: str) -> str:
    """The recommendation in one plain sentence."""
    head = (f"Use {chosen['estimator']} with N = {int(chosen['N'])} workers per {int(round(chosen['N'] / chosen['ratio']))} "
            f"inputs ({chosen['ratio']:g}x the uncoded cost)")
    se = float(chosen["se"])  # NaN from one group: no spread is given
    if metric == "rel_acc":
        spread = f" (± {100 * se:.2f}%)" if math.isfinite(se) else ""
        return (f"{head}: its decoded argmax agrees with the uncoded model's on {100 * chosen['value']:.2f}%"
                f"{spread} of the samples under {what}.")
    pm = f" ± {se:.2g}" if math.isfinite(se) else ""
    rel = chosen.get("rel_rmse", np.nan)
    rel_text = f"its relative RMSE is {rel:.3g} (MSE {chosen['value']:.3g}{pm})" if np.isfinite(rel) \
        else f"its mean squared error is {chosen['value']:.3g}" + (f" ({pm.strip()})" if pm else "")
    return f"{head}: {rel_text} under {what}."


def _exact_sentence(metric: str, target: float, n_max: int, chosen) -> str:
    """No estimator reaches the target: the exact schemes, in one sentence, and the best approximate one."""
    return (f"No approximate estimator reaches {metric} {target:g} at N <= {n_max}, so use an exact scheme: "
            f"speculative (uncoded with backup copies of late shards) or uncoded (wait for every result); "
            f"the best approximate one is {chosen['estimator']} at N = {int(chosen['N'])}, with {metric} "
            f"{chosen['value']:.4g}" + (f" (± {float(chosen['se']):.2g})." if math.isfinite(float(chosen['se'])) else "."))


def _store_label(label: str, choice: dict, ds, pattern: str) -> str:
    """The chosen entry's label with its N and, for worst-case stragglers, S (``replication-linear-n16-s4``): two
    pieces of advice for other N or S name stores of their own (with the label alone, the second command met the
    first one's store and was refused, its configuration differing)."""
    n = choice.get("params", {}).get("num_workers")
    return (label + (f"-n{int(n)}" if n is not None else "")
            + (f"-s{int(ds['S'].values[0])}" if pattern != "bernoulli" else ""))


def _store_for(cfg, label: str) -> str:
    """A store path of its own for the pipeline run with the chosen entry: the pipeline's store, ``-<label>``
    before ``.zarr`` (its own store would refuse a run of another configuration)."""
    import shlex

    store = str(cfg.store.path)
    stem = store[:-5] if store.endswith(".zarr") else store
    path = f"{stem}-{label}.zarr"
    if os.path.isabs(path) and not os.path.relpath(path).startswith(".."):  # under the working directory
        path = os.path.relpath(path)
    return shlex.quote(path)


def _entry_label(estimator: str) -> str:
    """A scheme-entry label from a frontier estimator name ("replication/linear" -> "replication-linear")."""
    out = "".join(ch if ch.isalnum() or ch in "_-" else "-" for ch in estimator).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out or "auto"


def _entry_params(code: str, n: int, params: Mapping[str, Any]) -> dict:
    """The pipeline scheme entry's params for a frontier candidate (``num_workers`` set, uncoded stops at the
    cutoff)."""
    out = {k: v for k, v in params.items() if k not in ("on_coincidence", "nan_policy")}
    if code == "uncoded":
        out["stop"] = "cutoff"
    else:
        out["num_workers"] = n
    if code == "replication":
        out.setdefault("fill", "none")
    return out


def _files(advice: Advice, ds, out_dir: Path, plot_frontier, frontier_table) -> list[Path]:
    csv, md, png = out_dir / "advice.csv", out_dir / "advice.md", out_dir / "advice.png"
    advice.table.to_csv(csv, index=False)
    plot_frontier(ds, png, pattern=advice.pattern)
    cols = [c for c in ("estimator", "N", "ratio", "value", "se", "rel_rmse", "decodable", "vs_best", "vs_best_se",
                        "worst", "worst_se") if c in advice.table and (c != "decodable" or advice.metric == "mse")]
    md.write_text(f"# gcc-dask advice\n\n{advice.text}\n\n" + "\n".join(advice.set_lines) + "\n\n"
                  + advice.table[cols].to_markdown(index=False, floatfmt=".4f") + f"\n\n![frontier]({png.name})\n")
    return [md, csv, png, Path(advice.path)]
