# Session 19, call 1 (kind: nvidia-h100-x1 by fallback; tree da10ee1 + the CONV_KNOBS change, split knobs only).
# Run from the repo root on the device with `carry: [".devdeps"]`, bench/results untracked for the call.
mkdir -p $OUT/r
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
nvidia-smi > $OUT/r/smi.txt
timeout 200 $T --gtest_filter='CudaLinearLn*:Modes/CudaLinearLnEngine.*:CudaConvTuneGraph.R18vdSplitKnob*' > $OUT/r/tests.log 2>&1
$T --gtest_filter='CudaLinearLn.DISABLED_Timing' --gtest_also_run_disabled_tests > $OUT/r/timing.log 2>&1
BATCHES="1 32" ITERS=300 timeout 300 bash bench/ab_h200.sh $OUT/r/ab "default:" "ll1:DETFORGE_CUDA_LINEAR_LN=1" "kn1600:DETFORGE_CUDA_CONV_KNOBS=1600" "default2:" > $OUT/r/ab.log 2>&1
timeout 100 ncu --clock-control none --set full --import-source no -k regex:linear_ln_k --launch-skip 335 --launch-count 1 -o $OUT/r/s4 $T --gtest_filter=CudaLinearLn.DISABLED_Timing --gtest_also_run_disabled_tests > $OUT/r/ncu.log 2>&1
ncu -i $OUT/r/s4.ncu-rep --page details --print-details all > $OUT/r/s4.txt 2>&1; rm -f $OUT/r/s4.ncu-rep
build-device/detforge synth-checkpoint --preset r18vd --num-labels 80 -o /tmp/coco80 > $OUT/r/synth80.log 2>&1
CHECKPOINT=/tmp/coco80 BUNDLE=/tmp/coco80.bundle BATCHES="1 32" ITERS=300 timeout 120 bash bench/ab_h200.sh $OUT/r/ab80 "default80:" > $OUT/r/ab80.log 2>&1
cd $OUT && tar czf r.tgz r
