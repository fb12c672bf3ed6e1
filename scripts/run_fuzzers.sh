#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for N seconds (default 60)
# on a copy of its seed corpus. Exits non-zero when a target crashes; the crashing input is left
# in the build folder (crash-*) and named in the output.
#   scripts/run_fuzzers.sh [seconds] [build-dir]
set -euo pipefail
secs="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(realpath -m "${2:-$root/build-fuzz}")"
CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDETFORGE_FUZZ=ON -DDETFORGE_CPU=OFF -DDETFORGE_CUDA=OFF \
  -DDETFORGE_TESTS=OFF -DDETFORGE_BENCH=OFF >/dev/null
ninja -C "$build" -j "${FUZZ_JOBS:-2}" fuzz_safetensors fuzz_bundle
status=0
for t in safetensors bundle; do
  work="$build/fuzz-$t"
  rm -rf "$work" && mkdir -p "$work/corpus"
  cp "$root/tests/fuzz/corpus/$t/"* "$work/corpus/"
  echo "== fuzz_$t for ${secs}s"
  if ! (cd "$work" && "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 corpus 2>&1 | tail -n 25); then
    echo "fuzz_$t FAILED: see $work/crash-*"
    status=1
  fi
done
exit $status
