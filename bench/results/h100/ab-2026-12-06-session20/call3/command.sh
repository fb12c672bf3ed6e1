mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
timeout 120 $T --gtest_filter='CudaDecTail.*' > $OUT/r/stages.log 2>&1; echo "rc $?"; grep -E "dec_tail rows|work median|^\[  (PASSED|FAILED)|FAILED|Failure" $OUT/r/stages.log | head -80; tz; el stages
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
timeout 150 $NCU --clock-control none --set full --import-source no -k regex:dec_tail_k --launch-skip 4 --launch-count 1 -o $OUT/r/dt $T --gtest_filter=CudaDecTail.MatchesTheUnfusedOpsStageByStage > $OUT/r/ncu.log 2>&1; echo "ncu rc $?"; tail -3 $OUT/r/ncu.log
$NCU -i $OUT/r/dt.ncu-rep --page details --print-details all > $OUT/r/ncu_dt.txt 2>&1; rm -f $OUT/r/dt.ncu-rep; grep -E "Duration|Throughput|Stall|Warp Cycles|Eligible|Issued" $OUT/r/ncu_dt.txt | head -30; tz; el ncu
