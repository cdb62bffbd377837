"""``composition.policy: auto`` (coded_map's default): the similarity chain for an f that costs at least
5 µs a sample or a source of one window, the k-d tree for a cheaper f over more (the chain would cost the run
several times f) and ``kd`` (the tree without its chains) below 2 µs; a store made under a concrete policy resumes
under auto."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.composition import AUTO_CHAIN_MIN_SECONDS_PER_ROW, AUTO_TREE_MIN_SECONDS_PER_ROW, auto_composition
from gcc_dask.config import load_config
from gcc_dask.errors import StoreError
from gcc_dask.pipeline_layout import composition_policy
from gcc_dask.store import RunStore

RNG = np.random.default_rng(11)
X = RNG.uniform(-1, 1, size=(512, 4)).astype(np.float32)
W = RNG.normal(size=(4, 3)).astype(np.float32)
# windows of 128 samples: X is 4 of them (a source of one window is chained whatever f costs)
CONFIG = {"code": {"num_inputs": 4, "num_workers": 8, "block_size": 16}, "cutoff": {"stragglers": 2},
          "composition": {"window": 128}}


def cheap(x):
    return np.tanh(x @ W)


def costly(x):
    """``cheap``, at 4 times the threshold's cost a sample at least (a busy machine only makes it slower)."""
    time.sleep(4 * AUTO_CHAIN_MIN_SECONDS_PER_ROW * len(x))
    return np.tanh(x @ W)


def test_auto_takes_the_chain_from_the_threshold_up_the_tree_below_and_kd_below_that():
    assert auto_composition(AUTO_CHAIN_MIN_SECONDS_PER_ROW, 10**6) == "similarity"
    assert auto_composition(AUTO_CHAIN_MIN_SECONDS_PER_ROW * 0.99, 10**6) == "tree"
    assert auto_composition(AUTO_TREE_MIN_SECONDS_PER_ROW, 10**6) == "tree"
    assert auto_composition(AUTO_TREE_MIN_SECONDS_PER_ROW * 0.99, 10**6) == "kd"
    assert auto_composition(None, 10**6) == "similarity"  # not measured: the chain, the pipelines' default
    assert auto_composition(1e-7, 8192, window=8192) == "similarity"  # one window: chained in a moment
    assert auto_composition(1e-7, 8193, window=8192) == "kd"
    base = {"name": "t", "source": {"kind": "array", "array": X}, "workload": {"kind": "callable", "function": cheap},
            "schemes": ["gcc"], "composition": {"policy": "auto", "window": 128},
            "code": {"num_inputs": 4, "num_workers": 8}}
    cfg = load_config(base)
    assert composition_policy(cfg, 1e-7, 512) == "kd" and composition_policy(cfg, 1e-4, 512) == "similarity"
    assert composition_policy(cfg, 3e-6, 512) == "tree"
    assert composition_policy(load_config({**base, "schemes": ["uncoded"]}), 1e-7, 512) == "as_stored"  # blind
    assert composition_policy(load_config({**base, "composition": {"policy": "random"}}), 1e-7, 512) == "random"


@pytest.mark.parametrize("fn, taken", [(cheap, "kd"), (costly, "similarity")])
def test_coded_map_composes_by_the_cost_of_f(client, tmp_path, fn, taken):
    res = gd.coded_map(fn, X, client=client, out=tmp_path / "a.zarr", **CONFIG)
    store = RunStore(res.store)
    assert store.attrs["composition"] == taken
    assert store.attrs["config"]["composition"]["policy"] == "auto"
    assert res.estimates.shape == (512, 3) and np.isfinite(res.estimates).all()


def test_a_store_made_under_a_concrete_policy_resumes_under_auto(client, tmp_path):
    out = tmp_path / "b.zarr"
    first = gd.coded_map(cheap, X, client=client, out=out, **{**CONFIG, "composition": {"policy": "similarity",
                                                                                       "window": 128}})
    again = gd.coded_map(cheap, X, client=client, out=out, **CONFIG)  # the default, auto, would take kd
    assert RunStore(again.store).attrs["composition"] == "similarity"
    np.testing.assert_array_equal(again.estimates, first.estimates)
    other = tmp_path / "c.zarr"
    gd.coded_map(cheap, X, client=client, out=other, **{**CONFIG, "composition": {"policy": "random", "window": 128}})
    with pytest.raises(StoreError, match="composition.policy .'random' in the store"):  # not one auto takes
        gd.coded_map(cheap, X, client=client, out=other, **CONFIG)
