mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
build-device/detforge synth-checkpoint --preset r18vd --num-labels 80 -o /tmp/coco80 > $OUT/r/synth80.log 2>&1
# 80 classes first on a fresh machine, nosplit before default (reverse of session 19) for the load-time question
CHECKPOINT=/tmp/coco80 BUNDLE=/tmp/coco80.bundle E2E=1 BATCHES=1 ITERS=300 timeout 120 bash bench/ab_h200.sh $OUT/r/ab80 "nosplit80:DETFORGE_CUDA_TOPK_SPLIT=0" "default80:" "default80b:" > $OUT/r/ab80.log 2>&1; tail -5 $OUT/r/ab80.log; tz; el ab80
E2E=1 BATCHES=1 ITERS=300 timeout 90 bash bench/ab_h200.sh $OUT/r/ab8 "default:" "default2:" > $OUT/r/ab8.log 2>&1; tail -4 $OUT/r/ab8.log; tz; el ab8
timeout 150 $T --gtest_filter='CudaCoco80*:Storage/CudaTopk.*:CudaConvTuneGraph.*' > $OUT/r/tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED|tests ran" $OUT/r/tests.log | head; tz; el tests
