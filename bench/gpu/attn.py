#!/usr/bin/python3
"""attn.py - attention (B=1, H=24, over L, D, dtype, causal) in Lumen on
Vulkan beside PyTorch's scaled_dot_product_attention on CUDA, same GPU, same
run: medians of 9 evaluations and their min..max, for each Lumen variant
(an environment setting: the tensor-core kernel on, and off with
LUMEN_VK_ATTN_COOP=0), the ratio PyTorch/Lumen of the medians (> 1: Lumen
faster).  Usage: attn.py VKBENCH_BINARY [quick] [reps-of-the-whole-sweep]"""
import os, subprocess, sys, time

VARIANTS = [("coop", {}), ("simt", {"LUMEN_VK_ATTN_COOP": "0"})]
# ATTN_VARIANTS="name=value[:D],...": more settings of LUMEN_VK_ATTN_COOP
# (kernel variants, for measurements), each over the first
# ATTN_VARIANT_SHAPES shapes (those of head dim D only, where given)
for item in filter(None, os.environ.get("ATTN_VARIANTS", "").split(",")):
    n, v = item.split("=")
    v, d = (v.split(":") + [""])[:2]
    VARIANTS.append((n, {"LUMEN_VK_ATTN_COOP": v, "VKBENCH_ATTN_D": d,
                         "VKBENCH_ATTN_FIRST": os.environ.get("ATTN_VARIANT_SHAPES", "8")}))

def lumen(binary, quick, env_extra):
    env = dict(os.environ, VKBENCH_ONLY="attn", **env_extra)
    p = subprocess.run([binary] + (["quick"] if quick else []), capture_output=True, text=True, env=env)
    sys.stderr.write(p.stderr)
    res, spread = {}, {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if line.startswith("# attn"):
            k = parts[1].rstrip(":")
            spread[k] = (float(parts[3]), float(parts[5]))
            print("  " + line)
        elif line.startswith("attn"):
            res[parts[0]] = float(parts[1])
        elif line.startswith("device"):
            print("Lumen (Vulkan):", line[7:])
    return res, spread

def torch_figures(quick):
    import torch
    F = torch.nn.functional
    dts = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    shapes = [(4096, 128, "f16", False), (4096, 128, "f16", True), (1024, 128, "f16", False),
              (1024, 128, "f16", True), (4096, 64, "f16", False), (4096, 64, "f16", True),
              (4096, 128, "bf16", False), (4096, 128, "f32", False)]
    out = {}
    for L, D, dt, causal in shapes:
        L = L // 16 if quick else L
        q, k, v = (torch.randn(1, 24, L, D, device="cuda", dtype=dts[dt]) for _ in range(3))
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fn(); torch.cuda.synchronize()
        ts = []
        for _ in range(9):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            fn(); torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        key = f"attn{'_causal' if causal else ''}_{dt}_d{D}_{L}"
        out[key] = (ts[4] * 1e3, ts[0] * 1e3, ts[-1] * 1e3)
    print("PyTorch (CUDA):", torch.cuda.get_device_name(0) + ", torch " + torch.__version__)
    return out

def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/bench/vkbench"
    quick = len(sys.argv) > 2 and sys.argv[2] == "quick"
    lum = {}
    for name, env in VARIANTS:
        print(f"--- Lumen variant {name} {env}")
        lum[name] = lumen(binary, quick, env)
    tor = torch_figures(quick)
    hdr = f"{'shape':<26}{'PyTorch ms':>22}" + "".join(f"{n + ' ms':>24}{'ratio':>7}" for n, _ in VARIANTS)
    print(hdr)
    for key, (tm, tlo, thi) in tor.items():
        row = f"{key:<26}{tm:>9.3f} ({tlo:.3f}-{thi:.3f})"
        for name, _ in VARIANTS:
            res, spread = lum[name]
            if key in res:
                lo, hi = spread.get(key, (0, 0))
                row += f"{res[key]:>10.3f} ({lo:.3f}-{hi:.3f}){tm / res[key]:>7.2f}"
            else:
                row += f"{'-':>24}{'-':>7}"
        print(row)
    print("medians of 9; ratio = PyTorch / Lumen (> 1: Lumen faster)")

if __name__ == "__main__":
    main()
