"""Accuracy and rate sweeps as a Dask batch job: schemes × K × N × (S or p) × trials → one Zarr store.

``gcc-dask sweep SWEEP.yaml`` calls :func:`run_sweep`. Every grid cell (K, N, S|p) and block of trials is
one Dask task (:func:`evaluate_cell`) that runs *all* schemes on the same data and the same received sets
(a paired comparison), and returns a few floats per trial; the driver writes them into the store as they
arrive, so memory stays bounded and an interrupted sweep resumes where it stopped (same config only). While it
runs, the run page on the cluster's dashboard (docs/dashboard.rst) shows its tasks by worker and each scheme's
metric so far.

Draws (all seeded by ``seed``; independent of the scheme, the cluster and the task layout):

* data of trial t at K inputs: ``default_rng([seed, 0, K, t])`` (shared by every N, S|p and scheme);
* received set: ``default_rng([seed, 1, K, N, key(S|p), t])``, drawn once and used by every scheme;
  ``pattern: adversarial`` is the exception: the adversary picks the worst set *for each scheme*
  (:meth:`gcc_dask.stragglers.FixedCount.search`, seeded with ``[seed, 2, K, N, key, t]``).

Store layout (Zarr v3, every array has dimension names; ``xr.open_zarr(path)`` is a tidy Dataset)::

    sweep.zarr/   attrs: gcc_dask_sweep=1, config, fingerprint, status, created, finished, versions, ...
      scheme (scheme,) str, code (scheme,) str, num_inputs (num_inputs,), num_workers (num_workers,),
      S (S,) int or p (p,) float, trial (trial,)                                       coordinates
      mse             (scheme, num_inputs, num_workers, S|p, trial) float64  NaN: undecodable or skipped
      rel_acc         same  float64   argmax agreement with f (outputs with more than one value only)
      accuracy        same  float64   argmax = label (sources with labels only)
      rel_rmse, r2, max_abs_err  same  float64   relative RMSE, R², largest error (one output only)
      decodable_frac  same  float64   fraction of the K outputs that could be estimated
      n_received      same  int32     |F|; -1 not run
      search_exhaustive same int8     adversarial only: 1 true worst case, 0 heuristic lower bound
      accuracy_uncoded (num_inputs, trial) float64   f's own accuracy on the trial's inputs
      coincident_points (scheme, num_inputs, num_workers) int32   α/β coincidences (see below)
      status          (scheme, num_inputs, num_workers, S|p) int8  0 pending, 1 done, 2 skipped

``coincident_points`` counts the worker points equal to a data point, which make a scheme partly
systematic (docs/methods.rst, section 'Point placement').
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from gcc_dask import metrics
from gcc_dask.coding import make_code
from gcc_dask.coding.registry import code_parameters
from gcc_dask.errors import ConfigError, NotEnoughResultsError, StoreError
from gcc_dask.sweep_page import SweepPage
from gcc_dask.store.layout import _git_sha, _now, _root_meta, _versions
from gcc_dask.stragglers import Bernoulli, FixedCount
from gcc_dask.sweep_config import FunctionConfig, SweepConfig, load_sweep_config

__all__ = ["SweepResult", "evaluate_cell", "open_sweep", "run_sweep", "sample_function"]

MARKER = "gcc_dask_sweep"
STATUS_PENDING, STATUS_DONE, STATUS_SKIPPED = 0, 1, 2
TRIAL_VARS = ("mse", "rel_acc", "accuracy", "rel_rmse", "r2", "max_abs_err", "decodable_frac", "n_received",
              "search_exhaustive")
#: the trial metrics of an f with one output per sample (a regression: never a RelAcc or an accuracy)
REGRESSION_VARS = ("rel_rmse", "r2", "max_abs_err")
_ATTRS = {
    "mse": {"long_name": "MSE (1/K) Σ_k ||f̂(x_k) − f(x_k)||² over decodable outputs", "units": "output units²"},
    "rel_acc": {"long_name": "RelAcc: fraction with argmax f̂ = argmax f", "units": "1"},
    "accuracy": {"long_name": "accuracy: fraction with argmax f̂ = label", "units": "1"},
    "rel_rmse": {"long_name": "relative RMSE √(Σ_k ||f̂ − f||² / Σ_k ||f||²) over the K outputs (one output only)",
                 "units": "1"},
    "r2": {"long_name": "R² of the K estimates against f (one output only)", "units": "1"},
    "max_abs_err": {"long_name": "largest |f̂ − f| over the K outputs (one output only)", "units": "output units"},
    "decodable_frac": {"long_name": "fraction of the K outputs that could be estimated", "units": "1"},
    "n_received": {"long_name": "|F|, results used for decoding (-1: not run)", "units": "workers"},
    "search_exhaustive": {"long_name": "adversary: 1 exhaustive (true worst case), 0 heuristic (lower "
                                       "bound), -1 n/a"},
    "accuracy_uncoded": {"long_name": "accuracy of f itself on the trial's inputs", "units": "1"},
    "coincident_points": {"long_name": "worker points equal to a data point "
                                       "(docs/methods.rst, section 'Point placement')"},
    "status": {"long_name": "cell status: 0 pending, 1 done, 2 skipped (invalid for the scheme)"},
}


# ------------------------------------------------------------------------------------------ function
class _Function:
    """f and its input sampler, built once per process (:func:`sample_function`)."""

    def __init__(self, cfg: FunctionConfig) -> None:
        self.cfg = cfg
        self._orders: dict[tuple, np.ndarray] = {}
        self.f = function_workload(cfg).load()
        if cfg.kind == "dnn":
            from gcc_dask.sources import make_source

            src = cfg.source.model_dump(exclude_none=True)
            self.source = make_source(src.pop("kind"), **src)
            self._cache: tuple | None = None
            self.has_labels = bool(self.source.has_labels)
        else:
            self.has_labels = False

    def sample(self, K: int, trial: int, seed: int, composition: str | None = None
               ) -> tuple[np.ndarray, np.ndarray | None]:
        """The trial's K inputs (and labels): a function of (seed, K, trial, composition) only.

        With a `composition` (``dnn`` only) the inputs are one group of that composition of the source, in
        position order; the trial picks the group.
        """
        rng = np.random.default_rng([seed, 0, K, trial])
        if self.cfg.kind != "dnn":
            return rng.uniform(self.cfg.low, self.cfg.high, size=(K, self.cfg.dim)), None
        n = self.source.num_samples
        if K > n:
            raise ConfigError(f"code.num_inputs: got {K}; expected at most the source's {n} samples")
        if composition is not None:
            order = self._composed(composition, K, seed)
            g = int(rng.integers(n // K))  # a full group
            idx = order[g * K:(g + 1) * K]
        else:
            idx = np.sort(rng.choice(n, size=K, replace=False))
        if self.cache is not None:
            X, y = self.cache
            return X[idx], (None if y is None else y[idx])
        rows = [self.source.read(int(i), int(i) + 1) for i in idx]
        X = np.concatenate([r[0] for r in rows])
        y = None if rows[0][1] is None else np.concatenate([r[1] for r in rows])
        return X, y

    @property
    def cache(self) -> tuple | None:
        """The whole source in memory when it is small (at most 20 million values), read on first use."""
        if self._cache is None and self.cfg.kind == "dnn":
            size = self.source.num_samples * int(np.prod(self.source.sample_shape))
            self._cache = self.source.read(0, self.source.num_samples) if size <= 20_000_000 else ()
        return self._cache or None

    def _composed(self, policy: str, K: int, seed: int) -> np.ndarray:
        """The source's samples in group order for `policy` and K (groups of K consecutive entries), cached."""
        key = (policy, K, seed)
        if key not in self._orders:
            from gcc_dask.composition import compose

            self._orders[key] = compose(self.source, group_size=K, policy=policy, seed=seed).sample_index()
        return self._orders[key]

    def describe(self) -> str:
        c = self.cfg
        if c.kind == "dnn":
            return f"{Path(c.workload.path or c.workload.name or '?').name} on {self.source.name}"
        what = {"xsinx": "x·sin x", "polynomial": f"polynomial {c.coeffs}", "smooth":
                f"random-feature tanh network R^{c.dim}→R^{c.out_dim}"}[c.kind]
        return f"{what}, x ~ U({c.low:g}, {c.high:g})" + (f"^{c.dim}" if c.dim > 1 else "")


