#!/usr/bin/python3
"""compare.py - runs the same benchmarks in PyTorch CUDA and sets Lumen's
figures (vkbench output, read from a file or run here) beside them with the
ratio Lumen/PyTorch (for times: PyTorch/Lumen, so > 1 is always better).
Usage: compare.py VKBENCH_BINARY [quick]"""
import subprocess, sys, time

def torch_figures(quick):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    out = {}

    def best(fn, reps):
        fn(); torch.cuda.synchronize()
        b = 1e30
        for _ in range(reps):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            fn(); torch.cuda.synchronize()
            b = min(b, time.perf_counter() - t0)
        return b

    for name, dt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        for n in ((256,) if quick else (1024, 2048, 4096, 8192)):
            a = torch.randn(n, n, device=dev, dtype=dt); b = torch.randn(n, n, device=dev, dtype=dt)
            t = best(lambda: a @ b, 3 if n >= 8192 else 5)
            out[f"matmul_{name}_{n}"] = (2 * n ** 3 / t * 1e-12, "TFLOP/s")
    n = (1 << 20) if quick else (256 << 20)
    x = torch.randn(n, device=dev); y = torch.randn(n, device=dev)
    gb = n * 4 * 1e-9
    m = n >> 20
    out[f"add_f32_{m}M"] = (3 * gb / best(lambda: x + y, 5), "GB/s")
    gelu = torch.nn.functional.gelu
    out[f"gelu_f32_{m}M"] = (2 * gb / best(lambda: gelu(x), 5), "GB/s")
    out[f"copy_f32_{m}M"] = (2 * gb / best(lambda: x.clone(), 5), "GB/s")
    out[f"chain_f32_{m}M"] = (1e3 * best(lambda: (-x.abs()).exp() * 0.5 + x.tanh(), 3), "ms")
    z = torch.zeros(16, device=dev)
    def chain():
        a = z
        for _ in range(10000):
            a = a + 1.0
        return a
    out["overhead_10000"] = (best(chain, 3) / 10000 * 1e6, "us/node")
    out["device"] = (torch.cuda.get_device_name(0) + ", torch " + torch.__version__, "")
    return out

def lumen_figures(binary, quick):
    args = [binary] + (["quick"] if quick else [])
    res = {}
    p = subprocess.run(args, capture_output=True, text=True)
    sys.stderr.write(p.stderr)
    for line in p.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "device":
            res["device"] = (line[7:], "")
        elif len(parts) >= 3:
            res[parts[0]] = (float(parts[1]), " ".join(parts[2:]))
    return res, p.returncode

def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/bench/vkbench"
    quick = len(sys.argv) > 2 and sys.argv[2] == "quick"
    lum, rc = lumen_figures(binary, quick)
    tor = torch_figures(quick)
    print("Lumen (Vulkan):", lum.get("device", ("?", ""))[0])
    print("PyTorch (CUDA):", tor["device"][0])
    print(f"{'benchmark':<22}{'Lumen':>14}{'PyTorch':>14}  {'unit':<9}{'ratio':>7}")
    for k, (tv, unit) in tor.items():
        if k == "device":
            continue
        lv = lum.get(k, (None, unit))[0]
        if lv is None:
            print(f"{k:<22}{'-':>14}{tv:>14.2f}  {unit:<9}{'-':>7}")
            continue
        lower_better = unit in ("ms", "us/node")
        ratio = (tv / lv if lower_better else lv / tv) if lv and tv else 0
        print(f"{k:<22}{lv:>14.2f}{tv:>14.2f}  {unit:<9}{ratio:>7.2f}")
    print("ratio: Lumen relative to PyTorch, > 1 means Lumen is faster")
    return rc

if __name__ == "__main__":
    sys.exit(main())
