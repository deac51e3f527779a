#!/usr/bin/python3
"""ops.py - single ops at a VAE decoder's and ESRGAN's shapes, Lumen on
Vulkan (bench/gpu/ops.lua) beside PyTorch CUDA on the same GPU: 3x3 and
1x1 convolutions (cuDNN, TF32 off) in f32 and f16, and GroupNorm(32) (as
GB/s: input read once, output written once).
Usage: ops.py LUMEN_BINARY [quick]"""
import os, subprocess, sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vae import timed  # noqa: E402

# (Cin, Cout, HW, K): the VAE decoder's convs, then ESRGAN's dense blocks
CONVS = [(512, 512, 64, 3), (512, 512, 128, 3), (512, 512, 256, 3), (256, 256, 256, 3), (256, 256, 512, 3),
         (128, 128, 512, 3), (512, 256, 256, 1), (64, 32, 128, 3), (96, 32, 128, 3), (192, 64, 128, 3),
         (64, 32, 256, 3), (192, 32, 256, 3), (64, 64, 256, 3)]
GNS = [(512, 64), (512, 256), (256, 512), (128, 512)]


def cases(quick):
    out = []
    for dt in ("f32", "f16"):
        for (ci, co, hw, k) in CONVS:
            out.append(f"conv:{ci}:{co}:{hw // 8 if quick else hw}:{k}:{dt}")
        for (c, hw) in GNS:
            out.append(f"gn:{c}:{hw // 8 if quick else hw}:{dt}")
    return out


def torch_time(case):
    f = case.split(":")
    dt = torch.float32 if f[-1] == "f32" else torch.float16
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if f[0] == "conv":
        ci, co, hw, k = (int(v) for v in f[1:5])
        x = torch.randn(1, ci, hw, hw, device=dev, dtype=dt)
        w = torch.randn(co, ci, k, k, device=dev, dtype=dt) * 0.05
        b = torch.randn(co, device=dev, dtype=dt)
        return timed(lambda: F.conv2d(x, w, b, padding=k // 2), 10)
    c, hw = int(f[1]), int(f[2])
    x = torch.randn(1, c, hw, hw, device=dev, dtype=dt)
    w, b = torch.ones(c, device=dev, dtype=dt), torch.zeros(c, device=dev, dtype=dt)
    return timed(lambda: F.group_norm(x, 32, w, b, 1e-6), 10)


def measure(case, ms):
    """a figure for the table: TFLOP/s for convs, GB/s for group norm"""
    f = case.split(":")
    if f[0] == "conv":
        ci, co, hw, k = (int(v) for v in f[1:5])
        return 2 * ci * co * hw * hw * k * k / (ms * 1e-3) * 1e-12, "TFLOP/s"
    c, hw = int(f[1]), int(f[2])
    return 2 * c * hw * hw * (4 if f[-1] == "f32" else 2) / (ms * 1e-3) * 1e-9, "GB/s"


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/lumen"
    quick = len(sys.argv) > 2 and sys.argv[2] == "quick"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cs = cases(quick)
    tor = {c: torch_time(c) for c in cs}
    env = dict(os.environ, LUMEN_FALLBACK="0")
    p = subprocess.run([binary, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops.lua")] + cs,
                       capture_output=True, text=True, env=env)
    sys.stderr.write(p.stderr)
    lum = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            lum[parts[0]] = tuple(float(v) for v in parts[1:])
    print(f"{'case':<24}{'Lumen ms':>22}{'PyTorch ms':>22}{'Lumen':>10}{'PyTorch':>10}{'':<8}{'ratio':>6}")
    for c in cs:
        tv = tor[c]
        lv = lum.get(c)
        tm, unit = measure(c, tv[0])
        ls = f"{lv[0]:.3f} [{lv[1]:.3f}-{lv[2]:.3f}]" if lv else "-"
        lm = f"{measure(c, lv[0])[0]:.1f}" if lv and lv[0] > 0 else "-"
        r = f"{tv[0] / lv[0]:.2f}" if lv and lv[0] > 0 else "-"
        print(f"{c:<24}{ls:>22}{f'{tv[0]:.3f} [{tv[1]:.3f}-{tv[2]:.3f}]':>22}{lm:>10}{tm:>10.1f} {unit:<7}{r:>6}")
    print("ratio: PyTorch time / Lumen time (> 1: Lumen faster)")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
