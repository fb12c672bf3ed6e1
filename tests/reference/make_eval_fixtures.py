#!/usr/bin/env python3
"""Writes the COCO-eval test fixtures under tests/golden/eval/ (seeded, deterministic).

Each case is a ground-truth JSON plus a COCO results file; tests/reference/pycocotools_expected.py
then runs pycocotools on every case and the C++ test (tests/unit/test_eval_cocoeval.cpp) checks
detforge's evaluator against it. Cases (listed in tests/golden/eval/cases.json):

  coco_val80_jitter   ../shared/data/coco_val80 ground truth (815 boxes, 11 crowd) jittered:
                      missed boxes, shifted/scaled boxes, wrong labels, false positives, boxes on
                      crowd regions, score ties (rounded scores) and one image-category cell with
                      more than 100 detections (exercises maxDets).
  coco_val80_jitter_first40  the same results evaluated on the first 40 images only (--limit).
  shapes_val256_jitter  the same recipe on ../shared/data/shapes_val256 (category ids 0-7).
  empty_images        hand-built ground truth (committed here): images with no detections,
                      images with no ground truth, an image with neither, crowd boxes, boxes in
                      every area range, one annotation with id 0 (pycocotools' "id 0 never
                      matches" quirk).
  no_gt_classes       hand-built ground truth whose categories 4 and 6 have no boxes, with
                      detections of those categories and of category 99 that the dataset lacks.
  shapes_r18vd        (when tests/golden/shapes_r18vd/detections_shapes_val256.json exists) the
                      r18vd shapes model's detections, made by the transformers reference run.

Usage: python3 tests/reference/make_eval_fixtures.py [--shared ../shared]
"""
import argparse
import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "eval")


def r3(v):
    return round(float(v), 3)