def function_workload(cfg: FunctionConfig):
    """The :class:`~gcc_dask.workloads.Workload` of a sweep's ``function`` section: its ``workload`` for
    ``dnn``, else the analytic function with its parameters."""
    from gcc_dask.workloads import make_workload

    if cfg.kind == "dnn":
        wl = cfg.workload.model_dump(exclude_none=True)
        wl.update(wl.pop("params", None) or {})
        return make_workload(wl.pop("kind"), **wl)
    params = {"coeffs": cfg.coeffs} if cfg.kind == "polynomial" else {}
    if cfg.kind == "smooth":
        params = {"out_dim": cfg.out_dim, "hidden": cfg.hidden, "seed": cfg.seed}
    return make_workload("analytic", name=cfg.kind, **params)


_FUNCTIONS: dict[str, _Function] = {}


def sample_function(cfg: FunctionConfig) -> _Function:
    """The (cached, per process) f and input sampler of a sweep's ``function`` section."""
    key = json.dumps(cfg.model_dump(mode="json"), sort_keys=True)
    if key not in _FUNCTIONS:
        _FUNCTIONS[key] = _Function(cfg)
    return _FUNCTIONS[key]


# ------------------------------------------------------------------------------------------- the task
def _s_key(value: float | int) -> int:
    return int(value) if isinstance(value, (int, np.integer)) else int(round(float(value) * 1e9))


