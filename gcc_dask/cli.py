"""The ``gcc-dask`` command line.

Errors a user can cause (:class:`gcc_dask.errors.GccDaskError`) print one line on stderr and exit with
status 2; anything else is a bug and prints a traceback.
"""

from __future__ import annotations

import functools
import sys

import click

from gcc_dask.errors import GccDaskError


def _user_errors(func):
    """Turn GccDaskError into one line and exit status 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except GccDaskError as e:
            click.echo(f"gcc-dask: error: {e}", err=True)
            sys.exit(2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gcc-dask")
def main() -> None:
    """General coded computing (GCC) on Dask: straggler-robust batch evaluation."""


@main.command()
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(), default=None, help="Store path (overrides store.path).")
@click.option("--scheduler", default=None, help="Dask scheduler address (overrides cluster.address).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key, e.g. code.num_workers=24.")
@click.option("--overwrite", is_flag=True, help="Replace an existing store instead of resuming it.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@_user_errors
def run(pipeline, out, scheduler, overrides, overwrite, no_progress) -> None:
    """Run PIPELINE (a YAML file) and print the per-scheme summary."""
    from gcc_dask.analysis.summary import format_summary
    from gcc_dask.pipeline import run_pipeline

    overrides = list(overrides)
    if scheduler:
        overrides.append(f"cluster.address={scheduler}")
    if overwrite:
        overrides.append("store.overwrite=true")
    if no_progress:
        overrides.append("run.progress=false")
    result = run_pipeline(pipeline, out=out, overrides=overrides, echo=click.echo)
    click.echo(f"\nstore: {result.path}  ({result.status})")
    click.echo(format_summary(result.summary))


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
