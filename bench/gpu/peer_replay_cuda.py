#!/usr/bin/python3
"""CUDA peer of bench/gpu/replay.c: the esrgan network of bench/peer_esrgan.py
(same model.json and weights) on CUDA, called eagerly and through a CUDA
graph (torch.cuda.graph captured once, then input copied in and replayed),
per call: host ms until the call returns (work queued), wall ms until the
device is idle; medians [min-max] of RUNS after warm-up.
Usage: peer_replay_cuda.py MODEL_JSON BENCH_DIR [RUNS [SIZE [DTYPE]]]
(BENCH_DIR: the folder holding peer_esrgan.py)"""
import statistics
import sys
import time

import torch

sys.path.insert(0, sys.argv[2])
import peer_esrgan as P  # noqa: E402

runs = int(sys.argv[3]) if len(sys.argv) > 3 else 9
size = int(sys.argv[4]) if len(sys.argv) > 4 else 128
dt = torch.float32 if len(sys.argv) > 5 and sys.argv[5] == "f32" else torch.float16
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
cfg, w = P.load(sys.argv[1])
w = {k: v.to("cuda", dt) for k, v in w.items()}
x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1)).to("cuda", dt)
name = f"esrgan_{size}px_{str(dt)[6:]}"


def timed(call):
    host, wall = [], []
    for i in range(runs + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= 3:
            host.append((t1 - t0) * 1e3)
            wall.append((t2 - t0) * 1e3)
    f = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
    return f(host), f(wall)


with torch.inference_mode():
    h, wl = timed(lambda: P.forward(cfg, w, x))
    print(f"PEER {name} torch-cuda-eager host {h} ms wall {wl} ms")
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):   # warm-up before capture, as the docs ask
        for _ in range(3):
            P.forward(cfg, w, static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = P.forward(cfg, w, static_x)

    def replay():
        static_x.copy_(x)
        g.replay()
        return static_y.clone()   # the caller's own output, as Lumen's replay gives

    h, wl = timed(replay)
    print(f"PEER {name} torch-cuda-graph host {h} ms wall {wl} ms")
