#!/usr/bin/env python3
"""Runs pycocotools' COCOeval (bbox) on every case of tests/golden/eval/cases.json and writes
<out>/<name>.expected.json: the 12 COCOeval.stats and per-class AP@[.50:.95] and AP@.50 (mean of
precision[:, :, k, area=all, maxDets=100] entries > -1; -1 when the class has no ground truth).
A case with "limit": N evaluates the first N images of the ground truth's "images" list only.

Usage: python3 tests/reference/pycocotools_expected.py [--out tests/golden/eval] [--shared ../shared]
       python3 tests/reference/pycocotools_expected.py --check   (recompute into a temp dir and
       compare with the committed files; exit 1 on any difference > 1e-12)
"""
import argparse
import contextlib
import io
import json
import os
import sys
import tempfile

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "eval")


def resolve(rel, shared):
    if rel.startswith("../shared/"):
        return os.path.join(shared, rel[len("../shared/"):])
    return os.path.join(ROOT, rel)


def evaluate(gt_path, res_path, limit=None):
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        gt = COCO(gt_path)
        with open(res_path) as f:
            results = json.load(f)
        dt = gt.loadRes(results)
        E = COCOeval(gt, dt, "bbox")
        if limit:  # the first `limit` images in file order, as detforge eval --limit picks them
            E.params.imgIds = sorted(img["id"] for img in gt.dataset["images"][:limit])
        E.evaluate()
        E.accumulate()
        E.summarize()
    prec = E.eval["precision"]  # [T, R, K, A, M]
    per_class = []
    for k, cat_id in enumerate(E.params.catIds):
        out = {"category_id": int(cat_id), "name": gt.cats[cat_id]["name"]}
        for key, p in (("ap50_95", prec[:, :, k, 0, -1]), ("ap50", prec[0, :, k, 0, -1])):
            v = p[p > -1]
            out[key] = float(np.mean(v)) if v.size else -1.0
        per_class.append(out)
    return {"stats": [float(s) for s in E.stats], "per_class": per_class}


def run(out_dir, shared):
    with open(os.path.join(GOLDEN, "cases.json")) as f:
        cases = json.load(f)["cases"]
    written = []
    for c in cases:
        gt_path, res_path = resolve(c["gt"], shared), resolve(c["results"], shared)
        if not os.path.exists(res_path) and c.get("optional"):
            print(f"skip {c['name']}: {c['results']} is absent")
            continue
        if not os.path.exists(gt_path):
            sys.exit(f"error: case {c['name']}: ground truth {gt_path} is absent")
        exp = {"case": c["name"], "gt": c["gt"], "results": c["results"]}
        if c.get("limit"):
            exp["limit"] = c["limit"]
        exp.update(evaluate(gt_path, res_path, c.get("limit")))
        path = os.path.join(out_dir, f"{c['name']}.expected.json")
        with open(path, "w") as f:
            json.dump(exp, f, indent=1)
            f.write("\n")
        written.append(os.path.basename(path))
        print(f"{c['name']}: AP {exp['stats'][0]:.6f} AP50 {exp['stats'][1]:.6f} -> {path}")
    return written


def close(a, b, tol):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= tol
    return a == b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=GOLDEN)
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if not args.check:
        run(args.out, args.shared)
        return
    with tempfile.TemporaryDirectory() as tmp:
        bad = 0
        for name in run(tmp, args.shared):
            committed = os.path.join(GOLDEN, name)
            if not os.path.exists(committed):
                print(f"MISSING {committed}: commit the output of this script")
                bad += 1
                continue
            with open(os.path.join(tmp, name)) as f1, open(committed) as f2:
                if not close(json.load(f1), json.load(f2), 1e-12):
                    print(f"DIFFERS {name}: the committed file is not what pycocotools computes")
                    bad += 1
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
