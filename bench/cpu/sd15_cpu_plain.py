#!/usr/bin/env python3
"""bench/cpu/sd15_cpu_plain.py - SD 1.5 on the CPU, diffusers' models (PyTorch
CPU, f32, eager) beside Lumen's CPU backend in one run, on a machine with
only Debian's python3-torch: no transformers, no huggingface_hub, no
safetensors (bench/cpu/hubshim.py stands in for them; diffusers' source on
PYTHONPATH).  bench/cpu/sd15_cpu.py is the same bench where transformers
and diffusers' pipelines are installed.

The full-size SD 1.5 UNet and VAE with random (seeded) weights are built
from their configs, a full-size CLIP ViT-L text encoder (12 layers, 768
wide) as plain tensors; weights are rounded to f16 and saved in the
diffusers layout (f16 files, ~2.1 GB, the tokenizer from
tests/ref/clip/tiny), both sides compute in f32 on the same values.
  - one UNet call, the CFG batch of 2 at a 64x64 latent: the first call of
    the process and the next ones (median, min-max), diffusers and each
    Lumen binary given (bench/cpu/sd15_cpu.lua), Lumen's output against
    diffusers';
  - one VAE decode of a 64x64 latent (512x512 pixels);
  - with 'image=SIZE[xSTEPS]': a whole SIZE x SIZE image of STEPS steps (20 by
    default; euler, cfg 7): on diffusers' side its scheduler, UNet and VAE in
    the loop its pipeline runs, the text encoder a plain CLIP forward of 77
    fixed token ids (transformers' CLIPTextModel is absent); Lumen's
    pipe:generate.
The attention of diffusers' models is its AttnProcessor (torch 1.13 has no
scaled_dot_product_attention): what a user of this torch gets.
Usage: PYTHONPATH=diffusers/src sd15_cpu_plain.py WORK LUMEN[:NAME[:CALLS[:profile]]] ... [calls=N] [image=SIZE[xSTEPS]] [threads=N]
(CALLS: UNet calls of that binary, 4 by default; diffusers makes calls=N, 4 by default; 0 on both: only the
image, no UNet calls and no VAE decode; threads: torch's, all cores by default - Debian's torch starts with 1)
Each figure's line ends with the load average, the machine's load when it was taken.
"""
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import hubshim

hubshim.install()
hubshim.torch_compat()

import torch  # noqa: E402

from diffusers import AutoencoderKL, EulerDiscreteScheduler, UNet2DConditionModel  # noqa: E402

torch.set_grad_enabled(False)
ROOT = os.environ.get("LUMEN_ROOT", os.getcwd())
HERE = os.path.dirname(os.path.abspath(__file__))
SCHED = {"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
         "steps_offset": 1, "timestep_spacing": "leading", "prediction_type": "epsilon"}
CLIP = {"architectures": ["CLIPTextModel"], "bos_token_id": 827, "eos_token_id": 2, "pad_token_id": 1,
        "hidden_act": "quick_gelu", "hidden_size": 768, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
        "max_position_embeddings": 77, "model_type": "clip_text_model", "num_attention_heads": 12,
        "num_hidden_layers": 12, "projection_dim": 768, "vocab_size": 49408, "torch_dtype": "float32"}


def clip_weights(g):
    w, h, f = {}, CLIP["hidden_size"], CLIP["intermediate_size"]
    p = "text_model."
    w[p + "embeddings.token_embedding.weight"] = torch.randn(CLIP["vocab_size"], h, generator=g) * 0.02
    w[p + "embeddings.position_embedding.weight"] = torch.randn(77, h, generator=g) * 0.01
    for i in range(CLIP["num_hidden_layers"]):
        q = p + "encoder.layers.%d." % i
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            w[q + "self_attn.%s.weight" % n] = torch.randn(h, h, generator=g) * h ** -0.5
            w[q + "self_attn.%s.bias" % n] = torch.randn(h, generator=g) * 0.01
        for n in ("layer_norm1", "layer_norm2"):
            w[q + n + ".weight"] = 1 + 0.1 * torch.randn(h, generator=g)
            w[q + n + ".bias"] = 0.01 * torch.randn(h, generator=g)
        w[q + "mlp.fc1.weight"] = torch.randn(f, h, generator=g) * h ** -0.5
        w[q + "mlp.fc1.bias"] = torch.randn(f, generator=g) * 0.01
        w[q + "mlp.fc2.weight"] = torch.randn(h, f, generator=g) * f ** -0.5
        w[q + "mlp.fc2.bias"] = torch.randn(h, generator=g) * 0.01
    w[p + "final_layer_norm.weight"] = 1 + 0.1 * torch.randn(h, generator=g)
    w[p + "final_layer_norm.bias"] = 0.01 * torch.randn(h, generator=g)
    return {k: v.half().float() for k, v in w.items()}


