/* ops_nn.h - the neural-network op set: convolution, pooling, resampling,
 * normalization, attention, RoPE, sorting/scatter and the small helpers
 * image models are made of.  Builders live in core/ops_nn.c, CPU kernels in
 * backends/cpu/nn_*.c; docs/NN.md lists where Lumen differs from PyTorch.
 *
 * Same contract as ops.h: every builder returns a new reference (release
 * it) or NULL with a message naming the op, shapes and dtypes; inputs are
 * borrowed; NULL inputs fail cleanly; axes are 0-based, negative from the
 * end.  Images are NCHW; weights use PyTorch's layouts (conv OIHW,
 * conv_transpose [Cin, Cout/groups, KH, KW], linear [out, in]).
 *
 * Float ops accept f32, f16, bf16 and f64 (integer/bool inputs promote to
 * f32); f16/bf16 compute in f32 and return their dtype; f64 computes in f64
 * except attention (f32 compute, see below).
 *
 * ---- How the nodes use lm_params (what another backend must implement) --
 * Unless stated, the output is contiguous with the node's shape and dtype,
 * inputs have any strides (broadcast axes have stride 0).
 *
 * CONV            inputs x[N,C,H,W], w[O,C/g,KH,KW] (any float dtype; read
 *                 as the compute type), optional b[O].
 *                 i[0],i[1] stride h,w; i[2],i[3] padding top,left;
 *                 i[4],i[5] padding bottom,right; i[6],i[7] dilation h,w;
 *                 i[8] groups; i[9] 1 when b is present.  Output
 *                 [N,O,OH,OW], OH = (H+pt+pb-dh*(KH-1)-1)/sh+1.  conv1d is
 *                 conv2d with H = 1 (views around the node).
 * CONV_TRANSPOSE  inputs x[N,Cin,H,W], w[Cin,Cout/g,KH,KW], optional b[Cout].
 *                 i[0],i[1] stride; i[2],i[3] padding; i[4],i[5]
 *                 output_padding; i[6],i[7] dilation; i[8] groups; i[9] bias.
 *                 OH = (H-1)*sh - 2*ph + dh*(KH-1) + oph + 1.
 * MAX_POOL        x[N,C,H,W]; i[0],i[1] kernel; i[2],i[3] stride; i[4],i[5]
 *                 padding; i[6],i[7] dilation; i[8] ceil_mode.  Padding
 *                 counts as -inf; NaN propagates.
 * AVG_POOL        as MAX_POOL (dilation 1) plus i[9] count_include_pad;
 *                 i[10] divisor override (0 = none).  Windows are clipped
 *                 to the padded input (PyTorch's rule for ceil_mode).
 * ADAPTIVE_AVG_POOL x[N,C,H,W] -> [N,C,OH,OW], i[0], i[1] = OH, OW; the
 *                 window of output i along an axis is
 *                 [floor(i*H/OH), ceil((i+1)*H/OH)).
 * UPSAMPLE        x[N,C,H,W] -> [N,C,OH,OW]; i[0] mode 0 nearest, 1
 *                 bilinear; i[1] align_corners (bilinear); f[0],f[1] the
 *                 source/destination scale h,w used to map coordinates
 *                 (1/scale_factor when a factor was given, else H/OH).
 *                 nearest: src = min(floor(dst*s), H-1), computed in f32
 *                 as PyTorch does.  bilinear: src = align_corners ?
 *                 dst*(H-1)/(OH-1) : max((dst+0.5)*s-0.5, 0); i0 = floor(src),
 *                 i1 = min(i0+1, H-1), weights (1-(src-i0), src-i0).  Nearest
 *                 keeps x's dtype (any); bilinear needs a float.  i[2] 1
 *                 when built from a scale (f[2], f[3] = the factors), else
 *                 i[3], i[4] = the size asked for (only lm_nn_rebuild reads
 *                 these).
 * SOFTMAX,LOG_SOFTMAX  i[0] = axis.  Stable (max subtracted).
 * LAYER_NORM      x, [w], [b]: normalizes over the last i[0] axes; i[1]/i[2]
 *                 1 when w/b are present (shaped like those axes); f[0] eps.
 *                 Biased variance, as PyTorch.
 * RMS_NORM        x, [w]: x * rsqrt(mean(x^2 over last i[0] axes) + f[0]) * w;
 *                 i[1] = has w.
 * GROUP_NORM      x[N,C,*], [w[C]], [b[C]]; i[0] groups; i[1],i[2] has w/b;
 *                 f[0] eps.
 * ATTENTION       q[B,Hq,Lq,D], k[B,Hk,Lk,D], v[B,Hk,Lk,Dv], optional mask
 *                 viewed (broadcast) as [B,Hq,Lq,Lk], f32 (additive) or bool
 *                 (true = attend).  i[0] causal (key j visible to query i
 *                 iff j <= i, PyTorch's top-left alignment); i[1] mask kind
 *                 0 none, 1 additive, 2 bool; f[0] scale.  Query head h uses
 *                 key/value head h / (Hq/Hk).  A row with no visible key is
 *                 NaN (as softmax of all -inf).  Output [B,Hq,Lq,Dv].
 * ROPE            x[..., L, D], angles (a float dtype, radians; the
 *                 helpers make f64 tables) viewed (broadcast) as
 *                 [..., L, i[0]/2].  Rotates the first i[0] features of each
 *                 row; the rest pass through.  i[1] = 1 "traditional"
 *                 (pairs (2j, 2j+1), GPT-J/FLUX), 0 standard (pairs (j,
 *                 j+i[0]/2), GPT-NeoX/LLaMA in HF):
 *                 y1 = x1*cos(a_j) - x2*sin(a_j), y2 = x1*sin(a_j) + x2*cos(a_j).
 * TOPK            x; i[0] axis; i[1] k; i[2] largest; i[3] 0 = values (x's
 *                 dtype), 1 = indices (i64).  Sorted; NaN is largest; ties
 *                 keep the lower index first.
 * SORT,ARGSORT    x; i[0] axis; i[1] descending.  Stable; NaN last
 *                 (ascending) / first (descending), as PyTorch.  ARGSORT i64.
 * SCATTER,SCATTER_ADD  a, idx (i64, same ndim), src (a's dtype, already
 *                 broadcast to idx's shape); i[0] axis.  out = a, then for
 *                 every position p of idx: out[p with axis -> idx[p]] =
 *                 (or +=) src[p].  Negative indices count from the end; out
 *                 of range fails at evaluation.  For duplicate indices in
 *                 SCATTER the last position in row-major order wins.
 * ONE_HOT         idx (integer) -> i64 [..., i[0]]; out-of-range fails.
 * TRIL,TRIU       x[..., M, N]; i[0] = diagonal k; keeps j <= i+k (tril) or
 *                 j >= i+k (triu), zeroes the rest.
 * Not used as nodes (these are compositions of other builders):
 * PIXEL_SHUFFLE, PIXEL_UNSHUFFLE, BATCH_NORM, L2_NORMALIZE,
 * TIMESTEP_EMBEDDING. */
