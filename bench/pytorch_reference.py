#!/usr/bin/env python3
"""The PyTorch peer of `detforge bench`: the same checkpoint through transformers'
RTDetrV2ForObjectDetection, timed the way detforge times its engine (CUDA events around the
forward on pixels already on the GPU; warm-up first; p50/p95/min; stable when the medians of the
first and second half of the samples differ by <= 5 %).

Modes: eager_fp32 (TF32 off for cuDNN and matmul), eager_fp16 (model.half()), compile_fp16
(torch.compile mode="reduce-overhead", i.e. inductor + CUDA graphs). Prints one JSON object
(and writes it with --json). Run it in the same device command as detforge so the ratios come
from one machine state (bench/run_h200.sh does).

  python3 bench/pytorch_reference.py models/demo --batch 1 --modes eager_fp32,eager_fp16,compile_fp16
"""
import argparse
import json
import statistics
import sys
import time


def stats(ms):
    s = sorted(ms)

    def pct(v, q):
        pos = q * (len(v) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    h = len(ms) // 2
    a, b = pct(sorted(ms[:h]), 0.5), pct(sorted(ms[h:]), 0.5)
    change = abs(b - a) / a if a > 0 else 0.0
    return {"samples": len(ms), "p50_ms": pct(s, 0.5), "p95_ms": pct(s, 0.95), "min_ms": s[0], "max_ms": s[-1],
            "mean_ms": statistics.fmean(ms), "first_half_p50_ms": a, "second_half_p50_ms": b,
            "half_change": change, "stable": change <= 0.05}


def count_kernels(step, torch):
    """CUDA events of one forward under torch.profiler. For torch.compile(reduce-overhead) the
    forward is a CUDA graph replay; CUPTI reports the kernels inside it one by one. Returns None
    when the profiler cannot say (the figure is then left out, not guessed)."""
    from torch.profiler import ProfilerActivity, profile
    try:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        n = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        return n or None
    except Exception as e:  # noqa: BLE001 - a profiler failure must not cost the timing
        print(f"kernel count unavailable for this mode: {e}", file=sys.stderr)
        return None


def run_mode(mode, ckpt, batch, warmup, iters, profile_kernels, torch, Model):
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Model.from_pretrained(ckpt, torch_dtype=torch.float32).eval().cuda()
    dtype = torch.float16 if mode.endswith("fp16") else torch.float32
    if dtype == torch.float16:
        model = model.half()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand((batch, 3, 640, 640), generator=g, device="cuda", dtype=torch.float32).to(dtype)
    fwd = model
    t_compile = None
    if mode.startswith("compile"):
        t0 = time.time()
        fwd = torch.compile(model, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(3):  # compile + record the CUDA graph
                torch.compiler.cudagraph_mark_step_begin()
                fwd(pixel_values=x)
        torch.cuda.synchronize()
        t_compile = time.time() - t0

    def step():
        if mode.startswith("compile"):
            torch.compiler.cudagraph_mark_step_begin()
        return fwd(pixel_values=x)

    kernels = None
    with torch.no_grad():
        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        if profile_kernels:
            kernels = count_kernels(step, torch)
        start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            start[i].record()
            step()
            end[i].record()
        torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in zip(start, end)]
    st = stats(ms)
    out = {"mode": mode, "batch": batch, "engine": st, "engine_ms_p50": st["p50_ms"], "engine_ms_p95": st["p95_ms"],
           "images_per_s": batch * 1000.0 / st["p50_ms"], "kernels_per_forward": kernels}
    if t_compile is not None:
        out["compile_s"] = t_compile
    del model, fwd
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="Hugging Face checkpoint folder (config.json, model.safetensors)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--modes", default="eager_fp32,eager_fp16,compile_fp16")
    ap.add_argument("--profile", action="store_true", help="count CUDA kernels per forward (torch.profiler)")
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args()
    import torch
    import transformers
    from transformers import RTDetrV2ForObjectDetection
    if not torch.cuda.is_available():
        sys.exit("pytorch_reference.py: no CUDA device")
    res = {"checkpoint": a.checkpoint, "batch": a.batch, "warmup": a.warmup, "iters": a.iters,
           "env": {"torch": torch.__version__, "transformers": transformers.__version__,
                   "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                   "gpu": torch.cuda.get_device_name(0)},
           "stability_rule": "medians of the first and second half of the timed runs differ by <= 5%",
           "results": []}
    for mode in a.modes.split(","):
        try:
            res["results"].append(run_mode(mode, a.checkpoint, a.batch, a.warmup, a.iters, a.profile, torch,
                                           RTDetrV2ForObjectDetection))
        except Exception as e:  # a failed mode is reported, the others still run
            res["results"].append({"mode": mode, "batch": a.batch, "error": f"{type(e).__name__}: {e}"})
        print(json.dumps(res["results"][-1]), file=sys.stderr, flush=True)
    text = json.dumps(res, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
