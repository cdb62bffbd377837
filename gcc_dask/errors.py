"""The gcc-dask exception tree.

Every error a user can cause derives from :class:`GccDaskError`; the CLI turns these into one line on
stderr and exit status 2. Anything else is a bug and prints a traceback.
"""

from __future__ import annotations

__all__ = [
    "GccDaskError",
    "ConfigError",
    "NotEnoughResultsError",
    "InvalidInputError",
    "StoreError",
    "WriteRefusedError",
    "ClusterError",
    "SourceError",
    "WorkloadError",
    "Terminated",
    "PoorEstimatesWarning",
]


class GccDaskError(Exception):
    """Base class of every error a user of gcc-dask can cause."""


class ConfigError(GccDaskError, ValueError):
    """A configuration value (YAML key, CLI option or function argument) is invalid."""


class InvalidInputError(GccDaskError, ValueError):
    """Input data has the wrong shape or dtype, or holds NaN/Inf where the policy forbids it."""


class NotEnoughResultsError(GccDaskError, ValueError):
    """Fewer worker results arrived than the coding scheme needs to decode (``min_received``)."""


class StoreError(GccDaskError):
    """The results store cannot be created, reached, resumed or read."""


class WriteRefusedError(StoreError):
    """A write to a run store was refused, and nothing was written: the store is gone (removed or moved while
    the run wrote it), or it carries another run's token (``--overwrite`` replaced it, or a resume took it over;
    docs/store.rst, section 'Integrity'). The task of a run whose driver is gone drops such a write quietly."""


class ClusterError(GccDaskError):
    """The Dask cluster cannot be reached or started."""


class SourceError(GccDaskError):
    """A dataset cannot be found or read."""


class WorkloadError(GccDaskError):
    """A workload (the function f) cannot be loaded or does not fit the data."""


class Terminated(KeyboardInterrupt):
    """The process was asked to stop with SIGTERM (what SLURM, Kubernetes and systemd send first).

    A :class:`KeyboardInterrupt`, so that everything that handles Ctrl-C handles it the same way: the run
    stops, the store is marked ``interrupted`` and the cluster is closed; the CLI exits with status 143
    (128 + 15) instead of 130 (docs/cli.rst, section 'Exit status').
    """


class PoorEstimatesWarning(RuntimeWarning):
    """A run's summary flags a scheme's estimates as poor (its ``poor`` column; docs/concepts.rst, section 'When
    estimates are poor'). Given once per run result, when its ``summary`` is first read; the CLI prints the same
    words as a line under its table instead."""