def clip_forward(w, ids):
    """CLIPTextModel's last_hidden_state (quick_gelu, causal, pre-LN)"""
    p, h, nh = "text_model.", CLIP["hidden_size"], CLIP["num_attention_heads"]
    n = ids.shape[1]
    x = w[p + "embeddings.token_embedding.weight"][ids] + w[p + "embeddings.position_embedding.weight"][:n]
    mask = torch.full((n, n), float("-inf")).triu(1)
    ln = torch.nn.functional.layer_norm
    lin = torch.nn.functional.linear
    for i in range(CLIP["num_hidden_layers"]):
        q = p + "encoder.layers.%d." % i
        y = ln(x, (h,), w[q + "layer_norm1.weight"], w[q + "layer_norm1.bias"], 1e-5)
        qkv = [lin(y, w[q + "self_attn.%s_proj.weight" % s], w[q + "self_attn.%s_proj.bias" % s]) for s in "qkv"]
        qh, kh, vh = [t.view(t.shape[0], n, nh, h // nh).transpose(1, 2) for t in qkv]
        a = ((qh @ kh.transpose(-1, -2)) * (h // nh) ** -0.5 + mask).softmax(-1) @ vh
        x = x + lin(a.transpose(1, 2).reshape(-1, n, h), w[q + "self_attn.out_proj.weight"],
                    w[q + "self_attn.out_proj.bias"])
        y = ln(x, (h,), w[q + "layer_norm2.weight"], w[q + "layer_norm2.bias"], 1e-5)
        y = lin(y, w[q + "mlp.fc1.weight"], w[q + "mlp.fc1.bias"])
        x = x + lin(y * torch.sigmoid(1.702 * y), w[q + "mlp.fc2.weight"], w[q + "mlp.fc2.bias"])
    return ln(x, (h,), w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"], 1e-5)


def build(d):
    torch.manual_seed(0)
    unet = UNet2DConditionModel(sample_size=64, cross_attention_dim=768, attention_head_dim=8,
                                block_out_channels=(320, 640, 1280, 1280), layers_per_block=2)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(128, 256, 512, 512),
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                        layers_per_block=2, norm_num_groups=32, sample_size=512, scaling_factor=0.18215)
    te = clip_weights(torch.Generator().manual_seed(4))
    os.makedirs(d, exist_ok=True)
    for name, m in (("unet", unet), ("vae", vae)):
        m.half().float().eval()
        os.makedirs(os.path.join(d, name), exist_ok=True)
        with open(os.path.join(d, name, "config.json"), "w") as f:
            json.dump(dict(m.config, _class_name=type(m).__name__), f, indent=1, default=list)
        hubshim.save_file({k: v.half() for k, v in m.state_dict().items()},
                          os.path.join(d, name, "diffusion_pytorch_model.safetensors"))
    os.makedirs(os.path.join(d, "text_encoder"), exist_ok=True)
    with open(os.path.join(d, "text_encoder", "config.json"), "w") as f:
        json.dump(CLIP, f, indent=1)
    hubshim.save_file({k: v.half() for k, v in te.items()}, os.path.join(d, "text_encoder", "model.safetensors"))
    tok = os.path.join(d, "tokenizer")
    shutil.rmtree(tok, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "tests", "ref", "clip", "tiny", "tokenizer"), tok)
    os.makedirs(os.path.join(d, "scheduler"), exist_ok=True)
    with open(os.path.join(d, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump(dict(SCHED, _class_name="EulerDiscreteScheduler"), f, indent=1)
    with open(os.path.join(d, "model_index.json"), "w") as f:
        json.dump({"_class_name": "StableDiffusionPipeline", "requires_safety_checker": False,
                   "safety_checker": [None, None], "feature_extractor": [None, None],
                   "scheduler": ["diffusers", "EulerDiscreteScheduler"],
                   "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
                   "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]}, f, indent=1)
    return unet, vae, te


def median_line(name, ts):
    nxt = ts[1:] or ts
    return "%s_first_ms %.1f next_ms %.1f (%.1f-%.1f)" % (name, ts[0], statistics.median(nxt), min(nxt), max(nxt))


def image(unet, vae, te, size, steps):
    """StableDiffusionPipeline's loop for euler, cfg 7, as its __call__ runs it"""
    ids = torch.tensor([[827] + [5 + i for i in range(8)] + [2] * 68, [827, 7, 9, 11] + [2] * 73])
    ctx = clip_forward(te, ids)
    ctx = torch.cat([ctx[1:], ctx[:1]])       # negative first, as encode_prompt orders them
    sch = EulerDiscreteScheduler.from_config(SCHED)
    sch.set_timesteps(steps)
    lat = torch.randn(1, 4, size // 8, size // 8, generator=torch.Generator().manual_seed(1)) * sch.init_noise_sigma
    for t in sch.timesteps:
        x = sch.scale_model_input(torch.cat([lat] * 2), t)
        e = unet(x, t, encoder_hidden_states=ctx).sample
        u, c = e.chunk(2)
        lat = sch.step(u + 7.0 * (c - u), t, lat).prev_sample
    return vae.decode(lat / 0.18215).sample


def main():
    args = sys.argv[1:]
    work = args[0]
    opt = dict(a.split("=", 1) for a in args[1:] if "=" in a)
    size, _, steps = opt.get("image", "0").partition("x")
    size, steps, calls = int(size), int(steps or 20), int(opt.get("calls", 4))
    torch.set_num_threads(int(opt.get("threads", os.cpu_count())))
    lumens = [a for a in args[1:] if "=" not in a]
    t0 = time.time()
    d = os.path.join(work, "sd15")
    unet, vae, te = build(d)
    print("built and saved in %.1f s; torch %s, %d threads; load %s" % (time.time() - t0, torch.__version__,
          torch.get_num_threads(), os.getloadavg()), flush=True)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 64, 64, generator=g)
    t = torch.tensor([999.0, 999.0])
    ctx = torch.randn(2, 77, 768, generator=g)
    ts = []
    ref = os.path.join(work, "sd15_ref.safetensors")
    for i in range(calls):
        s = time.perf_counter()
        out = unet(x, t, encoder_hidden_states=ctx).sample
        ts.append((time.perf_counter() - s) * 1e3)
        print("diffusers_unet_call%d_ms %.1f load %.2f" % (i + 1, ts[-1], os.getloadavg()[0]), flush=True)
    if calls:
        print(median_line("diffusers_unet", ts), flush=True)
        hubshim.save_file({"x": x, "t": t, "ctx": ctx, "out": out.contiguous()}, ref)
        z = torch.randn(1, 4, 64, 64, generator=torch.Generator().manual_seed(3))
        s = time.perf_counter()
        vae.decode(z / 0.18215)
        print("diffusers_vae_decode_512_ms %.1f (one run) load %.2f" % ((time.perf_counter() - s) * 1e3,
                                                                       os.getloadavg()[0]), flush=True)
    if size:
        s = time.perf_counter()
        image(unet, vae, te, size, steps)
        print("diffusers_%dstep_%d_ms %.1f (one run%s) load %.2f" % (
            steps, size, (time.perf_counter() - s) * 1e3, ", after the UNet calls" if calls else "",
            os.getloadavg()[0]), flush=True)
    del unet, vae, te
    gc.collect()
    lua = os.path.join(HERE, "sd15_cpu.lua")
    for spec in lumens:
        f = spec.split(":") + ["", "4", ""]
        binary, name, ncalls, prof = f[0], f[1], f[2] or "4", f[3]
        mode = ",".join(m for m in (prof, "image%dx%d" % (size, steps) if size else "") if m) or "-"
        env = dict(os.environ, LUMEN_DEVICE="cpu")
        t1 = time.time()
        print("== lumen %s" % (name or binary), flush=True)
        res = subprocess.run([binary, lua, d, ref, mode, ncalls], text=True, env=env, stdout=sys.stdout,
                             stderr=sys.stdout)
        print("== lumen %s rc %d in %.1f s; load %s" % (name or binary, res.returncode, time.time() - t1,
                                                      os.getloadavg()), flush=True)


if __name__ == "__main__":
    main()
