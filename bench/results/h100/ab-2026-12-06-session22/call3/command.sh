# Session 22, call 3: FULL_EDGES=3 as engine-41-only programmatic edges (probe, graph == eager,
# A/B), the new staging default (4 threads) against serial, and the suites the settings split touched.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
timeout 100 $T --gtest_filter='CudaLibraryWaits.*' > $OUT/r/waits.log 2>&1; echo "waits rc $?"; grep -E "^(control|cublasLt|cuDNN)|^\[  (PASSED|FAILED)|Failure" $OUT/r/waits.log | cut -c1-190; tz; el waits
timeout 100 $T --gtest_filter='*CudaGraphEqualsEager*' > $OUT/r/gee.log 2>&1; echo "gee rc $?"; grep -E "edges changed|^\[  (PASSED|FAILED)|OK \]|Failure|of 16" $OUT/r/gee.log | cut -c1-200; tz; el gee
BATCHES="1 32" ITERS=300 timeout 120 bash bench/ab_h200.sh $OUT/r/abfe "def:" "fe3:DETFORGE_CUDA_FULL_EDGES=3" "def2:" "fe3b:DETFORGE_CUDA_FULL_EDGES=3" > $OUT/r/abfe.log 2>&1; tail -9 $OUT/r/abfe.log; tz; el abfe
E2E=1 BATCHES="1 32" ITERS=150 timeout 100 bash bench/ab_h200.sh $OUT/r/abst "t4def:" "serial:DETFORGE_CUDA_STAGE_THREADS=0" "t4def2:" > $OUT/r/abst.log 2>&1; tail -6 $OUT/r/abst.log; tz; el abst
DETFORGE_CUDA_FULL_EDGES=3 timeout 130 $T --gtest_filter='CudaDeterminism.*:*CudaGraphEqualsEager*' > $OUT/r/det_fe3.log 2>&1; echo "det fe3 rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure" $OUT/r/det_fe3.log | head; tz; el detfe3
[ $(( $(date +%s) - S )) -lt 420 ] && timeout 120 $T --gtest_filter='CudaEngine*:*CudaRunImages*:CudaResize*:CudaDetectSelect*:CudaParity*' > $OUT/r/suite.log 2>&1; echo "suite rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/r/suite.log | head; tz; el suite
