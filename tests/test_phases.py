"""Where a run's time goes: the phase timer on a simulated clock, and the phases a real run reports."""

from __future__ import annotations

import numpy as np
import pytest

from gcc_dask.phases import PhaseTimer


def test_phases_sum_on_a_simulated_clock():
    now = iter([0.0, 1.0, 3.0, 10.0, 10.5, 12.0])
    timer = PhaseTimer(clock=lambda: next(now))  # made at 0
    with timer("store"):  # 1 -> 3
        pass
    with timer("store"):  # 10 -> 10.5: summed with the first
        pass
    assert timer.seconds == {"store": pytest.approx(2.5)}
    assert timer.elapsed() == 12.0


def test_a_phase_that_raises_is_still_timed():
    now = iter([0.0, 1.0, 4.0])
    timer = PhaseTimer(clock=lambda: next(now))
    with pytest.raises(RuntimeError):
        with timer("probe"):
            raise RuntimeError("f failed")
    assert timer.seconds == {"probe": 3.0}


def _tanh(x):
    return np.tanh(x)


def test_a_run_reports_its_phases(client, tmp_path):
    import gcc_dask as gd

    X = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
    res = gd.coded_map(_tanh, X, schemes=("gcc",), client=client, out=tmp_path / "r.zarr")
    phases = res.run.phases_s
    assert {"probe", "digests", "store", "composition", "batches", "load_f", "first_batch", "finish", "total"} \
        <= set(phases)
    assert all(v >= 0 for v in phases.values())
    assert phases["first_batch"] + phases["load_f"] <= phases["batches"]
    parts = sum(v for k, v in phases.items() if k not in ("total", "first_batch", "load_f"))
    assert parts <= phases["total"]
    again = gd.coded_map(_tanh, X, schemes=("gcc",), client=client, out=tmp_path / "r.zarr")
    assert "batches" not in again.run.phases_s and "composition" not in again.run.phases_s  # all done: resumed


def test_the_time_line_names_the_phases_a_run_went_through():
    from gcc_dask.phases import format_phases

    line = format_phases({"connect": 0.001, "probe": 0.071, "store": 0.05, "composition": 12.4, "batches": 2.8,
                          "first_batch": 0.31, "finish": 0.02, "total": 15.4})
    assert line == ("time: 15.4 s in all: probe 0.071 s, store 0.05 s, composition 12 s, batches 2.8 s "
                    "(first batch 0.31 s), finish 0.02 s")
    # the seconds before the first batch that loading f on the workers took are named (a new user read "first batch
    # 5.1 s" beside a p99 batch latency of 3.6 s, and nothing said where the other 4 s went)
    line = format_phases({"batches": 9.2, "load_f": 4.04, "first_batch": 1.1, "total": 9.5})
    assert line == "time: 9.5 s in all: batches 9.2 s (f loaded on the workers 4 s, first batch 1.1 s)"
    assert format_phases({"batches": 2.0, "load_f": 0.001, "first_batch": 0.3, "total": 2.1}) == (
        "time: 2.1 s in all: batches 2 s (first batch 0.3 s)")
    assert format_phases({"store": 0.01, "total": 0.02}) == "time: 0.02 s in all: store 0.01 s"
    # schemes: [auto]'s advice first (a new user's 54 s run showed 3 s of parts without it)
    assert format_phases({"advice": 50.3, "batches": 2.0, "total": 54.2}) == ("time: 54.2 s in all: advice 50 s, "
                                                                            "batches 2 s")
    assert format_phases({}) == "time"
