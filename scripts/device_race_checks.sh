#!/usr/bin/env bash
# Run THERE after scripts/device_build.sh (same command): the second round of the graph-versus-
# eager diagnosis (NOTES.md v12), each check deciding between explanations:
# 1. library kernels alone: cuDNN engine-41 convs and cuBLASLt GEMMs of r18vd's shapes captured on
#    two streams vs run serially (CudaLibraryOverlap; no engine involved);
# 2. the capture: does the captured graph hold every ordering of the schedule (CudaCaptureHazards,
#    on the default and the two failing schedules);
# 3. stale reads: the arena filled with NaN before each forward (CudaPoisonedArena, default and the
#    failing schedules, the latter as disabled diagnostics).
#   scripts/device_race_checks.sh <out-dir>
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/device_race_checks.sh <out-dir>}
mkdir -p "$out"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
T=$root/build-device/tests/detforge_gpu_tests
check() {  # name, gtest filter, extra args
  timeout 240 "$T" --gtest_filter="$2" ${3:-} >"$out/$1.log" 2>&1
  echo "== $1 (rc $?)"
  grep -E "^overlap:|replays differ|^capture hazards|^  .* -> |^poisoned arena|^\[  (PASSED|FAILED) " "$out/$1.log" | cut -c1-300
}
check library_overlap 'CudaLibraryOverlap.*'
check capture_hazards 'R18vd/CudaCaptureHazards.*'
check poisoned_arena '*CudaPoisonedArena.*' --gtest_also_run_disabled_tests
