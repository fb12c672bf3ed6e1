mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
bash scripts/device_build.sh detforge_gpu_tests > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
timeout 60 $T --gtest_filter='CudaDecTail*' > $OUT/r/dt.log 2>&1; echo "rc $?"; grep -E "dec_tail rows|first CTA|work median|Failure|^\[  (PASSED|FAILED)|FAILED" $OUT/r/dt.log | head -30; tz
