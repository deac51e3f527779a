#!/usr/bin/python3
"""esrgan-thick x4 on 256x256 in PyTorch CUDA (f32 and f16), the network of
bench/peer_esrgan.py; prints ms per run (median of 5 after warm-up)."""
import sys, time, statistics, torch
sys.path.insert(0, sys.argv[2])   # the folder holding bench/peer_esrgan.py
import peer_esrgan as P
cfg, w = P.load(sys.argv[1])
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
for dt in (torch.float32, torch.float16):
    ww = {k: v.to("cuda", dt) for k, v in w.items()}
    x = torch.rand(1, 3, 256, 256, generator=torch.Generator().manual_seed(1)).to("cuda", dt)
    ts = []
    with torch.inference_mode():
        for i in range(7):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            y = P.forward(cfg, ww, x)
            torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    print(f"PEER esrgan_thick_x4_256 torch-cuda {str(dt)[6:]} {statistics.median(ts[2:])*1000:.2f} ms")
