#!/usr/bin/env bash
# Run HERE (the build machine, Debian 12, network available): fetches what the GPU machine lacks
# into .devdeps/ (git-ignored through .git/info/exclude; carried to the device with `carry`):
#   .devdeps/debs/*.deb            libjpeg-turbo, libspng, nlohmann-json, CLI11, GoogleTest
#   .devdeps/cudnn_frontend/include  the header-only cuDNN frontend (PyPI nvidia-cudnn-frontend)
# scripts/device_build.sh unpacks and uses them there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dst=$root/.devdeps
mkdir -p "$dst/debs"
grep -qx '/.devdeps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.devdeps/' >>"$root/.git/info/exclude"

pkgs=(libturbojpeg0 libturbojpeg0-dev libspng0 libspng-dev nlohmann-json3-dev libcli11-dev libgtest-dev)
(cd "$dst/debs" && apt-get download "${pkgs[@]}")

if [ ! -f "$dst/cudnn_frontend/include/cudnn_frontend.h" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$tmp" nvidia-cudnn-frontend >/dev/null
  mkdir -p "$dst/cudnn_frontend"
  (cd "$tmp" && python3 -m zipfile -e nvidia_cudnn_frontend-*.whl x >/dev/null)
  inc=$(dirname "$(find "$tmp/x" -name cudnn_frontend.h | head -1)")
  rm -rf "$dst/cudnn_frontend/include" && cp -r "$inc" "$dst/cudnn_frontend/include"
  rm -rf "$tmp"
fi
ls -la "$dst/debs"
du -sh "$dst"

# The test images the GPU tests read from ../shared (which does not travel to the device): the
# images named in the committed goldens. The r18vd checkpoint travels in the repo (models/demo).
python3 - "$root" <<'PY'
import json, os, shutil, sys
root = sys.argv[1]
shared = os.path.join(root, "..", "shared")
dst = os.path.join(root, ".devdeps", "shared")
files = set()
for tag in ("shapes_r18vd", "shapes_tiny"):
    p = os.path.join(root, "tests", "golden", tag, "goldens.json")
    if os.path.exists(p):
        files |= {im["file"] for im in json.load(open(p))["images"]}
for f in sorted(files):
    os.makedirs(os.path.dirname(os.path.join(dst, "data", f)), exist_ok=True)
    shutil.copy2(os.path.join(shared, "data", f), os.path.join(dst, "data", f))
tiny = os.path.join(shared, "models", "rtdetr_v2_tiny_shapes")
if os.path.isdir(tiny):
    shutil.copytree(tiny, os.path.join(dst, "models", "rtdetr_v2_tiny_shapes"), dirs_exist_ok=True)
print(f"copied {len(files)} images into {dst}")
PY
