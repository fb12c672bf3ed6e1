#!/usr/bin/env bash
# Configures and builds detforge into build/ (CUDA backend too when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# nvcc lives in /usr/local/cuda/bin on the CI and device images, not always on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=$PATH:/usr/local/cuda/bin; fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD_DIR" -j"${JOBS:-$(nproc)}"
