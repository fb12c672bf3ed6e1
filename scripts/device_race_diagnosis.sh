#!/usr/bin/env bash
# Run THERE after scripts/device_build.sh (same command): the diagnosis of the overlapping-fused-
# convs defect (src/backends/cuda/NOTES.md v10-v11). First run in the eighth session (its output:
# bench/results/h200/ab-2026-12-03d-session8/call1/race). Needs only models/demo
# (../shared/models/rtdetr_v2_r18vd_shapes -> models/demo).
#   scripts/device_race_diagnosis.sh <out-dir>
# 1. which fused convs must not overlap (ddmin over the set ordered; CudaEngine::conflicting_convs),
#    and whether any op writes past the end of its output (guard bytes; CudaEngine::arena_overruns);
# 2. graph versus eager at batch 1 with the fused convs free to overlap and the graph check off,
#    under settings that would each rule a cause in or out: a private workspace per op, only the
#    cuBLASLt-backed convs ordered, no PDL, cuDNN's memset nodes kept.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/device_race_diagnosis.sh <out-dir>}
mkdir -p "$out"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
T=$root/build-device/tests/detforge_gpu_tests
"$T" --gtest_filter='CudaDeterminism.R18vdConvsThatMustNotOverlap' >"$out/conflicting_convs.log" 2>&1
grep -E "^trial|must not overlap|^the graph|^ordering|FAILED|PASSED" "$out/conflicting_convs.log" | cut -c1-220
"$T" --gtest_filter='CudaDeterminism.R18vdNoOpWritesPastItsOutput' >"$out/arena_overruns.log" 2>&1
grep -E "wrote past|^  |FAILED|PASSED" "$out/arena_overruns.log" | cut -c1-220 | head -20
for v in DETFORGE_CUDA_CONV_HANDLES=0 "DETFORGE_CUDA_CONV_HANDLES=0 DETFORGE_CUDA_OP_WORKSPACE=1" \
         DETFORGE_CUDA_CONV_HANDLES=5 "DETFORGE_CUDA_CONV_HANDLES=0 DETFORGE_CUDA_PDL=0" \
         "DETFORGE_CUDA_CONV_HANDLES=0 DETFORGE_CUDA_MEMSET_KERNELS=0"; do
  f="$out/graph_vs_eager_$(echo "$v" | tr ' =' '_-').log"
  env DETFORGE_CUDA_GRAPH_CHECK=0 $v "$T" --gtest_filter='R18vd/CudaGraphEqualsEager.*/0' >"$f" 2>&1
  echo "$v: $(grep -E '^\[  (PASSED|FAILED)' "$f" | head -1) $(grep -o 'of 16 inputs.*' "$f" | head -1 | cut -c1-120)"
done
# 3. the overlapping batch-1 graph as captured (DETFORGE_CUDA_GRAPH_DUMP): node kinds, and memset /
#    memcpy nodes whose addresses fall outside the engine's own buffers (ranges.txt).
mkdir -p "$out/dump"
DETFORGE_CUDA_GRAPH_DUMP="$out/dump" DETFORGE_CUDA_GRAPH_CHECK=0 DETFORGE_CUDA_CONV_HANDLES=0 \
  "$T" --gtest_filter='R18vd/CudaGraphEqualsEager.*/0' >"$out/dump/run.log" 2>&1
python3 - "$out/dump" <<'PY' | tee "$out/dump/summary.txt"
import collections, glob, os, re, sys
d = sys.argv[1]
ranges = []
for line in open(os.path.join(d, "ranges.txt")):
    what, base, size = line.split()
    ranges.append((what, int(base, 16), max(int(size), 1 << 20)))
def owner(a):
    for what, b, n in ranges:
        if b <= a < b + n: return what
    return None
for f in sorted(glob.glob(os.path.join(d, "*.dot")))[:1]:
    text = open(f).read()
    nodes = re.findall(r'^\s*"?(\w+)"?\s*\[(.*?)\];\s*$', text, re.M | re.S)
    kinds = collections.Counter()
    for name, attrs in nodes:
        lab = attrs.upper()
        k = next((t for t in ("MEMSET", "MEMCPY", "KERNEL", "EVENT", "HOST", "EMPTY", "MEM_ALLOC") if t in lab), "OTHER")
        kinds[k] += 1
        if k in ("MEMSET", "MEMCPY"):
            addrs = [int(a, 16) for a in re.findall(r"0x[0-9a-fA-F]{6,}", attrs)]
            print(f"{os.path.basename(f)} {k}: " + ", ".join(f"{a:#x} ({owner(a) or 'NOT OURS'})" for a in addrs))
    print(os.path.basename(f), dict(kinds))
    names = collections.Counter(re.findall(r"\\n(\w{6,})\\n", text))
    print("kernel names seen (first 40):", list(names)[:40])
PY
