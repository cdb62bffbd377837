"""The suite's own schedule (tests/suite_order.py, applied by tests/conftest.py): the long files first, each a
file that exists."""

from __future__ import annotations

from pathlib import Path

from suite_order import LONGEST_FIRST, longest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_scheduled_first_exists_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [p for p in LONGEST_FIRST if not (ROOT / p).is_file()]
    assert not missing, f"renamed or removed: update LONGEST_FIRST in tests/suite_order.py: {missing}"


def test_long_files_come_first_and_each_file_keeps_its_order():
    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    names = ["tests/test_a.py::t1", f"{LONGEST_FIRST[1]}::x", "tests/test_a.py::t2", f"{LONGEST_FIRST[0]}::y",
             f"{LONGEST_FIRST[1]}::z"]
    items = [Item(n) for n in names]
    longest_first(items)
    assert [i.nodeid for i in items] == [f"{LONGEST_FIRST[0]}::y", f"{LONGEST_FIRST[1]}::x",
                                         f"{LONGEST_FIRST[1]}::z", "tests/test_a.py::t1", "tests/test_a.py::t2"]
