"""Every estimator on one runtime: scheme entries, uncoded at a cutoff, partial replication, fills marked in the
store and counted in the summary."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.errors import ConfigError, PoorEstimatesWarning

from reliability.rel_helpers import synthetic_config

K = 4


def _entries_cfg(path, schemes, **sections):
    return synthetic_config(path, batches=6, k=K, n=8, block=2, schemes=schemes, composition="similarity",
                            cutoff={"stragglers": 1, "deadline": None, "on_shortfall": "decode"}, **sections)


def test_uncoded_at_a_cutoff_stops_at_k_minus_s_and_marks_what_it_filled(client, tmp_path):
    """uncoded waits for all K; its `stop: cutoff` entry keeps the first K - S results and fills the lost
    position of each group by linear interpolation between its received neighbours (the nearest beyond an
    end). The store's `filled` marks exactly those samples; the summary counts them."""
    cutoff = {"label": "uncoded-cutoff", "code": "uncoded", "params": {"stop": "cutoff", "fill": "linear"}}
    run = gd.run_pipeline(_entries_cfg(tmp_path / "u.zarr", ["uncoded", cutoff]), client=client)
    root = zarr.open_group(str(run.path), mode="r")
    assert (root["uncoded/n_received"][:] == K).all()
    assert (root["uncoded-cutoff/n_received"][:] == K - 1).all()  # K - S results, never more
    ref = root["inputs/reference"][:]
    dec = root["uncoded-cutoff/decoded"][:]
    filled = root["uncoded-cutoff/filled"][:]
    group, position = root["uncoded-cutoff/group"][:], root["uncoded-cutoff/position"][:]
    assert filled.sum() == 6 * 2  # one lost position per group, 2 groups a batch, 6 batches
    # 1 of K = 4 positions filled, always: above the 10% that flags a scheme's estimates as poor, said once
    with pytest.warns(PoorEstimatesWarning, match=r"^poor estimates: uncoded-cutoff: 25% of samples filled"):
        assert run.summary.loc["uncoded-cutoff", "filled"] == filled.sum()
    assert run.summary.loc["uncoded", "filled"] == 0 and not root["uncoded/filled"][:].any()
    # the received ones are exact: bit for bit those of plain uncoded, whose shards evaluate f on the same blocks
    # (the uncoded reference evaluates all K·B inputs at once, so BLAS may round it differently, by an ulp)
    exact = root["uncoded/decoded"][:]
    np.testing.assert_array_equal(dec[~filled], exact[~filled])
    np.testing.assert_allclose(dec[~filled], ref[~filled], rtol=1e-5, atol=1e-6)
    ref = exact
    for slot in np.flatnonzero(filled):
        g, k = group[slot], position[slot]
        mates = {int(position[s]): s for s in np.flatnonzero(group == g)}
        if 0 < k < K - 1:
            expected = 0.5 * (ref[mates[k - 1]] + ref[mates[k + 1]])
        else:
            expected = ref[mates[1 if k == 0 else K - 2]]
        np.testing.assert_allclose(dec[slot], expected, rtol=1e-6)
    assert run.summary.loc["uncoded-cutoff", "num_workers"] == K and run.summary.loc["uncoded-cutoff", "code"] == "uncoded"


# rep6 fills the inputs whose only copy straggled (often over 10% of them, which flags it poor): not the point here
@pytest.mark.filterwarnings("ignore:poor estimates:gcc_dask.errors.PoorEstimatesWarning")
def test_partial_replication_runs_at_any_n_between_k_and_2k(client, tmp_path):
    """replication at N = 6 (K = 4): 2 extra copies at the group's ends; it stops at N - S results like gcc, and
    its fill leaves nothing missing. Its N is the coded schemes' by default (equal cost)."""
    schemes = ["gcc", {"label": "rep6", "code": "replication", "params": {"num_workers": 6, "fill": "linear"}},
               "replication"]
    run = gd.run_pipeline(_entries_cfg(tmp_path / "r.zarr", schemes), client=client)
    root = zarr.open_group(str(run.path), mode="r")
    assert root["rep6/received"].shape == (6, 6) and (root["rep6/n_received"][:] == 5).all()
    assert root["replication/received"].shape == (6, 8)  # code.num_workers, the same N as gcc
    assert run.summary.loc["rep6", "missing"] == 0
    assert run.summary.loc["rep6", "num_workers"] == 6 and run.summary.loc["replication", "num_workers"] == 8
    assert root["rep6"].attrs["code"]["extra"] == "spread" and root["rep6"].attrs["code_name"] == "replication"


# ----------------------------------------------------------------------------------------------- config
def test_scheme_entries_resolve_to_labels_with_their_own_parameters():
    cfg = load_config("pipelines/mnist_lenet.yaml", [
        "schemes=[gcc, {label: rep-12, code: replication, params: {num_workers: 12, fill: linear}}, "
        "{label: gcc-10, code: gcc, params: {num_workers: 10, points: chebyshev}}, uncoded]"])
    assert cfg.schemes == ["gcc", "rep-12", "gcc-10", "uncoded"]
    assert [cfg.workers_for(s) for s in cfg.schemes] == [16, 12, 10, 8]
    assert cfg.code_of("rep-12") == "replication" and cfg.stop_of("rep-12") == "cutoff"
    assert cfg.code_params("rep-12") == {"nan_policy": "raise", "fill": "linear", "extra": "spread"}
    assert cfg.code_params("gcc-10")["points"] == "chebyshev" and cfg.code_params("gcc")["points"] == "systematic"
    assert cfg.stop_of("uncoded") == "all"
    again = load_config(cfg.resolved(), check_paths=False)  # the resolved form round-trips
    assert again.fingerprint() == cfg.fingerprint() and again.scheme_entries == cfg.scheme_entries


