#!/usr/bin/env bash
# A/B of CUDA engine settings on the GPU machine, side by side in one device command: the same
# bundle benchmarked (engine time, CUPTI profile, engine load time) under each variant's
# environment, one after another, so the ratios come from one machine state.
# Usage (on the device, after scripts/device_build.sh):
#   bench/ab_h200.sh OUTDIR "name:VAR=value VAR2=value" ["name2:..." ...]
#   env: BATCHES (default "1"), PRECISION (fp16), ITERS (300), PROFILE_OPS=name (per-op profile
#   for that variant), CHECKPOINT (models/demo), E2E=1 (also time detect() end to end, at
#   batch 1 the same forward without post-processing: e2e_ms_p50, e2e_raw_ms_p50, and profile the
#   device's timeline of one detect() call: e2e_profile)
# Writes OUTDIR/<variant>_b<batch>.json and OUTDIR/ab.json (a list of records) and prints a table.
# Variables: DETFORGE_CUDA_STREAMS (1..8), DETFORGE_CUDA_CONV_TUNE (plans timed per conv),
#   DETFORGE_CUDA_FUSED_CONV (0 = legacy conv + separate epilogue), DETFORGE_CUDA_ROW_MLP (1 = linear
#   chains as row_mlp), DETFORGE_CUDA_OWN_CONV, DETFORGE_CUDA_OWN_CONV_MARGIN, DETFORGE_CUDA_STEM, DETFORGE_CUDA_PDL (0 = plain
#   launches, 1 = PDL, 2 = PDL on same-stream edges only), DETFORGE_CUDA_ASAP,
#   DETFORGE_CUDA_CONV_WS0, DETFORGE_CUDA_SMALL_LINEAR, DETFORGE_CUDA_CONV_HANDLES,
#   DETFORGE_CUDA_LN_ADD, DETFORGE_CUDA_UPSAMPLE_CONCAT, DETFORGE_CUDA_LATE_VALUE,
#   DETFORGE_CUDA_TOPK_SPLIT, DETFORGE_CUDA_GPU_SELECT, DETFORGE_CUDA_STAGE_THREADS,
#   DETFORGE_CUDA_STAGE_SIDE, DETFORGE_CUDA_POOL_QUAD, DETFORGE_CUDA_CONV_KNOBS, and the rest of
#   the README's settings paragraph, DETFORGE_SKIP_PASSES (graph passes left out when building
#   that variant's bundle) and DETFORGE_EXTRA_PASSES (off-by-default passes run for it:
#   distribute_adds, gather_early, merge_values).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: bench/ab_h200.sh OUTDIR "name:VAR=value ..." ...}
shift
mkdir -p "$out"
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cli=$root/build-device/detforge
[ -x "$cli" ] || { echo "ab_h200: $cli missing; run scripts/device_build.sh first"; exit 1; }
bundle=${BUNDLE:-/tmp/detforge_ab_model.bundle}  # not under OUTDIR: 77 MiB
[ -f "$bundle" ] || "$cli" build "${CHECKPOINT:-$root/models/demo}" -o "$bundle" >/dev/null || exit 1
for v in "$@"; do
  name=${v%%:*}
  envs=${v#*:}
  vb=$bundle
  if [[ $envs == *DETFORGE_SKIP_PASSES=* || $envs == *DETFORGE_EXTRA_PASSES=* ]]; then  # a graph-pass A/B: own bundle
    vb=/tmp/detforge_ab_$name.bundle
    env $envs "$cli" build "${CHECKPOINT:-$root/models/demo}" -o "$vb" | sed 's/^/   /' || exit 1
  fi
  for b in ${BATCHES:-1}; do
    extra=()
    [ "${PROFILE_OPS:-}" = "$name" ] && extra=(--profile-ops)
    [ "${E2E:-0}" = 1 ] && extra+=(--profile-e2e) || extra+=(--skip-e2e)
    echo "== $name b$b: $envs"
    env $envs "$cli" bench "$vb" --backend cuda --batch "$b" --precision "${PRECISION:-fp16}" --warmup 50 \
      --iters "${ITERS:-300}" --profile "${extra[@]}" --json "$out/${name}_b$b.json" \
      >"$out/${name}_b$b.log" 2>&1 || { echo "   failed:"; tail -5 "$out/${name}_b$b.log"; }
    grep -E "engine load|^engine|^e2e|graph:|op profile" "$out/${name}_b$b.log" | sed 's/^/   /'
  done
done
python3 - "$out" "$@" <<'PY'
import json, os, sys
out, variants = sys.argv[1], sys.argv[2:]
recs = []
for v in variants:
    name, envs = v.split(":", 1)
    for f in sorted(os.listdir(out)):
        if f.startswith(name + "_b") and f.endswith(".json"):
            j = json.load(open(os.path.join(out, f)))
            p = j.get("profile", {})
            recs.append({"variant": name, "env": envs, "batch": j["batch"], "precision": j["precision"],
                         "engine_ms_p50": j["engine_ms_p50"], "engine_ms_p95": j["engine_ms_p95"],
                         "stable": j["engine"]["engine"]["stable"] if "engine" in j.get("engine", {}) else None,
                         "engine_load_s": j.get("engine_load_s"), "kernels_per_forward": p.get("kernels_per_forward"),
                         "gpu_ms_per_forward": p.get("gpu_ms_per_forward"), "group_ms": p.get("group_ms"),
                         "graph_streams": j["engine"].get("graph_streams"), "graph_waits": j["engine"].get("graph_waits"),
                         "small_linears": j["engine"].get("small_linears"),
                         "graph_check": j["engine"].get("graph_check"), "tuning": j["engine"].get("tuning"),
                         "green": j["engine"].get("green"),
                         "e2e_ms_p50": j.get("e2e_ms_p50"), "e2e_raw_ms_p50": j.get("e2e_raw_ms_p50")})
json.dump(recs, open(os.path.join(out, "ab.json"), "w"), indent=1)
base = {}
for r in recs:
    base.setdefault(r["batch"], r["engine_ms_p50"])
print(f"{'variant':14} {'batch':>5} {'p50 ms':>8} {'vs first':>8} {'load s':>7} {'kernels':>7} {'gpu ms':>7} streams")
for r in recs:
    print(f"{r['variant']:14} {r['batch']:5d} {r['engine_ms_p50']:8.4f} {base[r['batch']] / r['engine_ms_p50']:8.3f} "
          f"{r['engine_load_s'] or 0:7.1f} {r['kernels_per_forward'] or 0:7.0f} {r['gpu_ms_per_forward'] or 0:7.3f} "
          f"{r['graph_streams']}" + (f"  e2e {r['e2e_ms_p50']:.4f}" if r["e2e_ms_p50"] else "")
          + (f" raw {r['e2e_raw_ms_p50']:.4f}" if r["e2e_raw_ms_p50"] else "")
          + (f"  tuning: {r['tuning']['cached']} cached, {r['tuning']['timed']} timed" if (r["tuning"] or {}).get("on") else "")
          + (f"  green: {r['green']['ops']} ops on {r['green']['sms']} SMs" if (r["green"] or {}).get("sms") else ""))
PY
