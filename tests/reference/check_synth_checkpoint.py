#!/usr/bin/env python3
"""Loads a `detforge synth-checkpoint` folder with transformers and checks that every tensor is
used and none is missing (the names/shapes contract), then runs one forward on a random image
and prints the output ranges (the weights' scales must keep activations finite).
Run: /opt/refenv/bin/python tests/reference/check_synth_checkpoint.py <folder> [<folder> ...]"""
import sys

import torch
from transformers import RTDetrV2ForObjectDetection

for folder in sys.argv[1:]:
    model, info = RTDetrV2ForObjectDetection.from_pretrained(folder, output_loading_info=True)
    print(folder, "loading info:", {k: len(v) for k, v in info.items()})
    assert not info["missing_keys"], info["missing_keys"]
    assert not info["unexpected_keys"], info["unexpected_keys"]
    assert not info.get("mismatched_keys"), info.get("mismatched_keys")
    model.eval().float()
    torch.manual_seed(0)
    with torch.no_grad():
        out = model(pixel_values=torch.rand(1, 3, 640, 640))
    lg, bx = out.logits, out.pred_boxes
    print(f"  logits {tuple(lg.shape)} range [{lg.min():.3f}, {lg.max():.3f}] finite={bool(torch.isfinite(lg).all())}")
    print(f"  boxes  {tuple(bx.shape)} range [{bx.min():.3f}, {bx.max():.3f}] finite={bool(torch.isfinite(bx).all())}")
    for i, enc in enumerate(out.encoder_last_hidden_state):
        print(f"  encoder output {i}: std {enc.std():.3f}, max |x| {enc.abs().max():.3f}")
    ref = out.init_reference_points
    print(f"  initial reference points range [{ref.min():.3g}, {ref.max():.3g}]")
    # Query selection must pick valid anchors (their reference points lie strictly inside (0,1)).
    assert float(ref.max()) < 1e3, "query selection picked masked anchors"
    assert float(bx.max()) < 1.0 and float(bx.min()) > 0.0, "boxes saturated"
    assert torch.isfinite(lg).all() and torch.isfinite(bx).all()
print("ok")
