#!/usr/bin/env python3
"""Golden outputs of HF transformers RTDetrV2ForObjectDetection (fp32) for the C++ end-to-end tests.

For 8 COCO val images + 8 shapes scenes (first 8 sorted names of each) writes
tests/golden/<tag>/goldens.json with, per image: original size, FNV-1a 64 checksum of the float32
pixel tensor in NHWC [640,640,3] little-endian, 16 sample pixels, full logits [Q,num_labels] and
pred_boxes [Q,4] (cxcywh, normalised), the encoder top-k query indices, top-k margin diagnostics
(spec §7 "Numerical pitfalls"), and the post-processed detections at threshold 0.3.

  /opt/refenv/bin/python tests/reference/make_goldens.py \
      --model ../shared/models/rtdetr_v2_r18vd_shapes --tag shapes_r18vd --device cpu
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Fixed (y, x, c) positions in the 640x640x3 NHWC tensor: corners, centre, and scattered interior.
SAMPLE_POSITIONS = [
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 639, 0), (639, 0, 1), (639, 639, 2), (320, 320, 0), (320, 321, 1),
    (1, 1, 2), (100, 200, 0), (200, 100, 1), (333, 444, 2), (479, 160, 0), (555, 37, 1), (17, 600, 2),
    (638, 319, 0),
]
THRESHOLD = 0.3
NEAR_TIE = 1e-4


def topk_margin(scores_max: torch.Tensor, topk_ind: torch.Tensor, valid: torch.Tensor, q: int) -> dict:
    """Diagnostics for the top-k query selection of one image (scores_max: [L] max class logit)."""
    s = scores_max.double()
    srt = torch.sort(s, descending=True).values
    top = srt[: q + 1]
    adjacent = (top[:-1] - top[1:]).min().item()
    invalid = (~valid).nonzero().reshape(-1)
    sel_invalid = int((~valid[topk_ind]).sum().item())
    out = {
        "score_q": float(srt[q - 1]),  # q-th largest max-class logit (last one selected)
        "score_q_plus_1": float(srt[q]),  # first one not selected
        "gap": float(srt[q - 1] - srt[q]),
        "near_tie": bool(float(srt[q - 1] - srt[q]) < NEAR_TIE),
        "min_adjacent_gap_top": float(adjacent),  # smallest gap among ranks 1..q+1 (order swaps)
        "tied_pairs_top": int((top[:-1] == top[1:]).sum().item()),  # exact ties: row order is topk's choice
        "n_invalid_anchors": int(invalid.numel()),
        "invalid_selected": sel_invalid,
    }
    if invalid.numel():
        inv_scores = s[invalid]
        best = inv_scores.max()
        out["invalid_score"] = float(best)
        out["invalid_all_equal"] = bool((inv_scores == best).all().item())
        out["invalid_rank"] = int((s > best).sum().item())  # 0-based rank of the best invalid anchor
    return out


def run_image(model, proc, hook, device, path, valid, q):
    img = common.open_image(path)
    w, h = img.size
    pv = common.preprocess(proc, [img])
    nhwc = pv[0].permute(1, 2, 0).contiguous().numpy()
    with torch.no_grad():
        out = model(pixel_values=pv.to(device))
    scores = hook.scores[0]
    _, topk_ind = torch.topk(scores.max(-1).values, q)
    # The hook's top-k must be exactly the model's: its gathered scores equal enc_topk_logits.
    if not torch.equal(scores, out.enc_outputs_class[0]):
        sys.exit(f"error: hooked enc_score_head output differs from enc_outputs_class for {path}")
    if not torch.equal(scores[topk_ind], out.enc_topk_logits[0]):
        sys.exit(f"error: recomputed top-k does not reproduce enc_topk_logits for {path}")
    zero_rows = int((hook.masked_memory[0].abs().sum(-1) == 0).sum().item())
    margin = topk_margin(scores.max(-1).values.cpu(), topk_ind.cpu(), valid.cpu(), q)
    margin["masked_memory_zero_rows"] = zero_rows
    det = proc.post_process_object_detection(out, threshold=THRESHOLD, target_sizes=[(h, w)])[0]
    return {
        "width": w,
        "height": h,
        "pixel_fnv1a64": common.pixel_checksum(nhwc),
        "pixel_samples": [{"y": y, "x": x, "c": c, "v": float(nhwc[y, x, c])} for (y, x, c) in SAMPLE_POSITIONS],
        "enc_topk_indices": [int(i) for i in topk_ind.cpu().tolist()],
        "topk_margin": margin,
        "logits": common.f32list(out.logits[0]),
        "pred_boxes": common.f32list(out.pred_boxes[0]),
        "detections": {
            "boxes_xyxy": common.f32list(det["boxes"]),
            "scores": common.f32list(det["scores"]),
            "labels": [int(v) for v in det["labels"].cpu().tolist()],
        },
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint directory")
    ap.add_argument("--tag", required=True, choices=["shapes_r18vd", "shapes_tiny"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--shared", default=common.DEFAULT_SHARED, help="the shared/ folder (default <repo>/../shared)")
    ap.add_argument("--out", default=None, help="output file (default tests/golden/<tag>/goldens.json)")
    ap.add_argument("--per-set", type=int, default=8, help="images taken from each data set")
    args = ap.parse_args()

    device = common.setup_device(args.device)
    torch.manual_seed(0)
    model = common.load_model(args.model, device)
    proc = common.load_processor(args.model)
    cfg = model.config
    q = cfg.num_queries
    hook = common.EncoderSelectionHook(model)

    data = os.path.join(args.shared, "data")
    files = []
    for sub in ("coco_val80/images", "shapes_val256/images"):
        files += [f"{sub}/{n}" for n in common.sorted_images(os.path.join(data, sub), args.per_set)]

    side = proc.size["height"] if isinstance(proc.size, dict) else proc.size.height
    shapes = [(side // s, side // s) for s in cfg.feat_strides]
    valid = common.valid_mask(model, shapes, device)

    images = []
    for rel in files:
        rec = {"file": rel}
        rec.update(run_image(model, proc, hook, device, os.path.join(data, rel), valid, q))
        m = rec["topk_margin"]
        print(f"{rel}: {rec['width']}x{rec['height']} dets={len(rec['detections']['scores'])} "
              f"gap={m['gap']:.3g} invalid_sel={m['invalid_selected']} invalid_rank={m.get('invalid_rank')}",
              flush=True)
        images.append(rec)
    hook.remove()

    model_rel = os.path.relpath(os.path.abspath(args.model), os.path.abspath(args.shared))
    doc = {
        "generator": "tests/reference/make_goldens.py",
        "command": common.command_line(),
        "tag": args.tag,
        "model": model_rel,
        "model_class": type(model).__name__,
        "image_processor": type(proc).__name__,
        "versions": common.versions(),
        "device": args.device,
        "dtype": "float32",
        "tf32": False,
        "num_queries": q,
        "num_labels": cfg.num_labels,
        "id2label": {str(k): v for k, v in cfg.id2label.items()},
        "input_size": [side, side],
        "pixel_layout": "NHWC float32 [H,W,3] little-endian, RGB, u8/255, no mean/std",
        "checksum": "FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3) over the pixel bytes",
        "boxes_layout": "pred_boxes: cx,cy,w,h normalised; detections.boxes_xyxy: original-image pixels",
        "threshold": THRESHOLD,
        "near_tie_eps": NEAR_TIE,
        "images": images,
    }
    out = args.out or os.path.join(common.REPO_ROOT, "tests", "golden", args.tag, "goldens.json")
    common.write_json(out, doc)
    print(f"wrote {out} ({len(images)} images)")


if __name__ == "__main__":
    main()
