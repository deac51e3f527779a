#!/usr/bin/python3
"""Reference gradients (PyTorch autograd) for tests/lua/test_grad.lua.

For each case: inputs (multiples of 1/8, saved as f32), a cotangent R, and
the gradients of sum(f(inputs) * R) with respect to every input, computed by
PyTorch (Debian's python3-torch) in float64.  Also torch.optim's SGD and
AdamW trajectories on fixed gradients, and the losses of a short training
run of a small MLP on the first Fashion-MNIST images (same initial weights
and batches as the Lua test).
Run: /usr/bin/python3 tests/ref/gen_grad.py  (writes tests/ref/fixtures/grad/)
"""
import gzip
import math
import os
import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(__file__), "fixtures", "grad")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(1414)
torch.set_default_dtype(torch.float64)
out = {}


def inp(shape, lo=-2, hi=2):
    a = rng.integers(int(lo * 8), int(hi * 8) + 1, size=shape).astype(np.float64) / 8
    return a


def case(name, f, shapes, lo=-2, hi=2, extra=None):
    arrs = [inp(s, lo, hi) for s in shapes]
    ts = [torch.from_numpy(a).requires_grad_(True) for a in arrs]
    y = f(*ts)
    r = inp(tuple(y.shape), -1, 1)
    (y * torch.from_numpy(r)).sum().backward()
    for i, (a, t) in enumerate(zip(arrs, ts)):
        out[f"{name}.in{i + 1}"] = a.astype(np.float32)
        out[f"{name}.g{i + 1}"] = t.grad.numpy()
    out[f"{name}.r"] = r.astype(np.float32)


def sdpa(q, k, v, causal=False):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        L, S = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


case("exp_tanh", lambda x: torch.exp(x) * torch.tanh(x), [(3, 4)])
case("sigmoid_silu", lambda x: torch.sigmoid(x) + F.silu(x), [(3, 4)])
case("gelu", lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"), [(3, 4)])
case("relu_abs", lambda x: F.relu(x) + x.abs(), [(3, 4)], 0.0625, 2)
case("log_sqrt", lambda x: torch.log(x) + torch.sqrt(x) + torch.rsqrt(x), [(3, 4)], 0.25, 2)
case("broadcast", lambda a, b: (a * b + a / (b.abs() + 1) - b), [(2, 3, 4), (3, 1)])
case("pow", lambda a, b: a.abs() ** b, [(3, 4), (4,)], 0.25, 2)
case("maximum", lambda a, b: torch.maximum(a, b) + torch.minimum(a, b * 2), [(3, 4), (3, 4)])
case("where_clamp", lambda a, b: torch.where(a > 0, a, b) + a.clamp(-1, 1), [(3, 4), (4,)])
case("reductions", lambda x: torch.cat([x.sum(1), x.mean(1), x.amax(1), x.logsumexp(1), x.var(1)]), [(3, 5)])
case("views", lambda x: x.permute(2, 0, 1).reshape(4, 6)[1:3, ::2] * 2, [(2, 3, 4)])
case("matmul", lambda a, b: a @ b, [(2, 3, 4), (4, 5)])
case("linear", lambda x, w, b: F.linear(x, w, b), [(3, 4), (5, 4), (5,)])
case("softmax", lambda x: torch.softmax(x, 1) * 3 + torch.log_softmax(x, 0), [(3, 4)])
case("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), [(3, 4), (4,), (4,)])
case("rms_norm", lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w, [(3, 4), (4,)])
case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 3, 3), (4,), (4,)])
case("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)])
case("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     [(1, 4, 3, 3), (4, 2, 3, 3), (2,)])
case("max_pool2d", lambda x: F.max_pool2d(x, 2), [(1, 2, 4, 6)], -100, 100)
case("avg_pool2d", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), [(1, 2, 5, 5)])
case("nearest", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [(1, 2, 3, 3)])
case("bilinear", lambda x: F.interpolate(x, size=(5, 4), mode="bilinear", align_corners=False), [(1, 1, 3, 3)])
case("sdpa", lambda q, k, v: sdpa(q, k, v, True), [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 2)])
emb_idx = np.array([[2, 0], [3, 2]])
case("embedding", lambda w: F.embedding(torch.from_numpy(emb_idx), w), [(5, 3)])
lbl = np.array([1, 0, 3])
case("cross_entropy", lambda x: F.cross_entropy(x, torch.from_numpy(lbl), reduction="none"), [(3, 4)])

# ---- optimisers: 3 steps on fixed gradients
p0 = inp((3, 4))
grads = [inp((3, 4)) for _ in range(3)]
out["optim.p0"] = p0.astype(np.float32)
for i, g in enumerate(grads):
    out[f"optim.grad{i + 1}"] = g.astype(np.float32)
for name, make in [
    ("sgd", lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01, dampening=0.1)),
    ("nesterov", lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True)),
    ("adamw", lambda p: torch.optim.AdamW([p], lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
]:
    p = torch.from_numpy(p0.astype(np.float32).astype(np.float64)).requires_grad_(True)
    opt = make(p)
    for i, g in enumerate(grads):
        p.grad = torch.from_numpy(g.astype(np.float32).astype(np.float64))
        opt.step()
        out[f"optim.{name}{i + 1}"] = p.detach().numpy().copy()

np.savez(os.path.join(OUT, "grad.npz"), **out)

# ---- a short training run: MLP 784-32-10, SGD momentum, 30 steps of 16
def idx(path, n):
    with gzip.open(path) as f:
        data = f.read()
    nd = data[3]
    shape = [int.from_bytes(data[4 + 4 * d: 8 + 4 * d], "big") for d in range(nd)]
    a = np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(shape)
    return a[:n]


D = "/usr/share/datasets/fashion-mnist/"
steps, B = 30, 16
X = idx(D + "train-images-idx3-ubyte.gz", steps * B).reshape(-1, 784).astype(np.float32) / 255
Y = idx(D + "train-labels-idx1-ubyte.gz", steps * B).astype(np.int64)
torch.manual_seed(0)
w1 = (torch.randn(32, 784) * 0.05).float()
w2 = (torch.randn(10, 32) * 0.2).float()
train = {"w1": w1.numpy(), "b1": np.zeros(32, np.float32), "w2": w2.numpy(), "b2": np.zeros(10, np.float32)}
ps = {k: torch.from_numpy(v.copy()).requires_grad_(True) for k, v in train.items()}
opt = torch.optim.SGD(ps.values(), lr=0.1, momentum=0.9)
losses = []
for s in range(steps):
    x = torch.from_numpy(X[s * B:(s + 1) * B])
    y = torch.from_numpy(Y[s * B:(s + 1) * B])
    h = F.relu(F.linear(x, ps["w1"], ps["b1"]))
    loss = F.cross_entropy(F.linear(h, ps["w2"], ps["b2"]), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
train["losses"] = np.array(losses, np.float64)
np.savez(os.path.join(OUT, "train_mlp.npz"), **train)
print("wrote", len(out), "arrays to grad.npz; train losses", losses[0], "->", losses[-1])
