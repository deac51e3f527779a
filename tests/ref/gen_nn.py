#!/usr/bin/python3
"""Reference fixtures for the neural-network ops (tests/test_nn_*.c).

Inputs are multiples of 1/8 in a small range (exact in f16 and bf16 as well
as f32), saved as float32; references are computed by PyTorch (Debian's
python3-torch 1.13) in float64 and saved as float64, so they are the truth
for every dtype and the C tests compare with a tolerance per dtype.
Ops this PyTorch lacks (rms_norm, scaled_dot_product_attention, RoPE) are
written out from their definitions.
Run: /usr/bin/python3 tests/ref/gen_nn.py  (writes tests/ref/fixtures/nn/)
"""
import math
import os
import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(__file__), "fixtures", "nn")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(4321)
torch.set_default_dtype(torch.float64)


def save(name, arr):
    if isinstance(arr, torch.Tensor):
        arr = arr.detach().numpy()
    arr = np.ascontiguousarray(arr)
    np.save(os.path.join(OUT, name + ".npy"), arr)


def inp(name, shape, lo=-3, hi=3):
    """An input of eighths, saved as f32; returned as a float64 tensor."""
    a = rng.integers(int(lo * 8), int(hi * 8) + 1, size=shape).astype(np.float64) / 8
    save(name, a.astype(np.float32))
    return torch.from_numpy(a)


# ---------------------------------------------------------------- conv
x = inp("conv_x", (2, 4, 7, 9))
w = inp("conv_w", (6, 4, 3, 3), -1, 1)
b = inp("conv_b", (6,))
save("conv_a", F.conv2d(x, w, b, padding=1))
# explicit per-side padding (top 1, bottom 2, left 0, right 1), stride (2,1), dilation (1,2)
save("conv_pad", F.conv2d(F.pad(x, (0, 1, 1, 2)), w, None, stride=(2, 1), dilation=(1, 2)))
wg = inp("conv_wg", (6, 2, 3, 3), -1, 1)
save("conv_groups", F.conv2d(x, wg, b, stride=2, padding=1, groups=2))
wd = inp("conv_wd", (4, 1, 3, 3), -1, 1)
save("conv_depthwise", F.conv2d(x, wd, None, padding=1, groups=4))
w1 = inp("conv_w1", (5, 4, 1, 1), -1, 1)
save("conv_1x1", F.conv2d(x, w1))
x1 = inp("conv1d_x", (2, 4, 11))
w1d = inp("conv1d_w", (6, 4, 3), -1, 1)
save("conv1d", F.conv1d(F.pad(x1, (1, 2)), w1d, b, stride=2))
xt = inp("convt_x", (2, 4, 5, 6))
wt = inp("convt_w", (4, 3, 3, 3), -1, 1)
bt = inp("convt_b", (3,))
save("convt_a", F.conv_transpose2d(xt, wt, bt, stride=2, padding=1, output_padding=1))
bt6 = inp("convt_b6", (6,))
save("convt_groups", F.conv_transpose2d(xt, wt, bt6, stride=(1, 2), padding=(0, 1), dilation=(2, 1),
                                        groups=2))

# ------------------------------------------------------------- pooling
x = inp("pool_x", (2, 3, 9, 10))
save("maxpool_a", F.max_pool2d(x, 3, 2, 1))
save("maxpool_b", F.max_pool2d(x, (3, 2), (2, 1), (1, 0), dilation=(2, 1), ceil_mode=True))
save("avgpool_a", F.avg_pool2d(x, 3, 2, 1, count_include_pad=True))
save("avgpool_b", F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False))
save("avgpool_c", F.avg_pool2d(x, 2, divisor_override=5))
save("adaptive_a", F.adaptive_avg_pool2d(x, (4, 3)))
save("adaptive_b", F.adaptive_avg_pool2d(x, (5, 7)))

# ---------------------------------------------------------- resampling
x = inp("up_x", (1, 2, 5, 7))
save("up_nearest_s2", F.interpolate(x, scale_factor=2, mode="nearest"))
save("up_nearest_size", F.interpolate(x, size=(8, 11), mode="nearest"))
save("up_bilinear_s2", F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
save("up_bilinear_ac", F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True))
save("up_bilinear_frac", F.interpolate(x, scale_factor=(1.5, 2.5), mode="bilinear", align_corners=False))
save("up_bilinear_down", F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=False))
x = inp("ps_x", (1, 8, 3, 4))
save("pixel_shuffle", F.pixel_shuffle(x, 2))
x = inp("pu_x", (1, 2, 6, 4))
save("pixel_unshuffle", F.pixel_unshuffle(x, 2))

