#!/usr/bin/env python3
"""sd_full.py - the full-size SD 1.5 and SDXL architectures with random weights,
diffusers (PyTorch CUDA, f16, SDPA, eager) beside Lumen (Vulkan) on the same GPU.

No pretrained weights can be had here, so diffusers builds the real configurations
with random (seeded) weights and saves them in the diffusers layout (f16); Lumen
loads the same folders.  Per model:
  - one UNet call (the CFG batch of 2) at given latents / timestep / context, in
    diffusers f32 (the reference: the f16 weights upcast), diffusers f16 and Lumen
    (bench/gpu/sd_full.lua), with the errors against the f32 reference;
  - times, medians of 5 with the spread (min-max): text encoding (both prompts),
    one UNet call, the VAE decode, and a whole 20-step image, in diffusers and Lumen.
Usage: PYTHONPATH=diffusers/src sd_full.py LUMEN_BINARY WORKDIR [sd15] [sdxl] [save-only]
SD_FULL_IMAGE_REPS=N: whole images timed on each side (default 3); SD_FULL_USER_CALL=1: also
diffusers' pipeline call as a user runs it (PIL output, torch's default cuDNN TF32) and, SDXL,
its VAE decode in f32 alone (bench/gpu/issue36.sh sd).
The tokenizer is tests/ref/clip/tiny/tokenizer (ids < 829 fit any CLIP vocabulary).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file

from diffusers import (AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline,
                       StableDiffusionXLPipeline, UNet2DConditionModel)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = os.path.join(ROOT, "tests", "ref", "clip", "tiny")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_grad_enabled(False)
DEV = "cuda"
PROMPT = "a photo of an astronaut riding a horse"
NEG = "blurry, low quality"
SCHED = {"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
         "steps_offset": 1, "timestep_spacing": "leading", "prediction_type": "epsilon"}


def timed(fn, n=5):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), min(ts), max(ts)


def clip(hidden, layers, heads, inter, act, proj=None, eos=2):
    cfg = CLIPTextConfig(vocab_size=49408, hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                         num_hidden_layers=layers, max_position_embeddings=77, hidden_act=act, eos_token_id=eos,
                         bos_token_id=827, pad_token_id=1, projection_dim=proj or 768)
    m = (CLIPTextModelWithProjection if proj else CLIPTextModel)(cfg)
    return m


def vae(scaling):
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(128, 256, 512, 512),
                         down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                         layers_per_block=2, norm_num_groups=32, sample_size=512, scaling_factor=scaling)


def build(kind):
    torch.manual_seed(0)
    tok = CLIPTokenizer.from_pretrained(os.path.join(TOK, "tokenizer"))
    if kind == "sd15":
        unet = UNet2DConditionModel(sample_size=64, cross_attention_dim=768, attention_head_dim=8,
                                    block_out_channels=(320, 640, 1280, 1280), layers_per_block=2)
        p = StableDiffusionPipeline(vae=vae(0.18215), text_encoder=clip(768, 12, 12, 3072, "quick_gelu"), tokenizer=tok,
                                    unet=unet, scheduler=EulerDiscreteScheduler.from_config(SCHED),
                                    safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    else:
        unet = UNet2DConditionModel(
            sample_size=128, cross_attention_dim=2048, attention_head_dim=(5, 10, 20), block_out_channels=(320, 640, 1280),
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"), transformer_layers_per_block=(1, 2, 10),
            use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=256,
            projection_class_embeddings_input_dim=2816, layers_per_block=2)
        tok2 = CLIPTokenizer.from_pretrained(os.path.join(TOK, "tokenizer_2"))
        p = StableDiffusionXLPipeline(vae=vae(0.13025), text_encoder=clip(768, 12, 12, 3072, "quick_gelu"),
                                      text_encoder_2=clip(1280, 32, 20, 5120, "gelu", proj=1280, eos=828),
                                      tokenizer=tok, tokenizer_2=tok2, unet=unet,
                                      scheduler=EulerDiscreteScheduler.from_config(SCHED), add_watermarker=False)
    # PyTorch default initialisation (as the peer figures in issue 24 were measured)
    return p.to(DEV, torch.float16)


def main():
    lumen, work = sys.argv[1], sys.argv[2]
    kinds = [k for k in sys.argv[3:] if k in ("sd15", "sdxl")] or ["sd15", "sdxl"]
    save_only = "save-only" in sys.argv[3:]
    report = {}
    for kind in kinds:
        t0 = time.time()
        p = build(kind)
        d = os.path.join(work, kind)
        shutil.rmtree(d, ignore_errors=True)
        p.save_pretrained(d, safe_serialization=True)
        print("%s: built and saved in %.0f s" % (kind, time.time() - t0), flush=True)
        if save_only:
            continue
        size = 1024 if kind == "sdxl" else 512
        lat = size // 8
        g = torch.Generator().manual_seed(2)
        x = torch.randn(2, 4, lat, lat, generator=g)
        t = torch.tensor([999.0, 999.0])
        if kind == "sdxl":
            pe, npe, pp, npp = p.encode_prompt(PROMPT, device=DEV, num_images_per_prompt=1,
                                               do_classifier_free_guidance=True, negative_prompt=NEG)
            ctx = torch.cat([npe, pe]).float().cpu()
            te = torch.cat([npp, pp]).float().cpu()
            ti = torch.tensor([[size, size, 0, 0, size, size]] * 2, dtype=torch.float32)
            extra = lambda dt: {"added_cond_kwargs": {"text_embeds": te.to(DEV, dt), "time_ids": ti.to(DEV, dt)}}
        else:
            pe, npe = p.encode_prompt(PROMPT, DEV, 1, True, NEG)
            ctx = torch.cat([npe, pe]).float().cpu()
            te = ti = None
            extra = lambda dt: {}
        out16 = p.unet(x.to(DEV, torch.float16), t.to(DEV), encoder_hidden_states=ctx.to(DEV, torch.float16),
                       **extra(torch.float16)).sample.float().cpu()
        u32 = p.unet.float()
        out32 = u32(x.to(DEV), t.to(DEV), encoder_hidden_states=ctx.to(DEV), **extra(torch.float32)).sample.cpu()
        p.unet.half()
        refs = {"x": x, "t": t, "ctx": ctx, "out": out32, "out_f16": out16}
        if te is not None:
            refs["text_embeds"], refs["time_ids"] = te, ti
        save_file({k: v.contiguous() for k, v in refs.items()}, os.path.join(work, kind + "_ref.safetensors"))
        e16 = (out16 - out32).abs().max().item() / out32.abs().max().item()
        r = {"diffusers_f16_vs_f32_max_rel": e16}
        xx, cc = x.to(DEV, torch.float16), ctx.to(DEV, torch.float16)
        r["diffusers_unet_ms"] = timed(lambda: p.unet(xx, t.to(DEV), encoder_hidden_states=cc, **extra(torch.float16)))
        z = torch.randn(1, 4, lat, lat, device=DEV, dtype=torch.float16)
        r["diffusers_vae_ms"] = timed(lambda: p.vae.decode(z))
        if kind == "sdxl":
            r["diffusers_text_ms"] = timed(lambda: p.encode_prompt(PROMPT, device=DEV, do_classifier_free_guidance=True,
                                                                   negative_prompt=NEG))
        else:
            r["diffusers_text_ms"] = timed(lambda: p.encode_prompt(PROMPT, DEV, 1, True, NEG))
        reps = int(os.environ.get("SD_FULL_IMAGE_REPS", "3"))
        r["diffusers_20step_ms"] = timed(lambda: p(PROMPT, negative_prompt=NEG, num_inference_steps=20, guidance_scale=7.0,
                                                  height=size, width=size, output_type="pt"), n=reps)
        if os.environ.get("SD_FULL_USER_CALL") == "1":
            # the pipeline call as a user runs it: PIL images out, torch's default
            # cuDNN TF32 (on: SDXL's VAE decodes in f32, force_upcast), progress bar;
            # and SDXL's f32 decode alone, TF32 off (Lumen's SDXL VAE row is f32)
            tf32 = torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.allow_tf32 = True
            r["diffusers_20step_user_ms"] = timed(lambda: p(PROMPT, negative_prompt=NEG, num_inference_steps=20,
                                                           guidance_scale=7.0, height=size, width=size), n=reps)
            torch.backends.cudnn.allow_tf32 = tf32
            if kind == "sdxl":
                p.vae.float()
                z32 = z.float()
                r["diffusers_vae_f32_ms"] = timed(lambda: p.vae.decode(z32))
                p.vae.half()
        torch.cuda.synchronize()
        resident = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        p(PROMPT, negative_prompt=NEG, num_inference_steps=20, guidance_scale=7.0, height=size, width=size,
          output_type="pt")
        torch.cuda.synchronize()
        r["diffusers_memory_mb"] = {"resident": resident / 2 ** 20, "peak": torch.cuda.max_memory_allocated() / 2 ** 20}
        print(kind, json.dumps(r), flush=True)
        del p
        torch.cuda.empty_cache()
        lua = os.path.join(ROOT, "bench", "gpu", "sd_full.lua")
        for dt in ("f16",):
            env = dict(os.environ, LUMEN_FALLBACK="0")
            t1 = time.time()
            res = subprocess.run([lumen, lua, d, os.path.join(work, kind + "_ref.safetensors"), dt, str(size)],
                                 capture_output=True, text=True, env=env, timeout=400)
            print("lumen %s %s rc %d in %.0f s" % (kind, dt, res.returncode, time.time() - t1))
            print(res.stdout)
            print(res.stderr[-3000:])
        report[kind] = r
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