def test_replication_copies_and_uncoded_stop():
    cfg = load_config("pipelines/mnist_lenet.yaml", ["replication.copies=3", "uncoded.stop=cutoff",
                                                     "uncoded.fill=nearest"])
    assert cfg.workers_for("replication") == 24 and cfg.stop_of("uncoded") == "cutoff"
    assert cfg.code_params("uncoded") == {"nan_policy": "raise", "fill": "nearest"}


@pytest.mark.parametrize(("override", "match"), [
    ("schemes=[{label: x, code: replication, params: {fil: linear}}]",
     r"^schemes.x.params.fil: got 'linear'; expected no such parameter for code 'replication' \(valid: copies, "
     r"extra, stop, fill, num_workers\)$"),
    ("schemes=[{label: x, code: replication, params: {fill: lin}}]",
     r"^schemes.x.params.fill: got 'lin'; expected 'none', 'nearest' or 'linear'$"),
    ("schemes=[{label: x/y, code: gcc}]", r"^schemes.0.label: got 'x/y'; expected a label of letters"),
    ("schemes=[{label: x, code: nope}]", r"^schemes.0.code: got 'nope'; expected one of bacc"),
    ("schemes=[{label: x, code: uncoded, params: {num_workers: 12}}]",
     r"^schemes.x.params.num_workers: got 12; expected no such parameter for code 'uncoded'"),
    ("schemes=[{label: x, code: gcc, params: {num_workers: 4}}]",
     r"^schemes.x.params.num_workers: got 4; expected an integer >= code.num_inputs = 8"),
    ("schemes=[{label: x, code: replication, params: {num_workers: 12, copies: 2}}]",
     r"^schemes.x.params.copies: got 2; expected no copies beside num_workers"),
    ("schemes=[{label: x, code: gcc, extra: 1}]", r"^schemes.0.extra: got 1; expected no such key"),
    ("schemes=[{label: gcc, code: gcc}, {label: gcc, code: bacc}]", r"^schemes.1.label: got 'gcc'; expected a label "
                                                                    r"used once"),
    ("schemes=[{label: u, code: uncoded, params: {stop: cutoff}}]",
     None),  # valid: S = 4 < K = 8
    ("schemes=[{label: inputs, code: gcc}]", r"^schemes.0.label: got 'inputs'; expected a label other than 'inputs'"),
    ("schemes=[{label: -x, code: gcc}]", r"^schemes.0.label: got '-x'; expected a label of letters, digits, '_' or "
                                         r"'-' that starts with a letter or a digit"),
    ("name=_x", r"^name: got '_x'; expected a name of letters, digits, '.', '_' or '-' that starts with a letter"),
    ("replication.extra=foo", r"^replication.extra: got 'foo'; expected 'spread', 'ends' or a list of distinct "
                              r"positions \(integers >= 0\)"),
    ("schemes=[{label: r, code: replication, params: {extra: foo}}]",
     r"^schemes.r.params.extra: got 'foo'; expected 'spread', 'ends' or a list"),
    ("schemes=[{label: r, code: replication, params: {num_workers: 12, extra: [0]}}]",
     r"^schemes.r.params.extra: got \[0\]; expected 'spread', 'ends' or 4 distinct positions in \[0, 8\)"),
    ("schemes=[{label: g, code: gcc, params: {points: {alpha: [0, 0, 0, 0, 0, 0, 0, 0]}}}]",
     r"^schemes.g.params.points: got \{'alpha'"),
], ids=["unknown-param", "bad-fill", "slash-label", "unknown-code", "uncoded-n", "gcc-n-below-k", "copies-and-n",
        "unknown-entry-key", "repeated-label", "uncoded-cutoff-ok", "inputs-label", "label-first-char",
        "name-first-char", "extra-word", "entry-extra-word", "entry-extra-length", "entry-points"])
def test_bad_scheme_entries_are_one_line(override, match):
    if match is None:
        assert load_config("pipelines/mnist_lenet.yaml", [override]).stop_of("u") == "cutoff"
        return
    with pytest.raises(ConfigError, match=match) as info:
        load_config("pipelines/mnist_lenet.yaml", [override])
    assert "\n" not in str(info.value)


def test_uncoded_at_a_cutoff_needs_s_below_k():
    with pytest.raises(ConfigError, match=r"cutoff.stragglers: got 8; expected S < 8, the N of scheme 'u'.*"
                                          r"uncoded.stop: all"):
        load_config("pipelines/mnist_lenet.yaml", ["schemes=[gcc, {label: u, code: uncoded, params: {stop: cutoff}}]",
                                                   "cutoff.stragglers=8"])
