"""The config sections of where and how a pipeline runs: ``cluster`` (which Dask cluster), ``store`` (the results
store) and ``run`` (batches in flight, limits, NaN policy, ...) (docs/configuration.rst).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator
from pydantic import model_validator

from .fields import Duration, OptionalDuration, PathStr, PosInt, _Invalid, _Section


def _gpu(value: Any) -> Any:
    """``'auto'``, true or false"""
    if isinstance(value, bool) or (isinstance(value, str) and value == "auto"):
        return value
    raise _Invalid(None, value, "'auto', true or false")


class ClusterConfig(_Section):
    """Which Dask cluster to use; all null = an embedded LocalCluster (docs/cluster.rst).

    Precedence: a client passed to :func:`~gcc_dask.pipeline.run_pipeline`, then ``address``
    (``--scheduler``), then ``scheduler_file``, then the ``DASK_SCHEDULER_ADDRESS`` environment
    variable, else an embedded ``LocalCluster``.

    Attributes
    ----------
    address
        Address of a running Dask scheduler, e.g. ``tcp://10.0.0.1:8786``.
    scheduler_file
        A scheduler file written by ``dask scheduler --scheduler-file`` (not together with ``address``).
    n_workers
        Embedded cluster: worker count (null: the machine's cores, at most 4).
    threads_per_worker
        Embedded cluster: threads per worker (null: 16, so that sleeping stragglers do not queue).
    gpu
        ``auto`` uses GPU workers when there are any; ``true`` requires one; ``false`` never uses one.
    processes
        Embedded cluster: worker processes (null or true) or threads in this process (false).
    connect_timeout
        How long to wait for the scheduler to answer and for at least one worker.
    unresponsive_after
        A worker that sends no heartbeat for this long (frozen, stopped, swapping) is ended as if it had
        died: its nanny kills and restarts it, and its shards become erasures (docs/pipeline.rst, section
        'Unresponsive workers'). At least three heartbeat intervals; null: never (a frozen worker then
        holds the batches it has until it thaws, or until the scheduler's ``worker-ttl``).
    """

    address: str | None = None
    scheduler_file: PathStr | None = None
    n_workers: PosInt | None = None
    threads_per_worker: PosInt | None = None
    gpu: Annotated[bool | str, BeforeValidator(_gpu)] = "auto"
    processes: bool | None = None
    connect_timeout: Duration = 10.0
    unresponsive_after: OptionalDuration = 5.0

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        if self.address and self.scheduler_file:
            raise _Invalid("scheduler_file", self.scheduler_file,
                           "null when cluster.address is set (give one of address, scheduler_file)")
        if self.connect_timeout <= 0:
            raise _Invalid("connect_timeout", self.connect_timeout, "a duration > 0")
        if self.unresponsive_after is not None and self.unresponsive_after <= 0:
            raise _Invalid("unresponsive_after", self.unresponsive_after, "a duration > 0, or null for never")
        return self


class StoreConfig(_Section):
    """The Zarr results store; ``path: null`` becomes ``runs/<name>.zarr``. An existing run is resumed.

    Attributes
    ----------
    path
        The store's directory, relative to the working directory (``--out`` overrides it). It must be
        on a file system that the driver and every worker can write.
    overwrite
        Replace an existing run store (``--overwrite``) instead of resuming it. A store made by a
        different config is refused unless this is true.
    """

    path: PathStr | None = None
    overwrite: bool = False


class RunConfig(_Section):
    """Execution knobs of the pipeline.

    Attributes
    ----------
    max_batches_in_flight
        Batches submitted to the cluster at once (backpressure). Each worker keeps the samples (and, for the
        coded schemes, the coded blocks) of these batches, about ``max_batches_in_flight × K·B × sample size
        × (1 + Σ N/K over the coded schemes)`` bytes per worker, and, from a chunked source, the chunks those
        batches were read from (the chunks of their composition windows: up to ``composition.window`` samples
        per window in flight; docs/pipeline.rst, section 'Reads that follow the chunks'); lower it for large
        samples. The default keeps a 2-core cluster busy with blocks of 512 (docs/pipeline.rst, section
        'Evaluate').
    limit_batches
        Run only the first ``limit_batches`` batches (a later run without it continues the store).
    nan_policy
        ``raise``: NaN or Inf in the data (a sample of X, met while a batch is read or encoded) stops the run
        with one line naming the batch and its samples, as does NaN or Inf from f on the first sample (its probe,
        before anything runs). NaN or Inf that f returns on other rows does not stop it: those output rows are
        erasures, left out of the decode, the estimates that use them are NaN (counted in ``missing``) and the
        run says once how many there were (docs/pipeline.rst, section 'Failures and erasures').
        ``propagate``: they flow through unchecked and stay in their batch.
    reference
        Compute f uncoded beside each batch (``inputs/reference``), for MSE and RelAcc. It is never on a
        batch's latency path, but it is K·B more evaluations of f per batch: a production run without the
        need to score turns it off.
    progress
        Show a progress bar (``--no-progress`` turns it off).
    output_kind
        What f returns, which decides the metrics of the summary (docs/concepts.rst, section 'Metrics'):
        ``auto`` infers it from f's output shape (two or more values per sample: ``classifier``, scored by
        RelAcc and accuracy; one value: ``regression``, scored by the relative RMSE, R² and the largest error);
        set ``regression`` for an f with several outputs that are not class scores (a multi-output regressor,
        an embedding), which ``auto`` would score by the argmax.
    """

    max_batches_in_flight: PosInt = 16
    limit_batches: PosInt | None = None
    nan_policy: Literal["raise", "propagate"] = "raise"
    reference: bool = True
    progress: bool = True
    output_kind: Literal["auto", "classifier", "regression"] = "auto"
