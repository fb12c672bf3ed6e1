# Session 27, call 4: do the load-time tuning options stack? Each measured ~1 % faster at batch 1
# alone in earlier sessions (CONV_TUNE_GRAPH=4 v14, CONV_KNOBS v22, OWN_CONV=1 at margin 1.3 v21).
# Run as: run(command="bash .devdeps/s27call4.sh", carry=[".devdeps"]) after scripts/device_prepare.sh.
mkdir -p $OUT/r; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; tz; exit 1; }
el built
BATCHES=1 ITERS=300 timeout 420 bash bench/ab_h200.sh $OUT/r/ab "def:" "tg4:DETFORGE_CUDA_CONV_TUNE_GRAPH=4" "kn:DETFORGE_CUDA_CONV_KNOBS=1600" "o13:DETFORGE_CUDA_OWN_CONV=1 DETFORGE_CUDA_OWN_CONV_MARGIN=1.3" "all3:DETFORGE_CUDA_CONV_TUNE_GRAPH=4 DETFORGE_CUDA_CONV_KNOBS=1600 DETFORGE_CUDA_OWN_CONV=1 DETFORGE_CUDA_OWN_CONV_MARGIN=1.3" "def2:" "all3b:DETFORGE_CUDA_CONV_TUNE_GRAPH=4 DETFORGE_CUDA_CONV_KNOBS=1600 DETFORGE_CUDA_OWN_CONV=1 DETFORGE_CUDA_OWN_CONV_MARGIN=1.3" > $OUT/r/ab.log 2>&1; tail -9 $OUT/r/ab.log; tz; el done
