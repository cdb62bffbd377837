"""gcc-dask advise: the recommendation where the answer is known, its determinism and reuse, schemes: [auto]
and its resume, and one-line errors for bad options."""

from __future__ import annotations

import warnings

import re

import numpy as np
import pytest
from click.testing import CliRunner

import gcc_dask as gd
from gcc_dask.cli import main
from gcc_dask.errors import ConfigError
from gcc_dask.frontier import advise as advise_mod
from gcc_dask.frontier import run as run_mod
from gcc_dask.frontier.advise import advise


def _pipe(tmp_path, coeffs, **over):
    cfg = {"name": "adv", "source": {"kind": "synthetic", "num_samples": 96, "shape": [1], "seed": 1},
           "workload": {"kind": "analytic", "name": "polynomial", "params": {"coeffs": coeffs}},
           "code": {"num_inputs": 4, "num_workers": 8, "block_size": 2}, "schemes": ["gcc"],
           "cutoff": {"stragglers": 2}, "store": {"path": str(tmp_path / "run.zarr")},
           "cluster": {"processes": False, "n_workers": 1, "threads_per_worker": 2},
           "run": {"progress": False}}
    cfg.update(over)
    return cfg


def test_a_linear_f_is_recovered_exactly_by_lcc_at_the_fewest_workers(client, tmp_path):
    """f(x) = 1 + 2x has degree 1: LCC decodes it exactly from any K = 4 results, so with S = 2 it is exact at
    N = 6 and N = 8; the advice takes the fewer workers. No other estimator is exact here."""
    adv = advise(_pipe(tmp_path, [1.0, 2.0]), samples=96, max_redundancy=2, client=client, out=tmp_path / "a",
                 progress=False)
    assert adv.metric == "mse" and adv.choice["code"] == "lcc" and adv.choice["params"]["num_workers"] == 6
    lcc = adv.table[(adv.table["code"] == "lcc") & (adv.table["decodable"] == 1)]
    assert (lcc["value"] < 1e-12).all() and set(lcc["N"]) == {6, 8}  # exact up to rounding; below N - S = 4: none
    others = adv.table[(adv.table["code"] != "lcc") & (adv.table["decodable"] == 1)]
    assert (others["value"] > 1e-8).all()
    assert "lcc" in adv.set_lines[0] and "num_workers: 6" in adv.set_lines[0]
    assert {p.name for p in adv.files} == {"advice.md", "advice.csv", "advice.png", "advice.zarr"}


def test_a_constant_f_makes_every_estimator_equal_so_the_cheapest_wins(client, tmp_path):
    """Every estimator is exact for a constant: the advice says they tie and takes N = K, copying (the
    estimators that leave outputs without an estimate are never chosen)."""
    adv = advise(_pipe(tmp_path, [3.0]), samples=96, max_redundancy=2, client=client, out=tmp_path / "a",
                 progress=False)
    assert adv.choice["code"] == "replication" and adv.choice["params"]["num_workers"] == 4
    assert adv.choice["params"]["fill"] != "none"
    assert "As good within 2 standard errors" in adv.text and adv.text.startswith("Use replication")


def test_the_same_seed_gives_the_same_advice_and_f_is_not_evaluated_again(client, tmp_path, monkeypatch):
    cfg = _pipe(tmp_path, [0.0, 1.0, 0.5])
    first = advise(cfg, samples=96, client=client, out=tmp_path / "a", progress=False)
    calls = {"n": 0}

    def counting(real):
        def counted(*args, **kwargs):
            calls["n"] += 1
            return real(*args, **kwargs)
        return counted

    monkeypatch.setattr(run_mod, "_coded_task", counting(run_mod._coded_task))
    monkeypatch.setattr(run_mod, "_f_task", counting(run_mod._f_task))  # f on the groups themselves
    again = advise(cfg, samples=96, client=client, out=tmp_path / "a", progress=False)
    assert calls["n"] == 0  # the coded outputs and f on the groups come from the first advice's store
    assert again.choice == first.choice
    np.testing.assert_array_equal(again.table["value"].to_numpy(), first.table["value"].to_numpy())
    other = advise(cfg, samples=96, client=client, out=tmp_path / "a", progress=False, stragglers=1)
    assert calls["n"] == 0 and other.table["value"].to_numpy().tolist() != first.table["value"].to_numpy().tolist()