def check_code_params(cfg: SweepConfig) -> None:
    """Refuse a parameter that no code of its scheme takes (``params: {replication: {policies: 1}}``), with one
    ConfigError line naming the key and the valid parameters, before anything runs: :func:`_make_codes`
    would skip every cell of that scheme, and the sweep would run as if it were absent. (Parameter
    *values* that a code refuses at some (K, N) skip those cells, recorded in the store's ``skipped``.)"""
    for i, spec in enumerate(cfg.schemes):
        valid = [p for p in code_parameters(spec.code) if p not in ("num_inputs", "num_workers")]
        for where, params in ((f"params.{spec.label}", cfg.params.get(spec.label, {})),
                              (f"schemes[{i}].params", spec.params)):
            for key, value in params.items():
                if key not in valid:
                    raise ConfigError(f"{where}.{key}: got {value!r}; expected a parameter of code {spec.code!r}: "
                                      f"one of {', '.join(valid)} (num_inputs and num_workers come from code)")


def _make_codes(cfg: SweepConfig, K: int, N: int) -> dict[str, Any]:
    """label -> code, or label -> the reason it cannot run at (K, N) (a string)."""
    out: dict[str, Any] = {}
    for spec in cfg.schemes:
        params = cfg.code_params(spec)
        if params.get("on_coincidence") == "warn":  # recorded in the store instead (coincident_points)
            params["on_coincidence"] = "ignore"
        try:
            out[spec.label] = make_code(spec.code, num_inputs=K, num_workers=N, **params)
        except ConfigError as exc:
            out[spec.label] = str(exc)
    return out


