#!/usr/bin/env python3
"""bench/cpu/sd15_cpu.py - SD 1.5 on the CPU (issue 36's CPU path): diffusers
(PyTorch CPU, f32, eager, as a user runs it) beside Lumen's CPU backend, in
one process tree on one machine.

The full-size SD 1.5 architecture with random (seeded) weights is built once
(on the GPU where there is one, only because its initialisation is faster
there), saved in the diffusers layout (f16 files, ~2.1 GB) and held in f32 on
the CPU; Lumen loads the same folder with dtype f32 (the same f32 values).
  - one UNet call, the CFG batch of 2 at a 64x64 latent: the first call of
    the process and the next ones (median, min-max), diffusers and each Lumen
    binary given (bench/cpu/sd15_cpu.lua), Lumen's output against diffusers';
  - one VAE decode of a 64x64 latent (512x512 pixels), after the UNet calls;
  - with 'image=SIZExSTEPS': a whole SIZE x SIZE image of STEPS steps (20 by
    default; euler, cfg 7), diffusers' pipeline call beside pipe:generate;
  - with 'profile': lm.profile's table of one Lumen UNet call.
Usage: PYTHONPATH=diffusers/src sd15_cpu.py WORK LUMEN[:NAME[:CALLS[:profile]]] ... [calls=N] [image=SIZE[xSTEPS]]
(CALLS: UNet calls of that binary, 4 by default; diffusers makes calls=N, 4 by default)
The tokenizer is tests/ref/clip/tiny/tokenizer under LUMEN_ROOT (default: the
working directory), ids < 829 fit any CLIP vocabulary.
"""
import os
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file

from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

torch.set_grad_enabled(False)
ROOT = os.environ.get("LUMEN_ROOT", os.getcwd())
HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "a photo of an astronaut riding a horse"
NEG = "blurry, low quality"
SCHED = {"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
         "steps_offset": 1, "timestep_spacing": "leading", "prediction_type": "epsilon"}


def build():
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    tok = CLIPTokenizer.from_pretrained(os.path.join(ROOT, "tests", "ref", "clip", "tiny", "tokenizer"))
    with torch.device(dev):
        unet = UNet2DConditionModel(sample_size=64, cross_attention_dim=768, attention_head_dim=8,
                                    block_out_channels=(320, 640, 1280, 1280), layers_per_block=2)
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(128, 256, 512, 512),
                            down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                            layers_per_block=2, norm_num_groups=32, sample_size=512, scaling_factor=0.18215)
        cfg = CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                             num_hidden_layers=12, max_position_embeddings=77, hidden_act="quick_gelu", eos_token_id=2,
                             bos_token_id=827, pad_token_id=1, projection_dim=768)
        te = CLIPTextModel(cfg)
    p = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                scheduler=EulerDiscreteScheduler.from_config(SCHED), safety_checker=None,
                                feature_extractor=None, requires_safety_checker=False)
    return p.to(dev, torch.float16)


def main():
    args = sys.argv[1:]
    work = args[0]
    opt = dict(a.split("=", 1) for a in args[1:] if "=" in a)
    size, _, steps = opt.get("image", "0").partition("x")
    image, steps, calls = int(size), int(steps or 20), int(opt.get("calls", 4))
    lumens = [a for a in args[1:] if "=" not in a]
    t0 = time.time()
    p = build()
    d = os.path.join(work, "sd15")
    p.save_pretrained(d, safe_serialization=True)
    p = p.to("cpu", torch.float32)
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    print("built and saved in %.1f s; torch %s, %d threads" % (time.time() - t0, torch.__version__,
                                                              torch.get_num_threads()), flush=True)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 64, 64, generator=g)
    t = torch.tensor([999.0, 999.0])
    pe, npe = p.encode_prompt(PROMPT, "cpu", 1, True, NEG)
    ctx = torch.cat([npe, pe]).float()
    ts = []
    for i in range(calls):
        s = time.perf_counter()
        out = p.unet(x, t, encoder_hidden_states=ctx).sample
        ts.append((time.perf_counter() - s) * 1e3)
        print("diffusers_unet_call%d_ms %.1f" % (i + 1, ts[-1]), flush=True)
    nxt = ts[1:] or ts
    print("diffusers_unet_first_ms %.1f next_ms %.1f (%.1f-%.1f)" % (ts[0], statistics.median(nxt), min(nxt),
                                                                     max(nxt)), flush=True)
    ref = os.path.join(work, "sd15_ref.safetensors")
    save_file({"x": x.contiguous(), "t": t, "ctx": ctx.contiguous(), "out": out.contiguous()}, ref)
    z = torch.randn(1, 4, 64, 64, generator=torch.Generator().manual_seed(3))
    s = time.perf_counter()
    p.vae.decode(z / 0.18215)
    print("diffusers_vae_decode_512_ms %.1f (one run)" % ((time.perf_counter() - s) * 1e3), flush=True)
    if image:
        s = time.perf_counter()
        p(PROMPT, negative_prompt=NEG, num_inference_steps=steps, guidance_scale=7.0, height=image, width=image,
          output_type="pt", generator=torch.Generator().manual_seed(1))
        print("diffusers_%dstep_%d_ms %.1f (one run, after the UNet calls)" % (steps, image,
                                                                            (time.perf_counter() - s) * 1e3), flush=True)
    del p
    lua = os.path.join(HERE, "sd15_cpu.lua")
    for spec in lumens:
        f = spec.split(":") + ["", "4", ""]
        binary, name, ncalls, prof = f[0], f[1], f[2] or "4", f[3]
        mode = ",".join(m for m in (prof, "image%dx%d" % (image, steps) if image else "") if m) or "-"
        env = dict(os.environ, LUMEN_DEVICE="cpu")
        t1 = time.time()
        print("== lumen %s" % (name or binary), flush=True)
        res = subprocess.run([binary, lua, d, ref, mode, ncalls], text=True, env=env, stdout=sys.stdout, stderr=sys.stdout)
        print("== lumen %s rc %d in %.1f s" % (name or binary, res.returncode, time.time() - t1), flush=True)


if __name__ == "__main__":
    main()
