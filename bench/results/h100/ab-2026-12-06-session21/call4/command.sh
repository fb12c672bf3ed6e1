# Session 21, call 2: the images staged by 4 threads and uploaded piece by piece on their own
# stream (core/parallel_copy.h, image_input.cpp): its GPU tests, then detect() with 1, 4 and 8
# copy threads at batch 1 and 32 (engine time the same; e2e is the figure).
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt; nproc > $OUT/r/nproc.txt
timeout 150 $T --gtest_filter='CudaResize*:*CudaRunImages*:CudaDetectSelect*' > $OUT/r/tests.log 2>&1; echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|Expected|Which is|tests ran" $OUT/r/tests.log | head -30; tz; el tests
E2E=1 BATCHES="1 32" ITERS=200 timeout 240 bash bench/ab_h200.sh $OUT/r/ab "t4:" "t1:DETFORGE_CUDA_STAGE_THREADS=1" "t8:DETFORGE_CUDA_STAGE_THREADS=8" "t4b:" > $OUT/r/ab.log 2>&1; grep -E "e2e profile" $OUT/r/ab.log; tail -9 $OUT/r/ab.log; tz; el ab
