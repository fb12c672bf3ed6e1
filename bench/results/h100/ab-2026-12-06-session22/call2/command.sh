# Session 22, call 2 (warm machine, build-device kept): the staging default. The serial path as
# restructured (whole images through ParallelCopy on the caller's stream) against copy threads.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu
nvidia-smi > $OUT/r/smi.txt
E2E=1 BATCHES="1 32" ITERS=150 timeout 420 bash bench/ab_h200.sh $OUT/r/ab "serial:" "t4:DETFORGE_CUDA_STAGE_THREADS=4" \
  "t4same:DETFORGE_CUDA_STAGE_THREADS=4 DETFORGE_CUDA_STAGE_SIDE=0" "t8:DETFORGE_CUDA_STAGE_THREADS=8" "serial2:" > $OUT/r/ab.log 2>&1
grep -E "^== |engine|e2e" $OUT/r/ab.log | head -60; tail -12 $OUT/r/ab.log; tz; el ab
