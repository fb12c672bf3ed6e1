#!/usr/bin/env bash
# The H200 benchmark, in one device command (see /work/.library/device and bench/README if any):
#   builds (scripts/device_build.sh), runs the GPU tests, builds the r18vd-shaped bundle, runs
#   `detforge bench --backend cuda` for batch 1 and 32 in fp32 and fp16, and
#   bench/pytorch_reference.py (eager fp32 TF32-off, eager fp16, torch.compile reduce-overhead
#   fp16) on the same checkpoint in the same command, then writes the records to
#   <outdir>/<UTC date>.json and <outdir>/latest.json (older dated files stay beside it).
# Usage (on the device): bench/run_h200.sh [outdir]   default outdir: bench/results/h200
#   e.g. run(command="bench/run_h200.sh $OUT", carry=[".devdeps"]), then copy $OUT's files into
#   bench/results/h200/ here and commit them.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bench/results/h200}
mkdir -p "$out"
work=$(mktemp -d)
ckpt=${CHECKPOINT:-$root/models/demo}
model=${MODEL_NAME:-rtdetr_v2_r18vd_shapes}
batches=${BATCHES:-"1 32"}
precisions=${PRECISIONS:-"fp16 fp32"}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)

if [ "${SKIP_BUILD:-0}" != 1 ]; then  # SKIP_BUILD=1: build-device/ is already built (same warm machine)
  bash "$root/scripts/device_build.sh" detforge_gpu_tests detforge_cli >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log"; echo "run_h200: build failed"; exit 1; }
fi
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cli=$root/build-device/detforge
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # TEST_TIMEOUT (seconds, default none): stop the tests there so the benchmarks still run
  # within the device's per-command limit; the log then ends where they stopped.
  timeout "${TEST_TIMEOUT:-0}" "$root/build-device/tests/detforge_gpu_tests" \
    --gtest_filter="${TEST_FILTER:--CudaBench.R18vdSmoke}" >"$out/gpu_tests_$stamp.log" 2>&1
  echo "gpu tests rc=$? ($(grep -c '^\[       OK' "$out/gpu_tests_$stamp.log") ok)"
  grep -E "^\[  FAILED|cuda parity" "$out/gpu_tests_$stamp.log" | head -20
fi
"$cli" build "$ckpt" -o "$work/model.bundle" >"$work/bundle.log" 2>&1 || { cat "$work/bundle.log"; exit 1; }
profile=()
"$cli" bench --help 2>&1 | grep -q -- "--profile" && profile=(--profile)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader \
  >"$work/smi.txt" 2>&1 || true
