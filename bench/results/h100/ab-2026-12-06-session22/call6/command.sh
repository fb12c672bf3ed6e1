# Session 22, call 6: a workspace per op (DETFORGE_CUDA_OP_WORKSPACE=1) removed the graph-vs-eager
# race of call 5 (0 of 8 runs against 2 of 8). Its speed, more runs of it, and one narrower cause.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
BATCHES="1 32" ITERS=200 timeout 90 bash bench/ab_h200.sh $OUT/r/abws "def:" "opws:DETFORGE_CUDA_OP_WORKSPACE=1" "def2:" "opws2:DETFORGE_CUDA_OP_WORKSPACE=1" > $OUT/r/abws.log 2>&1; tail -9 $OUT/r/abws.log; tz; el abws
sum() { grep -E "of 16 inputs" $1 | cut -c1-160; echo "runs $(grep -c '^\[ RUN' $1), failed $(grep -c '^\[  FAILED  \] R18vd.*GetParam' $1) (2 lines per failed run)"; }
for v in "DETFORGE_CUDA_OP_WORKSPACE=1" "DETFORGE_CUDA_MEMSET_KERNELS=0" ""; do
  n=$(echo "x$v" | tr -c 'A-Za-z0-9\n' '_')
  env $v timeout 60 $T --gtest_filter='*CudaGraphEqualsEager*/1' --gtest_repeat=10 > $OUT/r/gee_$n.log 2>&1; echo "== $v (graph check off) x10"; sum $OUT/r/gee_$n.log; tz; el $n
done
DETFORGE_CUDA_OP_WORKSPACE=1 timeout 100 $T --gtest_filter='CudaDeterminism.*' > $OUT/r/det_opws.log 2>&1; echo "det opws rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure" $OUT/r/det_opws.log | head; tz; el det
