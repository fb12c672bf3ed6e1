#!/usr/bin/env bash
# Session 16, call 3: build; ncu on the halo/direct/igemm-wgmma/cuDNN convs of 160x160x64 and 320x320x32;
# OWN_CONV=1 with the wgmma igemm launched without PDL (engine test + A/B).
set -u
R=$OUT/r; mkdir -p $R
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/smi.txt 2>&1
bash scripts/device_build.sh detforge_gpu_tests detforge_cli > $R/build.log 2>&1 || { tail -30 $R/build.log; tar czf $OUT/r.tgz -C $OUT r; exit 1; }
echo "built at $(el) s"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu; T=build-device/tests/detforge_gpu_tests
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
timeout 170 $NCU --clock-control none -k regex:'halo_wgmma|conv3x3_direct|wgmma_conv|xmma|cudnn|sm90' --launch-count 60 \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats -f -o $R/prof \
  $T --gtest_also_run_disabled_tests --gtest_filter='*Igemm*ProfileRuns*' > $R/ncu_run.log 2>&1
echo "ncu rc $? at $(el) s"; tail -3 $R/ncu_run.log
$NCU --import $R/prof.ncu-rep --page details > $R/prof_details.txt 2>&1
$NCU --import $R/prof.ncu-rep --page raw --csv --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active > $R/prof_raw.csv 2>&1
python3 - $R/prof_raw.csv <<'PY' 2>&1 | head -40
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if 'Kernel Name' in r), None)
if hdr is None: print(open(sys.argv[1]).read()[:2000]); sys.exit()
h = rows[hdr]; ki = h.index('Kernel Name')
cols = [c for c in h if '__' in c]
print('kernel | ' + ' | '.join(c.split('.')[0][:28] for c in cols))
for r in rows[hdr + 2:]:
    if len(r) == len(h): print(r[ki][:70] + ' | ' + ' | '.join(r[h.index(c)] for c in cols))
PY
echo "profile at $(el) s"
timeout 60 $T --gtest_filter='CudaConvIgemm.*:Modes/CudaOwnConvEngine.*/3' > $R/own1_tests.log 2>&1
grep -E "^\[  (FAILED|PASSED) |^1:|Actual|Failure" $R/own1_tests.log | head -8
echo "tests at $(el) s"
left=$(( 480 - $(el) ))
BATCHES="1 32" ITERS=300 timeout $left bash bench/ab_h200.sh $R/ab "default:" "own1:DETFORGE_CUDA_OWN_CONV=1" "default2:" > $R/ab.log 2>&1
tail -7 $R/ab.log
tar czf $OUT/r.tgz -C $OUT r
