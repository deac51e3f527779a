#!/usr/bin/env python3
"""zimage_pipe.py - a whole Z-Image-Turbo image at full size (random weights):
diffusers' ZImagePipeline (PyTorch CUDA, bf16, SDPA) beside Lumen's
pipe:generate (Vulkan, bf16) on the same GPU, with each stage's time and the
peak memory of each, and Lumen's offloading configuration.

No pretrained weights can be had here, so the folder is built with seeded random
weights at the released sizes: ZImageTransformer2DModel's defaults (6.2B), a
Qwen3Model at Qwen3-4B's configuration (36 layers, 2560 wide, 32/8 heads of
128, vocabulary 151936) and the 16-channel AutoencoderKL of FLUX.1/Z-Image
(128-256-512-512, scaling 0.3611, shift 0.1159), all saved in bf16; the tokenizer
is the tiny fixture's (tests/ref/dit/zimage/tokenizer: its ids index the full
vocabulary) and the scheduler Turbo's (FlowMatchEuler, shift 3).  One 1024x1024
image, 9 steps (Turbo's), guidance 0, max_sequence_length 512, from the same
initial latents on both sides; times are medians of 5 warm calls with the spread.
The reference image is diffusers' final latents decoded by an f32 copy of the VAE.
Usage: PYTHONPATH=diffusers/src zimage_pipe.py LUMEN_BINARY WORKDIR [MODES [lumen-only] | build-only]
MODES: Lumen's configurations, comma-separated (default "default,offload");
lumen-only: diffusers is not run (its reference image is then zeros).
ZIMAGE_REUSE=1: a WORKDIR/zimage_full already built is used as it is.
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

from diffusers import AutoencoderKL, ZImagePipeline, ZImageTransformer2DModel
from transformers import Qwen3Config, Qwen3Model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_grad_enabled(False)
DEV = "cuda"
PROMPT = "a red fox in the snow, photograph, golden hour"
STEPS = 9


def timed(fn, n=5):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return [round(statistics.median(ts), 2), round(min(ts), 2), round(max(ts), 2)]


def build(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    src = os.path.join(ROOT, "tests", "ref", "dit", "zimage")
    shutil.copy(os.path.join(src, "model_index.json"), d)
    shutil.copytree(os.path.join(src, "tokenizer"), os.path.join(d, "tokenizer"))
    os.makedirs(os.path.join(d, "scheduler"))
    with open(os.path.join(d, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump({"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000,
                   "shift": 3.0, "use_dynamic_shifting": False}, f)
    torch.manual_seed(0)
    with torch.device(DEV):
        m = ZImageTransformer2DModel().to(torch.bfloat16)
        m.x_pad_token.copy_(torch.ones_like(m.x_pad_token))
        m.cap_pad_token.copy_(torch.ones_like(m.cap_pad_token))
    m.save_pretrained(os.path.join(d, "transformer"), safe_serialization=True)
    del m
    cfg = Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=True)
    with torch.device(DEV):
        te = Qwen3Model(cfg).to(torch.bfloat16)
    te.save_pretrained(os.path.join(d, "text_encoder"), safe_serialization=True)
    del te
    with torch.device(DEV):
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16,
                            block_out_channels=[128, 256, 512, 512], layers_per_block=2,
                            down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
                            scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                            use_post_quant_conv=False, sample_size=1024, force_upcast=True).to(torch.bfloat16)
    vae.save_pretrained(os.path.join(d, "vae"), safe_serialization=True)
    del vae
    torch.cuda.empty_cache()


def main():
    lumen, work = sys.argv[1], sys.argv[2]
    d = os.path.join(work, "zimage_full")
    t0 = time.time()
    if os.environ.get("ZIMAGE_REUSE") == "1" and os.path.isfile(os.path.join(d, "vae", "config.json")):
        print("the folder %s kept (ZIMAGE_REUSE=1)" % d, flush=True)
    else:
        build(d)
        print("built and saved in %.0f s" % (time.time() - t0), flush=True)
    if len(sys.argv) > 3 and sys.argv[3] == "build-only":
        return  # the folder alone (bench/gpu/sd_mpi.sh ... zimage_full)
    modes = (sys.argv[3] if len(sys.argv) > 3 else "default,offload").split(",")
    if len(sys.argv) > 4 and sys.argv[4] == "lumen-only":
        lat = torch.randn(1, 16, 128, 128, generator=torch.Generator().manual_seed(7))
        save_file({"latents": lat, "image": torch.zeros(1, 3, 1024, 1024)},
                  os.path.join(work, "zimage_pipe_ref.safetensors"))
        return run_lumen(lumen, work, d, modes)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    pipe = ZImagePipeline.from_pretrained(d, torch_dtype=torch.bfloat16).to(DEV)
    print("diffusers load %.1f s" % (time.time() - t0), flush=True)
    g = torch.Generator().manual_seed(7)
    lat = torch.randn(1, 16, 128, 128, generator=g)
    r = {}
    run = lambda: pipe(prompt=PROMPT, height=1024, width=1024, num_inference_steps=STEPS, guidance_scale=0.0,
                       latents=lat.to(DEV, torch.bfloat16), output_type="pt").images
    img16 = run().float().cpu()
    r["diffusers_image_ms"] = timed(run)
    r["diffusers_bf16_image_nonfinite"] = int((~torch.isfinite(img16)).sum())
    # the reference image: the pipeline's final latents decoded by an f32 copy of
    # its VAE (random bf16 VAE weights can overflow in bf16 at 1024x1024)
    fin = pipe(prompt=PROMPT, height=1024, width=1024, num_inference_steps=STEPS, guidance_scale=0.0,
               latents=lat.to(DEV, torch.bfloat16), output_type="latent").images
    vae32 = AutoencoderKL.from_pretrained(os.path.join(d, "vae"), torch_dtype=torch.float32).to(DEV)
    c = vae32.config
    img = vae32.decode(fin.float() / c.scaling_factor + c.shift_factor, return_dict=False)[0]
    img = (img / 2 + 0.5).clamp(0, 1).cpu()
    r["diffusers_bf16_image_vs_f32_vae_max_abs"] = float((img16 - img).abs().nan_to_num(1.0).max())
    del vae32
    # the stages alone, as the pipeline runs them
    r["diffusers_encode_ms"] = timed(lambda: pipe.encode_prompt(PROMPT, device=DEV,
                                                                do_classifier_free_guidance=False))
    emb = pipe.encode_prompt(PROMPT, device=DEV, do_classifier_free_guidance=False)[0]
    x = [lat.to(DEV, torch.bfloat16).unsqueeze(2)[0]]
    tt = torch.tensor([0.5], device=DEV, dtype=torch.bfloat16)
    r["diffusers_transformer_ms"] = timed(lambda: pipe.transformer(x, tt, emb, return_dict=False))
    z = lat.to(DEV, torch.bfloat16)
    r["diffusers_vae_decode_ms"] = timed(lambda: pipe.vae.decode(z, return_dict=False))
    torch.cuda.synchronize()
    r["diffusers_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2 ** 20)
    r["diffusers_weights_mib"] = round(sum(p.numel() * p.element_size() for m in
                                           (pipe.transformer, pipe.text_encoder, pipe.vae)
                                           for p in m.parameters()) / 2 ** 20)
    print("diffusers", json.dumps(r), flush=True)
    save_file({"latents": lat, "image": img}, os.path.join(work, "zimage_pipe_ref.safetensors"))
    del pipe
    torch.cuda.empty_cache()
    run_lumen(lumen, work, d, modes)


def run_lumen(lumen, work, d, modes):
    lua = os.path.join(ROOT, "bench", "gpu", "zimage_pipe.lua")
    env = dict(os.environ, LUMEN_FALLBACK="0")
    for mode in modes:
        t1 = time.time()
        res = subprocess.run([lumen, lua, d, os.path.join(work, "zimage_pipe_ref.safetensors"), mode, PROMPT,
                              str(STEPS)], capture_output=True, text=True, env=env, timeout=600)
        print("lumen %s rc %d in %.0f s" % (mode, res.returncode, time.time() - t1))
        print(res.stdout[-6000:])
        print(res.stderr[-3000:], flush=True)


if __name__ == "__main__":
    main()
