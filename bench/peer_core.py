#!/usr/bin/python3
"""numpy and PyTorch (Debian's builds) on the same figures as bench_core.c."""
import time
import numpy as np
import torch

torch.set_num_threads(max(1, torch.get_num_threads()))


def best(fn, reps=5):
    b = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        b = min(b, time.perf_counter() - t0)
    return b


for n in (256, 512, 1024, 2048, 4096):
    reps = 2 if n >= 4096 else 3 if n >= 2048 else 5
    a = np.random.rand(n, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    flop = 2.0 * n ** 3
    print(f"PEER matmul_f32_{n} numpy {flop / best(lambda: a @ b, reps) * 1e-9:.4g} GFLOP/s")
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    print(f"PEER matmul_f32_{n} torch {flop / best(lambda: ta @ tb, reps) * 1e-9:.4g} GFLOP/s")

n = 16 << 20
x = np.random.rand(n).astype(np.float32)
y = np.random.rand(n).astype(np.float32)
gb = n * 4e-9
tx, ty = torch.from_numpy(x), torch.from_numpy(y)
for key, mul, fnp, ftorch in [
    ("add_f32_16M", 3, lambda: x + y, lambda: tx + ty),
    ("mul_scalar_f32_16M", 2, lambda: x * np.float32(3), lambda: tx * 3),
    ("neg_f32_16M", 2, lambda: -x, lambda: -tx),
    ("exp_f32_16M", 2, lambda: np.exp(x), lambda: torch.exp(tx)),
]:
    print(f"PEER {key} numpy {mul * gb / best(fnp):.4g} GB/s")
    print(f"PEER {key} torch {mul * gb / best(ftorch):.4g} GB/s")
m = x.reshape(4096, 4096)
print(f"PEER neg_transposed_f32_16M numpy {2 * gb / best(lambda: np.negative(m.T)):.4g} GB/s")
print(f"PEER add_row_broadcast_f32_16M numpy {2 * gb / best(lambda: m + y[:4096]):.4g} GB/s")
big = np.random.rand(64 << 20).astype(np.float32)
print(f"PEER sum_f32_64M numpy {4 * (64 << 20) * 1e-9 / best(lambda: big.sum()):.4g} GB/s")
tbig = torch.from_numpy(big)
print(f"PEER sum_f32_64M torch {4 * (64 << 20) * 1e-9 / best(lambda: tbig.sum()):.4g} GB/s")
