#!/usr/bin/env python3
"""Fixture for Lumen's inpainting (issue 37), made with diffusers.

The references are diffusers' StableDiffusionInpaintPipeline and
StableDiffusionXLInpaintPipeline on the tiny SD 1.x and SDXL folders of
tests/ref/diffusion (made by gen_diffusion.py):
  - 9-channel inpainting UNets: the tiny UNets with conv_in widened to 9 input
    channels (latents 4 + mask 1 + masked-image latents 4), a new seeded conv_in
    rounded to f16 as the folders' weights are; only that weight is written
    (OUT/ref_inpaint.safetensors "sd1.conv_in" / "sdxl.conv_in", F16) and
    tests/ref/make_inpaint.py builds the 9-channel folders from the committed
    ones with it, so the repository holds the UNets once;
  - the same pipeline with the ordinary 4-channel UNet (masked img2img: each
    step the latents outside the mask are the init latents noised to the next
    timestep);
  - strength 1.0 (is_strength_max: pure noise) and 0.6, Euler; one 4-channel
    case with DPM++ 2M;
  - the mask blurred by mask_processor.blur (PIL's GaussianBlur) and
    apply_overlay (A1111's overlay: the init image pasted back outside the
    blurred mask).
Every random draw diffusers makes (randn_tensor: the VAE's latent_dist.sample
of the init image and of the masked image, the initial noise) comes from one
seeded generator and is recorded in order, so Lumen replays them through its
noise hook.

Run on the GPU machine (CPU is used; PyTorch, transformers; diffusers' source on
PYTHONPATH):
    python3 tests/ref/gen_inpaint.py OUTDIR
Input: tests/ref/diffusion/{sd1,sdxl} beside the script (or ./sd1, ./sdxl).
Writes OUTDIR/ref_inpaint.safetensors and OUTDIR/inpaint.json.
"""
import json
import os
import sys

import numpy as np
import PIL.Image
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import (DPMSolverMultistepScheduler, EulerDiscreteScheduler,
                       StableDiffusionInpaintPipeline, StableDiffusionPipeline,
                       StableDiffusionXLInpaintPipeline, StableDiffusionXLPipeline,
                       UNet2DConditionModel)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True   # no __pycache__ beside the fixtures
import tiny_pipes  # noqa: E402  (the prompt pair, the noise recorder, the tiny folders)
from tiny_pipes import NEGATIVE, PROMPT  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "inpaint")
torch.set_grad_enabled(False)
torch.manual_seed(0)

SIZE = 32          # pixels (the tiny VAE's scale is 2: 16x16 latents)
STEPS = 4
CFG = 7.0
BLUR = 2           # mask_processor.blur's blur_factor (PIL GaussianBlur radius)

DRAWS = tiny_pipes.Draws(2024)
_randn, patch_randn, take_draws = DRAWS.randn, DRAWS.patch, DRAWS.take


def find(name):
    return tiny_pipes.find(HERE, name, "gen_inpaint.py")


def widen(unet, seed):
    """The UNet with a 9-channel conv_in (new seeded weights, f16-rounded)."""
    cfg = dict(unet.config)
    cfg["in_channels"] = 9
    u9 = UNet2DConditionModel.from_config(cfg)
    sd = {k: v.clone() for k, v in unet.state_dict().items()}
    g = torch.Generator().manual_seed(seed)
    w = sd["conv_in.weight"]
    new = torch.randn((w.shape[0], 9) + tuple(w.shape[2:]), generator=g) * float(w.float().std())
    sd["conv_in.weight"] = new.half().float()
    u9.load_state_dict(sd)
    return u9.float().eval(), new.half()


def make_inputs():
    g = np.random.RandomState(7)
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    img = np.stack([x * 255.0 / (SIZE - 1), y * 255.0 / (SIZE - 1), (x + y) * 127.0 / (SIZE - 1)], -1)
    img = np.clip(img + g.randint(-40, 41, img.shape), 0, 255).astype(np.uint8)
    mask = np.zeros((SIZE, SIZE), np.uint8)
    mask[6:22, 9:27] = 255
    mask[6:22, 8] = 140    # >= 0.5 after /255: repainted
    mask[22, 9:27] = 120   # < 0.5: kept
    mask[2:5, 2:6] = 200   # a second small region
    return PIL.Image.fromarray(img, "RGB"), PIL.Image.fromarray(mask, "L")


def pil_tensor(im):
    a = np.asarray(im).astype(np.float32) / 255.0
    if a.ndim == 2:
        a = a[None]
    else:
        a = a.transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(a))


