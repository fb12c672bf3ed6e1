#!/usr/bin/env python3
"""Reference checksums for detforge's image decode, PIL-exact resize and RT-DETR preprocessing.

Runs PIL exactly as transformers' slow (PIL-backend) RTDetrImageProcessor path does:
Image.open -> ImageOps.exif_transpose -> convert("RGB") -> resize((640, 640), BILINEAR,
reducing_gap=None), on the 80 images of ../shared/data/coco_val80/images, and records per file the
original size, the FNV-1a 64 of the decoded RGB bytes and of the resized bytes (so decode and
resize errors can be told apart). Also writes small decode fixtures (EXIF orientations, PNG
colour types, gray and CMYK JPEG) under tests/golden/resize/fixtures/ with PIL's decode checksum,
resize checksums at odd sizes (up and down), and, when transformers is importable, FNV of the
float32 pixel_values (NHWC) that RTDetrImageProcessor(Pil) gives.

Usage (from the repository root):  /opt/refenv/bin/python tests/reference/make_resize_checksums.py
"""
import io
import json
import os
import struct
import sys
import zlib

import numpy as np
import PIL
from PIL import Image, ImageOps

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COCO = os.path.join(ROOT, "..", "shared", "data", "coco_val80", "images")
OUT_DIR = os.path.join(ROOT, "tests", "golden", "resize")
FIX_DIR = os.path.join(OUT_DIR, "fixtures")