aggregate() {
python3 - "$work" "$out" "$stamp" "$model" "$batches" "$precisions" <<'PY'
import glob, json, os, sys
work, out, stamp, model, batches, precisions = sys.argv[1:]
smi = open(os.path.join(work, "smi.txt")).read().strip()
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def p50(j, *keys):
    for k in keys:
        v = j
        for part in k.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if v is not None:
            return v
    return None
records = []
peers = {}
for b in batches.split():
    pt = load(os.path.join(work, f"pt_b{b}.json"))
    if not pt:
        continue
    peers[b] = {r["mode"]: {k: r.get(k) for k in ("engine_ms_p50", "engine_ms_p95", "images_per_s", "kernels_per_forward", "error")}
                for r in pt["results"]}
    for r in pt["results"]:
        if "error" in r:
            continue
        mode = r["mode"]
        records.append({"model": model, "backend": "pytorch-" + mode.split("_")[0], "precision": mode.split("_")[1],
                        "batch": int(b), "engine_ms_p50": r["engine_ms_p50"], "engine_ms_p95": r["engine_ms_p95"],
                        "e2e_ms_p50": None, "images_per_s": r["images_per_s"],
                        "kernels_per_forward": r.get("kernels_per_forward"), "stable": r["engine"]["stable"],
                        "peer": None, "env": pt["env"], "command": f"bench/pytorch_reference.py --batch {b} ({mode})"})
for b in batches.split():
    for p in precisions.split():
        j = load(os.path.join(work, f"df_{p}_b{b}.json"))
        if not j:
            continue
        eng = p50(j, "engine_ms.p50", "engine_ms_p50", "engine.p50_ms")
        peer = peers.get(b, {})
        rec = {"model": model, "backend": "detforge-cuda", "precision": p, "batch": int(b),
               "engine_ms_p50": eng, "engine_ms_p95": p50(j, "engine_ms.p95", "engine_ms_p95", "engine.p95_ms"),
               "e2e_ms_p50": p50(j, "e2e_ms.p50", "e2e_ms_p50", "e2e.p50_ms"),
               "images_per_s": p50(j, "images_per_s"),
               "kernels_per_forward": p50(j, "profile.kernels_per_forward", "kernels_per_forward"),
               "stable": p50(j, "engine_ms.stable", "engine.stable"),
               # which schedule the engine's graph check kept (cuda_settings.h, graph_check_)
               "graph_check": p50(j, "engine.graph_check"),
               "peer": {m: dict(v, speedup=(v["engine_ms_p50"] / eng if v.get("engine_ms_p50") and eng else None))
                        for m, v in peer.items()},
               "env": j.get("env") or {"nvidia_smi": smi},
               "command": open(os.path.join(work, f"df_{p}_b{b}.cmd")).read().strip()}
        if "profile" in j:
            rec["profile"] = j["profile"]
        if "op_profile" in j:
            rec["op_profile"] = j["op_profile"]
        records.append(rec)
# The file is a list of records (one per model, backend, precision, batch); each carries its
# environment, command and generation stamp.
for r in records:
    r["generated"] = stamp
    r["generator"] = "bench/run_h200.sh"
for name in (f"{stamp}.json", "latest.json"):
    with open(os.path.join(out, name), "w") as f:
        json.dump(records, f, indent=1)
print(f"{'backend':16} {'prec':5} {'batch':>5} {'engine p50':>11} {'p95':>8} {'e2e p50':>8} {'img/s':>9} {'kernels':>8}")
for r in records:
    f = lambda v, w, d=3: f"{v:{w}.{d}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"
    print(f"{r['backend']:16} {r['precision']:5} {r['batch']:5d} {f(r['engine_ms_p50'],11)} {f(r['engine_ms_p95'],8)} "
          f"{f(r['e2e_ms_p50'],8)} {f(r['images_per_s'],9,1)} {f(r['kernels_per_forward'],8,0)}")
PY
}

for b in $batches; do
  for p in $precisions; do
    it=200; [ "$b" -gt 8 ] && it=60
    cmd=("$cli" bench "$work/model.bundle" --backend cuda --batch "$b" --precision "$p" --warmup 30 --iters "$it"
         "${profile[@]}" --json "$work/df_${p}_b$b.json")
    # batch-1 fp16 also records the per-op kernel times (eager, CUPTI external correlation)
    [ "$b" = 1 ] && [ "$p" = fp16 ] && "$cli" bench --help 2>&1 | grep -q -- "--profile-ops" && cmd+=(--profile-ops)
    # the engine settings in force (DETFORGE_* variables) belong to the command
    echo "$(env | grep '^DETFORGE_' | sort | tr '\n' ' ')${cmd[*]}" >"$work/df_${p}_b$b.cmd"
    timeout "${STEP_TIMEOUT:-900}" "${cmd[@]}" >"$work/df_${p}_b$b.log" 2>&1 ||
      { echo "detforge bench $p b$b failed:"; tail -5 "$work/df_${p}_b$b.log"; }
  done
  it=100; [ "$b" -gt 8 ] && it=40
  PYTHONUNBUFFERED=1 timeout "${PT_TIMEOUT:-900}" python3 "$root/bench/pytorch_reference.py" "$ckpt" --batch "$b" --warmup 20 --iters "$it" \
    --modes "${PT_MODES:-eager_fp32,eager_fp16,compile_fp16}" --profile \
    --json "$work/pt_b$b.json" >/dev/null 2>"$work/pt_b$b.log" || { echo "pytorch b$b failed:"; tail -5 "$work/pt_b$b.log"; }
  aggregate >"$work/table.txt"  # after every batch: a later timeout still leaves these records
done
cat "$work/table.txt"

