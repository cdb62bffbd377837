"""The ``gcc-dask`` command line.

Errors a user can cause (:class:`gcc_dask.errors.GccDaskError`) print one line on stderr and exit with
status 2; Ctrl-C prints one line and exits with status 130, SIGTERM (what SLURM, Kubernetes and systemd send
first) one line and status 143 (the store is marked interrupted, the embedded cluster is closed, and running
the same command again resumes it); anything else is a bug and prints a traceback (docs/cli.rst, section
'Exit status').
"""

from __future__ import annotations

import functools
import shlex
import signal
import sys
import threading
import warnings

import click

from gcc_dask.errors import GccDaskError, PoorEstimatesWarning, Terminated


#: exit status of a command stopped by Ctrl-C (128 + SIGINT) and by SIGTERM (128 + SIGTERM)
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


def _raise_terminated(signum, frame):
    raise Terminated()


class _PendingTaskNoise:
    """A logging filter for asyncio's "Task was destroyed but it is pending!": once a command has ended with its one
    line (a lost scheduler), the waits it left on the client's event loop are collected at exit, each printed with
    that record; they are the loss the line already named."""

    def filter(self, record) -> bool:
        try:
            return not record.getMessage().startswith("Task was destroyed but it is pending")
        except Exception:  # pragma: no cover - a record whose arguments do not format
            return True


def _quiet_pending_tasks() -> None:
    import logging

    logging.getLogger("asyncio").addFilter(_PendingTaskNoise())


