mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
timeout 90 $T --gtest_filter='CudaDecTail.*:CudaDecTailRules.*' > $OUT/r/dt_kernel.log 2>&1; echo "kernel rc $?"; grep -E "dec_tail rows|first CTA|work median|Failure|Expected|Which is|stage|^\[  (PASSED|FAILED)|FAILED" $OUT/r/dt_kernel.log | head -40; tz; el kt
timeout 150 $T --gtest_filter='CudaDecTailEngine.*' > $OUT/r/dt_engine.log 2>&1; echo "engine rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|Expected|Which" $OUT/r/dt_engine.log | head -20; tz; el et
BATCHES="1" ITERS=300 timeout 120 bash bench/ab_h200.sh $OUT/r/ab "default:" "dt:DETFORGE_CUDA_DEC_TAIL=1" "default2:" "dt2:DETFORGE_CUDA_DEC_TAIL=1" > $OUT/r/ab.log 2>&1; tail -14 $OUT/r/ab.log; tz; el ab
