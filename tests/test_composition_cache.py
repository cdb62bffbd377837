"""The composition cache: a second run over the same data composes no window (gcc_dask.composition_cache)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from gcc_dask.composition import compose
from gcc_dask.composition_cache import CompositionCache
from gcc_dask.sources import make_source


def _data(n=512, d=6, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=5.0, size=(4, d))
    return (centres[np.arange(n) % 4] + rng.normal(scale=0.2, size=(n, d))).astype(np.float32)


class _Counting:
    """A map_windows that counts the windows chained (and digested)."""

    def __init__(self):
        self.calls = {}

    def __call__(self, func, items, *shared):
        self.calls[func.__name__] = self.calls.get(func.__name__, 0) + len(items)
        return [func(*shared, item) for item in items]


def _compose(x, cache, run, **kw):
    kw = {"group_size": 8, "block_size": 4, "policy": "similarity", "window": 128, **kw}
    return compose(make_source("array", array=x), map_windows=run, cache=cache, **kw).sample_index()


def test_a_second_run_composes_no_window(tmp_path):
    x, cache = _data(), CompositionCache(tmp_path)
    first, second = _Counting(), _Counting()
    said = []
    a = _compose(x, cache, first)
    b = compose(make_source("array", array=x), group_size=8, block_size=4, window=128, map_windows=second,
                cache=cache, say=said.append).sample_index()
    np.testing.assert_array_equal(a, b)
    assert first.calls == {"_window_chain": 4}
    assert second.calls == {"_window_digest": 4}  # read and digested, never chained
    assert len(said) == 1 and "reused" in said[0]
    # and it is the composition without a cache
    np.testing.assert_array_equal(a, _compose(x, None, _Counting()))


@pytest.mark.parametrize("change", ["data", "window", "dims", "block", "seed", "policy"])
def test_changed_data_or_parameters_compose_again(tmp_path, change):
    x, cache = _data(), CompositionCache(tmp_path)
    _compose(x, cache, _Counting())
    kw = {"window": {"window": 64}, "dims": {"dims": 3}, "block": {"block_size": 2}, "seed": {"seed": 1},
          "policy": {"policy": "pc1"}}.get(change, {})
    if change == "data":
        x = x.copy()
        x[300, 2] += 1.0  # one value of one sample
    again = _Counting()
    order = _compose(x, cache, again, **kw)
    assert set(again.calls) - {"_window_digest"} and again.calls.get("_window_chain", 0) + again.calls.get(
        "_window_pc1", 0) > 0
    want = compose(make_source("array", array=x), **{"group_size": 8, "block_size": 4, "policy": "similarity",
                                                      "window": 128, **kw}).sample_index()
    np.testing.assert_array_equal(order, want)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "swap"])
def test_a_damaged_entry_is_rebuilt_never_trusted(tmp_path, damage):
    x, cache = _data(), CompositionCache(tmp_path)
    good = _compose(x, cache, _Counting())
    (entry,) = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path) if f.endswith(".npz")]
    if damage == "truncate":
        with open(entry, "r+b") as fh:
            fh.truncate(os.path.getsize(entry) // 2)
    elif damage == "garbage":
        with open(entry, "wb") as fh:
            fh.write(b"not an npz")
    else:  # a readable entry whose sequence was edited: its checksum no longer matches
        with np.load(entry) as z:
            seq, digests, checksum = z["sequence"].copy(), z["digests"], z["checksum"]
        seq[[0, 1]] = seq[[1, 0]]
        np.savez(entry, sequence=seq, digests=digests, checksum=checksum)
    again = _Counting()
    np.testing.assert_array_equal(_compose(x, cache, again), good)
    assert again.calls == {"_window_chain": 4}
    # rebuilt: the next run reuses it
    third = _Counting()
    np.testing.assert_array_equal(_compose(x, cache, third), good)
    assert third.calls == {"_window_digest": 4}


def test_the_environment_names_or_turns_off_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GCC_DASK_CACHE", "off")
    assert CompositionCache.default() is None
    monkeypatch.setenv("GCC_DASK_CACHE", str(tmp_path))
    assert CompositionCache.default().folder == os.path.join(str(tmp_path), "compositions")
    monkeypatch.delenv("GCC_DASK_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    default = CompositionCache.default().folder
    for on in ("on", "1", "true", "YES"):  # the default folder, never a folder named "on" in the cwd
        monkeypatch.setenv("GCC_DASK_CACHE", on)
        assert CompositionCache.default().folder == default
    monkeypatch.delenv("GCC_DASK_CACHE")
    assert CompositionCache.default().folder == os.path.join(str(tmp_path / "xdg"), "gcc-dask", "compositions")


def test_an_unwritable_cache_is_logged_and_the_run_goes_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    order = _compose(_data(), CompositionCache(blocker / "sub"), _Counting())
    assert sorted(order.tolist()) == list(range(512))
    assert "cannot write" in caplog.text


def test_coded_map_twice_on_the_same_zarr_composes_once(tmp_path, monkeypatch, client):
    import gcc_dask as gd

    monkeypatch.setenv("GCC_DASK_CACHE", str(tmp_path / "cache"))
    x = _data(2048, 8)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=x.shape, chunks=(256, 8), dtype="float32")[:] = x
    saved, hits = [], []
    real_save, real_load = CompositionCache.save, CompositionCache.load
    # (a save by the second run only adds the files' digest to the same sequence, once they are old enough)
    monkeypatch.setattr(CompositionCache, "save", lambda self, *a: (saved.append(a[1].copy()), real_save(self, *a))[1])
    monkeypatch.setattr(CompositionCache, "load", lambda self, *a: (lambda e: (hits.append(e is not None), e)[1])(
        real_load(self, *a)))
    f = np.tanh
    kw = dict(schemes=("gcc",), client=client, code={"num_inputs": 8, "num_workers": 12, "block_size": 16},
              cutoff={"stragglers": 2}, composition={"window": 512})
    a = gd.coded_map(f, zarr.open_array(str(tmp_path / "x.zarr"), mode="r"), out=tmp_path / "a.zarr", **kw)
    b = gd.coded_map(f, zarr.open_array(str(tmp_path / "x.zarr"), mode="r"), out=tmp_path / "b.zarr", **kw)
    assert hits == [False, True]  # composed once, reused by the second run
    assert 1 <= len(saved) <= 2 and all(np.array_equal(s, saved[0]) for s in saved)
    from gcc_dask.store import RunStore

    np.testing.assert_array_equal(RunStore(a.store).sample_index(), RunStore(b.store).sample_index())


def test_auto_block_size_takes_the_cached_compositions_when_a_busier_machine_times_f_slower(tmp_path, monkeypatch,
                                                                                          client):
    """``code.block_size: auto`` on the same data, f timed 4 times slower (a busy machine): B is the first run's,
    whose composition is cached, not a new B whose windows would all be composed again."""
    import gcc_dask as gd
    import gcc_dask.inputs as inputs
    from gcc_dask.sizing import FCost, choose_block_size
    from gcc_dask.store import RunStore

    monkeypatch.setenv("GCC_DASK_CACHE", str(tmp_path / "cache"))
    x = _data(1024, 8)  # B = 32 (4 batches), 16, and 2 for the far f (64 batches: 4096 rows made it 256)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=x.shape, chunks=(512, 8), dtype="float32")[:] = x
    saved = []
    real_save = CompositionCache.save
    monkeypatch.setattr(CompositionCache, "save", lambda self, *a: (saved.append(1), real_save(self, *a))[1])
    kw = dict(schemes=("gcc",), client=client, code={"num_inputs": 8, "num_workers": 12, "block_size": "auto"},
              cutoff={"stragglers": 2}, composition={"window": 1024})

    def run(seconds_per_row, out):
        monkeypatch.setattr(inputs, "time_f", lambda *a, **k: FCost(seconds=seconds_per_row * 100, rows=100))
        return RunStore(gd.coded_map(np.tanh, zarr.open_array(str(tmp_path / "x.zarr"), mode="r"),
                                     out=tmp_path / out, **kw).store)

    def alone(seconds_per_row):
        return choose_block_size(seconds_per_row, num_samples=1024, group_size=8, row_bytes=32, chunks=512).block_size

    fast, slow = 1e-3, 4e-3
    assert alone(fast) != alone(slow)  # the two timings alone give two block sizes
    a = run(fast, "a.zarr")
    b = run(slow, "b.zarr")
    assert a.attrs["block_size"] == alone(fast) == b.attrs["block_size"]
    assert "cached composition" in b.attrs["block_size_reason"]
    assert saved == [1]  # composed once
    np.testing.assert_array_equal(a.sample_index(), b.sample_index())
    far = fast * 64  # beyond the band: its own block size and composition
    assert alone(far) != alone(fast)
    c = run(far, "c.zarr")
    assert c.attrs["block_size"] == alone(far) and saved == [1, 1]


def _zarr_source(tmp_path, x, name="x.zarr", age_s=None):
    import dask.array as da

    path = tmp_path / name
    zarr.create_array(str(path), shape=x.shape, chunks=(64, x.shape[1]), dtype="float32")[:] = x
    if age_s is not None:
        _age(path, age_s)
    return path, make_source("array", array=da.from_zarr(str(path)))


def _age(folder, seconds):
    """Every file of `folder` last modified `seconds` ago."""
    import time

    when = time.time() - seconds
    for root, _, files in os.walk(folder):
        for f in files:
            os.utime(os.path.join(root, f), (when, when))


def _compose_source(source, cache, run, say=None):
    return compose(source, group_size=8, block_size=4, policy="similarity", window=128, map_windows=run,
                   cache=cache, say=say).sample_index()


def test_a_local_zarr_array_unchanged_is_reused_without_reading_a_sample(tmp_path):
    x, cache = _data(), CompositionCache(tmp_path / "cache")
    path, source = _zarr_source(tmp_path, x, age_s=60)
    assert source.stored_files() == [os.path.abspath(path)]
    first, second, said = _Counting(), _Counting(), []
    a = _compose_source(source, cache, first)
    b = _compose_source(source, cache, second, said.append)
    np.testing.assert_array_equal(a, b)
    assert first.calls == {"_window_chain": 4}
    assert second.calls == {}  # its files' sizes and times vouched for it: no window read
    assert len(said) == 1 and "files unchanged" in said[0]
    np.testing.assert_array_equal(a, _compose(x, None, _Counting()))  # the composition without a cache


def test_a_rewritten_chunk_of_the_zarr_array_composes_again(tmp_path):
    x, cache = _data(), CompositionCache(tmp_path / "cache")
    path, source = _zarr_source(tmp_path, x, age_s=60)
    _compose_source(source, cache, _Counting())
    x2 = x.copy()
    x2[300, 2] += 1.0
    zarr.open_array(str(path), mode="r+")[256:320] = x2[256:320]  # one chunk rewritten now
    again = _Counting()
    order = _compose_source(source, cache, again)
    assert again.calls.get("_window_chain", 0) == 4
    np.testing.assert_array_equal(order, _compose(x2, None, _Counting()))


def test_files_written_just_before_the_read_are_not_vouched_for_until_they_are_old(tmp_path):
    x, cache = _data(), CompositionCache(tmp_path / "cache")
    path, source = _zarr_source(tmp_path, x, age_s=None)  # written now: within the racy margin of the read
    a = _compose_source(source, cache, _Counting())
    checked = _Counting()
    assert np.array_equal(_compose_source(source, cache, checked), a)
    assert checked.calls == {"_window_digest": 4}  # the samples read and digested, not the files trusted
    _age(path, 60)  # the same bytes, now old: the next content check also keeps the files' digest
    assert np.array_equal(_compose_source(source, cache, _Counting()), a)
    quiet = _Counting()
    assert np.array_equal(_compose_source(source, cache, quiet), a)
    assert quiet.calls == {}


def test_an_array_computed_from_a_zarr_array_is_checked_by_its_samples(tmp_path):
    import dask.array as da

    x, cache = _data(), CompositionCache(tmp_path / "cache")
    path, _ = _zarr_source(tmp_path, x, age_s=60)
    for derived in (da.from_zarr(str(path)) * 1.0, da.from_zarr(str(path))[:256], np.asarray(x)):
        assert make_source("array", array=derived).stored_files() == []
    source = make_source("array", array=da.from_zarr(str(path)) * 1.0)
    _compose_source(source, cache, _Counting())
    again = _Counting()
    _compose_source(source, cache, again)
    assert again.calls == {"_window_digest": 4}
    assert make_source("array", array=zarr.open_array(str(path), mode="r")).stored_files() == [os.path.abspath(path)]


def test_files_state_gives_the_files_digest_and_the_newest_time(tmp_path):
    from gcc_dask._digest import files_digest, files_state

    path, _ = _zarr_source(tmp_path, _data(), age_s=60)
    newest = max(os.stat(os.path.join(r, f)).st_mtime_ns for r, _, fs in os.walk(path) for f in fs)
    assert files_state([path]) == (files_digest([path]), newest)
    (tmp_path / "one.bin").write_bytes(b"abc")
    assert files_state([tmp_path / "one.bin"])[1] == os.stat(tmp_path / "one.bin").st_mtime_ns