def test_an_auto_run_records_its_choice_and_a_resume_keeps_it(client, tmp_path, monkeypatch):
    cfg = _pipe(tmp_path, [0.0, 1.0, 0.5], schemes=["auto", "uncoded"], advise={"samples": 96})
    run = gd.run_pipeline(cfg, client=client)
    from gcc_dask.analysis.stores import root_attrs

    advice = root_attrs(run.path)["advice"]
    label = advice["choice"]["label"]
    assert list(run.summary.index) == sorted([label, "uncoded"]) and run.status == "complete"

    def boom(*args, **kwargs):
        raise AssertionError("advice measured again on resume")

    monkeypatch.setattr(advise_mod, "advise", boom)
    again = gd.run_pipeline(cfg, client=client)
    assert again.wall_s == 0 and list(again.summary.index) == list(run.summary.index)
    # a changed advise section: the resume is refused naming the key, before any advice is measured again
    with pytest.raises(gd.errors.StoreError, match=r"advise.margin"):
        gd.run_pipeline(cfg, client=client, overrides=["advise.margin=0.01"])


@pytest.mark.parametrize(("args", "match"), [
    (["--target-relacc", "1.5"], r"^gcc-dask: error: --target-relacc: got 1.5; expected a RelAcc in \(0, 1\]$"),
    (["--target-relacc", "0.9", "--max-redundancy", "2"], r"^gcc-dask: error: --target-relacc: got 0.9 beside"),
    (["--max-redundancy", "0.5"], r"^gcc-dask: error: --max-redundancy: got 0.5; expected N/K"),
    (["--samples", "3"], r"^gcc-dask: error: --samples: got 3; expected an integer >= 2·K = 16$"),
    (["--stragglers", "9"], r"^gcc-dask: error: --stragglers: got 9; expected S, an integer in \[0, 8\)"),
    (["--stragglers", "lots"], r"^gcc-dask: error: --stragglers: got 'lots'; expected S"),
    (["--margin", "-0.1"], r"^gcc-dask: error: --margin: got -0.1; expected a number in \[0, 1\]"),
], ids=["relacc-above-1", "target-and-max", "redundancy-below-1", "too-few-samples", "s-too-large", "s-not-a-number",
        "negative-margin"])
def test_bad_advice_options_are_one_line_naming_the_flag(args, match, tmp_path):
    out = tmp_path / "advice"
    res = CliRunner().invoke(main, ["advise", "pipelines/smoke.yaml", "--out", str(out), *args])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and __import__("re").match(match, lines[0]), res.output
    assert not out.exists()  # refused before anything is written


def test_a_target_picks_the_fewest_workers_that_reach_it():
    import pandas as pd

    from gcc_dask.frontier.advise import choose

    table = pd.DataFrame({"candidate": ["a@8", "b@10", "c@12"], "code": ["replication", "gcc", "replication"],
                          "N": [8, 10, 12], "value": [0.90, 0.96, 0.99]})
    rng = np.random.default_rng(0)
    values = {c: v + rng.normal(0, 0.01, 50) for c, v in zip(table["candidate"], table["value"])}
    assert choose(table, values, "rel_acc", target=0.95)[0] == "b@10"
    pick, _, reason = choose(table, values, "rel_acc", target=0.999)
    assert pick == "c@12" and "no candidate reaches" in reason
    with pytest.raises(ConfigError):
        advise_mod._check_options(10, 0.9, 2.0, None, 4)


