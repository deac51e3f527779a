#!/usr/bin/python3
"""Reference fixtures for the core ops (tests/test_ops_*.c).

Inputs are multiples of 1/8 in a small range, so they are exact in f16 and
bf16 as well as f32: the f64 references below are then the truth for every
dtype, and the C tests compare with a tolerance per dtype.  References are
computed in float64 by PyTorch (Debian's python3-torch) and numpy.
Run: /usr/bin/python3 tests/ref/gen_core.py  (writes tests/ref/fixtures/core/)
"""
import os
import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "fixtures", "core")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(1234)


def save(name, arr):
    arr = np.array(arr, order="C")  # keeps 0-d arrays 0-d
    if arr.dtype == np.float32:
        arr = arr.astype(np.float64)
    np.save(os.path.join(OUT, name + ".npy"), arr)


def eighths(shape, lo, hi):
    return rng.integers(int(lo * 8), int(hi * 8) + 1, size=shape).astype(np.float64) / 8


# ---- unary: x in [-3, 3], xp in (0, 4] for log/sqrt ----
x = eighths((3, 5), -3, 3)
xp = eighths((3, 5), 0.125, 4)
save("x", x)
save("xp", xp)
t = torch.from_numpy(x)
tp = torch.from_numpy(xp)
unary = {
    "neg": -t, "abs": t.abs(), "sign": t.sign(), "exp": t.exp(), "log1p": (tp).log1p(),
    "expm1": t.expm1(), "square": t * t, "sin": t.sin(), "cos": t.cos(), "tan": (t / 4).tan(),
    "tanh": t.tanh(), "sigmoid": t.sigmoid(), "relu": t.relu(),
    "gelu": torch.nn.functional.gelu(t), "gelu_tanh": torch.nn.functional.gelu(t, approximate="tanh"),
    "silu": torch.nn.functional.silu(t), "softplus": torch.nn.functional.softplus(t),
    "erf": torch.special.erf(t), "erfc": torch.special.erfc(t), "floor": t.floor(), "ceil": t.ceil(), "round": t.round(),
}
for k, v in unary.items():
    save("unary_" + k, v.numpy())
for k, v in {"log": tp.log(), "sqrt": tp.sqrt(), "rsqrt": tp.rsqrt(), "reciprocal": tp.reciprocal()}.items():
    save("unaryp_" + k, v.numpy())

# ---- binary: a [3,5] with b [5] (row broadcast) and c [3,1] ----
a = eighths((3, 5), -3, 3)
b = eighths((5,), 0.5, 3) * np.array([1, -1, 1, -1, 1])
c = eighths((3, 1), 0.5, 2)
save("a", a)
save("b", b)
save("c", c)
ta, tb, tc = map(torch.from_numpy, (a, b, c))
binary = {
    "add": ta + tb, "sub": ta - tb, "mul": ta * tb, "div": ta / tb, "mod": torch.remainder(ta, tb),
    "maximum": torch.maximum(ta, tb), "minimum": torch.minimum(ta, tb), "atan2": torch.atan2(ta, tb),
    "pow": torch.pow(ta.abs(), tb),
    "logaddexp": torch.logaddexp(ta, tb), "floor_divide": torch.floor_divide(ta, tb),
    "hypot": torch.hypot(ta, tb),
}
for k, v in binary.items():
    save("binary_" + k, v.numpy())
save("binary_add_col", (ta + tc).numpy())
save("binary_lt", (ta < tb).numpy().astype(np.uint8))

# ---- reductions over r [3,4,5] ----
r = eighths((3, 4, 5), -2, 2)
save("r", r)
tr = torch.from_numpy(r)
save("red_sum_all", tr.sum().numpy())
save("red_sum_1", tr.sum(1).numpy())
save("red_sum_02_keep", tr.sum((0, 2), keepdim=True).numpy())
save("red_mean_2", tr.mean(2).numpy())
save("red_prod_0", tr.prod(0).numpy())
save("red_max_1", tr.amax(1).numpy())
save("red_min_all", tr.amin().numpy())
save("red_var_2", tr.var(2, unbiased=False).numpy())
save("red_var_2_ddof1", tr.var(2, unbiased=True).numpy())
save("red_std_01", tr.std((0, 1), unbiased=True).numpy())
save("red_lse_2", torch.logsumexp(tr, 2).numpy())
save("red_argmax_1", tr.argmax(1).numpy())
save("red_argmin_2", tr.argmin(2).numpy())
save("red_cumsum_1", tr.cumsum(1).numpy())

# ---- matmul ----
m1 = eighths((2, 3, 4), -2, 2)
m2 = eighths((4, 5), -2, 2)
m3 = eighths((2, 4, 5), -2, 2)
v4 = eighths((4,), -2, 2)
for k, v in {"m1": m1, "m2": m2, "m3": m3, "v4": v4}.items():
    save(k, v)
save("mm_batch_shared", np.matmul(m1, m2))
save("mm_batch", np.matmul(m1, m3))
save("mm_mat_vec", np.matmul(m1, v4))
save("mm_vec_mat", np.matmul(v4, m2))
save("mm_vec_vec", np.array(np.matmul(v4, v4)))
save("mm_transposed", np.matmul(np.swapaxes(m3, 1, 2), np.swapaxes(m1, 1, 2)))
print("wrote", len(os.listdir(OUT)), "fixtures to", OUT)
