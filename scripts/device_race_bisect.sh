#!/usr/bin/env bash
# Run THERE after scripts/device_build.sh detforge_gpu_tests (same command): the third round of
# the graph-versus-eager diagnosis (NOTES.md v26; the disabled tests in
# tests/gpu/test_cuda_race_bisect.cpp), most decisive first, so that a call cut short still says
# something:
# 1. stray reads: on the inputs that differed, does an op read arena bytes it does not declare
#    (CudaRaceBisectStrayReads; CudaEngine::stray_reads);
# 2. the first ops whose outputs differ between graph and eager on a differing input
#    (CudaRaceBisectSnapshots, DETFORGE_CUDA_SNAPSHOTS=1);
# 3. graph after another input / after the same input, by setting (CudaRaceBisect/0..4): the
#    default, no arena reuse, one stream, one stream without PDL, one stream without the memset
#    rewrite; on a differing input, which side an engine without reuse agrees with, and stray writes.
#   scripts/device_race_bisect.sh <out-dir> [inputs per setting, default 240]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/device_race_bisect.sh <out-dir> [inputs]}
n=${2:-240}
mkdir -p "$out"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
T=$root/build-device/tests/detforge_gpu_tests
check() {  # name, gtest filter, timeout
  DETFORGE_RACE_INPUTS=$n timeout "$3" "$T" --gtest_also_run_disabled_tests --gtest_filter="$2" >"$out/$1.log" 2>&1
  echo "== $1 (rc $?)"
  grep -E -A12 "^stray reads|^race bisect" "$out/$1.log" | cut -c1-300 | head -60
}
check stray_reads '*CudaRaceBisectStrayReads*' 60
check snapshots '*CudaRaceBisectSnapshots*' 90
for p in 0 1 2 3 4; do check "bisect_$p" "*CudaRaceBisect.*/$p" 90; done
