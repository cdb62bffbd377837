"""The order in which the suite's files start (tests/conftest.py applies it to every run)."""

from __future__ import annotations

#: the test files that take longest (seconds of one xdist worker: clusters, CLI runs, the quick benchmarks),
#: longest first. pytest-xdist hands files to its workers in collection order (tests/conftest.py's
#: ``pytest_configure`` turns off its ``--loadscope-reorder``, which hands out first the files with the most
#: tests, most of them quick): started first, the long files end while the other worker still has short ones to
#: run, and the two workers finish together (longest processing time first). Every other file follows, in
#: collection order. Idle, 2 workers: 600 to 610 s with the long files first, 684 to 693 s in xdist's order (2026-12-07; 538 s
#: since, with the quick benches and the stores' reads made cheaper).
LONGEST_FIRST = (  # (seconds, idle, 2 workers, 2026-12-07)
    "tests/test_bench.py",  # 141
    "tests/reliability/test_integrity.py",  # 114
    "tests/reliability/test_cluster_faults.py",  # 91
    "tests/reliability/test_cutoff_promise.py",  # 60
    "tests/test_coded_map.py",  # 50
    "tests/test_advise.py",  # 47
    "tests/reliability/test_driver_crash.py",  # 45
    "tests/test_cli.py",  # 44
    "tests/test_postfit.py",  # 43
    "tests/test_pipeline.py",  # 42
    "tests/reliability/test_stop_signals.py",  # 41
    "tests/test_notebooks.py",  # 37
    "tests/dashboard/test_run_page.py",  # 30
    "tests/analysis/test_report.py",  # 29
    "tests/runtime/test_speculation.py",  # 25
    "tests/test_store_integrity.py",  # 23
    "tests/reliability/test_worker_death.py",  # 22
    "tests/reliability/test_determinism.py",  # 18
    "tests/reliability/test_bad_input.py",  # 16
)


def longest_first(items) -> None:
    """Sort pytest items (in place) so that the files of :data:`LONGEST_FIRST` come first, in its order."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: each file's own order