def test_a_code_must_beat_copying_at_its_n_by_the_margin():
    """gcc gains 0.0025 over replication at N = 12 on every group (SE 0): within the default margin 0.003
    copying is recommended and says why; with margin 0, or a gain of 0.005, the code is; a copying candidate at
    another N is never the alternative."""
    import pandas as pd

    from gcc_dask.frontier.advise import DEFAULT_MARGIN, choose

    def case(gain):
        table = pd.DataFrame({"candidate": ["rep@12", "gcc@12", "rep@16"], "code": ["replication", "gcc", "replication"],
                              "N": [12, 12, 16], "value": [0.98, 0.98 + gain, 0.95]})
        base = np.linspace(0.9, 1.0, 40) - 0.02
        return table, {"rep@12": base, "gcc@12": base + gain, "rep@16": base - 0.03}

    assert DEFAULT_MARGIN == 0.003
    table, values = case(0.0025)
    pick, tied, reason = choose(table, values, "rel_acc")
    assert pick == "rep@12" and tied == ["gcc@12"]
    assert reason.startswith("gcc@12 gains +0.0025 ± 0.0000 rel_acc over rep@12 at N = 12, within 2 paired "
                             "standard errors plus the margin 0.003: copying is recommended")
    assert choose(table, values, "rel_acc", margin=0.0) == ("gcc@12", [], "")
    table, values = case(0.005)
    assert choose(table, values, "rel_acc")[0] == "gcc@12"
    # the MSE: a fraction of the copying estimator's MSE (0.3% of 1.0 here)
    table = pd.DataFrame({"candidate": ["rep@12", "gcc@12"], "code": ["replication", "gcc"], "N": [12, 12],
                          "value": [1.0, 0.998], "decodable": [1.0, 1.0]})
    values = {"rep@12": np.full(40, 1.0), "gcc@12": np.full(40, 0.998)}
    assert choose(table, values, "mse")[0] == "rep@12" and choose(table, values, "mse", margin=0.001)[0] == "gcc@12"
    with pytest.raises(ConfigError, match=r"margin: got nan; expected a number in \[0, 1\]"):
        choose(table, values, "mse", margin=float("nan"))


def test_a_code_set_aside_by_the_margin_does_not_make_a_cheaper_n_look_tied():
    """rep@16 is the best; gcc@12 is tied with it only through its gain of 0.0044 over rep@12, within the
    margin: copying stands for gcc@12 at N = 12, which is not tied with the best, so rep@16 is chosen. With a
    target a code within the margin of copying does not reach it for copying (margin 1: never a code)."""
    import pandas as pd

    from gcc_dask.frontier.advise import choose

    base = np.linspace(0.9, 1.0, 40)
    table = pd.DataFrame({"candidate": ["rep@12", "gcc@12", "rep@16"], "code": ["replication", "gcc", "replication"],
                          "N": [12, 12, 16], "value": [0.944, 0.9484, 0.950]})
    rng = np.random.default_rng(1)
    values = {"rep@12": base - 0.006, "gcc@12": base - 0.0016 + rng.normal(0, 0.008, 40), "rep@16": base}
    values["gcc@12"] += 0.9484 - 0.95 - (values["gcc@12"] - base).mean()  # its mean exactly 0.9484
    pick, tied, reason = choose(table, values, "rel_acc")
    assert pick == "rep@16" and "gcc@12 gains +0.0044" in reason and "gcc@12" in tied
    assert choose(table, values, "rel_acc", margin=0.0)[0] == "gcc@12"  # tied with the best, and cheaper
    target = pd.DataFrame({"candidate": ["rep@6", "gcc@6", "rep@8"], "code": ["replication", "gcc", "replication"],
                           "N": [6, 6, 8], "value": [0.9688, 0.9760, 0.99]})
    vals = {"rep@6": base - 0.0312, "gcc@6": base - 0.024 + rng.normal(0, 0.02, 40), "rep@8": base - 0.01}
    vals["gcc@6"] += 0.976 - 0.95 - (vals["gcc@6"] - base).mean()
    assert choose(target, vals, "rel_acc", target=0.97, margin=0.0)[0] == "gcc@6"
    assert choose(target, vals, "rel_acc", target=0.97, margin=1.0)[0] == "rep@8"


def test_a_pipeline_with_speculative_is_advised_on_and_speculative_is_no_extra_candidate(client, tmp_path):
    """speculative's estimates are uncoded's: the default candidates cover it (it used to reach the candidate
    model as a code it does not take, a pydantic traceback)."""
    adv = advise(_pipe(tmp_path, [0.0, 1.0, 0.5], schemes=["speculative", "gcc"]), samples=96, client=client,
                 out=tmp_path / "a", progress=False)
    assert "speculative" not in set(adv.table["code"]) and "gcc" in set(adv.table["code"])


