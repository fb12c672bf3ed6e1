#!/usr/bin/env bash
# Run THERE (the GPU machine): the check of the fused stem (DETFORGE_CUDA_STEM_FUSED, NOTES.md
# v34). Builds; runs its GPU tests (CudaStemFused.*); times, at batch 1, STEM_FUSED=1 against
# its absence (and STEM_FUSED=2), untuned (TUNE=0, two pairs) and from the tuning cache (TUNE=1,
# three pairs, after one load that fills the cache), and at batch 32 two pairs (untuned, the default there); then,
# when the full shapes_val256 travelled in .devdeps/shared/data (QUALITY=1), the fp16 quality
# checks with STEM_FUSED=1 and TUNE=1.
#   run(command="QUALITY=1 bash scripts/device_stem_fused_check.sh $OUT/r", carry=[".devdeps"])
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
export DETFORGE_CUDA_TUNE_CACHE=$out/cache
F=DETFORGE_CUDA_STEM_FUSED=1 A=DETFORGE_CUDA_STEM_FUSED=2 T=DETFORGE_CUDA_TUNE=1 U=DETFORGE_CUDA_TUNE=0
# tcold fills the tuning cache; t* load from it (TUNE=1, the batch-1 default since session 31), u*
# untuned; *f with the fused stem, *a with its cp.async input staging.
BATCHES=1 ITERS=300 timeout 240 bash "$root/bench/ab_h200.sh" "$out/ab" "tcold:$T" "u:$U" "uf:$U $F" "ua:$U $A" \
  "t:$T" "tf:$T $F" "ta:$T $A" "u2:$U" "uf2:$U $F" "ua2:$U $A" "t2:$T" "tf2:$T $F" "ta2:$T $A" "t3:$T" "tf3:$T $F" \
  >"$out/ab.log" 2>&1
tail -16 "$out/ab.log"
el ab1; tz
BATCHES=32 ITERS=100 timeout 120 bash "$root/bench/ab_h200.sh" "$out/ab32" "base32:" "fused32:$F" "base32b:" \
  "fused32b:$F" >"$out/ab32.log" 2>&1
tail -5 "$out/ab32.log"
el ab32; tz
data=$root/.devdeps/shared/data/shapes_val256
if [ "${QUALITY:-0}" = 1 ] && [ "$(ls "$data/images" | wc -l)" -ge 256 ]; then
  env $F $T timeout 240 bash "$root/scripts/device_quality.sh" "$data" "$out/q" --stress >"$out/q.log" 2>&1
  echo "quality rc $?"
  grep -iE "precision|recall|AP|non-finite|rc=" "$out/q.log" | head -30
fi
tz; el done
