"""A run's plan as pure functions (gcc_dask.runtime.plans): its clock and spares, and the latencies it injects."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from gcc_dask.runtime import plans
from gcc_dask.runtime.plans import clock_and_spares, draw_delays


class Model:
    """A stand-in latency model: shard n of batch b takes (seed + b + n) * work / 100 s."""

    def latencies(self, seed, batch, num_workers, work=1.0):
        return [(seed + batch + n) * work / 100 for n in range(num_workers)]


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(plans).failed == 0


@pytest.mark.parametrize(("model", "virtual", "spares", "expected"), [
    (Model(), True, "lazy", (True, False)),  # the virtual clock: every shard at its batch's priority
    (Model(), True, "eager", (True, False)),
    (Model(), False, "lazy", (False, True)),  # stragglers.clock: wall
    (None, True, "lazy", (False, True)),  # nothing injected: the wall clock
    (None, False, "eager", (False, False)),
], ids=["virtual", "virtual-eager", "wall-clock-asked", "no-model", "eager"])
def test_a_run_s_clock_and_spares(model, virtual, spares, expected):
    assert clock_and_spares(model, virtual, spares) == expected


def test_spares_other_than_lazy_or_eager_are_refused():
    with pytest.raises(ValueError, match=r"spares: got 'some'; expected 'lazy' or 'eager'"):
        clock_and_spares(None, True, "some")


def test_the_delays_are_the_model_s_draws_for_the_batch_as_floats_and_none_without_a_model():
    d = draw_delays(Model(), 1, 2, 4, work=2.0)
    assert d.dtype == np.float64 and d.tolist() == [0.06, 0.08, 0.1, 0.12]
    assert draw_delays(None, 1, 2, 4, 1.0) is None
