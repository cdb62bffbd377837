"""Tests for gcc_dask.config: valid configs, a table of bad ones, overrides, paths, fingerprints, fuzzing."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gcc_dask.config import SCHEMES, PipelineConfig, load_config, parse_duration
from gcc_dask.errors import ConfigError

BASE = {
    "name": "mnist-lenet",
    "source": {"kind": "mnist", "split": "test", "limit": None},
    "workload": {"kind": "analytic", "name": "xsinx"},
    "code": {"num_inputs": 8, "num_workers": 16},
    "schemes": ["gcc", "bacc", "replication", "uncoded"],
    "gcc": {"kernel": "sobolev2", "lambda_enc": 0.0, "lambda_dec": 0.0},
    "stragglers": {"model": "shifted_exponential", "shift": "20ms", "scale": "10ms", "hang_prob": 0.1,
                   "hang_delay": "2s", "seed": 0},
    "cutoff": {"wait_for": "N-S", "stragglers": 4, "deadline": "1s", "on_shortfall": "decode"},
    "cluster": {"address": None, "n_workers": None, "gpu": "auto"},
    "store": {"path": "runs/mnist-lenet.zarr", "overwrite": False},
}


def with_value(key: str, value, base=BASE) -> dict:
    """A deep copy of `base` with dotted `key` set to `value` (the sentinel DELETE removes it)."""
    data = copy.deepcopy(base)
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    if value is DELETE:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value
    return data


DELETE = object()


# ---------------------------------------------------------------------------------------- valid
def test_design_example_loads_with_resolved_defaults():
    cfg = load_config(BASE)
    assert isinstance(cfg, PipelineConfig)
    assert cfg.stragglers.shift == pytest.approx(0.02)
    assert cfg.stragglers.scale == pytest.approx(0.01)
    assert cfg.stragglers.hang_delay == 2.0
    assert cfg.cutoff.deadline == 1.0
    assert cfg.cutoff.quantile is None
    assert cfg.run.max_batches_in_flight == 16
    assert cfg.run.reference is True
    assert cfg.replication.copies is None and cfg.replication.stop == "cutoff" and cfg.replication.fill == "linear"
    assert cfg.workers_for("replication") == cfg.code.num_workers  # equal cost: the coded schemes' N
    assert cfg.code.block_size == "auto" and cfg.composition.policy == "similarity"
    assert cfg.seed == 0
    assert cfg.store.path.endswith("runs/mnist-lenet.zarr") and cfg.store.path.startswith("/")


def test_workers_for_and_wait_for():
    cfg = load_config(BASE)
    assert [cfg.workers_for(s) for s in ("gcc", "bacc", "replication", "uncoded")] == [16, 16, 16, 8]
    assert cfg.wait_for_count("gcc") == 12
    assert cfg.wait_for_count("uncoded") == 4
    cfg = load_config(BASE, ["replication.copies=3", "cutoff.wait_for=all"])
    assert cfg.workers_for("replication") == 24
    assert cfg.wait_for_count("gcc") == 16
    cfg = load_config(BASE, ["cutoff.wait_for=10"])
    assert (cfg.wait_for_count("gcc"), cfg.wait_for_count("uncoded")) == (10, 8)
    with pytest.raises(ConfigError, match="scheme: got 'nope'"):
        cfg.workers_for("nope")


def test_code_params():
    cfg = load_config(BASE, ["gcc.lambda_dec=gcv", "gcc.length_scale=0.5", "schemes=[gcc,lcc,uncoded]",
                             "lcc.degree=2", "code.num_workers=20"])
    assert cfg.code_params("gcc") == {"nan_policy": "raise", "points": "systematic", "kernel": "sobolev2",
                                      "lambda_enc": 0.0, "lambda_dec": "gcv", "length_scale": 0.5}
    assert cfg.code_params("lcc") == {"nan_policy": "raise", "points": "systematic", "degree": 2}
    assert cfg.code_params("uncoded") == {"nan_policy": "raise"}


def test_frozen():
    cfg = load_config(BASE)
    with pytest.raises(ValidationError):
        cfg.code.num_inputs = 3


@pytest.mark.parametrize(("text", "seconds"), [("50ms", 0.05), ("2s", 2.0), (3, 3.0), (0.5, 0.5),
                                               ("1 minute", 60.0), (" 3 ms ", 0.003), (".5s", 0.5),
                                               ("1e3ms", 1.0), ("1d", 86400.0), (86400, 86400.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_schemes_match_coding_registry():
    coding = pytest.importorskip("gcc_dask.coding")
    if not hasattr(coding, "list_codes"):
        pytest.skip("gcc_dask.coding.list_codes not implemented yet")
    assert tuple(sorted(SCHEMES)) == tuple(n for n in coding.list_codes() if n in SCHEMES)
    assert set(SCHEMES) <= set(coding.list_codes())


# ------------------------------------------------------------------------------------------ bad
BAD = [
    ("unknown-top-key", "colour", "blue", "colour: got unknown key 'colour'; expected one of: name, source"),
    ("unknown-section-key", "cutoff.wait", 3, "cutoff.wait: got unknown key 'wait'; expected one of: wait_for"),
    ("wrong-type-int", "code.num_inputs", "eight", "code.num_inputs: got 'eight'; expected a valid integer"),
    ("float-for-int", "code.num_workers", 16.5, "code.num_workers: got 16.5"),
    ("bool-for-int", "code.num_inputs", True, "code.num_inputs: got True"),
    ("zero-inputs", "code.num_inputs", 0, "code.num_inputs: got 0; expected a number greater than or equal"),
    ("section-not-mapping", "code", [8, 16], "code: got [8, 16]; expected a mapping with keys num_inputs"),
    ("missing-section", "code", DELETE, "code: got nothing; expected a section with at least num_inputs (it cannot "
                                        "be left out: num_inputs has no default; keys: num_inputs, num_workers"),
    ("missing-key", "code.num_workers", DELETE, "code.num_workers: got nothing"),
    ("K-greater-than-N", "code.num_workers", 4, "code.num_workers: got 4; expected an integer >= code.num_inputs = 8"),
    ("S-equals-N", "cutoff.stragglers", 16, "cutoff.stragglers: got 16; expected an integer S with 0 <= S < N = 16"),
    ("S-negative", "cutoff.stragglers", -1, "cutoff.stragglers: got -1"),
    ("wait_for-gt-N", "cutoff.wait_for", 17, "cutoff.wait_for: got 17; expected 'N-S', 'all' or an integer in [1, 16]"),
    ("wait_for-word", "cutoff.wait_for", "most", "cutoff.wait_for: got 'most'"),
    ("negative-lambda-enc", "gcc.lambda_enc", -0.1, "gcc.lambda_enc: got -0.1; expected a number greater than"),
    ("negative-lambda-dec", "gcc.lambda_dec", -1, "gcc.lambda_dec: got -1; expected a number >= 0 or 'gcv'"),
    ("nan-lambda", "gcc.lambda_enc", math.nan, "gcc.lambda_enc: got nan; expected a finite number"),
    ("bad-kernel", "gcc.kernel", "rbf", "gcc.kernel: got 'rbf'; expected 'sobolev2'"),
    ("zero-length-scale", "gcc.length_scale", 0.0, "gcc.length_scale: got 0.0"),
    ("bad-duration", "cutoff.deadline", "soon", "cutoff.deadline: got 'soon'; expected a duration"),
    ("negative-duration", "stragglers.shift", -0.5, "stragglers.shift: got -0.5; expected a duration"),
    ("bool-duration", "cutoff.min_runtime", True, "cutoff.min_runtime: got True"),
    ("bad-scheme", "schemes", ["gcc", "ldpc"], "schemes: got 'ldpc'; expected scheme names from bacc"),
    ("empty-schemes", "schemes", [], "schemes: got []; expected a non-empty list"),
    ("duplicate-schemes", "schemes", ["gcc", "gcc"], "schemes: got ['gcc', 'gcc']"),
    ("hang-prob-1.5", "stragglers.hang_prob", 1.5, "stragglers.hang_prob: got 1.5; expected a number less than 1"),
    ("hang-prob-1", "stragglers.hang_prob", 1.0, "stragglers.hang_prob: got 1.0"),
    ("bad-latency-model", "stragglers.model", "weibull", "stragglers.model: got 'weibull'"),
    ("slow-factor-below-1", "stragglers.slow_factor", 0.5, "stragglers.slow_factor: got 0.5"),
    ("too-many-slow-workers", "stragglers.slow_workers", 17, "stragglers.slow_workers: got 17"),
    ("quantile-zero", "cutoff.quantile", 0.0, "cutoff.quantile: got 0.0"),
    ("quantile-above-1", "cutoff.quantile", 1.5, "cutoff.quantile: got 1.5"),
    ("multiplier-below-1", "cutoff.multiplier", 0.9, "cutoff.multiplier: got 0.9"),
    ("bad-shortfall", "cutoff.on_shortfall", "retry", "cutoff.on_shortfall: got 'retry'; expected 'wait'"),
    ("zero-copies", "replication.copies", 0, "replication.copies: got 0"),
    ("bad-gpu", "cluster.gpu", "yes", "cluster.gpu: got 'yes'; expected 'auto', true or false"),
    ("address-and-file", "cluster.scheduler_file", "/tmp/s.json", "cluster.scheduler_file: got '/tmp/s.json'"),
    ("bad-nan-policy", "run.nan_policy", "ignore", "run.nan_policy: got 'ignore'"),
    ("zero-in-flight", "run.max_batches_in_flight", 0, "run.max_batches_in_flight: got 0"),
    ("reference-not-bool", "run.reference", "yes", "run.reference: got 'yes'; expected true or false"),
    ("bad-source-kind", "source.kind", "imagenet", "source.kind: got 'imagenet'; expected 'mnist'"),
    ("key-of-other-kind", "source.num_samples", 10,
     "source.num_samples: got 10; expected no such key for source kind 'mnist'"),
    ("bad-split", "source.split", "val", "source.split: got 'val'; expected 'all', 'train' or 'test'"),
    ("bad-workload-kind", "workload.kind", "tf", "workload.kind: got 'tf'"),
    ("bad-analytic-name", "workload.name", "sin", "workload.name: got 'sin'; expected one of 'xsinx'"),
    ("params-not-json", "workload.params", {"x": math.inf}, "workload.params: got {'x': inf}"),
    ("bad-name", "name", "my run!", "name: got 'my run!'"),
    # bounds no cluster meets (gcc_dask.limits): refused up front, not after allocating or sleeping
    ("workers-1e5", "code.num_workers", 100_000,
     "code.num_workers: got 100000; expected an integer from 1 to 65,536 (one Dask task per worker per batch"),
    ("workers-2e9", "code.num_workers", 2 * 10**9, "code.num_workers: got 2000000000; expected an integer from 1"),
    ("inputs-1e5", "code.num_inputs", 100_000,
     "code.num_inputs: got 100000; expected an integer from 1 to 65,536 (inputs per batch)"),
    ("encoder-1GiB", "code", {"num_inputs": 8192, "num_workers": 16384},
     "code.num_workers: got 16384; expected num_inputs * num_workers <= 67,108,864 for scheme 'gcc': here "
     "K = 8,192 and N = 16,384, so its (N, K) encoder matrix alone would take 1.0 GiB"),
    ("window-1e9", "composition.window", 10**9,
     "composition.window: got 1000000000; expected an integer from 1 to 65,536 (samples read and chained at once"),
    ("fit-samples-1e9", "composition.fit_samples", 10**9,
     "composition.fit_samples: got 1000000000; expected an integer from 1 to 65,536 (samples read at once, as "
     "float64"),
    ("leaf-zero", "composition.leaf", 0, "composition.leaf: got 0; expected a number greater than or equal to 1"),
    ("leaf-word", "composition.leaf", "big", "composition.leaf: got 'big'; expected a valid integer"),
    ("leaf-1e9", "composition.leaf", 10**9,
     "composition.leaf: got 1000000000; expected an integer from 1 to 65,536 (samples chained at once"),
    ("policy-unknown", "composition.policy", "kdtree", "composition.policy: got 'kdtree'; expected "),
    ("replication-1e6-copies", "replication.copies", 10**6,
     "replication.copies: got 1000000; expected a value with at most 65,536 workers for scheme 'replication'"),
    ("hang-delay-1e12", "stragglers.hang_delay", 1e12,
     "stragglers.hang_delay: got 1000000000000.0; expected a duration such as '50ms' or '2s' (a number and a "
     "unit), or a number of seconds, from 0 to 86400 (1 day); no run should wait longer"),
    ("deadline-2-days", "cutoff.deadline", "2 days", "cutoff.deadline: got '2 days'; expected a duration"),
    ("timeout-huge-int", "cluster.connect_timeout", 10**400, "cluster.connect_timeout: got 1000000000"),
    ("duration-underscore", "stragglers.shift", "1_000",
     "stragglers.shift: got '1_000'; expected a duration such as '50ms' or '2s' (a number and a unit), or a "
     "number of seconds, from 0 to 86400 (1 day); a string without '_' (such as '1000s')"),
    ("duration-no-unit", "stragglers.scale", "10", "stragglers.scale: got '10'; expected a duration such as "
     "'50ms' or '2s' (a number and a unit), or a number of seconds, from 0 to 86400 (1 day); a string needs a "
     "unit (such as '10s' for seconds, or a number without quotes)"),
    ("duration-yaml-exponent", "cutoff.deadline", "1e-3", "cutoff.deadline: got '1e-3'; expected a duration such "
     "as '50ms' or '2s' (a number and a unit), or a number of seconds, from 0 to 86400 (1 day); a string needs a "
     "unit (such as '1e-3s' for seconds, or a number without quotes; YAML reads 1e-3 as a string, 1.0e-3 as a "
     "number)"),
    ("duration-signed", "cutoff.min_runtime", "+1s", "cutoff.min_runtime: got '+1s'; expected a duration"),
    ("duration-unit-only", "cutoff.min_runtime", "s", "cutoff.min_runtime: got 's'; expected a duration"),
    ("duration-split-digits", "cutoff.deadline", "3 0s", "cutoff.deadline: got '3 0s'; expected a duration"),
]


@pytest.mark.parametrize(("key", "value", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_rejected_with_one_line(key, value, message):
    data = with_value(key, value)
    if key == "cluster.scheduler_file":
        data["cluster"]["address"] = "tcp://127.0.0.1:8786"
        data["cluster"]["scheduler_file"] = "/tmp/s.json"
    with pytest.raises(ConfigError) as info:
        load_config(data, check_paths=False)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(message), text


@pytest.mark.parametrize(("schemes", "extra", "n"), [
    (["uncoded"], [], {"uncoded": 8}),
    (["uncoded", "speculative"], ["speculation.copies=2"], {"uncoded": 8, "speculative": 24}),
    (["replication"], ["replication.copies=2"], {"replication": 16}),
    ([{"label": "g", "code": "gcc", "params": {"num_workers": 12}}], [], {"g": 12}),
])
def test_code_num_workers_may_be_left_out_when_every_scheme_sets_its_n(schemes, extra, n):
    data = copy.deepcopy(BASE)
    del data["code"]["num_workers"]
    data["schemes"] = schemes
    data["cutoff"]["stragglers"] = 2
    cfg = load_config(data, extra, check_paths=False)
    assert cfg.code.num_workers is None and {s: cfg.workers_for(s) for s in cfg.schemes} == n


@pytest.mark.parametrize(("schemes", "why"), [
    (["uncoded", "gcc"], "scheme 'gcc' runs on N workers"),
    (["replication"], "scheme 'replication' runs on N workers"),
    (["auto"], "schemes: [auto] chooses an estimator within N workers"),
])
def test_code_num_workers_is_required_by_a_scheme_that_runs_on_it(schemes, why):
    data = copy.deepcopy(BASE)
    del data["code"]["num_workers"]
    data["schemes"] = schemes
    data["cutoff"]["stragglers"] = 2
    with pytest.raises(ConfigError) as info:
        load_config(data, check_paths=False)
    assert str(info.value) == ("code.num_workers: got nothing; expected an integer N >= K = 8 (this key is required: "
                               f"{why}; only uncoded, speculative, replication.copies and entries with their own "
                               "num_workers set N themselves)")


@pytest.mark.parametrize("overrides", [
    ["schemes=[uncoded]", "code.num_inputs=4", "code.num_workers=4"],
    ["schemes=[speculative]", "code.num_inputs=1", "code.num_workers=1"],
    ["schemes=[replication]", "replication.stop=recovery", "code.num_inputs=4", "code.num_workers=4"],
    ["schemes=[uncoded]", "code.num_inputs=4", "code.num_workers=4", "cutoff.wait_for=9"],
], ids=["uncoded", "speculative", "replication-recovery", "wait-for"])
def test_s_and_wait_for_are_not_checked_against_schemes_that_never_read_them(overrides):
    """S = 4 (and wait_for) bound only the schemes that stop at the cutoff: uncoded (stop: all), speculative and
    replication at recovery wait for their inputs whatever S is."""
    cfg = load_config(BASE, overrides, check_paths=False)
    assert cfg.cutoff.stragglers == 4


def test_s_is_still_checked_against_the_schemes_at_the_cutoff():
    with pytest.raises(ConfigError, match=r"^cutoff.stragglers: got 4; expected an integer S with 0 <= S < N = 4 "):
        load_config(BASE, ["schemes=[uncoded, gcc]", "code.num_inputs=4", "code.num_workers=4"], check_paths=False)


def _sections(model) -> dict[str, bool]:
    """The sections of `model` (fields that are pydantic models), and whether each is required."""
    from pydantic import BaseModel

    return {name: field.is_required() for name, field in model.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)}


def _left_out_paragraph() -> str:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "configuration.rst").read_text(encoding="utf-8")
    assert "A whole section may be left out" not in text
    return text.split("Sections that may be left out", 1)[1].split("\nOverrides", 1)[0]


def test_docs_and_behaviour_agree_on_which_sections_may_be_left_out():
    """docs/configuration.rst, 'Sections that may be left out' (issue 37, item 8): every pipeline section but the
    ones it names loads when left out or null (its defaults apply); each one it names is refused in one line
    saying what it needs. The same for a sweep."""
    from gcc_dask.sweep_config import SweepConfig, load_sweep_config

    said = _left_out_paragraph()
    minimal = {"source": {"kind": "synthetic", "num_samples": 40, "shape": [5]},
               "workload": {"kind": "analytic", "name": "xsinx"},
               "code": {"num_inputs": 4, "num_workers": 8}, "schemes": ["gcc", "uncoded"]}
    sweep = {"function": {"kind": "xsinx"}, "schemes": ["gcc"], "code": {"num_inputs": [4], "num_workers": [9]},
             "stragglers": {"model": "fixed_count", "S": [1]}}
    for model, base, load, required in ((PipelineConfig, minimal, lambda d: load_config(d, check_paths=False),
                                         ["source", "workload", "code"]),
                                        (SweepConfig, sweep, load_sweep_config, ["function", "code", "stragglers"])):
        sections = _sections(model)
        assert [name for name, needed in sections.items() if needed] == required
        load(base)
        for name, needed in sections.items():
            for value in (DELETE, None):
                data = with_value(name, value, base)
                if needed:
                    assert f"``{name}``" in said
                    with pytest.raises(ConfigError, match=rf"^{name}: got nothing; expected a section with at least "
                                                          r"\w+.* \(it cannot be left out: .* no default; keys: "):
                        load(data)
                else:
                    load(data)  # its defaults apply


def test_null_means_not_set_the_default_applies():
    """docs/configuration.rst: ``key: null`` is the default, for any key whose type has no None of its own;
    a required key set to null is missing; a key that admits None keeps it."""
    default = load_config(BASE, check_paths=False)
    cfg = load_config(BASE, ["speculation.copies=null", "code.block_size=null", "gcc.kernel=null",
                             "composition.policy=null", "run.max_batches_in_flight=null"], check_paths=False)
    assert cfg.speculation.copies == 2 and cfg.code.block_size == "auto" and cfg.composition.policy == "similarity"
    assert cfg.gcc.kernel == default.gcc.kernel and cfg.run.max_batches_in_flight == default.run.max_batches_in_flight
    assert load_config(BASE, ["cutoff.deadline=null"], check_paths=False).cutoff.deadline is None  # no deadline
    with pytest.raises(ConfigError, match=r"^code.num_inputs: got nothing; expected a value \(this key is required\)$"):
        load_config(BASE, ["code.num_inputs=null"], check_paths=False)


def test_lcc_recovery_threshold():
    with pytest.raises(ConfigError, match=r"code.num_workers: got 16; expected an integer >= \(K - 1\)"):
        load_config(BASE, ["schemes=[lcc]", "lcc.degree=3"])
    assert load_config(BASE, ["schemes=[lcc]", "lcc.degree=2", "code.num_workers=15"]).lcc.degree == 2


def test_synthetic_source_requires_its_keys_and_defaults_seed():
    with pytest.raises(ConfigError, match="source.num_samples: got None; expected a value: source kind"):
        load_config(with_value("source", {"kind": "synthetic", "shape": [4]}))
    cfg = load_config(with_value("source", {"kind": "synthetic", "num_samples": 64, "shape": (1, 4)}))
    assert cfg.source.shape == [1, 4] and cfg.source.seed == 0
    assert cfg.resolved()["source"] == {"kind": "synthetic", "num_samples": 64, "shape": [1, 4], "seed": 0,
                                        "limit": None}


def test_array_source_is_summarised_and_fingerprinted_by_content():
    x = np.zeros((10, 3), np.float32)
    cfg = load_config(with_value("source", {"kind": "array", "array": x}))
    summary = cfg.resolved()["source"]["array"]
    assert summary["shape"] == [10, 3] and summary["dtype"] == "float32"
    other = load_config(with_value("source", {"kind": "array", "array": x + 1}))
    assert cfg.fingerprint() != other.fingerprint()
    with pytest.raises(ConfigError, match="source.array: got"):
        load_config(with_value("source", {"kind": "array", "array": [1, 2]}))
    assert load_config(cfg, ["cutoff.stragglers=2"]).source.array is x


# ------------------------------------------------------------------------------------ overrides
def test_overrides_parse_yaml_scalars():
    cfg = load_config(BASE, ["cutoff.stragglers=2", "cutoff.deadline=null", "schemes=[gcc, uncoded]",
                             "gcc.lambda_dec=gcv", "stragglers.shift=5ms", "run.progress=false",
                             "workload.params.scale=2.5", "store.path=/tmp/x.zarr"])
    assert cfg.cutoff.stragglers == 2 and cfg.cutoff.deadline is None
    assert cfg.schemes == ["gcc", "uncoded"]
    assert cfg.gcc.lambda_dec == "gcv"
    assert cfg.stragglers.shift == pytest.approx(0.005)
    assert cfg.run.progress is False
    assert cfg.workload.params == {"scale": 2.5}
    assert cfg.store.path == "/tmp/x.zarr"
    assert BASE["cutoff"]["stragglers"] == 4  # the input mapping is not mutated


def test_override_creates_missing_sections():
    cfg = load_config(with_value("cutoff", DELETE), ["cutoff.quantile=0.75"])
    assert cfg.cutoff.quantile == 0.75


@pytest.mark.parametrize(("item", "message"), [
    ("cutoff.wait=3", "cutoff.wait: got unknown key 'wait' (from --set 'cutoff.wait=3'); expected one of "
                      "the keys of cutoff: wait_for, stragglers"),
    ("colour=blue", "colour: got unknown key 'colour'"),
    ("code.num_inputs.x=1", "--set code.num_inputs.x: got '1'; expected a key path"),
    ("stragglers", "--set: got 'stragglers'; expected KEY=VALUE"),
    ("=3", "--set: got '=3'; expected KEY=VALUE"),
    ("code.num_workers=four", "code.num_workers: got 'four'; expected a valid integer"),
], ids=["unknown-sub-key", "unknown-top-key", "leaf-has-no-children", "no-equals", "empty-key", "bad-value"])
def test_bad_overrides(item, message):
    with pytest.raises(ConfigError) as info:
        load_config(BASE, [item])
    assert str(info.value).startswith(message), str(info.value)


# ------------------------------------------------------------------------------ files and paths
def test_yaml_file_records_path_and_default_name(tmp_path, monkeypatch):
    data = with_value("name", DELETE)
    del data["store"]
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    cfg = load_config(str(path))
    assert cfg.name == "smoke"
    assert cfg.config_path == str(path) and cfg.base_dir == str(tmp_path)
    assert cfg.store.path == str(tmp_path / "runs" / "smoke.zarr")


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match=r"config file: got '.*nope.yaml'; expected an existing YAML file"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncode: {num_inputs: 8\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: got invalid YAML at line \d+"):
        load_config(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text(yaml.safe_dump(BASE) + "name: again\n")
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        load_config(dup)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="list.yaml: got \\[1, 2\\]; expected a YAML mapping"):
        load_config(lst)
    with pytest.raises(ConfigError, match="config: got 42"):
        load_config(42)


def test_relative_input_paths_resolve_from_the_project(tmp_path, monkeypatch):
    (tmp_path / "pipelines" / "models").mkdir(parents=True)
    model = tmp_path / "pipelines" / "models" / "net.onnx"
    model.write_bytes(b"onnx")
    data = with_value("workload", {"kind": "onnx", "path": "pipelines/models/net.onnx"})
    cfg_file = tmp_path / "pipelines" / "job.yaml"
    cfg_file.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path / "pipelines")  # neither the cwd nor the YAML's directory holds the path
    assert load_config(cfg_file).workload.path == str(model)
    with pytest.raises(ConfigError, match="workload.path: got 'missing.onnx'; expected an existing file"):
        load_config(cfg_file, ["workload.path=missing.onnx"])
    assert load_config(cfg_file, ["workload.path=missing.onnx"], check_paths=False).workload.path == "missing.onnx"


# -------------------------------------------------------------------------- resolved / fingerprint
def test_resolved_is_json_and_round_trips():
    cfg = load_config(BASE)
    resolved = cfg.resolved()
    assert json.loads(json.dumps(resolved)) == resolved
    assert resolved["source"] == {"kind": "mnist", "split": "test", "limit": None}
    again = load_config(resolved)
    assert again == cfg and again.fingerprint() == cfg.fingerprint()


@pytest.mark.parametrize("override", ["store.path=/elsewhere.zarr", "store.overwrite=true",
                                      "cluster.n_workers=7", "cluster.address=tcp://h:8786",
                                      "run.progress=false", "run.max_batches_in_flight=9",
                                      "run.limit_batches=3"])
def test_fingerprint_ignores_where_and_how(override):
    assert load_config(BASE, [override]).fingerprint() == load_config(BASE).fingerprint()


@pytest.mark.parametrize("override", ["cutoff.stragglers=3", "stragglers.seed=1", "gcc.lambda_dec=0.1",
                                      "source.limit=100", "schemes=[gcc]"])
def test_fingerprint_tracks_what_determines_results(override):
    assert load_config(BASE, [override]).fingerprint() != load_config(BASE).fingerprint()


# ------------------------------------------------------------------------------------- fuzzing
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-20, 40), st.integers(),
                  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                  st.sampled_from(["N-S", "all", "gcv", "auto", "50ms", "2s", "-1s", "1e400s", "gcc", "mnist",
                                   "synthetic", "npy", "onnx", "analytic", "xsinx", "pareto", ""]))
_values = st.recursive(_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                     st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                       max_leaves=12)
_known_keys = sorted({"name", "source", "workload", "code", "schemes", "gcc", "lcc", "replication",
                      "stragglers", "cutoff", "cluster", "store", "run", "kind", "path", "num_inputs",
                      "num_workers", "wait_for", "stragglers", "deadline", "lambda_dec", "hang_prob",
                      "shape", "num_samples", "array", "labels", "params", "gpu", "copies", "degree"})


def _check(data, overrides=()):
    try:
        cfg = load_config(data, overrides)
    except ConfigError as exc:
        assert "\n" not in str(exc) and ": " in str(exc)
    else:
        assert isinstance(cfg, PipelineConfig)
        json.dumps(cfg.resolved())
        assert len(cfg.fingerprint()) == 64


@given(st.dictionaries(st.one_of(st.sampled_from(_known_keys), st.text(max_size=6), st.integers()),
                       _values, max_size=8))
def test_fuzz_random_mappings_only_raise_config_error(data):
    _check(data)


@given(key=st.sampled_from(sorted({f"{s}.{k}" for s, sec in BASE.items() if isinstance(sec, dict)
                                   for k in sec} | set(BASE) |
                                  {"cutoff.quantile", "cutoff.multiplier", "cutoff.min_runtime",
                                   "run.limit_batches", "lcc.degree", "replication.copies", "source.path",
                                   "gcc.length_scale", "stragglers.alpha", "workload.params"})),
       value=_values, key2=st.sampled_from(["schemes", "code.num_workers", "source.kind", "workload.kind"]),
       value2=_values)
def test_fuzz_mutated_valid_configs_only_raise_config_error(key, value, key2, value2):
    _check(with_value(key2, value2, with_value(key, value)))
    _check(with_value(key, value))


@given(st.lists(st.text(max_size=24) | st.builds(lambda k, v: f"{k}={v}", st.sampled_from(_known_keys + [
    "cutoff.stragglers", "gcc.lambda_enc", "code.num_inputs", "workload.params.a", "source.kind"]),
    st.text(max_size=10)), max_size=3))
def test_fuzz_overrides_only_raise_config_error(overrides):
    _check(BASE, overrides)


# ----------------------------------------------------------------------------- what a typo is reported as
def test_a_typo_in_a_required_key_names_the_typo_and_the_key_meant():
    data = copy.deepcopy(BASE)
    data["code"] = {"num_inputs": 8, "num_worker": 16}  # num_workers is then missing too
    with pytest.raises(ConfigError) as info:
        load_config(data, check_paths=False)
    assert str(info.value).startswith("code.num_worker: got unknown key 'num_worker' (did you mean 'num_workers'?); "
                                      "expected one of: num_inputs, num_workers, block_size, points")


def test_unknown_keys_come_before_path_checks(tmp_path):
    config = tmp_path / "job.yaml"
    yaml.safe_dump({**BASE, "workload": {"kind": "onnx", "path": "missing.onnx"}, "straglers": {}}, config.open("w"))
    with pytest.raises(ConfigError, match=r"^straglers: got unknown key 'straglers' \(did you mean 'stragglers'\?\)"):
        load_config(config)  # not "workload.path: ... expected an existing file"
    yaml.safe_dump({**BASE, "workload": {"kind": "onnx", "path": "missing.onnx"},
                    "code": {"num_inputs": 8, "num_worker": 16}}, config.open("w"))
    with pytest.raises(ConfigError, match=r"^code\.num_worker: got unknown key"):
        load_config(config)


def test_an_unrelated_unknown_key_gets_no_suggestion():
    with pytest.raises(ConfigError) as info:
        load_config({**BASE, "colour": 1}, check_paths=False)
    assert "did you mean" not in str(info.value)


def test_the_keys_an_error_offers_are_those_a_user_writes():
    """`scheme_entries` is filled from the entries of `schemes`: no error lists it among the keys to write (a new
    user, given the top level's keys after a typo, asked what it was)."""
    from gcc_dask.config import PipelineConfig

    assert "scheme_entries" in PipelineConfig.model_fields  # still a field of the validated config
    with pytest.raises(ConfigError) as info:
        load_config({**BASE, "cutof": {}}, check_paths=False)
    assert "did you mean 'cutoff'" in str(info.value) and "scheme_entries" not in str(info.value)
    assert "schemes" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(BASE, ["cutof.stragglers=3"], check_paths=False)
    assert "did you mean 'cutoff'" in str(info.value) and "scheme_entries" not in str(info.value)


def test_a_sweep_file_given_as_a_pipeline_says_so():
    from gcc_dask.sweep_config import load_sweep_config

    with pytest.raises(ConfigError, match=r"^config: got a sweep file \(it has 'function'.*'trials'.*run a sweep "
                                          r"with `gcc-dask sweep FILE`"):
        load_config("pipelines/rate_worst_case.yaml")
    with pytest.raises(ConfigError, match=r"^sweep config: got a pipeline file \(it has 'source', 'workload'.*run a "
                                          r"pipeline with `gcc-dask run FILE`"):
        load_sweep_config("pipelines/smoke.yaml")
    with pytest.raises(ConfigError, match=r"^trails: got unknown key 'trails' \(did you mean 'trials'\?\)"):
        load_sweep_config({"function": {"kind": "xsinx"}, "schemes": ["gcc"], "trails": 3,
                           "code": {"num_inputs": [4], "num_workers": [9]},
                           "stragglers": {"model": "fixed_count", "S": [1]}})


def test_an_in_memory_function_is_a_python_only_workload_key():
    f = lambda x: x  # noqa: E731
    cfg = load_config({**BASE, "workload": {"kind": "callable", "function": f}}, check_paths=False)
    assert cfg.workload.function is f
    assert cfg.resolved()["workload"]["function"] == ("<python object test_config:"
                                                      "test_an_in_memory_function_is_a_python_only_workload_key.<locals>.<lambda>>")
    again = load_config(cfg, overrides=["code.num_workers=12"])  # the object survives an override
    assert again.workload.function is f
    with pytest.raises(ConfigError, match=r"workload\.name: got <ufunc 'sin'>; expected a string \(from Python, pass "
                                          r"the callable itself as workload\.function\)"):
        load_config({**BASE, "workload": {"kind": "callable", "name": np.sin}}, check_paths=False)
    with pytest.raises(ConfigError, match=r"workload\.function: got 3; expected a callable"):
        load_config({**BASE, "workload": {"kind": "callable", "function": 3}}, check_paths=False)


def test_a_long_value_in_a_message_keeps_its_end():
    """A path longer than a message's 80 characters keeps its file name: under a deep temporary folder
    (pytest-xdist's ``popen-gw1``) the messages named '/tmp/.../test_rejected_with_one_line_an6/nope...' and hid
    the file."""
    from gcc_dask.config.fields import _short

    path = "/tmp/pytest-of-root/pytest-82/popen-gw1/test_rejected_with_one_line_an6/nope.npy"
    text = _short(path)
    assert len(text) == 80 and text.endswith("nope.npy'") and text.startswith("'/tmp/pytest-of-root") and \
        "..." in text
    assert _short("short") == "'short'"