# -------------------------------------------------------- normalization
x = inp("sm_x", (3, 5, 7))
for ax in (-1, 1, 0):
    save("softmax_%d" % (ax % 3), F.softmax(x, ax))
for ax in (-1, 1):
    save("log_softmax_%d" % (ax % 3), F.log_softmax(x, ax))
save("softmax_big", F.softmax(x * 64, -1))        # stability: exp(190) would overflow f32
x = inp("ln_x", (4, 6, 8))
lw = inp("ln_w", (8,))
lb = inp("ln_b", (8,))
save("layer_norm_affine", F.layer_norm(x, (8,), lw, lb, 1e-5))
save("layer_norm_2", F.layer_norm(x, (6, 8), None, None, 1e-5))
save("layer_norm_w", F.layer_norm(x, (8,), lw, None, 1e-5))
save("rms_norm_w", x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * lw)
save("rms_norm_2", x * torch.rsqrt((x * x).mean((-2, -1), keepdim=True) + 1e-6))
x = inp("gn_x", (2, 6, 5, 3))
gw = inp("gn_w", (6,))
gb = inp("gn_b", (6,))
save("group_norm_affine", F.group_norm(x, 3, gw, gb, 1e-5))
save("group_norm_6", F.group_norm(x, 6, None, None, 1e-5))
x3 = inp("gn_x3", (2, 4, 7))
save("group_norm_3d", F.group_norm(x3, 2, None, None, 1e-5))
x = inp("bn_x", (2, 3, 4, 5))
bm = inp("bn_mean", (3,))
bv = inp("bn_var", (3,), 0.25, 2)
save("batch_norm", F.batch_norm(x, bm, bv, gw[:3], gb[:3], False, 0.0, 1e-5))
x = inp("l2_x", (3, 5))
save("l2_normalize_1", F.normalize(x, dim=-1))
save("l2_normalize_0", F.normalize(x, dim=0))

# -------------------------------------------------- linear, gates, embedding
x = inp("lin_x", (2, 3, 5))
lw = inp("lin_w", (4, 5), -1, 1)
lb = inp("lin_b", (4,))
save("linear", F.linear(x, lw, lb))
a = inp("glu_x", (3, 8))
g, u = a.chunk(2, -1)
save("swiglu", F.silu(g) * u)
save("geglu", F.gelu(g) * u)
save("leaky_relu", F.leaky_relu(a, 0.2))
ew = inp("emb_w", (10, 4))
ei = torch.tensor([[1, 9, 0], [3, 3, 7]])
save("emb_idx", ei.numpy().astype(np.int64))
save("embedding", F.embedding(ei, ew))


