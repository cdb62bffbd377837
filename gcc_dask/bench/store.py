"""The cost of the store's chunk checksums: writing and reading ``decoded``-shaped chunks with and without
``crc32c`` (docs/store.rst, section 'Integrity'), in the same run, interleaved, as ratios.

A run store's arrays are compressed with ``zstd`` and checksummed with ``crc32c``
(:func:`gcc_dask.store.layout.codecs`). The baseline here is the same array with ``zstd`` alone (Zarr's default), written one chunk at a time as the
workers write a batch's ``decoded`` rows, and read back whole as a summary reads them.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from gcc_dask.bench.report import Table, Target

__all__ = ["checksum_section", "CHECKSUM_MAX"]

#: most a checksummed write or read may cost against the same without a checksum (ratio)
CHECKSUM_MAX = 1.25


def _codecs(checksum: bool):
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return (ZstdCodec(level=0, checksum=False), Crc32cCodec()) if checksum else (ZstdCodec(level=0, checksum=False),)


def _write_read(work: Path, checksum: bool, data: np.ndarray, rows: int) -> tuple[float, float]:
    """Seconds to write `data` chunk by chunk (`rows` rows each) into a new array, and to read it back whole."""
    import zarr

    path = work / f"bench-{'crc32c' if checksum else 'plain'}.zarr"
    shutil.rmtree(path, ignore_errors=True)
    arr = zarr.create_array(str(path), shape=data.shape, chunks=(rows, data.shape[1]), dtype=data.dtype,
                            fill_value=np.nan, compressors=_codecs(checksum), config={"write_empty_chunks": True})
    t0 = time.perf_counter()
    for start in range(0, data.shape[0], rows):
        arr[start:start + rows] = data[start:start + rows]
    wrote = time.perf_counter() - t0
    reader = zarr.open_array(str(path), mode="r")
    read = np.inf
    for _ in range(3):  # a read is short (tens of ms): the best of three
        t0 = time.perf_counter()
        back = reader[:]
        read = min(read, time.perf_counter() - t0)
    assert np.array_equal(back, data)
    shutil.rmtree(path, ignore_errors=True)
    return wrote, read


def checksum_section(work: Path, quick: bool, say) -> tuple[Table, list[Target]]:
    """Write and read 400 (quick: 50) chunks of 512 x 10 float32 estimates with and without ``crc32c``, in
    alternation, 7 (quick: 3) times each (each read three times); the best time of each, and their ratios."""
    batches, rows, outputs = (50 if quick else 400), 512, 10
    data = np.random.default_rng(0).standard_normal((batches * rows, outputs)).astype(np.float32)
    best = {(c, what): np.inf for c in (False, True) for what in ("write", "read")}
    for _ in range(3 if quick else 7):
        for checksum in (False, True):
            wrote, read = _write_read(work, checksum, data, rows)
            best[(checksum, "write")] = min(best[(checksum, "write")], wrote)
            best[(checksum, "read")] = min(best[(checksum, "read")], read)
    rows_out, targets = [], []
    for what in ("write", "read"):
        plain, crc = best[(False, what)], best[(True, what)]
        ratio = crc / plain
        rows_out.append({"what": f"{what} {batches} chunks of {rows} x {outputs} float32", "zstd_ms": plain * 1e3,
                         "zstd_crc32c_ms": crc * 1e3, "ratio": ratio,
                         "MB_per_s_crc32c": data.nbytes / crc / 1e6})
        targets.append(Target(f"checksummed {what} / unchecksummed {what}", ratio, CHECKSUM_MAX, "<=", "x",
                              f"{crc * 1e3:.1f} ms vs {plain * 1e3:.1f} ms"))
        say(f"  checksums: {what} {crc * 1e3:.1f} ms with crc32c, {plain * 1e3:.1f} ms without ({ratio:.3f}x)")
    notes = ("Zarr's zstd (level 0) alone against zstd followed by a crc32c checksum of each compressed chunk, "
             "the codecs of every array of a run store; chunks written one at a time (as workers write a batch's "
             "decoded rows), then read back whole (as a summary reads them); best of the interleaved repeats.")
    return Table("checksums", "The cost of the store's chunk checksums", rows_out, notes), targets
