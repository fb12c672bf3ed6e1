#!/usr/bin/env bash
# CPU latency of r18vd fp32 batch 1: detforge beside transformers eager in one command, on this
# machine. Usage: bench/run_cpu.sh [python-with-torch-and-transformers] [out.json]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${1:-python3}
out=${2:-$root/bench/results/cpu/latest.json}
work=$(mktemp -d)
mkdir -p "$(dirname "$out")"
"$root/build/detforge" build "$root/models/demo" -o "$work/r18.bundle" >/dev/null
"$root/build/detforge" bench "$work/r18.bundle" --backend cpu --warmup 3 --iters 20 --json "$work/df.json"
"$py" "$root/bench/pytorch_cpu_reference.py" "$root/models/demo" --threads "$(nproc)" --warmup 3 --iters 20 --json "$work/pt.json"
python3 - "$work" "$out" "$py" <<'PY'
import json, os, platform, sys
work, out, py = sys.argv[1:]
df = json.load(open(os.path.join(work, "df.json")))
pt = json.load(open(os.path.join(work, "pt.json")))
rec = {"model": "rtdetr_v2_r18vd_shapes", "backend": "cpu", "precision": "fp32", "batch": 1,
       "engine_ms_p50": df["engine_ms_p50"], "engine_ms_p95": df["engine_ms_p95"], "e2e_ms_p50": df["e2e_ms_p50"],
       "images_per_s": df["images_per_s"], "peer": pt, "speedup_vs_peer": pt["engine_ms_p50"] / df["engine_ms_p50"],
       "env": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
       "command": "bench/run_cpu.sh " + py}
json.dump([rec], open(out, "w"), indent=1)
print(f"detforge cpu fp32 b1 {df['engine_ms_p50']:.1f} ms, transformers eager {pt['engine_ms_p50']:.1f} ms: "
      f"{rec['speedup_vs_peer']:.2f}x")
PY
