#!/usr/bin/env bash
# Run THERE (the GPU machine; no network): unpacks .devdeps/debs (from scripts/device_prepare.sh)
# into /tmp/devroot, recreates ../shared from .devdeps/shared and models/demo when it is absent,
# and builds the CUDA-only tree (no oneDNN there) into build-device/.
# Usage: scripts/device_build.sh [ninja targets...]   (default: detforge_gpu_tests detforge_cli)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dr=/tmp/devroot
mkdir -p "$dr"
for f in "$root"/.devdeps/debs/*.deb; do
  if command -v dpkg >/dev/null; then dpkg -x "$f" "$dr"; else
    t=$(mktemp -d); (cd "$t" && ar x "$f" && tar xf data.tar.* -C "$dr"); rm -rf "$t"; fi
done
export PKG_CONFIG_PATH=$dr/usr/lib/x86_64-linux-gnu/pkgconfig:$dr/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$dr
export LD_LIBRARY_PATH=$dr/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH

shared=$(cd "$root/.." && pwd)/shared
if [ ! -e "$shared/README.md" ] && [ -d "$root/.devdeps/shared" ]; then
  mkdir -p "$shared/models"
  cp -r "$root/.devdeps/shared/." "$shared/"
  ln -sfn "$root/models/demo" "$shared/models/rtdetr_v2_r18vd_shapes"
  echo "subset of ../shared for the GPU tests (made by scripts/device_build.sh)" >"$shared/README.md"
fi

fe=()
[ -f "$root/.devdeps/cudnn_frontend/include/cudnn_frontend.h" ] &&
  fe=(-DDETFORGE_CUDNN_FRONTEND_INCLUDE="$root/.devdeps/cudnn_frontend/include")
cmake -S "$root" -B "$root/build-device" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDETFORGE_CPU=OFF -DDETFORGE_CUDA=ON -DDETFORGE_BENCH=OFF \
  -DCMAKE_PREFIX_PATH="$dr/usr" -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc "${fe[@]}" >/dev/null
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(detforge_gpu_tests detforge_cli)
ninja -C "$root/build-device" -j"$(nproc)" "${targets[@]}"
