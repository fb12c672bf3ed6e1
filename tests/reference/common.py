"""Shared helpers for the transformers reference scripts (goldens, AP reference, intermediate dumps).

Runs unchanged on the CPU dev machine (/opt/refenv/bin/python) and on the GPU machine (python3 with
torch+CUDA, no pycocotools, maybe no torchvision). Nothing here imports pycocotools.
"""
import json
import os
import platform
import shlex
import sys

import numpy as np
import torch
from PIL import Image, ImageOps

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_SHARED = os.path.abspath(os.path.join(REPO_ROOT, "..", "shared"))

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data: bytes, h: int = FNV_OFFSET) -> int:
    """FNV-1a 64-bit, the same function as src/core/checksum.h (fnv1a64)."""
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


def hex64(v: int) -> str:
    return "%016x" % v


def pixel_checksum(pixels_hwc: np.ndarray) -> str:
    """Checksum of an HWC float32 tensor as little-endian bytes (what the C++ preprocessor emits)."""
    a = np.ascontiguousarray(pixels_hwc, dtype="<f4")
    return hex64(fnv1a64(a.tobytes()))


def setup_device(name: str) -> torch.device:
    """cuda: TF32 off, because on Hopper cuDNN convs default to TF32 and break 1e-4 agreement (spec §7)."""
    if name == "cuda":
        if not torch.cuda.is_available():
            sys.exit("error: --device cuda requested but torch.cuda.is_available() is False")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        return torch.device("cuda")
    if name != "cpu":
        sys.exit(f"error: unknown --device {name!r} (want cpu or cuda)")
    return torch.device("cpu")


def load_processor(model_dir: str):
    """The PIL-backed (slow) RT-DETR image processor.

    In transformers 5.x `RTDetrImageProcessor` is the torchvision backend (the former Fast class; it
    falls back to PIL only when torchvision is missing) and `RTDetrImageProcessorPil` is the PIL one.
    The reference must resize with PIL (spec §3.0), so pin the PIL class explicitly.
    """
    try:
        from transformers.models.rt_detr.image_processing_pil_rt_detr import RTDetrImageProcessorPil as cls
    except ImportError:  # transformers 4.x: the slow class is RTDetrImageProcessor itself
        from transformers import RTDetrImageProcessor as cls
    proc = cls.from_pretrained(model_dir)
    name = type(proc).__name__
    if "Fast" in name:
        sys.exit(f"error: got fast image processor {name}; the reference needs the PIL one")
    return proc


def load_model(model_dir: str, device: torch.device):
    from transformers import RTDetrV2ForObjectDetection

    # Checkpoints are stored fp16; the reference runs fp32.
    model = RTDetrV2ForObjectDetection.from_pretrained(model_dir, torch_dtype=torch.float32)
    model = model.to(device).eval()
    dt = next(model.parameters()).dtype
    if dt != torch.float32:
        sys.exit(f"error: model loaded as {dt}, want float32")
    return model


def open_image(path: str) -> Image.Image:
    img = Image.open(path)
    img = ImageOps.exif_transpose(img)
    return img.convert("RGB")


def preprocess(proc, images):
    """images: list of PIL RGB images → float32 NCHW tensor (each image resized independently)."""
    out = proc(images=images, return_tensors="pt")
    pv = out["pixel_values"]
    if pv.dtype != torch.float32:
        sys.exit(f"error: pixel_values dtype {pv.dtype}, want float32")
    return pv


def sorted_images(folder: str, n=None):
    names = sorted(f for f in os.listdir(folder) if f.lower().endswith((".jpg", ".jpeg", ".png")))
    return names if n is None else names[:n]


def versions() -> dict:
    import transformers

    v = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "pillow": Image.__version__,
    }
    if torch.cuda.is_available():
        v["cuda"] = torch.version.cuda
        v["gpu"] = torch.cuda.get_device_name(0)
    return v


def command_line() -> str:
    return " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], REPO_ROOT)] + sys.argv[1:])


def f32list(t) -> list:
    """Tensor/array → nested lists of Python floats holding the exact float32 values (repr round-trips)."""
    a = t.detach().float().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, np.float32)
    return a.astype(np.float64).tolist()


class EncoderSelectionHook:
    """Captures query-selection tensors with forward hooks.

    enc_output's input is the *masked* memory (invalid anchors zeroed), enc_score_head's output the
    class scores over all tokens. topk is recomputed exactly as RTDetrV2Model.forward does.
    """

    def __init__(self, model):
        self.scores = None
        self.masked_memory = None
        self.hs = [
            model.model.enc_score_head.register_forward_hook(self._on_scores),
            model.model.enc_output.register_forward_hook(self._on_enc_output),
        ]

    def _on_scores(self, mod, inp, out):
        self.scores = out.detach()

    def _on_enc_output(self, mod, inp, out):
        self.masked_memory = inp[0].detach()

    def topk(self, num_queries: int):
        return torch.topk(self.scores.max(-1).values, num_queries, dim=1)

    def remove(self):
        for h in self.hs:
            h.remove()


def valid_mask(model, spatial_shapes, device) -> torch.Tensor:
    """[L] bool: the model's own anchor validity mask (HF generate_anchors)."""
    _, vm = model.model.generate_anchors(tuple(spatial_shapes), device=device, dtype=torch.float32)
    return vm.reshape(-1).bool()


def write_json(path: str, obj: dict):
    """Top-level keys one per line; each element of a top-level list on its own compact line.

    Diffs stay readable per image while the file stays small (no per-float indentation).
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    c = lambda v: json.dumps(v, separators=(",", ":"))
    lines = []
    for k, v in obj.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            body = ",\n".join("  " + c(e) for e in v)
            lines.append(f" {c(k)}:[\n{body}\n ]")
        else:
            lines.append(f" {c(k)}:{c(v)}")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    os.replace(tmp, path)
