"""The summary says when a scheme's estimates are poor (issue 37, item 2; docs/concepts.rst, section 'When estimates
are poor'): from the reference when the run has one, else from gcc's leave-one-out estimate and the fills."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.analysis.summary import (POOR_DISAGREEMENT, POOR_EST_REL_RMSE, POOR_LOST, POOR_REL_RMSE,
                                       format_summary, poor_reason)
from gcc_dask.errors import PoorEstimatesWarning

RNG = np.random.default_rng(0)
W = (RNG.normal(size=32) / np.sqrt(32)).astype(np.float32)
IID = RNG.normal(size=(1024, 32)).astype(np.float32)  # no near neighbours: every group mixes unrelated rows
CENTERS = RNG.normal(size=(64, 32)).astype(np.float32)
NEAR = (CENTERS[RNG.integers(0, 64, 1024)] + 0.05 * RNG.normal(size=(1024, 32))).astype(np.float32)
STRAGGLERS = {"model": "shifted_exponential", "shift": 0.001, "scale": 0.002, "seed": 0}
# coded_map's default N = 16 shards a batch on process_client's 8 threads: the run says so (a RuntimeWarning) and
# its shards queue, which the contrasts tested here do not depend on; N = 8 (K = 4) would change them (gcc on the
# rows with near neighbours is then flagged too: relative RMSE 0.16, estimated 0.88)
SIXTEEN_ON_EIGHT = pytest.mark.filterwarnings("ignore:a batch has up to N = 16 shards:RuntimeWarning")


def smooth(x):
    return np.sin(3 * x @ W)[:, None].astype(np.float32)


def test_thresholds_and_reasons():
    assert (POOR_REL_RMSE, POOR_DISAGREEMENT, POOR_EST_REL_RMSE, POOR_LOST) == (0.1, 0.05, 0.5, 0.1)
    assert poor_reason({"rel_rmse": 0.12}, "regression", 100) == "relative RMSE 0.12 > 0.1"
    assert poor_reason({"rel_rmse": 0.08}, "regression", 100) == ""
    assert poor_reason({"rel_acc": 0.93}, "classifier", 100) == "RelAcc 0.93 < 0.95"
    assert poor_reason({"rel_acc": 0.97}, "classifier", 100) == ""
    assert poor_reason({"rel_rmse": np.nan, "est_rel_rmse": 0.8}, "regression", 100).startswith(
        "estimated relative error 0.8 > 0.5 (leave-one-out")
    assert poor_reason({"rel_rmse": 0.05, "est_rel_rmse": 0.8}, "regression", 100) == ""  # the truth wins
    assert poor_reason({"filled": 15, "missing": 0}, "regression", 100) == "15% of samples filled or missing > 10%"
    assert poor_reason({"filled": 5, "missing": 0}, "regression", 100) == ""
    # a value just beyond its limit shows the digits that make it so (it read "relative RMSE 0.1 > 0.1")
    assert poor_reason({"rel_rmse": 0.1004}, "regression", 100) == "relative RMSE 0.1004 > 0.1"
    assert poor_reason({"rel_acc": 0.9496}, "classifier", 100) == "RelAcc 0.9496 < 0.95"
    assert poor_reason({"rel_rmse": np.nan, "est_rel_rmse": 0.5001}, "regression", 100).startswith(
        "estimated relative error 0.5001 > 0.5")


@SIXTEEN_ON_EIGHT
def test_a_regressor_on_rows_without_near_neighbours_is_flagged(process_client):
    """i.i.d. rows in R³²: gcc's relative RMSE is far above 0.1, and the summary and the printed table say so;
    on rows with near neighbours the same f is not flagged."""
    res = gd.coded_map(smooth, IID, client=process_client, run={"reference": True}, stragglers=STRAGGLERS)
    with pytest.warns(PoorEstimatesWarning, match=r"^poor estimates: gcc: relative RMSE ") as said:
        poor = res.summary  # said from Python too: a selection of columns without 'poor' does not hide it
    assert len(said) == 1 and said[0].filename == __file__  # once, at the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res.summary  # read again: not said again
    assert poor.at["gcc", "rel_rmse"] > POOR_REL_RMSE
    assert poor.at["gcc", "poor"].startswith("relative RMSE ") and poor.attrs["poor"] == {"gcc": poor.at["gcc", "poor"]}
    assert "poor estimates: gcc: relative RMSE" in format_summary(poor)
    assert "rel_acc" not in poor.columns  # one output: never a RelAcc
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoorEstimatesWarning)
        good = gd.coded_map(smooth, NEAR, client=process_client, run={"reference": True},
                            stragglers=STRAGGLERS).summary
    assert good.at["gcc", "rel_rmse"] < POOR_REL_RMSE and good.at["gcc", "poor"] == "" and good.attrs["poor"] == {}
    assert "poor estimates" not in format_summary(good)


@SIXTEEN_ON_EIGHT
def test_without_a_reference_the_leave_one_out_estimate_flags_it(process_client):
    res = gd.coded_map(smooth, IID, client=process_client, stragglers=STRAGGLERS)  # coded_map: no reference
    with pytest.warns(PoorEstimatesWarning, match=r"^poor estimates: gcc: estimated relative error .*leave-one-out"):
        s = res.summary
    assert np.isnan(s.at["gcc", "rel_rmse"]) and s.at["gcc", "est_rel_rmse"] > POOR_EST_REL_RMSE
    assert s.at["gcc", "poor"].startswith("estimated relative error ")
    near = gd.coded_map(smooth, NEAR, client=process_client, stragglers=STRAGGLERS).summary
    assert near.at["gcc", "est_rel_rmse"] < POOR_EST_REL_RMSE and near.at["gcc", "poor"] == ""


@SIXTEEN_ON_EIGHT
@pytest.mark.parametrize("scheme", ["replication"])
def test_a_scheme_without_an_estimate_of_its_own_has_nan_est(process_client, scheme):
    s = gd.coded_map(smooth, NEAR, schemes=(scheme,), client=process_client, stragglers=STRAGGLERS).summary
    assert np.isnan(s.at[scheme, "est_rel_rmse"])


def test_errors_against_fs_spread_are_poor_even_when_f_is_far_from_zero():
    """√(1 − R²) beyond 0.1 flags a regression whose relative RMSE is small only because f is far from 0; an f
    whose R² is high is not flagged, and without a reference (R² NaN) nothing changes."""
    assert poor_reason({"rel_rmse": 0.004, "r2": 0.84}, "regression", 100) == (
        "errors 0.4 of f's spread about its mean > 0.1 (R² 0.84; the relative RMSE, 0.004, is small only because f "
        "is far from 0)")
    assert poor_reason({"rel_rmse": 0.004, "r2": 0.995}, "regression", 100) == ""
    assert poor_reason({"rel_rmse": 0.004, "r2": np.nan}, "regression", 100) == ""
    assert poor_reason({"rel_rmse": 0.5, "r2": 0.0}, "regression", 100) == "relative RMSE 0.5 > 0.1"  # the first


def offset(x):
    return (100.0 + np.sin(3 * x @ W))[:, None].astype(np.float32)


@SIXTEEN_ON_EIGHT
def test_an_f_far_from_zero_on_rows_without_near_neighbours_is_flagged(process_client):
    """The i.i.d. rows of the first test through the same f plus 100: the relative RMSE falls under 0.1, the errors
    do not, and the summary says so; on rows with near neighbours it stays unflagged."""
    res = gd.coded_map(offset, IID, client=process_client, run={"reference": True}, stragglers=STRAGGLERS)
    with pytest.warns(PoorEstimatesWarning, match=r"^poor estimates: gcc: errors .* of f's spread"):
        poor = res.summary
    assert poor.at["gcc", "rel_rmse"] < POOR_REL_RMSE and np.sqrt(1 - poor.at["gcc", "r2"]) > POOR_REL_RMSE
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoorEstimatesWarning)
        good = gd.coded_map(offset, NEAR, client=process_client, run={"reference": True},
                            stragglers=STRAGGLERS).summary
    assert good.at["gcc", "poor"] == "", good.loc["gcc", ["rel_rmse", "r2"]]


def test_the_poor_line_of_uncoded_points_to_uncoded_with_every_result_not_to_itself():
    """A breaker's find: uncoded at a cutoff, poor, was told that 'an exact scheme, speculative or uncoded, gives f
    itself': uncoded is what it ran. Its line now names the setting that makes it exact."""
    import pandas as pd

    from gcc_dask.analysis.summary import poor_line

    df = pd.DataFrame({"code": ["uncoded", "gcc"]}, index=["uncoded", "gcc"])
    unc, gcc = poor_line(df, "uncoded", "40% rows missing"), poor_line(df, "gcc", "RelAcc 0.4")
    assert unc.startswith("poor estimates: uncoded: 40% rows missing (uncoded with every result "
                          "(cutoff.stragglers: 0) or speculative gives f itself;")
    assert "an exact scheme, speculative or uncoded, gives f itself" in gcc
    assert "an exact scheme" not in unc
