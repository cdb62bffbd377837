"""Offline analysis of gcc-dask stores: metrics, rate fits, accuracy against deadline, plots, reports.

Reads stores only (never the runtime). The main entry points, importable from here lazily (nothing heavy
is imported until used)::

    from gcc_dask.analysis import open_sweep, sweep_table, rate_table, make_report
    ds = open_sweep("runs/rate_worst_case.zarr")      # xarray.Dataset (scheme, num_inputs, num_workers, S|p, trial)
    rate_table(ds)                                      # slopes of log MSE on log N with bootstrap intervals
    make_report("runs/rate_worst_case.zarr")            # Markdown + CSV + PNG next to the store
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = [
    "comparison_table",
    "deadline_curve",
    "dominance",
    "fit_rate",
    "latency_cdf",
    "latency_table",
    "make_report",
    "open_sweep",
    "rate_table",
    "run_table",
    "store_kind",
    "summarize_run",
    "sweep_table",
]

_LAZY = {
    "comparison_table": "metrics", "run_table": "metrics", "sweep_table": "metrics",
    "dominance": "rates", "fit_rate": "rates", "rate_table": "rates",
    "deadline_curve": "deadline", "latency_cdf": "deadline", "latency_table": "deadline",
    "make_report": "report", "open_sweep": "stores", "store_kind": "stores", "summarize_run": "summary",
}


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'gcc_dask.analysis' has no attribute {name!r}") from None
    return getattr(import_module(f"gcc_dask.analysis.{module}"), name)
