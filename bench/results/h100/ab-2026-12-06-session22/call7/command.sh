# Session 22, call 7: bisect the graph-vs-eager race (CudaGraphEqualsEager/1, graph check off, x8 per setting).
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
sum() { echo "runs $(grep -c '^\[ RUN' $1), failed runs $(( $(grep -c '^\[  FAILED  \] R18vd.*GetParam' $1) / 2 ))"; }
for v in "DETFORGE_CUDA_STREAMS=2" "DETFORGE_CUDA_LATE_VALUE=0" "DETFORGE_CUDA_LN_ADD=0" "DETFORGE_CUDA_UPSAMPLE_CONCAT=0" "DETFORGE_CUDA_BOX_STEP=0" "DETFORGE_CUDA_EARLY_OUTPUTS=0"; do
  n=$(echo "x$v" | tr -c 'A-Za-z0-9\n' '_')
  env $v timeout 24 $T --gtest_filter='*CudaGraphEqualsEager*/1' --gtest_repeat=8 > $OUT/r/gee_$n.log 2>&1; echo "== $v: $(sum $OUT/r/gee_$n.log)"; tz; el $n
done
