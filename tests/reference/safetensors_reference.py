#!/usr/bin/env python3
"""Prints reference facts about ../shared/models/rtdetr_v2_tiny_shapes/model.safetensors read with
the official `safetensors` package; tests/unit/test_safetensors.cpp embeds them
(test SafetensorsShared.MatchesPythonSafetensors). Run: python3 tests/reference/safetensors_reference.py"""
import pathlib

import numpy as np
from safetensors.numpy import load_file

root = pathlib.Path(__file__).resolve().parents[2]
d = load_file(root.parent / "shared/models/rtdetr_v2_tiny_shapes/model.safetensors")
print("tensors", len(d))
for k in ["model.decoder.layers.0.encoder_attn.n_points_scale", "model.enc_score_head.bias",
          "model.backbone.model.embedder.embedder.0.convolution.weight"]:
    a = d[k]
    print(k, a.dtype, a.shape, "sum(fp64) %.10g" % a.astype(np.float64).sum(),
          "first3", a.reshape(-1)[:3].astype(np.float32).tolist())
print("num_batches_tracked", int(d["model.decoder_input_proj.0.1.num_batches_tracked"]))
