#!/usr/bin/env bash
# Session 16, call 4: build the final tree; the own-conv tests (refactored gather/epilogue helpers);
# the GPU suites not run since session 14; then the rest of the suite in the time left.
set -u
R=$OUT/r; mkdir -p $R
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/smi.txt 2>&1
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $R/build.log 2>&1 || { tail -30 $R/build.log; tar czf $OUT/r.tgz -C $OUT r; exit 1; }
echo "built at $(el) s"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
F1='CudaConvIgemm.*:CudaConvDirect.*:Modes/CudaOwnConvEngine.*:CudaEngine.OwnConv*:R18vd/CudaStrayWrites.*/3'
timeout 150 $T --gtest_filter="$F1" > $R/own_conv_tests.log 2>&1
grep -E "^\[  (FAILED|PASSED) |tests ran|Failure" $R/own_conv_tests.log | head -10
echo "own-conv tests at $(el) s"
F2='Storage/CudaLaunchMerge.*:Precisions/CudaRunImagesTest.*:Chains/RowMlp.*:Storage/CudaSmallLinear.*:Storage/CudaTopk.*'
timeout 150 $T --gtest_filter="$F2" > $R/suites_late.log 2>&1
grep -E "^\[  (FAILED|PASSED) |tests ran" $R/suites_late.log | head -6; grep "^\[  FAILED" $R/suites_late.log | head
echo "late suites at $(el) s"
left=$(( 350 - $(el) ))
[ $left -gt 20 ] && timeout $left $T --gtest_filter="-CudaBench.R18vdSmoke:$F1:$F2" > $R/suites_rest.log 2>&1
echo "rest: $(grep -c '^\[       OK' $R/suites_rest.log) passed, $(grep -c '^\[  FAILED  \] [A-Z]' $R/suites_rest.log) failed, last: $(grep '^\[ RUN' $R/suites_rest.log | tail -1)"
grep "^\[  FAILED" $R/suites_rest.log | head
tar czf $OUT/r.tgz -C $OUT r
