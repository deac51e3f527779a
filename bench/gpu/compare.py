#!/usr/bin/python3
"""compare.py - runs the same benchmarks in PyTorch CUDA and sets Lumen's
figures (vkbench output, read from a file or run here) beside them with the
ratio Lumen/PyTorch (for times: PyTorch/Lumen, so > 1 is always better).
Every figure is the median of 7 runs after a warm-up, with the min-max
range; a figure whose range exceeds 15% of its median is flagged.
Usage: compare.py VKBENCH_BINARY [quick|fused|fused-quick|nn|nn-quick]
(fused: only the compiled/uncompiled elementwise chains and the copy;
nn: conv2d 3x3 128->128 and attention B=1 H=24 D=128)"""
import re, subprocess, sys, time

SPREAD = 0.15    # a figure whose (max - min) / median exceeds this is flagged


class T(float):
    """a time: the median of repeated runs (the float) with their min and max"""
    def __new__(cls, med, lo, hi):
        t = float.__new__(cls, med)
        t.lo, t.hi = lo, hi
        return t


def best(fn, reps=7):
    """the median wall time of reps synchronised calls (with min and max),
    after a warm-up as long as vkbench's (0.5 s: the GPU clock ramps up)"""
    import torch
    fn(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        fn(); torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return T(ts[len(ts) // 2], ts[0], ts[-1])


def fig(value, t, unit):
    """(median, lo, hi, unit) of a figure computed from a T: a rate is
    value / t (its low end from the slowest run), a time is value * t"""
    if unit in ("ms", "us/node"):
        return (value * t, value * t.lo, value * t.hi, unit)
    return (value / t, value / t.hi, value / t.lo, unit)

def torch_figures(quick, fused_only=False):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    out = {}

    for name, dt in () if fused_only else (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        for n in ((256,) if quick else (1024, 2048, 4096, 8192)):
            a = torch.randn(n, n, device=dev, dtype=dt); b = torch.randn(n, n, device=dev, dtype=dt)
            out[f"matmul_{name}_{n}"] = fig(2 * n ** 3 * 1e-12, best(lambda: a @ b), "TFLOP/s")
    n = (1 << 20) if quick else (256 << 20)
    x = torch.randn(n, device=dev); y = torch.randn(n, device=dev)
    gb = n * 4 * 1e-9
    m = n >> 20
    out[f"copy_f32_{m}M"] = fig(2 * gb, best(lambda: x.clone()), "GB/s")
    if not fused_only:
        out[f"add_f32_{m}M"] = fig(3 * gb, best(lambda: x + y), "GB/s")
        gelu = torch.nn.functional.gelu
        out[f"gelu_f32_{m}M"] = fig(2 * gb, best(lambda: gelu(x)), "GB/s")
        out[f"chain_f32_{m}M"] = fig(1e3, best(lambda: (-x.abs()).exp() * 0.5 + x.tanh()), "ms")
    # fused chains: effective GB/s = inputs read once + output written once;
    # PyTorch eager runs them op by op (the same figure faces Lumen's
    # compiled and uncompiled runs)
    F = torch.nn.functional
    u = torch.randn(n, device=dev)
    chains = {
        "gelu_chain": (3, lambda: F.gelu(x * y + u, approximate="tanh") * y),
        "swiglu": (2, lambda: F.silu(x) * y),
        "chain10": (1, lambda: F.silu(x.sin().exp().neg().tanh().abs().sqrt().sigmoid().square()).cos()),
    }
    for name, (nin, fn) in chains.items():
        v = fig((nin + 1) * gb, best(fn), "GB/s")
        out[f"fused_{name}_{m}M"] = v
        out[f"unfused_{name}_{m}M"] = v
    del u
    if fused_only:
        out["device"] = (torch.cuda.get_device_name(0) + ", torch " + torch.__version__, "")
        return out
    z = torch.zeros(16, device=dev)
    def chain():
        a = z
        for _ in range(10000):
            a = a + 1.0
        return a
    out["overhead_10000"] = fig(1e6 / 10000, best(chain), "us/node")
    out["device"] = (torch.cuda.get_device_name(0) + ", torch " + torch.__version__, "")
    return out

def torch_nn_figures(quick):
    import torch
    F = torch.nn.functional
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    out = {}

    hw = 64 if quick else 512
    for name, dt in (("f32", torch.float32), ("f16", torch.float16)):
        x = torch.randn(1, 128, hw, hw, device=dev, dtype=dt)
        w = torch.randn(128, 128, 3, 3, device=dev, dtype=dt)
        b = torch.randn(128, device=dev, dtype=dt)
        out[f"conv3x3_{name}_{hw}"] = fig(1e3, best(lambda: F.conv2d(x, w, b, padding=1)), "ms")
    L = 256 if quick else 4096
    for name, dt, causal in (("f32", torch.float32, False), ("f16", torch.float16, False),
                             ("f16", torch.float16, True)):
        q, k, v = (torch.randn(1, 24, L, 128, device=dev, dtype=dt) for _ in range(3))
        key = f"attn{'_causal' if causal else ''}_{name}_{L}"
        out[key] = fig(1e3, best(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), "ms")
    out["device"] = (torch.cuda.get_device_name(0) + ", torch " + torch.__version__, "")
    return out

def lumen_figures(binary, quick, only=None):
    import os
    args = [binary] + (["quick"] if quick else [])
    env = dict(os.environ, VKBENCH_ONLY=only) if only else None
    res = {}
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("#"):
            print(line)
    sys.stderr.write(p.stderr)
    for line in p.stdout.splitlines():
        parts = line.split()
        if line.startswith("#"):
            continue
        if parts and parts[0] == "device":
            res["device"] = (line[7:], "")
        elif len(parts) >= 4 and parts[2].startswith("["):
            # "name median [a-b] unit": a-b the figure at the slowest and fastest run
            num = r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
            a, b = re.fullmatch(r"\[" + num + "-" + num + r"\]", parts[2]).groups()
            lo, hi = sorted((float(a), float(b)))
            res[parts[0]] = (float(parts[1]), lo, hi, " ".join(parts[3:]))
        elif len(parts) >= 3:
            v = float(parts[1])
            res[parts[0]] = (v, v, v, " ".join(parts[2:]))
    return res, p.returncode

def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/bench/vkbench"
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    quick = mode in ("quick", "fused-quick", "nn-quick")
    fused = mode in ("fused", "fused-quick")
    nn = mode in ("nn", "nn-quick")
    lum, rc = lumen_figures(binary, quick, "fused" if fused else "nn" if nn else None)
    tor = torch_nn_figures(quick) if nn else torch_figures(quick, fused)
    print("Lumen (Vulkan):", lum.get("device", ("?", ""))[0])
    print("PyTorch (CUDA):", tor["device"][0])
    print(f"{'benchmark':<22}{'Lumen median [min-max]':>30}{'PyTorch median [min-max]':>30}  {'unit':<9}{'ratio':>7}")
    flagged = 0

    def cell(f):
        return f"{f[0]:.4g} [{f[1]:.4g}-{f[2]:.4g}]"

    def wide(f):
        return f[0] > 0 and (f[2] - f[1]) / f[0] > SPREAD

    for k, tf in tor.items():
        if k == "device":
            continue
        unit = tf[3]
        lf = lum.get(k)
        if lf is None:
            print(f"{k:<22}{'-':>30}{cell(tf):>30}  {unit:<9}{'-':>7}")
            continue
        lower_better = unit in ("ms", "us/node")
        lv, tv = lf[0], tf[0]
        ratio = (tv / lv if lower_better else lv / tv) if lv and tv else 0
        flag = " spread > 15%: " + ",".join(n for n, f in (("Lumen", lf), ("PyTorch", tf)) if wide(f)) \
            if wide(lf) or wide(tf) else ""
        flagged += bool(flag)
        print(f"{k:<22}{cell(lf):>30}{cell(tf):>30}  {unit:<9}{ratio:>7.2f}{flag}")
    print("ratio: Lumen relative to PyTorch (medians), > 1 means Lumen is faster")
    print(f"{flagged} figure(s) with a spread over 15% of the median (run again before quoting them)")
    return rc

if __name__ == "__main__":
    sys.exit(main())
