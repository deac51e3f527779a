#!/usr/bin/python3
"""PyTorch CPU peer of bench/train_step.lua: the same steps, ms per step."""
import os
import time
import torch
import torch.nn.functional as F

torch.set_num_threads(os.cpu_count() or 1)   # Lumen's pool uses every core too


def bench(key, params, loss_fn, steps):
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    for i in range(steps + 3):
        if i == 3:
            t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    ms = (time.perf_counter() - t0) * 1000 / steps
    print(f"PEER {key} torch-cpu-{torch.get_num_threads()}t {ms:.4g} ms")


def p(*shape):
    return (torch.rand(*shape) * 0.1 - 0.05).requires_grad_(True)


B = 128
x, y = torch.rand(B, 784), torch.randint(0, 10, (B,))
w1, b1, w2, b2 = p(256, 784), p(256), p(10, 256), p(10)
bench("train_mlp_784x256x10_b128", [w1, b1, w2, b2],
      lambda: F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y), 40)

Bc = 64
xc, yc = torch.rand(Bc, 1, 28, 28), torch.randint(0, 10, (Bc,))
c1, cb1, c2, cb2, w, b = p(16, 1, 3, 3), p(16), p(32, 16, 3, 3), p(32), p(10, 1568), p(10)


def cnn():
    h = F.max_pool2d(F.relu(F.conv2d(xc, c1, cb1, padding=1)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, c2, cb2, padding=1)), 2)
    return F.cross_entropy(F.linear(h.reshape(Bc, -1), w, b), yc)


bench("train_cnn_28x28_b64", [c1, cb1, c2, cb2, w, b], cnn, 10)