# the pipeline's cluster has 2 threads on purpose (a small one); whether the advised scheme's N exceeds them depends on
# the advice, which is measured: the run then warns that shards queue, as it should
@pytest.mark.filterwarnings(r"ignore:a batch has up to N = \d+ shards but the cluster has \d+ worker threads:RuntimeWarning")
def test_the_command_that_applies_the_advice_keeps_the_users_overrides(tmp_path):
    """Run as printed, the command must describe the pipeline advised on: the user's --set lines (but schemes,
    which the advice sets) come before the advice's own."""
    cfg = tmp_path / "p.yaml"
    import yaml

    data = _pipe(tmp_path, [0.0, 1.0, 0.5])
    data["cluster"] = {"processes": False, "n_workers": 1, "threads_per_worker": 2}
    cfg.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(main, ["advise", str(cfg), "--samples", "96", "--out", str(tmp_path / "a"),
                                    "--no-progress", "--set", "cutoff.stragglers=1", "--set", "schemes=[gcc]"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.strip().startswith("gcc-dask run"))
    assert "--set cutoff.stragglers=1" in line and line.count("schemes=") == 1
    assert line.count("cutoff.stragglers=") == 1  # the user's own, which the advice was measured for
    assert line.index("cutoff.stragglers=1") < line.index("schemes=")
    # the pipeline's own store holds a run of its own schemes: the command goes to a store of its own, and runs
    import shlex

    gd.run_pipeline(str(cfg))
    label = line.split("label: ")[1].split(",")[0]
    # a store of the entry's own, named by its label, N and S (advice for another N or S names another store)
    store = line.split("--set store.path=")[1].split()[0]
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 'run'))}-{re.escape(label)}(-n\d+)?-s1\.zarr", store), line
    again = CliRunner().invoke(main, shlex.split(line)[1:] + ["--set", "run.progress=false"])
    assert again.exit_code == 0, again.output
    assert gd.open_run(store).attrs["status"] == "complete"
    mine = CliRunner().invoke(main, ["advise", str(cfg), "--samples", "96", "--out", str(tmp_path / "a"),
                                     "--no-progress", "--set", f"store.path={tmp_path / 'mine.zarr'}"])
    line = next(ln for ln in mine.output.splitlines() if ln.strip().startswith("gcc-dask run"))
    assert line.count("store.path=") == 1 and "mine.zarr" in line  # the user's own store path is kept


def test_an_auto_run_names_its_own_key_for_too_small_a_sample(client, tmp_path):
    """schemes: [auto] is configured by the advise section: a sample too small is refused as advise.samples (it
    was reported as the --samples flag of gcc-dask advise, which the user never typed)."""
    cfg = _pipe(tmp_path, [0.0, 1.0, 0.5], schemes=["auto"], advise={"samples": 5})
    with pytest.raises(ConfigError, match=r"^advise\.samples: got 5; expected an integer >= 2·K = 8"):
        gd.run_pipeline(cfg, client=client)


