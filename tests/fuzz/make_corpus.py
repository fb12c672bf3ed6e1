#!/usr/bin/env python3
"""Writes the fuzz seed corpora: tiny valid safetensors files (made by the official safetensors
package) and tiny valid bundles (format v1, see src/io/bundle_file.h).
Run: python3 tests/fuzz/make_corpus.py"""
import json
import pathlib
import struct

import numpy as np
from safetensors.numpy import save

here = pathlib.Path(__file__).resolve().parent
st = here / "corpus" / "safetensors"
bd = here / "corpus" / "bundle"
st.mkdir(parents=True, exist_ok=True)
bd.mkdir(parents=True, exist_ok=True)

rng = np.random.default_rng(0)
(st / "f32_f16_i64.safetensors").write_bytes(save({
    "conv.weight": rng.standard_normal((2, 3, 1, 1)).astype(np.float32),
    "ln.bias": rng.standard_normal(4).astype(np.float16),
    "bn.num_batches_tracked": np.array(7, dtype=np.int64),
}, metadata={"format": "pt"}))
(st / "u8_bool_f64.safetensors").write_bytes(save({
    "mask": np.array([True, False, True]),
    "bytes": np.arange(5, dtype=np.uint8),
    "d": np.array([1.5, -2.0]),
    "empty": np.zeros((0, 3), np.float32),
}))
(st / "empty.safetensors").write_bytes(save({}))
# bf16 by hand (numpy has no bfloat16): the top halves of fp32 values
hdr = json.dumps({"b": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}).encode()
hdr += b" " * (-(8 + len(hdr)) % 8)
(st / "bf16.safetensors").write_bytes(struct.pack("<Q", len(hdr)) + hdr + bytes([0x80, 0x3F, 0x00, 0xC0]))


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def bundle(header, sections):
    header = dict(header, format_version=1)
    table = [{"name": n, "offset": 0, "size": len(b), "checksum": fnv1a64(b)} for n, b in sections]
    while True:  # absolute offsets depend on the header length: iterate until stable
        header["sections"] = table
        text = json.dumps(header, separators=(",", ":")).encode()
        pos = (24 + len(text) + 63) // 64 * 64
        changed = False
        for t, (_, b) in zip(table, sections):
            changed |= t["offset"] != pos
            t["offset"] = pos
            pos = (pos + len(b) + 63) // 64 * 64
        if not changed:
            break
    out = bytearray(b"DETFORGE" + struct.pack("<IIQ", 1, 0, len(text)) + text)
    for t, (_, b) in zip(table, sections):
        out += b"\0" * (t["offset"] - len(out)) + b
    return bytes(out)


(bd / "two_sections.bundle").write_bytes(bundle(
    {"family": "rt_detr_v2", "precision": "fp32", "input_size": [64, 64], "labels": ["a", "b"]},
    [("graph", b'{"ops":[]}'), ("weights", bytes(range(200)))]))
(bd / "empty.bundle").write_bytes(bundle({}, []))
(bd / "zero_section.bundle").write_bytes(bundle({"task": "detect"}, [("scales", b""), ("w", b"\1\2\3")]))
print("wrote", sorted(p.name for p in st.iterdir()), sorted(p.name for p in bd.iterdir()))
