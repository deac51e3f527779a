#!/usr/bin/python3
"""numpy and PyTorch eager on the chains of bench_compile.c (effective GB/s:
inputs read once, output written once)."""
import time
import numpy as np
import torch


def best(fn, reps=5):
    b = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        b = min(b, time.perf_counter() - t0)
    return b


n = 16 << 20
x = np.random.rand(n).astype(np.float32)
y = np.random.rand(n).astype(np.float32)
tx, ty = torch.from_numpy(x), torch.from_numpy(y)
a, b = np.float32(1.5), np.float32(0.25)


def np_gelu(v):
    return np.float32(0.5) * v * (1 + np.tanh(np.float32(0.7978845608) * (v + np.float32(0.044715) * v * v * v)))


def np_silu(v):
    return v / (1 + np.exp(-v))


def chain(v):
    for _ in range(5):
        v = v * np.float32(1.01) + np.float32(0.5)
    return v


def tchain(v):
    for _ in range(5):
        v = v * 1.01 + 0.5
    return v


tg = torch.nn.functional.gelu
for key, nbytes, fnp, ft in [
    ("gelu_tanh_chain_16M_compiled", 8 * n, lambda: np_gelu(x * a + b) * a,
     lambda: tg(tx * 1.5 + 0.25, approximate="tanh") * 1.5),
    ("swiglu_16M_compiled", 12 * n, lambda: np_silu(x) * y, lambda: torch.nn.functional.silu(tx) * ty),
    ("chain10_16M_compiled", 8 * n, lambda: chain(x), lambda: tchain(tx)),
]:
    print(f"PEER {key} numpy {nbytes / best(fnp) * 1e-9:.4g} GB/s")
    print(f"PEER {key} torch-eager {nbytes / best(ft) * 1e-9:.4g} GB/s")
