"""Benchmarks behind ``gcc-dask bench {coding,pipeline}`` (figures in BENCHMARKS.md).

* :func:`gcc_dask.bench.coding.run_coding_bench`: encode/decode apply against a bare matmul, decoder
  build (cold) and lookup (cached), NumPy and CuPy.
* :func:`gcc_dask.bench.pipeline.run_pipeline_bench`: end-to-end latency and RelAcc under injected
  straggling against uncoded and replication, orchestration cost against Dask's own floor, scaling,
  and peak memory while a streamed Zarr dataset grows.
* :func:`gcc_dask.bench.report.write_report`: Markdown plus CSV, with machine facts and versions.

Importing this package is cheap; each bench imports what it needs when it runs.
"""

from __future__ import annotations

from gcc_dask.bench.report import BenchReport, Table, Target, machine_info, to_markdown, write_report

__all__ = ["BenchReport", "Table", "Target", "machine_info", "to_markdown", "write_report"]
