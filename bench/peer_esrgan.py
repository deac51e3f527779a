#!/usr/bin/python3
"""PyTorch CPU peer of bench/esrgan.c: esrgan-thick x4 written in PyTorch
from the package's model.json (layers, TF's "same" padding, depthToSpace
order, MultiplyBeta 0.2) with the weights read from its shards (HWIO ->
OIHW), run on the same input; checks its output against Lumen's and prints
seconds per run.  Usage: peer_esrgan.py MODEL_JSON DIR [RUNS]"""
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(os.cpu_count() or 1)   # Lumen's pool uses every core too


def load(path):
    m = json.load(open(path))
    base = os.path.dirname(path)
    weights = {}
    for g in m["weightsManifest"]:
        blob = b"".join(open(os.path.join(base, p), "rb").read() for p in g["paths"])
        off = 0
        for w in g["weights"]:
            assert w["dtype"] == "float32" and "quantization" not in w
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            a = np.frombuffer(blob, "<f4", n, off).reshape(w["shape"])
            off += 4 * n
            t = torch.from_numpy(a.copy())
            weights[w["name"]] = t.permute(3, 2, 0, 1).contiguous() if t.ndim == 4 else t
        assert off == len(blob)
    cfg = m["modelTopology"]["model_config"]["config"]
    return cfg, weights


def same_pad(x, k, s, d):
    pads = []
    for n, kk in ((x.shape[3], k[1]), (x.shape[2], k[0])):
        out = -(-n // s)
        total = max((out - 1) * s + (kk - 1) * d + 1 - n, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads)


def forward(cfg, w, x):
    v = {}
    acts = {"linear": lambda t: t, "relu": F.relu}
    for l in cfg["layers"]:
        c, name, cls = l["config"], l["name"], l["class_name"]
        ins = [v[i[0]] for i in l["inbound_nodes"][0]] if l["inbound_nodes"] else []
        if cls == "InputLayer":
            y = x
        elif cls == "Conv2D":
            s, d = c["strides"][0], c["dilation_rate"][0]
            t = same_pad(ins[0], c["kernel_size"], s, d) if c["padding"] == "same" else ins[0]
            y = acts[c["activation"]](F.conv2d(t, w[name + "/kernel"], w.get(name + "/bias"),
                                               stride=s, dilation=d))
        elif cls == "Activation":
            y = acts[c["activation"]](ins[0])
        elif cls == "Add":
            y = ins[0]
            for t in ins[1:]:
                y = y + t
        elif cls == "Concatenate":
            y = torch.cat(ins, dim=1)
        elif cls == "MultiplyBeta":
            y = ins[0] * 0.2
        elif cls.startswith("PixelShuffle"):
            r = int(cls[len("PixelShuffle"):-1])
            n, ch, h, wd = ins[0].shape
            y = ins[0].reshape(n, r, r, ch // (r * r), h, wd).permute(0, 3, 4, 1, 5, 2)
            y = y.reshape(n, ch // (r * r), h * r, wd * r)
        elif cls == "UpSampling2D":
            y = F.interpolate(ins[0], scale_factor=c["size"][0], mode="nearest")
        else:
            raise SystemExit("unsupported layer " + cls)
        v[name] = y
    return v[cfg["output_layers"][0][0]]


def main():
    path, d = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    cfg, w = load(path)
    x = torch.from_numpy(np.load(os.path.join(d, "in.npy")))
    with torch.inference_mode():
        y = forward(cfg, w, x)             # warm-up
        t0 = time.perf_counter()
        for _ in range(runs):
            y = forward(cfg, w, x)
        s = (time.perf_counter() - t0) / runs
    lum = np.load(os.path.join(d, "out.npy"))
    diff = float(np.abs(y.numpy() - lum).max())
    print(f"INFO esrgan-thick x4 256px: PyTorch vs Lumen output max abs diff {diff:.3g} "
          f"(values 0..1; {'equal within 1e-3' if diff < 1e-3 else 'DIFFERENT'})")
    print(f"PEER esrgan_thick_x4_256px torch-cpu-{torch.get_num_threads()}t {s:.4g} s")
    if diff >= 1e-3:
        sys.exit(1)


if __name__ == "__main__":
    main()