# ------------------------------------------------------------ attention
def attention(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q k^T * scale + mask) v written out, with GQA by repeating heads."""
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, 1)
    v = v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale else 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


q = inp("att_q", (2, 4, 9, 8), -1, 1)
k = inp("att_k", (2, 2, 13, 8), -1, 1)
v = inp("att_v", (2, 2, 13, 6))
save("att_plain", attention(q, k, v))
save("att_causal", attention(q, k, v, causal=True))
am = inp("att_madd", (9, 13), -2, 2)
save("att_maskadd", attention(q, k, v, mask=am, scale=0.3))
bm = torch.from_numpy(rng.random((2, 1, 9, 13)) < 0.7)
bm[..., 0] = True                                   # every row sees a key
save("att_mbool", bm.numpy())
save("att_maskbool", attention(q, k, v, mask=bm))
# several query and key blocks (the kernel uses 256 x 512)
q = inp("attl_q", (1, 2, 300, 8), -1, 1)
k = inp("attl_k", (1, 1, 530, 8), -1, 1)
v = inp("attl_v", (1, 1, 530, 4))
save("attl_causal", attention(q, k, v, causal=True))
bm = torch.from_numpy(rng.random((300, 530)) < 0.5)
bm[:, 0] = True
save("attl_mbool", bm.numpy())
save("attl_maskbool", attention(q, k, v, mask=bm))


# ----------------------------------------------------------------- rope
def rope(x, ang, dims, traditional):
    y = x.clone()
    c, s = ang.cos(), ang.sin()
    if traditional:
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2] = x1 * c - x2 * s
        y[..., 1:dims:2] = x1 * s + x2 * c
    else:
        h = dims // 2
        x1, x2 = x[..., :h], x[..., h:dims]
        y[..., :h] = x1 * c - x2 * s
        y[..., h:dims] = x1 * s + x2 * c
    return y


def angles(L, freqs, offset=0, scale=1.0):
    return (torch.arange(L) + offset)[:, None] * scale * freqs[None, :]


x = inp("rope_x", (2, 3, 5, 8))
f8 = 10000.0 ** (-torch.arange(0, 8, 2) / 8)
save("rope_std", rope(x, angles(5, f8), 8, False))
save("rope_trad", rope(x, angles(5, f8), 8, True))
f4 = 500.0 ** (-torch.arange(0, 4, 2) / 4)
save("rope_partial", rope(x, angles(5, f4, offset=3, scale=0.5), 4, False))
fx = inp("rope_freqs", (2,), 0, 1)
save("rope_freq", rope(x, angles(5, fx, offset=2), 4, True))
pos = torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [1, 2, 3]], dtype=torch.float64)
save("rope_pos", pos.numpy())
parts = []
for a, d in enumerate((2, 2, 4)):
    om = 10000.0 ** (-torch.arange(0, d, 2) / d)
    parts.append(pos[:, a:a + 1] * om[None, :])
save("rope_multi", rope(x, torch.cat(parts, -1), 8, True))

# ------------------------------------------------- sort, topk, scatter
x = inp("sort_x", (4, 7), -1, 1)                      # eighths in [-1, 1]: ties
xs = x.clone()
xs[1, 3] = math.nan
save("sort_xn", xs.numpy())
for desc in (False, True):
    sv, si = torch.sort(xs, dim=-1, descending=desc, stable=True)
    save("sort_%d_v" % desc, sv)
    save("sort_%d_i" % desc, si.numpy().astype(np.int64))
    sv, si = torch.sort(x, dim=0, descending=desc, stable=True)
    save("sort0_%d_v" % desc, sv)
    save("sort0_%d_i" % desc, si.numpy().astype(np.int64))
xp = torch.from_numpy(np.stack([rng.permutation(9) for _ in range(3)]).astype(np.float64) - 4)
save("topk_x", xp.numpy())
tv, ti = torch.topk(xp, 4, dim=1, largest=True)
save("topk_lv", tv)
save("topk_li", ti.numpy().astype(np.int64))
tv, ti = torch.topk(xp, 2, dim=0, largest=False)
save("topk_sv", tv)
save("topk_si", ti.numpy().astype(np.int64))
a = inp("sc_a", (3, 5))
src = inp("sc_src", (3, 6))
idx = torch.from_numpy(np.stack([rng.permutation(5)[:4] for _ in range(2)]))   # unique per row
save("sc_idx", idx.numpy().astype(np.int64))
save("scatter_1", a.scatter(1, idx, src[:2, :4]))
idx2 = torch.from_numpy(rng.integers(0, 5, size=(3, 6)))                       # duplicates
save("sc_idx2", idx2.numpy().astype(np.int64))
save("scatter_add_1", a.scatter_add(1, idx2, src))
idx0 = torch.from_numpy(rng.integers(0, 3, size=(4, 5)))
save("sc_idx0", idx0.numpy().astype(np.int64))
src0 = inp("sc_src0", (4, 5))
save("scatter_add_0", a.scatter_add(0, idx0, src0))
oi = torch.tensor([[0, 4, 2], [1, 1, 3]])
save("oh_idx", oi.numpy().astype(np.int64))
save("one_hot", F.one_hot(oi, 5).numpy().astype(np.int64))
x = inp("tri_x", (2, 4, 5))
for k in (0, 1, -2):
    save("tril_%d" % (k + 2), torch.tril(x, k))
    save("triu_%d" % (k + 2), torch.triu(x, k))


# ------------------------------------------------ timestep embedding
def timestep_embedding(t, dim, max_period=10000.0, flip=True, shift=0.0, scale=1.0):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half) / (half - shift))
    args = t[:, None] * freqs[None] * scale
    emb = torch.cat([args.cos(), args.sin()] if flip else [args.sin(), args.cos()], -1)
    if dim % 2:
        emb = F.pad(emb, (0, 1))
    return emb


t = torch.tensor([0.0, 1.5, 500.0, 999.0])
save("ts_t", t.numpy())
save("ts_a", timestep_embedding(t, 16))
save("ts_b", timestep_embedding(t, 15, flip=False, shift=1.0, scale=2.0))
print("wrote", len(os.listdir(OUT)), "fixtures to", OUT)
