#!/usr/bin/env bash
# Run THERE after scripts/device_build.sh (same warm machine): the fp32/fp16 quality checks of the
# CUDA backend on a COCO-format dataset carried beside the repo (../shared does not travel).
#   scripts/device_quality.sh <dataset-dir> <out-dir> [--stress]
# Writes: eval_cuda_{fp32,fp16}.{json,md}, compare_fp16_vs_fp32.{json,md} (threshold 0.3),
# scan_cuda_{fp32,fp16}.{json,md}, and a summary on stdout.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=$1
out=$2
stress=${3:-}
name=$(basename "$data")
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cli=$root/build-device/detforge
work=$(mktemp -d)
mkdir -p "$out"
"$cli" build "$root/models/demo" -o "$work/fp32.bundle" --precision fp32 >/dev/null || exit 1
"$cli" build "$root/models/demo" -o "$work/fp16.bundle" --precision fp16 >/dev/null || exit 1
run() { echo "+ $*" >>"$out/commands_$name.txt"; "$@"; echo "rc=$? for: $*"; }
if [ "$name" = shapes_val256 ]; then
  for p in fp32 fp16; do
    run "$cli" eval "$work/$p.bundle" --dataset "$data" --backend cuda --quiet \
      --json "$out/eval_cuda_${p}_$name.json" --markdown "$out/eval_cuda_${p}_$name.md"
  done
  run "$cli" compare "$work/fp16.bundle" "$work/fp32.bundle" --dataset "$data" --backend cuda --threshold 0.3 \
    --quiet --json "$out/compare_fp16_vs_fp32_$name.json" --markdown "$out/compare_fp16_vs_fp32_$name.md"
fi
for p in fp32 fp16; do
  run "$cli" scan "$work/$p.bundle" --dataset "$data" --backend cuda $stress --quiet \
    --json "$out/scan_cuda_${p}_$name.json" --markdown "$out/scan_cuda_${p}_$name.md"
done
for f in "$out"/*.md; do echo "== $f"; cat "$f"; done
