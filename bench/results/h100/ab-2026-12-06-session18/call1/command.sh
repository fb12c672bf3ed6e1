# session 18, call 1 (tree fa4f9ba, kind nvidia-h100-x1, carry .devdeps); run from the repo root on the device
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
mkdir -p $OUT/r; nvidia-smi > $OUT/r/smi.txt
timeout 120 $T --gtest_filter='CudaLinearLn*:Modes/CudaLinearLnEngine.*:Modes/CudaOwnConvEngine.*:CudaConvDirect.*' > $OUT/r/new_tests.log 2>&1; tail -25 $OUT/r/new_tests.log
timeout 120 $T --gtest_filter='CudaLinearLn.DISABLED_Timing:CudaConvIgemm.DISABLED_Timing' --gtest_also_run_disabled_tests > $OUT/r/timing.log 2>&1; grep -vE "^\[ +(RUN|OK) " $OUT/r/timing.log | tail -40
BATCHES="1 32" ITERS=300 timeout 300 bash bench/ab_h200.sh $OUT/r/ab "default:" "ll1:DETFORGE_CUDA_LINEAR_LN=1" "ll2:DETFORGE_CUDA_LINEAR_LN=2" "d13:DETFORGE_CUDA_OWN_CONV=direct DETFORGE_CUDA_OWN_CONV_MARGIN=1.3" "o13:DETFORGE_CUDA_OWN_CONV=1 DETFORGE_CUDA_OWN_CONV_MARGIN=1.3" "default2:" 2>&1 | tail -40
tar czf $OUT/r.tgz -C $OUT r
