"""Property tests over every scheme: linearity, and shape/dtype/namespace preserved.

See docs/methods.rst, section 'Linear maps'.
"""

from __future__ import annotations

import warnings

import array_api_compat
import numpy as np
import pytest
from coding_helpers import to_host
from hypothesis import given
from hypothesis import strategies as st

from gcc_dask.coding import ConditioningWarning, list_codes, make_code


@st.composite
def codes(draw, name: str):
    """A valid scheme of kind `name` with small K, N, and a received set (any order, >= min_received)."""
    K = draw(st.integers(1, 6))
    params: dict = {"num_inputs": K}
    if name not in ("replication", "uncoded", "speculative"):
        params["points"] = draw(st.sampled_from(["chebyshev", "equispaced"]))
        params["on_coincidence"] = draw(st.sampled_from(["ignore", "nudge"]))
    if name == "uncoded":
        N = K
    elif name == "speculative":
        N = 2 * K
    elif name == "replication":
        N = K * draw(st.integers(1, 3))
    elif name == "lcc":
        params["degree"] = D = draw(st.integers(1, 3))
        N = (K - 1) * D + 1 + draw(st.integers(0, 4))
    elif name == "bspline":
        N = draw(st.integers(4, 24))
    elif name in ("gcc", "letcc"):
        N = draw(st.integers(2, 24))
        params["lambda_enc"] = draw(st.sampled_from([0.0, 1e-6, 1e-2]))
        params["lambda_dec"] = draw(st.sampled_from([0.0, 1e-6, 1e-2]))
        if name == "gcc":
            params["kernel"] = kernel = draw(st.sampled_from(["sobolev2", "sobolev1", "matern32", "matern52",
                                                                    "gaussian"]))
            if kernel == "gaussian":
                params["length_scale"] = 0.2
    else:
        N = draw(st.integers(1, 24))
    with warnings.catch_warnings():  # equispaced LCC warns of its amplification: drawn on purpose here
        warnings.simplefilter("ignore", ConditioningWarning)
        code = make_code(name, num_workers=N, **params)
    size = draw(st.integers(code.min_received, N))
    received = np.asarray(draw(st.permutations(range(N)))[:size], dtype=np.int64)
    shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    seed = draw(st.integers(0, 2**31 - 1))
    return code, received, shape, seed


def _close(lhs, rhs, scale, factor=1e3):
    """|lhs - rhs| within `factor`·eps of the magnitude |M|·|x| that bounds the matmul's round-off."""
    np.testing.assert_array_less(np.abs(lhs - rhs), factor * np.finfo(float).eps * (scale + 1e-300) + 1e-300)


@pytest.mark.parametrize("name", list_codes())
@given(data=st.data())
def test_encode_and_decode_are_linear(name, data):
    code, received, shape, seed = data.draw(codes(name))
    rng = np.random.default_rng(seed)
    K, N = code.num_inputs, code.num_workers
    X, Z = rng.standard_normal((2, K, *shape))
    a, b = rng.uniform(-3, 3, 2)
    E = code.encoder_matrix
    absE = np.abs(E).reshape(N, K, *(1,) * len(shape))
    scale = (absE * (abs(a) * np.abs(X) + abs(b) * np.abs(Z))).sum(axis=1)
    _close(code.encode(a * X + b * Z), a * code.encode(X) + b * code.encode(Z), scale)

    Y, W = rng.standard_normal((2, received.size, *shape))
    D = code.decoder_matrix(received)
    mask = code.decodable(received)
    absD = np.abs(np.nan_to_num(D)).reshape(K, received.size, *(1,) * len(shape))
    scale = (absD * (abs(a) * np.abs(Y) + abs(b) * np.abs(W))).sum(axis=1)
    lhs, rhs = code.decode(a * Y + b * W, received), a * code.decode(Y, received) + b * code.decode(W, received)
    assert lhs.shape == (K, *shape)
    _close(lhs[mask], rhs[mask], scale[mask])
    assert np.isnan(lhs[~mask]).all()


@pytest.mark.parametrize("name", list_codes())
@given(data=st.data())
def test_shape_dtype_namespace_preserved(xp, name, data):
    code, received, shape, seed = data.draw(codes(name))
    dtype = data.draw(st.sampled_from(["float32", "float64"]))
    rng = np.random.default_rng(seed)
    K = code.num_inputs
    X = rng.standard_normal((K, *shape))
    Y = rng.standard_normal((received.size, *shape))
    xdt = getattr(xp, dtype)
    Xx, Yx = xp.asarray(X, dtype=xdt), xp.asarray(Y, dtype=xdt)

    enc = code.encode(Xx)
    dec = code.decode(Yx, xp.asarray(received) if xp.__name__ == "cupy" else received)
    for out, want_shape in ((enc, (code.num_workers, *shape)), (dec, (K, *shape))):
        assert array_api_compat.array_namespace(out) is array_api_compat.array_namespace(Xx)
        assert out.dtype == xdt
        assert tuple(out.shape) == want_shape

    rtol = 1e-4 if dtype == "float32" else 1e-10
    E, D = code.encoder_matrix, np.nan_to_num(code.decoder_matrix(received), nan=0.0)
    X32, Y32 = X.astype(dtype).astype(float), Y.astype(dtype).astype(float)
    enc_ref = np.tensordot(E, X32, axes=1)
    dec_ref = np.tensordot(D, Y32, axes=1)
    scale_e = np.tensordot(np.abs(E), np.abs(X32), axes=1) + 1e-30
    scale_d = np.tensordot(np.abs(D), np.abs(Y32), axes=1) + 1e-30
    assert np.all(np.abs(to_host(enc) - enc_ref) <= rtol * scale_e)
    mask = code.decodable(received)
    dec_h = to_host(dec)
    assert np.all(np.abs(dec_h[mask] - dec_ref[mask]) <= rtol * scale_d[mask])
    assert np.isnan(dec_h[~mask]).all()


@pytest.mark.parametrize("name", list_codes())
@given(data=st.data())
def test_decode_is_permutation_equivariant(name, data):
    """Listing the same survivors in another order (with their rows) gives the same estimates."""
    code, received, shape, seed = data.draw(codes(name))
    if name in ("replication", "uncoded", "speculative"):
        return  # "first copy listed" depends on the order by design; all copies are equal anyway
    rng = np.random.default_rng(seed)
    Y = rng.standard_normal((received.size, *shape))
    perm = rng.permutation(received.size)
    a, b = code.decode(Y, received), code.decode(Y[perm], received[perm])
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * (np.abs(a).max(initial=0) + 1))


@given(seed=st.integers(0, 2**31 - 1), c=st.floats(1e-3, 1e3), n_drop=st.integers(0, 6))
def test_gcv_decode_is_scale_equivariant(seed, c, n_drop):
    """GCV's λ depends on Y only through its shape, so decode(cY) = c·decode(Y) (not linear, but 1-homogeneous)."""
    rng = np.random.default_rng(seed)
    code = make_code("gcc", num_inputs=6, num_workers=20, lambda_dec="gcv")
    received = np.sort(rng.choice(20, 20 - n_drop, replace=False))
    Y = np.sin(3 * code.worker_points[received])[:, None] + 0.05 * rng.standard_normal((received.size, 3))
    a, b = code.decode(c * Y, received), c * code.decode(Y, received)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9 * c)
