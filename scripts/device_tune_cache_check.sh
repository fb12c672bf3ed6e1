#!/usr/bin/env bash
# Run THERE (the GPU machine): the check that decides whether DETFORGE_CUDA_TUNE=1 becomes the
# default (NOTES.md v31). Builds; runs the tuning cache's GPU tests (CudaTuneCache, CudaPlanPick);
# then benchmarks DETFORGE_CUDA_TUNE=1 with an empty cache (cold: the first load times every
# choice), the untuned default, and DETFORGE_CUDA_TUNE=1 again (warm: every choice from the cache),
# at batch 1 and, if time is left and B32 is not 0, at batch 32. GREEN=1 also runs the green
# stream's tests (CudaGreen*) and times DETFORGE_CUDA_GREEN_SMS=16 and 32 (NOTES.md v32-v33).
#   run(command="bash scripts/device_tune_cache_check.sh $OUT/r", carry=[".devdeps"])
# after scripts/device_prepare.sh here (and bench/results untracked for the call: the carry limit).
# Writes <out>/{build.log,tests.log,ab/,ab32/,cache/} and <out>.tgz (the device returns few files).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/device_tune_cache_check.sh OUTDIR}
. "$root/scripts/device_check_start.sh"  # tz, el, the build
timeout 240 "$root/build-device/tests/detforge_gpu_tests" \
  --gtest_filter="CudaTuneCache.*:CudaPlanPick.*$([ "${GREEN:-0}" = 1 ] && echo ':CudaGreen*')" >"$out/tests.log" 2>&1
echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED|cached,|stale|Failure|Expected|Which is|tuning cache|green" "$out/tests.log" | head -40
el tests; tz
export DETFORGE_CUDA_TUNE_CACHE=$out/cache
green=()
[ "${GREEN:-0}" = 1 ] && green=("g16:DETFORGE_CUDA_GREEN_SMS=16"
  "g16lv0:DETFORGE_CUDA_GREEN_SMS=16 DETFORGE_CUDA_LATE_VALUE=0" "g32:DETFORGE_CUDA_GREEN_SMS=32")
BATCHES=1 ITERS=300 timeout 200 bash "$root/bench/ab_h200.sh" "$out/ab" "cold:DETFORGE_CUDA_TUNE=1" "untuned:" \
  "warm:DETFORGE_CUDA_TUNE=1" "${green[@]}" "untuned2:" "warm2:DETFORGE_CUDA_TUNE=1" "untuned3:" "warm3:DETFORGE_CUDA_TUNE=1" \
  >"$out/ab.log" 2>&1
tail -11 "$out/ab.log"
el ab1; tz
if [ "${B32:-1}" = 1 ] && [ $(( $(date +%s) - S )) -lt 330 ]; then
  BATCHES=32 ITERS=100 timeout $(( 420 - ($(date +%s) - S) )) bash "$root/bench/ab_h200.sh" "$out/ab32" \
    "cold32:DETFORGE_CUDA_TUNE=1" "untuned32:" "warm32:DETFORGE_CUDA_TUNE=1" >"$out/ab32.log" 2>&1
  tail -6 "$out/ab32.log"
fi
grep -h "timing kernel choices\|timed .* kernel choices\|tuning cache" "$out"/ab*/*.log 2>/dev/null | sort | uniq -c | head
ls -la "$out/cache"
tz; el done
