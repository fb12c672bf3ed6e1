# Session 22, call 1: do the library kernels wait for a programmatic predecessor (CudaLibraryWaits),
# the engine with the cuBLASLt edges programmatic (FULL_EDGES=3) against the default, the
# restructured serial staging's tests.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
timeout 150 $T --gtest_filter='CudaLibraryWaits.*' > $OUT/r/waits.log 2>&1; echo "waits rc $?"; grep -E "^(control|cublasLt|cuDNN)|^\[  (PASSED|FAILED)|Failure" $OUT/r/waits.log | cut -c1-200; tz; el waits
timeout 200 $T --gtest_filter='*CudaGraphEqualsEager*' > $OUT/r/gee.log 2>&1; echo "gee rc $?"; grep -E "edges changed|graph check|^\[  (PASSED|FAILED)|OK \]|Failure" $OUT/r/gee.log | cut -c1-200; tz; el gee
BATCHES="1 32" ITERS=300 timeout 150 bash bench/ab_h200.sh $OUT/r/abfe "def:" "fe3:DETFORGE_CUDA_FULL_EDGES=3" "def2:" "fe3b:DETFORGE_CUDA_FULL_EDGES=3" > $OUT/r/abfe.log 2>&1; tail -10 $OUT/r/abfe.log; tz; el abfe
timeout 120 $T --gtest_filter='CudaResize*:*CudaRunImages*' > $OUT/r/stage_tests.log 2>&1; echo "stage tests rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure" $OUT/r/stage_tests.log | head; tz; el stage
