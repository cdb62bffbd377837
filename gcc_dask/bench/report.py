"""Benchmark reports: tables, targets and machine facts, written as Markdown plus one CSV per table.

A :class:`BenchReport` is what :func:`gcc_dask.bench.coding.run_coding_bench` and
:func:`gcc_dask.bench.pipeline.run_pipeline_bench` return. :func:`write_report` writes, for a bench named
``coding``::

    coding.md               the tables, the targets (measured against limit, pass/fail), the machine
    coding_<table>.csv      one per table, the raw figures
    coding_targets.csv      name, measured, op, limit, unit, passed, detail
    coding_machine.csv      key, value: CPU, cores, memory, BLAS kernel, versions, environment
    coding_<figure>.png     one per figure, when the bench draws any (the pipeline bench's ``tail``)

Every figure that is compared with a target is a ratio or a quantity measured in the same process and
run as its baseline, so the machine's speed cancels out of the verdict as far as it can.
"""

from __future__ import annotations

import csv
import math
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BenchReport", "Table", "Target", "blas_info", "machine_info", "to_markdown", "write_report"]

#: environment variables that change how fast the BLAS runs (recorded in every report)
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS")


@dataclass
class Table:
    """One table of a report: ``rows`` are dicts with the same keys (the columns, in order)."""

    name: str
    title: str
    rows: list[dict[str, Any]]
    notes: str = ""

    @property
    def columns(self) -> list[str]:
        cols: dict[str, None] = {}
        for row in self.rows:
            cols.update(dict.fromkeys(row))
        return list(cols)


@dataclass
class Target:
    """A figure checked against a limit: ``measured op limit`` (op ``"<="`` or ``">="``)."""

    name: str
    measured: float
    limit: float
    op: str = "<="
    unit: str = ""
    detail: str = ""

    @property
    def passed(self) -> bool:
        if not math.isfinite(self.measured):
            return False
        return self.measured <= self.limit if self.op == "<=" else self.measured >= self.limit


@dataclass
class BenchReport:
    """The outcome of one bench run."""

    bench: str
    command: str
    quick: bool
    tables: list[Table]
    targets: list[Target]
    info: dict[str, str] = field(default_factory=dict)
    wall_s: float = math.nan
    notes: list[str] = field(default_factory=list)
    #: figures as PNG bytes, by name: written as ``<bench>_<name>.png`` and shown in the Markdown
    figures: dict[str, bytes] = field(default_factory=dict)

    def table(self, name: str) -> Table:
        """The table called ``name`` (KeyError if absent)."""
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)


# ------------------------------------------------------------------------------------------ machine
def blas_info() -> list[dict[str, Any]]:
    """The BLAS/OpenMP libraries NumPy loaded, with the kernel they run (``threadpoolctl``).

    ``architecture`` is the OpenBLAS kernel actually selected (e.g. ``Haswell``, ``Zen``, ``Prescott``
    when ``OPENBLAS_CORETYPE`` forces an old one). Empty when threadpoolctl is not installed.
    """
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn in the test extra
        return []
    import numpy  # noqa: F401  (loads its BLAS so that threadpoolctl can see it)

    keep = ("internal_api", "version", "architecture", "num_threads", "threading_layer", "filepath")
    return [{k: lib.get(k) for k in keep if k in lib} for lib in threadpool_info()]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or "unknown"


def machine_info(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Machine, BLAS kernel, relevant environment and package versions, as printable strings."""
    import psutil

    from gcc_dask.info import package_versions

    info = {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores (logical)": str(os.cpu_count()),
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "python": sys.version.split()[0],
    }
    for i, lib in enumerate(blas_info()):
        info[f"blas[{i}]"] = (f"{lib.get('internal_api')} {lib.get('version')} kernel="
                              f"{lib.get('architecture')} threads={lib.get('num_threads')}")
    for var in BLAS_ENV:
        info[f"env {var}"] = os.environ.get(var, "(unset)")
    for name, ver in package_versions().items():
        if name != "python":
            info[name] = ver
    info.update(extra or {})
    return info


# ------------------------------------------------------------------------------------------ writing
def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}"
    return str(value)


def _markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(report: BenchReport) -> str:
    """The report as Markdown: targets first, then every table, then the machine."""
    mode = " (quick mode: small sizes, figures are not representative)" if report.quick else ""
    out = [f"# gcc-dask bench {report.bench}{mode}", "",
           f"Command: `{report.command}`; wall time {report.wall_s:.1f} s.", ""]
    if report.targets:
        out += ["## Targets", "", _markdown_table(
            ["target", "measured", "limit", "passed", "detail"],
            [[t.name, f"{_fmt(t.measured)} {t.unit}".strip(), f"{t.op} {_fmt(t.limit)} {t.unit}".strip(),
              t.passed, t.detail] for t in report.targets]), ""]
    for table in report.tables:
        out += [f"## {table.title}", ""]
        if table.notes:
            out += [table.notes, ""]
        cols = table.columns
        out += [_markdown_table(cols, [[row.get(c, "") for c in cols] for row in table.rows]), ""]
    if report.figures:
        out += ["## Figures", ""] + [f"![{name}]({report.bench}_{name}.png)" for name in report.figures] + [""]
    if report.notes:
        out += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
    out += ["## Machine", "", _markdown_table(["key", "value"], [[k, v] for k, v in report.info.items()]), ""]
    return "\n".join(out)


def _write_csv(path: Path, columns: list[str], rows: list[list[Any]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(rows)


def write_report(report: BenchReport, out_dir: str | os.PathLike) -> list[Path]:
    """Write the Markdown report and the CSV files into ``out_dir`` (created); return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    b = report.bench
    md = out / f"{b}.md"
    md.write_text(to_markdown(report), encoding="utf-8")
    paths = [md]
    for table in report.tables:
        cols = table.columns
        path = out / f"{b}_{table.name}.csv"
        _write_csv(path, cols, [[row.get(c, "") for c in cols] for row in table.rows])
        paths.append(path)
    for name, png in report.figures.items():
        path = out / f"{b}_{name}.png"
        path.write_bytes(png)
        paths.append(path)
    path = out / f"{b}_targets.csv"
    _write_csv(path, ["target", "measured", "op", "limit", "unit", "passed", "detail"],
               [[t.name, t.measured, t.op, t.limit, t.unit, t.passed, t.detail] for t in report.targets])
    paths.append(path)
    path = out / f"{b}_machine.csv"
    _write_csv(path, ["key", "value"], [[k, v] for k, v in report.info.items()])
    paths.append(path)
    return paths
