"""Run a frontier on Dask: the groups, f on every coded input once, every estimator under every set, a store.

:func:`run_frontier` is what ``gcc-dask sweep FRONTIER.yaml`` calls for a file with ``kind: frontier``:

1. the groups: every full group of K of the configured composition of the source (``dnn``), or ``groups``
   groups of drawn inputs composed the same way (analytic functions);
2. f on the groups' inputs (the reference) and on every coded input of every coded estimator, as Dask tasks
   (an estimator whose encoder was evaluated before, in this store, reuses those results, and f on the
   groups its stored reference: ``outputs/``);
   selection schemes (replication, uncoded) reuse the reference's rows;
3. each (estimator, S) decoded under every received set of its cell and scored, one Dask task each
   (:mod:`gcc_dask.frontier.evaluate`);
4. a Zarr store: ``rel_acc``, ``mse``, ``decodable_frac`` of shape (candidate, S, pattern, group), with the
   candidates' code, N and N/K as coordinates; ``xr.open_zarr(path)`` opens it, and
   :func:`gcc_dask.analysis.frontier.frontier_cells` turns it into the table of cells.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from gcc_dask.coding import make_code
from gcc_dask.errors import ConfigError, StoreError

from .config import FrontierConfig, load_frontier_config
from .evaluate import coded_outputs, score_sets, summarize_scores
from .sets import PATTERNS, contiguous_sets, random_sets

__all__ = ["Candidate", "FrontierResult", "candidates_for", "candidates_for_specs", "groups_of", "make_groups", "measure", "run_frontier"]

MARKER = "gcc_dask_frontier"
#: coded inputs evaluated by one Dask task
ROWS_PER_TASK = 8192
#: the name of f's outputs on the groups themselves among the stored outputs (the others are encoder digests)
REFERENCE_KEY = "reference"


@dataclass(frozen=True)
class Candidate:
    """One estimator at one N: ``label@N`` in the store."""

    label: str  # "<spec label>@<N>"
    spec: str
    code: str
    num_workers: int
    ratio: float
    params: dict


def candidates_for(cfg: FrontierConfig) -> tuple[list[Candidate], list[str]]:
    """Every (candidate, N) of the frontier that can run, and why the others cannot (one line each)."""
    return candidates_for_specs(cfg.candidate_specs(), cfg.num_inputs, cfg.ratios)


def candidates_for_specs(specs: Sequence[Any], K: int, ratios: Sequence[float]) -> tuple[list[Candidate], list[str]]:
    """Every (spec, N = round(ratio·K)) that can run, once each, and why the others cannot.

    An estimator that is another's at the same N (``replication-ends`` at N = r·K, where there are no extra
    copies) runs once; ``uncoded`` runs at N = K only; a spec with ``ratios`` only at those.
    """
    out, skipped = [], []
    for ratio in ratios:
        N = max(K, int(round(ratio * K)))
        seen = set()
        for spec in specs:
            if spec.ratios is not None and not any(math.isclose(ratio, r) for r in spec.ratios):
                continue
            if spec.code == "uncoded" and N != K:
                continue
            try:
                code = _build(spec.code, K, N, spec.params)
            except ConfigError as exc:
                skipped.append(f"{spec.label} at N={N}: {exc}")
                continue
            key = (spec.code, repr(sorted(code.params.items())))
            if key in seen:
                continue
            seen.add(key)
            out.append(Candidate(f"{spec.label}@{N}", spec.label, spec.code, N, float(ratio), dict(spec.params)))
    return out, skipped


def _build(code: str, K: int, N: int, params: Mapping[str, Any]):
    params = dict(params)
    if code not in ("replication", "uncoded"):
        params.setdefault("on_coincidence", "ignore")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_code(code, num_inputs=K, num_workers=N, **params)


def _encoder_digest(code) -> str:
    h = hashlib.sha256(b"gcc-dask-encoder-v1")
    h.update(np.ascontiguousarray(code.encoder_matrix, dtype=np.float64).tobytes())
    h.update(repr(code.encoder_matrix.shape).encode())
    return h.hexdigest()[:24]


# ---------------------------------------------------------------------------------------------- groups
def make_groups(cfg: FrontierConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The frontier's groups: ``(index, X, labels)``.

    ``index`` (G, K) int64 holds the dataset index of each position (analytic: the index of the drawn input),
    ``X`` ``(G, K, *shape)`` the inputs in position order, ``labels`` (G, K) int64 or None. ``dnn``: every full
    group of K of the composition of the source (of a seeded sample of ``samples`` of its samples when that is
    set; a seeded choice of ``groups`` of the groups when that is set); analytic: ``groups`` · K inputs drawn
    uniformly in ``[low, high)^dim``, composed the same way.
    """
    from gcc_dask.sources import make_source

    fc = cfg.function
    if fc.kind == "dnn":
        src = fc.source.model_dump(exclude_none=True)
        source = make_source(src.pop("kind"), **src)
        return groups_of(source, cfg.num_inputs, cfg.composition, cfg.seed, samples=cfg.samples, groups=cfg.groups)
    rng = np.random.default_rng([cfg.seed, 0xF407, 1])
    data = rng.uniform(fc.low, fc.high, size=(cfg.groups * cfg.num_inputs, fc.dim))
    return groups_of(make_source("array", array=data, name=f"{fc.kind} inputs"), cfg.num_inputs, cfg.composition,
                     cfg.seed)


