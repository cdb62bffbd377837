"""Straggler models: received sets (FixedCount, Bernoulli) and latency draws (ShiftedExponential, Pareto)."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gcc_dask.errors import ConfigError, NotEnoughResultsError
from gcc_dask.stragglers import (
    Bernoulli,
    FixedCount,
    Pareto,
    ShiftedExponential,
    latency_model_from_config,
)


# ------------------------------------------------------------------------------------ fake codes
class LinearInterpCode:
    """A tiny linear approximate code: piecewise-linear encoder and decoder on [-1, 1].

    Same interface as gcc_dask.coding's CodingScheme for what gcc_dask.stragglers uses. Its error grows with
    the widest gap between surviving worker points, like the real approximate codes.
    """

    def __init__(self, K, N, worker_points=None):
        self.num_inputs, self.num_workers = K, N
        self.data_points = np.cos((2 * np.arange(K) + 1) * np.pi / (2 * K))[::-1].copy()
        self.worker_points = (
            np.linspace(-1, 1, N) if worker_points is None else np.asarray(worker_points, float)
        )
        eye = np.eye(K)
        self.encoder_matrix = np.stack([np.interp(self.worker_points, self.data_points, e) for e in eye], 1)

    def encode(self, X):
        return np.tensordot(self.encoder_matrix, X, axes=1)

    def decoder_matrix(self, received):
        received = np.asarray(received)
        if received.size < 2:
            raise NotEnoughResultsError(f"received needs at least 2 workers; got {received.size}")
        pts = self.worker_points[received]
        order = np.argsort(pts)
        D = np.zeros((self.num_inputs, received.size))
        for j, col in enumerate(np.eye(received.size)):
            D[:, order[j]] = np.interp(self.data_points, pts[order], col[: received.size])
        return D

    def decodable(self, received):
        return np.ones(self.num_inputs, dtype=bool)

    def decode(self, Y, received):
        return np.tensordot(self.decoder_matrix(received), Y, axes=1)


class DecodeOnly:
    """Wraps a code and hides decoder_matrix/decodable: the search must then use decode alone."""

    def __init__(self, code):
        self._code = code
        self.num_workers, self.worker_points = code.num_workers, code.worker_points

    def encode(self, X):
        return self._code.encode(X)

    def decode(self, Y, received):
        return self._code.decode(Y, received)


class DataDrivenCode(LinearInterpCode):
    """decode depends on the data (like lambda_dec='gcv'), so decoder_matrix alone is not the decoder."""

    def decode(self, Y, received):
        return super().decode(Y, received) * (1.0 + 0.5 * np.tanh(np.mean(Y)))


class MatrixRefusedCode(LinearInterpCode):
    """decoder_matrix raises (as a data-driven decoder may): the search falls back to decode."""

    def decoder_matrix(self, received):
        if getattr(self, "_in_decode", False):
            return super().decoder_matrix(received)
        raise NotImplementedError("decoder_matrix depends on the data")

    def decode(self, Y, received):
        self._in_decode = True
        try:
            return super().decode(Y, received)
        finally:
            self._in_decode = False


class ReplicationCode:
    """Two copies of each input (N = 2K); a missing pair gives NaN rows, as the real replication does."""

    def __init__(self, K):
        self.num_inputs, self.num_workers = K, 2 * K
        self.worker_points = np.arange(2 * K, dtype=float)

    def encode(self, X):
        return np.concatenate([X, X])

    def decoder_matrix(self, received):
        D = np.zeros((self.num_inputs, len(received)))
        for j, w in list(enumerate(np.asarray(received)))[::-1]:
            D[w % self.num_inputs] = 0
            D[w % self.num_inputs, j] = 1
        return D

    def decodable(self, received):
        return np.isin(np.arange(self.num_inputs), np.asarray(received) % self.num_inputs)

    def decode(self, Y, received):
        out = np.full((self.num_inputs, *Y.shape[1:]), np.nan)
        for y, w in zip(Y[::-1], np.asarray(received)[::-1], strict=True):
            out[w % self.num_inputs] = y
        return out


def f_xsinx(X):
    return X * np.sin(X)


def brute_force_worst(code, X, f, S):
    """Max over all straggler sets of (1/K) Σ ||f̂ − f||², by the definition."""
    ref = f(X)
    Y = f(code.encode(X))
    best = -math.inf
    for stragglers in combinations(range(code.num_workers), S):
        F = np.setdiff1d(np.arange(code.num_workers), stragglers)
        try:
            est = code.decode(Y[F], F)
        except NotEnoughResultsError:
            return math.inf
        mse = float(np.sum((est - ref) ** 2) / X.shape[0])
        best = max(best, mse if math.isfinite(mse) else math.inf)
    return best


def batch_mse(code, X, f, received):
    est = code.decode(f(code.encode(X))[received], received)
    return float(np.sum((est - f(X)) ** 2) / X.shape[0])


# ----------------------------------------------------------------------------- received-set models
@given(
    n=st.integers(1, 60),
    s_frac=st.floats(0, 0.99),
    seed=st.integers(0, 2**32),
    pattern=st.sampled_from(["random", "contiguous"]),
)
def test_fixed_count_survivors(n, s_frac, seed, pattern):
    S = int(s_frac * n)
    model = FixedCount(S, pattern)
    got = model.received(n, seed)
    assert got.dtype == np.int64
    assert got.size == n - S
    assert np.all(np.diff(got) > 0) and (got.size == 0 or (got[0] >= 0 and got[-1] < n))
    np.testing.assert_array_equal(got, model.received(n, np.random.default_rng(seed)))


@given(n=st.integers(2, 50), s_frac=st.floats(0.01, 0.99), seed=st.integers(0, 2**32))
def test_contiguous_is_a_window_in_point_order(n, s_frac, seed):
    S = max(1, int(s_frac * n))
    if S >= n:
        S = n - 1
    perm = np.random.default_rng(seed).permutation(n)
    code = LinearInterpCode(2, n, worker_points=np.linspace(-1, 1, n)[perm])  # shuffled points
    got = FixedCount(S, "contiguous").received(n, seed, code=code)
    stragglers = np.setdiff1d(np.arange(n), got)
    ranks = np.sort(np.argsort(np.argsort(code.worker_points))[stragglers])
    assert ranks.size == S and np.all(np.diff(ranks) == 1)
    idx = np.setdiff1d(np.arange(n), FixedCount(S, "contiguous").received(n, seed))
    assert np.all(np.diff(idx) == 1)  # without a code: index order


def test_contiguous_covers_every_window():
    n, S = 8, 3
    starts = {
        int(np.setdiff1d(np.arange(n), FixedCount(S, "contiguous").received(n, seed))[0])
        for seed in range(200)
    }
    assert starts == set(range(n - S + 1))  # windows do not wrap; all N - S + 1 occur


def test_random_draws_differ_across_seeds():
    draws = {tuple(FixedCount(3, "random").received(20, seed)) for seed in range(50)}
    assert len(draws) > 40


@pytest.mark.parametrize("p", [0.0, 0.1, 0.3, 0.7])
def test_bernoulli_rate(p):
    rng = np.random.default_rng(1)
    n, trials = 200, 300
    kept = sum(Bernoulli(p).received(n, rng).size for _ in range(trials))
    total = n * trials
    sd = math.sqrt(total * p * (1 - p))
    assert abs((total - kept) - p * total) <= 5 * sd + 1e-9  # 5 sigma: fails only on a real bias


@given(n=st.integers(1, 100), p=st.floats(0, 0.999), seed=st.integers(0, 2**32))
def test_bernoulli_shape_and_reproducible(n, p, seed):
    got = Bernoulli(p).received(n, seed)
    assert got.dtype == np.int64 and np.all(np.diff(got) > 0) and np.all((got >= 0) & (got < n))
    np.testing.assert_array_equal(got, Bernoulli(p).received(n, seed))


# ------------------------------------------------------------------------------------- adversarial
@pytest.mark.parametrize(("K", "N", "S"), [(3, 8, 1), (4, 10, 2), (3, 9, 3)])
def test_adversarial_exhaustive_is_the_true_max(K, N, S):
    X = np.random.default_rng(K * N).uniform(-3, 3, size=(K, 2))
    code = LinearInterpCode(K, N)
    model = FixedCount(S, "adversarial")
    got = model.received(N, 0, code=code, X=X, f=f_xsinx)
    assert model.last_search == "exhaustive"
    assert got.size == N - S
    truth = brute_force_worst(code, X, f_xsinx, S)
    assert model.last_mse == pytest.approx(truth, rel=1e-12)
    assert batch_mse(code, X, f_xsinx, got) == pytest.approx(truth, rel=1e-12)


@pytest.mark.parametrize(
    "wrap", [DecodeOnly, DataDrivenCode, MatrixRefusedCode], ids=["decode-only", "data-driven", "refused"]
)
def test_adversarial_without_the_matrix_fast_path(wrap):
    K, N, S = 3, 9, 2
    X = np.random.default_rng(1).uniform(-3, 3, size=(K, 2))
    code = wrap(LinearInterpCode(K, N)) if wrap is DecodeOnly else wrap(K, N)
    res = FixedCount(S, "adversarial").search(code, X, f_xsinx)
    assert res.mse == pytest.approx(brute_force_worst(code, X, f_xsinx, S), rel=1e-12)
    if wrap is DecodeOnly:  # same answer as the batched matrix path
        fast = FixedCount(S, "adversarial").search(LinearInterpCode(K, N), X, f_xsinx)
        np.testing.assert_array_equal(res.received, fast.received)
        assert res.mse == pytest.approx(fast.mse, rel=1e-12)


def test_adversarial_no_stragglers():
    code = LinearInterpCode(3, 6)
    res = FixedCount(0, "adversarial").search(code, np.linspace(-1, 1, 3), f_xsinx)
    np.testing.assert_array_equal(res.received, np.arange(6))
    assert res.mode == "exhaustive" and res.evaluated == 1


def test_adversarial_heuristic_beats_every_window_and_is_a_lower_bound():
    K, N, S = 4, 14, 3
    X = np.random.default_rng(3).uniform(-3, 3, size=(K,))
    code = LinearInterpCode(K, N)
    model = FixedCount(S, "adversarial", exhaustive_limit=10, restarts=4)
    res = model.search(code, X, f_xsinx, rng=5)
    assert res.mode == "heuristic" and model.last_search == "heuristic"
    windows = [
        batch_mse(code, X, f_xsinx, np.setdiff1d(np.arange(N), np.arange(s, s + S))) for s in range(N - S + 1)
    ]
    assert res.mse >= max(windows) - 1e-15
    assert res.mse == pytest.approx(batch_mse(code, X, f_xsinx, res.received), rel=1e-12)
    assert res.mse <= brute_force_worst(code, X, f_xsinx, S) * (1 + 1e-12)
    again = FixedCount(S, "adversarial", exhaustive_limit=10, restarts=4).received(
        N, 5, code=code, X=X, f=f_xsinx
    )
    np.testing.assert_array_equal(again, res.received)  # same seed, same draw


def test_adversarial_undecodable_set_is_worst():
    K, N = 3, 4
    X = np.linspace(-1, 1, K)
    res = FixedCount(3, "adversarial").search(LinearInterpCode(K, N), X, f_xsinx)  # 1 survivor < 2
    assert res.mse == math.inf and res.received.size == 1
    rep = ReplicationCode(K)
    res = FixedCount(2, "adversarial").search(rep, X, f_xsinx)
    assert res.mse == math.inf  # both copies of one input lost -> NaN estimate -> infinite loss
    assert res.received.size == 2 * K - 2
    assert (np.setdiff1d(np.arange(2 * K), res.received) % K).tolist() in ([0, 0], [1, 1], [2, 2])


def test_adversarial_with_make_code_bacc():
    coding = pytest.importorskip("gcc_dask.coding")
    if not hasattr(coding, "make_code") or "bacc" not in getattr(coding, "list_codes", list)():
        pytest.skip("gcc_dask.coding.make_code('bacc') not available yet")
    K, N, S = 4, 10, 2  # N - 1 odd: no Chebyshev alpha/beta coincidence
    code = coding.make_code("bacc", num_inputs=K, num_workers=N)
    X = np.random.default_rng(0).uniform(-3, 3, size=(K, 3))
    model = FixedCount(S, "adversarial")
    got = model.received(N, 0, code=code, X=X, f=f_xsinx)
    assert model.last_search == "exhaustive"
    assert model.last_mse == pytest.approx(brute_force_worst(code, X, f_xsinx, S), rel=1e-10)
    assert batch_mse(code, X, f_xsinx, got) == pytest.approx(model.last_mse, rel=1e-10)


# ----------------------------------------------------------------------------------- latency models
MODELS = [
    ShiftedExponential("50ms", "20ms", hang_prob=0.1, hang_delay="1s"),
    Pareto("10ms", 1.5, shift="5ms", hang_prob=0.2),
]


@pytest.mark.parametrize("model", MODELS, ids=["shifted_exponential", "pareto"])
@given(seed=st.integers(0, 2**32), batch=st.integers(0, 10**6), n=st.integers(1, 300), m=st.integers(1, 300))
def test_latency_same_seed_same_draw_and_prefix(model, seed, batch, n, m):
    a = model.latencies(seed, batch, n)
    assert a.dtype == np.float64 and a.shape == (n,)
    np.testing.assert_array_equal(a, model.latencies(seed, batch, n))
    b = model.latencies(seed, batch, m)
    k = min(n, m)
    np.testing.assert_array_equal(a[:k], b[:k])  # worker w depends on (seed, batch, w) only


@pytest.mark.parametrize("model", MODELS, ids=["shifted_exponential", "pareto"])
def test_latency_different_batch_or_seed_differs(model):
    a = model.latencies(0, 0, 64)
    assert not np.any(a == model.latencies(0, 1, 64))
    assert not np.any(a == model.latencies(1, 0, 64))


def test_shifted_exponential_distribution():
    model = ShiftedExponential(shift="50ms", scale="20ms")
    lat = np.concatenate([model.latencies(7, b, 1000) for b in range(20)])
    assert lat.min() >= 0.05
    sd_mean = 0.02 / math.sqrt(lat.size)
    assert abs(lat.mean() - 0.07) < 6 * sd_mean
    assert float(np.median(lat - 0.05)) == pytest.approx(0.02 * math.log(2), rel=0.05)


def test_pareto_distribution():
    model = Pareto(scale=0.01, alpha=3.0, shift=0.002)
    lat = np.concatenate([model.latencies(7, b, 1000) for b in range(20)])
    assert lat.min() >= 0.012
    # P(T - shift > 2 scale) = 2^-alpha
    frac = np.mean(lat - 0.002 > 0.02)
    assert abs(frac - 0.125) < 6 * math.sqrt(0.125 * 0.875 / lat.size)


@pytest.mark.parametrize("hang_prob", [0.0, 0.05, 0.3, 1.0])
def test_hang_frequency(hang_prob):
    model = ShiftedExponential("1ms", "1ms", hang_prob=hang_prob, hang_delay="10s")
    lat = np.concatenate([model.latencies(3, b, 500) for b in range(20)])
    hung = np.mean(lat >= 10.0)
    sd = math.sqrt(hang_prob * (1 - hang_prob) / lat.size)
    assert abs(hung - hang_prob) <= 5 * sd + 1e-12


def test_hang_is_added_on_top_of_the_same_draw():
    base = ShiftedExponential("1ms", "1ms")
    hang = ShiftedExponential("1ms", "1ms", hang_prob=0.5, hang_delay=2.0)
    diff = hang.latencies(0, 4, 200) - base.latencies(0, 4, 200)
    assert set(np.round(diff, 12)) == {0.0, 2.0}


@pytest.mark.parametrize("cls_args", [("1ms", "1ms"), ("1ms", 2.0)], ids=["shifted_exponential", "pareto"])
def test_slow_workers_persist_across_batches(cls_args):
    cls = ShiftedExponential if cls_args[1] == "1ms" else Pareto
    slow = cls(*cls_args, slow_workers=3, slow_factor=8.0)
    plain = cls(*cls_args)
    sets = []
    for batch in range(6):
        ratio = slow.latencies(11, batch, 40) / plain.latencies(11, batch, 40)
        sets.append(tuple(np.flatnonzero(~np.isclose(ratio, 1.0))))
        np.testing.assert_allclose(ratio[list(sets[-1])], 8.0)
    assert len(set(sets)) == 1 and len(sets[0]) == 3
    np.testing.assert_array_equal(sets[0], slow.slow_set(11, 40))
    assert {tuple(slow.slow_set(s, 40)) for s in range(20)} != {sets[0]}  # chosen from the seed


def test_durations_parse():
    m = ShiftedExponential(shift="50ms", scale=0.02, hang_delay="2s")
    assert (m.shift, m.scale, m.hang_delay) == (0.05, 0.02, 2.0)
    assert Pareto("1ms", 2).scale == 0.001


def test_latency_model_from_config():
    cfg = {
        "model": "shifted_exponential",
        "shift": "20ms",
        "scale": "10ms",
        "hang_prob": 0.1,
        "hang_delay": "2s",
        "seed": 0,
    }
    m = latency_model_from_config(cfg)
    assert m == ShiftedExponential("20ms", "10ms", hang_prob=0.1, hang_delay="2s")
    assert latency_model_from_config({"model": "pareto", "scale": 0.01, "alpha": 2}) == Pareto(0.01, 2)
    assert latency_model_from_config({"model": "none", "seed": 3}) is None


def test_latency_model_from_flattened_config():
    """A config section carrying every model's keys (alpha under shifted_exponential), strict=False."""
    flat = {
        "model": "shifted_exponential",
        "shift": 0.0,
        "scale": 0.01,
        "alpha": 2.0,
        "hang_prob": 0.0,
        "hang_delay": 5.0,
        "slow_workers": 0,
        "slow_factor": 1.0,
        "seed": 0,
    }
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['alpha'\]"):
        latency_model_from_config(flat)
    assert latency_model_from_config(flat, strict=False) == ShiftedExponential(0.0, 0.01)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['shfit'\]"):
        latency_model_from_config({**flat, "shfit": 1}, strict=False)