def evaluate_cell(cfg: SweepConfig, K: int, N: int, s: float, trials: Sequence[int]) -> dict[str, np.ndarray]:
    """Run every scheme of `cfg` at one grid cell for the given trials (the body of one Dask task).

    Parameters
    ----------
    cfg : SweepConfig
    K, N : int
        Inputs per batch and workers.
    s : int or float
        Stragglers S (``fixed_count``) or straggling probability p (``bernoulli``).
    trials : sequence of int
        Trial indices (they seed the data and the received sets).

    Returns
    -------
    dict
        ``mse``, ``rel_acc``, ``accuracy``, ``rel_rmse``, ``r2``, ``max_abs_err``, ``decodable_frac`` float64
        (RelAcc for an f with several outputs, the last three for one output), ``n_received`` int32 and
        ``search_exhaustive`` int8, each of shape (n_schemes, len(trials)); ``accuracy_uncoded`` (len(trials),).
        Schemes that cannot run at (K, N) keep NaN / -1.
    """
    fn = sample_function(cfg.function)
    codes = _make_codes(cfg, K, N)
    labels = [spec.label for spec in cfg.schemes]
    T, L = len(trials), len(labels)
    out = {name: np.full((L, T), np.nan) for name in ("mse", "rel_acc", "accuracy", "decodable_frac",
                                                      *REGRESSION_VARS)}
    out["n_received"] = np.full((L, T), -1, np.int32)
    out["search_exhaustive"] = np.full((L, T), -1, np.int8)
    out["accuracy_uncoded"] = np.full(T, np.nan)
    st = cfg.stragglers
    if st.model == "fixed_count" and int(s) >= N:
        return out
    for j, t in enumerate(trials):
        data = {}  # composition -> (X, y, f(X)): the schemes of one composition share the trial's inputs

        def inputs(composition, t=int(t)):
            if composition not in data:
                X, y = fn.sample(K, t, cfg.seed, composition)
                data[composition] = (X, y, np.asarray(fn.f(X)))
            return data[composition]

        X, y, ref = inputs(None if all(sp.composition is None for sp in cfg.schemes) else cfg.schemes[0].composition)
        multi = int(np.prod(ref.shape[1:])) > 1
        if y is not None:
            out["accuracy_uncoded"][j] = metrics.accuracy(ref, y)
        key = [cfg.seed, 1, K, N, _s_key(s), int(t)]
        shared = None
        if st.model == "bernoulli":
            shared = Bernoulli(float(s)).received(N, np.random.default_rng(key))
        elif st.pattern != "adversarial":
            shared = FixedCount(int(s), st.pattern).received(N, np.random.default_rng(key))
        for i, label in enumerate(labels):
            code = codes[label]
            if isinstance(code, str):
                continue
            X, y, ref = inputs(cfg.schemes[i].composition)
            received = shared
            if received is None:
                adv = FixedCount(int(s), "adversarial", exhaustive_limit=st.exhaustive_limit, restarts=st.restarts)
                res = adv.search(code, X, fn.f, np.random.default_rng([cfg.seed, 2, K, N, _s_key(s), int(t)]))
                received = res.received
                out["search_exhaustive"][i, j] = int(res.mode == "exhaustive")
            out["n_received"][i, j] = received.size
            est = _decode(code, X, fn.f, received, ref.shape)
            out["decodable_frac"][i, j] = float(metrics.decodable_rows(est).mean())
            out["mse"][i, j] = metrics.mse(est, ref)
            if multi:
                out["rel_acc"][i, j] = metrics.rel_acc(est, ref)
            else:
                out["rel_rmse"][i, j] = metrics.relative_rmse(est, ref)
                out["r2"][i, j] = metrics.r2(est, ref)
                out["max_abs_err"][i, j] = metrics.max_abs_error(est, ref)
            if y is not None:
                out["accuracy"][i, j] = metrics.accuracy(est, y)
    return out


def _decode(code: Any, X: np.ndarray, f: Callable, received: np.ndarray, shape: tuple) -> np.ndarray:
    """f̂ for the K inputs from the workers in `received` (all NaN when too few results arrived)."""
    if received.size < code.min_received:
        return np.full(shape, np.nan)
    Y = np.asarray(f(code.encode(X)[received]))
    try:
        return np.asarray(code.decode(Y, received), dtype=np.float64)
    except NotEnoughResultsError:
        return np.full(shape, np.nan)


# ------------------------------------------------------------------------------------------ the store
def _is_sweep(path: Path) -> bool:
    return ((_root_meta(path) or {}).get("attributes") or {}).get(MARKER) == 1


