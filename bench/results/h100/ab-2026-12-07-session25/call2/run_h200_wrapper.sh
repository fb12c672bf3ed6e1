# Session 25, call 2 (same warm machine, build-device/ kept): the benchmark record with PyTorch in
# the same command (bench/run_h200.sh, no tests), under the settings given as arguments (env).
mkdir -p $OUT/h
env "$@" SKIP_BUILD=1 SKIP_TESTS=1 timeout ${TL:-520} bash bench/run_h200.sh $OUT/h > $OUT/h/run.log 2>&1; echo "run_h200 rc $?"
tail -14 $OUT/h/run.log
tar czf $OUT/h.tgz -C $OUT h
