# Session 21, call 1: the device-side top-k (kernels/detect_select.cu) — its tests, then detect()
# with it vs the host post-processing (DETFORGE_CUDA_GPU_SELECT=0), 8 and 80 classes, b1 and b32.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
timeout 120 $T --gtest_filter='CudaDetectSelect*:*DetectSelect*' > $OUT/r/sel_tests.log 2>&1; echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|Expected|Which is|tests ran" $OUT/r/sel_tests.log | head -30; tz; el tests
E2E=1 BATCHES="1 32" ITERS=200 timeout 200 bash bench/ab_h200.sh $OUT/r/ab8 "select:" "host:DETFORGE_CUDA_GPU_SELECT=0" "select2:" > $OUT/r/ab8.log 2>&1; tail -8 $OUT/r/ab8.log; tz; el ab8
build-device/detforge synth-checkpoint --preset r18vd --num-labels 80 -o /tmp/coco80 > $OUT/r/synth80.log 2>&1
CHECKPOINT=/tmp/coco80 BUNDLE=/tmp/coco80.bundle E2E=1 BATCHES=1 ITERS=200 timeout 120 bash bench/ab_h200.sh $OUT/r/ab80 "select80:" "host80:DETFORGE_CUDA_GPU_SELECT=0" "select80b:" > $OUT/r/ab80.log 2>&1; tail -6 $OUT/r/ab80.log; tz; el ab80
