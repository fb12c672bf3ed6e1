# Session 25, calls 3-4 (same warm H100): the whole GPU suite (minus the smoke benchmark) in three
# gtest shards with DETFORGE_CUDA_FULL_EDGES=3 in the environment (shard 0 in call 3, 1-2 in call 4).
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests; mkdir -p $OUT/s
for i in 0 1 2; do
  DETFORGE_CUDA_FULL_EDGES=3 GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 440 $T --gtest_filter='-CudaBench.R18vdSmoke' > $OUT/s/suite_fe3_shard$i.log 2>&1
  echo "shard $i rc $? ok $(grep -cE '^\[       OK' $OUT/s/suite_fe3_shard$i.log)"
done
