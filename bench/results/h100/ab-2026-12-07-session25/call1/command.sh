# Session 25, call 1: is the eager forward the side that is off (CudaEagerFence), the race bisect
# fenced (/0) against unfenced (/1), and the FULL_EDGES=3 A/B at batch 1.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }; left() { echo $(( ${BUDGET:-570} - ($(date +%s) - S) )); }
git log --oneline -1 > $OUT/r/commit.txt
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; tz; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
timeout 120 $T --gtest_also_run_disabled_tests --gtest_filter='CudaEagerFence.*' > $OUT/r/eager_fence.log 2>&1; echo "fence rc $?"
grep -E "^eager queued|OK \]|FAILED \]|Failure|differ" $OUT/r/eager_fence.log | cut -c1-300 | head -30; tz; el fence
for p in 0 1; do
  [ $(left) -gt 100 ] || break
  DETFORGE_RACE_INPUTS=160 timeout 90 $T --gtest_also_run_disabled_tests --gtest_filter="*CudaRaceBisect.*/$p" > $OUT/r/bisect_$p.log 2>&1; echo "bisect $p rc $?"
  grep -E -A12 "^race bisect" $OUT/r/bisect_$p.log | cut -c1-250 | head -30; tz; el bisect $p
done
[ $(left) -gt 180 ] && { BATCHES=1 ITERS=300 timeout 170 bash bench/ab_h200.sh $OUT/r/ab "def:" "fe3:DETFORGE_CUDA_FULL_EDGES=3" "fe3d:DETFORGE_CUDA_FULL_EDGES=3 DETFORGE_CUDA_OWN_CONV=direct" "def2:" "fe3b:DETFORGE_CUDA_FULL_EDGES=3" "fe3d2:DETFORGE_CUDA_FULL_EDGES=3 DETFORGE_CUDA_OWN_CONV=direct" > $OUT/r/ab.log 2>&1; tail -8 $OUT/r/ab.log; tz; el ab; }
[ $(left) -gt 100 ] && { DETFORGE_CUDA_FULL_EDGES=3 timeout $(( $(left) - 10 )) $T --gtest_filter='CudaDeterminism.*:*CudaGraphEqualsEager*:CudaEagerFence.*' > $OUT/r/fe3_tests.log 2>&1; echo "fe3 tests rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/r/fe3_tests.log | head; tz; el fe3; }
tz
