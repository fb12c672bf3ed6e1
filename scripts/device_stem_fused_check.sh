#!/usr/bin/env bash
# Run THERE (the GPU machine): the check of the fused stem (DETFORGE_CUDA_STEM_FUSED, NOTES.md
# v34). Builds; runs its GPU tests (CudaStemFused.*); times at batch 1 the stem unfused (0), mode 2
# (the default) and mode 3 (paired m16 tiles), from the tuning cache (TUNE=1, after one load that
# fills it; three rounds) and untuned (TUNE=0, one round), and at batch 32 two rounds (untuned,
# the default there); then, when the full shapes_val256 travelled in .devdeps/shared/data
# (QUALITY=1), the fp16 quality checks with TUNE=1 and QMODE (default STEM_FUSED=2). NCU=1 also
# profiles the kernel (modes 2 and 3, 640x640) with ncu --set full after the tests.
#   run(command="NCU=1 bash scripts/device_stem_fused_check.sh $OUT/r", carry=[".devdeps"])
# after scripts/device_prepare.sh here (and bench/results untracked for the call: the carry limit).
# Writes <out>/{build.log,tests.log,ab/,ab32/,q/,cache/} and <out>.tgz (the device returns few files).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/device_stem_fused_check.sh OUTDIR}
. "$root/scripts/device_check_start.sh"  # tz, el, the build
timeout 150 "$root/build-device/tests/detforge_gpu_tests" --gtest_filter="CudaStemFused.*" >"$out/tests.log" 2>&1
echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|Expected|Which is|element|queries matched" "$out/tests.log" | head -30
el tests; tz
if [ "${NCU:-0}" = 1 ]; then  # ncu's details of the 640x640 launch of modes 2 and 3 (the test's launches 7 and 13)
  for m in 2:6 3:12; do
    timeout 150 ncu --clock-control none --set full --import-source no -k regex:stem_fused_k --launch-skip "${m#*:}" \
      --launch-count 1 -o "$out/ncu_m${m%%:*}" "$root/build-device/tests/detforge_gpu_tests" \
      --gtest_filter=CudaStemFused.MatchesHostReference >"$out/ncu_m${m%%:*}.log" 2>&1
    ncu -i "$out/ncu_m${m%%:*}.ncu-rep" --page details --print-details all >"$out/ncu_m${m%%:*}.txt" 2>&1
    rm -f "$out/ncu_m${m%%:*}.ncu-rep"
    grep -E "Duration|Registers|Achieved Occupancy|Compute \(SM\) Throughput|Issue Slots Busy" "$out/ncu_m${m%%:*}.txt" | head -6
  done
  el ncu; tz
fi
export DETFORGE_CUDA_TUNE_CACHE=$out/cache
Z=DETFORGE_CUDA_STEM_FUSED=0 A=DETFORGE_CUDA_STEM_FUSED=2 P=DETFORGE_CUDA_STEM_FUSED=3
T=DETFORGE_CUDA_TUNE=1 U=DETFORGE_CUDA_TUNE=0
# tcold (unfused: every conv) fills the tuning cache; t* load from it (TUNE=1, the batch-1 default
# since session 31), u* untuned; *z without the fused stem, *a mode 2 (the default), *p mode 3.
BATCHES=1 ITERS=300 timeout 240 bash "$root/bench/ab_h200.sh" "$out/ab" "tcold:$T $Z" "tz:$T $Z" "ta:$T $A" "tp:$T $P" \
  "uz:$U $Z" "ua:$U $A" "up:$U $P" "tz2:$T $Z" "ta2:$T $A" "tp2:$T $P" "ta3:$T $A" "tp3:$T $P" >"$out/ab.log" 2>&1
tail -16 "$out/ab.log"
el ab1; tz
BATCHES=32 ITERS=100 timeout 120 bash "$root/bench/ab_h200.sh" "$out/ab32" "z32:$Z" "a32:$A" "p32:$P" "z32b:$Z" \
  "a32b:$A" "p32b:$P" >"$out/ab32.log" 2>&1
tail -7 "$out/ab32.log"
el ab32; tz
data=$root/.devdeps/shared/data/shapes_val256
if [ "${QUALITY:-0}" = 1 ] && [ "$(ls "$data/images" | wc -l)" -ge 256 ]; then
  env ${QMODE:-$A} $T timeout 240 bash "$root/scripts/device_quality.sh" "$data" "$out/q" --stress >"$out/q.log" 2>&1
  echo "quality rc $?"
  grep -iE "precision|recall|AP|non-finite|rc=" "$out/q.log" | head -30
fi
tz; el done
