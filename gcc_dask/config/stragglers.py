"""The config sections of stragglers and the answers to them: ``stragglers`` (the injected latency model),
``speculation`` (backups of late shards), ``cutoff`` (when a batch stops waiting) and ``advise`` (what
``schemes: [auto]`` measures) (docs/configuration.rst).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field
from pydantic import model_validator

from gcc_dask.limits import MAX_BACKUP_COPIES

from .fields import Duration, OptionalDuration, _Invalid, _Section


class StragglersConfig(_Section):
    """Injected worker latency (docs/pipeline.rst, section 'Straggler injection').

    With a latency model, each shard sleeps (cooperatively) for its drawn latency and, with ``clock:
    virtual``, the cutoff runs on the virtual clock of those latencies, so which results are kept depends
    on the seed only. ``model: none`` injects nothing and the cutoff uses the wall clock.

    Attributes
    ----------
    model
        ``none``, ``shifted_exponential`` (``shift + Exp(mean=scale)``) or ``pareto``
        (``shift + scale·(1 − U)^(−1/alpha)``).
    shift
        The minimum latency (per shard, or per sample with ``unit: sample``).
    scale
        ``shifted_exponential``: the mean of the exponential tail; ``pareto``: the scale x_m. Must be
        > 0 unless ``model`` is ``none``.
    alpha
        ``pareto`` only: the tail index, at least 0.5 (heavier tail for smaller alpha; infinite mean for
        alpha ≤ 1). Every drawn latency is capped at one day.
    hang_prob
        Probability that a worker also hangs, for ``hang_delay`` more, in a batch.
    hang_delay
        The extra delay of a hanging worker (per shard, whatever ``unit``).
    slow_workers
        Number of persistently slow workers (the same worker indices in every batch).
    slow_factor
        Multiplier on a slow worker's base latency.
    unit
        ``shard``: ``shift`` and ``scale`` are drawn per shard, whatever its block size. ``sample``: they are
        per sample, and a shard of B samples draws ``B·(shift + Exp(scale))`` (the classic model of coded
        computing, in which a task's run time scales with its load).
    seed
        The run seed: latencies are a function of (seed, batch, worker) only.
    clock
        ``virtual``: a shard's result arrives at its drawn latency, whenever it really finished, and every
        shard of a batch runs at the batch's priority (``cutoff.spares`` does not apply), so runs are
        reproducible. ``wall``: shards still sleep their drawn latencies, but the cutoff sees when results
        really arrive, as with real stragglers (``cutoff.spares`` applies; for throughput measurements).
    """

    model: Literal["none", "shifted_exponential", "pareto"] = "none"
    shift: Duration = 0.0
    scale: Duration = 0.01
    alpha: Annotated[float, Field(ge=0.5)] = 2.0
    hang_prob: Annotated[float, Field(ge=0, lt=1)] = 0.0
    hang_delay: Duration = 5.0
    slow_workers: Annotated[int, Field(ge=0)] = 0
    slow_factor: Annotated[float, Field(ge=1)] = 1.0
    unit: Literal["shard", "sample"] = "shard"
    seed: Annotated[int, Field(ge=0)] = 0
    clock: Literal["virtual", "wall"] = "virtual"

    @model_validator(mode="after")
    def _check(self) -> StragglersConfig:
        if self.model != "none" and self.scale <= 0:
            raise _Invalid("scale", self.scale, f"a duration > 0 for model {self.model!r}")
        return self


def _wait_for(value: Any) -> Any:
    """``'N-S'``, ``'all'`` or an integer ≥ 1"""
    if isinstance(value, str):
        norm = value.replace(" ", "").upper()
        if norm == "N-S":
            return "N-S"
        if norm == "ALL":
            return "all"
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise _Invalid(None, value, "'N-S', 'all' or an integer >= 1")


class SpeculationConfig(_Section):
    """The ``speculative`` scheme's backup copies: Spark's speculative execution on a batch's K shards
    (docs/pipeline.rst, section 'Speculative execution').

    A batch runs its K uncoded shards; once ``quantile`` of them have a result, every input still without one
    whose shard has run longer than ``multiplier`` × the median time of those results (and than
    ``min_runtime``) gets a backup copy on another worker; the first copy to arrive wins and the others are
    cancelled. A shard that fails gets its backup at once. Times count from the batch's submission. With
    ``copies`` > 1, a backup that has run that long in its turn gets the next copy (the scheme's N is
    ``(copies + 1) · K``).

    The defaults are Spark's classic ones, ``spark.speculation.quantile`` 0.75 and
    ``spark.speculation.multiplier`` 1.5 (its configuration docs up to 3.x; the current source has 0.9 and
    3), and ``spark.speculation.minTaskRuntime`` 100 ms. The classic pair suits a batch of few shards: with K
    = 8, Spark's ``floor(quantile · K)`` is 6 results at 0.75 but 7 at 0.9, and a multiplier of 3 lets a late
    shard hold its batch for three times the typical shard before any backup starts, where 1.5 bounds that
    wait at half a shard more; 0.9 and 3 were chosen for stages of thousands of tasks, where launching fewer
    copies matters more than the tail of one stage.

    Attributes
    ----------
    quantile
        The fraction of the batch's K inputs that must have a result before any backup is launched (Spark
        counts ``max(floor(quantile · K), 1)`` of them).
    multiplier
        A shard is late when it has run longer than this multiple of the median time of those results.
    min_runtime
        Never launch a backup for a shard that has run less than this.
    copies
        Backup copies an input may get, 1 to 8 (default 2). A second copy guards against an original and its
        backup both straggling (with independent hangs of probability p, about K·p² of the batches). Chosen by
        measurement (BENCHMARKS.md, the tail section): under hangs (p = 0.05, 20x the median) one copy, as
        Spark, kept the p99 batch latency at 0.77x of uncoded's (3.50 s against 4.55 s), two copies at 0.16x
        (0.75 s), with the same throughput without stragglers (0.84x against 0.83x of the plain map) and less
        compute under hangs (0.37x against 0.42x); copies start only when a shard is late.
    """

    quantile: Annotated[float, Field(gt=0, le=1)] = 0.75
    multiplier: Annotated[float, Field(ge=1)] = 1.5
    min_runtime: Duration = 0.1
    copies: Annotated[int, Field(ge=1, le=MAX_BACKUP_COPIES)] = 2


class CutoffConfig(_Section):
    """When a batch stops waiting for workers (docs/pipeline.rst, section 'Cutoff').

    The cutoff fires at the earliest of ``wait_for`` results, the ``deadline`` and the adaptive rule
    (``quantile``, ``multiplier``, ``min_runtime``). It applies to the approximate schemes (gcc, letcc,
    bacc, bspline); ``uncoded``, ``replication`` and ``lcc`` wait for their recovery condition.

    Attributes
    ----------
    wait_for
        Results to wait for: ``N-S`` (N minus ``stragglers``), ``all`` or a count.
    stragglers
        S, the stragglers the coded schemes are sized for (used by ``wait_for: N-S``).
    deadline
        Seconds from the batch start after which the batch is decoded from what has arrived; null for
        none.
    quantile
        Adaptive rule: once this fraction of the N results is in, wait at most ``multiplier`` × their
        median duration. Null disables the rule.
    multiplier
        Adaptive rule: the multiple of the median duration to wait.
    min_runtime
        Adaptive rule: never cut a batch off earlier than this.
    on_shortfall
        What to do when the cutoff fires with fewer results than the scheme can decode from: ``wait``
        (until it has that many), ``decode`` (keep the cutoff; the batch is then undecodable) or
        ``fail`` (mark the batch failed).
    spares
        ``lazy``: the shards the cutoff needs (``wait_for``, the best-spread worker points first) run at
        the batch's priority and the other N - ``wait_for`` (the spares) below every batch in flight, so a
        busy cluster runs a spare only when a result is still missing and cancels the rest unstarted;
        ``eager``: every shard at the batch's priority (each of the N workers computes, as in the papers'
        model). Applies to every scheme; on the virtual clock the kept sets are the same either way.
    backups
        ``true`` (the default): on the wall clock, a shard that a scheme stopping at the cutoff cannot do
        without, late by the ``speculation`` section's rule (Spark's: once ``quantile`` of the results the
        cutoff needs are in, a shard out for longer than ``multiplier`` × their median and ``min_runtime``),
        gets one backup copy on one of the faster workers that have sent a result of the batch (the quantile:
        ``backup_quantile``); the first copy to arrive is the
        shard's result, the other is cancelled. Only as many shards get a copy as the results in hand, the
        shards not late and the spares fall short of the cutoff: a slow worker holding more of a batch's
        shards than its spares cover no longer holds the batch. ``false``: no copies (wait, or the deadline).
    backup_quantile
        The fraction of the results the cutoff needs that must be in before any backup (in place of
        ``speculation.quantile``; default 0.5). A batch's shards go round-robin, so one worker of W holds
        ceil(N/W) of them: 3 of the 8 needed at N = 10 on 4 workers, 3 of 7 at N = 8 on 3. Spark's 0.75
        counts on tasks that a fast executor takes over; here it would wait for that worker before any copy.
    """

    wait_for: Annotated[int | str, BeforeValidator(_wait_for)] = "N-S"
    stragglers: Annotated[int, Field(ge=0)] = 0
    deadline: OptionalDuration = None
    quantile: Annotated[float, Field(gt=0, le=1)] | None = None
    multiplier: Annotated[float, Field(ge=1)] = 1.5
    min_runtime: Duration = 0.1
    on_shortfall: Literal["wait", "decode", "fail"] = "wait"
    spares: Literal["lazy", "eager"] = "lazy"
    backups: bool = True
    backup_quantile: Annotated[float, Field(gt=0, le=1)] = 0.5


class AdviseConfig(_Section):
    """What ``schemes: [auto]`` (and ``gcc-dask advise``) measures before it chooses (docs/frontier.rst, section
    'Advice').

    Attributes
    ----------
    samples
        The seeded sample of the dataset that is composed into groups and evaluated (never the whole of a
        large dataset).
    target_relacc
        Choose the fewest workers whose estimator reaches this RelAcc (null: the best at ``max_redundancy``).
    max_redundancy
        The largest N/K considered (null: ``code.num_workers / code.num_inputs``, or 2 with a target).
    margin
        What a code must gain over the best estimator that copies at the same N, beyond 2 paired standard
        errors, to be chosen: RelAcc (for an f with one output, a fraction of the copying one's MSE).
    """

    samples: Annotated[int, Field(ge=2, le=1_000_000)] = 2000
    target_relacc: Annotated[float, Field(gt=0, le=1)] | None = None
    max_redundancy: Annotated[float, Field(ge=1, le=64)] | None = None
    margin: Annotated[float, Field(ge=0, le=1)] = 0.003

    @model_validator(mode="after")
    def _check(self) -> AdviseConfig:
        if self.target_relacc is not None and self.max_redundancy is not None:
            raise _Invalid("max_redundancy", self.max_redundancy, "null beside target_relacc (give one of them)")
        return self