#ifndef LM_OPS_NN_H
#define LM_OPS_NN_H

#include "array.h"

/* ---- convolution ---- */
/* x[N,C,L], w[O,C/g,K], b[O] or NULL.  pad[2] = left, right. */
lm_array *lm_conv1d(lm_array *x, lm_array *w, lm_array *b, int64_t stride,
                    const int64_t pad[2], int64_t dilation, int64_t groups);
/* x[N,C,H,W], w[O,C/g,KH,KW], b[O] or NULL.  stride[2], dilation[2] are
 * (h, w); pad[4] = top, bottom, left, right (a symmetric padding p is
 * {p, p, p, p}).  f16/bf16 weights with an f32 x are fine. */
lm_array *lm_conv2d(lm_array *x, lm_array *w, lm_array *b, const int64_t stride[2],
                    const int64_t pad[4], const int64_t dilation[2], int64_t groups);
/* x[N,Cin,H,W], w[Cin,Cout/g,KH,KW]; pad[2] and output_padding[2] are (h, w). */
lm_array *lm_conv_transpose2d(lm_array *x, lm_array *w, lm_array *b, const int64_t stride[2],
                              const int64_t pad[2], const int64_t output_padding[2],
                              const int64_t dilation[2], int64_t groups);

/* ---- pooling and resampling (all (h, w) pairs) ---- */
/* stride NULL = kernel; dilation NULL = 1 */
lm_array *lm_max_pool2d(lm_array *x, const int64_t kernel[2], const int64_t stride[2],
                        const int64_t pad[2], const int64_t dilation[2], bool ceil_mode);
