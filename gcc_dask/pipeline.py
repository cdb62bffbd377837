"""Wire a pipeline: config -> source -> composition -> encode -> evaluate/cutoff -> decode -> store.

:func:`run_pipeline` is what ``gcc-dask run`` calls. It validates everything it can before touching the
cluster (config, source, model against the data's shape, the store), resumes an existing store made by
the same config and the same model and data files (batches whose ``status`` is written are never
recomputed, but failed ones are retried; the stored composition is reused), or composes the samples into
coding groups and creates the store; then it runs the batches on Dask and returns a :class:`RunResult`
with the per-scheme summary read back from the store. One driver at a time holds a store
(:class:`~gcc_dask.store.StoreLock`).

Its parts live beside it, one concern each: :mod:`~gcc_dask.pipeline_plans` (the codes and the cutoff plan of each
scheme), :mod:`~gcc_dask.pipeline_layout` (block size and composition), :mod:`~gcc_dask.pipeline_resume` (what a
resume finds in the store), :mod:`~gcc_dask.pipeline_cluster` (the cluster's checks before the batches) and
:mod:`~gcc_dask.pipeline_records` (the workers' store writer and the driver's record buffer).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from gcc_dask import dashboard
from gcc_dask import store as store_mod
from gcc_dask._paths import writable_file
from gcc_dask.analysis.summary import poor_line, summarize_run
from gcc_dask.config import FINGERPRINT_IGNORED, PipelineConfig, load_config
from gcc_dask.inputs import _check_model_fits, _probe_model, _resolve_path, build_source_and_workload  # noqa: F401
from gcc_dask.limits import MAX_SAMPLES
from gcc_dask.phases import PhaseTimer
from gcc_dask.errors import ClusterError, ConfigError, GccDaskError, PoorEstimatesWarning, SourceError
from gcc_dask.pipeline_cluster import _check_reachable, _wait_for_workers
from gcc_dask.pipeline_layout import _block_choice, _compose, _layout, composition_blind, composition_policy  # noqa: F401
from gcc_dask.pipeline_plans import build_codes, build_plans
from gcc_dask.pipeline_records import DecodedRows, RecordBuffer, StoreSink
from gcc_dask.pipeline_resume import (
    _inputs_digest, _inputs_pending, _limit_note, _limited, _pending, _tell_misplaced,
)
from gcc_dask.runtime.cluster import (
    ClusterSpec, allowed_failures, check_gpu_workers, cluster_has_gpu, connect, performance_report as perf_report,
    remove_plugins, run_on_cluster, thread_slots,
)
from gcc_dask.runtime.executor import BatchRunner
from gcc_dask.runtime.liveness import MISSED_HEARTBEATS
from gcc_dask.runtime.tasks import RunPlugin
from gcc_dask.store import StoreLock
from gcc_dask.store.resume_checks import DATA_FOLDERS, LABEL_FILES, MODEL_SOURCES
from gcc_dask.stragglers import latency_model_from_config
from gcc_dask.workloads import load_workload

logger = logging.getLogger(__name__)

# build_codes and build_plans (pipeline_plans), StoreSink and RecordBuffer (pipeline_records), composition_blind
# and composition_policy (pipeline_layout) are importable from here too
__all__ = ["RunResult", "run_pipeline", "build_source_and_workload"]

@dataclass(frozen=True)
class RunResult:
    """What :func:`run_pipeline` returns.

    Attributes
    ----------
    path : str
        The Zarr store of the run.
    summary : pandas.DataFrame
        One row per scheme (see :func:`gcc_dask.analysis.summary.summarize_run`), read from the store on
        first access (it reads every estimate: seconds for millions of samples), then kept; its ``attrs``
        hold ``block_size`` and ``block_size_reason``.
    status : str
        "complete", or "incomplete" if some batches are still pending.
    config : PipelineConfig
    wall_s : float
        Seconds the batches took on the cluster (0 when everything was already done).
    phases_s : dict of str to float
        Where this call's time went, in seconds (wall clock, this process): ``advice`` (``schemes: [auto]``'s
        choice, measured or read back), ``connect`` (the cluster up and its
        workers in), ``probe`` (f checked on a sample, and timed for ``code.block_size: auto`` and
        ``composition.policy: auto``), ``digests`` (the inputs' digest a resume is checked against), ``store``
        (the store created or opened, without the composition), ``composition``, ``batches`` (every batch run
        and written), within it ``load_f`` (f loaded on the workers, their plugin's set-up, before the first
        submission) and ``first_batch`` (from the first submission to the first batch written), ``finish`` (the
        final status written) and ``total``.
        A phase the call did not go through is absent (a resume of a finished run has no ``batches``).
    estimates : dict of str to numpy.ndarray
        With ``run_pipeline(..., keep_estimates=True)``: each scheme's estimates f̂ in the dataset's order, float32
        of shape ``(num_samples, *output_shape)`` (NaN where a batch was undecodable), the same values as the
        store's ``<scheme>/decoded`` read with :func:`gcc_dask.store.read_in_dataset_order`, kept as the batches'
        records came back (no read of the store). A scheme is absent when not every batch of it ran in this call
        (a resume) or brought its rows back; empty without ``keep_estimates``.
    store_id : str or None
        The store's identity (its ``store_id`` attribute, made when the store is created and kept by resumes): a
        store overwritten by a later run at the same path has another, which tells a reader of this result that
        the store is no longer the one it describes (docs/store.rst). None for a store made without one.
    """

    path: str
    status: str
    config: PipelineConfig
    wall_s: float
    phases_s: dict = field(default_factory=dict, compare=False)
    estimates: dict = field(default_factory=dict, compare=False, repr=False)
    store_id: str | None = field(default=None, compare=False, repr=False)

    @property
    def summary(self) -> pd.DataFrame:
        """One row per scheme (:func:`gcc_dask.analysis.summary.summarize_run`). A scheme whose estimates are
        poor (its ``poor`` column) is also said once, as a :class:`~gcc_dask.errors.PoorEstimatesWarning`: a
        selection of columns that leaves ``poor`` out does not hide it."""
        if "_summary" in self.__dict__:  # read once (a property, not functools' cached_property, so that the
            return self.__dict__["_summary"]  # warning below points at the user's line)
        df = summarize_run(self.path)
        df.attrs.update(block_size=self.block_size, block_size_reason=self.block_size_reason)
        self.__dict__["_summary"] = df
        for name, why in (df.attrs.get("poor") or {}).items():
            _warn_caller(poor_line(df, name, why), PoorEstimatesWarning)
        return df

    @property
    def block_size(self) -> int | None:
        """B, the samples each shard evaluated at once (``code.block_size``, or the one ``auto`` chose)."""
        return store_mod.RunStore(self.path).attrs.get("block_size")

    @property
    def block_size_reason(self) -> str | None:
        """Why the run has that block size (``"code.block_size"``, or ``auto``'s measurement and bound)."""
        return store_mod.RunStore(self.path).attrs.get("block_size_reason")


def run_pipeline(
    config: str | os.PathLike | Mapping[str, Any] | PipelineConfig,
    client=None,
    out: str | os.PathLike | None = None,
    *,
    overrides: Sequence[str] = (),
    echo: Callable[[str], None] | None = None,
    performance_report: str | os.PathLike | None = None,
    keep_estimates: bool = False,
) -> RunResult:
    """Run a coded pipeline end to end and return its summary.

    Parameters
    ----------
    config : path, mapping or PipelineConfig
        The pipeline (YAML file path or an equivalent mapping; see docs/configuration.rst).
    client : distributed.Client, optional
        Use this client (never closed here). Otherwise ``cluster.address``/``DASK_SCHEDULER_ADDRESS`` or
        an embedded LocalCluster.
    out : path, optional
        Store path; overrides ``store.path``.
    overrides : sequence of "key=value"
        As ``--set`` on the command line.
    echo : callable, optional
        Where to print progress lines (the dashboard link, warnings about the cluster); None prints nothing
        (and a warning about the cluster is a :class:`RuntimeWarning`).
    performance_report : path, optional
        Write Dask's performance report of the run's work on the cluster to this HTML file
        (``distributed.performance_report``; ``gcc-dask run --performance-report``). Nothing is written
        when every batch was already done.
    keep_estimates : bool
        Also keep the estimates on this machine as the batches finish (:attr:`RunResult.estimates`; memory: 4
        bytes per output value per scheme), so that they need no read of the store afterwards
        (:func:`gcc_dask.coded_map` for NumPy input).

    Returns
    -------
    RunResult

    Raises
    ------
    gcc_dask.errors.GccDaskError
        ConfigError, SourceError, WorkloadError, StoreError, ClusterError: before any batch runs; a
        SourceError or InvalidInputError for bad data met mid-run, a StoreError when the store cannot be
        written, a ClusterError when every worker is lost (the store keeps every finished batch).
    KeyboardInterrupt
        After marking the store ``interrupted`` (a rerun resumes it).
    """
    say = echo or (lambda _msg: None)
    phases = PhaseTimer()
    if performance_report is not None:
        writable_file("--performance-report", performance_report)  # refused now, not once the run is done
    cfg = config if isinstance(config, PipelineConfig) else load_config(config, overrides=overrides)
    # the path the store itself takes ('~' expanded, absolute, '..' and links resolved: '~/nope/../s.zarr' is
    # '~/s.zarr'): the reachability probe, the workers' sink, the composition reader and the summary all get it
    raw = os.fspath(out) if out is not None else cfg.store.path
    if not str(raw).strip():
        raise ConfigError(f"{'--out' if out is not None else 'store.path'}: got {raw!r}; expected a store path (a "
                          "folder: a new store, or a run store to resume)")
    path = store_mod.store_path(raw)
    store_mod.check_target(path, cfg.store.overwrite)  # a file, or a foreign folder to overwrite: refused now
    advice = None
    if "auto" in cfg.schemes:  # the estimator the advice chooses (recorded in the store, reused on resume)
        from gcc_dask.frontier.advise import resolve_auto

        with phases("advice"):
            cfg, advice = resolve_auto(cfg, path, client=client, say=say)
    source, workload = build_source_and_workload(cfg)
    if source.num_samples > MAX_SAMPLES:
        raise SourceError(f"source: got {source.name!r} with {source.num_samples:,} samples; expected at most "
                          f"{MAX_SAMPLES:,} in one run (use source.limit, or split the dataset into runs)")
    spec = ClusterSpec.from_config(cfg.cluster)
    with contextlib.ExitStack() as stack:
        cluster: list = []  # the client, once connected (on first need)

        embedded = client is None and not (spec.address or spec.scheduler_file
                                           or os.environ.get("DASK_SCHEDULER_ADDRESS"))

        def connected():
            if not cluster:
                with phases("connect"):
                    c = stack.enter_context(connect(spec, client))
                    say(f"dask dashboard: {c.dashboard_link}" + (_EMBEDDED_NOTE if embedded else ""))
                    _wait_for_workers(c, cfg.cluster.connect_timeout)
                cluster.append(c)
                page = dashboard.attach(c)  # the run's own page on that dashboard (docs/dashboard.rst)
                if page:
                    say(f"gcc-dask run page: {page}")
            return cluster[0]

        # f timed for the block size (required) or only for composition.policy: auto (optional: a default)
        timed = True if cfg.code.block_size == "auto" else "optional" if cfg.composition.policy == "auto" else False
        fixed = None
        if getattr(source, "remote", False):  # a dask array: not one block of it is read on the driver
            c = connected()
            with phases("probe"):
                output_shape, cost = run_on_cluster(c, _probe_model, workload, source, cfg.run.nan_policy, timed,
                                                    worker_timeout=cfg.cluster.connect_timeout,
                                                    what="probing the model")
        else:
            with phases("probe"):
                output_shape, cost = _probe_model(workload, source, cfg.run.nan_policy, timed)
            fixed = getattr(load_workload(workload), "fixed_batch", None)  # loaded once by the check above
            if fixed is not None and cfg.code.block_size != "auto" and fixed != cfg.code.block_size:
                say(f"note: the model {getattr(workload, 'path', workload)!r} has a fixed batch dimension of "
                    f"{fixed}, so f runs each block of code.block_size = {cfg.code.block_size} samples in slices "
                    f"of {fixed} (export it with a dynamic batch dimension, or set code.block_size: {fixed}, for "
                    "one call per block)")
        if echo is not None:
            def warn(message: str) -> None:
                say(f"warning: {message}")
        else:
            warn = _warn_caller
        result = _run_stored(cfg, path, source, workload, output_shape, connected, say, warn, echo is not None,
                             performance_report, advice, cost=cost, fixed=fixed, phases=phases, keep=keep_estimates)
    phases.seconds["total"] = phases.elapsed()
    return result


def _warn_caller(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """A :class:`RuntimeWarning` (or `category`) attributed to the first caller outside gcc-dask (the user's
    line)."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(0), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


#: said after the dashboard link of an embedded cluster, which lives only while the run does
_EMBEDDED_NOTE = (" (an embedded cluster's: it closes when the run ends; --performance-report PATH keeps its "
                  "plots as an HTML file)")


def _run_stored(cfg, path, source, workload, output_shape, connected, say, warn, progress,
                report_path, advice=None, cost=None, fixed=None, phases: "PhaseTimer | None" = None,
                keep: bool = False) -> RunResult:
    """Resume or create the store at `path`, run what is pending on ``connected()``'s client, finish the store
    (with `advice`, the choice of ``schemes: [auto]``, in its attrs). `cost` is f's measured cost (for
    ``code.block_size: auto``), `fixed` a fixed batch dimension of the model; `phases` is told the time of each
    part (:attr:`RunResult.phases_s`); `keep`: the estimates kept as they come (:attr:`RunResult.estimates`)."""
    phases = phases if phases is not None else PhaseTimer()
    codes = build_codes(cfg)
    plans = build_plans(cfg, codes)
    k = cfg.code.num_inputs
    auto = cfg.code.block_size == "auto"
    choice = None if auto else _block_choice(cfg, source, cost, fixed)
    policy = composition_policy(cfg, None if cost is None else cost.seconds_per_row, source.num_samples)
    latency_model = latency_model_from_config(cfg.stragglers.model_dump(), strict=False)
    with phases("digests"):
        inputs_digest = _inputs_digest(source, workload)
        legacy_digest = _inputs_digest(source, workload, sources=False, stored=False, labels=False)
    layout_kwargs = dict(
        fingerprint=cfg.fingerprint(),
        inputs_digest=inputs_digest,
        config_resolved=cfg.resolved(),
        schemes={s: codes[s].num_workers for s in cfg.schemes},
        num_samples=source.num_samples,
        **({} if auto else {"batch_size": k * choice.block_size}),  # auto: the stored one (checked by resume)
        group_size=k,
        output_shape=output_shape,
        has_labels=source.has_labels,
        has_reference=cfg.run.reference,
        seed=cfg.seed,
        scheme_attrs={s: {"code": codes[s].params, "code_name": codes[s].name, "num_workers": codes[s].num_workers}
                      for s in cfg.schemes},
        attrs={"composition": policy, MODEL_SOURCES: list(getattr(workload, "sources", list)()),
               DATA_FOLDERS: list(source.data_folders()), LABEL_FILES: list(source.label_files()),
               **({"advice": advice} if advice is not None else {})},
    )
    with StoreLock(path):
        with phases("store"):
            store = store_mod.RunStore.resume(path, overwrite=cfg.store.overwrite, config_ignore=FINGERPRINT_IGNORED,
                                              fingerprint_for=cfg.fingerprint, config_for=cfg.resolved_for,
                                              legacy_inputs_digest=legacy_digest,
                                              inputs_digest_for=lambda listed, folders, labels: _inputs_digest(
                                                  source, workload, listed, folders, labels),
                                              **layout_kwargs)
        work = None
        if store is not None:
            choice = _block_choice(cfg, source, cost, fixed, store)
            layout = _layout(cfg, choice.block_size, source.num_samples, store.sample_index())
            _tell_misplaced(store, cfg.schemes, warn)
            work = _pending(store, cfg.schemes, _limited(cfg, store.num_batches))
            done = _limited(cfg, store.num_batches) - len(work)
            say(f"resuming {path}: {done} of {_limited(cfg, store.num_batches)} batches already done")
        wall = 0.0
        rows = None
        if store is None or work:
            c = connected()
            with perf_report(c, report_path):
                if store is None:
                    choice = _block_choice(cfg, source, cost, fixed)
                    if auto:
                        say(f"block size {choice.block_size} ({choice.reason})")
                    t0 = time.perf_counter()
                    with phases("composition"):
                        layout = _compose(cfg, choice.block_size, source, c, say, policy)
                    composed_s = time.perf_counter() - t0
                    with phases("store"):
                        store = store_mod.RunStore.create(
                        path, overwrite=cfg.store.overwrite, sample_index=layout.order,
                        groups=layout.group_of_slot(),
                        worker_points={s: codes[s].worker_points for s in cfg.schemes},
                        **{**layout_kwargs, "batch_size": k * choice.block_size,
                           "attrs": {**layout_kwargs["attrs"], "block_size": choice.block_size,
                                     "block_size_reason": choice.reason,
                                     "composition_s": round(composed_s, 3)}})
                    # a new store: every batch pending for every scheme (nothing to read back)
                    work = [(b, list(cfg.schemes)) for b in range(_limited(cfg, store.num_batches))]
                rows = DecodedRows(layout, cfg.schemes, source.num_samples, output_shape) if keep else None
                with phases("batches"):
                    wall = _run_batches(cfg, c, store, path, workload, codes, source, layout, plans, latency_model,
                                        output_shape, work, say, progress, warn, in_flight=choice.max_in_flight,
                                        phases=phases, rows=rows)
            if report_path is not None:
                say(f"performance report: {os.path.abspath(os.path.expanduser(os.fspath(report_path)))}")
        with phases("finish"):
            num_batches = _limited(cfg, store.num_batches)
            final = {s: store.batch_status(s)[:num_batches] for s in cfg.schemes}
            complete = all((v > 0).all() for v in final.values()) and num_batches == store.num_batches \
                and not _inputs_pending(store)[:num_batches].any()
            run_status = "complete" if complete else "incomplete"
            store.finish(status=run_status)
        if num_batches < store.num_batches:
            say(_limit_note(cfg, store, num_batches))
    estimates = rows.complete(store.num_batches) if rows is not None else {}
    return RunResult(path=path, status=run_status, config=cfg, wall_s=wall, phases_s=phases.seconds,
                     estimates=estimates, store_id=store.attrs.get(store_mod.STORE_ID_ATTR))


def _plugin_prefix(path: str) -> str:
    """``gcc-dask-<8 hex digits of the store's path>-``: the start of the worker plugin names of every run of the
    store at `path` (a run's plugin adds its token: ``gcc-dask-1a2b3c4d-<token>``)."""
    import hashlib

    return f"gcc-dask-{hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:8]}-"


#: the scheduler addresses whose re-runs of lost tasks (allowed-failures) were warned of in this process
_RERUNS_WARNED: set[str] = set()


def _run_batches(cfg, c, store, *args, **kwargs) -> float:
    """Run the pending batches on client `c`, writing records as they finish; the wall time taken (s). A
    ``phases`` keyword (a :class:`~gcc_dask.phases.PhaseTimer`) is told ``load_f``, the seconds f took to load on the
    workers, and ``first_batch``: the seconds from the first submission (once f was loaded) to the first batch's
    records.

    Marks the store ``failed`` when the run stops on an error, ``interrupted`` on Ctrl-C or SIGTERM (and
    re-raises), whenever it comes: while the run is set up (the workers' check of the store, the plugins) as
    well as while batches run (it came there in 2 of 6 trials, and left the store ``running``).
    """
    try:
        return _run_batches_on(cfg, c, store, *args, **kwargs)
    except KeyboardInterrupt:
        try:
            running = store.attrs.get("status") == "running"
        except Exception:  # the store cannot be read: the interruption is what the user hears of
            running = False
        if running:
            _mark_quietly(store, "interrupted")
        raise


def _run_batches_on(cfg, c, store, path, workload, codes, source, layout, plans, latency_model, output_shape,
                    work, say, progress, warn=None, in_flight=None, phases: "PhaseTimer | None" = None,
                    rows: DecodedRows | None = None) -> float:
    """:func:`_run_batches` itself; `rows`, when given, takes each batch's decoded rows out of its records."""
    frozen = _check_reachable(c, os.path.abspath(path))
    # an in-process cluster (workers are threads of this process) cannot lose a worker alone: nothing to warn of;
    # a scheduler already warned of in this process is not asked again (one warning per scheduler, not per call)
    address = str(c.scheduler.address)
    failures = None if address.startswith("inproc://") or address in _RERUNS_WARNED else allowed_failures(c)
    if failures and warn is not None:
        _RERUNS_WARNED.add(address)
        warn(f"the Dask scheduler at {address} re-runs a task lost with its worker up to {failures} "
             "times (distributed.scheduler.allowed-failures), so a shard lost with a dead worker is computed again "
             "instead of decoded around as an erasure; start the scheduler with "
             "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 (docs/cluster.rst, section 'An existing scheduler'; "
             "said once per scheduler in this process)")
    has_gpu = cluster_has_gpu(c)
    if cfg.cluster.gpu is True and not has_gpu:
        raise ClusterError("cluster.gpu: got true, but no Dask worker advertises a GPU resource; start "
                           "workers with `--resources GPU=1` or set cluster.gpu: auto")
    use_gpu = has_gpu and cfg.cluster.gpu is not False
    if use_gpu:
        check_gpu_workers(c)  # GPU=1 without CuPy would fail every shard
    slots = thread_slots(c)
    widest = max(p.num_inputs if p.speculation is not None else p.num_workers for p in plans)  # (backups: when late)
    if 0 < slots < widest:  # a note on the command line, a RuntimeWarning at the caller's line from Python
        few = (f"a batch has up to N = {widest} shards but the cluster has {slots} worker threads, so some shards "
               "queue behind their own batch's stragglers and the cutoff waits for them; add threads "
               "(cluster.threads_per_worker, or the workers' --nthreads) or workers (docs/pipeline.rst, section "
               "'Slots and placement')")
        if progress or warn is None:
            say(f"note: {few}")
        else:
            warn(few)
    # the earlier runs of this store whose driver died left their plugins (and maybe running tasks) on a cluster
    # that outlives them: remove them, so that those tasks write nothing (their writes would be refused anyway:
    # they carry another token than the store's)
    prefix = _plugin_prefix(path)
    stale = remove_plugins(c, prefix, frozen)
    if stale:
        say(f"removed from the cluster what {len(stale)} earlier run{'s' if len(stale) > 1 else ''} of this store "
            f"left there (worker plugin{'s' if len(stale) > 1 else ''} {', '.join(stale)}): their tasks still "
            "running write nothing")
    plugin = RunPlugin(
        name=f"{prefix}{uuid.uuid4().hex[:8]}", workload=workload, codes=codes, source=source,
        sink=StoreSink(os.path.abspath(path), token=store.token), layout=layout, use_gpu=use_gpu,
        cache_batches=in_flight or cfg.run.max_batches_in_flight, order_from=store_mod.SampleIndex(os.path.abspath(path)),
        output_shape=output_shape,
    )
    runner = BatchRunner(
        c, plugin, plans, latency_model=latency_model, seed=cfg.seed, num_samples=source.num_samples,
        output_size=int(np.prod(output_shape)), max_in_flight=in_flight or cfg.run.max_batches_in_flight,
        reference=cfg.run.reference, use_gpu=use_gpu,
        latency_per_sample=cfg.stragglers.unit == "sample", virtual_clock=cfg.stragglers.clock == "virtual",
        worker_timeout=cfg.cluster.connect_timeout, unresponsive_after=cfg.cluster.unresponsive_after,
        spares=cfg.cutoff.spares, echo=say, warn=warn, keep_decoded=rows is not None,
    )
    if frozen:
        say(f"Dask worker{'s' if len(frozen) > 1 else ''} {', '.join(sorted(frozen))} missed "
            f"{MISSED_HEARTBEATS} heartbeats: the run starts without {'them' if len(frozen) > 1 else 'it'} (no "
            "shards until a heartbeat comes; ended after cluster.unresponsive_after)")
        runner.suspect(frozen, said=True)  # said once a run
    bar = _progress(len(work), cfg.run.progress and progress, cfg.name)
    records = RecordBuffer(store)
    dashboard.publish(c, {"kind": "meta", "run": plugin.name_token, "name": cfg.name, "store": os.path.abspath(path)})

    odd: dict[str, dict[str, int]] = {"nonfinite_rows": {}, "overflow_rows": {}}

    def done(batch: int, batch_records: list[dict]) -> None:
        for r in batch_records:  # f's NaN/Inf rows and estimates beyond float32, said once at the end
            for key, counts in odd.items():
                if r.get(key):
                    counts[r["scheme"]] = counts.get(r["scheme"], 0) + int(r[key])
        if rows is not None:
            rows.add(batch_records)  # (the rows out of the records before they are written)
        records.add(batch_records)
        bar.update(1)
        if phases is not None and "first_batch" not in phases.seconds:  # (after f was loaded on the workers)
            phases.seconds["load_f"] = runner.load_s
            phases.seconds["first_batch"] = time.perf_counter() - t0 - runner.load_s

    t0 = time.perf_counter()
    try:
        runner.run(work, on_batch_done=done)
        records.close()  # a record that cannot be written raises its StoreError here
    except GccDaskError:  # bad data, an unwritable store, every worker lost: stop, say so
        _close_quietly(records)
        _mark_quietly(store, "failed")
        raise
    except KeyboardInterrupt:
        _close_quietly(records)
        _mark_quietly(store, "interrupted")
        raise
    finally:
        _close_quietly(records)
        bar.close()
        _tell_non_finite(odd, warn)
    return time.perf_counter() - t0


def _tell_non_finite(odd: dict[str, dict[str, int]], warn: Callable[[str], None]) -> None:
    """One line for f's output rows that held NaN or Inf (their estimates only are NaN: an exact scheme keeps its
    other rows), one for estimates beyond float32's range (stored as ±inf); nothing when there were none."""
    def per_scheme(counts: dict[str, int]) -> str:
        parts = [f"{n:,} in {s}" for s, n in sorted(counts.items())]
        return " ".join(parts[0].split(" ", 1)[:1] + ["rows", parts[0].split(" ", 1)[1]]) + "".join(
            f", {p}" for p in parts[1:])

    if odd["nonfinite_rows"]:
        warn(f"f returned NaN or Inf on {per_scheme(odd['nonfinite_rows'])} of its outputs (counted over the "
             "shards' results): those rows are erasures (run.nan_policy stops the run on NaN or Inf in the data, "
             "not in f's outputs), the estimates that use them are NaN (counted in missing), the other rows "
             "were decoded as usual; check f on those samples")
    if odd["overflow_rows"]:
        warn(f"f's values beyond float32's range (|value| > {float(np.finfo(np.float32).max):.3g}) gave "
             f"estimates stored as ±inf on {per_scheme(odd['overflow_rows'])}: scale f's output down")


def _close_quietly(records: RecordBuffer) -> None:
    """Write what can still be written while the run stops for another reason (a second error is logged)."""
    try:
        records.close()
    except GccDaskError as e:
        logger.warning("records not written: %s", e)


def _mark_quietly(store, status: str) -> None:
    """Mark the store `status` while the run stops on another error; a store that cannot be marked (full, read
    only, gone) is logged, not raised: the error that stopped the run is the one line the user sees, and a
    store left ``running`` is resumed all the same."""
    try:
        store.finish(status=status)
    except GccDaskError as e:
        logger.warning("store not marked %s: %s", status, e)


def _progress(total: int, enabled: bool, name: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit="batch", disable=not enabled, dynamic_ncols=True)
