#!/usr/bin/python3
"""PyTorch (Debian's CPU build) on the figures of bench_nn.c, same keys.

conv2d goes through PyTorch's own CPU path (oneDNN / mkldnn when built in);
attention is softmax(Q K^T / sqrt(D)) V written out, as the issue asks, with
peak memory measured the same way as bench_nn.c: resident-set growth over
the baseline while one call runs (VmHWM after clearing it, Linux)."""
import math
import time
import torch
import torch.nn.functional as F

torch.set_num_threads(max(2, torch.get_num_threads()))
torch.manual_seed(0)


def best(fn, reps=5):
    b = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        b = min(b, time.perf_counter() - t0)
    return b


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peer(key, value, unit, name="torch"):
    print(f"PEER {key} {name} {value:.4g} {unit}")


def attention_written_out(q, k, v):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v


with torch.no_grad():
    for L in (1024, 4096):
        q, k, v = (torch.randn(1, 8, L, 64) for _ in range(3))
        base = status_kb("VmRSS:")
        reset_peak()
        y = attention_written_out(q, k, v)
        peak = status_kb("VmHWM:")
        del y
        t = best(lambda: attention_written_out(q, k, v), 2 if L >= 4096 else 4)
        peer(f"attention_L{L}", t * 1e3, "ms")
        peer(f"attention_L{L}_peak", (peak - base) / 1024, "MB")
        del q, k, v

    for key, ci, co, hw, k, st in (("conv2d_3x3_64c_256", 64, 64, 256, 3, 1),
                                   ("conv2d_3x3_128c_128", 128, 128, 128, 3, 1),
                                   ("conv2d_1x1_128c_128", 128, 128, 128, 1, 1),
                                   ("conv2d_3x3s2_64to128_128", 64, 128, 128, 3, 2),
                                   ("conv2d_esrgan_64to32_256", 64, 32, 256, 3, 1),
                                   ("conv2d_esrgan_192to64_128", 192, 64, 128, 3, 1),
                                   ("conv2d_3x3_64c_32", 64, 64, 32, 3, 1),
                                   ("conv2d_esrgan_192to64_64", 192, 64, 64, 3, 1)):
        x = torch.randn(1, ci, hw, hw)
        w = torch.randn(co, ci, k, k)
        t = best(lambda: F.conv2d(x, w, stride=st, padding=k // 2))
        oh = (hw + 2 * (k // 2) - k) // st + 1
        peer(key, 2.0 * co * ci * k * k * oh * oh / t * 1e-9, "GFLOP/s")

    x = torch.randn(4096, 4096)
    w, b = torch.randn(4096), torch.randn(4096)
    gx = torch.randn(8, 512, 64, 64)
    gw, gb = torch.randn(512), torch.randn(512)
    gb2 = 2.0 * 4096 * 4096 * 4 * 1e-9

    def rms_norm():
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    for key, fn in (("softmax_f32_4096x4096", lambda: torch.softmax(x, -1)),
                    ("layer_norm_f32_4096x4096", lambda: F.layer_norm(x, (4096,), w, b, 1e-5)),
                    ("rms_norm_f32_4096x4096", rms_norm),
                    ("group_norm_f32_8x512x64x64", lambda: F.group_norm(gx, 32, gw, gb, 1e-5))):
        peer(key, gb2 / best(fn), "GB/s")
