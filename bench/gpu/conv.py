#!/usr/bin/python3
"""conv.py - the convolutions of issue 25 on the GPU: Lumen on Vulkan
(bench/gpu/conv.lua, GPU time by timestamps) beside PyTorch cuDNN in the
same run (CUDA events around 10 calls, 5 times; NCHW and channels-last,
the faster is the peer; TF32 off for f32).  Cases (conv:N:CIN:COUT:HW:K:DT,
stride 1, 'same' padding, bias): the SD 1.5 UNet's convs at CFG batch 2 and
512x512 (3x3 at 1280/8x8, 1280/16x16, 2560->1280/8x8, 640/32x32,
320/64x64; 1x1 at the same sizes), the issue's f16 3x3 128->128 at 512x512,
the SD VAE decoder's 512-channel 3x3 at 64x64 and 128x128, ESRGAN's
dense-block convs in f32.  Medians with [min-max], TFLOP/s
(2*N*COUT*CIN*K*K*HW*HW per call) and the ratio PyTorch time / Lumen time
(> 1: Lumen faster).
Usage: conv.py LUMEN [LUMEN_BEFORE]  (LUMEN_BEFORE: the same cases with an
older build, default settings).  CONV_VARIANTS="ENV=V ENV2=W;ENV=X" adds a
Lumen column per setting (';' between, an empty one is the default;
BIN=path runs another binary);
CONV_CASES=a,b replaces the cases; CONV_TORCH=0 leaves PyTorch out.
The f32 cases run once more with LUMEN_VK_CONV_F32=winograd (the Winograd
F(2x2,3x3) path, 3x3 only) in a column of their own, with the ratio to
the default's time (> 1: Winograd faster); CONV_WINO=0 leaves it out.
CONV_CHECK=1 (conv.lua) adds each run's NMSE against the CPU's f32 conv."""
import os, subprocess, sys

CASES = ["conv:2:1280:1280:8:3:f16", "conv:2:1280:1280:16:3:f16", "conv:2:2560:1280:8:3:f16",
         "conv:2:640:640:32:3:f16", "conv:2:320:320:64:3:f16", "conv:2:1280:1280:8:1:f16",
         "conv:2:1280:1280:16:1:f16", "conv:2:640:640:32:1:f16", "conv:2:320:320:64:1:f16",
         "conv:2:2560:1280:8:1:f16", "conv:1:128:128:512:3:f16", "conv:1:512:512:64:3:f16", "conv:1:512:512:128:3:f16",
         "conv:1:64:32:128:3:f32", "conv:1:192:64:128:3:f32", "conv:1:192:32:256:3:f32", "conv:1:64:64:256:3:f32"]


def parse(case):
    f = case.split(":")
    return int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5]), f[6]


def tflops(case, ms):
    n, ci, co, hw, k, _ = parse(case)
    return 2.0 * n * co * ci * k * k * hw * hw / (ms * 1e-3) * 1e-12


def torch_time(case):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    n, ci, co, hw, k, dt = parse(case)
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}.get(dt, torch.float32)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, ci, hw, hw, device="cuda", dtype=dt, generator=g)
    w = torch.randn(co, ci, k, k, device="cuda", dtype=dt, generator=g) / (ci * k * k) ** 0.5
    b = torch.randn(co, device="cuda", dtype=dt, generator=g)
    best = None
    for layout in ("nchw", "nhwc"):
        mf = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        xx, ww = x.contiguous(memory_format=mf), w.contiguous(memory_format=mf)
        fn = lambda: F.conv2d(xx, ww, b, padding=k // 2)  # noqa: E731
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        per = []
        for _ in range(5):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(10):
                fn()
            e1.record()
            torch.cuda.synchronize()
            per.append(e0.elapsed_time(e1) / 10)
        per.sort()
        t = (per[2], per[0], per[4], layout)
        if best is None or t[0] < best[0]:
            best = t
    return best


def run_lumen(binary, cases, extra):
    env = dict(os.environ, LUMEN_FALLBACK="0", **extra)
    lua = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv.lua")
    p = subprocess.run([binary, lua] + cases, capture_output=True, text=True, env=env)
    sys.stderr.write(p.stderr[-2000:])
    out, nmse = {}, {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 5 and f[1] == "gpu":
            out[f[0]] = tuple(float(v) for v in f[2:])
        if len(f) == 3 and f[1] == "nmse":
            nmse[f[0]] = f[2]
    return out, nmse


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/lumen"
    before = sys.argv[2] if len(sys.argv) > 2 else None
    cases = os.environ.get("CONV_CASES", "").split(",") if os.environ.get("CONV_CASES") else CASES
    tor = {}
    if os.environ.get("CONV_TORCH", "1") != "0":
        for c in cases:
            tor[c] = torch_time(c)
            t = tor[c]
            print(f"{c:<28} PyTorch {t[3]} {t[0]:.4f} ms [{t[1]:.4f}-{t[2]:.4f}] {tflops(c, t[0]):6.1f} TFLOP/s",
                  flush=True)
    runs = []
    if before:
        runs.append(("before", before, {}, cases))
    for var in os.environ.get("CONV_VARIANTS", "").split(";"):
        extra = dict(kv.split("=", 1) for kv in var.split())
        runs.append((var or "default", extra.pop("BIN", binary), extra, cases))
    # the Winograd path beside the default, for the f32 3x3 cases
    wino = [c for c in cases if parse(c)[5] == "f32" and parse(c)[4] == 3]
    if wino and os.environ.get("CONV_WINO", "1") != "0":
        runs.append(("winograd (LUMEN_VK_CONV_F32=winograd)", binary, {"LUMEN_VK_CONV_F32": "winograd"}, wino))
    base = {}
    for name, b, extra, cs in runs:
        print(f"== Lumen {name}: GPU time per call", flush=True)
        res, nmse = run_lumen(b, cs, extra)
        if name == "default":
            base = res
        for c in cs:
            v = res.get(c)
            if not v:
                print(f"{c:<28} -", flush=True)
                continue
            r = f"{tor[c][0] / v[0]:.2f}x" if c in tor else "-"
            d = f"  default/this {base[c][0] / v[0]:.2f}x" if name != "default" and c in base else ""
            e = f"  nmse {nmse[c]}" if c in nmse else ""
            print(f"{c:<28} {v[0]:.4f} ms [{v[1]:.4f}-{v[2]:.4f}] {tflops(c, v[0]):6.1f} TFLOP/s  PyTorch/Lumen {r}{d}{e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