def _template(cfg: SweepConfig, fn: _Function, block: int, out_shape: tuple, coincident: np.ndarray):
    import xarray as xr


    st = cfg.stragglers
    coords = {
        "scheme": np.array([s.label for s in cfg.schemes], dtype=object),
        "code": ("scheme", np.array([s.code for s in cfg.schemes], dtype=object)),
        "num_inputs": np.array(cfg.code.num_inputs, np.int64),
        "num_workers": np.array(cfg.code.num_workers, np.int64),
        st.dim: np.array(st.values, np.int64 if st.dim == "S" else np.float64),
        "trial": np.arange(cfg.trials, dtype=np.int64),
    }
    dims = ("scheme", "num_inputs", "num_workers", st.dim, "trial")
    shape = tuple(len(coords[d]) if d != "scheme" else len(cfg.schemes) for d in dims)
    names = ["mse", "decodable_frac", "n_received"]
    if int(np.prod(out_shape)) > 1:
        names.append("rel_acc")
    else:
        names.extend(REGRESSION_VARS)
    if fn.has_labels:
        names.append("accuracy")
    if st.model == "fixed_count" and st.pattern == "adversarial":
        names.append("search_exhaustive")
    fills = {"n_received": (-1, np.int32), "search_exhaustive": (-1, np.int8)}
    data = {}
    for name in names:
        fill, dtype = fills.get(name, (np.nan, np.float64))
        data[name] = (dims, np.full(shape, fill, dtype), _ATTRS[name])
    if fn.has_labels:
        data["accuracy_uncoded"] = (("num_inputs", "trial"), np.full(shape[1:2] + shape[4:], np.nan),
                                    _ATTRS["accuracy_uncoded"])
    data["coincident_points"] = (dims[:3], coincident.astype(np.int32), _ATTRS["coincident_points"])
    data["status"] = (dims[:4], np.zeros(shape[:4], np.int8), _ATTRS["status"])
    attrs = {
        MARKER: 1, "gcc_dask_version": _versions().get("gcc-dask"), "created": _now(), "finished": None,
        "status": "running", "name": cfg.name, "config": cfg.resolved(), "fingerprint": cfg.fingerprint(),
        "git_sha": _git_sha(), "versions": _versions(), "seed": cfg.seed, "function": fn.describe(),
        "function_kind": cfg.function.kind, "output_shape": list(out_shape),
        "straggler_model": st.model, "straggler_dim": st.dim, "pattern": st.pattern,
        "trials_per_task": block, "skipped": [],
    }
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    enc = {n: {"chunks": (len(cfg.schemes), 1, 1, 1, block)} for n in names}
    enc["status"] = {"chunks": (len(cfg.schemes), 1, 1, 1)}
    return ds, enc


def open_sweep(path: str | os.PathLike):
    """Open a sweep store as a lazy :class:`xarray.Dataset` (see the module docstring for its layout).

    Raises
    ------
    StoreError
        If `path` is not a gcc-dask sweep store.
    """
    from gcc_dask.analysis.stores import open_sweep as _open

    return _open(path)


# ----------------------------------------------------------------------------------------- the driver
@dataclass(frozen=True)
class SweepResult:
    """What :func:`run_sweep` returns: the store, its status, and the tables read back from it.

    Attributes
    ----------
    path : str
    status : str
        "complete", or "incomplete" when some cells are pending.
    config : SweepConfig
    wall_s : float
        Seconds the tasks took on the cluster (0 when everything was already done).
    summary : pandas.DataFrame
        One row per (scheme, K, N, S|p): mean/std of the metrics over trials
        (:func:`gcc_dask.analysis.metrics.sweep_table`).
    rates : pandas.DataFrame
        Fitted log-log slopes of MSE against N (:func:`gcc_dask.analysis.rates.rate_table`).
    """

    path: str
    status: str
    config: SweepConfig
    wall_s: float
    summary: pd.DataFrame
    rates: pd.DataFrame

    def open(self):
        """The store as an :class:`xarray.Dataset`."""
        return open_sweep(self.path)