def _user_errors(func):
    """Turn GccDaskError into one line and exit status 2, Ctrl-C into one line and status 130, and SIGTERM
    into one line and status 143 (SIGTERM raises :class:`~gcc_dask.errors.Terminated`, a
    ``KeyboardInterrupt``, while the command runs, so a run stops as on Ctrl-C)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return func(*args, **kwargs)
        except GccDaskError as e:
            click.echo(f"gcc-dask: error: {e}", err=True)
            _quiet_pending_tasks()
            sys.exit(2)
        except Terminated:
            click.echo("gcc-dask: terminated (SIGTERM); run the same command again to resume", err=True)
            sys.exit(EXIT_TERMINATED)
        except KeyboardInterrupt:
            click.echo("gcc-dask: interrupted; run the same command again to resume", err=True)
            sys.exit(EXIT_INTERRUPTED)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    return wrapper


def _job_options(example: str):
    """The options shared by the commands that run a job on a cluster (run, sweep)."""
    options = [
        click.option("--out", type=click.Path(), default=None, help="Store path (overrides store.path)."),
        click.option("--scheduler", default=None, help="Dask scheduler address (overrides cluster.address)."),
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help=f"Override a config key, e.g. {example}."),
        click.option("--overwrite", is_flag=True, help="Replace an existing store instead of resuming it."),
        click.option("--no-progress", is_flag=True, help="Do not show the progress bar."),
        click.option("--performance-report", "performance_report", type=click.Path(dir_okay=False), default=None,
                     metavar="PATH", help="Write Dask's performance report of the job (an HTML file: task stream, "
                     "bandwidth, logs), e.g. to share it or to look at it after an embedded cluster's "
                     "dashboard has closed."),
    ]

    def deco(func):
        for option in reversed(options):
            func = option(func)
        return func

    return deco


def _overrides(overrides, scheduler, overwrite, no_progress) -> list[str]:
    """``--set`` values plus the config keys that the shortcut options stand for (after them, so they win). A
    ``--set`` of a boolean key that a shortcut also sets is still checked: the shortcut must not hide a bad value."""
    from gcc_dask.config.loading import _parse_value  # what --set does with the value
    from gcc_dask.errors import ConfigError

    shortcuts = {"store.overwrite": overwrite, "run.progress": no_progress}
    for item in overrides:
        key, _, value = item.partition("=")
        if shortcuts.get(key.strip()) and not isinstance(_parse_value(value), bool):
            raise ConfigError(f"{key.strip()}: got {value.strip()!r}; expected true or false")
    out = list(overrides)
    if scheduler:
        out.append(f"cluster.address={scheduler}")
    if overwrite:
        out.append("store.overwrite=true")
    if no_progress:
        out.append("run.progress=false")
    return out


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gcc-dask")
def main() -> None:
    """General coded computing (GCC) on Dask: straggler-robust batch evaluation."""


@main.command()
@click.argument("pipeline", type=click.Path(dir_okay=False))
@_job_options("code.num_workers=24")
@_user_errors
def run(pipeline, out, scheduler, overrides, overwrite, no_progress, performance_report) -> None:
    """Run PIPELINE (a YAML file) and print the per-scheme summary."""
    from gcc_dask.config import load_config

    # the file read and checked before the run's imports (Dask, Zarr, pandas: seconds): a bad file or key is
    # one line at once
    cfg = load_config(pipeline, overrides=_overrides(overrides, scheduler, overwrite, no_progress))
    from gcc_dask.analysis.summary import format_summary
    from gcc_dask.phases import format_phases
    from gcc_dask.pipeline import run_pipeline

    result = run_pipeline(cfg, out=out, echo=click.echo,
                          performance_report=performance_report)
    click.echo(f"\nstore: {result.path}  ({result.status})")
    click.echo(format_phases(result.phases_s))
    with warnings.catch_warnings():  # the table says the same under it
        warnings.simplefilter("ignore", PoorEstimatesWarning)
        summary = result.summary
    click.echo(format_summary(summary))


@main.command()
@click.argument("sweep_file", metavar="SWEEP.yaml", type=click.Path(dir_okay=False))
@_job_options("trials=20")
@_user_errors
def sweep(sweep_file, out, scheduler, overrides, overwrite, no_progress, performance_report) -> None:
    """Run an accuracy/rate sweep (schemes x N x S|p x trials) and print the fitted rates; or, for a file
    with ``kind: frontier``, every estimator at equal cost on every group, and print its cells."""
    from gcc_dask.sweep import run_sweep

    overrides = _overrides(overrides, scheduler, overwrite, no_progress)
    if _is_frontier_file(sweep_file):
        from gcc_dask.analysis.frontier_report import cells_markdown
        from gcc_dask.frontier import run_frontier

        result = run_frontier(sweep_file, out=out, overrides=overrides, echo=click.echo,
                              performance_report=performance_report)
        click.echo(f"\nstore: {result.path}  ({result.status}, {result.wall_s:.1f} s)")
        for pattern in result.cells["pattern"].unique():
            click.echo(f"\n{pattern} stragglers:\n" + cells_markdown(result.cells, pattern))
        click.echo(f"report: gcc-dask report {result.path}")
        return
    result = run_sweep(sweep_file, out=out, overrides=overrides, echo=click.echo,
                       performance_report=performance_report)
    click.echo(f"\nstore: {result.path}  ({result.status}, {result.wall_s:.1f} s)")
    if not result.rates.empty:
        cols = [c for c in ("scheme", "num_inputs", "S", "p", "slope", "ci_low", "ci_high", "mse_at_N_min",
                            "mse_at_N_max") if c in result.rates]
        click.echo(result.rates[cols].to_markdown(index=False, floatfmt=".3g"))
    elif not result.summary.empty:
        cols = [c for c in ("scheme", "num_inputs", "num_workers", "S", "p", "mse_mean", "rmse_mean",
                            "rel_acc_mean", "accuracy_mean", "rel_rmse_mean", "r2_mean", "max_abs_err_mean")
                if c in result.summary]
        click.echo(result.summary[cols].to_markdown(index=False, floatfmt=".4g"))
    click.echo(f"report: gcc-dask report {result.path}")


@main.command()
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option("--samples", type=int, default=2000, show_default=True,
              help="Seeded sample of the dataset that is composed into groups and measured.")
@click.option("--target-relacc", "target", type=float, default=None,
              help="Recommend the fewest workers whose estimator reaches this RelAcc.")
@click.option("--max-redundancy", type=float, default=None,
              help="Largest N/K to consider (default: the pipeline's N/K, or 2 with a target).")
@click.option("--stragglers", default=None, metavar="S|p",
              help="S (an integer below K) or p (a number in (0, 1)); default the pipeline's cutoff.stragglers.")
@click.option("--margin", type=float, default=None,
              help="RelAcc a code must gain over copying at its N, beyond 2 SE (default advise.margin, 0.003).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Directory of the advice (default runs/<name>-advice): advice.md, .csv, .png, .zarr.")
@click.option("--scheduler", default=None, help="Dask scheduler address (overrides cluster.address).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a pipeline key.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@_user_errors
def advise(pipeline, samples, target, max_redundancy, stragglers, margin, out, scheduler, overrides,
           no_progress) -> None:
    """Measure every estimator on a sample of PIPELINE's data and model; recommend scheme, N and fill."""
    from gcc_dask.frontier.advise import advise as run_advice

    # the user's own --set lines go into the command that applies the advice (all but schemes, which it sets)
    kept = [f"--set {shlex.quote(o)}" for o in overrides if o.partition("=")[0].strip() != "schemes"]
    overrides = _overrides(overrides, scheduler, False, no_progress)
    value = None
    if stragglers is not None:
        try:
            value = int(stragglers) if stragglers.strip().lstrip("+").isdigit() else float(stragglers)
        except ValueError:
            from gcc_dask.errors import ConfigError

            raise ConfigError(f"--stragglers: got {stragglers!r}; expected S (an integer) or p (a number in "
                              "(0, 1))") from None
    adv = run_advice(pipeline, samples=samples, target=target, max_redundancy=max_redundancy, stragglers=value,
                     out=out, overrides=overrides, echo=click.echo, progress=not no_progress, margin=margin)
    cols = [c for c in ("estimator", "N", "ratio", "value", "se", "rel_rmse", "decodable", "vs_best", "vs_best_se",
                        "worst", "worst_se") if c in adv.table and (c != "decodable" or adv.metric == "mse")]
    click.echo("\n" + adv.table[cols].rename(columns={"value": adv.metric, "ratio": "N/K"})
               .to_markdown(index=False, floatfmt=".4f"))
    own_store = any(o.partition("=")[0].strip() == "store.path" for o in overrides)  # the user's store stays
    lines = [line for line in adv.set_lines if not (own_store and line.startswith("--set store.path="))
             and line not in kept]  # the user's own --set cutoff.stragglers=S, said once
    click.echo(f"\n{adv.text}\napply it with:\n  gcc-dask run {pipeline} " + " ".join([*kept, *lines]))
    click.echo(f"advice: {adv.files[0]}  ({adv.wall_s:.0f} s)")


