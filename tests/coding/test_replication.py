"""Partial replication, fills (none, nearest, linear) and uncoded with a fill: exact where a copy arrived, the
documented fill elsewhere, as a linear decoder in any namespace."""

from __future__ import annotations

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.coding.replication import extra_positions, fill_weights
from gcc_dask.errors import ConfigError

K = 8


def _linear_batch(k: int = K) -> np.ndarray:
    """Inputs x_k = (k, 2k): f linear in them stays linear along the group's positions."""
    return np.arange(k, dtype=np.float64)[:, None] * np.array([[1.0, 2.0]])


@pytest.mark.parametrize(("n", "extra"), [(10, [0, 7]), (12, [0, 2, 5, 7]), (16, []), (20, [0, 2, 5, 7])])
def test_partial_replication_layout(n, extra):
    code = gd.make_code("replication", num_inputs=K, num_workers=n)
    full = (n // K) * K
    np.testing.assert_array_equal(code.holds[:full], np.arange(full) % K)  # full copies K apart
    np.testing.assert_array_equal(code.holds[full:], extra)  # the extra copies at the 'spread' positions
    np.testing.assert_array_equal(code.encoder_matrix.argmax(axis=1), code.holds)
    copies = np.bincount(code.holds, minlength=K)
    assert code.recovery_threshold == n - copies.min() + 1


@pytest.mark.parametrize("n", [10, 12])
def test_partial_replication_decodes_exactly_what_arrived_and_fills_the_rest(n):
    """Every input with a copy in F is exact (f linear or not); a lost one gets the linear interpolation of its
    received neighbours along the group's positions (exact for f linear along the group), or the nearest received
    one beyond the last at either end."""
    code = gd.make_code("replication", num_inputs=K, num_workers=n, fill="linear")
    X = _linear_batch()
    rng = np.random.default_rng(n)
    for _ in range(50):
        received = np.sort(rng.choice(n, size=n - 3, replace=False))
        Y = np.sin(code.encode(X))[received]
        est = code.decode(Y, received)
        have = np.zeros(K, bool)
        have[code.holds[received]] = True
        np.testing.assert_allclose(est[have], np.sin(X[have]))  # exact where a copy arrived
        np.testing.assert_array_equal(code.filled(received), ~have)
        lin = code.decode(3.0 * code.encode(X)[received] + 1.0, received)  # f(x) = 3x + 1: linear
        got = np.flatnonzero(have)
        inner = (np.arange(K) > got.min()) & (np.arange(K) < got.max())
        np.testing.assert_allclose(lin[inner], 3.0 * X[inner] + 1.0)  # exact between received neighbours
        for k in np.flatnonzero(np.arange(K) < got.min()):
            np.testing.assert_allclose(lin[k], 3.0 * X[got.min()] + 1.0)  # beyond an end: the nearest one
        for k in np.flatnonzero(np.arange(K) > got.max()):
            np.testing.assert_allclose(lin[k], 3.0 * X[got.max()] + 1.0)
        np.testing.assert_allclose(code.decoder_matrix(received) @ Y, est)  # a linear decoder D_F


def test_nearest_fill_takes_the_closer_position_and_the_lower_one_on_a_tie():
    code = gd.make_code("uncoded", num_inputs=K, num_workers=K, fill="nearest")
    received = np.array([0, 4, 7])  # lost: 1, 2, 3 (between 0 and 4), 5, 6 (between 4 and 7)
    est = code.decode(np.arange(3, dtype=float)[:, None] + 10.0, received).ravel()
    # 1 -> 0; 2 -> tie between 0 and 4 -> 0 (the lower); 3 -> 4; 5 -> 4; 6 -> 7
    np.testing.assert_array_equal(est, [10, 10, 10, 11, 11, 11, 12, 12])


def test_linear_fill_weights_follow_positions():
    lost, (a, b), w = fill_weights("linear", np.array([True, False, False, True, False]), 5)
    np.testing.assert_array_equal(lost, [1, 2, 4])
    np.testing.assert_array_equal(a, [0, 0, 3])
    np.testing.assert_array_equal(b, [3, 3, 3])
    np.testing.assert_allclose(w, [1 / 3, 2 / 3, 0.0])


def test_without_fill_a_lost_input_is_missing_and_not_filled():
    code = gd.make_code("replication", num_inputs=K, num_workers=12)
    received = np.array([0, 1, 2, 3, 8])  # worker 8 holds a second copy of position 0
    est = code.decode(np.ones((5, 2)), received)
    assert np.isnan(est[4:]).all() and np.isfinite(est[:4]).all()
    assert not code.filled(received).any() and code.decodable(received).tolist() == [True] * 4 + [False] * 4


def test_a_nan_stays_in_its_own_output_and_the_outputs_filled_from_it():
    code = gd.make_code("uncoded", num_inputs=4, num_workers=4, fill="linear", nan_policy="propagate")
    Y = np.array([[1.0], [np.nan], [3.0]])  # received positions 0, 2, 3: position 1 is filled from 0 and 2
    est = code.decode(Y, np.array([0, 2, 3])).ravel()
    assert est[0] == 1.0 and est[3] == 3.0
    assert np.isnan(est[1]) and np.isnan(est[2])  # 2's own result, and 1 filled from it


def test_linear_fill_in_the_array_api_namespace():
    import array_api_strict as xps

    code = gd.make_code("replication", num_inputs=K, num_workers=10, fill="linear")
    received = np.array([0, 3, 6, 9])
    Y = np.random.default_rng(0).random((4, 3))
    out = code.decode(xps.asarray(Y), received)
    np.testing.assert_allclose(np.asarray(out), code.decode(Y, received))


@pytest.mark.parametrize(("rule", "count", "expected"), [
    ("spread", 1, [0]), ("spread", 2, [0, 7]), ("spread", 3, [0, 4, 7]), ("spread", 4, [0, 2, 5, 7]),
    ("ends", 3, [0, 1, 7]), ("ends", 4, [0, 1, 6, 7]), ([3, 5], 2, [3, 5]),
])
def test_extra_positions(rule, count, expected):
    np.testing.assert_array_equal(extra_positions(rule, K, count), expected)


@pytest.mark.parametrize("rule", [[0, 0], [9, 1], [1], "middle"])
def test_bad_extra_positions_are_one_line(rule):
    with pytest.raises(ConfigError, match="extra"):
        gd.make_code("replication", num_inputs=K, num_workers=10, extra=rule)


def test_params_rebuild_the_scheme():
    code = gd.make_code("replication", num_inputs=K, num_workers=10, fill="linear", extra="ends")
    again = gd.make_code("replication", **code.params)
    np.testing.assert_array_equal(again.holds, code.holds)
    assert again.fill == "linear" and "extra" in code.params
    assert "extra" not in gd.make_code("replication", num_inputs=K, num_workers=16).params
