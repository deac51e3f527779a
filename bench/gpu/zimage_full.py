#!/usr/bin/env python3
"""zimage_full.py - the full-size Z-Image transformer (ZImageTransformer2DModel's
defaults: Z-Image-Turbo's 6.2B configuration) with random weights, diffusers
(PyTorch CUDA, bf16, SDPA, eager) beside Lumen (Vulkan) on the same GPU.

No pretrained weights can be had here, so diffusers builds the configuration with
random (seeded) weights and saves it in the diffusers layout (bf16), inside a copy
of the tiny fixture pipeline tests/ref/dit/zimage (its tokenizer, text encoder and
VAE: only the transformer is measured).  One transformer call at 1024x1024 (4096
image tokens) with 128 caption tokens: diffusers f32 (the bf16 weights upcast: the
reference), diffusers bf16, and Lumen bf16 (bench/gpu/zimage_full.lua) with each
one's error against the f32 reference; times are medians of 5 with the spread.
Usage: PYTHONPATH=diffusers/src zimage_full.py LUMEN_BINARY WORKDIR
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

from diffusers import ZImageTransformer2DModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_grad_enabled(False)
DEV = "cuda"


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


def main():
    lumen, work = sys.argv[1], sys.argv[2]
    d = os.path.join(work, "zimage")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "tests", "ref", "dit", "zimage"), d)
    shutil.rmtree(os.path.join(d, "transformer"))
    t0 = time.time()
    torch.manual_seed(0)
    m = ZImageTransformer2DModel()
    with torch.no_grad():   # torch.empty in the model: fixed, as diffusers' tests do
        m.x_pad_token.copy_(torch.ones_like(m.x_pad_token))
        m.cap_pad_token.copy_(torch.ones_like(m.cap_pad_token))
    m = m.to(DEV, torch.bfloat16)
    m.save_pretrained(os.path.join(d, "transformer"), safe_serialization=True)
    print("built and saved in %.0f s (%.2fB parameters)" % (time.time() - t0,
          sum(p.numel() for p in m.parameters()) / 1e9), flush=True)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 16, 1, 128, 128, generator=g)
    t = torch.tensor([0.5])
    cap = torch.randn(128, 2560, generator=g)
    call = lambda mm, dt: mm([x[0].to(DEV, dt)], t.to(DEV, dt), [cap.to(DEV, dt)], return_dict=False)[0][0]
    out16 = call(m, torch.bfloat16).float().cpu()
    r = {"diffusers_transformer_ms": timed(lambda: call(m, torch.bfloat16))}
    torch.cuda.synchronize()
    r["diffusers_memory_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    m = m.float()
    out32 = call(m, torch.float32).cpu()
    del m
    torch.cuda.empty_cache()
    r["diffusers_bf16_vs_f32_max_rel"] = (out16 - out32).abs().max().item() / out32.abs().max().item()
    save_file({"x": x[:, :, 0].contiguous(), "t": t, "cap": cap, "out": out32[:, 0].unsqueeze(0).contiguous(),
               "out_bf16": out16[:, 0].unsqueeze(0).contiguous()}, os.path.join(work, "zimage_ref.safetensors"))
    print("diffusers", json.dumps(r), flush=True)
    lua = os.path.join(ROOT, "bench", "gpu", "zimage_full.lua")
    env = dict(os.environ, LUMEN_FALLBACK="0")
    t1 = time.time()
    res = subprocess.run([lumen, lua, d, os.path.join(work, "zimage_ref.safetensors"), "bf16"],
                         capture_output=True, text=True, env=env, timeout=420)
    print("lumen rc %d in %.0f s" % (res.returncode, time.time() - t1))
    print(res.stdout[-8000:])
    print(res.stderr[-3000:])


if __name__ == "__main__":
    main()