def _is_frontier_file(path: str) -> bool:
    """True for a YAML file whose top level says ``kind: frontier`` (read with a safe loader; anything
    unreadable is left for the sweep loader to report)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and data.get("kind") == "frontier"


@main.command()
@click.argument("store", type=click.Path())  # a missing store: one StoreError line, as every command says it
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Output directory (default: <store>-report next to the store).")
@click.option("--no-recompute", is_flag=True,
              help="Run stores: do not re-evaluate f offline for the accuracy-deadline curve.")
@_user_errors
def report(store, out, no_recompute) -> None:
    """Write Markdown/CSV tables and PNG figures for a run store or a sweep STORE."""
    from gcc_dask._paths import writable_dir
    from gcc_dask.analysis.report import make_report

    if out is not None:
        writable_dir("--out", out)  # refused now, not after the figures are drawn
    rep = make_report(store, out, recompute=False if no_recompute else "auto")
    click.echo(f"report: {rep.out_dir / 'report.md'}")
    for path in rep.files[1:]:
        click.echo(f"  {path.relative_to(rep.out_dir)}")
    if rep.left_out:
        click.echo(f"note: {rep.left_out}")


@main.command()
@click.argument("which", type=click.Choice(["coding", "pipeline"]))
@click.option("--out", type=click.Path(file_okay=False), default="bench", show_default=True,
              help="Directory for the Markdown report and the CSV files.")
@click.option("--quick", is_flag=True, help="Small sizes, a few seconds (for tests): not representative.")
@click.option("--gpu/--no-gpu", default=None,
              help="coding: also benchmark CuPy (default: when a GPU is usable; --gpu requires one).")
@click.option("--section", "sections", multiple=True,
              type=click.Choice(["throughput", "scale", "tail", "stragglers", "orchestration", "scaling", "memory",
                                 "checksums", "cheap", "mainjob", "page"]),  # bench.pipeline.SECTIONS (a test checks)
              help="pipeline: run only these sections (repeatable; default all).")
@_user_errors
def bench(which, out, quick, gpu, sections) -> None:
    """Benchmark the coding kernels or the pipeline; ratios against baselines measured in the same run."""
    from gcc_dask._paths import writable_dir
    from gcc_dask.bench.report import write_report
    from gcc_dask.errors import ConfigError

    if which == "coding" and sections:
        raise ConfigError(f"--section: got {', '.join(sections)}; expected no --section with bench coding (the "
                          "sections are the pipeline bench's)")
    if which == "pipeline" and gpu is not None:
        raise ConfigError(f"--{'gpu' if gpu else 'no-gpu'}: got it with bench pipeline; expected it with bench "
                          "coding only (the pipeline bench uses the cluster's workers as they are)")
    writable_dir("--out", out)  # refused now, not once the bench has run
    command = "gcc-dask " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else f"gcc-dask bench {which}"
    if which == "coding":
        from gcc_dask.bench.coding import run_coding_bench

        result = run_coding_bench(quick=quick, gpu="auto" if gpu is None else gpu, echo=click.echo,
                                  command=command)
    else:
        from gcc_dask.bench.pipeline import SECTIONS, run_pipeline_bench

        result = run_pipeline_bench(quick=quick, sections=tuple(sections) or SECTIONS, echo=click.echo,
                                    command=command)
    paths = write_report(result, out)
    click.echo(f"\n{which} bench: {sum(t.passed for t in result.targets)} of {len(result.targets)} targets met "
               f"({result.wall_s:.0f} s)")
    for t in result.targets:
        click.echo(f"  [{'ok' if t.passed else 'MISS'}] {t.name}: {t.measured:.4g} {t.unit} ({t.op} {t.limit:g})")
    click.echo(f"report: {paths[0]}")


@main.command()
@click.option("--scheduler", default=None, help="Check this scheduler address instead of the default target.")
@_user_errors
def info(scheduler) -> None:
    """Print versions, GPU availability and the cluster a run would use."""
    from gcc_dask.info import collect_info

    for key, value in collect_info(scheduler).items():
        click.echo(f"{key:>18}: {value}")


if __name__ == "__main__":  # pragma: no cover
    main()
