#!/usr/bin/env python3
"""Fixture for Lumen's variation seeds (issue 37): A1111's slerp
(modules/processing.py) in pure Python on recorded noises.

A1111 calls slerp(subseed_strength, noise, subnoise) on one image's noise of
shape [C, H, W]:

    low_norm = low / torch.norm(low, dim=1, keepdim=True)
    high_norm = high / torch.norm(high, dim=1, keepdim=True)
    dot = (low_norm * high_norm).sum(1)
    if dot.mean() > 0.9995:
        return low * val + high * (1 - val)
    omega = torch.acos(dot)
    so = torch.sin(omega)
    res = (torch.sin((1.0 - val) * omega) / so).unsqueeze(1) * low + \
          (torch.sin(val * omega) / so).unsqueeze(1) * high

so the norms and dots run over dim 1 (H), per (c, w) column.  This script
writes that formula's results for seeded Gaussian noises (and a pair close
enough to take the lerp branch) to tests/ref/hires/variation.json, with
A1111's seed_resize_from paste (ImageRNG.first: the noise drawn at the
other size pasted centred into the image's own, cropped where larger) on
six size pairs (smaller, larger, odd differences, mixed).
    python3 tests/ref/gen_variation.py [OUTDIR]
"""
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "hires")
C, H, W = 4, 5, 6


def noise(seed):
    r = random.Random(seed)
    return [r.gauss(0, 1) for _ in range(C * H * W)]


def at(c, h, w):
    return (c * H + h) * W + w


def slerp(val, low, high):
    norm_l = {}
    norm_h = {}
    dot = {}
    for c in range(C):
        for w in range(W):
            nl = math.sqrt(sum(low[at(c, h, w)] ** 2 for h in range(H)))
            nh = math.sqrt(sum(high[at(c, h, w)] ** 2 for h in range(H)))
            norm_l[c, w], norm_h[c, w] = nl, nh
            dot[c, w] = sum((low[at(c, h, w)] / nl) * (high[at(c, h, w)] / nh) for h in range(H))
    if sum(dot.values()) / len(dot) > 0.9995:
        return [low[i] * val + high[i] * (1 - val) for i in range(C * H * W)], "lerp"
    out = [0.0] * (C * H * W)
    for c in range(C):
        for w in range(W):
            om = math.acos(max(-1.0, min(1.0, dot[c, w])))
            so = math.sin(om)
            a, b = math.sin((1.0 - val) * om) / so, math.sin(val * om) / so
            for h in range(H):
                out[at(c, h, w)] = a * low[at(c, h, w)] + b * high[at(c, h, w)]
    return out, "slerp"


def paste(small, sh, sw, full, C, H, W):
    """A1111's ImageRNG.first paste, as written there (Python's // and slices)."""
    x = [row[:] for row in full]   # full[c] is a flat [H*W] list per channel
    dx = (W - sw) // 2
    dy = (H - sh) // 2
    w = sw if dx >= 0 else sw + 2 * dx
    h = sh if dy >= 0 else sh + 2 * dy
    tx = 0 if dx < 0 else dx
    ty = 0 if dy < 0 else dy
    dx = max(-dx, 0)
    dy = max(-dy, 0)
    for c in range(C):
        # x[c, ty:ty+h, tx:tx+w] = noise[c, dy:dy+h, dx:dx+w] with NumPy-style slices
        rows_t = list(range(H))[ty:ty + h]
        rows_s = list(range(sh))[dy:dy + h]
        cols_t = list(range(W))[tx:tx + w]
        cols_s = list(range(sw))[dx:dx + w]
        assert len(rows_t) == len(rows_s) and len(cols_t) == len(cols_s)
        for rt, rs in zip(rows_t, rows_s):
            for ct, cs in zip(cols_t, cols_s):
                x[c][rt * W + ct] = small[c][rs * sw + cs]
    return x


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = []
    low, high = noise(1), noise(2)
    near = [x + 1e-3 * y for x, y in zip(low, noise(3))]
    for name, hi in (("seeds 1 and 2", high), ("near (lerp branch)", near)):
        for val in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
            out, branch = slerp(val, low, hi)
            cases.append({"name": name, "val": val, "branch": branch, "high": hi, "out": out})
    pastes = []
    r = random.Random(5)
    PC, PH, PW = 2, 6, 8
    for sh, sw in ((3, 4), (5, 3), (8, 10), (9, 7), (4, 12), (7, 8)):
        small = [[round(r.gauss(0, 1), 6) for _ in range(sh * sw)] for _ in range(PC)]
        full = [[round(r.gauss(0, 1), 6) for _ in range(PH * PW)] for _ in range(PC)]
        pastes.append({"small": [sh, sw], "small_data": small, "full_data": full,
                       "out": paste(small, sh, sw, full, PC, PH, PW)})
    with open(os.path.join(OUT, "variation.json"), "w") as f:
        json.dump({"shape": [C, H, W], "low": low, "cases": cases, "paste_shape": [PC, PH, PW],
                   "pastes": pastes}, f)
    print("wrote", os.path.join(OUT, "variation.json"), len(cases), "cases")


if __name__ == "__main__":
    main()
