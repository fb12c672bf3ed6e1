# Session 27, call 5: the three load-time tuning options together (CONV_TUNE_GRAPH=4, CONV_KNOBS=1600,
# OWN_CONV=1 at margin 1.3) against the defaults again, then fp16/fp32 quality on shapes_val256
# with them. Run as: run(command="bash .devdeps/s27call5.sh", carry=[".devdeps", ".devq"]) with
# .devq/shapes_val256 (a copy of ../shared/data/shapes_val256) and .devdeps/shared moved aside (64 MiB).
mkdir -p $OUT/r/q; tz() { tar czf $OUT/r.tgz -C $OUT r; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
bash scripts/device_build.sh detforge_cli > $OUT/r/build.log 2>&1 || { tail -40 $OUT/r/build.log; tz; exit 1; }
el built
TUNE="DETFORGE_CUDA_CONV_TUNE_GRAPH=4 DETFORGE_CUDA_CONV_KNOBS=1600 DETFORGE_CUDA_OWN_CONV=1 DETFORGE_CUDA_OWN_CONV_MARGIN=1.3"
BATCHES=1 ITERS=300 timeout 150 bash bench/ab_h200.sh $OUT/r/ab "def:" "all3:$TUNE" "def2:" "all3b:$TUNE" > $OUT/r/ab.log 2>&1; tail -5 $OUT/r/ab.log; tz; el ab
env $TUNE timeout $(( 530 - ($(date +%s) - S) )) bash scripts/device_quality.sh .devq/shapes_val256 $OUT/r/q --stress > $OUT/r/q/quality.log 2>&1; echo "quality rc $?"
grep -E "rc=|precision|recall|AP|finite" $OUT/r/q/quality.log | head -30
tz; el done