/* divisor_override 0 = none */
lm_array *lm_avg_pool2d(lm_array *x, const int64_t kernel[2], const int64_t stride[2],
                        const int64_t pad[2], bool ceil_mode, bool count_include_pad,
                        int64_t divisor_override);
lm_array *lm_adaptive_avg_pool2d(lm_array *x, const int64_t out_hw[2]);
typedef enum lm_upsample_mode { LM_UPSAMPLE_NEAREST = 0, LM_UPSAMPLE_BILINEAR = 1 } lm_upsample_mode;
/* Exactly one of size (output h, w) and scale (factors h, w) is non-NULL.
 * With a scale the output is floor(H*scale) and coordinates map by
 * 1/scale, as PyTorch without recompute_scale_factor. */
lm_array *lm_upsample(lm_array *x, const int64_t size[2], const double scale[2],
                      lm_upsample_mode mode, bool align_corners);
/* depth-to-space: [N, C*r*r, H, W] -> [N, C, H*r, W*r], and back */
lm_array *lm_pixel_shuffle(lm_array *x, int64_t r);
lm_array *lm_pixel_unshuffle(lm_array *x, int64_t r);

/* ---- normalization ---- */
lm_array *lm_softmax(lm_array *x, int axis);
lm_array *lm_log_softmax(lm_array *x, int axis);
/* normalizes over the last `naxes` axes; w and b (each may be NULL) have
 * the shape of those axes */
lm_array *lm_layer_norm(lm_array *x, int naxes, lm_array *w, lm_array *b, double eps);
lm_array *lm_rms_norm(lm_array *x, int naxes, lm_array *w, double eps);
/* x[N, C, *]; w, b of shape [C] or NULL */
lm_array *lm_group_norm(lm_array *x, int64_t groups, lm_array *w, lm_array *b, double eps);
/* inference form: (x - mean) / sqrt(var + eps) * w + b over axis 1 of
 * x[N, C, *]; mean, var, w, b are [C] (w, b may be NULL) */
lm_array *lm_batch_norm(lm_array *x, lm_array *mean, lm_array *var, lm_array *w,
                        lm_array *b, double eps);
/* x / max(||x||_2 over axis, eps) - torch.nn.functional.normalize */
lm_array *lm_l2_normalize(lm_array *x, int axis, double eps);

/* ---- linear layers and gated activations ---- */
/* x[..., in] @ w[out, in]^T + b[out] (b may be NULL) */
lm_array *lm_linear(lm_array *x, lm_array *w, lm_array *b);
/* silu(gate) * up and gelu(gate) * up (exact erf GELU).  With up == NULL
 * the last axis of gate is split in halves: first half is the gate, second
 * the value.  (diffusers' GEGLU gates with the second half: pass the
 * halves explicitly.) */
lm_array *lm_swiglu(lm_array *gate, lm_array *up);
lm_array *lm_geglu(lm_array *gate, lm_array *up);
/* x for x >= 0, slope * x below (ESRGAN's activation); NaN stays NaN */
lm_array *lm_leaky_relu(lm_array *x, double slope);
/* weight[V, D] rows picked by integer idx of any shape -> [idx..., D] */
lm_array *lm_embedding(lm_array *weight, lm_array *idx);

