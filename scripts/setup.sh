#!/usr/bin/env bash
# Installs everything detforge needs to build and test on a fresh Debian 12 machine (root or sudo).
# The single truth for dependencies: CI (.ci/run), scripts/test.sh and scripts/demo.sh call it.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS=(build-essential cmake ninja-build pkg-config
      libdnnl-dev nlohmann-json3-dev libcli11-dev libturbojpeg0-dev libspng-dev
      libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev python3-pip python3-venv)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python for the reference checks that run in CI (pycocotools against committed goldens).
PY=${PYTHON:-python3}
if ! $PY -c "import pycocotools, numpy" >/dev/null 2>&1; then
  echo "setup: installing pycocotools and numpy from PyPI"
  $PY -m pip install -q pycocotools numpy || $PY -m pip install -q --break-system-packages pycocotools numpy
fi

# Optional extras owned by the CUDA backend (header-only cuDNN frontend) hook in here.
if [ -x scripts/setup_cuda_extras.sh ]; then scripts/setup_cuda_extras.sh; fi
echo "setup: done"
