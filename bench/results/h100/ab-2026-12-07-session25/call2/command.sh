# Session 25, call 2 (same warm H100 as call 1, build-device/ kept): the race bisect fenced (/0) and
# unfenced (/1) on 640 more inputs, then the benchmark record with PyTorch in the same command
# under DETFORGE_CUDA_FULL_EDGES=3 (run_h200_wrapper.sh = .devdeps/s25call2.sh).
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests; mkdir -p $OUT/r2; S=$(date +%s)
for p in 0 1; do DETFORGE_RACE_INPUTS=640 timeout 120 $T --gtest_also_run_disabled_tests --gtest_filter="*CudaRaceBisect.*/$p" > $OUT/r2/bisect640_$p.log 2>&1; echo "bisect $p rc $? [$(( $(date +%s)-S ))s]"; grep -E "^race bisect" $OUT/r2/bisect640_$p.log | cut -c1-330; done
tar czf $OUT/r2.tgz -C $OUT r2
TL=$(( 560 - ($(date +%s)-S) )) bash .devdeps/s25call2.sh DETFORGE_CUDA_FULL_EDGES=3
