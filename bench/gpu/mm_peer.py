#!/usr/bin/python3
"""mm_peer.py - PyTorch CUDA's matmul as vkbench VKBENCH_ONLY=mm prints it:
"matmul_DT_N median [min-max] TFLOP/s" for a square N, "matmul_DT_MxKxN ..."
for [M, K] x [K, N] (vkbench's VKBENCH_MM_SHAPES; "M:K:Nt" stores B [N, K]
and reads it transposed, as a linear layer does), the median of REPS
(default 7, MM_PEER_REPS=) synchronised calls after 300 ms of warm-up calls.
TF32 off.
Usage: mm_peer.py [dtypes] [sizes]   (defaults: f16 and 2048,4096,8192; a size
is N, M:K:N or M:K:Nt)"""
import os, sys, time
import torch

torch.backends.cuda.matmul.allow_tf32 = False
dts = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
names = (sys.argv[1] if len(sys.argv) > 1 else "f16").split(",")
sizes = [(tuple(int(v) for v in s.rstrip("t").split(":")), s.endswith("t"))
         for s in (sys.argv[2] if len(sys.argv) > 2 else "2048,4096,8192").split(",") if s]
reps = int(os.environ.get("MM_PEER_REPS", "7"))
print("device", torch.cuda.get_device_name(0), "torch", torch.__version__)
for name in names:
    for s, bt in sizes:
        m, k, n = s if len(s) == 3 else (s[0], s[0], s[0])
        a = torch.randn(m, k, device="cuda", dtype=dts[name])
        b = torch.randn(n, k, device="cuda", dtype=dts[name]).t() if bt else torch.randn(k, n, device="cuda", dtype=dts[name])
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.3:
            a @ b
            torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            a @ b
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        f = 2 * m * k * n * 1e-12
        key = f"matmul_{name}_{m}" if len(s) == 1 else f"matmul_{name}_{m}x{k}x{n}" + ("t" if bt else "")
        print(f"{key} {f / ts[reps // 2]:.4g} [{f / ts[-1]:.4g}-{f / ts[0]:.4g}] TFLOP/s", flush=True)