def main():
    os.makedirs(OUT, exist_ok=True)
    patch_randn()
    init, mask = make_inputs()
    R = {"init": pil_tensor(init), "mask": pil_tensor(mask)}
    meta = {"prompt": PROMPT, "negative": NEGATIVE, "steps": STEPS, "cfg": CFG, "size": SIZE,
            "blur": BLUR, "cases": {}, "diffusers": diffusers.__version__, "torch": torch.__version__,
            "draws": "case.draw0, case.draw1, ... in diffusers' order; case.draws names them"}

    sd = StableDiffusionPipeline.from_pretrained(find("sd1"), torch_dtype=torch.float32,
                                                 safety_checker=None, requires_safety_checker=False)
    xl = StableDiffusionXLPipeline.from_pretrained(find("sdxl"), torch_dtype=torch.float32)
    u9, w9 = widen(sd.unet, 11)
    x9, xw9 = widen(xl.unet, 12)
    R["sd1.conv_in"] = w9
    R["sdxl.conv_in"] = xw9

    def sd_pipe(unet, sampler):
        comps = dict(sd.components)
        comps["unet"] = unet
        p = StableDiffusionInpaintPipeline(**comps)
        cls, kw = sampler
        p.scheduler = cls.from_config(dict(sd.scheduler.config), **kw)
        p.set_progress_bar_config(disable=True)
        return p

    def xl_pipe(unet, sampler):
        comps = dict(xl.components)
        comps["unet"] = unet
        p = StableDiffusionXLInpaintPipeline(**comps, requires_aesthetics_score=False, add_watermarker=False)
        cls, kw = sampler
        p.scheduler = cls.from_config(dict(xl.scheduler.config), **kw)
        p.set_progress_bar_config(disable=True)
        return p

    euler = (EulerDiscreteScheduler, {})
    dpm = (DPMSolverMultistepScheduler, {"algorithm_type": "dpmsolver++", "solver_order": 2})
    from diffusers.image_processor import VaeImageProcessor
    mblur = VaeImageProcessor.blur(mask, blur_factor=BLUR)
    R["blur.mask"] = pil_tensor(mblur)

    CASES = [
        # name, family, channels, sampler name (Lumen's), scheduler, strength, mask
        ("sd9_s1", "sd1", 9, "euler", euler, 1.0, mask),
        ("sd9_s06", "sd1", 9, "euler", euler, 0.6, mask),
        ("sd4_s06", "sd1", 4, "euler", euler, 0.6, mask),
        ("sd4_s1", "sd1", 4, "euler", euler, 1.0, mask),
        ("sd4_dpm", "sd1", 4, "dpm++2m", dpm, 0.75, mask),
        ("sd4_blur", "sd1", 4, "euler", euler, 0.6, mblur),
        ("xl9_s1", "sdxl", 9, "euler", euler, 1.0, mask),
        ("xl9_s06", "sdxl", 9, "euler", euler, 0.6, mask),
    ]
    for name, fam, ch, sname, sched, strength, m in CASES:
        if fam == "sd1":
            p = sd_pipe(u9 if ch == 9 else sd.unet, sched)
        else:
            p = xl_pipe(x9 if ch == 9 else xl.unet, sched)
        take_draws()
        out = p(PROMPT, image=init, mask_image=m, negative_prompt=NEGATIVE, height=SIZE, width=SIZE,
                strength=strength, num_inference_steps=STEPS, guidance_scale=CFG, output_type="pt")
        img = out.images[0]
        d = take_draws()
        # the draws in diffusers' order: the init image's latent sample (when encoded),
        # the initial noise, the masked image's latent sample
        encodes_init = ch == 4 or strength < 1.0
        names = (["init_sample"] if encodes_init else []) + ["noise", "masked_sample"]
        if len(d) != len(names):
            print("gen_inpaint.py: %s: expected draws %s, got %d: written as draw0.." % (name, names, len(d)))
            names = ["draw%d" % i for i in range(len(d))]
        for k, t in zip(names, d):
            R["%s.%s" % (name, k)] = t[0]
        R[name + ".image"] = img
        meta["cases"][name] = {"family": fam, "channels": ch, "sampler": sname, "strength": strength,
                               "draws": names, "image": list(img.shape),
                               "mask": "blur.mask" if m is not mask else "mask"}
        if name == "sd4_blur":
            pil = p.image_processor.numpy_to_pil(img.permute(1, 2, 0).numpy()[None])[0]
            R[name + ".image8"] = pil_tensor(pil)
            R[name + ".overlay"] = pil_tensor(p.image_processor.apply_overlay(mblur, init, pil))
    save_file({k: (v.detach().contiguous() if v.dtype == torch.float16 else v.detach().float().contiguous())
               for k, v in R.items()}, os.path.join(OUT, "ref_inpaint.safetensors"))
    with open(os.path.join(OUT, "inpaint.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print("wrote", OUT, sorted(R))


if __name__ == "__main__":
    main()
