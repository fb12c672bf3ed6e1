#!/usr/bin/env bash
# Session 16, call 2: build; the halo-wgmma conv tests; timing; engine A/B (direct with the wgmma halo variants); OWN_CONV=1 with PDL off.
set -u
R=$OUT/r; mkdir -p $R
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/smi.txt 2>&1
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $R/build.log 2>&1 || { tail -30 $R/build.log; tar czf $OUT/r.tgz -C $OUT r; exit 1; }
echo "built at $(el) s"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
timeout 100 $T --gtest_filter='CudaConvDirect.*' > $R/direct_tests.log 2>&1
grep -E "^\[  (FAILED|PASSED) |tests ran|Failure" $R/direct_tests.log | head -12; grep -B2 -A6 "Failure" $R/direct_tests.log | head -30
echo "tests at $(el) s"
timeout 60 $T --gtest_also_run_disabled_tests --gtest_filter='*Igemm*Timing*' > $R/timing.log 2>&1
grep -E "^(320|160)x" $R/timing.log | sed -E 's/ (igemm|wgmma)_[^ ]+//g' | cut -c1-400
echo "timing at $(el) s"
BATCHES="1 32" ITERS=300 PROFILE_OPS=direct timeout 240 bash bench/ab_h200.sh $R/ab "default:" \
  "direct:DETFORGE_CUDA_OWN_CONV=direct" "default2:" "direct2:DETFORGE_CUDA_OWN_CONV=direct" > $R/ab.log 2>&1
tail -10 $R/ab.log
echo "ab at $(el) s"
DETFORGE_CUDA_PDL=0 timeout 60 $T --gtest_filter='Modes/CudaOwnConvEngine.*/3' > $R/own1_pdl0.log 2>&1
grep -E "^\[  (FAILED|PASSED) |^1:|Actual|Failure" $R/own1_pdl0.log | head -6
left=$(( 570 - $(el) ))
[ $left -gt 30 ] && timeout $left $T --gtest_filter='Modes/CudaOwnConvEngine.*/0:Modes/CudaOwnConvEngine.*/1:R18vd/CudaGraphEqualsEager.*' > $R/engine_tests.log 2>&1
grep -E "^\[  (FAILED|PASSED) |^\[       OK|direct|tests ran" $R/engine_tests.log | tail -12
tar czf $OUT/r.tgz -C $OUT r
