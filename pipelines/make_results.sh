#!/usr/bin/env bash
# Regenerate RESULTS.md and results/figures/*.png from scratch: five accuracy/rate sweeps, one pipeline run
# (for the accuracy-against-deadline section), then the page. Fixed seeds: the numbers are reproduced exactly.
# About 8 minutes on 2 cores. Usage: pipelines/make_results.sh   (PYTHON=... to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for sweep in rate_worst_case rate_bernoulli rate_smooth lcc_polynomial dnn_relacc; do
    "$PY" -m gcc_dask.cli sweep "pipelines/$sweep.yaml" --overwrite --no-progress
done
"$PY" -m gcc_dask.cli run pipelines/mnist_lenet.yaml --set source.split=test --set source.limit=800 --out runs/results_mnist_lenet.zarr \
    --overwrite --no-progress
"$PY" -m gcc_dask.analysis.results --runs runs --out RESULTS.md --figures results/figures
