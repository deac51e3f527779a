#!/usr/bin/python3
"""gemv_gpu.py - torch.matmul's batch-1 products at GPU time, the peer of
gemv_gpu.lua: CUDA events around 10 calls, 5 times, the median [min-max] of
the time a call, in ms; M:K:N[t] as gemv_gpu.lua (t: B stored [N, K] and
read transposed, as F.linear does).  TF32 off.
Usage: gemv_gpu.py DTYPE CASE..."""
import sys
import torch

torch.backends.cuda.matmul.allow_tf32 = False
dt = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
for case in sys.argv[2:]:
    t = case.endswith("t")
    m, k, n = (int(v) for v in case.rstrip("t").split(":"))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=dt, generator=g) if t else torch.randn(k, n, device="cuda", dtype=dt, generator=g)
    fn = (lambda: x @ w.t()) if t else (lambda: x @ w)  # noqa: E731
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(10):
            fn()
        e1.record()
        torch.cuda.synchronize()
        per.append(e0.elapsed_time(e1) / 10)
    per.sort()
    print("matmul_%s_%dx%dx%d%s gpu %.4f %.4f %.4f" % (sys.argv[1], m, k, n, "t" if t else "", per[2], per[0], per[4]))
