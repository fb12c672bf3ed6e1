#!/usr/bin/env bash
# Run THERE (the GPU machine): the GPU suite and an A/B after a change of engine defaults. Builds;
# times the defaults against OLD (the earlier defaults' settings, by default session
# 30's: DETFORGE_CUDA_TUNE=0 DETFORGE_CUDA_STEM_FUSED=0) at batch 1 (after one load that fills the
# tuning cache); runs the whole GPU suite (but CudaBench.R18vdSmoke) as three gtest shards side by
# side on the one GPU (SUITE_S: each shard's time limit; SHARDS, FILTER: a gtest filter); then times batch 32 the same way. AB=0
# skips both A/Bs, B32=0 the batch-32 one.
#   run(command="bash scripts/device_defaults_check.sh $OUT/r", carry=[".devdeps"])
# after scripts/device_prepare.sh here (and bench/results untracked for the call: the carry limit).
# Writes <out>/{build.log,shard*.log,ab/,ab32/,cache/} and <out>.tgz (the device returns few files).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/device_defaults_check.sh OUTDIR}
old=${OLD:-DETFORGE_CUDA_TUNE=0 DETFORGE_CUDA_STEM_FUSED=0}
. "$root/scripts/device_check_start.sh"  # tz, el, the build
if [ "${AB:-1}" = 1 ]; then  # AB=0: the suite only
  export DETFORGE_CUDA_TUNE_CACHE=$out/cache
  BATCHES=1 ITERS=300 timeout 120 bash "$root/bench/ab_h200.sh" "$out/ab" "fill:" "new:" "old:$old" "new2:" "old2:$old" \
    >"$out/ab.log" 2>&1
  tail -6 "$out/ab.log"
  el ab1; tz
fi
shards=${SHARDS:-3}
for ((k = 0; k < shards; ++k)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k timeout "${SUITE_S:-270}" "$root/build-device/tests/detforge_gpu_tests" \
    --gtest_filter="${FILTER:--CudaBench.R18vdSmoke}" >"$out/shard$k.log" 2>&1 &
done
wait
for ((k = 0; k < shards; ++k)); do
  echo "shard $k: $(grep -E '^\[==========\]' "$out/shard$k.log" | tail -1)"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Za-z]" "$out/shard$k.log" | head -12
done
el suite; tz
if [ "${AB:-1}" = 1 ] && [ "${B32:-1}" = 1 ]; then  # B32=0: no batch-32 pairs
  BATCHES=32 ITERS=100 timeout 90 bash "$root/bench/ab_h200.sh" "$out/ab32" "new32:" "old32:$old" "new32b:" "old32b:$old" \
    >"$out/ab32.log" 2>&1
  tail -5 "$out/ab32.log"
fi
tz; el done
