#!/usr/bin/env python3
"""COCO detections and AP of HF transformers RTDetrV2ForObjectDetection (fp32) on a COCO-format data set.

Runs the reference pipeline (PIL image processor, each image preprocessed on its own, batched
forward) on every image of <dataset>/instances.json, post-processes with threshold 0.0, keeps the
top 100 by score per image, drops scores < 0.001, and writes COCO results
  tests/golden/shapes_r18vd/detections_shapes_val256.json   (compact)
If pycocotools is importable (not on the GPU machine) it also runs COCOeval bbox and writes
  tests/golden/shapes_r18vd/ap_reference.json

  /opt/refenv/bin/python tests/reference/make_ap_reference.py \
      --model ../shared/models/rtdetr_v2_r18vd_shapes --dataset ../shared/data/shapes_val256 --device cpu
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TOP_PER_IMAGE = 100
MIN_SCORE = 0.001
STAT_NAMES = [
    "AP", "AP50", "AP75", "AP_small", "AP_medium", "AP_large",
    "AR1", "AR10", "AR100", "AR_small", "AR_medium", "AR_large",
]


def check_categories(gt: dict, id2label: dict):
    """Category ids must be the model's label ids, verified by name."""
    for c in gt["categories"]:
        name = id2label.get(int(c["id"]))
        if name != c["name"]:
            sys.exit(f"error: category id {c['id']} is {c['name']!r} in the data set but {name!r} in the model")


def detect(model, proc, device, paths, sizes, batch):
    """Yields (index, scores, labels, boxes_xyxy) for each image, in order."""
    for start in range(0, len(paths), batch):
        chunk = range(start, min(start + batch, len(paths)))
        pv = torch.cat([common.preprocess(proc, [common.open_image(paths[i])]) for i in chunk])
        with torch.no_grad():
            out = model(pixel_values=pv.to(device))
        res = proc.post_process_object_detection(out, threshold=0.0, target_sizes=[sizes[i] for i in chunk])
        for i, r in zip(chunk, res):
            yield i, r["scores"].cpu().numpy(), r["labels"].cpu().numpy(), r["boxes"].cpu().numpy()
        print(f"  {chunk.stop}/{len(paths)}", flush=True)


def coco_eval(gt_path, dets, cat_names, img_ids):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO(gt_path)
    dt = gt.loadRes(dets)
    ev = COCOeval(gt, dt, "bbox")
    ev.params.imgIds = sorted(img_ids)  # only the images that were run (matters with --limit)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    prec = ev.eval["precision"]  # [T, R, K, A, M]
    per_class = {}
    for k, cid in enumerate(ev.params.catIds):
        p = prec[:, :, k, 0, -1]
        p = p[p > -1]
        per_class[cat_names[cid]] = float(p.mean()) if p.size else -1.0
    return [float(s) for s in ev.stats], per_class


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True, help="folder with instances.json and images/")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out-dir", default=os.path.join(common.REPO_ROOT, "tests", "golden", "shapes_r18vd"))
    ap.add_argument("--limit", type=int, default=0, help="only the first N images (debugging)")
    args = ap.parse_args()

    device = common.setup_device(args.device)
    model = common.load_model(args.model, device)
    proc = common.load_processor(args.model)
    gt_path = os.path.join(args.dataset, "instances.json")
    with open(gt_path) as f:
        gt = json.load(f)
    id2label = {int(k): v for k, v in model.config.id2label.items()}
    check_categories(gt, id2label)

    images = sorted(gt["images"], key=lambda im: im["id"])
    if args.limit:
        images = images[: args.limit]
    paths, sizes = [], []
    for im in images:
        paths.append(os.path.join(args.dataset, "images", im["file_name"]))
        img = common.open_image(paths[-1])
        if img.size != (im["width"], im["height"]):
            sys.exit(f"error: {im['file_name']} is {img.size}, instances.json says {im['width']}x{im['height']}")
        sizes.append((im["height"], im["width"]))

    dets = []
    for i, scores, labels, boxes in detect(model, proc, device, paths, sizes, args.batch):
        order = np.argsort(-scores, kind="stable")[:TOP_PER_IMAGE]  # already sorted; stable keeps HF order
        for j in order:
            s = float(scores[j])
            if s < MIN_SCORE:
                continue
            x0, y0, x1, y1 = (float(v) for v in boxes[j])
            dets.append({
                "image_id": images[i]["id"],
                "category_id": int(labels[j]),
                "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)],
                "score": round(s, 5),
            })

    os.makedirs(args.out_dir, exist_ok=True)
    name = os.path.basename(os.path.normpath(args.dataset))
    det_path = os.path.join(args.out_dir, f"detections_{name}.json")
    with open(det_path + ".tmp", "w") as f:
        json.dump(dets, f, separators=(",", ":"))
    os.replace(det_path + ".tmp", det_path)
    print(f"wrote {det_path} ({len(dets)} detections, {len(images)} images)")

    try:
        import pycocotools  # noqa: F401
    except ImportError:
        print("pycocotools not importable: AP not computed (run this script on CPU for ap_reference.json)")
        return
    stats, per_class = coco_eval(gt_path, det_path, {c["id"]: c["name"] for c in gt["categories"]},
                                [im["id"] for im in images])
    from importlib.metadata import version
    doc = {
        "generator": "tests/reference/make_ap_reference.py",
        "command": common.command_line(),
        "model": os.path.basename(os.path.normpath(args.model)),
        "dataset": name,
        "detections": os.path.basename(det_path),
        "n_images": len(images),
        "n_detections": len(dets),
        "device": args.device,
        "dtype": "float32",
        "post_process": f"HF post_process_object_detection threshold 0.0, top {TOP_PER_IMAGE}/image, "
                        f"scores < {MIN_SCORE} dropped, bbox rounded to 0.01 px, score to 1e-5",
        "versions": dict(common.versions(), pycocotools=version("pycocotools")),
        "ap50_95": stats[0],
        "ap50": stats[1],
        "stats": dict(zip(STAT_NAMES, stats)),
        "per_class_ap50_95": per_class,
    }
    ap_path = os.path.join(args.out_dir, "ap_reference.json")
    with open(ap_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {ap_path}: AP50:95 {stats[0]:.4f} AP50 {stats[1]:.4f}")


if __name__ == "__main__":
    main()
