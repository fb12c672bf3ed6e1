#!/usr/bin/env python3
"""Dump named intermediate tensors of HF RTDetrV2ForObjectDetection (fp32, batch 1) as .npy files.

For debugging the C++ pipeline layer by layer. Layouts: feature maps NHWC without the batch, i.e.
[H,W,C]; token tensors [L,C]; vectors [L]. A manifest.json lists every file with its shape and what
it is. Captured with forward hooks, so it is the model's own computation, not a re-implementation.

  /opt/refenv/bin/python tests/reference/dump_intermediates.py \
      --model ../shared/models/rtdetr_v2_r18vd_shapes \
      --image ../shared/data/coco_val80/images/000000005001.jpg --out /tmp/refdump_r18vd
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def to_layout(t: torch.Tensor) -> np.ndarray:
    """NCHW → HWC; [1,L,C] → [L,C]; a leading batch of 1 is dropped everywhere."""
    a = t.detach().cpu()
    if a.dim() == 4:
        a = a.permute(0, 2, 3, 1)
    if a.dim() >= 2 and a.shape[0] == 1:
        a = a[0]
    return a.contiguous().numpy()


class Recorder:
    def __init__(self):
        self.t = {}  # name -> (tensor, description)
        self.hooks = []

    def put(self, name, tensor, what):
        if name in self.t:
            sys.exit(f"error: tensor {name} captured twice")
        self.t[name] = (tensor.detach(), what)

    def out(self, module, name, what, pick=lambda o: o[0] if isinstance(o, tuple) else o):
        self.hooks.append(module.register_forward_hook(lambda m, i, o: self.put(name, pick(o), what)))

    def inp(self, module, name, what):
        self.hooks.append(module.register_forward_hook(lambda m, i, o: self.put(name, i[0], what)))

    def remove(self):
        for h in self.hooks:
            h.remove()


def register(rec: Recorder, model):
    m = model.model
    bb = m.backbone.model
    rec.out(bb.embedder, "backbone_stem", "stem output after maxpool [H/4,W/4,C]")
    for s, stage in enumerate(bb.encoder.stages):
        rec.out(stage, f"backbone_stage{s}", f"backbone stage {s} output (stage1/2/3 = C3/C4/C5)")
    for i, name in enumerate(("C3", "C4", "C5")):
        rec.out(m.backbone, f"backbone_{name}", f"backbone feature {name} given to the encoder",
                pick=lambda o, i=i: o[i][0])
    for i in range(len(m.encoder_input_proj)):
        rec.out(m.encoder_input_proj[i], f"encoder_input_proj{i}", f"P{i + 3} = BN(conv1x1(C{i + 3}))")
    enc = m.encoder
    aifi_layer = enc.aifi[0].layers[0]
    rec.out(aifi_layer.self_attn, "aifi_self_attn", "AIFI attention output after out_proj, before residual [400,C]")
    rec.out(aifi_layer.self_attn_layer_norm, "aifi_ln1", "AIFI LN1(src + attn) [400,C]")
    rec.out(aifi_layer.mlp, "aifi_ffn", "AIFI fc2(gelu(fc1(x))) before residual [400,C]")
    rec.out(enc.aifi[0], "aifi_out", "AIFI output F5 reshaped back [20,20,C]")
    for i in range(len(enc.lateral_convs)):
        rec.out(enc.lateral_convs[i], f"ccfm_lateral{i}", "L5 (i=0) / L4 (i=1)")
        rec.out(enc.fpn_blocks[i], f"ccfm_fpn{i}", "I4 (i=0) / O3 (i=1)")
        rec.out(enc.downsample_convs[i], f"ccfm_downsample{i}", "3x3 s2 conv of O3 (i=0) / O4 (i=1)")
        rec.out(enc.pan_blocks[i], f"ccfm_pan{i}", "O4 (i=0) / O5 (i=1)")
    for i, name in enumerate(("O3", "O4", "O5")):
        rec.out(enc, f"encoder_{name}", f"hybrid encoder output {name}",
                pick=lambda o, i=i: o.last_hidden_state[i])
    for i in range(len(m.decoder_input_proj)):
        rec.out(m.decoder_input_proj[i], f"decoder_input_proj{i}", f"S{i + 3} = BN(conv1x1(O{i + 3}))")
    rec.inp(m.enc_output, "memory_masked", "memory with invalid-anchor rows zeroed [8400,C]")
    rec.out(m.enc_output, "enc_output", "om = LN(Linear(memory_masked)) [8400,C]")
    rec.out(m.enc_score_head, "enc_scores", "class logits of every token [8400,num_labels]")
    rec.out(m.enc_bbox_head, "enc_bbox_head", "MLP3(om) before adding anchors [8400,4]")
    dec = m.decoder
    rec.hooks.append(dec.register_forward_pre_hook(
        lambda mod, a, kw: (rec.put("memory", kw["encoder_hidden_states"], "unmasked memory [8400,C] (decoder value)"),
                            rec.put("decoder_target", kw["inputs_embeds"], "decoder input = om[topk] [Q,C]"),
                            rec.put("decoder_ref_unact", kw["reference_points"], "coord[topk] (logit space) [Q,4]"),
                            None)[-1],
        with_kwargs=True))
    for li, layer in enumerate(dec.layers):
        p = f"dec{li}_"
        rec.hooks.append(layer.register_forward_pre_hook(
            lambda mod, a, kw, p=p: (rec.put(p + "ref", kw["reference_points"][:, :, 0], "reference boxes in (sigmoid, cxcywh) [Q,4]"),
                                     rec.put(p + "query_pos", kw["object_queries_position_embeddings"], "query_pos_head(ref) [Q,C]"),
                                     None)[-1],
            with_kwargs=True))
        rec.out(layer.self_attn, p + "self_attn", "self-attention after out_proj, before residual [Q,C]")
        rec.out(layer.self_attn_layer_norm, p + "ln_sa", "LN(h + self_attn) [Q,C]")
        ea = layer.encoder_attn
        rec.out(ea.value_proj, p + "value", "value_proj(memory) [8400,C]")
        rec.out(ea.sampling_offsets, p + "sampling_offsets", "raw offsets Linear [Q,heads*levels*points*2]")
        rec.out(ea.attention_weights, p + "attention_logits", "raw attention Linear before softmax [Q,heads*levels*points]")
        rec.out(ea, p + "cross_attn", "MSDeformAttn after output_proj, before residual [Q,C]")
        rec.out(layer.encoder_attn_layer_norm, p + "ln_ca", "LN(h + cross_attn) [Q,C]")
        rec.out(layer.mlp, p + "ffn", "fc2(relu(fc1(h))) before residual [Q,C]")
        rec.out(layer, p + "hidden", "decoder layer output [Q,C]")
        rec.out(dec.bbox_embed[li], p + "bbox_delta", "bbox_embed(h) before + inverse_sigmoid(ref) [Q,4]")
        rec.out(dec.class_embed[li], p + "logits", "class_embed(h) [Q,num_labels]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--out", required=True, help="output folder for the .npy files")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()

    device = common.setup_device(args.device)
    model = common.load_model(args.model, device)
    proc = common.load_processor(args.model)
    img = common.open_image(args.image)
    pv = common.preprocess(proc, [img])

    rec = Recorder()
    register(rec, model)
    with torch.no_grad():
        out = model(pixel_values=pv.to(device))
    rec.remove()

    q = model.config.num_queries
    scores = rec.t["enc_scores"][0]
    _, topk = torch.topk(scores.max(-1).values, q, dim=1)
    if not torch.equal(scores[0][topk[0]], out.enc_topk_logits[0]):
        sys.exit("error: recomputed top-k does not reproduce enc_topk_logits")
    side = pv.shape[-1]
    shapes = [(side // s, side // s) for s in model.config.feat_strides]
    anchors, valid = model.model.generate_anchors(tuple(shapes), device=device, dtype=torch.float32)
    rec.put("pixel_values", pv, "preprocessed input, HWC float32 RGB in [0,1]")
    rec.put("anchors", anchors, "anchor logits [8400,4]; invalid rows = float32 max")
    rec.put("valid_mask", valid[..., 0].to(torch.uint8), "1 where the anchor is valid [8400]")
    rec.put("enc_coord_logits", out.enc_outputs_coord_logits, "enc_bbox_head(om) + anchors [8400,4]")
    rec.put("topk_indices", topk.to(torch.int64), "top-k token indices, descending max score [Q]")
    rec.put("enc_topk_logits", out.enc_topk_logits, "enc_scores[topk] [Q,num_labels]")
    rec.put("logits", out.logits, "final logits [Q,num_labels]")
    rec.put("pred_boxes", out.pred_boxes, "final boxes cxcywh normalised [Q,4]")

    os.makedirs(args.out, exist_ok=True)
    manifest = {"model": os.path.abspath(args.model), "image": os.path.abspath(args.image),
                "original_size_wh": list(img.size), "device": args.device, "versions": common.versions(),
                "command": common.command_line(), "tensors": {}}
    for name, (t, what) in rec.t.items():
        a = to_layout(t)
        np.save(os.path.join(args.out, name + ".npy"), a)
        manifest["tensors"][name] = {"shape": list(a.shape), "dtype": str(a.dtype), "what": what}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(rec.t)} tensors to {args.out}")


if __name__ == "__main__":
    main()
