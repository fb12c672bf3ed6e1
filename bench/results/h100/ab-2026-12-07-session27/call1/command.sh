# Session 27, call 1: build; the stem and cluster top-k GPU tests; A/B at batch 1 (stem row kernel,
# cluster top-k, both, with the own halo convs at margin 1.3); batch 32 for default and both.
# Run as: run(command="bash .devdeps/s27call1.sh", carry=[".devdeps"]) after scripts/device_prepare.sh.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }; left() { echo $(( ${BUDGET:-570} - ($(date +%s) - S) )); }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; tz; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
timeout 150 $T --gtest_filter='CudaConvStem.*:*CudaTopk*:CudaEngine.OwnConvKernels*:CudaEngine.OpProfile*' > $OUT/r/tests.log 2>&1; echo "tests rc $?"
grep -E "OK \]|FAILED \]|Failure|Expected|Which is|got " $OUT/r/tests.log | cut -c1-220 | head -40; tz; el tests
BATCHES=1 ITERS=300 timeout 240 bash bench/ab_h200.sh $OUT/r/ab "def:" "stem1:DETFORGE_CUDA_STEM=1" "tkc:DETFORGE_CUDA_TOPK_CLUSTER=1" "both:DETFORGE_CUDA_STEM=1 DETFORGE_CUDA_TOPK_CLUSTER=1" "def2:" "stem2:DETFORGE_CUDA_STEM=2" "both2:DETFORGE_CUDA_STEM=1 DETFORGE_CUDA_TOPK_CLUSTER=1" "bothd:DETFORGE_CUDA_STEM=1 DETFORGE_CUDA_TOPK_CLUSTER=1 DETFORGE_CUDA_OWN_CONV=direct DETFORGE_CUDA_OWN_CONV_MARGIN=1.3" > $OUT/r/ab.log 2>&1; tail -12 $OUT/r/ab.log; tz; el ab
[ $(left) -gt 70 ] && { BATCHES=32 ITERS=100 timeout $(( $(left) - 10 )) bash bench/ab_h200.sh $OUT/r/ab32 "def:" "both:DETFORGE_CUDA_STEM=1 DETFORGE_CUDA_TOPK_CLUSTER=1" > $OUT/r/ab32.log 2>&1; tail -5 $OUT/r/ab32.log; }
tz; el done
