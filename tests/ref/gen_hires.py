#!/usr/bin/env python3
"""Fixture for Lumen's hires fix (issue 37), made with diffusers.

The reference is the composition A1111's hires fix is: txt2img at the base
size (output_type="latent"), the latents upscaled with
torch.nn.functional.interpolate as A1111's "Latent" modes do ("Latent" =
bilinear without antialias, "Latent (nearest)" = nearest), then img2img at the
target size from those latents (diffusers' img2img takes 4-channel latents as
its image and skips the VAE encoder) with its own steps and strength.

Input: the tiny SD 1.x folder tests/ref/diffusion/sd1 (made by gen_diffusion.py),
found beside this script (tests/ref/diffusion/sd1 or ./sd1).
Run on the GPU machine (CPU is used; PyTorch, transformers; diffusers' source
on PYTHONPATH):
    python3 tests/ref/gen_hires.py OUTDIR
Writes OUTDIR/ref_hires.safetensors and OUTDIR/hires.json.  Every random draw
diffusers makes (randn_tensor) comes from one seeded generator and is
recorded, so Lumen replays them through its noise hook.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import diffusers
from diffusers import (DPMSolverMultistepScheduler, StableDiffusionImg2ImgPipeline,
                       StableDiffusionPipeline)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True   # no __pycache__ beside the fixtures
import tiny_pipes  # noqa: E402  (the prompt pair, the noise recorder, the tiny folders)
from tiny_pipes import NEGATIVE, PROMPT  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "diffusion")
torch.set_grad_enabled(False)
torch.manual_seed(0)

CASES = [
    # name, A1111 mode, torch mode, scale, hires steps, denoise
    ("nearest", "Latent (nearest)", "nearest", 2.0, 4, 0.5),
    ("bilinear", "Latent", "bilinear", 1.5, 6, 0.55),
]

DRAWS = tiny_pipes.Draws(4321)
_randn, patch_randn, take_draws = DRAWS.randn, DRAWS.patch, DRAWS.take


def find_sd1():
    return tiny_pipes.find(HERE, "sd1", "gen_hires.py")


def main():
    os.makedirs(OUT, exist_ok=True)
    patch_randn()
    sd = StableDiffusionPipeline.from_pretrained(find_sd1(), torch_dtype=torch.float32,
                                                 safety_checker=None, requires_safety_checker=False)
    sd.set_progress_bar_config(disable=True)
    cfg = dict(sd.scheduler.config)
    sd.scheduler = DPMSolverMultistepScheduler.from_config(cfg, algorithm_type="dpmsolver++", solver_order=2)
    i2i = StableDiffusionImg2ImgPipeline(**sd.components)
    i2i.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(77)
    R = {}
    meta = {"prompt": PROMPT, "negative": NEGATIVE, "steps": 4, "cfg": 7.0,
            "size": "the latents' (16x16 latents of the tiny VAE of scale 2: 32x32 pixels)",
            "sampler": "dpmpp_2m", "cases": {}, "diffusers": diffusers.__version__,
            "torch": torch.__version__}
    lat = torch.randn(1, 4, 16, 16, generator=g)
    R["latents"] = lat
    take_draws()
    base = sd(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=4, guidance_scale=7.0, height=32,
              width=32, latents=lat.clone(), output_type="latent").images
    assert not take_draws()
    R["base_latents"] = base[0]
    R["base_image"] = sd.image_processor.postprocess(
        sd.vae.decode(base / sd.vae.config.scaling_factor, return_dict=False)[0], output_type="pt")[0]
    for name, a1111, mode, scale, steps, denoise in CASES:
        # A1111: target = int(width * scale), latents interpolated to target // 8 (the
        # VAE's scale: 8 for SD; the tiny VAE's is 2, its base latents 16x16 are 32x32 pixels)
        vs = sd.vae_scale_factor
        W = H = int(base.shape[-1] * vs * scale)
        up = F.interpolate(base, size=(H // vs, W // vs), mode=mode, antialias=False) if mode != "nearest" \
            else F.interpolate(base, size=(H // vs, W // vs), mode=mode)
        take_draws()
        img = i2i(PROMPT, image=up.clone(), strength=denoise, negative_prompt=NEGATIVE,
                  num_inference_steps=steps, guidance_scale=7.0, output_type="pt").images[0]
        d = take_draws()
        assert len(d) == 1, "expected one draw (add_noise), got %d" % len(d)
        R[name + ".upscaled"] = up[0]
        R[name + ".noise"] = d[0][0]
        R[name + ".image"] = img
        meta["cases"][name] = {"a1111": a1111, "mode": mode, "scale": scale, "hires_steps": steps,
                               "denoise": denoise, "size": [W, H], "image": list(img.shape)}
    save_file({k: v.detach().float().contiguous() for k, v in R.items()},
              os.path.join(OUT, "ref_hires.safetensors"))
    with open(os.path.join(OUT, "hires.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print("wrote", OUT, sorted(R))


if __name__ == "__main__":
    main()
