# Session 27, call 2: the stem row kernel with its tap loops rolled, A/B at batch 1; ncu of the
# top-k selection kernels (one SM and cluster) and of the stem kernels.
# Run as: run(command="bash .devdeps/s27call2.sh", carry=[".devdeps"]) after scripts/device_prepare.sh.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; tz; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
timeout 60 $T --gtest_filter='CudaConvStem.RowKernel*:CudaConvStem.PixelKernel*' > $OUT/r/tests.log 2>&1; echo "tests rc $?"; grep -E "OK \]|FAILED \]|Failure" $OUT/r/tests.log | head
BATCHES=1 ITERS=300 timeout 150 bash bench/ab_h200.sh $OUT/r/ab "def:" "stem1:DETFORGE_CUDA_STEM=1" "stem2:DETFORGE_CUDA_STEM=2" "def2:" "stem1b:DETFORGE_CUDA_STEM=1" > $OUT/r/ab.log 2>&1; tail -7 $OUT/r/ab.log; tz; el ab
B=/tmp/detforge_ab_model.bundle; D=build-device/detforge
NCU="ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
DETFORGE_CUDA_STEM=2 timeout 60 $NCU -k regex:'topk_select|conv_stem' --launch-count 2 $D bench $B --backend cuda --batch 1 --iters 2 --warmup 1 --skip-e2e > $OUT/r/ncu_def.txt 2>&1
DETFORGE_CUDA_STEM=1 DETFORGE_CUDA_TOPK_CLUSTER=1 timeout 60 $NCU -k regex:'topk_cluster|conv_stem' --launch-count 2 $D bench $B --backend cuda --batch 1 --iters 2 --warmup 1 --skip-e2e > $OUT/r/ncu_new.txt 2>&1
grep -E "^  [a-z_].*\(|Duration|Registers Per|Achieved Occupancy|Issued Ipc|No Eligible" $OUT/r/ncu_def.txt $OUT/r/ncu_new.txt | cut -c1-200 | head -40
tz; el done