def _prepare_store(cfg: SweepConfig, path: Path, block: int, fn: _Function, out_shape: tuple,
                   say: Callable[[str], None]) -> tuple[np.ndarray, list[str]]:
    """Create (or resume) the store; return the status array and the skip reasons."""
    import zarr

    K, N = cfg.code.num_inputs, cfg.code.num_workers
    coincident = np.zeros((len(cfg.schemes), len(K), len(N)), np.int64)
    skipped, invalid = [], np.zeros(coincident.shape, bool)
    for a, k in enumerate(K):
        for b, n in enumerate(N):
            for i, (label, code) in enumerate(_make_codes(cfg, k, n).items()):
                if isinstance(code, str):
                    invalid[i, a, b] = True
                    skipped.append(f"{label} at K={k}, N={n}: {code}")
                else:
                    coincident[i, a, b] = len(code.coincident_points)
    if path.exists() and not cfg.store.overwrite and any(path.iterdir()):
        if not _is_sweep(path):
            raise StoreError(f"store.path: got {str(path)!r}, which exists and is not a gcc-dask sweep store; "
                             "choose another --out")
        root = zarr.open_group(str(path), mode="r+", use_consolidated=False)
        if root.attrs.get("fingerprint") != cfg.fingerprint():
            raise StoreError(f"store.path: got {str(path)!r}, a sweep made by a different configuration; pass "
                             "--overwrite (store.overwrite: true) to replace it, or choose another --out")
        status = np.asarray(root["status"][:])
        root.attrs.update(status="running", finished=None)
        say(f"resuming {path}: {int((status > 0).all(axis=0).sum())} cells already done")
        return status, skipped
    if path.exists():
        if path.is_dir() and any(path.iterdir()) and not _is_sweep(path):
            raise StoreError(f"store.path: got {str(path)!r}, which is not a gcc-dask sweep store; refusing to "
                             "overwrite it")
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if coincident.any():
        say(f"note: {int((coincident > 0).sum())} (scheme, K, N) combination(s) put a worker point on a data "
            "point (recorded in coincident_points; docs/methods.rst, section 'Point placement')")
    ds, enc = _template(cfg, fn, block, out_shape, coincident)
    st_vals = cfg.stragglers.values
    status = np.zeros(ds["status"].shape, np.int8)
    status[invalid] = STATUS_SKIPPED
    if cfg.stragglers.model == "fixed_count":
        for b, n in enumerate(N):
            for c, s in enumerate(st_vals):
                if s >= n:
                    status[:, :, b, c] = STATUS_SKIPPED
                    skipped.append(f"all schemes at N={n}, S={s}: S must be < N")
    ds["status"].values[...] = status
    ds.attrs["skipped"] = skipped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(str(path), mode="w-", encoding=enc, consolidated=False, zarr_format=3)
    return status, skipped


def _finish(path: Path, status: str) -> None:
    import zarr

    root = zarr.open_group(str(path), mode="r+", use_consolidated=False)
    root.attrs.update(status=status, finished=_now())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata is not part of the v3 spec (yet)
        zarr.consolidate_metadata(str(path))


