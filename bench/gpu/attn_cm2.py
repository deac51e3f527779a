#!/usr/bin/python3
"""attn_cm2.py - the cooperative-matrix-2 flash attention (nn_attn_cm2*,
backends/vulkan/nn_attn_fa.c) beside the KHR kernel it is tried before
(LUMEN_VK_ATTN_CM2=0) and PyTorch's scaled_dot_product_attention on CUDA in
the same run: vkbench VKBENCH_ONLY=attn as attn_khr.py runs it, medians of
9 [min-max], ratio = SDPA / Lumen (> 1: Lumen faster).  The sweep: L 1024,
4096, 8192, D 64 and 128, f16 and bf16, causal and not (B 1, H 24), and
Z-Image's joint sequence (B 1, H 30, L 4224, D 128); then the kernel's
other tiles (LUMEN_VK_ATTN_CM2=<tile>) on a few shapes.
Usage: attn_cm2.py VKBENCH_BINARY [sweep|tiles|both] [tiles,...]
(the tiles other than the default are built by `make VK_BENCH_TILES=1`)"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_khr  # noqa: E402

SWEEP = [(1, 24, L, D, dt, c) for dt in ("f16", "bf16") for D in (64, 128) for L in (1024, 4096, 8192)
         for c in (False, True)]
SWEEP += [(1, 30, 4224, 128, "bf16", False), (1, 30, 4224, 128, "f16", False)]
FEW = [(1, 24, 4096, 128, "f16", False), (1, 24, 4096, 128, "f16", True), (1, 24, 4096, 64, "f16", False),
       (1, 30, 4224, 128, "bf16", False)]
TILES = "q128,c32,c128,q128c128,q32"


def table(shapes, variants):
    lum = {}
    for n, env in variants:
        print(f"--- Lumen variant {n} {env}", flush=True)
        lum[n] = attn_khr.lumen(sys.argv[1], False, env, shapes)
    tor = attn_khr.torch_figures(False, shapes)
    print(f"{'shape':<34}{'SDPA ms':>22}" + "".join(f"{n + ' ms':>26}{'ratio':>7}" for n, _ in variants))
    for s in shapes:
        k = attn_khr.key(s)
        tm, tlo, thi = tor[k]
        row = f"{k:<34}{tm:>9.3f} ({tlo:.3f}-{thi:.3f})"
        for n, _ in variants:
            r = lum[n].get(k)
            row += f"{r[0]:>12.3f} ({r[1]:.3f}-{r[2]:.3f}){tm / r[0]:>7.2f}" if r and r[0] > 0 else f"{'-':>26}{'-':>7}"
        print(row, flush=True)
    print("medians of 9 [min-max]; ratio = SDPA / Lumen (> 1: Lumen faster)")


if __name__ == "__main__":
    what = sys.argv[2] if len(sys.argv) > 2 else "both"
    if what in ("sweep", "both"):
        table(SWEEP, [("cm2", {}), ("khr", {"LUMEN_VK_ATTN_CM2": "0"})])
    if what in ("tiles", "both"):
        tiles = (sys.argv[3] if len(sys.argv) > 3 else TILES).split(",")
        table(FEW, [("cm2", {})] + [(t, {"LUMEN_VK_ATTN_CM2": t}) for t in tiles])