def test_a_second_call_evaluates_f_zero_times_and_says_its_expected_time(tmp_path, monkeypatch):
    """f counts its calls in a file (it runs on the workers and on the driver): the first call evaluates it, a
    second call with the same options (and one with another target) evaluates it zero times, starts no cluster
    and scores nothing again; each call prints its expected time first; the recommendation is one sentence."""
    log = tmp_path / "calls.log"
    (tmp_path / "countf37.py").write_text(
        "import numpy as np\n"
        f"LOG = {str(log)!r}\n"
        "def f(x):\n"
        "    with open(LOG, 'a') as fh:\n"
        "        fh.write(f'{len(x)}\\n')\n"
        "    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)\n"
        "    return np.sin(x.sum(axis=1, keepdims=True))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = _pipe(tmp_path, [0.0], workload={"kind": "callable", "name": "countf37:f"},
                cluster={"processes": False, "n_workers": 1, "threads_per_worker": 2})
    said: list[str] = []
    first = advise(cfg, samples=96, out=tmp_path / "a", progress=False, echo=said.append)
    calls = log.read_text().splitlines()
    assert calls, "f was not evaluated by the first call"
    assert any(line.startswith("expected time: about ") and "f on " in line for line in said)

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started to reuse stored outputs and scores")

    monkeypatch.setattr("gcc_dask.runtime.cluster.connect", no_cluster)
    said.clear()
    again = advise(cfg, samples=96, out=tmp_path / "a", progress=False, echo=said.append)
    assert log.read_text().splitlines() == calls  # zero calls of f
    assert any("f is not evaluated" in line and "no decodes" in line for line in said)
    assert again.choice == first.choice and again.text == first.text
    np.testing.assert_array_equal(again.table["value"].to_numpy(), first.table["value"].to_numpy())
    other = advise(cfg, samples=96, out=tmp_path / "a", progress=False, target=1e-3)  # MSE target: a new choice
    assert log.read_text().splitlines() == calls
    sentence = first.text.splitlines()[0]
    assert sentence.startswith("Use ") and sentence.endswith(".") and sentence.count(". ") == 0
    assert other.text.splitlines()[0].startswith(("Use ", "No approximate estimator reaches"))


def test_no_approximate_estimator_reaching_the_target_recommends_the_exact_schemes(client, tmp_path):
    """f = x² + 1 on K = 4, N up to 8, S = 2: no estimator reaches an MSE of 1e-30 (LCC is exact only up to
    rounding); the advice says so in one sentence and applies speculative, the exact scheme that bounds the wait."""
    adv = advise(_pipe(tmp_path, [1.0, 0.0, 1.0]), samples=96, target=1e-30, client=client, out=tmp_path / "a",
                 progress=False)
    assert adv.text.startswith("No approximate estimator reaches mse 1e-30 at N <= 8, so use an exact scheme: "
                               "speculative")
    assert adv.choice == {"label": "speculative", "code": "speculative", "params": {}}
    assert "code: speculative" in adv.set_lines[0]


def test_a_single_output_f_gets_its_relative_error_and_never_a_relacc(client, tmp_path):
    """f = x² + 1 (one output per sample): the advice and its frontier store score the MSE, with the relative
    RMSE beside it (√MSE over f's RMS, by hand from the stored outputs); the store has no rel_acc."""
    import xarray as xr

    adv = advise(_pipe(tmp_path, [1.0, 0.0, 1.0]), samples=96, client=client, out=tmp_path / "a", progress=False)
    assert adv.metric == "mse" and "rel_rmse" in adv.table
    with warnings.catch_warnings():  # its metadata consolidated: no "Failed to open ... consolidated metadata"
        warnings.simplefilter("error", RuntimeWarning)
        ds = xr.open_zarr(adv.path)
    assert "rel_acc" not in ds.data_vars and "mse" in ds.data_vars
    ref_ms = ds.attrs["reference_mean_square"]
    np.testing.assert_allclose(adv.table["rel_rmse"], np.sqrt(adv.table["value"] / ref_ms))
    assert 1.0 < ref_ms < 4.0  # (x² + 1)² for x in [-1, 1]
    assert "relative RMSE" in adv.text.splitlines()[0] and "agrees" not in adv.text


