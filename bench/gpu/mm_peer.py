#!/usr/bin/python3
"""mm_peer.py - PyTorch CUDA's square matmul as vkbench VKBENCH_ONLY=mm prints
it: "matmul_DT_N median [min-max] TFLOP/s", the median of REPS (default 7)
synchronised calls after 300 ms of warm-up calls.  TF32 off.
Usage: mm_peer.py [dtypes] [sizes]   (defaults: f16 and 2048,4096,8192)"""
import sys, time
import torch

torch.backends.cuda.matmul.allow_tf32 = False
dts = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
names = (sys.argv[1] if len(sys.argv) > 1 else "f16").split(",")
sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "2048,4096,8192").split(",")]
reps = 7
print("device", torch.cuda.get_device_name(0), "torch", torch.__version__)
for name in names:
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=dts[name])
        b = torch.randn(n, n, device="cuda", dtype=dts[name])
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
        f = 2 * n ** 3 * 1e-12
        print(f"matmul_{name}_{n} {f / ts[reps // 2]:.1f} [{f / ts[-1]:.1f}-{f / ts[0]:.1f}] TFLOP/s", flush=True)
