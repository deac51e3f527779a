#!/usr/bin/python3
"""ops.py - single ops at a VAE decoder's and ESRGAN's shapes, Lumen on
Vulkan (bench/gpu/ops.lua) beside PyTorch CUDA on the same GPU: 3x3 and
1x1 convolutions (cuDNN, TF32 off) in f32 and f16, and GroupNorm(32) (as
GB/s: input read once, output written once).
`ops.py LUMEN_BINARY norm` times instead the normalisations at VAE, UNet and
DiT shapes (GroupNorm(32), LayerNorm, RMSNorm, softmax over the last axis),
as GB/s (x read once, y written once) from Lumen's GPU time (timestamps)
beside PyTorch's and beside the copy bandwidth measured in the same run
(torch's x.clone() of the same tensor): the ratio to it is the figure of
merit; x.sum() gives the read bandwidth.  OPS_ONLY=gn:,sm: keeps the cases
naming one of those strings.  OPS_VARIANTS="ENV=V ENV2=V;ENV=W" adds a Lumen column per variant
(settings separated by ';', an empty one is the default).
Usage: ops.py LUMEN_BINARY [quick | norm | norm-quick]"""
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
# (kind, rows, len): LayerNorm / RMSNorm over a UNet's or DiT's tokens,
# softmax over attention-score rows (24 heads x 4096 queries x 4096 keys)
ROWS = [("ln", 4096, 1280), ("ln", 16384, 640), ("rms", 4096, 1280), ("rms", 16384, 640), ("sm", 24 * 4096, 4096)]


def norm_cases(quick):
    out = []
    for dt in ("f32", "f16"):
        for (c, hw) in GNS:
            out.append(f"gn:{c}:{hw // 8 if quick else hw}:{dt}")
        for (k, r, n) in ROWS:
            out.append(f"{k}:{r // 64 if quick else r}:{n}:{dt}")
    return out


def numel(case):
    f = case.split(":")
    return int(f[1]) * int(f[2]) ** 2 if f[0] == "gn" else int(f[1]) if f[0] == "copy" else int(f[1]) * int(f[2])


def norm_torch(case, dev):
    """the PyTorch time of a norm case and of x.clone() of its input"""
    f = case.split(":")
    dt = torch.float32 if f[-1] == "f32" else torch.float16
    if f[0] == "gn":
        c, hw = int(f[1]), int(f[2])
        x = torch.randn(1, c, hw, hw, device=dev, dtype=dt)
        w, b = torch.ones(c, device=dev, dtype=dt), torch.zeros(c, device=dev, dtype=dt)
        fn = lambda: F.group_norm(x, 32, w, b, 1e-6)  # noqa: E731
    else:
        r, n = int(f[1]), int(f[2])
        x = torch.randn(r, n, device=dev, dtype=dt)
        w, b = torch.randn(n, device=dev, dtype=dt) * 0.1 + 1, torch.randn(n, device=dev, dtype=dt) * 0.1
        rms = getattr(F, "rms_norm", None) or (lambda x, s, w, e: x * torch.rsqrt((x * x).mean(-1, True) + e) * w)
        fn = {"ln": lambda: F.layer_norm(x, (n,), w, b, 1e-5), "rms": lambda: rms(x, (n,), w, 1e-6),
              "sm": lambda: torch.softmax(x, -1)}[f[0]]
    reps = 10 if numel(case) * x.element_size() > 1e8 else 50
    t = timed(fn, reps)
    cp = timed(lambda: x.clone(), reps)
    rd = timed(lambda: x.sum(), reps)
    del x
    return t, cp, rd


