"""Point placements beyond chebyshev/equispaced: systematic, twins, explicit lists; replication's fill."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.coding.points import MIN_GAP, placement
from gcc_dask.errors import ConfigError

SIZES = [(8, 16), (8, 12), (5, 11), (16, 32), (7, 8), (1, 3)]


@pytest.mark.parametrize("kind", ["systematic", "twins"])
@pytest.mark.parametrize("k,n", SIZES, ids=[f"K{k}-N{n}" for k, n in SIZES])
def test_named_placements_are_valid_point_sets(kind, k, n):
    alpha, beta = placement(kind, k, n)
    assert alpha.shape == (k,) and beta.shape == (n,)
    assert (np.diff(beta) > 0).all() and np.abs(beta).max() <= 1.0
    if kind == "systematic":  # every data point is a worker point
        assert np.isin(alpha, beta).all()
    else:  # floor(N/K) workers within a quarter gap of each data point
        r = n // k
        gap = 0.25 * (np.min(np.diff(alpha)) if k > 1 else 1.0)
        near = (np.abs(beta[None, :] - alpha[:, None]) <= gap + 1e-12).sum(axis=1)
        assert (near >= r).all(), near


@pytest.mark.parametrize("kind", ["systematic", "twins"])
def test_intended_coincidences_do_not_warn(kind):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = gd.make_code("gcc", num_inputs=8, num_workers=16, points=kind)
    x = np.random.default_rng(0).uniform(-1, 1, size=(8, 3))
    y = np.sin(code.encode(x))
    np.testing.assert_allclose(code.decode(y, np.arange(16)), np.sin(x), atol=0.05)


def test_explicit_points_are_used_and_survive_pickling():
    beta = [-1.0, -0.3, 0.2, 1.0]
    code = gd.make_code("bacc", num_inputs=2, num_workers=4, points={"alpha": [-0.5, 0.5], "beta": beta})
    np.testing.assert_array_equal(code.worker_points, beta)
    np.testing.assert_array_equal(code.data_points, [-0.5, 0.5])
    again = pickle.loads(pickle.dumps(code))
    np.testing.assert_array_equal(again.encoder_matrix, code.encoder_matrix)


@pytest.mark.parametrize(("points", "match"), [
    ({"beta": [-1, 0.3, 0.3, 1]}, r"points.beta: worker points 1 and 2 \(0.3 and 0.3\) are not increasing"),
    ({"beta": [-1, 0.3, 0.3 + MIN_GAP / 2, 1]}, "worker points 1 and 2"),
    ({"beta": [-1, 0.5, 0.2, 1]}, "worker points 1 and 2"),
    ({"beta": [-1, 0.3, 1]}, "got 3 worker points; expected 4"),
    ({"alpha": [0.0, 2.0]}, r"points.alpha: data point 1 is 2.0; expected finite values in \[-1, 1\]"),
    ({"gamma": [0.0]}, "expected one of"),
    ("halton", "expected one of|must be one of"),
], ids=["equal", "closer-than-min-gap", "decreasing", "wrong-length", "outside", "unknown-key", "unknown-name"])
def test_bad_explicit_points_are_refused_with_the_pair_named(points, match):
    with pytest.raises(ConfigError, match=match):
        gd.make_code("gcc", num_inputs=2, num_workers=4, points=points)


def test_config_refuses_colliding_points_in_one_line():
    from gcc_dask.config import load_config

    with pytest.raises(ConfigError, match=r"^code.points: got .*worker points 1 and 2") as info:
        load_config("pipelines/smoke.yaml", ["code.points={beta: [-1, 0.1, 0.1]}", "code.num_workers=3",
                                             "code.num_inputs=2", "schemes=[gcc]"])
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------ replication's fill
def test_replication_fill_nearest_takes_the_nearest_received_input():
    code = gd.make_code("replication", num_inputs=4, num_workers=8, fill="nearest")
    received = np.array([0, 4, 1])  # copies of inputs 0, 0, 1: inputs 2 and 3 are lost
    y = np.array([[10.0], [10.5], [11.0]])
    np.testing.assert_array_equal(code.decode(y, received).ravel(), [10.0, 11.0, 11.0, 11.0])
    np.testing.assert_array_equal(code.filled(received), [False, False, True, True])
    assert code.decodable(received).all()


def test_replication_without_fill_leaves_lost_inputs_missing():
    code = gd.make_code("replication", num_inputs=4, num_workers=8)
    est = code.decode(np.array([[10.0], [11.0]]), np.array([0, 5]))
    assert np.isnan(est[2:]).all() and not code.filled(np.array([0, 5])).any()
    assert "fill" not in code.params  # the default leaves the stored parameters as before


# ---------------------------------------------------------------------------- blocks in any namespace
@pytest.mark.parametrize("name", ["gcc", "bacc", "replication", "uncoded"])
def test_block_encode_and_decode_in_any_namespace(xp, name):
    """A batch of G groups is encoded as one (K, G, *shape) array along K, in the data's own namespace (NumPy,
    array_api_strict, CuPy on a GPU), and equals encoding each group on its own."""
    from gcc_dask.composition import BatchLayout

    k, g = 4, 3
    n = {"uncoded": k}.get(name, 8)
    code = gd.make_code(name, num_inputs=k, num_workers=n)
    layout = BatchLayout(k * g, k, g)
    x = np.random.default_rng(0).uniform(-1, 1, size=(k * g, 2, 3)).astype(np.float32)
    blocks = layout.to_blocks(x)  # (K, G, 2, 3), a view
    coded = code.encode(xp.asarray(blocks))
    assert coded.shape == (n, g, 2, 3) and type(coded) is type(xp.asarray(blocks))
    host = np.asarray(coded) if xp is np else np.asarray(coded.get() if hasattr(coded, "get") else coded)
    for j in range(g):
        np.testing.assert_allclose(host[:, j], code.encode(blocks[:, j]), rtol=1e-6, atol=1e-6)
    received = np.arange(1, n)  # one straggler
    decoded = code.decode(xp.asarray(host[received]), received)
    assert decoded.shape == (k, g, 2, 3)
    dec = np.asarray(decoded.get() if hasattr(decoded, "get") else decoded)
    for j in range(g):  # each group decodes as on its own
        np.testing.assert_allclose(dec[:, j], code.decode(host[received, j], received), rtol=1e-5, atol=1e-6)
    assert BatchLayout.from_blocks(dec, k * g).shape == x.shape


def test_spread_order_of_a_large_code_is_a_permutation_with_the_systematic_workers_first():
    from gcc_dask.coding import make_code
    from gcc_dask.coding.points import spread_order

    code = make_code("gcc", num_inputs=64, num_workers=4096, points="systematic")
    order = spread_order(code.data_points, code.worker_points)
    assert sorted(order.tolist()) == list(range(4096))
    np.testing.assert_allclose(np.sort(code.worker_points[order[:64]]), np.sort(code.data_points), atol=1e-12)
