#!/usr/bin/python3
"""esrgan-thick in PyTorch CUDA (f32 and f16), the network of
bench/peer_esrgan.py: x4 at 256x256 unless ESRGAN_SIZE / ESRGAN_RUNS say
otherwise (the scale is the model.json's); prints the median ms of the runs
after two warm-up calls, with the range (TF32 off)."""
import os, sys, time, statistics, torch
sys.path.insert(0, sys.argv[2])   # the folder holding bench/peer_esrgan.py
import peer_esrgan as P
cfg, w = P.load(sys.argv[1])
size = int(os.environ.get("ESRGAN_SIZE", "256"))
runs = int(os.environ.get("ESRGAN_RUNS", "7"))
scale = os.environ.get("ESRGAN_SCALE", "4")
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
for dt in (torch.float32, torch.float16):
    ww = {k: v.to("cuda", dt) for k, v in w.items()}
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1)).to("cuda", dt)
    ts = []
    with torch.inference_mode():
        for i in range(runs + 2):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            y = P.forward(cfg, ww, x)
            torch.cuda.synchronize(); ts.append((time.perf_counter() - t0) * 1000)
    ts = sorted(ts[2:])
    print(f"PEER esrgan_thick_x{scale}_{size} torch-cuda {str(dt)[6:]} "
          f"{statistics.median(ts):.2f} ms [{ts[0]:.2f}-{ts[-1]:.2f}] (median of {len(ts)})")
