#!/usr/bin/env bash
# Regenerate RESULTS.md and results/figures/*.png from scratch: the frontiers (every estimator at equal cost on
# held-out data, and the searches on training data that chose the coded candidates), the accuracy/rate sweeps,
# the composition sweeps on training and held-out data (MNIST; Fashion-MNIST when Debian's dataset-fashion-mnist
# is installed), one pipeline run (for the accuracy-against-deadline section), then the page. Fixed seeds: the
# numbers are reproduced exactly. About an hour on 2 cores (the Fashion-MNIST frontiers are most of it).
# Usage: pipelines/make_results.sh   (PYTHON=... to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for frontier in frontier_gcc_search frontier_mnist frontier_smooth frontier_polynomial; do
    "$PY" -m gcc_dask.cli sweep "pipelines/$frontier.yaml" --overwrite --no-progress
done
"$PY" -m gcc_dask.cli sweep pipelines/frontier_smooth.yaml --set function.kind=smooth --set name=frontier-smooth-net \
    --set function.low=null --set function.high=null --overwrite --no-progress
if [ -d /usr/share/datasets/fashion-mnist ]; then
    for frontier in frontier_fashion_search frontier_fashion frontier_vit_search frontier_vit; do
        "$PY" -m gcc_dask.cli sweep "pipelines/$frontier.yaml" --overwrite --no-progress
    done
fi
for sweep in rate_worst_case rate_bernoulli rate_smooth lcc_polynomial dnn_relacc composition_mnist; do
    "$PY" -m gcc_dask.cli sweep "pipelines/$sweep.yaml" --overwrite --no-progress
done
"$PY" -m gcc_dask.cli sweep pipelines/composition_mnist.yaml --set function.source.split=test \
    --out runs/composition_mnist_test.zarr --overwrite --no-progress
if [ -d /usr/share/datasets/fashion-mnist ]; then
    "$PY" -m gcc_dask.cli sweep pipelines/composition_fashion.yaml --overwrite --no-progress
    "$PY" -m gcc_dask.cli sweep pipelines/composition_fashion.yaml --set function.source.split=test \
        --out runs/composition_fashion_test.zarr --overwrite --no-progress
fi
"$PY" -m gcc_dask.cli run pipelines/mnist_lenet.yaml --set source.split=test --set source.limit=800 \
    --set code.block_size=8 --out runs/results_mnist_lenet.zarr --overwrite --no-progress
"$PY" -m gcc_dask.analysis.results --runs runs --out RESULTS.md --figures results/figures
