#!/usr/bin/env python3
"""The CPU peer of `detforge bench --backend cpu`: the same checkpoint in transformers, eager
fp32 on the CPU with the same thread count, batch 1 at 640x640, timed by the host clock around
the forward (p50/p95/min over --iters after --warmup). Run it in the same command as detforge's
bench (bench/run_cpu.sh) so the ratio comes from one run on one machine.
Usage: pytorch_cpu_reference.py <checkpoint-dir> [--threads N] [--warmup W] [--iters N] [--json F]
"""
import argparse
import json
import os
import statistics
import time

import torch
from transformers import RTDetrV2ForObjectDetection


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = RTDetrV2ForObjectDetection.from_pretrained(a.checkpoint, torch_dtype=torch.float32).eval()
    x = torch.rand((1, 3, 640, 640), generator=torch.Generator().manual_seed(0))
    ms = []
    with torch.inference_mode():
        for i in range(a.warmup + a.iters):
            t0 = time.perf_counter()
            model(pixel_values=x)
            if i >= a.warmup:
                ms.append((time.perf_counter() - t0) * 1000)
    q = statistics.quantiles(ms, n=20)
    out = {"peer": "transformers eager fp32 cpu", "threads": a.threads, "batch": 1, "engine_ms_p50": statistics.median(ms),
           "engine_ms_p95": q[18], "engine_ms_min": min(ms), "torch": torch.__version__,
           "transformers": __import__("transformers").__version__}
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
