#!/usr/bin/env bash
# Session 16, call 1: build; the igemm tests (now with the wgmma family); per-kernel timing; SASS check; engine A/B.
set -u
R=$OUT/r; mkdir -p $R
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/smi.txt 2>&1
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $R/build.log 2>&1 || { tail -30 $R/build.log; tar czf $OUT/r.tgz -C $OUT r; exit 1; }
echo "built at $(el) s"
O=build-device/CMakeFiles/detforge_sm90a.dir/src/backends/cuda/kernels/conv_wgmma.cu.o
cuobjdump --dump-sass $O > $R/wgmma.sass 2>&1; echo "HGMMA in SASS: $(grep -c HGMMA $R/wgmma.sass)"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
timeout 120 $T --gtest_filter='CudaConvIgemm.*' > $R/igemm_tests.log 2>&1
grep -E "^\[  (FAILED|PASSED) |tests ran|Failure|wgmma" $R/igemm_tests.log | head -30
echo "tests at $(el) s"
timeout 90 $T --gtest_also_run_disabled_tests --gtest_filter='*Igemm*Timing*' > $R/timing.log 2>&1
grep -E "\->" $R/timing.log | sed -E 's/ igemm_[^ ]+//g' | cut -c1-330
echo "timing at $(el) s"
BATCHES="1 32" ITERS=300 PROFILE_OPS=own1 timeout 300 bash bench/ab_h200.sh $R/ab "default:" \
  "own1:DETFORGE_CUDA_OWN_CONV=1" "direct:DETFORGE_CUDA_OWN_CONV=direct" "default2:" > $R/ab.log 2>&1
tail -12 $R/ab.log
grep -h -o '"[^"]*own[^"]*"' $R/ab/own1_b1.log | head -3; grep -i "own" $R/ab/own1_b1.log | head -5
echo "ab at $(el) s"
left=$(( 570 - $(el) ))
[ $left -gt 30 ] && timeout $left $T --gtest_filter='Modes/CudaOwnConvEngine.*:CudaEngine.OwnConv*' > $R/engine_tests.log 2>&1
grep -E "^\[  (FAILED|PASSED) |^\[       OK|own|tests ran" $R/engine_tests.log | tail -12
tar czf $OUT/r.tgz -C $OUT r
