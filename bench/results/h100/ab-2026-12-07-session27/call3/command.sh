# Session 27, call 3: the stem row kernel with batched 16-byte staging: its tests, A/B at batch 1
# and 32, and ncu of the kernel in the fp16 engine.
# Run as: run(command="bash .devdeps/s27call3.sh", carry=[".devdeps"]) after scripts/device_prepare.sh.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; tz; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
timeout 90 $T --gtest_filter='CudaConvStem.*' > $OUT/r/tests.log 2>&1; echo "tests rc $?"; grep -E "OK \]|FAILED \]|Failure" $OUT/r/tests.log | head
BATCHES=1 ITERS=300 timeout 150 bash bench/ab_h200.sh $OUT/r/ab "def:" "stem1:DETFORGE_CUDA_STEM=1" "def2:" "stem1b:DETFORGE_CUDA_STEM=1" "stem2:DETFORGE_CUDA_STEM=2" > $OUT/r/ab.log 2>&1; tail -6 $OUT/r/ab.log; tz; el ab
BATCHES=32 ITERS=100 timeout 100 bash bench/ab_h200.sh $OUT/r/ab32 "def:" "stem1:DETFORGE_CUDA_STEM=1" > $OUT/r/ab32.log 2>&1; tail -3 $OUT/r/ab32.log; tz; el ab32
B=/tmp/detforge_ab_model.bundle; D=build-device/detforge
DETFORGE_CUDA_STEM=1 timeout 60 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats -k regex:'conv_stem' --launch-count 1 $D bench $B --backend cuda --precision fp16 --batch 1 --iters 2 --warmup 1 --skip-e2e > $OUT/r/ncu_stem.txt 2>&1
grep -E "^  [a-z_].*\(|Duration|Achieved Occupancy|No Eligible" $OUT/r/ncu_stem.txt | cut -c1-160
tz; el done
