"""Validated pipeline configuration: YAML in, frozen pydantic models out, one clear line per error.

The sections (every key is listed in docs/configuration.rst)::

    name, source, workload, code, schemes, gcc, lcc, replication, uncoded, stragglers, cutoff, cluster, store, run

:func:`load_config` reads a YAML file (or takes a mapping), applies ``--set key.sub=value`` overrides and
validates. Every problem becomes one :class:`~gcc_dask.errors.ConfigError` line of the form
``"<key.path>: got <value!r>; expected <what is valid>"``. Durations accept ``"50ms"``/``"2s"`` strings
or numbers of seconds up to one day (:func:`gcc_dask.limits.parse_seconds`), stored as float seconds.

Modules, imported one way: :mod:`.fields` (scheme names, error lines, durations, the base section) ←
``config.data``, ``config.coding``, ``config.stragglers``, ``config.execution`` (one model per section) ←
:mod:`.sections` (:class:`PipelineConfig`, which holds them all) ← :mod:`.loading` (YAML, overrides, paths,
:func:`load_config`). None imports :mod:`gcc_dask.coding` or anything heavy: the scheme
names are a static tuple (a test keeps it equal to ``gcc_dask.coding.list_codes()``).
"""

from .fields import CODED_SCHEMES, FINGERPRINT_IGNORED, SCHEMES, parse_duration
from .loading import load_config
from .sections import (
    AdviseConfig,
    ClusterConfig,
    CodeConfig,
    CutoffConfig,
    GccConfig,
    LccConfig,
    PipelineConfig,
    ReplicationConfig,
    RunConfig,
    SchemeEntry,
    SourceConfig,
    StoreConfig,
    StragglersConfig,
    UncodedConfig,
    WorkloadConfig,
)

__all__ = [
    "FINGERPRINT_IGNORED",
    "SCHEMES",
    "CODED_SCHEMES",
    "PipelineConfig",
    "load_config",
    "parse_duration",
    # the section models, for code that builds or checks one section (e.g. gcc_dask.sweep_config)
    "AdviseConfig",
    "SourceConfig",
    "WorkloadConfig",
    "CodeConfig",
    "GccConfig",
    "LccConfig",
    "ReplicationConfig",
    "UncodedConfig",
    "SchemeEntry",
    "StragglersConfig",
    "CutoffConfig",
    "ClusterConfig",
    "StoreConfig",
    "RunConfig",
]
