#!/usr/bin/env bash
# Set-up command 1 of the README: install, build, then run the demo on the embedded model
# (models/demo): build a bundle, generate scenes, detect, print detections, write annotated PNGs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec "${BUILD_DIR:-build}/detforge" demo "$@"