def run_lumen(binary, cs, extra_env):
    env = dict(os.environ, LUMEN_FALLBACK="0", **extra_env)
    p = subprocess.run([binary, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops.lua")] + cs,
                       capture_output=True, text=True, env=env)
    sys.stderr.write(p.stderr)
    lum, gpu, last = {}, {}, None
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "gpu" and last:
            gpu[last] = tuple(float(v) for v in parts[1:])
        elif len(parts) == 4:
            last = parts[0]
            lum[last] = tuple(float(v) for v in parts[1:])
    return lum, gpu, p.returncode


def lumen_stream(binary, cs, extra_env):
    """runs ops.lua over cs, yielding (case, wall, gpu) as each is timed"""
    env = dict(os.environ, LUMEN_FALLBACK="0", **extra_env)
    p = subprocess.Popen([binary, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops.lua")] + cs,
                         stdout=subprocess.PIPE, text=True, env=env)
    last = None
    for line in p.stdout:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "gpu" and last:
            yield last[0], last[1], tuple(float(v) for v in parts[1:])
        elif len(parts) == 4:
            last = (parts[0], tuple(float(v) for v in parts[1:]))
    p.wait()


def norm_main(binary, quick):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    only = os.environ.get("OPS_ONLY")
    cs = [c for c in norm_cases(quick) if not only or any(o in c for o in only.split(","))]
    variants = os.environ.get("OPS_VARIANTS", "").split(";")
    os.environ.setdefault("OPS_BATCH_S", "0.05")
    tor = {}
    for c in cs:
        tv, cp, rd = tor[c] = norm_torch(c, dev)
        print(f"{c}: PyTorch {tv[0]:.4f} ms [{tv[1]:.4f}-{tv[2]:.4f}] {gbytes(c, tv[0]):.0f} GB/s; "
              f"copy (x.clone()) {cp[0]:.4f} ms [{cp[1]:.4f}-{cp[2]:.4f}] {gbytes(c, cp[0]):.0f} GB/s; "
              f"read (x.sum()) {rd[0]:.4f} ms [{rd[1]:.4f}-{rd[2]:.4f}] {gbytes(c, rd[0]) / 2:.0f} GB/s", flush=True)
    for var in variants:
        extra = dict(kv.split("=", 1) for kv in var.split())
        print(f"== Lumen, {var or 'default'}: GPU time (timestamps) per call and wall time per evaluation", flush=True)
        for c, lv, gv in lumen_stream(binary, cs, extra):
            tv, cp, _ = tor[c]
            print(f"{c:<22} GPU {gv[0]:.4f} ms [{gv[1]:.4f}-{gv[2]:.4f}] {gbytes(c, gv[0]):5.0f} GB/s "
                  f"= {cp[0] / gv[0]:.2f}x copy, {tv[0] / gv[0]:.2f}x PyTorch; "
                  f"wall {lv[0]:.4f} ms [{lv[1]:.4f}-{lv[2]:.4f}] = {cp[0] / lv[0]:.2f}x copy", flush=True)
    if os.environ.get("OPS_COPY", "1") != "0":
        print("== Lumen x:copy() of the same elements (its own copy bandwidth)", flush=True)
        cps = sorted({f"copy:{numel(c)}:{c.split(':')[-1]}" for c in cs})
        for c, lv, gv in lumen_stream(binary, cps, {}):
            print(f"{c:<22} GPU {gv[0]:.4f} ms [{gv[1]:.4f}-{gv[2]:.4f}] {gbytes(c, gv[0]):5.0f} GB/s; "
                  f"wall {lv[0]:.4f} ms [{lv[1]:.4f}-{lv[2]:.4f}]", flush=True)
    print("ratios: time of the peer / Lumen's time for the same bytes (> 1: Lumen faster); GB/s: "
          "x read once + y written once (x.sum(): read once)")
    return 0


def gbytes(case, ms):
    """GB/s of reading x once and writing y once in ms"""
    return 2 * numel(case) * (4 if case.endswith("f32") else 2) / (ms * 1e-3) * 1e-9


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/lumen"
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    quick = mode in ("quick", "norm-quick")
    if mode.startswith("norm"):
        return norm_main(binary, quick)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cs = cases(quick)
    tor = {c: torch_time(c) for c in cs}
    lum, _, rc = run_lumen(binary, cs, {})
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
    return rc


if __name__ == "__main__":
    sys.exit(main())
