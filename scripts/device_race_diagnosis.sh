#!/usr/bin/env bash
# Run THERE after scripts/device_build.sh (same command): the diagnosis of the overlapping-fused-
# convs defect (src/backends/cuda/NOTES.md v10), written after the seventh session's device time
# ran out. Needs only models/demo (../shared/models/rtdetr_v2_r18vd_shapes -> models/demo).
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
