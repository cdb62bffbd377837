"""A driver that dies while it creates the store leaves no store behind, so the next run starts clean.

The store is built in a hidden sibling directory and renamed into place: readers (a live dashboard, a
resume) see the whole layout or nothing. It used to be built in place: a crash part-way left a root
whose attributes matched the config but whose groups were missing, and every later run died on it with
a KeyError traceback until the user deleted it by hand.
"""

from __future__ import annotations

import pytest

import gcc_dask as gd
import gcc_dask.store
from rel_helpers import read_group, synthetic_config


def test_a_crash_while_creating_the_store_leaves_nothing(client, tmp_path, monkeypatch):
    cfg = synthetic_config(tmp_path / "run.zarr", batches=3, schemes=("gcc", "uncoded"))
    real = gcc_dask.store.run_store._create_arrays  # where RunStore.create looks it up

    def dies_half_way(tmp, root_attrs, schemes, *args, **kwargs):
        real(tmp, root_attrs, dict(list(schemes.items())[:1]), *args, **kwargs)  # the first scheme's arrays only
        raise KeyboardInterrupt  # the driver stops here

    monkeypatch.setattr(gcc_dask.store.run_store, "_create_arrays", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        gd.run_pipeline(cfg, client=client)
    assert list(tmp_path.iterdir()) == []  # neither a half store nor its temporary directory
    monkeypatch.setattr(gcc_dask.store.run_store, "_create_arrays", real)
    run = gd.run_pipeline(cfg, client=client)
    assert run.status == "complete"
    assert (read_group(run.path, "uncoded", ("status",))["status"] > 0).all()