/* ---- attention ---- */
/* q[B,Hq,Lq,D], k[B,Hk,Lk,D], v[B,Hk,Lk,Dv]; Hq % Hk == 0.  mask NULL, or
 * bool (true = attend) or float (added to the scores), broadcastable to
 * [B,Hq,Lq,Lk].  scale <= 0 or NaN means 1/sqrt(D).  Blocks of keys are
 * folded in with an online softmax, so memory stays O(L * block). */
lm_array *lm_attention(lm_array *q, lm_array *k, lm_array *v, lm_array *mask, bool causal,
                       double scale);

/* ---- rotary position embedding (x[..., L, D], positions along axis -2) ---- */
/* angle of position p (= offset + row) and pair j: p * scale * base^(-2j/dims) */
lm_array *lm_rope(lm_array *x, int64_t dims, bool traditional, double base, double scale,
                  int64_t offset);
/* the same with explicit frequencies freqs[dims/2] (angle = p * scale * freqs[j]) */
lm_array *lm_rope_freqs(lm_array *x, int64_t dims, bool traditional, lm_array *freqs,
                        double scale, int64_t offset);
/* Multi-axis RoPE (FLUX, Z-Image DiTs): pos[..., L, naxes] holds one
 * position per axis; axis a owns axes_dims[a] features (their sum is the
 * rotated dims) with frequencies theta^(-2j/axes_dims[a]).  pos broadcasts
 * against x's leading axes. */
lm_array *lm_rope_multi(lm_array *x, lm_array *pos, int naxes, const int64_t *axes_dims,
                        double theta, bool traditional);
/* angles broadcastable to [..., L, dims/2] in radians: the ROPE node */
lm_array *lm_rope_angles(lm_array *x, lm_array *angles, int64_t dims, bool traditional);

/* ---- sorting, selection, scatter ---- */
/* values and indices (i64) of the k largest (or smallest) along axis,
 * sorted; either out pointer may be NULL.  Returns LM_OK or an error. */
lm_status lm_topk(lm_array *x, int64_t k, int axis, bool largest, lm_array **values,
                  lm_array **indices);
lm_array *lm_sort(lm_array *x, int axis, bool descending);
lm_array *lm_argsort(lm_array *x, int axis, bool descending);
/* torch.scatter / scatter_add: idx has a's ndim, idx.shape[d] <= a.shape[d]
 * for d != axis and <= src.shape[d] for every d; src may also be 0-d. */
lm_array *lm_scatter(lm_array *a, int axis, lm_array *idx, lm_array *src);
lm_array *lm_scatter_add(lm_array *a, int axis, lm_array *idx, lm_array *src);
/* i64 [..., num_classes]; num_classes must be > 0 (Lumen does not look at
 * the data to infer it) */
lm_array *lm_one_hot(lm_array *idx, int64_t num_classes);
lm_array *lm_tril(lm_array *x, int64_t k);
lm_array *lm_triu(lm_array *x, int64_t k);

/* ---- diffusion helpers ---- */
/* t[N] -> [N, dim]: half = dim/2, freq_j = exp(-ln(max_period) * j /
 * (half - shift)), args = t * freq * scale, result [cos | sin] when
 * flip_sin_to_cos (ldm/Flux), else [sin | cos] (diffusers' default); an
 * odd dim gets a zero last column. */
lm_array *lm_timestep_embedding(lm_array *t, int64_t dim, double max_period,
                                bool flip_sin_to_cos, double shift, double scale);

/* ---- replay ---- */
/* The node an NN builder would make for new inputs (of any shapes) from
 * the op and params of a traced node: what compile needs to replay a trace
 * on new shapes.  in are the traced node's inputs, in order (n of them).
 * Compositions have no node of their own and need no rebuild. */
lm_array *lm_nn_rebuild(lm_op op, const lm_params *p, int n, lm_array *const *in);

#endif
