#!/usr/bin/env bash
# Run THERE after scripts/device_build.sh detforge_gpu_tests (same command): the graph-versus-eager
# diagnosis (NOTES.md v26-v28; tests/gpu/test_cuda_eager_fence.cpp and the disabled tests in
# tests/gpu/test_cuda_race_bisect.cpp), most decisive first, so that a call cut short still says
# something:
# 1. the eager forward against the graph on 480 inputs, with the eager fence (the default) and
#    without (CudaEagerFence; session 25: 0 and ~1.5 % of inputs differing);
# 2. graph after another input / after the same input, by setting (CudaRaceBisect/0..5): the
#    fenced default, then without the fence as sessions 22-23 ran (their default, no arena reuse,
#    one stream, one stream without PDL, one stream without the memset rewrite); on a differing
#    input: eager again, the graph 300 ms later, an engine without reuse, stray writes;
# 3. stray reads on the seeds that differed in session 23 (CudaRaceBisectStrayReads);
# 4. the first ops whose outputs differ (CudaRaceBisectSnapshots).
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
DETFORGE_RACE_INPUTS=$n timeout 120 "$T" --gtest_also_run_disabled_tests --gtest_filter='CudaEagerFence.*' \
  >"$out/eager_fence.log" 2>&1
echo "== eager_fence (rc $?)"; grep -E "^eager forward|OK \]|FAILED \]" "$out/eager_fence.log" | cut -c1-400
for p in 0 1; do check "bisect_$p" "*CudaRaceBisect.*/$p" 90; done
check stray_reads '*CudaRaceBisectStrayReads*' 60
for p in 3 4 5 2; do check "bisect_$p" "*CudaRaceBisect.*/$p" 90; done
check snapshots '*CudaRaceBisectSnapshots*' 90
