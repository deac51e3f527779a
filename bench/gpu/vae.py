#!/usr/bin/python3
"""vae.py - an SD-style VAE decoder (the diffusers AutoencoderKL decoder's
layout, written out here: conv_in 4->512; mid block of ResNet, single-head
self-attention over the 64x64 tokens of width 512, ResNet; four up blocks
of three ResNet blocks with 512, 512, 256, 128 channels, the first three
followed by nearest 2x upsampling + conv; GroupNorm(32, eps 1e-6), SiLU,
conv_out 128->3), latent 1x4x64x64 -> image 1x3x512x512, in PyTorch CUDA
and in Lumen on Vulkan (bench/gpu/vae.lua) on the same GPU, f32 and f16,
whole model and per stage, with the outputs compared.

Random weights are made here (seeded) and saved as safetensors under the
diffusers names (decoder.mid_block.attentions.0.to_q.weight, ...); Lumen
loads that file, moves the weights to the GPU and runs the compiled graph
with LUMEN_FALLBACK=0 (no op may fall back to the CPU).
Usage: vae.py LUMEN_BINARY [quick]   (quick: an 8x8 latent, a smoke run)
Times: median of 5 batches of repetitions (each batch >= 0.3 s where the
clock is coarse), with the spread (min-max of the batches)."""
import os, subprocess, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-6
CH = (512, 512, 256, 128)          # up blocks, in order of use


class Resnet(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin, eps=EPS)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(32, cout, eps=EPS)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return x + h


def sdpa(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v)
    # an older torch (a local smoke run)
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, -1) @ v


class Attention(nn.Module):
    """diffusers' Attention with one head of width C over the H*W tokens,
    a residual connection, rescale factor 1"""
    def __init__(self, c):
        super().__init__()
        self.group_norm = nn.GroupNorm(32, c, eps=EPS)
        self.to_q, self.to_k, self.to_v = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.group_norm(x).view(b, c, h * w).transpose(1, 2)
        q, k, v = (f(t).view(b, 1, h * w, c) for f in (self.to_q, self.to_k, self.to_v))
        o = sdpa(q, k, v).reshape(b, h * w, c)
        o = self.to_out[0](o).transpose(1, 2).reshape(b, c, h, w)
        return x + o


class Mid(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(c, c), Resnet(c, c)])
        self.attentions = nn.ModuleList([Attention(c)])


class Upsampler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Up(nn.Module):
    def __init__(self, cin, cout, up):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(cin if i == 0 else cout, cout) for i in range(3)])
        self.upsamplers = nn.ModuleList([Upsampler(cout)]) if up else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(4, CH[0], 3, padding=1)
        self.mid_block = Mid(CH[0])
        self.up_blocks = nn.ModuleList(
            [Up(CH[max(i - 1, 0)], CH[i], i < len(CH) - 1) for i in range(len(CH))])
        self.conv_norm_out = nn.GroupNorm(32, CH[-1], eps=EPS)
        self.conv_out = nn.Conv2d(CH[-1], 3, 3, padding=1)

    def stages(self):
        """(name, fn) in order; each takes the previous stage's output"""
        m = self.mid_block
        st = [("conv_in", self.conv_in), ("mid.resnet0", m.resnets[0]), ("mid.attention", m.attentions[0]),
              ("mid.resnet1", m.resnets[1])]
        st += [(f"up{i}", u) for i, u in enumerate(self.up_blocks)]
        st.append(("out", lambda x: self.conv_out(F.silu(self.conv_norm_out(x)))))
        return st

    def forward(self, z):
        for _, f in self.stages():
            z = f(z)
        return z


def make(seed=0):
    torch.manual_seed(seed)
    dec = Decoder()
    with torch.no_grad():
        for mod in dec.modules():   # non-trivial norm affines, so they are tested
            if isinstance(mod, nn.GroupNorm):
                mod.weight.copy_(1 + 0.1 * torch.randn_like(mod.weight))
                mod.bias.copy_(0.1 * torch.randn_like(mod.bias))
    return dec.eval()