def run_sweep(config: str | os.PathLike | Mapping[str, Any] | SweepConfig, client=None,
              out: str | os.PathLike | None = None, *, overrides: Sequence[str] = (),
              echo: Callable[[str], None] | None = None,
              performance_report: str | os.PathLike | None = None) -> SweepResult:
    """Run an accuracy/rate sweep on Dask and return its tables.

    Parameters
    ----------
    config : path, mapping or SweepConfig
        The sweep (see :mod:`gcc_dask.sweep_config`).
    client : distributed.Client, optional
        Use this client (never closed here); otherwise ``cluster.address``/``DASK_SCHEDULER_ADDRESS`` or an
        embedded LocalCluster (processes, one thread each unless ``cluster.threads_per_worker`` says).
    out : path, optional
        Store path; overrides ``store.path``.
    overrides : sequence of "key=value"
        As ``--set`` on the command line.
    echo : callable, optional
        Where to print progress lines (dashboard link, resume notes); None prints nothing.
    performance_report : path, optional
        Write Dask's performance report of the sweep's tasks to this HTML file
        (``distributed.performance_report``; ``gcc-dask sweep --performance-report``). Nothing is written when
        every cell was already done.

    Returns
    -------
    SweepResult

    Raises
    ------
    gcc_dask.errors.GccDaskError
        ConfigError, SourceError, WorkloadError, StoreError, ClusterError: before any task runs.
    """
    from distributed import as_completed

    from gcc_dask.analysis.metrics import sweep_table
    from gcc_dask.analysis.rates import rate_table
    from gcc_dask.analysis.stores import load_sweep
    from gcc_dask.runtime.cluster import ClusterSpec, connect
    from gcc_dask.runtime.cluster import performance_report as perf_report

    say = echo or (lambda _msg: None)
    if performance_report is not None:
        from gcc_dask._paths import writable_file

        writable_file("--performance-report", performance_report)  # refused now, not once the job is done
    cfg = load_sweep_config(config, overrides=overrides)
    check_code_params(cfg)
    path = Path(os.fspath(out) if out is not None else cfg.store.path).expanduser().absolute()
    fn = sample_function(cfg.function)
    X, _ = fn.sample(cfg.code.num_inputs[0], 0, cfg.seed)
    out_shape = tuple(int(v) for v in np.shape(fn.f(X))[1:])
    block = min(cfg.run.trials_per_task or cfg.trials, cfg.trials)
    status, _ = _prepare_store(cfg, path, block, fn, out_shape, say)
    todo = [(a, b, c) for a in range(status.shape[1]) for b in range(status.shape[2])
            for c in range(status.shape[3]) if (status[:, a, b, c] == STATUS_PENDING).any()]
    wall = 0.0
    if todo:
        import zarr

        spec = ClusterSpec.from_config(cfg.cluster, threads_per_worker=1)
        blocks = [list(range(lo, min(lo + block, cfg.trials))) for lo in range(0, cfg.trials, block)]
        K, N, S = cfg.code.num_inputs, cfg.code.num_workers, cfg.stragglers.values
        root = zarr.open_group(str(path), mode="r+", use_consolidated=False)
        names = [n for n in TRIAL_VARS if n in root]
        remaining = {cell: len(blocks) for cell in todo}
        token = uuid.uuid4().hex[:8]
        final = "interrupted"
        embedded = client is None and not (spec.address or spec.scheduler_file
                                           or os.environ.get("DASK_SCHEDULER_ADDRESS"))
        with connect(spec, client) as c, perf_report(c, performance_report):
            say(f"dask dashboard: {c.dashboard_link}" + (_EMBEDDED_NOTE if embedded else ""))
            page = SweepPage(c, token, cfg, str(path), todo, blocks, (K, N, S), int(np.prod(out_shape)), say)
            futures = {}
            i = 0
            for (a, b, s_i) in todo:
                for trials in blocks:
                    fut = c.submit(evaluate_cell, cfg, K[a], N[b], S[s_i], trials, pure=False,
                                   key=f"sweep-b{i}-K{K[a]}-N{N[b]}-s{s_i}-t{trials[0]}-{token}")
                    futures[fut] = (a, b, s_i, trials[0], trials[-1] + 1, i)
                    i += 1
            bar = _progress(len(futures), cfg.run.progress and echo is not None, cfg.name)
            t0 = time.perf_counter()
            try:
                for fut in as_completed(list(futures), loop=c.loop):  # (not the default client's loop)
                    res = fut.result()  # a task error stops the sweep; finished cells stay in the store
                    a, b, s_i, lo, hi, task = futures.pop(fut)
                    for name in names:
                        root[name][:, a, b, s_i, lo:hi] = res[name]
                    if "accuracy_uncoded" in root:
                        root["accuracy_uncoded"][a, lo:hi] = res["accuracy_uncoded"]
                    remaining[(a, b, s_i)] -= 1
                    if not remaining[(a, b, s_i)]:
                        cell = status[:, a, b, s_i]
                        cell[cell == STATUS_PENDING] = STATUS_DONE
                        root["status"][:, a, b, s_i] = cell
                    page.done(task, res, status[:, a, b, s_i] == STATUS_SKIPPED)
                    bar.update(1)
                final = "complete"
            except KeyboardInterrupt:
                raise
            except BaseException:
                final = "failed"
                raise
            finally:
                bar.close()
                c.cancel(list(futures))
                wall = time.perf_counter() - t0
                page.end(final == "complete")
                if final != "complete":
                    _finish(path, final)
        if performance_report is not None:
            say(f"performance report: {os.path.abspath(os.path.expanduser(os.fspath(performance_report)))}")
    done = bool((status != STATUS_PENDING).all())
    _finish(path, "complete" if done else "interrupted")
    ds = load_sweep(path)  # read here, not on Dask's default client (maybe another cluster than `client`'s)
    return SweepResult(path=str(path), status="complete" if done else "incomplete", config=cfg, wall_s=wall,
                       summary=sweep_table(ds), rates=rate_table(ds))


#: said after the dashboard link of an embedded cluster, which lives only while the sweep does
_EMBEDDED_NOTE = (" (an embedded cluster's: it closes when the sweep ends; --performance-report PATH keeps its "
                  "plots as an HTML file)")


def _progress(total: int, enabled: bool, name: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit="task", disable=not enabled, dynamic_ncols=True)
