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

The choice itself is :mod:`gcc_dask.frontier.choose`'s (:func:`~gcc_dask.frontier.choose.choose`), what the advice
says and writes :mod:`gcc_dask.frontier.recommendation`'s (:class:`~gcc_dask.frontier.recommendation.Advice`); both
are importable from here too. :func:`resolve_auto` makes ``schemes: [auto]`` concrete for a pipeline.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from gcc_dask._paths import writable_dir
from gcc_dask.errors import ConfigError

from .choose import COPYING, DEFAULT_MARGIN, TIE_SE, _cheapest_tied, _reached, _set_aside, _within, choose  # noqa: F401
from .config import CandidateSpec, default_candidates
from .recommendation import (  # noqa: F401
    Advice, _advice, _entry_label, _entry_params, _exact_sentence, _files, _sentence, _store_for,
)
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
    from gcc_dask.composition import auto_composition
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
    policy, f_cost = cfg.composition.policy, None
    if policy == "auto":  # made concrete by f's cost (timed now, on a few rows) before the cache is looked up
        output_shape, f_cost = _probe_model(workload, source, cfg.run.nan_policy, timed=True)
        policy = auto_composition(f_cost.seconds_per_row, samples, cfg.composition.window)
    fingerprint = _data_fingerprint(cfg, source, workload, samples, policy)
    cached = _cached_outputs(path, fingerprint)
    known = cached.get(REFERENCE_KEY)
    if known is not None:  # f's outputs are stored: its shape is known, and f is not run again, not even once
        output_shape = tuple(int(n) for n in known.shape[2:])
    elif f_cost is None:  # one line if the data do not fit f; and f's cost on a few rows, for the expected time
        output_shape, f_cost = _probe_model(workload, source, cfg.run.nan_policy, timed=True)
    if target is not None and int(np.prod(output_shape)) > 1 and target > 1:
        raise ConfigError(f"--target-relacc: got {target!r}; expected a RelAcc in (0, 1]")
    # (once the options are known good: a refusal writes nothing); one line when it cannot be made or written
    out_dir = Path(writable_dir("--out" if out is not None else "advise output folder", out_dir))
    ratios = _ratios(cfg, max_redundancy, target)
    candidates, skipped = candidates_for_specs(_specs(cfg), K, ratios)
    comp = cfg.composition  # the pipeline's composition, parameters and all: the groups it would code
    index, X, labels = groups_of(source, K, policy, comp.seed, samples=samples, leaf=comp.leaf, window=comp.window,
                                 dims=comp.dims, fit_samples=comp.fit_samples)
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
        f"({policy}), N = {sorted({c.num_workers for c in candidates})}, "
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


def _data_fingerprint(cfg, source, workload, samples: int, policy: str | None = None) -> str:
    """What fixes the groups and f: the source and workload (their config and file digests), the composition
    (`policy`: the concrete one, for ``auto``), the sample size, K and the seeds."""
    from gcc_dask._digest import files_digest

    resolved = cfg.resolved()
    composition = dict(resolved["composition"])
    if policy is not None:
        composition["policy"] = policy
    if composition.get("policy") != "tree":  # leaf is the tree's only: the other policies keep their digests
        composition.pop("leaf", None)
    data = {"source": resolved["source"], "workload": resolved["workload"], "composition": composition,
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
