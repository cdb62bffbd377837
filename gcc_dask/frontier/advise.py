"""``gcc-dask advise``: measure the frontier on a sample of a pipeline's own data and model, and choose for the user.

:func:`advise` reads a pipeline's source, workload, composition, K, N and stragglers; composes a seeded sample
of the dataset (a few thousand samples, never the whole of a large one); evaluates f once on every coded input
of every candidate estimator at every N it may use (Dask tasks on the pipeline's cluster); then decodes every
group under the cell's received sets (:mod:`gcc_dask.frontier`): every set of S random stragglers (the exact
mean), the sets the pipeline's own latency model and cutoff keep, and each estimator's worst set. It
recommends the estimator and N (docs/frontier.rst, section 'Advice'):

* ``max_redundancy`` R (default: the pipeline's N/K): the best RelAcc (lowest MSE for an f with one output)
  at N ≤ R·K;
* ``target`` X: the fewest workers N whose best estimator reaches RelAcc X;

and when candidates are within 2 paired standard errors of the best it says so and takes the cheapest of
them (the fewest workers, then an estimator that copies over one that codes). A code is recommended over the
best estimator that copies at the same N only when it gains more than 2 paired standard errors plus
``margin`` (:data:`DEFAULT_MARGIN` RelAcc): a code costs an encode and a decode per batch, and gains smaller
than that, measured on one sample, did not carry over to held-out data (docs/frontier.rst, section 'Advice').
The coded outputs are stored with the advice, so a second call with another target or straggler budget does
not evaluate f again.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from gcc_dask._paths import writable_dir
from gcc_dask.config import AdviseConfig
from gcc_dask.errors import ConfigError

from .config import CandidateSpec, default_candidates
from .reuse import expected_time, load_scores, save_scores, score_key
from .run import (REFERENCE_KEY, _build, _cached_outputs, _dataset, _encoder_digest, _write, candidates_for_specs,
                  groups_of, measure)
from .sets import PATTERNS, bernoulli_sets, latency_sets

__all__ = ["Advice", "advise", "apply_choice", "choose", "resolve_auto"]

#: the N/K values advice considers (each rounded to an N), besides the pipeline's own
RATIOS = (1.0, 1.25, 1.5, 2.0)
DEFAULT_SAMPLES = 2000
#: seeded batches of the pipeline's latency model whose kept sets advice scores ("latency" pattern)
LATENCY_DRAWS = 2000
#: the random pattern enumerates every set of S stragglers up to this many sets (else LATENCY_DRAWS draws)
EXHAUSTIVE_LIMIT = 20_000
TIE_SE = 2.0
#: the codes that copy f's outputs (no encoder, no decoder to fit): what a code must beat by the margin
COPYING = ("replication", "uncoded")
#: the RelAcc (for the MSE: the fraction of the copying estimator's MSE) a code must gain over copying at the
#: same N, beyond TIE_SE paired standard errors, to be recommended: ``advise.margin``'s default
DEFAULT_MARGIN = AdviseConfig.model_fields["margin"].default


@dataclass
class Advice:
    """What :func:`advise` found.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per candidate (its N): ``estimator``, ``code``, ``N``, ``ratio`` (N/K, the compute per sample
        relative to uncoded), the decision pattern's ``value`` ± ``se`` and ``decodable`` fraction, the paired
        difference to the best ``vs_best`` ± ``vs_best_se``, and the ``worst`` case ± ``worst_se`` when it was
        measured. With the MSE (an f with one output) a candidate that leaves outputs without an estimate is
        never recommended.
    choice : dict
        The recommended scheme entry ``{"label", "code", "params"}`` (``params`` holds ``num_workers``).
    text : str
        The recommendation, with the ties it resolved.
    set_lines : list of str
        ``--set`` options that apply it to the pipeline: the scheme entry, and a store of its own
        (``store.path`` with ``-<label>`` before ``.zarr``: the pipeline's own store holds another
        configuration's run).
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


def _specs(cfg) -> list[CandidateSpec]:
    """The default estimators, and the pipeline's own coded schemes with their parameters."""
    wl = cfg.workload
    degree = None
    if wl.kind == "analytic" and wl.name == "polynomial":
        degree = len(wl.params.get("coeffs", [0.0, 0.0, 1.0])) - 1
    specs = default_candidates(polynomial=degree is not None, degree=degree)
    have = {s.label for s in specs}
    for label in cfg.schemes:
        if label == "auto":
            continue
        code = cfg.code_of(label)
        if code in ("replication", "uncoded", "speculative"):  # among the defaults (speculative's are uncoded's)
            continue
        params = {k: v for k, v in cfg.code_params(label).items() if k not in ("nan_policy",)}
        name = label if label not in have else f"{label} (pipeline)"
        specs.append(CandidateSpec(label=name, code=code, params=params,
                                   ratios=[cfg.workers_for(label) / cfg.code.num_inputs]))
    return specs


def _ratios(cfg, max_redundancy: float | None, target: float | None) -> list[float]:
    K = cfg.code.num_inputs
    own = cfg.code.num_workers / K
    limit = max_redundancy if max_redundancy is not None else (max(RATIOS) if target is not None else own)
    values = sorted({r for r in (*RATIOS, own) if r <= limit + 1e-9})
    out, seen = [], set()
    for r in values:
        n = max(K, int(round(r * K)))
        if n not in seen:
            seen.add(n)
            out.append(n / K)
    return out


def _policy(cfg, n: int, s: int):
    from gcc_dask.runtime.cutoff import CutoffPolicy

    c = cfg.cutoff
    wait_for = n - s if c.wait_for == "N-S" else (n if c.wait_for == "all" else min(int(c.wait_for), n))
    return CutoffPolicy(num_workers=n, wait_for=max(1, wait_for), min_results=0, deadline=c.deadline,
                        quantile=c.quantile, multiplier=c.multiplier, min_runtime=c.min_runtime, on_shortfall="decode")


def choose(table: pd.DataFrame, values: Mapping[str, np.ndarray], metric: str, *,
           target: float | None = None, margin: float = DEFAULT_MARGIN) -> tuple[str, list[str], str]:
    """The recommended candidate of `table` (the decision pattern's rows), the candidates tied with it, and why.

    Parameters
    ----------
    table : DataFrame
        One row per candidate, with ``candidate``, ``code``, ``N``, ``value``.
    values : mapping
        Per-group scores of each candidate (pairs the comparisons).
    metric : {"rel_acc", "mse"}
    target : float, optional
        With a target: the fewest workers N whose best candidate reaches it; without: the best overall.
    margin : float
        In [0, 1]. What a coded candidate must gain over the best copying one (:data:`COPYING`) at its N,
        beyond ``TIE_SE`` paired standard errors: RelAcc, or for the MSE a fraction of the copying one's MSE. A
        code that gains less is set aside before the target and the ties are looked at (the copying one stands
        for it), and `reason` says so when it would have looked better than the pick.

    Returns
    -------
    (candidate, tied, reason)
        ``tied``: the others within 2 paired standard errors of the best, and the codes set aside that looked
        better than the pick.

    Raises
    ------
    ConfigError
        For a margin outside [0, 1] or not a number.
    """
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not 0 <= float(margin) <= 1:
        raise ConfigError(f"margin: got {margin!r}; expected a number in [0, 1]")
    sign = 1.0 if metric == "rel_acc" else -1.0
    rows = table.dropna(subset=["value"])
    if metric == "mse" and "decodable" in rows:  # an MSE over the outputs it kept says nothing of those it lost
        rows = rows[rows["decodable"] >= 1.0 - 1e-12]
    set_aside = _set_aside(rows, values, metric, float(margin))
    pick, best, tied, reason = _cheapest_tied(rows[~rows["candidate"].isin(list(set_aside))], values, metric,
                                              target)
    # the codes set aside that would have been chosen, or looked better than the pick: say why they were not
    naive = str(_cheapest_tied(rows, values, metric, target)[0]["candidate"]) if set_aside else ""
    better = [c for c in set_aside if c == naive
              or sign * float(rows.loc[rows["candidate"] == c, "value"].iloc[0]) > sign * float(pick["value"])]
    reason = "; ".join([*([reason] if reason else []), *(set_aside[c] for c in better)])
    others = [c for c in dict.fromkeys([best, *tied, *better]) if c != pick["candidate"]]
    return str(pick["candidate"]), others, reason


def _within(d: float, se: float, sign: float, extra: float = 0.0) -> bool:
    """Whether a paired difference ``d ± se`` (in the metric's direction `sign`) is at most ``TIE_SE`` standard
    errors plus `extra`: a NaN difference never is, a NaN SE counts as 0."""
    return bool(np.isfinite(d) and sign * d <= TIE_SE * (se if np.isfinite(se) else 0.0) + extra)


def _set_aside(rows: pd.DataFrame, values: Mapping[str, np.ndarray], metric: str, margin: float) -> dict[str, str]:
    """The coded candidates whose gain over the best copying one at their N is within ``TIE_SE`` paired SE plus
    `margin` (:func:`choose`): candidate -> the line that says so. The copying one stands for each of them."""
    from gcc_dask.analysis.frontier import paired_difference

    sign = 1.0 if metric == "rel_acc" else -1.0
    copies = rows["code"].isin(COPYING)
    out: dict[str, str] = {}
    for _, r in rows[~copies].iterrows():
        copying = rows[copies & (rows["N"] == r["N"])]
        if copying.empty:
            continue
        alt = copying.loc[(sign * copying["value"]).idxmax()]
        d, se = paired_difference(values[r["candidate"]], values[alt["candidate"]])
        scale = 1.0 if metric == "rel_acc" else abs(float(alt["value"]))
        if _within(d, se, sign, margin * scale):
            fmt = ".4f" if metric == "rel_acc" else ".3g"
            out[str(r["candidate"])] = (
                f"{r['candidate']} gains {sign * d:+{fmt}} ± {se:{fmt}} {metric} over {alt['candidate']} at N = "
                f"{int(r['N'])}, within 2 paired standard errors plus the margin {margin:g}: copying is "
                "recommended over it")
    return out


def _cheapest_tied(rows: pd.DataFrame, values: Mapping[str, np.ndarray], metric: str, target: float | None):
    """The tie rule of :func:`choose` on `rows`: (the pick's row, the best, the others tied with it, why)."""
    from gcc_dask.analysis.frontier import MSE_ROUNDING, paired_difference

    sign = 1.0 if metric == "rel_acc" else -1.0
    reason = ""
    if target is not None:
        ok = rows[(sign * rows["value"]) >= sign * target]
        if ok.empty:
            reason = (f"no candidate reaches {metric} {target:g} at N <= {int(rows['N'].max())}; the best one is "
                      "recommended instead")
        else:
            rows = ok[ok["N"] == ok["N"].min()]
    best = rows.loc[(sign * rows["value"]).idxmax()]
    rounding = MSE_ROUNDING if metric == "mse" else 0.0
    tied = []
    for _, r in rows.iterrows():
        d, se = paired_difference(values[best["candidate"]], values[r["candidate"]])
        if r["candidate"] != best["candidate"] and _within(d, se, sign, rounding):
            tied.append(r["candidate"])
    pool = rows[rows["candidate"].isin([best["candidate"], *tied])].copy()
    # the cheapest of the tied: fewest workers, then copying over coding, then the better value
    pool["coded"] = ~pool["code"].isin(COPYING)
    pool = pool.assign(_v=-sign * pool["value"]).sort_values(["N", "coded", "_v"])
    return pool.iloc[0], str(best["candidate"]), tied, reason


def advise(pipeline: Any, *, samples: int = DEFAULT_SAMPLES, target: float | None = None,
           max_redundancy: float | None = None, stragglers: int | float | None = None, client=None,
           out: str | os.PathLike | None = None, overrides: Sequence[str] = (),
           echo: Callable[[str], None] | None = None, progress: bool = True,
           margin: float | None = None) -> Advice:
    """Measure every estimator on a sample of the pipeline's data and recommend one (see the module docs).

    Parameters
    ----------
    pipeline : path, mapping or PipelineConfig
        The pipeline whose source, workload, composition, K, N, cutoff and stragglers are used.
    samples : int
        Size of the seeded sample of the dataset that is composed into groups (>= 2·K; default 2,000).
    target : float, optional
        Recommend the fewest workers whose estimator reaches this RelAcc, in (0, 1] (the MSE for an f with one
        output, > 0). Not together with `max_redundancy`.
    max_redundancy : float, optional
        Largest N/K to consider (>= 1; default: the pipeline's N/K, or 2 with a `target`).
    stragglers : int or float, optional
        S (an integer, 0 <= S < K) or p (a float in (0, 1)); default the pipeline's ``cutoff.stragglers``.
    client : distributed.Client, optional
    out : path, optional
        Where the advice goes: ``advice.zarr`` (the frontier store, reused by the next call), ``advice.csv``,
        ``advice.md`` and ``advice.png``. Default ``runs/<name>-advice``.
    overrides : sequence of "key=value"
        As ``--set`` on the pipeline.
    echo : callable, optional
    progress : bool
    margin : float, optional
        What a code must gain over copying at its N beyond 2 paired standard errors, >= 0 (:func:`choose`);
        default the pipeline's ``advise.margin`` (0.003).

    Returns
    -------
    Advice

    Raises
    ------
    ConfigError
        A bad `samples`, `target`, `max_redundancy`, `stragglers` or `margin` (one line naming the option), or a
        pipeline config error.
    """
    from gcc_dask.analysis.frontier import frontier_table, open_frontier, plot_frontier
    from gcc_dask.config import load_config
    from gcc_dask.inputs import _probe_model, build_source_and_workload
    from gcc_dask.runtime.cluster import ClusterSpec, connect
    from gcc_dask.stragglers import latency_model_from_config

    say = echo or (lambda _msg: None)
    cfg = load_config(pipeline, overrides=overrides)
    K = cfg.code.num_inputs
    _check_options(samples, target, max_redundancy, stragglers, K)
    if margin is not None and not (isinstance(margin, numbers.Real) and not isinstance(margin, bool)
                                   and math.isfinite(margin) and 0 <= margin <= 1):
        raise ConfigError(f"--margin: got {margin!r}; expected a number in [0, 1] (RelAcc a code must gain over "
                          "copying)")
    margin = cfg.advise.margin if margin is None else float(margin)
    S, p = _stragglers(cfg, stragglers)
    out_dir = Path(os.fspath(out) if out is not None else f"runs/{cfg.name}-advice").expanduser().absolute()
    path = out_dir / "advice.zarr"
    source, workload = build_source_and_workload(cfg)
    samples = min(int(samples), int(source.num_samples))
    fingerprint = _data_fingerprint(cfg, source, workload, samples)
    cached = _cached_outputs(path, fingerprint)
    known = cached.get(REFERENCE_KEY)
    f_cost = None
    if known is not None:  # f's outputs are stored: its shape is known, and f is not run again, not even once
        output_shape = tuple(int(n) for n in known.shape[2:])
    else:  # one line if the data do not fit f; and f's cost on a few rows, for the expected time
        output_shape, f_cost = _probe_model(workload, source, cfg.run.nan_policy, timed=True)
    if target is not None and int(np.prod(output_shape)) > 1 and target > 1:
        raise ConfigError(f"--target-relacc: got {target!r}; expected a RelAcc in (0, 1]")
    # (once the options are known good: a refusal writes nothing); one line when it cannot be made or written
    out_dir = Path(writable_dir("--out" if out is not None else "advise output folder", out_dir))
    ratios = _ratios(cfg, max_redundancy, target)
    candidates, skipped = candidates_for_specs(_specs(cfg), K, ratios)
    index, X, labels = groups_of(source, K, cfg.composition.policy, cfg.composition.seed, samples=samples)
    G = int(index.shape[0])
    if known is not None and known.shape[:2] != (G, K):
        raise ConfigError(f"--out: got {str(out_dir)!r}, whose stored outputs are of {known.shape[0]} groups of "
                          f"{known.shape[1]}; expected {G} of K = {K}: pass another --out")  # not reached: same digest
    latency = latency_model_from_config(cfg.stragglers.model_dump(), strict=False)
    seed = cfg.stragglers.seed
    patterns = ("random", "worst") if p is None else ()

    def extra(n: int, s: int) -> dict:
        """The received sets beyond the frontier's own patterns: p's draws, or the latency model's."""
        if p is not None:
            return {"bernoulli": bernoulli_sets(n, p, LATENCY_DRAWS, seed)}
        if latency is not None:
            return {"latency": latency_sets(latency, _policy(cfg, n, s), LATENCY_DRAWS, seed)}
        return {}

    # what fixes each (estimator, N, S)'s scores: stored ones are reused (docs/frontier.rst, section 'Advice')
    extra_id = ({"p": p} if p is not None else
                {"latency": cfg.stragglers.model_dump(mode="json"), "cutoff": cfg.cutoff.model_dump(mode="json")}
                if latency is not None else {})
    s_values = [S if p is None else 0]
    keys = {(c.label, s): score_key(fingerprint, c.code, K, c.num_workers, c.params, s, patterns, extra_id,
                                    EXHAUSTIVE_LIMIT, LATENCY_DRAWS, seed)
            for c in candidates for s in s_values if s < c.num_workers}
    stored = load_scores(out_dir)
    have = {k: stored[key] for k, key in keys.items() if key in stored}
    builds = {c.label: _build(c.code, K, c.num_workers, c.params) for c in candidates}
    digests = {label: _encoder_digest(b) for label, b in builds.items() if not b.selection}
    missing = {digests[c.label]: c.num_workers for c in candidates if c.label in digests
               and digests[c.label] not in cached}  # f runs once per encoder, on G·N coded rows
    f_rows = (0 if known is not None else G * K) + G * sum(missing.values())

    say(f"advice for {cfg.name}: {G} group{'s' if G != 1 else ''} of K = {K} from a sample of {samples:,} samples "
        f"({cfg.composition.policy}), N = {sorted({c.num_workers for c in candidates})}, "
        + (f"S = {S}" if p is None else f"p = {p:g}"))
    t0 = time.perf_counter()
    if f_rows == 0 and len(have) == len(keys):  # everything is stored: no cluster, no f, no decode
        say(expected_time(0, 0.0, [], output_shape, 1).line())
        reference, outputs, results = known, dict(cached), have
    else:
        spec = ClusterSpec.from_config(cfg.cluster)
        with connect(spec, client) as c:
            threads = _parallelism(c)
            work = [(builds[label], G, _num_sets(builds[label].num_workers, s, patterns, p, latency),
                     builds[label].num_workers) for (label, s) in keys if (label, s) not in have]
            say(expected_time(f_rows, f_cost.seconds_per_row if f_cost else 0.0, work, output_shape,
                              threads).line())
            reference, outputs, results = measure(
                c, workload, X, candidates, s_values, patterns, exhaustive_limit=EXHAUSTIVE_LIMIT,
                draws=LATENCY_DRAWS, seed=seed, cached=cached, extra_sets=extra, progress=progress, name="advise",
                cached_scores=have)
        save_scores(out_dir, {**stored, **{keys[k]: v for k, v in results.items() if k in keys}})
    wall = time.perf_counter() - t0
    names = [*[q for q in PATTERNS if q in patterns],
             *(["latency"] if latency is not None and p is None else []), *(["bernoulli"] if p is not None else [])]
    ds = _dataset(candidates, results, index, labels, reference, skipped, S=s_values, patterns=names,
                  attrs={"name": f"{cfg.name}-advice", "config": cfg.resolved(), "data_fingerprint": fingerprint,
                         "num_inputs": K, "samples": samples})
    _write(path, ds, outputs)
    ds = open_frontier(path)
    decision = "latency" if "latency" in names else ("bernoulli" if p is not None else "random")
    advice = _advice(ds, decision, target, cfg, path, wall, margin)
    advice.files = _files(advice, ds, out_dir, plot_frontier, frontier_table)
    return advice


def _parallelism(client) -> int:
    """How many tasks the cluster runs at once: per host, its worker threads, at most its cores."""
    threads = client.nthreads()
    try:
        cores = client.run(os.cpu_count)
    except Exception:  # a worker that cannot run it: count its threads
        cores = {}
    hosts: dict[str, list[int]] = {}
    for address, n in threads.items():
        host = address.rsplit(":", 1)[0]
        hosts.setdefault(host, [0, 0])
        hosts[host][0] += int(n)
        hosts[host][1] = max(hosts[host][1], int(cores.get(address) or n))
    return max(1, sum(min(t, c) for t, c in hosts.values()))


def _num_sets(N: int, s: int, patterns: Sequence[str], p: float | None, latency) -> int:
    """How many received sets one (estimator, N, S) is decoded under."""
    m = LATENCY_DRAWS if (p is not None or latency is not None) else 0
    if patterns:
        m += math.comb(N, s) if math.comb(N, s) <= EXHAUSTIVE_LIMIT else LATENCY_DRAWS
    return m


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
    best = table.loc[(sign * table["value"]).idxmax(), "candidate"]
    table["vs_best"], table["vs_best_se"] = zip(*(paired_difference(values[c], values[best]) for c in table["candidate"]))
    ref_ms = float(ds.attrs.get("reference_mean_square", np.nan))
    if metric == "mse" and ref_ms > 0:  # one output: its error relative to f's own size, as the run summary
        table["rel_rmse"] = np.sqrt(table["value"] / ref_ms)
    table = table.sort_values(["N", "value"], ascending=[True, metric != "rel_acc"]).reset_index(drop=True)
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
    if tied:
        lines.append(f"As good within 2 standard errors, or a code gaining less than the margin {margin:g} over "
                     f"copying: {', '.join(tied)}; the cheapest was taken.")
    if reason:
        lines.append(f"Why: {reason}.")
    set_lines = [f"--set \"schemes=[{{label: {label}, code: {choice['code']}, params: "
                 f"{json.dumps(choice['params']).replace(chr(34), '')}}}]\"",
                 f"--set store.path={_store_for(cfg, label)}"]
    return Advice(table=table, choice=choice, text="\n".join(lines), set_lines=set_lines, pattern=pattern,
                  metric=metric, path=str(path), wall_s=wall)


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


def _reached(table: pd.DataFrame, metric: str, target: float) -> bool:
    """Whether a candidate reaches `target` (with the MSE: one that estimates every output, as :func:`choose`)."""
    sign = 1.0 if metric == "rel_acc" else -1.0
    rows = table.dropna(subset=["value"])
    if metric == "mse" and "decodable" in rows:
        rows = rows[rows["decodable"] >= 1.0 - 1e-12]
    return bool(((sign * rows["value"]) >= sign * target).any())


def _exact_sentence(metric: str, target: float, n_max: int, chosen) -> str:
    """No estimator reaches the target: the exact schemes, in one sentence, and the best approximate one."""
    return (f"No approximate estimator reaches {metric} {target:g} at N <= {n_max}, so use an exact scheme: "
            f"speculative (uncoded with backup copies of late shards) or uncoded (wait for every result); "
            f"the best approximate one is {chosen['estimator']} at N = {int(chosen['N'])}, with {metric} "
            f"{chosen['value']:.4g}" + (f" (± {float(chosen['se']):.2g})." if math.isfinite(float(chosen['se'])) else "."))


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
    cols = [c for c in ("estimator", "N", "ratio", "value", "se", "rel_rmse", "vs_best", "vs_best_se", "worst",
                        "worst_se") if c in advice.table]
    md.write_text(f"# gcc-dask advice\n\n{advice.text}\n\n" + "\n".join(advice.set_lines) + "\n\n"
                  + advice.table[cols].to_markdown(index=False, floatfmt=".4f") + f"\n\n![frontier]({png.name})\n")
    return [md, csv, png, Path(advice.path)]


def _check_options(samples, target, max_redundancy, stragglers, K: int) -> None:
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 2 * K:
        raise ConfigError(f"--samples: got {samples!r}; expected an integer >= 2·K = {2 * K}")
    if target is not None and max_redundancy is not None:
        raise ConfigError(f"--target-relacc: got {target!r} beside --max-redundancy {max_redundancy!r}; expected "
                          "one of the two")
    if target is not None and not (isinstance(target, (int, float)) and math.isfinite(target) and target > 0):
        raise ConfigError(f"--target-relacc: got {target!r}; expected a number in (0, 1] (RelAcc; an MSE > 0 for "
                          "an f with one output)")
    if max_redundancy is not None and not (isinstance(max_redundancy, (int, float)) and math.isfinite(max_redundancy)
                                           and 1 <= max_redundancy <= 64):
        raise ConfigError(f"--max-redundancy: got {max_redundancy!r}; expected N/K, a number in [1, 64]")
    if stragglers is not None:
        ok_s = isinstance(stragglers, (int, np.integer)) and not isinstance(stragglers, bool) and 0 <= stragglers < K
        ok_p = isinstance(stragglers, float) and 0 < stragglers < 1
        if not (ok_s or ok_p):
            raise ConfigError(f"--stragglers: got {stragglers!r}; expected S, an integer in [0, {K}) (fewer than K, "
                              "so that every N >= K keeps a result), or p, a number in (0, 1)")


def _stragglers(cfg, stragglers) -> tuple[int, float | None]:
    if stragglers is None:
        S = int(cfg.cutoff.stragglers)
        if S >= cfg.code.num_inputs:
            raise ConfigError(f"cutoff.stragglers: got {S}; expected fewer than K = {cfg.code.num_inputs} for advice "
                              "(pass --stragglers)")
        return S, None
    if isinstance(stragglers, float):
        return 0, float(stragglers)
    return int(stragglers), None


def _data_fingerprint(cfg, source, workload, samples: int) -> str:
    """What fixes the groups and f: the source and workload (their config and file digests), the composition,
    the sample size, K and the seeds."""
    from gcc_dask._digest import files_digest

    resolved = cfg.resolved()
    data = {"source": resolved["source"], "workload": resolved["workload"], "composition": resolved["composition"],
            "samples": samples, "K": cfg.code.num_inputs,
            "files": files_digest([*workload.files(), *source.files()])}
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(("gcc-dask-advice-data-v1\n" + blob).encode()).hexdigest()


def resolve_auto(cfg, path: str | os.PathLike, client=None, say: Callable[[str], None] | None = None):
    """A pipeline config with ``auto`` in its schemes, made concrete: ``(config, advice attrs or None)``.

    The estimator ``auto`` stands for is the one :func:`advise` recommends for this config (its ``advise``
    section: the sample size, the target or the largest N/K). When the store at `path` already holds the advice
    of this very config (a resume), that choice is reused and nothing is measured again; otherwise the advice
    is measured now (into ``<store>-advice/``) and its summary returned, for the new store's attributes.
    """
    if "auto" not in cfg.schemes or "auto" in cfg.scheme_entries:
        return cfg, None
    say = say or (lambda _msg: None)
    k = cfg.code.num_inputs
    if cfg.advise.samples < 2 * k:  # named by its key here, not as advise's --samples flag
        raise ConfigError(f"advise.samples: got {cfg.advise.samples!r}; expected an integer >= 2·K = {2 * k} "
                          "(the sample schemes: [auto] measures the estimators on)")
    fingerprint = cfg.fingerprint()
    stored = None if cfg.store.overwrite else _stored_advice(path)
    if stored is not None and stored.get("for_fingerprint") != fingerprint:
        # a store made by another config: its resume refuses and names what changed, so the choice recorded
        # there stands in, and no advice is measured for a run that will not start
        return apply_choice(cfg, stored["choice"]), stored
    if stored is None:
        store = Path(os.fspath(path)).expanduser()
        stem = store.name[:-5] if store.name.endswith(".zarr") else store.name
        adv = advise(cfg, samples=cfg.advise.samples, target=cfg.advise.target_relacc,
                     max_redundancy=cfg.advise.max_redundancy, client=client, out=store.with_name(f"{stem}-advice"),
                     echo=say, progress=False, margin=cfg.advise.margin)
        stored = {**adv.to_attrs(), "for_fingerprint": fingerprint, "store": adv.path}
        say(f"schemes [auto]: {adv.text.splitlines()[0]}")
        for line in adv.text.splitlines()[1:]:
            if line.startswith("warning: "):  # one group only: said once, with the recommendation
                say(f"schemes [auto]: {line}")
    else:
        say(f"schemes [auto]: {stored['choice']['label']} (the choice recorded in the store)")
    return apply_choice(cfg, stored["choice"]), stored


def apply_choice(cfg, choice: Mapping[str, Any]):
    """`cfg` with ``auto`` replaced by the scheme entry `choice` (``{label, code, params}``)."""
    from gcc_dask.config import load_config

    label = choice["label"]
    others = [s for s in cfg.schemes if s != "auto"]
    while label in others:
        label = f"{label}-auto"
    schemes = [{"label": label, "code": choice["code"], "params": dict(choice["params"])} if s == "auto" else s
               for s in cfg.schemes]
    return load_config(cfg, overrides=[f"schemes={json.dumps(schemes)}"])


def _stored_advice(path: str | os.PathLike) -> dict | None:
    """The advice recorded in the run store at `path` (with the fingerprint of the config it was made for), if
    any."""
    from gcc_dask.analysis.stores import root_attrs
    from gcc_dask.errors import StoreError

    try:
        advice = root_attrs(path).get("advice")
    except StoreError:
        return None
    if isinstance(advice, dict) and "choice" in advice:
        return advice
    return None
