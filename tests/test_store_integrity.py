"""The store's integrity: checksummed chunks, done batches whose chunks are gone, damaged metadata, the run's
token on every write, a store moved away mid-run, and ``--overwrite`` by two renames (docs/store.rst, section
'Integrity'). Each case failed before its fix: a flipped byte read back as a wrong number, a deleted chunk as
fill values of a batch still counted done, damaged metadata was a traceback, a write of another run landed,
a moved store was recreated as a skeleton, and an overwrite deleted the old store in place."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
import zarr

from gcc_dask.analysis.summary import summarize_run
from gcc_dask.errors import StoreError, WriteRefusedError
from gcc_dask.store import BatchStatus, RunStore, check_structure, remove_leftovers, write_decoded, write_inputs
from gcc_dask.store import run_store as run_store_mod

K = 8
SCHEMES = {"gcc": 16, "uncoded": 8}
LAYOUT = dict(config_resolved={"name": "t"}, fingerprint="f" * 64, schemes=SCHEMES, num_samples=30, batch_size=K,
              output_shape=(10,), has_labels=True, has_reference=True, seed=7)


def make(path, **kw):
    return RunStore.create(path, **{**LAYOUT, **kw})


def record(batch, n=16, status=BatchStatus.DECODED, digest=None):
    return {"batch": batch, "received_mask": np.arange(n) < n - 2, "latency_s": np.linspace(0.1, 0.2, n),
            "cutoff_s": 0.3, "status": int(status), "chunk_digest": digest}


def filled(path):
    """A store whose 4 batches are all done, for both schemes and the inputs (distinct values per batch); each
    record carries the chunk digest its write of ``decoded`` returned, as a run's decode does."""
    st = make(path)
    digests = {s: {} for s in SCHEMES}
    for b in range(st.num_batches):
        lo, hi = st.batch_rows(b)
        write_inputs(path, b, labels=np.full(hi - lo, b), reference=np.full((hi - lo, 10), 10.0 + b, np.float32))
        for scheme, n in SCHEMES.items():
            digests[scheme][b] = write_decoded(path, scheme, b, np.full((hi - lo, 10), float(b), np.float32))
    for scheme, n in SCHEMES.items():
        st.write_records(scheme, [record(b, n, digest=digests[scheme][b]) for b in range(st.num_batches)])
    return st


