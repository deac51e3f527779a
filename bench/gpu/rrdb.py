#!/usr/bin/python3
"""rrdb.py - bench/gpu/rrdb.lua's peer: one ESRGAN RRDB block in f16 on
PyTorch CUDA (cuDNN, TF32 off), batch 1 at HW x HW, eager; ms per block as
the median [min-max] of 5 synchronised batches (vae.py's timed).
Usage: rrdb.py [HW...]"""
import os, sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vae import timed  # noqa: E402

INS, OUTS = (64, 96, 128, 160, 192), (32, 32, 32, 32, 64)


def main():
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    W = [[(torch.randn(o, i, 3, 3, generator=g) * 0.05).to(dev, torch.float16) for i, o in zip(INS, OUTS)]
         for _ in range(3)]
    B = [[(torch.randn(o, generator=g) * 0.05).to(dev, torch.float16) for o in OUTS] for _ in range(3)]

    def rdb(x, d):
        feats = [x]
        for k in range(5):
            y = F.conv2d(torch.cat(feats, 1) if k else x, W[d][k], B[d][k], padding=1)
            if k < 4:
                feats.append(F.leaky_relu(y, 0.2))
            else:
                return y * 0.2 + x

    def block(x):
        return rdb(rdb(rdb(x, 0), 1), 2) * 0.2 + x

    for a in sys.argv[1:] or ["128"]:
        hw = int(a)
        x = torch.randn(1, 64, hw, hw, generator=g).to(dev, torch.float16)
        with torch.no_grad():
            m, lo, hi = timed(lambda: block(x), 20)
        print(f"torch rrdb {hw} {m:.4f} {lo:.4f} {hi:.4f}", flush=True)


if __name__ == "__main__":
    main()
