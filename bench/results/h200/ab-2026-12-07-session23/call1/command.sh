# Session 23, call 1: the graph-vs-eager race bisected by the previous forward's input (CudaRaceBisect: default, ARENA_REUSE=0 with the first differing ops, STREAMS=1).
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el build
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/r/env.txt
for p in 0 1 2; do
  DETFORGE_RACE_INPUTS=240 timeout 150 $T --gtest_also_run_disabled_tests --gtest_filter="*CudaRaceBisect*/$p" > $OUT/r/bisect_$p.log 2>&1
  grep -A30 "race bisect" $OUT/r/bisect_$p.log | head -40; tz; el bisect $p
done