def test_a_candidate_that_leaves_outputs_missing_ranks_last_and_the_command_sets_s(client, tmp_path):
    """A reviewer's find: on an f with one output, replication/none (no fill) came first at every N with MSE 0 and
    was the best that vs_best compared with, as its MSE counts only the outputs it estimates (half of them at
    N = K with S = 2). It is now listed last at its N, without a vs_best, and a line says why; the command that
    applies the advice sets the S it was measured for (``cutoff.stragglers``), which it used to leave out."""
    adv = advise(_pipe(tmp_path, [1.0, 0.0, 1.0]), samples=96, client=client, out=tmp_path / "a", progress=False,
                 stragglers=1)
    assert adv.metric == "mse"
    none = adv.table[(adv.table["estimator"] == "replication/none") & (adv.table["decodable"] < 1)]
    assert set(none["N"]) >= {4, 5} and none["vs_best"].isna().all()  # (at N = 8 its two copies are never both lost)
    for n, rows in adv.table.groupby("N", sort=False):
        complete = (rows["decodable"] >= 1).to_numpy()
        assert complete.any() and not (np.diff(complete.astype(int)) > 0).any(), n  # the complete ones first
        assert np.isfinite(rows["vs_best"].iloc[0])  # the first one estimates every output
    assert adv.table.loc[adv.table["vs_best"].idxmin(), "decodable"] == 1.0
    note = next(line for line in adv.text.splitlines() if line.startswith("Listed last"))
    assert "replication/none at N = 4 (" in note and "never recommended" in note
    assert "--set cutoff.stragglers=1" in adv.set_lines  # the S of --stragglers, not the pipeline's 2
    p_advice = advise(_pipe(tmp_path, [1.0, 0.0, 1.0]), samples=96, client=client, out=tmp_path / "b",
                      progress=False, stragglers=0.25)
    assert not any("cutoff.stragglers" in line for line in p_advice.set_lines)  # p: the pipeline's cutoff stays


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path):
    """Issue 35, case 7: ``gcc-dask advise ... --out /proc/nope`` was a FileNotFoundError traceback."""
    (tmp_path / "file").write_text("")
    res = CliRunner().invoke(main, ["advise", "pipelines/smoke.yaml", "--out", str(tmp_path / "file" / "advice")])
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith(f"gcc-dask: error: --out: got {str(tmp_path / 'file' / 'advice')!r}, which cannot "
                               "be made a folder") and "is a file" in lines[0], lines[0]


def test_advice_on_one_group_says_so_once_instead_of_a_nan_spread(client, tmp_path):
    """Issue 35, case 8: ``schemes: [auto]`` on a dataset of one group recommended "gcc ... ± nan" without a word;
    the spread is left out and one warning says the advice cannot tell estimators apart."""
    said: list[str] = []
    cfg = _pipe(tmp_path, [0.0, 1.0, 0.5], schemes=["auto"],
                source={"kind": "synthetic", "num_samples": 5, "shape": [1], "seed": 1})
    gd.run_pipeline(cfg, client=client, echo=said.append)
    text = "\n".join(said)
    assert "nan" not in text.split("store:")[0], text
    warnings = [line for line in said if "warning: the sample holds one group of K = 4" in line]
    assert len(warnings) == 1 and "no standard error" in warnings[0], text
    assert any(line.startswith("advice for adv: 1 group of K = 4") for line in said), text


def test_advise_composes_with_the_pipelines_composition_parameters(client, tmp_path, monkeypatch):
    """The groups advise measures are the pipeline's: its window, dims and fit_samples reach the composition
    (they are in the advice's cache key, and were dropped on the way: every advice composed with the defaults)."""
    seen = []
    real = run_mod.groups_of

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(advise_mod, "groups_of", spy)
    advise(_pipe(tmp_path, [1.0, 2.0], composition={"policy": "similarity", "window": 24, "dims": 1,
                                                      "fit_samples": 40}),
           samples=96, max_redundancy=2, client=client, out=tmp_path / "a", progress=False)
    assert {k: seen[0][k] for k in ("window", "dims", "fit_samples")} == {"window": 24, "dims": 1, "fit_samples": 40}


def test_groups_of_composes_with_the_parameters_given():
    """groups_of's groups under a window are compose's with that window (not the default one)."""
    from gcc_dask.composition import compose
    from gcc_dask.sources import make_source

    x = np.random.default_rng(3).normal(size=(96, 3)).astype(np.float32)
    src = make_source("array", array=x)
    index, X, _ = run_mod.groups_of(src, 4, "similarity", 0, window=24, dims=2)
    want = compose(src, group_size=4, policy="similarity", window=24, dims=2).sample_index().reshape(-1, 4)
    np.testing.assert_array_equal(index, want)
    np.testing.assert_array_equal(X, x[want])
    assert not np.array_equal(index, run_mod.groups_of(src, 4, "similarity", 0)[0])  # the default window: others