def save_file(tensors, path):
    """safetensors.torch.save_file; where the package is missing (a local
    smoke run) the same format written here, f32 tensors only"""
    try:
        from safetensors.torch import save_file as st_save
        return st_save(tensors, path)
    except ImportError:
        import json, struct
        head, blobs, off = {}, [], 0
        for k, t in tensors.items():
            b = t.detach().float().contiguous().numpy().tobytes()
            head[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b); off += len(b)
        h = json.dumps(head).encode(); h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def timed(fn, reps):
    """median and spread (ms) of 5 batches of reps calls (synchronised
    wall clock: the same measure as Lumen's)"""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn(); sync()
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        per.append((time.perf_counter() - t0) * 1e3 / reps)
    per.sort()
    return per[2], per[0], per[-1]


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/lumen"
    quick = len(sys.argv) > 2 and sys.argv[2] == "quick"
    hw = 8 if quick else 64
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tmp = os.environ.get("VAE_DIR", "/tmp")
    wpath, iopath = f"{tmp}/vae_weights.safetensors", f"{tmp}/vae_io.safetensors"
    dec = make()
    sd = {"decoder." + k: v.contiguous() for k, v in dec.state_dict().items()}
    save_file(sd, wpath)
    g = torch.Generator().manual_seed(1)
    z = torch.randn(1, 4, hw, hw, generator=g)
    dev = "cuda" if torch.cuda.is_available() else "cpu"   # cpu: a local smoke run
    res = {}
    io = {"latent": z}
    # on the CPU (a local smoke run) f32 only, timed once
    dts = (("f32", torch.float32), ("f16", torch.float16)) if dev == "cuda" else (("f32", torch.float32),)
    for name, dt in dts:
        m = make().to(dev, dt)
        x = z.to(dev, dt)
        with torch.no_grad():
            y = m(x)
            io[f"out_{name}"] = y.float().cpu()
            res[f"{name}_total"] = timed(lambda: m(x), 3 if dev == "cuda" else 1)
            h = x
            for sname, f in m.stages():
                res[f"{name}_{sname}"] = timed(lambda: f(h), 5 if dev == "cuda" else 1)
                h = f(h)
    save_file(io, iopath)
    ref = io["out_f32"]
    if "out_f16" in io:
        res["f16_vs_f32_maxabs"] = ((io["out_f16"] - ref).abs().max().item(),)
    env = dict(os.environ, LUMEN_FALLBACK="0")
    t0 = time.time()
    p = subprocess.run([binary, os.path.join(os.path.dirname(os.path.abspath(__file__)), "vae.lua"), wpath, iopath],
                       capture_output=True, text=True, env=env)
    sys.stderr.write(p.stderr)
    lum = {}
    for line in p.stdout.splitlines():
        print("lumen:", line) if line.startswith("#") else None
        parts = line.split()
        if len(parts) >= 2 and not line.startswith("#"):
            try:
                lum[parts[0]] = tuple(float(v) for v in parts[1:])
            except ValueError:
                print("lumen:", line)
    print(f"(Lumen run: {time.time() - t0:.1f} s, exit {p.returncode})")
    print("PyTorch:", torch.__version__, torch.cuda.get_device_name(0) if dev == "cuda" else dev, "TF32 off")
    print(f"VAE decoder {hw}x{hw} -> {hw * 8}x{hw * 8}, ms: median [min-max of 5 batches]")
    print(f"{'stage':<20}{'Lumen':>24}{'PyTorch':>24}{'ratio':>8}")
    for k, v in res.items():
        if k.endswith("maxabs"):
            continue
        tv, tlo, thi = v
        lv = lum.get(k)
        ls = f"{lv[0]:.2f} [{lv[1]:.2f}-{lv[2]:.2f}]" if lv else "-"
        r = f"{tv / lv[0]:.2f}" if lv and lv[0] > 0 else "-"
        print(f"{k:<20}{ls:>24}{f'{tv:.2f} [{tlo:.2f}-{thi:.2f}]':>24}{r:>8}")
    print(f"max abs vs PyTorch f32 output: PyTorch f16 {res.get('f16_vs_f32_maxabs', (float('nan'),))[0]:.3g}, "
          f"Lumen f32 {lum.get('f32_maxabs', (float('nan'),))[0]:.3g}, "
          f"Lumen f16 {lum.get('f16_maxabs', (float('nan'),))[0]:.3g}; "
          f"output max |y| {ref.abs().max().item():.3g}")
    print("ratio: PyTorch time / Lumen time (> 1: Lumen faster)")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
