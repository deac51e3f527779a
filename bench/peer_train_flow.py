#!/usr/bin/python3
"""PyTorch twin of bench/train_flow.lua: the flow UNet of
samples/models/fashion_flow.lua written with torch.nn.functional, started
from the weights Lumen wrote (DIR/init.safetensors) and trained on the same
batches (DIR/batches.safetensors) with the same step (MSE flow loss,
clip_grad_norm_ 1.0, AdamW with the recipe's schedule).  Prints its rate
(PEER line), its losses beside Lumen's (DIR/losses_lumen.txt) and their
largest relative difference.
  peer_train_flow.py DIR [STEPS=12] [--device cpu|cuda] [--threads N]"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

WARM, NCLS = 2, 10


def load_safetensors(path):
    """The safetensors format: 8-byte little-endian header size, a JSON
    header of name -> dtype, shape, data_offsets, then the data."""
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8,
          "BOOL": np.bool_}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=dt[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def timestep_embedding(t, dim):
    # Lumen's lm.timestep_embedding: f64 frequencies, [cos, sin], cast to f32
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float64, device=t.device) / half)
    arg = t.double()[:, None] * freqs[None, :]
    return torch.cat([torch.cos(arg), torch.sin(arg)], 1).float()


def model(p, x, t, y):
    C = p["inp.w"].shape[0]

    def gn(k, x):
        return F.group_norm(x, 8, p[k + ".w"], p[k + ".b"], 1e-5)

    def cv(k, x, stride=1):
        w = p[k + ".w"]
        return F.conv2d(x, w, p[k + ".b"], stride=stride, padding=(w.shape[2] - 1) // 2)

    def res(k, x, emb):
        h = cv(k + ".c1", F.silu(gn(k + ".n1", x)))
        h = h + F.linear(emb, p[k + ".e.w"], p[k + ".e.b"])[:, :, None, None]
        h = cv(k + ".c2", F.silu(gn(k + ".n2", h)))
        return h + (cv(k + ".skip", x) if k + ".skip.w" in p else x)

    te = timestep_embedding(t * 1000, C)
    emb = F.linear(F.silu(F.linear(te, p["t1.w"], p["t1.b"])), p["t2.w"], p["t2.b"]) + F.embedding(y, p["cls.w"])
    emb = F.silu(emb)
    h1 = res("d1", cv("inp", x), emb)
    h2 = res("d2", cv("down1", h1, 2), emb)
    m = res("mid", cv("down2", h2, 2), emb)
    u = res("u2", torch.cat([F.interpolate(m, scale_factor=2, mode="nearest"), h2], 1), emb)
    u = res("u1", torch.cat([F.interpolate(u, scale_factor=2, mode="nearest"), h1], 1), emb)
    return cv("outc", F.silu(gn("outn", u)))


def loss_fn(p, x1, y, x0, t):
    tb = t.reshape(-1, 1, 1, 1)
    xt = x0 * (1 - tb) + x1 * tb
    return (model(p, xt, t, y) - (x1 - x0)).square().mean()


def lr_at(step, warm=100, total=500, init=2e-3, final=1e-5):
    # lm.optim.linear_warmup(100, lm.optim.cosine_decay(2e-3, 500, 1e-5))
    base = final + (init - final) * 0.5 * (1 + math.cos(math.pi * min(step - 1, total) / total))
    return base * step / warm if step <= warm else base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("steps", nargs="?", type=int, default=12)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (default: every core)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.set_num_threads(a.threads or os.cpu_count() or 1)   # Lumen's pool uses every core too
    # f32 throughout, as Lumen computes (CUDA would round convs to TF32 by default)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    init = load_safetensors(os.path.join(a.dir, "init.safetensors"))
    p = {k[len("param."):]: v.to(dev).requires_grad_(True) for k, v in init.items() if k.startswith("param.")}
    bt = load_safetensors(os.path.join(a.dir, "batches.safetensors"))
    B = bt["x1.1"].shape[0]
    batches = [(bt[f"x1.{s}"].to(dev), (bt[f"y.{s}"] - 1).to(dev), bt[f"x0.{s}"].to(dev), bt[f"t.{s}"].to(dev))
               for s in range(1, a.steps + 1)]
    names = sorted(p)
    opt = torch.optim.AdamW([p[k] for k in names], lr=2e-3, weight_decay=0.0)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    losses = []
    for s in range(1, a.steps + 1):
        if s == WARM + 1:
            sync()
            t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        opt.zero_grad()
        loss = loss_fn(p, *batches[s - 1])
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p[k] for k in names], 1.0)
        opt.step()
        losses.append(loss.item())
    sync()
    rate = (a.steps - WARM) * B / (time.perf_counter() - t0)
    threads = torch.get_num_threads()
    peer = f"torch-{a.device}" + (f"-{threads}t" if dev.type == "cpu" else "")
    print(f"PEER train_flow_unet_w16_b32 {peer} {rate:.4g} ex/s")
    mine = os.path.join(a.dir, "losses_lumen.txt")
    if os.path.exists(mine):
        lum = [float(line.split()[1]) for line in open(mine)]
        n = min(len(lum), len(losses))
        rel = [abs(lum[i] - losses[i]) / abs(losses[i]) for i in range(n)]
        print("INFO losses (step: Lumen / torch): " +
              ", ".join(f"{i + 1}: {lum[i]:.6f} / {losses[i]:.6f}" for i in range(n)))
        print(f"INFO loss agreement over {n} steps: largest relative difference {max(rel):.2e} "
              f"(step 1: {rel[0]:.2e})")
        if rel[0] > 1e-4:
            print("INFO LOSSES DISAGREE at step 1")
            raise SystemExit(1)


if __name__ == "__main__":
    main()