def jitter_results(gt, rng, tie_every=5):
    """Detections made from ground truth: keep ~85%, jitter, relabel some, add false positives."""
    images = gt["images"]
    cats = [c["id"] for c in gt["categories"]]
    by_id = {im["id"]: im for im in images}
    res = []
    for a in gt["annotations"]:
        if rng.random() < 0.15:
            continue  # missed
        x, y, w, h = a["bbox"]
        s = 0.25 if rng.random() < 0.3 else 0.08  # some far off, most close
        nx = x + rng.gauss(0, s) * w
        ny = y + rng.gauss(0, s) * h
        nw = max(0.5, w * (1 + rng.gauss(0, s)))
        nh = max(0.5, h * (1 + rng.gauss(0, s)))
        cat = a["category_id"] if rng.random() > 0.07 else rng.choice(cats)
        score = rng.random()
        if rng.randrange(tie_every) == 0:
            score = round(score, 1)  # ties: pycocotools keeps results-file order (mergesort)
        res.append({"image_id": a["image_id"], "category_id": cat,
                    "bbox": [r3(nx), r3(ny), r3(nw), r3(nh)], "score": r3(score)})
        if rng.random() < 0.1:  # a duplicate detection of the same object
            res.append({"image_id": a["image_id"], "category_id": cat,
                        "bbox": [r3(nx + 2), r3(ny - 1), r3(nw), r3(nh)], "score": r3(rng.random() * 0.5)})
    for _ in range(len(gt["annotations"]) // 4):  # false positives of every size
        im = rng.choice(images)
        W, H = im["width"], im["height"]
        w = rng.choice([rng.uniform(4, 30), rng.uniform(30, 100), rng.uniform(100, W * 0.8)])
        h = w * rng.uniform(0.5, 2)
        res.append({"image_id": im["id"], "category_id": rng.choice(cats),
                    "bbox": [r3(rng.uniform(0, W - 1)), r3(rng.uniform(0, H - 1)), r3(w), r3(h)],
                    "score": r3(rng.random() * 0.7)})
    # One image-category cell with 130 detections: only the best 100 count (maxDets).
    a = gt["annotations"][0]
    im = by_id[a["image_id"]]
    for i in range(130):
        x, y, w, h = a["bbox"]
        res.append({"image_id": a["image_id"], "category_id": a["category_id"],
                    "bbox": [r3(x + rng.uniform(-w, w)), r3(y + rng.uniform(-h, h)), r3(w), r3(h)],
                    "score": r3(rng.random())})
    rng.shuffle(res)
    return res


def box(rng, size):
    side = {"small": rng.uniform(6, 30), "medium": rng.uniform(34, 90), "large": rng.uniform(100, 300)}[size]
    return [r3(rng.uniform(0, 300)), r3(rng.uniform(0, 300)), r3(side), r3(side * rng.uniform(0.6, 1.6))]


def hand_gt(rng, n_images, cat_ids, gt_cats, empty_gt_images, with_id0):
    images = [{"id": 10 + i, "file_name": f"img_{i}.jpg", "width": 640, "height": 640} for i in range(n_images)]
    anns = []
    next_id = 0 if with_id0 else 1
    for im in images:
        if im["id"] in empty_gt_images:
            continue
        for _ in range(rng.randrange(1, 7)):
            b = box(rng, rng.choice(["small", "medium", "large"]))
            crowd = 1 if rng.random() < 0.1 else 0
            anns.append({"id": next_id, "image_id": im["id"], "category_id": rng.choice(gt_cats),
                         "bbox": b, "area": r3(b[2] * b[3] * rng.uniform(0.6, 1.0)), "iscrowd": crowd})
            next_id += 1
    cats = [{"id": c, "name": f"class_{c}"} for c in cat_ids]
    return {"images": images, "annotations": anns, "categories": cats}


def results_for(gt, rng, no_det_images, extra_cats=()):
    res = []
    cats = [c["id"] for c in gt["categories"]] + list(extra_cats)
    for a in gt["annotations"]:
        if a["image_id"] in no_det_images or rng.random() < 0.2:
            continue
        x, y, w, h = a["bbox"]
        res.append({"image_id": a["image_id"], "category_id": a["category_id"],
                    "bbox": [r3(x + rng.gauss(0, 0.1) * w), r3(y + rng.gauss(0, 0.1) * h), r3(w), r3(h)],
                    "score": r3(rng.random())})
    for im in gt["images"]:
        if im["id"] in no_det_images:
            continue
        for _ in range(rng.randrange(0, 4)):
            res.append({"image_id": im["id"], "category_id": rng.choice(cats),
                        "bbox": box(rng, rng.choice(["small", "medium", "large"])), "score": r3(rng.random())})
    rng.shuffle(res)
    return res


def dump(obj, name):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(path)
    assert size < 1 << 20, f"{path} is {size} bytes; fixtures must stay under 1 MB"
    print(f"wrote {os.path.relpath(path, ROOT)} ({size} bytes)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    cases = []

    for name, data, seed in [("coco_val80_jitter", "coco_val80", 80), ("shapes_val256_jitter", "shapes_val256", 256)]:
        gt_rel = f"../shared/data/{data}/instances.json"
        with open(os.path.join(args.shared, "data", data, "instances.json")) as f:
            gt = json.load(f)
        dump(jitter_results(gt, random.Random(seed)), f"{name}.results.json")
        cases.append({"name": name, "gt": gt_rel, "results": f"tests/golden/eval/{name}.results.json",
                      "needs_shared": True})
    # --limit: only the first 40 images in file order (COCOeval.params.imgIds set to them).
    cases.append({"name": "coco_val80_jitter_first40", "gt": cases[0]["gt"], "results": cases[0]["results"],
                  "needs_shared": True, "limit": 40})

    rng = random.Random(7)
    gt = hand_gt(rng, 12, [1, 2, 3], [1, 2, 3], empty_gt_images={12, 15, 19}, with_id0=True)
    dump(gt, "empty_images.gt.json")
    # 13 and 17: ground truth, no detections; 15: neither; 12, 19: detections, no ground truth.
    dump(results_for(gt, rng, no_det_images={13, 15, 17}), "empty_images.results.json")
    cases.append({"name": "empty_images", "gt": "tests/golden/eval/empty_images.gt.json",
                  "results": "tests/golden/eval/empty_images.results.json", "needs_shared": False})

    rng = random.Random(11)
    gt = hand_gt(rng, 10, [1, 2, 3, 4, 5, 6], [1, 2, 3, 5], empty_gt_images=set(), with_id0=False)
    dump(gt, "no_gt_classes.gt.json")
    dump(results_for(gt, rng, no_det_images=set(), extra_cats=(4, 6, 4, 6, 99)), "no_gt_classes.results.json")
    cases.append({"name": "no_gt_classes", "gt": "tests/golden/eval/no_gt_classes.gt.json",
                  "results": "tests/golden/eval/no_gt_classes.results.json", "needs_shared": False})

    # Produced by the transformers reference run (tests/reference/, the lead's); optional here.
    cases.append({"name": "shapes_r18vd", "gt": "../shared/data/shapes_val256/instances.json",
                  "results": "tests/golden/shapes_r18vd/detections_shapes_val256.json",
                  "needs_shared": True, "optional": True})
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)
        f.write("\n")
    print("wrote tests/golden/eval/cases.json")


if __name__ == "__main__":
    main()