def flip_byte(file, at=None):
    raw = bytearray(file.read_bytes())
    raw[len(raw) // 2 if at is None else at] ^= 0x10
    file.write_bytes(bytes(raw))


# ----------------------------------------------------------------------------------- checksums
def test_every_array_is_checksummed_and_writes_empty_chunks(tmp_path):
    path = tmp_path / "run.zarr"
    st = make(path)
    metas = [json.loads(p.read_text()) for p in path.rglob("zarr.json") if p.parent != path]
    arrays = [m for m in metas if m["node_type"] == "array"]
    assert len(arrays) > 30
    for meta in arrays:
        assert [c["name"] for c in meta["codecs"]][-1] == "crc32c", meta
        assert [c["name"] for c in meta["codecs"]][-2] in ("zstd", "blosc"), meta  # blosc: a coordinate
    assert st.attrs["integrity"] == {"checksum": "crc32c", "empty_chunks": "written",
                                     "chunk_digest": "store_id array chunk crc32c"}
    # an undecodable batch's all-NaN rows are a chunk of their own (zarr would otherwise skip it)
    write_decoded(path, "gcc", 1, np.full((K, 10), np.nan, np.float32))
    assert (path / "gcc" / "decoded" / "c" / "1" / "0").is_file()


def test_each_arrays_metadata_is_what_zarr_create_array_makes_of_the_same_arguments(tmp_path):
    # the store writes every node's metadata at once (zarr.create_hierarchy): each must be what zarr's own
    # create_array would have written, codecs, fill value and chunk keys included
    from gcc_dask.store.layout import codecs

    path = tmp_path / "run.zarr"
    make(path)
    root = zarr.open_group(str(path), mode="r")
    arrays = dict(root.arrays())
    for group in root.group_values():
        arrays.update({f"{group.basename}/{k}": a for k, a in group.arrays()})
    assert {"inputs/sample", "inputs/labels", "gcc/decoded", "uncoded/status", "gcc/worker_point"} <= set(arrays)
    coordinates = {"sample", "group", "position", "batch", "output", "worker", "worker_point"}
    for name, arr in arrays.items():
        m = arr.metadata
        coordinate = name.rsplit("/", 1)[-1] in coordinates  # blosc after a byte shuffle, then crc32c
        made = zarr.create_array(zarr.storage.MemoryStore(), shape=m.shape, chunks=m.chunks, dtype=arr.dtype,
                                 fill_value=m.fill_value, attributes=m.attributes,
                                 compressors=codecs(arr.dtype.itemsize if coordinate else None),
                                 dimension_names=m.dimension_names).metadata
        assert m.to_dict() == made.to_dict(), name
        assert [c.to_dict()["name"] for c in m.codecs][1:] == (["blosc", "crc32c"] if coordinate else
                                                               ["zstd", "crc32c"]), name


def test_a_coordinate_of_fill_values_only_has_its_chunk(tmp_path):
    # one batch: the batch coordinate is [0], zarr's fill value; its chunk is written all the same
    path = tmp_path / "run.zarr"
    st = make(path, num_samples=K)
    assert (path / "inputs" / "batch" / "c" / "0").is_file()
    check_structure(path, st.attrs)  # raises on a missing coordinate chunk
    assert zarr.open_array(str(path / "gcc" / "batch"), mode="r")[:].tolist() == [0]


def test_a_flipped_byte_in_a_chunk_is_named_with_its_batch(tmp_path):
    path = tmp_path / "run.zarr"
    filled(path)
    np.testing.assert_array_equal(RunStore.open(path).read_batch("gcc", 2)["decoded"], 2.0)
    flip_byte(path / "gcc" / "decoded" / "c" / "2" / "0")
    want = r"its array 'gcc/decoded' has a damaged chunk c/2/0 \(sample 16-23, batch 2, output 0-9\).*checksum"
    with pytest.raises(StoreError, match=want) as e:
        RunStore.open(path).read_batch("gcc", 2)
    assert "\n" not in str(e.value) and "delete" in str(e.value)  # one line, and how to recompute the batch
    with pytest.raises(StoreError, match=want):
        summarize_run(str(path))
    np.testing.assert_array_equal(RunStore.open(path).read_batch("gcc", 1)["decoded"], 1.0)  # the others read


def test_a_flipped_byte_in_a_status_chunk_stops_a_resume_with_one_line(tmp_path):
    path = tmp_path / "run.zarr"
    filled(path)
    flip_byte(path / "uncoded" / "status" / "c" / "0", at=0)
    store = RunStore.resume(path, **LAYOUT)
    assert store.pending_batches("gcc").tolist() == []
    with pytest.raises(StoreError, match=r"'uncoded/status' has a damaged chunk c/0 \(batches 0-3\).*delete"):
        store.pending_batches("uncoded")


# ----------------------------------------------------------------------- chunks of done batches
def test_a_done_batch_whose_chunk_is_missing_is_pending_again(tmp_path):
    path = tmp_path / "run.zarr"
    st = filled(path)
    assert st.pending_batches("gcc").tolist() == [] and st.missing_batches("inputs").tolist() == []
    (path / "gcc" / "decoded" / "c" / "2" / "0").unlink()
    (path / "inputs" / "labels" / "c" / "3").unlink()
    st = RunStore.open(path)
    assert st.batch_status("gcc")[2] == BatchStatus.DECODED  # still marked done...
    assert st.missing_batches("gcc").tolist() == [2]
    assert st.pending_batches("gcc", retry_failed=True).tolist() == [2]  # ...but run again
    assert st.pending_batches("uncoded").tolist() == []
    assert st.missing_batches("inputs").tolist() == [3]


def _swap(a, b):
    tmp = a.with_name(a.name + ".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def test_swapped_chunks_are_named_and_pending_again(tmp_path):
    """Issue 35, case 2: two chunk files of gcc/decoded swapped (and two of inputs/reference): each reads back
    with a sound crc32c, but not the digest recorded with its batch (bound to the store, the array and the place)."""
    path = tmp_path / "run.zarr"
    st = filled(path)
    assert st.misplaced_chunks("gcc") == {} and st.misplaced_chunks("inputs") == {}
    _swap(path / "gcc" / "decoded" / "c" / "1" / "0", path / "gcc" / "decoded" / "c" / "2" / "0")
    _swap(path / "inputs" / "reference" / "c" / "0" / "0", path / "inputs" / "reference" / "c" / "3" / "0")
    st = RunStore.open(path)
    assert st.batch_status("gcc")[1] == BatchStatus.DECODED  # still marked done, and the chunks read...
    assert zarr.open_array(str(path / "gcc" / "decoded"), mode="r")[K:2 * K].max() == 2.0  # (batch 2's rows)
    assert st.misplaced_chunks("gcc") == {1: ["gcc/decoded/c/1/0"], 2: ["gcc/decoded/c/2/0"]}
    assert st.misplaced_chunks("uncoded") == {}
    assert st.misplaced_chunks("inputs") == {0: ["inputs/reference/c/0/0"], 3: ["inputs/reference/c/3/0"]}
    assert st.pending_batches("gcc", retry_failed=True).tolist() == [1, 2]  # ...but run again
    assert st.pending_batches("uncoded").tolist() == []


@pytest.mark.parametrize("source", ["another store", "another batch", "another scheme"])
def test_a_chunk_copied_with_its_digest_is_named(tmp_path, source):
    """A chunk copied together with the digest recorded for it (so that the two agree) from another store of
    the same layout, from another batch, or from another scheme's array (the same values: batch 1 wrote 1.0 in
    both schemes) is still named: the digest is bound to the store's id, the chunk's key and the array's path."""
    path = tmp_path / "run.zarr"
    filled(path)
    st = RunStore.open(path)
    digest = zarr.open_array(str(path / "gcc" / "chunk_digest"), mode="r+")
    if source == "another store":
        other = tmp_path / "other.zarr"
        lo, hi = make(other).batch_rows(2)
        copied = write_decoded(other, "gcc", 2, np.full((hi - lo, 10), 7.0, np.float32))
        shutil.copy(other / "gcc" / "decoded" / "c" / "2" / "0", path / "gcc" / "decoded" / "c" / "2" / "0")
    elif source == "another batch":
        shutil.copy(path / "gcc" / "decoded" / "c" / "1" / "0", path / "gcc" / "decoded" / "c" / "2" / "0")
        copied = digest[1]
    else:
        shutil.copy(path / "uncoded" / "decoded" / "c" / "2" / "0", path / "gcc" / "decoded" / "c" / "2" / "0")
        copied = zarr.open_array(str(path / "uncoded" / "chunk_digest"), mode="r")[2]
    assert copied[0] != 0 and copied[0] != digest[2][0]
    digest[2] = copied
    assert st.misplaced_chunks("gcc") == {2: ["gcc/decoded/c/2/0"]}
    assert st.pending_batches("gcc").tolist() == [2]


def test_a_failed_batch_without_a_chunk_is_not_missing(tmp_path):
    path = tmp_path / "run.zarr"
    st = make(path)
    st.write_records("gcc", [record(0, status=BatchStatus.FAILED)])  # built on the driver: no decoded rows
    assert st.missing_batches("gcc").tolist() == []


def _misspell(file, key):
    """Flip one byte of `key`'s last letter in the metadata file `file` (``"codecs"`` -> ``"codecr"``)."""
    text = file.read_text()
    at = text.index(f'"{key}"') + len(key)
    file.write_text(text[:at] + chr(ord(text[at]) ^ 0x01) + text[at + 1:])


@pytest.mark.parametrize(("damage", "match"), [
    (lambda p: (p / "gcc" / "zarr.json").unlink(), r"gcc/zarr\.json is missing"),
    (lambda p: (p / "gcc" / "status" / "zarr.json").write_text("not json"), r"gcc/status/zarr\.json cannot be read"),
    (lambda p: (shutil.rmtree(p / "uncoded"), (p / "uncoded").write_text("x")), r"uncoded is a file"),
    (lambda p: (p / "inputs" / "group" / "c" / "0").unlink(), r"inputs/group has lost its chunk c/0"),
    (lambda p: shutil.rmtree(p / "inputs" / "reference"), r"inputs/reference/zarr\.json is missing"),
    # issue 35, case 7: one flipped byte misspelling a key (a MetadataValidationError or KeyError traceback)
    *[(lambda p, f=f, k=k: _misspell(p / f, k), re.escape(f) + r" is not valid Zarr")
      for f, k in (("gcc/decoded/zarr.json", "codecs"), ("gcc/decoded/zarr.json", "fill_value"),
                   ("inputs/reference/zarr.json", "chunk_grid"), ("gcc/status/zarr.json", "zarr_format"),
                   ("gcc/sample/zarr.json", "dimension_names"))],
], ids=["group-zarr-json-deleted", "array-zarr-json-not-json", "group-folder-is-a-file",
        "coordinate-chunk-deleted", "array-folder-deleted", "misspelled-codecs", "misspelled-fill_value",
        "misspelled-chunk_grid", "misspelled-zarr_format", "misspelled-dimension_names"])
def test_damaged_metadata_is_one_line_for_a_resume_and_a_reader(tmp_path, damage, match):
    path = tmp_path / "run.zarr"
    filled(path)
    damage(path)
    with pytest.raises(StoreError, match=r"the store is damaged: " + match) as e:
        RunStore.resume(path, **LAYOUT)
    assert "\n" not in str(e.value) and "--overwrite" in str(e.value)
    with pytest.raises(StoreError, match=match):
        summarize_run(str(path))


def test_check_structure_passes_a_whole_store(tmp_path):
    st = filled(tmp_path / "run.zarr")
    check_structure(st.path, st.attrs)  # no error


# ------------------------------------------------------------------------------- the run's token
def test_a_write_with_another_runs_token_is_refused_and_writes_nothing(tmp_path):
    path = tmp_path / "run.zarr"
    st = make(path)
    old = st.token
    assert isinstance(old, str) and len(old) == 32
    write_decoded(path, "gcc", 0, np.ones((K, 10), np.float32), token=old)
    resumed = RunStore.resume(path, **LAYOUT)
    assert resumed.token not in (None, old) and resumed.attrs["run_token"] == resumed.token
    with pytest.raises(WriteRefusedError, match="another run now writes"):
        write_decoded(path, "gcc", 1, np.ones((K, 10), np.float32), token=old)
    with pytest.raises(WriteRefusedError):
        write_inputs(path, 1, labels=np.ones(K), reference=np.ones((K, 10)), token=old)
    assert not (path / "gcc" / "decoded" / "c" / "1").exists()
    assert not (path / "inputs" / "labels" / "c" / "1").exists()
    assert RunStore.open(path).batch_status("inputs")[1] == 0
    write_decoded(path, "gcc", 1, np.ones((K, 10), np.float32), token=resumed.token)  # the new run writes
    assert (path / "gcc" / "decoded" / "c" / "1" / "0").is_file()


def test_an_overwrite_gives_a_new_token_and_refuses_the_old_runs_writes(tmp_path):
    path = tmp_path / "run.zarr"
    old = make(path).token
    new = make(path, overwrite=True).token
    assert new != old
    with pytest.raises(WriteRefusedError):
        write_decoded(path, "gcc", 0, np.ones((K, 10), np.float32), token=old)
    with pytest.raises(WriteRefusedError):
        run_store_mod._write_records(path, "gcc", [record(0)], token=old)
    assert RunStore.open(path).batch_status("gcc")[0] == 0


# ------------------------------------------------------------------------- a store moved mid-run
def test_writes_to_a_store_moved_away_are_refused_and_recreate_nothing(tmp_path):
    path = tmp_path / "run.zarr"
    st = make(path)
    write_decoded(path, "gcc", 0, np.ones((K, 10), np.float32), token=st.token)
    path.rename(tmp_path / "moved.zarr")
    with pytest.raises(WriteRefusedError, match="the store is gone"):
        write_decoded(path, "gcc", 1, np.ones((K, 10), np.float32), token=st.token)
    with pytest.raises(WriteRefusedError, match="the store is gone"):
        st.write_records("gcc", [record(0)])
    with pytest.raises(WriteRefusedError, match="the store is gone"):
        st.finish("failed")
    assert not path.exists()  # no skeleton of a store (zarr creates the folders of what it writes)


def test_a_write_under_way_when_the_store_moves_lands_in_the_moved_store(tmp_path):
    """The workers' handles follow the folder they opened (a file descriptor): a write that passed its checks
    just before the store was moved (or replaced, or removed) never creates anything at the old path."""
    from gcc_dask.store.writes import _array, _handles

    path = tmp_path / "run.zarr"
    st = make(path)
    decoded = _array(_handles(path, st.token), "gcc", "decoded")  # checked, about to write
    path.rename(tmp_path / "moved.zarr")
    decoded[0:K] = np.full((K, 10), 5.0, np.float32)
    assert not path.exists()
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "moved.zarr" / "gcc" / "decoded"))[0:K], 5.0)


