#!/usr/bin/env bash
# Called by scripts/setup.sh when nvcc is present: fetches the header-only cuDNN frontend
# (PyPI nvidia-cudnn-frontend, pinned) into .devdeps/cudnn_frontend/include, where CMake looks
# (DETFORGE_CUDNN_FRONTEND_INCLUDE). Without it the CUDA backend still builds, but fp16
# convolutions run unfused (measured 7-9 % slower, see src/backends/cuda/NOTES.md).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || exit 0
dst=.devdeps/cudnn_frontend/include
[ -f "$dst/cudnn_frontend.h" ] && exit 0
VERSION=1.32.0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "setup: fetching cudnn-frontend $VERSION headers"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp" "nvidia-cudnn-frontend==$VERSION"
(cd "$tmp" && python3 -m zipfile -e nvidia_cudnn_frontend-*.whl x >/dev/null)
inc=$(dirname "$(find "$tmp/x" -name cudnn_frontend.h | head -1)")
mkdir -p "$(dirname "$dst")"
rm -rf "$dst" && cp -r "$inc" "$dst"
