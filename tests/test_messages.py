"""Error messages and docs that misled a reviewer: each says what is valid, names what the user wrote, and counts
what there is."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import gcc_dask as gd
from gcc_dask.config import load_config
from gcc_dask.errors import ConfigError

PIPELINE = {"name": "msg", "source": {"kind": "synthetic", "num_samples": 40, "shape": [5], "seed": 1},
            "workload": {"kind": "analytic", "name": "smooth"}, "code": {"num_inputs": 4, "num_workers": 8},
            "schemes": ["gcc"]}


@pytest.mark.parametrize("key", ["reference", "progress"])
def test_a_boolean_key_lists_its_valid_values(key):
    """``run.reference: got 'yes'; expected a valid boolean`` did not say what is valid: true or false."""
    with pytest.raises(ConfigError, match=rf"^run\.{key}: got 'yes'; expected true or false$"):
        load_config({**PIPELINE, "run": {key: "yes"}})


@pytest.mark.parametrize("shape", [(0, 3), ()], ids=["no-rows", "0-d"])
def test_an_x_without_rows_names_the_argument_x(shape):
    """coded_map's X without a row was refused as ``source.array``, a key its user never wrote."""
    with pytest.raises(ConfigError, match=rf"^X: got an array of shape {re.escape(str(shape))}; expected at least "
                                          r"one sample \(row\) along its first axis$"):
        gd.coded_map(np.tanh, np.zeros(shape, np.float32))


def test_the_cli_page_counts_and_lists_every_subcommand():
    """docs/cli.rst said five subcommands and left ``advise`` out; there are six."""
    from gcc_dask.cli import main

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.rst").read_text()
    words = {"five": 5, "six": 6, "seven": 7, "eight": 8}
    said = re.search(r"with (\w+) subcommands", text).group(1)
    assert words[said] == len(main.commands), (said, sorted(main.commands))
    for name in main.commands:
        assert f"``gcc-dask {name}" in text, name
