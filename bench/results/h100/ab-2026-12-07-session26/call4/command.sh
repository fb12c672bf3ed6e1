# Session 26, call 4 (same warm H100, right after call 3): split_concats against the default at batch 32.
mkdir -p $OUT/r32; BATCHES=32 ITERS=200 timeout 170 bash bench/ab_h200.sh $OUT/r32/ab "def:" "sc:DETFORGE_EXTRA_PASSES=split_concats" "def2:" "sc2:DETFORGE_EXTRA_PASSES=split_concats" > $OUT/r32/ab.log 2>&1; tail -6 $OUT/r32/ab.log; tar czf $OUT/r32.tgz -C $OUT r32
