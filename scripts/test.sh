#!/usr/bin/env bash
# Set-up command 2 of the README: install, build, run the test suite (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"${JOBS:-$(nproc)}" "$@"
