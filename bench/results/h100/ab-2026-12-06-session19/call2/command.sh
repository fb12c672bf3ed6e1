# Session 19, call 2 (asked with no kind; ran on an H100). Tree 768baca (bench/results untracked
# for the call), from the repo root on the device with `carry: [".devdeps"]`.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
build-device/detforge synth-checkpoint --preset r18vd --num-labels 80 -o /tmp/coco80 > $OUT/r/synth80.log 2>&1
CHECKPOINT=/tmp/coco80 BUNDLE=/tmp/coco80.bundle BATCHES="1 32" ITERS=300 timeout 80 bash bench/ab_h200.sh $OUT/r/ab80 "default80:" "nosplit80:DETFORGE_CUDA_TOPK_SPLIT=0" > $OUT/r/ab80.log 2>&1; tail -5 $OUT/r/ab80.log; tz
timeout 60 $T --gtest_filter='Storage/CudaTopk.*:CudaCoco80*' > $OUT/r/tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED" $OUT/r/tests.log | head; tz
SKIP_BUILD=1 SKIP_TESTS=1 PRECISIONS=fp16 CHECKPOINT=/tmp/coco80 MODEL_NAME=rtdetr_v2_r18vd_coco80_synth STEP_TIMEOUT=60 PT_TIMEOUT=90 timeout 170 bash bench/run_h200.sh $OUT/r/run80 > $OUT/r/run80.log 2>&1; tail -12 $OUT/r/run80.log; tz
BATCHES=1 ITERS=300 timeout 100 bash bench/ab_h200.sh $OUT/r/ab "default:" "kn6400:DETFORGE_CUDA_CONV_KNOBS=6400" "default2:" > $OUT/r/ab.log 2>&1; tail -4 $OUT/r/ab.log; tz