# ------------------------------------------------------------------------------ replacing a store
def test_an_overwrite_swaps_the_store_in_with_renames(tmp_path, monkeypatch):
    path = tmp_path / "run.zarr"
    filled(path)
    renames = []
    real = os.rename
    monkeypatch.setattr(run_store_mod.os, "rename", lambda a, b: (renames.append((str(a), str(b))), real(a, b)))
    new = make(path, overwrite=True)
    names = [(os.path.basename(a), os.path.basename(b)) for a, b in renames]
    assert names[0][0] == "run.zarr" and names[0][1].startswith(".run.zarr.replaced-")
    assert names[1][0].startswith(".run.zarr.creating-") and names[1][1] == "run.zarr"
    assert new.batch_status("gcc").tolist() == [0, 0, 0, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.zarr"]  # the old store is gone


def test_a_swap_that_fails_puts_the_old_store_back(tmp_path, monkeypatch):
    path = tmp_path / "run.zarr"
    filled(path)
    real = os.rename

    def second_fails(a, b):
        if os.path.basename(str(a)).startswith(".run.zarr.creating-"):
            raise PermissionError(13, "Permission denied")
        real(a, b)

    monkeypatch.setattr(run_store_mod.os, "rename", second_fails)
    with pytest.raises(StoreError, match="cannot create the store there"):
        make(path, overwrite=True)
    assert RunStore.open(path).batch_status("gcc").tolist() == [1, 1, 1, 1]  # the old store, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.zarr"]


def test_leftovers_of_an_interrupted_replacement_are_removed(tmp_path):
    path = tmp_path / "run.zarr"
    for name in (".run.zarr.creating-0a1b2c3d", ".run.zarr.replaced-4e5f6a7b"):
        (tmp_path / name / "gcc").mkdir(parents=True)
    (tmp_path / ".run.zarr.lock").write_text("{}")
    (tmp_path / ".other.zarr.creating-00000000").mkdir()
    assert RunStore.resume(path, **LAYOUT) is None  # nothing to resume...
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.zarr.creating-00000000", ".run.zarr.lock"]
    assert remove_leftovers(path) == []


def test_an_overwrite_never_deletes_what_is_not_a_store(tmp_path):
    path = tmp_path / "run.zarr"
    path.mkdir()
    (path / "thesis.tex").write_text("mine")
    with pytest.raises(StoreError, match="expected a gcc-dask run store"):
        make(path, overwrite=True)
    assert (path / "thesis.tex").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.zarr"]


# ------------------------------------------------------------------------- driver write failures
def test_a_driver_write_that_fails_is_one_line_naming_the_array_and_batches(tmp_path, monkeypatch):
    import errno

    from zarr.storage import LocalStore

    path = tmp_path / "run.zarr"
    st = make(path)
    real = LocalStore.set

    async def full(self, key, value, *args, **kwargs):
        if "/status/" in key or key.endswith("zarr.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return await real(self, key, value, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "set", full)
    with pytest.raises(StoreError, match=r"^store: cannot write gcc/status of batches 0-2 to .*run\.zarr.* "
                                         r"No space left on device.*run the same command again") as e:
        st.write_records("gcc", [record(b) for b in range(3)])
    assert "\n" not in str(e.value)
    with pytest.raises(StoreError, match=r"cannot write the root attributes \(zarr\.json\)"):
        st.finish("failed")
    monkeypatch.setattr(LocalStore, "set", real)
    assert RunStore.open(path).batch_status("gcc").tolist() == [0, 0, 0, 0]  # no batch marked done


# ------------------------------------------------------------- issue 35, case 4: deleted chunks, read or resumed
@pytest.mark.parametrize("lost", [("gcc/decoded/c/2/0",), ("gcc/received/c/0/0", "gcc/rel_acc/c/0"),
                                  ("uncoded/mse/c/0",), ("gcc/status/c/0",)],
                         ids=["decoded", "received-rel_acc", "mse", "status"])
def test_a_reader_names_the_deleted_chunks_of_done_batches_in_one_line(tmp_path, lost):
    """The summary (and the report, through the same check) used to read a deleted chunk as fill values: NaN
    rows counted as wrong (rel_acc 0.933 for 0.997), ``recv 0``, NaN metrics, all without a word."""
    path = tmp_path / "run.zarr"
    filled(path)
    summarize_run(str(path))  # whole: it reads
    for name in lost:
        (path / name).unlink()
    with pytest.raises(StoreError) as e:
        summarize_run(str(path))
    line = str(e.value)
    assert "\n" not in line and "missing or misplaced" in line and "run the same command" in line, line
    for name in lost:
        assert name in line, line


def test_deleted_record_chunks_are_pending_again_and_stay_so_until_rewritten(tmp_path):
    """A deleted ``received``/``rel_acc``/``mse`` chunk (up to 1,024 batches' records) used to stay lost for ever
    (``recv 0``, NaN metrics); a resume now marks every done batch of that chunk pending before any is rerun."""
    path = tmp_path / "run.zarr"
    filled(path)
    (path / "gcc" / "received" / "c" / "0" / "0").unlink()
    (path / "uncoded" / "mse" / "c" / "0").unlink()
    st = RunStore.open(path)
    assert st.missing_batches("gcc").tolist() == [0, 1, 2, 3]
    assert st.pending_batches("uncoded").tolist() == [0, 1, 2, 3]
    st = RunStore.resume(path, **LAYOUT)
    assert st.batch_status("gcc").tolist() == [0, 0, 0, 0]  # pending, so a run stopped midway reruns the rest
    assert st.batch_status("uncoded").tolist() == [0, 0, 0, 0]
    st.write_records("gcc", [record(1)])  # one batch rewritten: its chunk is back, the others still pending
    assert st.pending_batches("gcc").tolist() == [0, 2, 3]


def test_a_deleted_filled_chunk_is_told_from_one_never_written(tmp_path):
    path = tmp_path / "run.zarr"
    st = make(path)
    for b in range(st.num_batches):
        lo, hi = st.batch_rows(b)
        fill = np.arange(hi - lo) == 0 if b == 1 else None  # only batch 1 filled a sample: only it has a chunk
        digest = write_decoded(path, "gcc", b, np.full((hi - lo, 10), float(b), np.float32), fill, token=st.token)
        st.write_records("gcc", [record(b, digest=digest)])
    assert sorted(p.name for p in (path / "gcc" / "filled" / "c").iterdir()) == ["1"]
    assert st.missing_batches("gcc").tolist() == []
    (path / "gcc" / "filled" / "c" / "1").unlink()
    assert st.missing_batches("gcc").tolist() == [1]


# ------------------------------------------------------------------- issue 35, case 6: a store removed mid-run
def test_a_write_that_lands_while_the_store_is_removed_leaves_nothing_there(tmp_path, monkeypatch):
    """``rm -r`` lists a folder, then a late write puts its chunk in it: the folder could not be removed, and
    ``gcc/decoded/c/30/0`` stayed where the store was. The write now finds the root ``zarr.json`` gone after it
    wrote, removes what it put there, and is refused."""
    from gcc_dask.store import writes

    path = tmp_path / "run.zarr"
    st = make(path)
    lo, hi = st.batch_rows(1)
    real = writes._array

    def removed_meanwhile(h, group, name):  # the removal passes between the token check and the write
        arr = real(h, group, name)
        for meta in path.rglob("zarr.json"):
            meta.unlink()
        return arr

    monkeypatch.setattr(writes, "_array", removed_meanwhile)
    with pytest.raises(WriteRefusedError, match="the store is gone"):
        write_decoded(path, "gcc", 1, np.ones((hi - lo, 10), np.float32), token=st.token)
    assert not (path / "gcc" / "decoded" / "c" / "1").exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_what_late_writes_left_of_a_removed_store_is_no_obstacle(tmp_path, overwrite):
    """The same command after the store was removed mid-run used to say "not a Zarr v3 store" for ever; the
    remains (chunk files, no zarr.json) are removed and a new store starts there."""
    path = tmp_path / "run.zarr"
    (path / "gcc" / "decoded" / "c" / "30").mkdir(parents=True)
    (path / "gcc" / "decoded" / "c" / "30" / "0").write_bytes(b"x" * 40)
    (path / "inputs" / "status" / "c").mkdir(parents=True)
    (path / "inputs" / "status" / "c" / "30").write_bytes(b"x" * 8)
    assert run_store_mod.store_remains(path) == 2
    run_store_mod.check_target(path, overwrite)  # not refused as a folder of other files
    assert RunStore.resume(path, overwrite=overwrite, **LAYOUT) is None and not path.exists()
    (path / "gcc" / "decoded" / "c" / "30").mkdir(parents=True)
    (path / "gcc" / "decoded" / "c" / "30" / "0").write_bytes(b"x" * 40)
    st = RunStore.create(path, overwrite=overwrite, **LAYOUT)  # create() alone clears them too
    assert st.pending_batches("gcc").tolist() == [0, 1, 2, 3]


def test_a_folder_with_any_other_file_is_never_taken_for_remains(tmp_path):
    path = tmp_path / "mine"
    (path / "gcc" / "decoded" / "c" / "30").mkdir(parents=True)
    (path / "gcc" / "decoded" / "c" / "30" / "0").write_bytes(b"x")
    (path / "notes.txt").write_text("mine")
    assert run_store_mod.store_remains(path) is None
    remove_leftovers(path)
    assert (path / "notes.txt").is_file() and (path / "gcc" / "decoded" / "c" / "30" / "0").is_file()
    with pytest.raises(StoreError):
        RunStore.resume(path, **LAYOUT)


@pytest.mark.parametrize("key", ["batch_size", "num_samples", "num_batches", "output_shape", "has_labels",
                                 "has_reference", "dtype", "status"])
def test_a_misspelt_root_attribute_is_one_line_for_a_resume_and_a_reader(tmp_path, key):
    """One flipped byte misspelling a layout attribute of the root's zarr.json: a KeyError traceback from run
    and report before (a breaker's 8 of 142 misspellings), one line naming the attribute now."""
    path = tmp_path / "run.zarr"
    filled(path)
    _misspell(path / "zarr.json", key)
    with pytest.raises(StoreError, match=rf"lacks the attribute '{key}'") as e:
        RunStore.resume(path, **LAYOUT)
    assert "\n" not in str(e.value) and "--overwrite" in str(e.value)
    with pytest.raises(StoreError, match=rf"lacks the attribute '{key}'"):
        summarize_run(str(path))