def groups_of(source: Any, K: int, composition: str, seed: int, *, samples: int | None = None,
              groups: int | None = None, leaf: int | None = None, window: int | None = None,
              dims: int | None = None, fit_samples: int | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Every full group of K of `source` under `composition` (:func:`gcc_dask.composition.compose`, the
    pipeline's policies; `leaf`, `window`, `dims` and `fit_samples` its parameters, default their defaults):
    ``(index, X, labels)`` as :func:`make_groups` returns them.

    With `samples`, a seeded sample of that many of the source's samples is composed instead of the whole
    source (its groups' neighbours are then farther apart than the whole dataset's would be); with `groups`, a
    seeded choice of that many groups is kept.

    Raises
    ------
    ConfigError
        Fewer than K samples.
    """
    from gcc_dask.composition import compose
    from gcc_dask.sources import make_source

    n = int(source.num_samples)
    pick = None
    if samples is not None and samples < n:
        pick = np.sort(np.random.default_rng([seed, 0xF407, 3]).choice(n, samples, replace=False))
        x, y = source.take(pick)
        source = make_source("array", array=x, labels=y, name=f"{source.name} (sample of {samples})")
    if source.num_samples < K:
        raise ConfigError(f"num_inputs: got {K}; expected at most the source's {source.num_samples} samples")
    more = {name: int(value) for name, value in (("leaf", leaf), ("window", window), ("dims", dims),
                                                 ("fit_samples", fit_samples)) if value is not None}
    order = compose(source, group_size=K, policy=composition, seed=seed, **more).sample_index()
    full = (source.num_samples // K) * K
    local = np.asarray(order[:full], dtype=np.int64).reshape(-1, K)
    if groups is not None and groups < local.shape[0]:
        keep = np.sort(np.random.default_rng([seed, 0xF407, 2]).choice(local.shape[0], groups, replace=False))
        local = local[keep]
    X, labels = source.take(local.ravel())
    X = X.reshape(local.shape[0], K, *X.shape[1:])
    labels = None if labels is None else labels.reshape(local.shape)
    index = local if pick is None else pick[local]
    return index, X, labels


# ------------------------------------------------------------------------------------- worker tasks
def _f_task(workload, X: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """f on groups ``lo:hi`` of X (G, K, *shape) -> (hi - lo, K, *out), float64 (f loaded once per process,
    :func:`gcc_dask.workloads.load_workload`)."""
    from gcc_dask.workloads import load_workload

    f = load_workload(workload)
    part = X[lo:hi]
    flat = part.reshape(-1, *part.shape[2:])
    y = np.asarray(f(flat), dtype=np.float64)
    return y.reshape(part.shape[0], part.shape[1], *y.shape[1:])


def _coded_task(workload, code: str, K: int, N: int, params: dict, X: np.ndarray, lo: int,
                hi: int) -> np.ndarray:
    """The workers' results on groups ``lo:hi``: f on their N coded inputs -> (hi - lo, N, *out)."""
    from gcc_dask.workloads import load_workload

    return coded_outputs(_build(code, K, N, params), X[lo:hi], load_workload(workload))


def _score_task(code: str, K: int, N: int, params: dict, outputs: np.ndarray, reference: np.ndarray, S: int,
                patterns: Sequence[str], exhaustive_limit: int, draws: int, seed: int,
                extra_sets: Mapping[str, np.ndarray] | None = None) -> dict:
    """Every pattern of one (estimator, S): per-group rel_acc, mse, decodable_frac, and whether ``random`` and
    ``worst`` enumerated every straggler set. `extra_sets` adds patterns of given sets (name -> (M, N) bool),
    scored by their mean."""
    c = _build(code, K, N, params)
    out: dict[str, Any] = {}
    for name, sets in (extra_sets or {}).items():
        out[name] = summarize_scores(score_sets(c, outputs, reference, np.asarray(sets, dtype=bool)))
    if "random" in patterns or "worst" in patterns:
        sets, exhaustive = random_sets(N, S, exhaustive_limit=exhaustive_limit, draws=draws, seed=seed)
        scores = score_sets(c, outputs, reference, sets)
        out["exhaustive"] = exhaustive
        if "random" in patterns:
            out["random"] = summarize_scores(scores)
        if "worst" in patterns:
            out["worst"] = summarize_scores(scores, worst=True)
    if "contiguous" in patterns:
        out["contiguous"] = summarize_scores(score_sets(c, outputs, reference, contiguous_sets(N, S)))
    return out


# -------------------------------------------------------------------------------------------- result
@dataclass(frozen=True)
class FrontierResult:
    """What :func:`run_frontier` returns: the store, its status, the config, the seconds on the cluster, and
    the table of cells (:func:`gcc_dask.analysis.frontier.frontier_cells`)."""

    path: str
    status: str
    config: FrontierConfig
    wall_s: float
    cells: Any


def _is_frontier(path: Path) -> bool:
    from gcc_dask.store.layout import _root_meta

    return ((_root_meta(path) or {}).get("attributes") or {}).get(MARKER) == 1


def _cached_outputs(path: Path, fingerprint: str) -> dict[str, np.ndarray]:
    """Coded outputs stored by an earlier frontier with the same data fingerprint (empty when none)."""
    import zarr

    if not _is_frontier(path):
        return {}
    root = zarr.open_group(str(path), mode="r", use_consolidated=False)
    if root.attrs.get("data_fingerprint") != fingerprint or "outputs" not in root:
        return {}
    return {name: np.asarray(arr[...]) for name, arr in root["outputs"].arrays()}


def _prepare(path: Path, cfg: FrontierConfig) -> dict[str, np.ndarray]:
    """Check what is at `path`; return the reusable coded outputs (the store is rewritten at the end)."""
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return {}
    if not _is_frontier(path):
        raise StoreError(f"store.path: got {str(path)!r}, which exists and is not a gcc-dask frontier store; "
                         "choose another --out")
    cached = _cached_outputs(path, cfg.data_fingerprint())
    if not cached and not cfg.store.overwrite:
        raise StoreError(f"store.path: got {str(path)!r}, a frontier of other data (function, composition, "
                         "groups, K or seed); pass --overwrite (store.overwrite: true) to replace it, or choose "
                         "another --out")
    return cached


def run_frontier(config: str | os.PathLike | Mapping[str, Any] | FrontierConfig, client=None,
                 out: str | os.PathLike | None = None, *, overrides: Sequence[str] = (),
                 echo: Callable[[str], None] | None = None,
                 performance_report: str | os.PathLike | None = None) -> FrontierResult:
    """Measure every estimator of a frontier on every group, paired, and write the store.

    Parameters
    ----------
    config : path, mapping or FrontierConfig
        The frontier (:mod:`gcc_dask.frontier.config`).
    client : distributed.Client, optional
        Use this client (never closed); else ``cluster.address``/``DASK_SCHEDULER_ADDRESS`` or an embedded
        LocalCluster (processes).
    out : path, optional
        Store path; overrides ``store.path``.
    overrides : sequence of "key=value"
    echo : callable, optional
        Where to print progress lines.
    performance_report : path, optional
        Write Dask's performance report of the frontier's tasks to this HTML file (``gcc-dask sweep
        --performance-report``).

    Returns
    -------
    FrontierResult

    Raises
    ------
    gcc_dask.errors.GccDaskError
        ConfigError, SourceError, WorkloadError, StoreError: before any task runs.
    """
    from gcc_dask.analysis.frontier import frontier_cells, open_frontier
    from gcc_dask.runtime.cluster import ClusterSpec, connect
    from gcc_dask.runtime.cluster import performance_report as perf_report
    from gcc_dask.sweep import function_workload

    say = echo or (lambda _msg: None)
    if performance_report is not None:
        from gcc_dask._paths import writable_file

        writable_file("--performance-report", performance_report)  # refused now, not once the job is done
    cfg = load_frontier_config(config, overrides)
    path = Path(os.fspath(out) if out is not None else cfg.store.path).expanduser().absolute()
    cached = _prepare(path, cfg)
    candidates, skipped = candidates_for(cfg)
    for line in skipped:
        say(f"skipped: {line}")
    index, X, labels = make_groups(cfg)
    say(f"frontier {cfg.name}: {index.shape[0]} groups of K = {cfg.num_inputs}, {len(candidates)} estimators at "
        f"N = {sorted({c.num_workers for c in candidates})}, S = {cfg.stragglers.S}")
    spec = ClusterSpec.from_config(cfg.cluster, threads_per_worker=1)
    st = cfg.stragglers
    t0 = time.perf_counter()
    with connect(spec, client) as c, perf_report(c, performance_report):
        say(f"dask dashboard: {c.dashboard_link}")
        reference, outputs, results = measure(
            c, function_workload(cfg.function), X, candidates, st.S, st.patterns, exhaustive_limit=st.exhaustive_limit,
            draws=st.draws, seed=cfg.seed, cached=cached, progress=cfg.run.progress and echo is not None,
            name=cfg.name)
    wall = time.perf_counter() - t0
    if performance_report is not None:
        say(f"performance report: {os.path.abspath(os.path.expanduser(os.fspath(performance_report)))}")
    patterns = [p for p in PATTERNS if p in st.patterns]
    ds = _dataset(candidates, results, index, labels, reference, skipped, S=list(st.S), patterns=patterns,
                  attrs={"name": cfg.name, "config": cfg.resolved(), "data_fingerprint": cfg.data_fingerprint(),
                         "num_inputs": cfg.num_inputs, **({} if cfg.metric == "auto" else {"metric": cfg.metric})})
    _write(path, ds, outputs)
    return FrontierResult(path=str(path), status="complete", config=cfg, wall_s=wall,
                          cells=frontier_cells(open_frontier(path)))


def measure(c, workload: Any, X: np.ndarray, candidates: Sequence[Candidate], S_values: Sequence[int],
            patterns: Sequence[str], *, exhaustive_limit: int, draws: int, seed: int,
            cached: Mapping[str, np.ndarray] | None = None,
            extra_sets: Callable[[int, int], Mapping[str, np.ndarray]] | None = None, progress: bool = False,
            name: str = "frontier", cached_scores: Mapping[tuple[str, int], dict] | None = None,
            ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[tuple[str, int], dict]]:
    """f on the groups and on every coded input (Dask tasks on client `c`), then every (candidate, S) scored.

    Parameters
    ----------
    c : distributed.Client
    workload : gcc_dask.workloads.Workload
        f (loaded once per worker process).
    X : ndarray of shape ``(G, K, *shape)``
        The groups (:func:`groups_of`).
    candidates : sequence of Candidate
    S_values, patterns : sequences
        The numbers of stragglers and the patterns of :mod:`.sets` to score.
    exhaustive_limit, draws, seed : int
        As :func:`~.sets.random_sets`.
    cached : mapping, optional
        Coded outputs by encoder digest, and f on the groups under :data:`REFERENCE_KEY`, computed before (not
        computed again).
    extra_sets : callable, optional
        ``extra_sets(N, S) -> {name: (M, N) bool}``: more patterns of given received sets (e.g. the sets a
        latency model and cutoff keep).
    progress : bool
        Show a progress bar.
    cached_scores : mapping, optional
        ``{(candidate label, S): scores}`` scored before with the same outputs and sets (not scored again).

    Returns
    -------
    reference, outputs, results
        f on the groups ``(G, K, *out)``; the coded outputs by encoder digest (cached ones included) and the
        reference under :data:`REFERENCE_KEY`; ``results[(candidate label, S)]`` = the per-group scores of each
        pattern (:func:`_score_task`).
    """
    from distributed import as_completed

    K, G = X.shape[1], X.shape[0]
    cached = dict(cached or {})
    token = uuid.uuid4().hex[:8]
    X_f = c.scatter(X, broadcast=True)
    step = max(1, ROWS_PER_TASK // K)
    known = cached.get(REFERENCE_KEY)
    if known is not None and known.shape[:2] != (G, K):
        known = None
    ref_parts = [] if known is not None else [
        c.submit(_f_task, workload, X_f, lo, min(lo + step, G), pure=False, key=f"frontier-ref-{lo}-{token}")
        for lo in range(0, G, step)]
    digests: dict[str, str] = {}
    coded_futs: dict[str, list] = {}
    for cand in candidates:
        code = _build(cand.code, K, cand.num_workers, cand.params)
        if code.selection:
            continue
        digest = _encoder_digest(code)
        digests[cand.label] = digest
        if digest in cached or digest in coded_futs:
            continue
        rows = max(1, ROWS_PER_TASK // cand.num_workers)
        coded_futs[digest] = [c.submit(_coded_task, workload, cand.code, K, cand.num_workers, cand.params, X_f,
                                       lo, min(lo + rows, G), pure=False,
                                       key=f"frontier-coded-{digest[:8]}-{lo}-{token}")
                              for lo in range(0, G, rows)]
    cached_scores = dict(cached_scores or {})
    n_scores = sum(1 for cand in candidates for s in S_values
                   if s < cand.num_workers and (cand.label, s) not in cached_scores)
    bar = _progress(len(ref_parts) + sum(map(len, coded_futs.values())) + n_scores, progress, name)
    try:
        for _ in as_completed([*ref_parts, *(f for fs in coded_futs.values() for f in fs)], loop=c.loop):
            bar.update(1)
        reference = known if known is not None else np.concatenate(c.gather(ref_parts))
        outputs = {**cached, REFERENCE_KEY: reference}
        for digest, futs in coded_futs.items():
            outputs[digest] = np.concatenate(c.gather(futs)).astype(np.float32)
        ref_f = c.scatter(reference, broadcast=True)
        out_f = {d: c.scatter(v, broadcast=True) for d, v in outputs.items() if d in digests.values()}
        score_futs = {}
        results: dict[tuple[str, int], dict] = {}
        for cand in candidates:
            todo = [s for s in S_values if s < cand.num_workers and (cand.label, s) not in cached_scores]
            results.update({(cand.label, s): cached_scores[(cand.label, s)] for s in S_values
                            if (cand.label, s) in cached_scores})
            if not todo:
                continue
            if cand.label in digests:
                Y = out_f[digests[cand.label]]
            else:  # a selection scheme: its results are the reference's rows
                code = _build(cand.code, K, cand.num_workers, cand.params)
                Y = c.scatter(coded_outputs(code, X, None, reference))
            for s in todo:
                extra = None if extra_sets is None else extra_sets(cand.num_workers, s)
                score_futs[c.submit(_score_task, cand.code, K, cand.num_workers, cand.params, Y, ref_f, s,
                                    tuple(patterns), exhaustive_limit, draws, seed, extra, pure=False,
                                    key=f"frontier-score-{cand.label}-S{s}-{token}")] = (cand.label, s)
        for fut in as_completed(list(score_futs), loop=c.loop):
            results[score_futs[fut]] = fut.result()
            bar.update(1)
    finally:
        bar.close()
    return reference, outputs, results


def _dataset(candidates: Sequence[Candidate], results: dict, index: np.ndarray, labels: np.ndarray | None,
             reference: np.ndarray, skipped: list[str], *, S: list[int], patterns: list[str], attrs: dict):
    """The frontier store's Dataset: the scores (candidate, S, pattern, group) and their coordinates."""
    import xarray as xr

    from gcc_dask.store.layout import _now, _versions

    C, G = len(candidates), index.shape[0]
    shape = (C, len(S), len(patterns), G)
    multi = int(np.prod(reference.shape[2:])) > 1
    if not multi and attrs.get("metric") == "rel_acc":
        raise ConfigError("metric: got 'rel_acc' for an f with one output per sample; expected 'mse' or 'auto' (the "
                          "argmax of one value is always 0, so RelAcc would always be 1)")
    # RelAcc only for an f with several outputs (a classifier's scores): one output is scored by its errors
    names = ("rel_acc", "mse", "decodable_frac") if multi else ("mse", "decodable_frac")
    data = {name: np.full(shape, np.nan) for name in names}
    exhaustive = np.zeros((C, len(S)), dtype=np.int8)
    for i, cand in enumerate(candidates):
        for j, s in enumerate(S):
            res = results.get((cand.label, s))
            if res is None:
                continue
            exhaustive[i, j] = int(bool(res.get("exhaustive", True)))
            for p, pattern in enumerate(patterns):
                for name in data:
                    data[name][i, j, p] = res[pattern][name]
    dims = ("candidate", "S", "pattern", "group")
    ref = np.asarray(reference, dtype=np.float64).reshape(reference.shape[0] * reference.shape[1], -1)
    ref = ref[~np.isnan(ref).any(axis=1)]
    reference_ms = float(np.mean(np.sum(ref**2, axis=1))) if ref.size else float("nan")
    var_attrs = {
        "rel_acc": {"long_name": "RelAcc: fraction of the group's K outputs whose argmax equals f's (NaN rows "
                                 "count as wrong)", "units": "1"},
        "mse": {"long_name": "MSE (1/K') Σ_k ||f̂(x_k) − f(x_k)||² over the group's K' decodable outputs"},
        "decodable_frac": {"long_name": "fraction of the group's outputs with an estimate", "units": "1"},
    }
    ds = xr.Dataset(
        {name: (dims, values, var_attrs[name]) for name, values in data.items()},
        coords={
            "candidate": np.array([c.label for c in candidates], dtype=object),
            "estimator": ("candidate", np.array([c.spec for c in candidates], dtype=object)),
            "code": ("candidate", np.array([c.code for c in candidates], dtype=object)),
            "num_workers": ("candidate", np.array([c.num_workers for c in candidates], dtype=np.int64)),
            "ratio": ("candidate", np.array([c.ratio for c in candidates], dtype=np.float64)),
            "S": np.array(S, dtype=np.int64),
            "pattern": np.array(patterns, dtype=object),
            "group": np.arange(G, dtype=np.int64),
            "sample": (("group", "position"), index),
        },
    )
    ds["exhaustive"] = (("candidate", "S"), exhaustive,
                        {"long_name": "1: random and worst enumerated every straggler set (exact); 0: seeded draws"})
    if labels is not None:
        ds["labels"] = (("group", "position"), labels)
    ds.attrs.update({
        MARKER: 1, "metric": "rel_acc" if multi else "mse", **attrs, "skipped": skipped,
        "reference_mean_square": reference_ms,
        "params": json_params(candidates), "created": _now(), "gcc_dask_version": _versions().get("gcc-dask"),
        "versions": _versions(), "status": "complete",
    })
    return ds


def json_params(candidates: list[Candidate]) -> dict[str, dict]:
    """Each candidate's code parameters, JSON-able (the store's ``params`` attribute)."""
    import json

    return {c.label: json.loads(json.dumps(c.params, default=str)) for c in candidates}


def _write(path: Path, ds, outputs: dict[str, np.ndarray]) -> None:
    """Write the Dataset and the coded outputs (``outputs/<digest>``) aside, then rename it over `path`."""
    import zarr

    tmp = path.with_name(f".{path.name}.writing-{uuid.uuid4().hex[:6]}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(str(tmp), mode="w-", consolidated=False, zarr_format=3)
        root = zarr.open_group(str(tmp), mode="r+", use_consolidated=False)
        group = root.create_group("outputs", attributes={
            "long_name": "f on the coded inputs of each group, by encoder digest: (group, worker, *out)"})
        for digest, values in outputs.items():  # (the reference in f's own dtype: the scores are the same again)
            group.create_array(digest, data=np.asarray(values) if digest == REFERENCE_KEY
                               else np.asarray(values, dtype=np.float32))
        # written once, never edited in place: its metadata consolidated, so that xarray.open_zarr opens it at
        # once (without, it warned "Failed to open Zarr store with consolidated metadata" and read every file)
        zarr.consolidate_metadata(str(tmp))
    if path.exists():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    os.replace(tmp, path)


def _progress(total: int, enabled: bool, name: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit="task", disable=not enabled, dynamic_ncols=True)
