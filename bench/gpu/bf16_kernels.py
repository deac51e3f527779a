#!/usr/bin/python3
"""bf16_kernels.py - the bf16 tensor-core kernels (VK_KHR_shader_bfloat16:
nn_attn_khr*_bf, matmul_coop_khr_bf_*) beside the paths they replace
(LUMEN_VK_BF16=0: bf16 attention on the SIMT kernel, bf16 GEMM through
scaled f16 copies) and PyTorch CUDA in the same run: attention as
attn_khr.py measures it (vkbench VKBENCH_ONLY=attn, SDPA; medians of 9
[min-max]) and square GEMMs as mm_peer.py (vkbench VKBENCH_ONLY=mm,
torch.matmul; medians of 7 [min-max]), f16 alongside for comparison.
Usage: bf16_kernels.py VKBENCH_BINARY [attn|mm|both]"""
import os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_khr  # noqa: E402

ATTN = [(1, 24, L, D, dt, c) for dt in ("bf16", "f16") for D in (64, 128) for L in (1024, 4096)
        for c in (False, True)]
ATTN += [(1, 30, 4224, 128, "bf16", False), (1, 30, 4224, 128, "f16", False)]   # Z-Image's joint sequence


def attn(binary):
    variants = [("bf16-native", {}), ("before", {"LUMEN_VK_BF16": "0"})]
    lum = {n: attn_khr.lumen(binary, False, env, ATTN) for n, env in variants}
    tor = attn_khr.torch_figures(False, ATTN)
    print(f"{'shape':<34}{'SDPA ms':>22}" + "".join(f"{n + ' ms':>26}{'ratio':>7}" for n, _ in variants))
    for s in ATTN:
        k = attn_khr.key(s)
        tm, tlo, thi = tor[k]
        row = f"{k:<34}{tm:>9.3f} ({tlo:.3f}-{thi:.3f})"
        for n, _ in variants:
            r = lum[n].get(k)
            row += f"{r[0]:>12.3f} ({r[1]:.3f}-{r[2]:.3f}){tm / r[0]:>7.2f}" if r and r[0] > 0 else f"{'-':>26}{'-':>7}"
        print(row, flush=True)


def mm(binary):
    sizes = os.environ.get("BF16_MM_SIZES", "2048,4096,8192")
    for name, env in (("bf16-native", {}), ("before", {"LUMEN_VK_BF16": "0"})):
        print(f"--- Lumen {name}", flush=True)
        e = dict(os.environ, VKBENCH_ONLY="mm", VKBENCH_SIZES=sizes,
                 VKBENCH_DTYPE="bf16" if name == "before" else "bf16,f16", **env)
        p = subprocess.run([binary], capture_output=True, text=True, env=e)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr[-2000:])
    print("--- PyTorch", flush=True)
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mm_peer.py"),
                    "bf16,f16", sizes])


if __name__ == "__main__":
    b = sys.argv[1]
    what = sys.argv[2] if len(sys.argv) > 2 else "both"
    if what in ("attn", "both"):
        attn(b)
    if what in ("mm", "both"):
        mm(b)
