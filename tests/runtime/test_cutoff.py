"""The cutoff policy as pure functions of arrival times (no cluster)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gcc_dask.errors import ConfigError
from gcc_dask.runtime.cutoff import CutoffPolicy, cutoff_time, decide, resolve_wait_for

INF = math.inf


def test_wait_for_fires_at_the_kth_arrival():
    arrivals = np.array([0.5, 0.1, 0.3, 0.9, 0.2])
    d = cutoff_time(arrivals, CutoffPolicy(num_workers=5, wait_for=3))
    assert d.time == 0.3 and d.reason == "wait_for" and d.n_received == 3
    assert d.received(arrivals).tolist() == [1, 2, 4]


def test_deadline_fires_before_wait_for():
    arrivals = np.array([0.1, 0.2, 5.0, 6.0])
    d = cutoff_time(arrivals, CutoffPolicy(num_workers=4, wait_for=4, deadline=1.0))
    assert (d.time, d.reason, d.n_received) == (1.0, "deadline", 2)


def test_adaptive_waits_multiplier_times_median():
    # quantile 0.5 of N=4 -> 2 results; median of (0.1, 0.3) = 0.2; 1.5 x 0.2 = 0.3 -> third (0.3) is in
    arrivals = np.array([0.1, 0.3, 0.35, 10.0])
    pol = CutoffPolicy(num_workers=4, wait_for=4, quantile=0.5, multiplier=1.5)
    d = cutoff_time(arrivals, pol)
    # after 2 arrivals: fire at max(0.3, 0.3) = 0.3 but the 3rd arrives at 0.35 > 0.3 -> fire at 0.3
    assert d.reason == "adaptive" and d.time == pytest.approx(0.3) and d.n_received == 2


def test_adaptive_respects_min_runtime():
    arrivals = np.array([0.01, 0.02, 0.03, 10.0])
    pol = CutoffPolicy(num_workers=4, wait_for=4, quantile=0.5, multiplier=1.0, min_runtime=0.5)
    d = cutoff_time(arrivals, pol)
    assert d.time == 0.5 and d.n_received == 3


def test_earliest_rule_wins_in_combination():
    arrivals = np.array([0.1, 0.2, 0.3, 0.4, 3.0, 4.0])
    pol = CutoffPolicy(num_workers=6, wait_for=5, deadline=2.0, quantile=0.5, multiplier=4.0)
    # wait_for -> 3.0, deadline -> 2.0, adaptive: 3 in, median 0.2 x 4 = 0.8 -> but 4th at 0.4 < 0.8;
    # 4 in, median 0.25 x 4 = 1.0 -> next arrival 3.0 > 1.0 -> fires at 1.0
    d = cutoff_time(arrivals, pol)
    assert (d.time, d.reason, d.n_received) == (1.0, "adaptive", 4)


def test_groups_fire_when_every_input_is_covered():
    # replication r=2, K=2: workers 0,1 -> input 0 ; workers 2,3 -> input 1
    arrivals = np.array([0.5, 0.1, 0.2, 9.0])
    pol = CutoffPolicy(num_workers=4, wait_for=4, groups=(0, 0, 1, 1))
    d = cutoff_time(arrivals, pol)
    assert d.time == 0.2 and d.n_received == 2


@pytest.mark.parametrize(
    ("shortfall", "expected"),
    [("decode", (1.0, 1, True, False)), ("fail", (1.0, 1, True, True)), ("wait", (3.0, 3, False, False))],
    ids=["decode", "fail", "wait"],
)
def test_shortfall_at_deadline(shortfall, expected):
    arrivals = np.array([0.5, 2.0, 3.0, 4.0])
    pol = CutoffPolicy(num_workers=4, wait_for=4, min_results=3, deadline=1.0, on_shortfall=shortfall)
    d = cutoff_time(arrivals, pol)
    assert (d.time, d.n_received, d.shortfall, d.failed) == expected


def test_nothing_fires_without_enough_results():
    d = cutoff_time(np.array([0.1, INF, INF]), CutoffPolicy(num_workers=3, wait_for=2))
    assert d.time == INF and d.reason is None


def test_decide_wall_clock_waits_until_now_passes_the_deadline():
    arrivals = np.array([0.1, INF, INF])
    pol = CutoffPolicy(num_workers=3, wait_for=3, deadline=1.0)
    assert decide(arrivals, pol, now=0.5) is None
    d = decide(arrivals, pol, now=1.0)
    assert d is not None and d.reason == "deadline" and d.n_received == 1


def test_decide_virtual_clock_needs_every_earlier_outcome():
    # shard 2 (latency 0.25) still unknown: a wait_for=2 decision at 0.3 is not final yet
    arrivals = np.array([0.1, 0.3, INF, INF])
    pol = CutoffPolicy(num_workers=4, wait_for=2)
    assert decide(arrivals, pol, horizon=0.25) is None
    d = decide(arrivals, pol, horizon=0.5)
    assert d.time == 0.3


def test_decide_exhausted_when_nothing_outstanding():
    arrivals = np.array([0.1, INF, INF, INF])  # three failed shards
    pol = CutoffPolicy(num_workers=4, wait_for=3, min_results=2, on_shortfall="wait")
    d = decide(arrivals, pol, horizon=INF, outstanding=0)
    assert d.reason == "exhausted" and d.n_received == 1 and d.shortfall


@given(
    lat=st.lists(st.floats(0.001, 10.0), min_size=2, max_size=30),
    frac=st.floats(0.1, 1.0),
    data=st.data(),
)
def test_virtual_decision_matches_offline_decision(lat, frac, data):
    """Feeding outcomes in latency order, the first final decision equals the offline one."""
    lat = np.array(lat)
    n = len(lat)
    failed = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    arrivals = np.where(failed, INF, lat)
    pol = CutoffPolicy(num_workers=n, wait_for=max(1, int(frac * n)), deadline=data.draw(st.sampled_from([None, 2.0])))
    offline = cutoff_time(arrivals, pol)
    known = np.full(n, INF)
    order = np.argsort(lat, kind="stable")
    decision = None
    for i, w in enumerate(order):
        horizon = lat[order[i + 1]] if i + 1 < n else INF
        known[w] = arrivals[w]
        decision = decide(known, pol, horizon=horizon, outstanding=n - i - 1)
        if decision is not None:
            break
    assert decision is not None
    if math.isfinite(offline.time):
        assert decision.time == offline.time
        assert decision.received(arrivals).tolist() == offline.received(arrivals).tolist()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_workers": 4, "wait_for": 5}, "wait_for"),
        ({"num_workers": 4, "wait_for": 0}, "wait_for"),
        ({"num_workers": 4, "wait_for": 2, "deadline": -1.0}, "deadline"),
        ({"num_workers": 4, "wait_for": 2, "quantile": 1.5}, "quantile"),
        ({"num_workers": 4, "wait_for": 2, "multiplier": 0.5}, "multiplier"),
        ({"num_workers": 4, "wait_for": 2, "on_shortfall": "retry"}, "on_shortfall"),
        ({"num_workers": 4, "wait_for": 2, "groups": (0, 1)}, "groups"),
    ],
    ids=["wait-for-above-n", "wait-for-zero", "negative-deadline", "quantile", "multiplier", "shortfall", "groups"],
)
def test_policy_rejects(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        CutoffPolicy(**kwargs)


@pytest.mark.parametrize(
    ("value", "n", "s", "expected"), [("N-S", 16, 4, 12), ("all", 16, 4, 16), (10, 16, 4, 10), ("n - s", 8, 0, 8)]
)
def test_resolve_wait_for(value, n, s, expected):
    assert resolve_wait_for(value, n, s) == expected


def test_resolve_wait_for_rejects():
    with pytest.raises(ConfigError, match="wait_for"):
        resolve_wait_for(17, 16, 4)
    with pytest.raises(ConfigError, match="wait_for"):
        resolve_wait_for("half", 16, 4)


def test_adaptive_median_of_an_odd_count_does_not_overflow():
    """The median of an odd count is the middle arrival itself, not (x + x) / 2 (which overflows near 1e308)."""
    d = cutoff_time(np.array([1e308, np.inf]), CutoffPolicy(num_workers=2, wait_for=2, quantile=0.5, multiplier=1.0))
    assert d.time == 1e308 and d.reason == "adaptive"