def fnv_fast(data: bytes) -> str:
    """FNV-1a 64 (src/core/checksum.h): offset basis 0xcbf29ce484222325, prime 0x100000001b3."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def load_pil(path_or_file):
    img = Image.open(path_or_file)
    img = ImageOps.exif_transpose(img)
    return img.convert("RGB")


def write_png_raw(path, w, h, color_type, bit_depth, rows: bytes):
    """Minimal PNG writer for formats PIL cannot save (16-bit RGB)."""
    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def write_png_adam7(path, rgb):
    """Interlaced (Adam7) 8-bit RGB PNG: PIL reads these but cannot write them."""
    h, w, _ = rgb.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = rgb[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            raw += b"".join(b"\x00" + sub[y].tobytes() for y in range(sub.shape[0]))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def exif_app1(orientation, big_endian):
    e = ">" if big_endian else "<"
    tiff = (b"MM\x00*" if big_endian else b"II*\x00") + struct.pack(e + "I", 8)
    tiff += struct.pack(e + "H", 1) + struct.pack(e + "HHI", 0x0112, 3, 1) + struct.pack(e + "HH", orientation, 0)
    tiff += struct.pack(e + "I", 0)
    payload = b"Exif\x00\x00" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def make_fixtures():
    os.makedirs(FIX_DIR, exist_ok=True)
    rng = np.random.default_rng(7)
    base = Image.fromarray(rng.integers(0, 256, (7, 12, 3), dtype=np.uint8), "RGB")
    made = []

    def save(name, fn):
        path = os.path.join(FIX_DIR, name)
        fn(path)
        made.append(name)

    buf = io.BytesIO()
    base.save(buf, "JPEG", quality=95)
    plain = buf.getvalue()
    for o in range(1, 9):
        ex = Image.Exif()
        ex[0x0112] = o
        save(f"exif_le_{o}.jpg", lambda p, ex=ex: base.save(p, "JPEG", quality=95, exif=ex))
    # Big-endian TIFF ("MM"), hand-built, inserted right after SOI.
    for o in (3, 6, 8):
        save(f"exif_be_{o}.jpg", lambda p, o=o: open(p, "wb").write(plain[:2] + exif_app1(o, True) + plain[2:]))
    # An APP1 whose IFD offset points past the end: PIL ignores it (orientation 1).
    bad = bytearray(exif_app1(6, False))
    bad[14:18] = struct.pack("<I", 0x7FFF)
    save("exif_garbled.jpg", lambda p: open(p, "wb").write(plain[:2] + bytes(bad) + plain[2:]))
    save("gray.jpg", lambda p: base.convert("L").save(p, "JPEG", quality=90))
    save("cmyk.jpg", lambda p: base.convert("CMYK").save(p, "JPEG", quality=90))
    save("sub420.jpg", lambda p: base.resize((37, 23)).save(p, "JPEG", quality=80, subsampling=2))
    save("sub422.jpg", lambda p: base.resize((37, 23)).save(p, "JPEG", quality=85, subsampling=1))
    save("progressive.jpg", lambda p: base.resize((37, 23)).save(p, "JPEG", quality=80, progressive=True))
    save("gray8.png", lambda p: base.convert("L").save(p))
    save("gray1.png", lambda p: base.convert("1").save(p))
    rgba = base.convert("RGBA")
    rgba.putalpha(Image.fromarray(rng.integers(0, 256, (7, 12), dtype=np.uint8), "L"))
    rgba.save(os.path.join(FIX_DIR, "rgba.png"))
    made.append("rgba.png")
    la = base.convert("LA")
    la.save(os.path.join(FIX_DIR, "la.png"))
    made.append("la.png")
    pal = base.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    pal.save(os.path.join(FIX_DIR, "palette4_trns.png"), bits=4, transparency=3)
    made.append("palette4_trns.png")
    pal8 = base.convert("P", palette=Image.Palette.ADAPTIVE, colors=200)
    pal8.save(os.path.join(FIX_DIR, "palette8.png"))
    made.append("palette8.png")
    g16 = rng.integers(0, 700, (7, 12), dtype=np.uint16)
    Image.fromarray(g16).save(os.path.join(FIX_DIR, "gray16.png"))
    made.append("gray16.png")
    rgb16 = rng.integers(0, 65536, (7, 12, 3), dtype=np.uint16).astype(">u2")
    rows = b"".join(b"\x00" + rgb16[y].tobytes() for y in range(7))
    save("rgb16.png", lambda p: write_png_raw(p, 12, 7, 2, 16, rows))
    save("adam7.png", lambda p: write_png_adam7(p, rng.integers(0, 256, (11, 13, 3), dtype=np.uint8)))
    ex = Image.Exif()
    ex[0x0112] = 6
    save("exif_6.png", lambda p: base.save(p, "PNG", exif=ex))

    out = {}
    for name in sorted(set(made)):
        img = load_pil(os.path.join(FIX_DIR, name))
        raw = img.tobytes()
        out[name] = {"width": img.width, "height": img.height, "decode_fnv": fnv_fast(raw)}
    return out


def pixel_values_fnv(paths):
    """FNV of RTDetrImageProcessor(Pil) float32 pixel_values transposed to NHWC, two configs."""
    try:
        from transformers.models.rt_detr.image_processing_pil_rt_detr import RTDetrImageProcessorPil
    except Exception as e:  # transformers absent: skip this part
        print("transformers not importable, skipping pixel_values:", e, file=sys.stderr)
        return None
    cfg_path = os.path.join(ROOT, "..", "shared", "models", "rtdetr_v2_r18vd_shapes", "preprocessor_config.json")
    cfg = json.load(open(cfg_path))
    res = {"transformers": __import__("transformers").__version__, "configs": {}}
    variants = {
        "shapes": dict(cfg),
        "normalize": dict(cfg, do_normalize=True),
        "normalize_480x320": dict(cfg, do_normalize=True, size={"height": 320, "width": 480}),
    }
    for vname, c in variants.items():
        kwargs = {k: c[k] for k in ("do_resize", "size", "resample", "do_rescale", "rescale_factor",
                                     "do_normalize", "image_mean", "image_std", "do_pad")}
        proc = RTDetrImageProcessorPil(**kwargs)
        entry = {"config": kwargs, "images": {}}
        for p in paths:
            img = load_pil(p)
            pv = proc(images=img, return_tensors="np")["pixel_values"][0]  # [3, H, W] float32
            assert pv.dtype == np.float32
            nhwc = np.ascontiguousarray(pv.transpose(1, 2, 0))
            entry["images"][os.path.basename(p)] = {"fnv": fnv_fast(nhwc.tobytes()),
                                                    "first": [float(v) for v in nhwc.reshape(-1)[:6]]}
        res["configs"][vname] = entry
    return res


def main():
    names = sorted(f for f in os.listdir(COCO) if f.lower().endswith((".jpg", ".jpeg", ".png")))
    assert len(names) == 80, len(names)
    images = {}
    # Both pass orders of Pillow 13: (620, 120) and (1000, 50) run the vertical pass first.
    odd_sizes = [(333, 251), (1000, 50), (17, 900), (620, 120), (640, 480)]
    odd = {}
    for i, name in enumerate(names):
        img = load_pil(os.path.join(COCO, name))
        r = img.resize((640, 640), Image.BILINEAR, reducing_gap=None)
        images[name] = {"width": img.width, "height": img.height,
                        "decode_fnv": fnv_fast(img.tobytes()), "resize_fnv": fnv_fast(r.tobytes())}
        if i < 4:
            odd[name] = {f"{w}x{h}": fnv_fast(img.resize((w, h), Image.BILINEAR, reducing_gap=None).tobytes())
                         for w, h in odd_sizes}
        print(f"{i + 1}/80 {name}", file=sys.stderr)
    doc = {
        "generator": "tests/reference/make_resize_checksums.py",
        "pillow": PIL.__version__,
        "libjpeg_turbo": __import__("PIL.features", fromlist=["x"]).version("libjpeg_turbo"),
        "checksum": "FNV-1a 64 of the packed RGB bytes (row-major, 3 bytes a pixel)",
        "resize": "Image.resize((640, 640), Image.BILINEAR, reducing_gap=None)",
        "images": images,
        "odd_sizes": odd,
        "fixtures": make_fixtures(),
        "pixel_values": pixel_values_fnv([os.path.join(COCO, n) for n in names[:3]]),
    }
    path = os.path.join(OUT_DIR, "coco_val80_640.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", path, file=sys.stderr)


if __name__ == "__main__":
    main()
