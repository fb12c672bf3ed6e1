# Session 20, call 7: on the machine call 6 left warm (build-device/ of the final tree kept), the
# GPU suite but the bench smoke, the dec_tail tests (call 6) and the slow conv-tune tests (call 1).
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; mkdir -p $OUT/r; T=build-device/tests/detforge_gpu_tests; ls $T && timeout 170 $T --gtest_filter='-CudaBench.R18vdSmoke:CudaDecTail*:CudaConvTuneGraph.*' > $OUT/r/suite.log 2>&1; echo "rc $?"; grep -cE "^\[       OK" $OUT/r/suite.log; grep -E "^\[  FAILED|FAILED  \]" $OUT/r/suite.log | head; tail -3 $OUT/r/suite.log
