# Session 26, call 1: the LT_TUNE and split_concats A/B at batch 1 (the tuned variant's per-op
# Run as: run(command="bash .devdeps/s26call1.sh", carry=[".devdeps"], kind="nvidia-h100-x1") after scripts/device_prepare.sh.
# profile), then their GPU tests, then CudaEagerFence and every CudaGraphEqualsEager setting.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }; left() { echo $(( ${BUDGET:-280} - ($(date +%s) - S) )); }
git log --oneline -1 > $OUT/r/commit.txt
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; tz; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
BATCHES=1 ITERS=300 PROFILE_OPS=lt8 timeout 170 bash bench/ab_h200.sh $OUT/r/ab "def:" "lt8:DETFORGE_CUDA_LT_TUNE=8" "sc:DETFORGE_EXTRA_PASSES=split_concats" "def2:" "lt8b:DETFORGE_CUDA_LT_TUNE=8" "sc2:DETFORGE_EXTRA_PASSES=split_concats" > $OUT/r/ab.log 2>&1; tail -12 $OUT/r/ab.log; tz; el ab
[ $(left) -gt 40 ] && { timeout $(( $(left) < 120 ? $(left) : 120 )) $T --gtest_filter='CudaLtTune.*:CudaOptInPasses.*Split*' > $OUT/r/lt_tune.log 2>&1; echo "lt/split tests rc $?"; grep -E "OK \]|FAILED \]|Failure" $OUT/r/lt_tune.log | cut -c1-250 | head -20; tz; el tests; }
[ $(left) -gt 40 ] && { timeout $(( $(left) - 5 )) $T --gtest_filter='CudaEagerFence.*:*CudaGraphEqualsEager*:CudaDeterminism.*' > $OUT/r/eq_tests.log 2>&1; echo "eq tests rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure|OK \]" $OUT/r/eq_tests.log | head -20; }
tz; el done
