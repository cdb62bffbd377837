"""The keys of a run's tasks (gcc_dask.runtime.keys), as plain strings: no cluster."""

from __future__ import annotations

import doctest

import pytest

from gcc_dask.dashboard.state import _copy_kind, parse_shard_key
from gcc_dask.runtime import keys
from gcc_dask.runtime.keys import (BACKUP, PROMOTED, attempt_suffix, decode_key, inputs_key, rescue_suffix,
                                   restart_suffix, score_key, shard_key)


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(keys).failed == 0


@pytest.mark.parametrize(("restart", "copy", "kind"), [
    ("", "", "regular"), (restart_suffix(2), "", "regular"), ("", BACKUP, "backup"),
    (restart_suffix(1), BACKUP, "backup"), ("", PROMOTED, "spare"), ("", rescue_suffix(3), "rescue"),
    (restart_suffix(1), rescue_suffix(1), "rescue"),
], ids=["regular", "restarted", "backup", "restarted-backup", "promoted", "rescue", "restarted-rescue"])
def test_a_shard_key_is_read_back_by_the_run_page(restart, copy, kind):
    key = shard_key(12, 5, "my-gcc", "tok3n", restart, copy)
    assert parse_shard_key(key, ["gcc", "my-gcc"]) == (12, 5, "my-gcc", restart + copy, "tok3n")
    assert _copy_kind(restart + copy) == kind


def test_the_keys_of_a_batch_s_other_tasks_end_with_the_token_and_differ_per_submission():
    assert restart_suffix(0) == "" and restart_suffix(2) == "-r2"
    assert [attempt_suffix(r, a) for r, a in [(0, 0), (2, 0), (0, 1), (2, 1)]] == ["", "-r2", "-a1", "-r2-a1"]
    assert decode_key(4, "gcc", "t") == "decode-b4-gcc-t"
    assert decode_key(4, "gcc", "t", restarts=1, attempt=2) == "decode-b4-gcc-r1-a2-t"
    # a decode submitted with all its shards, and the decode of the kept ones after a shard failed it: two keys
    # (under one key the second met the first's error while the scheduler held it, and the batch failed)
    assert decode_key(4, "gcc", "t", direct=True) == "decode-b4-gcc-d-t" != decode_key(4, "gcc", "t")
    assert score_key(4, "bacc", "t", attempt=1) == "score-b4-bacc-a1-t"
    assert inputs_key("reference", 0, "t") == "reference-b0-t" and inputs_key("labels", 0, "t", 2) == "labels-b0-a2-t"
    every = {decode_key(1, "gcc", "t", r, a) for r in range(3) for a in range(3)}
    assert len(every) == 9  # a task submitted again never shares the old one's key
