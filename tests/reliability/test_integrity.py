"""Nothing silently mixed or corrupted: a killed driver's tasks, a kill during ``--overwrite``, a full or read-only
store, damaged and missing chunks, a worker lost while the samples are composed (docs/reliability.rst).

Each test failed before its fix: a killed driver's reference tasks wrote its rows into the store of the run that
replaced it (and its plugins stayed on the workers); a kill during ``--overwrite`` left a half-deleted store that
every rerun refused; driver-side write failures were tracebacks; a flipped byte read back silently and a
deleted chunk read back as fill values of a batch still counted done; a worker lost during the composition
ended the run with a ``KilledWorker`` traceback.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
import zarr

import gcc_dask as gd
from rel_helpers import assert_stores_equal, cli, read_group, status, subprocess_env, synthetic_config


def _gcc_dask(*args, timeout=300):
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env())


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------- orphaned tasks
class OutsideCluster:
    """``dask scheduler`` and ``dask worker`` (2 processes x 8 threads, with nannies) as subprocesses, as a user
    runs them; ``allowed-failures: 0`` on the scheduler, as the README asks of an outside cluster."""

    def __init__(self, tmp: Path) -> None:
        env = {**subprocess_env(), "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
        self.file = tmp / "scheduler.json"
        self.procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--no-dashboard",
                                        "--scheduler-file", str(self.file), "--port", "0"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
        while not self.file.exists() and self.procs[0].poll() is None:  # (no time bound: pytest-timeout ends a hang)
            time.sleep(0.1)
        self.procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                            str(self.file), "--nworkers", "2", "--nthreads", "8", "--no-dashboard"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        from distributed import Client

        self.client = Client(scheduler_file=str(self.file), timeout=60)
        self.client.wait_for_workers(2, timeout=120)

    def plugins(self) -> tuple[list[str], list[str]]:
        """The gcc-dask worker plugins registered on the scheduler, and installed on the workers."""
        on_scheduler = self.client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
        on_workers = self.client.run(lambda dask_worker: list(dask_worker.plugins))
        return (sorted(n for n in on_scheduler if n.startswith("gcc-dask-")),
                sorted(n for ns in on_workers.values() for n in ns if n.startswith("gcc-dask-")))

    def busy(self) -> int:
        """Tasks still running on the workers (those of a dead client included)."""
        return sum(self.client.run(lambda dask_worker: sum(
            ts.state in ("executing", "cancelled", "long-running") for ts in dask_worker.state.tasks.values()
        )).values())

    def close(self) -> None:
        self.client.close()
        for p in reversed(self.procs):
            p.kill()
            p.wait(timeout=60)


@pytest.mark.slow
def test_a_killed_drivers_tasks_never_write_into_the_store_that_replaced_it(tmp_path):
    """Run A's uncoded references are held at a gate; A's driver is SIGKILLed; run B (other data, another f) is
    run with ``--overwrite`` on the same store and completes; then A's references are let go. Not one row of
    B's store is A's, and A's plugins are gone from the scheduler and the workers."""
    cluster = OutsideCluster(tmp_path)
    gate = tmp_path / "gate"
    gate.mkdir()
    store = tmp_path / "run.zarr"
    on_cluster = {"scheduler_file": str(cluster.file), "processes": None, "n_workers": None,
                  "threads_per_worker": None}
    a = synthetic_config(store, batches=16, k=4, n=8, cluster=on_cluster,
                         workload={"kind": "callable", "name": "rel_helpers:gated",
                                   "params": {"kwargs": {"gate": str(gate)}}})
    b = synthetic_config(store, batches=16, k=4, n=8, cluster=on_cluster,
                         workload={"kind": "callable", "name": "rel_helpers:xcosx"},
                         source={"kind": "synthetic", "num_samples": 64, "shape": [6], "seed": 4})
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(a))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(b))
    try:
        proc = subprocess.Popen(cli("run", str(tmp_path / "a.yaml"), "--no-progress"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=subprocess_env())
        deadline = time.monotonic() + 180
        while len(glob.glob(str(gate / "started-*"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None and glob.glob(str(gate / "started-*")), "run A's references never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        held = len(glob.glob(str(gate / "started-*")))
        res = _gcc_dask("run", str(tmp_path / "b.yaml"), "--no-progress", "--overwrite")
        assert res.returncode == 0, res.stderr[-3000:]
        (gate / "release").write_text("")  # A's references return now, into B's finished store
        deadline = time.monotonic() + 120
        while (len(glob.glob(str(gate / "finished-*"))) < held or cluster.busy()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(glob.glob(str(gate / "finished-*"))) >= held > 0
        root = zarr.open_group(str(store), mode="r", use_consolidated=False)
        x, _ = gd.sources.make_source("synthetic", num_samples=64, shape=[6], seed=4).take(root["inputs/sample"][:])
        x_a, _ = gd.sources.make_source("synthetic", num_samples=64, shape=[6], seed=3).take(root["inputs/sample"][:])
        reference = root["inputs/reference"][:]
        np.testing.assert_array_equal(reference, (x * np.cos(x)).astype(np.float32))  # B's f on B's data, every row
        assert not np.isclose(reference, x_a * np.sin(x_a)).all(axis=1).any()
        assert root.attrs["status"] == "complete"
        assert cluster.plugins() == ([], [])  # A's removed by B, B's by itself
    finally:
        (gate / "release").write_text("")
        cluster.close()


# --------------------------------------------------------------------------- a kill during --overwrite
@pytest.mark.slow
@pytest.mark.parametrize("phase", ["creating", "replaced"])
def test_a_kill_during_overwrite_then_the_same_command_succeeds(client, tmp_path, phase):
    """SIGKILL the driver while `--overwrite` builds the new store (``.run.zarr.creating-*``) or removes the old
    one (``.run.zarr.replaced-*``); the same command then completes, and nothing is left aside. (It used to
    delete the old store in place: a kill then left a half-deleted folder that every rerun refused, "not a
    Zarr v3 store", and the hidden build folder that nothing removed.)"""
    store = tmp_path / "run.zarr"
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text(yaml.safe_dump(synthetic_config(store, batches=4, k=4, n=8)))
    assert gd.run_pipeline(str(pipe), client=client).status == "complete"  # the store to overwrite (in-process)
    bulk = store / "gcc" / "decoded" / "c" / "bulk"  # many files: removing the old store takes a while
    bulk.mkdir()
    for i in range(20_000 if phase == "replaced" else 10):
        (bulk / str(i)).touch()
    files = sum(len(f) for _, _, f in os.walk(store))
    proc = subprocess.Popen(cli("run", str(pipe), "--no-progress", "--overwrite"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=subprocess_env())
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if glob.glob(str(tmp_path / f".run.zarr.{phase}-*")):
            break
        if phase == "replaced" and store.is_dir() and not (store / "zarr.json").exists():
            break  # an in-place removal under way (what it used to do)
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    again = _gcc_dask("run", str(pipe), "--no-progress", "--overwrite")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.yaml", "run.zarr"]
    root = zarr.open_group(str(store), mode="r")
    assert root.attrs["status"] == "complete" and (status(store) > 0).all()
    assert sum(len(f) for _, _, f in os.walk(store)) < files


# ------------------------------------------------------------------------------ full or read-only store
def _mount(*args: str) -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None and subprocess.run(
        ["mount", *args], capture_output=True).returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.slow
def test_a_full_store_is_one_line_and_the_rerun_after_freeing_space_completes(client, tmp_path):
    """A small tmpfs filled up after the store was created: the run stops with one stderr line naming the store
    and the array (no traceback); once space is freed the same command resumes and equals a clean run."""
    disk = tmp_path / "disk"
    disk.mkdir()
    # 3 MiB: room for the store of 2 batches (a file takes a 4 KiB page on a tmpfs); then the filler leaves 16 KiB,
    # fewer than the files of one more batch: 16 batches are as many as the test needs (128 took 3 times as long)
    if not _mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)):
        pytest.skip("needs root and mount (a small tmpfs) to fill a file system for real")
    try:
        store = disk / "run.zarr"
        cfg = synthetic_config(store, batches=16, k=4, n=8, block=4, run={"limit_batches": 2})
        pipe = tmp_path / "pipe.yaml"
        pipe.write_text(yaml.safe_dump(cfg))
        assert gd.run_pipeline(str(pipe), client=client).status == "incomplete"  # the store, 2 batches (in-process)
        subprocess.run(["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=4k"], capture_output=True)
        subprocess.run(["truncate", "-s", "-16k", str(disk / "filler")], check=True)
        cfg["run"]["limit_batches"] = None
        pipe.write_text(yaml.safe_dump(cfg))
        res = _gcc_dask("run", str(pipe), "--no-progress")
        assert res.returncode == 2, res.stderr[-2000:]
        lines = _lines(res.stderr)
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert "No space left on device" in lines[0] and str(store) in lines[0] and "cannot write" in lines[0]
        (disk / "filler").unlink()
        again = _gcc_dask("run", str(pipe), "--no-progress")
        assert again.returncode == 0, again.stderr
        clean = gd.run_pipeline({**cfg, "store": {"path": str(tmp_path / "clean.zarr")}}, client=client)
        assert_stores_equal(store, clean.path, ["gcc"])
    finally:
        _umount(disk)


@pytest.mark.slow
def test_a_disk_full_while_the_store_is_created_is_one_line_and_leaves_nothing(tmp_path):
    """Issue 35, case 7: a disk that fills while the store is created. zarr's writes of the layout still under way
    printed "Task exception was never retrieved" with a traceback each (1,621 lines) and wrote into the folder
    being removed (a ``.creating-*`` folder stayed); now one line, nothing left, and the rerun completes."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)):
        pytest.skip("needs root and mount (a small tmpfs) to fill a file system for real")
    try:
        store = disk / "run.zarr"
        pipe = tmp_path / "pipe.yaml"
        pipe.write_text(yaml.safe_dump(synthetic_config(store, batches=16, k=4, n=8, block=4,
                                                        schemes=["gcc", "uncoded"])))
        subprocess.run(["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=4k"], capture_output=True)
        subprocess.run(["truncate", "-s", "-64k", str(disk / "filler")], check=True)
        res = _gcc_dask("run", str(pipe), "--no-progress")
        lines = _lines(res.stderr)
        assert res.returncode == 2 and len(lines) == 1, res.stderr[-3000:]
        assert "cannot create the store there" in lines[0] and "No space left on device" in lines[0], lines[0]
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no .run.zarr.creating-* left
        (disk / "filler").unlink()
        again = _gcc_dask("run", str(pipe), "--no-progress")
        assert again.returncode == 0, again.stderr
    finally:
        _umount(disk)


@pytest.mark.slow
def test_a_read_only_store_is_one_line_and_resumes_once_writable(client, tmp_path):
    store = tmp_path / "run.zarr"
    cfg = synthetic_config(store, batches=8, k=4, n=8, run={"limit_batches": 2})
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text(yaml.safe_dump(cfg))
    assert gd.run_pipeline(str(pipe), client=client).status == "incomplete"  # the store, 2 batches (in-process)
    cfg["run"]["limit_batches"] = None
    pipe.write_text(yaml.safe_dump(cfg))
    if os.geteuid() != 0:
        mounted = False
        for p in [store, *store.rglob("*")]:
            p.chmod(p.stat().st_mode & 0o555)
    elif _mount("--bind", str(store), str(store)) and _mount("-o", "remount,ro,bind", str(store)):
        mounted = True
    else:
        pytest.skip("root without mount: a store cannot be made read-only")
    try:
        res = _gcc_dask("run", str(pipe), "--no-progress")
        assert res.returncode == 2, res.stderr[-2000:]
        lines = _lines(res.stderr)
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert str(store) in lines[0] and ("Read-only file system" in lines[0] or "Permission denied" in lines[0])
    finally:
        if mounted:
            _umount(store)
        else:
            for p in [store, *store.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)
    again = _gcc_dask("run", str(pipe), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert (status(store) > 0).all()


def test_a_record_write_that_fails_marks_the_store_failed_and_the_rerun_completes(client, tmp_path, monkeypatch):
    """The driver's record writes meet a full disk (``ENOSPC`` from the file system, injected): one StoreError
    line naming the array and the batches, the store marked ``failed``, no batch written off as done; the same
    run afterwards completes and equals a clean one."""
    import errno

    from zarr.storage import LocalStore

    path = tmp_path / "run.zarr"
    cfg = synthetic_config(path, batches=8, k=4, n=8)
    real = LocalStore.set

    records = ("received", "failed", "latency_s", "cutoff_s", "status", "n_received", "mse")  # the driver's

    async def full(self, key, value, *args, **kwargs):
        parts = key.split("/")
        if parts[0] == "gcc" and len(parts) > 2 and parts[1] in records and parts[2] == "c":
            raise OSError(errno.ENOSPC, "No space left on device")
        return await real(self, key, value, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "set", full)
    with pytest.raises(gd.errors.StoreError, match=r"^store: cannot write gcc/\w+ of batch(es)? [\d-]+ to .*run\.zarr"
                                                   r".*No space left on device") as e:
        gd.run_pipeline(cfg, client=client)
    assert "\n" not in str(e.value)
    monkeypatch.setattr(LocalStore, "set", real)
    assert zarr.open_group(str(path), mode="r").attrs["status"] == "failed"
    assert (status(path, "gcc") == 0).all()
    again = gd.run_pipeline(cfg, client=client)
    assert again.status == "complete"
    clean = gd.run_pipeline(cfg, client=client, out=tmp_path / "clean.zarr")
    assert_stores_equal(path, clean.path, ["gcc"])


# ------------------------------------------------------------------------- damaged and missing chunks
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run (as a CLI subprocess would leave it) and a pristine copy of it."""
    tmp = tmp_path_factory.mktemp("finished")
    store = tmp / "run.zarr"
    pipe = tmp / "pipe.yaml"
    pipe.write_text(yaml.safe_dump(synthetic_config(store, batches=8, k=4, n=8, block=2, schemes=["gcc", "uncoded"],
                                                    source={"kind": "npy", "path": str(_npy_with_labels(tmp)),
                                                            "labels": str(tmp / "y.npy")},
                                                    composition="similarity")))
    res = _gcc_dask("run", str(pipe), "--no-progress")
    assert res.returncode == 0, res.stderr
    shutil.copytree(store, tmp / "pristine.zarr")
    return {"store": store, "pipe": pipe, "pristine": tmp / "pristine.zarr"}


def _npy_with_labels(tmp: Path) -> Path:
    x = np.random.default_rng(5).random((64, 6)).astype("float32")
    np.save(tmp / "x.npy", x)
    np.save(tmp / "y.npy", np.arange(64) % 3)
    return tmp / "x.npy"


@pytest.fixture
def damaged(finished):
    """The finished store, restored from its copy for each test."""
    shutil.rmtree(finished["store"])
    shutil.copytree(finished["pristine"], finished["store"])
    return finished


def _flip(file: Path) -> None:
    raw = bytearray(file.read_bytes())
    raw[len(raw) // 2] ^= 0x04
    file.write_bytes(bytes(raw))


@pytest.mark.slow
def test_a_flipped_byte_is_one_line_naming_the_array_and_batch_and_deleting_the_chunk_repairs_it(damaged):
    store = damaged["store"]
    _flip(store / "gcc" / "decoded" / "c" / "3" / "0")
    for args in (("report", str(store), "--out", str(store.parent / "rep")), ("run", str(damaged["pipe"]),
                                                                             "--no-progress")):
        res = _gcc_dask(*args)
        lines = _lines(res.stderr)
        assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
        assert "'gcc/decoded' has a damaged chunk c/3/0" in lines[0] and "batch 3" in lines[0]
        assert "checksum" in lines[0]
    (store / "gcc" / "decoded" / "c" / "3" / "0").unlink()  # what the line says to do
    again = _gcc_dask("run", str(damaged["pipe"]), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "7 of 8 batches already done" in again.stdout
    assert_stores_equal(store, damaged["pristine"], ["gcc", "uncoded"])


@pytest.mark.slow
def test_batches_whose_chunks_are_missing_are_run_again(damaged):
    """A deleted ``decoded`` chunk reran its batch for that scheme, a deleted ``labels`` chunk its batch for every
    scheme (it used to read back as fill values, the resume reporting every batch done); the store then equals
    the run's own, bit for bit (virtual clock)."""
    store = damaged["store"]
    (store / "uncoded" / "decoded" / "c" / "2" / "0").unlink()
    (store / "inputs" / "labels" / "c" / "5").unlink()
    res = _gcc_dask("run", str(damaged["pipe"]), "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "resuming" in res.stdout and "6 of 8 batches already done" in res.stdout
    assert (store / "uncoded" / "decoded" / "c" / "2" / "0").is_file()
    assert (store / "inputs" / "labels" / "c" / "5").is_file()
    assert_stores_equal(store, damaged["pristine"], ["gcc", "uncoded"])
    np.testing.assert_array_equal(read_group(store, "inputs", ("labels",))["labels"],
                                  np.load(store.parent / "y.npy")[read_group(store, "inputs", ("sample",))["sample"]])


@pytest.mark.slow
def test_deleted_chunks_are_named_by_the_report_and_run_repairs_them(damaged):
    """Issue 35, case 4: a deleted ``decoded`` chunk gave ``report --no-recompute`` a RelAcc of 0.933 (true
    0.997) without a word; deleted ``received``, ``rel_acc`` and ``mse`` chunks stayed ``recv 0`` or NaN for
    ever. The report now names them in one line (status 2), and ``run`` recomputes their batches: the store
    then equals the run's own, bit for bit, and the report reads."""
    store = damaged["store"]
    for name in ("gcc/decoded/c/3/0", "gcc/received/c/0/0", "gcc/rel_acc/c/0", "uncoded/mse/c/0"):
        (store / name).unlink()
    res = _gcc_dask("report", str(store), "--out", str(store.parent / "rep"), "--no-recompute")
    lines = _lines(res.stderr)
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "4 chunks of done batches are missing" in lines[0] and "gcc/decoded/c/3/0 (batch 3)" in lines[0]
    assert "gcc/received/c/0/0 (batches 0-7)" in lines[0] and "run the same command" in lines[0]
    again = _gcc_dask("run", str(damaged["pipe"]), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert_stores_equal(store, damaged["pristine"], ["gcc", "uncoded"])
    res = _gcc_dask("report", str(store), "--out", str(store.parent / "rep"), "--no-recompute")
    assert res.returncode == 0, res.stderr


@pytest.mark.slow
def test_swapped_chunks_are_named_and_run_again(damaged):
    """Issue 35, case 2: two chunk files of ``gcc/decoded`` swapped, and one of ``inputs/reference`` copied over
    another's. Each still has a sound crc32c, and the resume used to say "8 of 8 batches already done" (the
    report's RelAcc then fell); their digests, bound to the store, the array and the chunk's place, name them in
    one warning, their batches are run again, and the store equals the run's own, bit for bit."""
    store = damaged["store"]
    a, b = store / "gcc" / "decoded" / "c" / "1" / "0", store / "gcc" / "decoded" / "c" / "4" / "0"
    a.rename(a.with_name("tmp"))
    b.rename(a)
    a.with_name("tmp").rename(b)
    shutil.copy(store / "inputs" / "reference" / "c" / "6" / "0", store / "inputs" / "reference" / "c" / "7" / "0")
    res = _gcc_dask("run", str(damaged["pipe"]), "--no-progress")
    assert res.returncode == 0, res.stderr
    said = [line for line in _lines(res.stdout + res.stderr) if "not the ones this store wrote there" in line]
    assert len(said) == 1, res.stdout + res.stderr
    assert ("gcc/decoded/c/1/0 (batch 1), gcc/decoded/c/4/0 (batch 4)" in said[0]
            and "inputs/reference/c/7/0 (batch 7)" in said[0]), said[0]
    assert "5 of 8 batches already done" in res.stdout
    assert_stores_equal(store, damaged["pristine"], ["gcc", "uncoded"])
    np.testing.assert_array_equal(read_group(store, "inputs", ("reference",))["reference"],
                                  read_group(damaged["pristine"], "inputs", ("reference",))["reference"])
    again = _gcc_dask("run", str(damaged["pipe"]), "--no-progress")  # repaired: nothing named, nothing to run
    assert again.returncode == 0 and "not the one" not in again.stdout + again.stderr
    assert "8 of 8 batches already done" in again.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("damage", "match"), [
    (lambda s: _flip(s / "gcc" / "status" / "c" / "0"), "'gcc/status' has a damaged chunk c/0 (batches 0-7)"),
    (lambda s: (s / "uncoded" / "received" / "zarr.json").write_text("{not json"),
     "uncoded/received/zarr.json cannot be read"),
    (lambda s: (s / "uncoded" / "zarr.json").unlink(), "uncoded/zarr.json is missing"),
    (lambda s: (shutil.rmtree(s / "gcc"), (s / "gcc").write_text("")), "gcc is a file"),
], ids=["status-chunk", "array-metadata-not-json", "group-metadata-deleted", "group-folder-is-a-file"])
def test_damaged_stores_are_one_line_for_a_resume_and_a_report(damaged, damage, match):
    store = damaged["store"]
    damage(store)
    for args in (("run", str(damaged["pipe"]), "--no-progress"), ("report", str(store), "--out",
                                                                 str(store.parent / "rep"))):
        res = _gcc_dask(*args)
        lines = _lines(res.stderr)
        assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert match in lines[0] and str(store) in lines[0]


# --------------------------------------------------------------------- a worker lost while composing
def _dies_once(marker: str, item: int) -> int:
    """Kill this worker process the first time it is called (a marker file remembers); else ``item * 10``."""
    if item == 1 and not os.path.exists(marker):
        Path(marker).write_text("")
        os.kill(os.getpid(), signal.SIGKILL)
    return item * 10


def _bad_data(shared: int, item: int) -> int:
    if item == 2:
        raise gd.errors.SourceError(f"source: sample {item} is bad")
    return item + shared


@pytest.mark.slow
def test_a_window_lost_with_its_worker_is_run_again(tmp_path):
    """On a process cluster without re-runs (``allowed-failures: 0``, the embedded cluster's setting), the
    window whose worker is SIGKILLed is submitted again; a data error of a window is raised with its own line
    and logged by no worker. (The composition used to end with a ``KilledWorker`` traceback.)"""
    import dask
    from distributed import Client, LocalCluster

    from gcc_dask.runtime.cluster import map_on_cluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=50) as cluster, Client(cluster) as c:
            out = map_on_cluster(c, _dies_once, range(4), str(tmp_path / "died"))
            assert out == [0, 10, 20, 30] and (tmp_path / "died").exists()
            with pytest.raises(gd.errors.SourceError, match="sample 2 is bad"):
                map_on_cluster(c, _bad_data, range(4), 5)


# ----------------------------------------------------------------------------- ONNX external weights
def test_changed_external_weights_are_refused_on_resume_and_reloaded_by_long_lived_workers(client, tmp_path):
    """An ONNX model whose weights are in ``model.onnx.data``: a resume after the weights changed is refused
    (it completed with two models mixed in one store), and a fresh run on the same workers (this session's
    cluster, whose processes keep loaded models) uses the new weights (it kept the old ones)."""
    from test_workloads import _external_model, _rewrite_weights

    x = np.random.default_rng(0).random((64, 6)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    model = _external_model(tmp_path, 1.0)
    cfg = synthetic_config(tmp_path / "run.zarr", batches=8, k=4, n=8, block=2, schemes=["uncoded"],
                           source={"kind": "npy", "path": str(tmp_path / "x.npy")},
                           workload={"kind": "onnx", "path": str(model)}, run={"limit_batches": 2})
    gd.run_pipeline(cfg, client=client)
    _rewrite_weights(tmp_path, 30.0)
    cfg["run"]["limit_batches"] = None
    with pytest.raises(gd.errors.StoreError, match="a run made with other model or data files"):
        gd.run_pipeline(cfg, client=client)
    _rewrite_weights(tmp_path, 2.0)
    res = gd.run_pipeline({**cfg, "store": {**cfg["store"], "overwrite": True}}, client=client)
    assert res.status == "complete"
    reference = read_group(res.path, "inputs", ("reference", "sample"))
    w = np.arange(18, dtype=np.float32).reshape(6, 3) / 10 * 2.0
    np.testing.assert_allclose(reference["reference"], x[reference["sample"]] @ w, rtol=1e-5)
