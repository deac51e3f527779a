#!/usr/bin/env python3
"""Fixture for Lumen's "Only masked" inpainting (A1111's inpaint_full_res), made
with diffusers: its inpaint pipelines with padding_mask_crop (the mask's box,
padded and grown to the image's aspect, cropped and resized to the image's size
with PIL's Lanczos, inpainted, resized back and pasted with apply_overlay).

Uses tests/ref/gen_inpaint.py's helpers and the 9-channel conv_in it wrote
(ref_inpaint.safetensors beside this script or in tests/ref/inpaint/), on the
tiny SD 1.x folder.  Run on the GPU machine (CPU is used):
    python3 tests/ref/gen_inpaint_crop.py OUTDIR
Writes OUTDIR/ref_inpaint_crop.safetensors: the masks, get_crop_region's boxes
for several masks and paddings, and for each case the draws and the 8-bit
result (as f32 / 255).
"""
import os
import sys

import numpy as np
import PIL.Image
import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_inpaint as G  # noqa: E402
from diffusers import (EulerDiscreteScheduler, StableDiffusionInpaintPipeline,  # noqa: E402
                       StableDiffusionPipeline, UNet2DConditionModel)
from diffusers.image_processor import VaeImageProcessor  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "inpaint")
torch.set_grad_enabled(False)


def conv_in():
    for d in (HERE, os.path.join(HERE, "inpaint")):
        p = os.path.join(d, "ref_inpaint.safetensors")
        if os.path.exists(p):
            return load_file(p)["sd1.conv_in"]
    sys.exit("gen_inpaint_crop.py: no ref_inpaint.safetensors (gen_inpaint.py writes it)")


def masks():
    S = G.SIZE
    a = np.zeros((S, S), np.uint8)
    a[12:20, 13:21] = 255          # a small square inside: the box 8x8 padded
    b = np.zeros((S, S), np.uint8)
    b[1:6, 10:26] = 255            # wide, at the top: grown downwards, pushed inside
    b[3, 9] = 90
    c = np.zeros((S, S), np.uint8)
    c[20:31, 28:31] = 200          # tall, at the right edge
    return {"a": a, "b": b, "c": c}


def main():
    os.makedirs(OUT, exist_ok=True)
    G.patch_randn()
    init, _ = G.make_inputs()
    M = masks()
    R = {"init": G.pil_tensor(init)}
    boxes = []
    for k in sorted(M):
        R["mask_" + k] = torch.from_numpy(M[k].astype(np.float32) / 255.0)[None]
        for pad in (0, 2, 5):
            box = VaeImageProcessor.get_crop_region(PIL.Image.fromarray(M[k], "L"), G.SIZE, G.SIZE, pad=pad)
            boxes.append([ord(k) - ord("a"), pad] + [int(v) for v in box])
    R["boxes"] = torch.tensor(boxes, dtype=torch.float32)   # mask index, pad, x1, y1, x2, y2

    sd = StableDiffusionPipeline.from_pretrained(G.find("sd1"), torch_dtype=torch.float32,
                                                 safety_checker=None, requires_safety_checker=False)
    cfg = dict(sd.unet.config)
    cfg["in_channels"] = 9
    u9 = UNet2DConditionModel.from_config(cfg)
    st = {k: v.clone() for k, v in sd.unet.state_dict().items()}
    st["conv_in.weight"] = conv_in().float()
    u9.load_state_dict(st)
    u9 = u9.float().eval()
    CASES = [
        # name, unet, strength, mask, padding
        ("sd9_crop", u9, 1.0, "a", 3),
        ("sd4_crop", sd.unet, 0.75, "b", 2),
    ]
    for name, unet, strength, mk, pad in CASES:
        comps = dict(sd.components)
        comps["unet"] = unet
        p = StableDiffusionInpaintPipeline(**comps)
        p.scheduler = EulerDiscreteScheduler.from_config(dict(sd.scheduler.config))
        p.set_progress_bar_config(disable=True)
        G.take_draws()
        out = p(G.PROMPT, image=init, mask_image=PIL.Image.fromarray(M[mk], "L"), negative_prompt=G.NEGATIVE,
                height=G.SIZE, width=G.SIZE, strength=strength, num_inference_steps=G.STEPS,
                guidance_scale=G.CFG, padding_mask_crop=pad, output_type="pil")
        d = G.take_draws()
        names = (["init_sample"] if unet is sd.unet or strength < 1.0 else []) + ["noise", "masked_sample"]
        if len(d) != len(names):
            print("gen_inpaint_crop.py: %s: expected draws %s, got %d" % (name, names, len(d)))
            names = ["draw%d" % i for i in range(len(d))]
        for k, t in zip(names, d):
            R["%s.%s" % (name, k)] = t[0]
        R[name + ".image"] = G.pil_tensor(out.images[0])
    save_file({k: v.detach().float().contiguous() for k, v in R.items()},
              os.path.join(OUT, "ref_inpaint_crop.safetensors"))
    print("wrote", OUT, sorted(R))


if __name__ == "__main__":
    main()
