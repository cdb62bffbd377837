"""Rate fits and reference lines on data with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from gcc_dask.analysis.rates import (
    dominance,
    fit_rate,
    rate_table,
    reference_bernoulli,
    reference_worst_case,
)
from gcc_dask.analysis.stores import open_sweep
from gcc_dask.errors import InvalidInputError

N = np.array([41, 81, 161, 321, 641])


def test_exact_power_law_gives_its_slope_and_a_degenerate_interval():
    mse = np.repeat((3.0 * N**-3.0)[:, None], 8, axis=1)
    fit = fit_rate(N, mse)
    assert fit.slope == pytest.approx(-3.0, abs=1e-12)
    assert np.exp(fit.intercept) == pytest.approx(3.0, rel=1e-10)
    assert fit.ci_low == pytest.approx(-3.0, abs=1e-9) and fit.ci_high == pytest.approx(-3.0, abs=1e-9)
    assert fit.predict(N) == pytest.approx(3.0 * N**-3.0, rel=1e-10)
    assert fit.n_points == 5 and "−3.0" in fit.label()


def test_noisy_trials_interval_covers_the_true_slope():
    rng = np.random.default_rng(1)
    mse = (N**-6.0)[:, None] * rng.lognormal(0.0, 0.5, size=(N.size, 50))
    fit = fit_rate(N, mse, n_boot=500, seed=3)
    assert fit.ci_low < -6.0 < fit.ci_high
    assert fit.ci_high - fit.ci_low < 0.5
    assert fit_rate(N, mse, n_boot=500, seed=3) == fit  # seeded


def test_means_only_uses_a_point_bootstrap():
    fit = fit_rate(N, 2.0 * N**-4.0)
    assert fit.slope == pytest.approx(-4.0) and fit.ci_low == pytest.approx(-4.0)


def test_nan_trials_are_ignored_and_too_few_points_give_nan():
    mse = np.repeat((N**-3.0)[:, None], 4, axis=1)
    mse[0, :2] = np.nan  # undecodable trials
    assert fit_rate(N, mse).slope == pytest.approx(-3.0)
    exact = np.zeros((N.size, 3))  # an exact scheme: log of zero is not a rate
    assert np.isnan(fit_rate(N, exact).slope)
    assert np.isnan(fit_rate(N[:1], N[:1] ** -3.0).slope)


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    ((N, np.ones(3)), {}, "mse: got shape"),
    ((np.array([0, 1]), np.ones(2)), {}, "num_workers"),
    ((N, N**-3.0), {"confidence": 1.5}, "confidence"),
], ids=["shape-mismatch", "non-positive-N", "bad-confidence"])
def test_fit_rate_rejects(args, kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        fit_rate(*args, **kwargs)


def test_reference_lines_have_the_bound_shape_through_the_anchor():
    w = reference_worst_case(N, 4, anchor=(41, 0.7))
    assert w[0] == pytest.approx(0.7)
    assert fit_rate(N, w).slope == pytest.approx(-3.0)
    # S enters as S³: the constant is the anchor's, so a larger S only rescales c
    assert reference_worst_case(82, 2, anchor=(41, 1.0)) == pytest.approx(1 / 8)
    b = reference_bernoulli(N, 0.1, anchor=(41, 1.0))
    expected = (np.log(N) / np.log(10)) ** 3 * N**-3.0
    assert b == pytest.approx(expected / expected[0])
    with pytest.raises(InvalidInputError, match="p: got"):
        reference_bernoulli(N, 0.0, anchor=(41, 1.0))


def test_rate_table_on_a_store_with_mse_c_n_minus_3(power_law_store):
    ds = open_sweep(power_law_store)
    table = rate_table(ds, n_boot=200).set_index(["scheme", "S"])
    assert table.loc[("gcc", 1), "slope"] == pytest.approx(-3.0)
    assert table.loc[("gcc", 2), "slope"] == pytest.approx(-3.0)
    assert table.loc[("bacc", 2), "slope"] == pytest.approx(-1.0)
    assert table.loc[("gcc", 2), "mse_at_N_min"] == pytest.approx(0.5 * 8 * 40**-3.0)
    assert (table["n_points"] == 4).all()


def test_dominance_on_a_known_store(power_law_store):
    dom = dominance(open_sweep(power_law_store), "gcc", "bacc").set_index("S")
    assert dom["below_at_every_N"].all() and dom["decreasing"].all()
    assert dom.loc[2, "worst_ratio"] == pytest.approx((0.5 * 8 * 40**-3.0) / (2 / 40))
