#!/usr/bin/env bash
# GPU check: the `gpu` tests, the CuPy kernel benchmark and the block throughput bench, on a CUDA machine.
# About 12 minutes on one GPU: installs the gpu extra if CuPy is missing, confirms that a device call
# works, runs `pytest -m gpu` (blocks included), `gcc-dask bench coding --gpu` (NumPy and CuPy, the full
# grid), then `gcc-dask bench pipeline --section throughput` (an embedded cluster that advertises the GPU:
# block encode/decode and the shards on CuPy).
# Usage: pipelines/gpu_check.sh [OUT_DIR]      (PYTHON=... picks the interpreter; default .venv/bin/python,
# else python3).   The report lands in OUT_DIR (default bench-gpu/): coding.md and CSV files.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
OUT="${1:-bench-gpu}"

if ! "$PY" -c "import cupy" 2>/dev/null; then
    echo "== installing the gpu extra (cupy-cuda12x)"
    "$PY" -m pip install -q -e ".[gpu,test]" || {
        echo "gpu_check: cannot install the gpu extra here (offline?); install cupy-cuda12x first" >&2; exit 1; }
fi
echo "== device"
"$PY" - <<'PY'
import cupy
cupy.zeros(1).sum().item()  # a GPU is "available" only if a device call succeeds
props = cupy.cuda.runtime.getDeviceProperties(0)
name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
print(f"{name}, {props['totalGlobalMem'] / 2**30:.0f} GiB, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
PY
echo "== pytest -m gpu"
timeout 180 "$PY" -m pytest -m gpu -q -p no:cacheprovider tests
echo "== gcc-dask bench coding --gpu"
timeout 360 "$PY" -m gcc_dask.cli bench coding --gpu --out "$OUT"
echo "== gcc-dask bench pipeline --section throughput (GPU workers)"
timeout 300 "$PY" -m gcc_dask.cli bench pipeline --section throughput --out "$OUT"
echo "== done: $OUT/coding.md, $OUT/pipeline.md"
