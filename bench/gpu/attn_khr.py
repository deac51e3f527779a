#!/usr/bin/python3
"""attn_khr.py - attention over B, H, L, D, dtype and causal in Lumen on
Vulkan (vkbench with VKBENCH_ATTN_SHAPES) beside PyTorch's
scaled_dot_product_attention on CUDA, same GPU, same run: medians of 9
evaluations and their min-max, for each Lumen variant (an environment
setting: the KHR tensor-core kernel by default, the previous kernels with
LUMEN_VK_ATTN_KHR=0, tiles with LUMEN_VK_ATTN_KHR=<tile>), and the ratio
PyTorch / Lumen of the medians (> 1: Lumen faster).
Usage: attn_khr.py VKBENCH_BINARY [quick] [variants: name=tile[+VAR=value],...]
(the tiles are in lumen-spirv.bin only after `make VK_BENCH_TILES=1`)
(ATTN_KHR_FEW=1: four f16 shapes only)"""
import os, subprocess, sys, time

# (B, H, L, D, dtype, causal): the issue's sweep, then SD 1.5's self-attention
# (head dim 40 as it is and padded to 64)
SHAPES = [(1, 24, L, D, dt, c) for dt in ("f16", "bf16", "f32") for D in (64, 128)
          for L in (1024, 4096) for c in (False, True)]
SHAPES += [(2, 8, 4096, 64, "f16", False), (2, 8, 4096, 40, "f16", False)]
TILE_SHAPES = [s for s in SHAPES if s[4] == "f16"]
if os.environ.get("ATTN_KHR_FEW"):   # the tiles on a few shapes only
    TILE_SHAPES = [(1, 24, 4096, 128, "f16", False), (1, 24, 4096, 64, "f16", False),
                   (1, 24, 4096, 128, "f16", True), (2, 8, 4096, 40, "f16", False)]
    SHAPES = TILE_SHAPES


def key(s):
    B, H, L, D, dt, c = s
    k = f"attn{'_causal' if c else ''}_{dt}_d{D}_{L}"
    return k if (B, H) == (1, 24) else k + f"_b{B}h{H}"


def lumen(binary, quick, env_extra, shapes):
    spec = ",".join(f"{B}:{H}:{L}:{D}:{dt}:{int(c)}" for B, H, L, D, dt, c in shapes)
    env = dict(os.environ, VKBENCH_ONLY="attn", VKBENCH_ATTN_SHAPES=spec, **env_extra)
    p = subprocess.run([binary] + (["quick"] if quick else []), capture_output=True, text=True, env=env)
    sys.stderr.write(p.stderr[-3000:])
    res = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if line.startswith("# attn"):
            res.setdefault(parts[1].rstrip(":"), [0, 0, 0])[1:] = [float(parts[3]), float(parts[5])]
            print("  " + line)
        elif line.startswith("attn"):
            res.setdefault(parts[0], [0, 0, 0])[0] = float(parts[1])
        elif line.startswith("device"):
            print("Lumen (Vulkan):", line[7:])
    return res


def torch_figures(quick, shapes):
    import torch
    F = torch.nn.functional
    dts = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    out = {}
    for s in shapes:
        B, H, L, D, dt, causal = s
        L = L // 16 if quick else L
        q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=dts[dt]) for _ in range(3))
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fn(); torch.cuda.synchronize()
        ts = []
        for _ in range(9):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            fn(); torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        out[key(s)] = (ts[4] * 1e3, ts[0] * 1e3, ts[-1] * 1e3)
    print("PyTorch (CUDA):", torch.cuda.get_device_name(0) + ", torch " + torch.__version__)
    return out


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/bench/vkbench"
    quick = len(sys.argv) > 2 and sys.argv[2] == "quick"
    variants = [("khr", {}, SHAPES), ("old", {"LUMEN_VK_ATTN_KHR": "0"}, TILE_SHAPES)]
    extra = sys.argv[3] if len(sys.argv) > 3 else os.environ.get("ATTN_KHR_VARIANTS", "")
    for item in filter(None, extra.split(",")):   # name=tile[+VAR=value...]
        n, v = item.split("=", 1)
        v, *more = v.split("+")
        variants.append((n, dict([("LUMEN_VK_ATTN_KHR", v)] + [m.split("=", 1) for m in more]), TILE_SHAPES))
    lum = {}
    for name, env, shapes in variants:
        print(f"--- Lumen variant {name} {env}", flush=True)
        lum[name] = lumen(binary, quick, env, shapes)
    tor = torch_figures(quick, SHAPES)
    print(f"{'shape':<30}{'PyTorch ms':>22}" + "".join(f"{n + ' ms':>24}{'ratio':>7}" for n, _, _ in variants))
    for s in SHAPES:
        k = key(s)
        tm, tlo, thi = tor[k]
        row = f"{k:<30}{tm:>9.3f} ({tlo:.3f}-{thi:.3f})"
        for name, _, _ in variants:
            r = lum[name].get(k)
            if r and r[0] > 0:
                row += f"{r[0]:>10.3f} ({r[1]:.3f}-{r[2]:.3f}){tm / r[0]:>7.2f}"
            else:
                row += f"{'-':>24}{'-':>7}"
        print(row)
    print("medians of 9 [min-max]; ratio = PyTorch / Lumen (> 1: Lumen faster)")


if __name__ == "__main__":
    main()
