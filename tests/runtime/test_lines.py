"""What a run says (gcc_dask.runtime.lines), from plain values: no cluster, nothing sleeps."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from gcc_dask.errors import ClusterError
from gcc_dask.runtime import lines
from gcc_dask.runtime.lines import (LOAD_SAY_S, bad_batch_text, failure_line, load_line, replaced_line, rerun_what,
                                    samples_text, worker_loss_line, workers_lost_error)
from gcc_dask.runtime.window import WorkerLoss


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(lines).failed == 0


def test_a_slow_load_of_f_is_said_with_its_time_a_quick_one_is_not():
    assert load_line(LOAD_SAY_S) is None and load_line(0.1) is None
    assert load_line(5.83) == "f loaded on the workers in 5.8 s, before the first batch (not in its latency)"


def test_the_lines_of_every_worker_gone_follow_the_steps_of_the_wait():
    loss, said = WorkerLoss(timeout=10.0), []
    for workers, now in [(2, 0.0), (0, 1.0), (0, 5.0), (3, 6.0), (0, 7.0), (0, 17.5)]:
        step = loss.step(workers, now)
        said.append("stop" if step == "stop" else worker_loss_line(step, workers, loss.timeout))
    assert said == [None, "every Dask worker is gone; waiting up to 10 s for workers to come back "
                    "(cluster.connect_timeout)", None, "3 Dask worker(s) back; the run goes on",
                    "every Dask worker is gone; waiting up to 10 s for workers to come back (cluster.connect_timeout)",
                    "stop"]
    err = workers_lost_error(2.5)
    assert isinstance(err, ClusterError) and "none came back within 2.5 s" in str(err) and "to resume" in str(err)


def test_a_replacement_of_every_worker_is_said_only_when_something_runs_again():
    assert replaced_line(0) is None
    assert replaced_line(3) == ("every Dask worker was replaced: 3 scheme batch(es) in flight run again on the new "
                                "workers")


@pytest.mark.parametrize(("samples", "text"), [
    (np.array([5]), "sample 5"),
    (np.arange(8, 12), "samples 8 to 11"),
    (np.array([4, 9, 2]), "samples 4, 9, 2"),
    (np.arange(0, 30, 3), "samples 0, 3, 6, 9, 12, 15, 18, 21, ... (10 in all)"),
], ids=["one", "contiguous", "scattered", "more-than-eight"])
def test_a_batch_s_samples_are_named_by_their_dataset_index(samples, text):
    assert samples_text(samples) == text


def test_a_bad_batch_names_its_samples_and_the_run_s_own_keyword():
    exc = ValueError("3 rows hold NaN; pass nan_policy='propagate' to decode them anyway")
    assert bad_batch_text(7, np.array([70, 71]), exc) == (
        "source: batch 7 (samples 70 to 71): 3 rows hold NaN; set run.nan_policy: propagate to decode them anyway")


def test_a_scheme_without_an_estimate_is_told_once():
    told: set[str] = set()
    first = failure_line("gcc", 3, "its decode failed: ValueError('shape')", told)
    assert first == ("gcc: batch 3 has no estimate: its decode failed: ValueError('shape') (its rows are NaN; the "
                     "summary counts such batches in undecodable, or in failed when its decode failed)")
    assert failure_line("gcc", 4, "again", told) is None  # later batches: the summary counts them
    assert failure_line("bacc", 4, "other", told) is not None and told == {"gcc", "bacc"}


def test_what_runs_again_for_a_quiet_worker_is_listed_by_batch():
    assert rerun_what([], {}) == []
    assert rerun_what([(10, "gcc"), (2, "")], {(3, "bacc"): ("state", "s", [1]), (1, "gcc"): ("state", "s", [0, 4])}) \
        == ["1 (gcc: 2 shards)", "10 (gcc)", "2 (inputs)", "3 (bacc: 1 shard)"]  # (sorted as text, as before)