# --------------------------------------------------------------------------------------- bad input
def _code(n):
    return LinearInterpCode(2, n)


BAD = [
    pytest.param(lambda: FixedCount(-1), "S must be", id="S-negative"),
    pytest.param(lambda: FixedCount(1.5), "S must be an integer", id="S-float"),
    pytest.param(lambda: FixedCount(2, "sideways"), "pattern must be one of", id="pattern-unknown"),
    pytest.param(lambda: FixedCount(2, exhaustive_limit=0), "exhaustive_limit", id="exhaustive-limit-zero"),
    pytest.param(lambda: FixedCount(2, restarts=-1), "restarts", id="restarts-negative"),
    pytest.param(lambda: FixedCount(4).received(4, 0), r"S must be in \[0, num_workers\)", id="S-equals-N"),
    pytest.param(lambda: FixedCount(5, "contiguous").received(4, 0), "S=5", id="S-above-N-contiguous"),
    pytest.param(lambda: FixedCount(1).received(0, 0), "num_workers", id="N-zero"),
    pytest.param(lambda: FixedCount(1).received(4, -3), "rng must be", id="rng-negative"),
    pytest.param(lambda: FixedCount(1).received(4, "seed"), "rng must be", id="rng-string"),
    pytest.param(
        lambda: FixedCount(1).received(5, 0, code=_code(4)), "code.num_workers", id="code-N-mismatch"
    ),
    pytest.param(
        lambda: FixedCount(1, "adversarial").received(4, 0), "needs code, X and f", id="adversarial-no-code"
    ),
    pytest.param(
        lambda: FixedCount(1, "adversarial").received(4, 0, code=_code(4), X=np.ones(2)),
        "None for f",
        id="adversarial-no-f",
    ),
    pytest.param(lambda: Bernoulli(1.0), r"p must be a number in \[0.0, 1.0\); got p=1.0", id="p-one"),
    pytest.param(lambda: Bernoulli(-0.1), r"p must be a number in \[0.0, 1.0\)", id="p-negative"),
    pytest.param(lambda: Bernoulli("0.1"), "p must be a number", id="p-string"),
    pytest.param(lambda: ShiftedExponential(shift=-0.01), "shift must be a duration", id="shift-negative"),
    pytest.param(lambda: ShiftedExponential(hang_delay=1e12), r"from 0 to 86400 \(1 day\); no run should wait "
                 r"longer; got hang_delay=1000000000000.0", id="hang-delay-1e12"),
    pytest.param(lambda: ShiftedExponential(shift="1_000"), "without '_'.*got shift='1_000'", id="shift-underscore"),
    pytest.param(lambda: Pareto("5", 2), "a string needs a unit.*got scale='5'", id="scale-no-unit"),
    pytest.param(lambda: ShiftedExponential(scale="-5ms"), "scale must be", id="scale-negative-string"),
    pytest.param(lambda: ShiftedExponential(scale="5 parsecs"), "scale must be", id="scale-bad-unit"),
    pytest.param(lambda: ShiftedExponential(hang_delay=math.nan), "hang_delay", id="hang-delay-nan"),
    pytest.param(
        lambda: ShiftedExponential(hang_prob=1.5),
        r"hang_prob must be a number in \[0.0, 1.0\]",
        id="hang-prob-above-one",
    ),
    pytest.param(
        lambda: ShiftedExponential(slow_workers=-1), "slow_workers must be", id="slow-workers-negative"
    ),
    pytest.param(lambda: ShiftedExponential(slow_factor=0), "slow_factor must be", id="slow-factor-zero"),
    pytest.param(lambda: Pareto(0.01, 0), "alpha must be", id="alpha-zero"),
    pytest.param(lambda: Pareto(-0.01, 2), "scale must be", id="pareto-scale-negative"),
    pytest.param(
        lambda: ShiftedExponential(slow_workers=5).latencies(0, 0, 4),
        "slow_workers must be at most",
        id="slow-workers-above-N",
    ),
    pytest.param(lambda: ShiftedExponential().latencies(-1, 0, 4), "seed must be", id="seed-negative"),
    pytest.param(lambda: ShiftedExponential().latencies(0, -1, 4), "batch must be", id="batch-negative"),
    pytest.param(lambda: ShiftedExponential().latencies(0, 0, 0), "num_workers must be", id="latency-N-zero"),
    pytest.param(
        lambda: latency_model_from_config({"model": "weibull"}),
        "stragglers.model must be one of",
        id="model-unknown",
    ),
    pytest.param(
        lambda: latency_model_from_config({"shift": 1}), "stragglers.model must be one of", id="model-missing"
    ),
    pytest.param(
        lambda: latency_model_from_config({"model": "pareto", "scale": 1, "alpha": 2, "shfit": 0}),
        r"unknown key\(s\) \['shfit'\]",
        id="config-typo",
    ),
    pytest.param(
        lambda: latency_model_from_config({"model": "pareto", "scale": 1}),
        r"needs key\(s\) \['alpha'\]",
        id="config-missing-alpha",
    ),
    pytest.param(lambda: latency_model_from_config(["pareto"]), "must be a mapping", id="config-not-mapping"),
]


@pytest.mark.parametrize(("call", "match"), BAD)
def test_bad_inputs_raise_config_error(call, match):
    with pytest.raises(ConfigError, match=match):
        call()
