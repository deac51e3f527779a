// nn_attn_cm2.glsl - scaled dot-product attention on tensor cores through
// GL_NV_cooperative_matrix2 (glslang 15, SPIR-V 1.6: module.mk's
// VK_CM2_VARIANTS), picked by nn_attn_fa.c's cm2_shader before the KHR
// kernel.  f16 q, k and v (bf16 in the _bf builds: tools/spvpack.c
// --bf16 makes the module's float16_t bfloat16) with a unit-stride head
// dim, D = Dv <= HD (a multiple of 8; dims past D read as zeros), no mask
// or causal, grouped heads; output f16 / bf16 (as q) or f32.
//
// FlashAttention-2 with workgroup-scope matrices: a workgroup of NT
// invocations owns BQ queries of one (batch, head) and folds in BC keys a
// step.  Nothing is staged or split over subgroups by hand: Q (BQ x HD, A),
// K^T (HD x BC, B: K's rows read through a transposing tensor view) and V
// (BC x HD, B) are loaded from memory through tensor layouts, and the
// driver spreads the products, the row reductions and the per-element
// functions over the workgroup as the GPU wants (where nn_attn_khr.glsl,
// on subgroup-scope matrices, keeps S, P and O of its rows in one
// subgroup's registers: 255 a thread at D 128).  Per step:
//   S  = Q K^T                      (f32 accumulators)
//   S  = -inf where a key is past Lk or, causal, past the query (only in
//        the steps that hold such keys)
//   mx = rowmax(S); M' = max(M, mx)  (coopMatReduceNV, NaN-propagating)
//   P  = exp2((S - M') * scale), e = exp2((M - M') * scale)
//   L  = L e + rowsum(P);  O = O e + P V  (P rounded to the A type)
// with scale = the softmax scale * log2(e) (> 0, nn_attn_fa.c), so maxima
// of raw scores are maxima of scaled ones.  M and L are kept as BQ x BC
// matrices (every column a copy; NARROW: BQ x 16, smeared over BC for P)
// and e is smeared over HD columns for O.
// As in the other kernels: a row with nothing visible yet adds nothing
// (M = -inf gives P = 0 and e = 1), NaN in a score reaches its row, and
// a row that saw no key ends as 0 / 0 = NaN, as on the CPU.
//
// Tails without branches: a clamped layout gives zeros for K and V rows
// past Lk and Q rows past Lq and drops the stores past Lq; steps whose BC
// keys lie inside Lk (with D = HD) load through unclamped layouts, the
// driver's faster path.  Each load's base must be 16-byte aligned: the
// host passes rows starting on 8 elements (nn_attn_fa.c's fa_input).
// Bindings and push constants as nn_attn_khr.glsl's (run_khr in
// nn_attn_fa.c; binding 3, the mask, is not read).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#include "common.glsl"

#ifndef HD
#define HD 128
#endif
#ifndef BQ
#define BQ 64                  // queries a workgroup
#endif
#ifndef BC
#define BC 64                  // keys a step
#endif
#ifndef NT
#define NT 128                 // invocations
#endif

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTQ = 0;
layout(constant_id = 1) const uint DTK = 0;
layout(constant_id = 2) const uint DTV = 0;
layout(constant_id = 3) const uint DTO = 0;

// must match nn_attn_fa.c's khr_pc
layout(push_constant) uniform PC {
    int Hq, Lq, Lk, nqb, grp;          // grp = Hq / Hk
    uint items, causal, mask;          // items = B * Hq * nqb; mask: 0 (none) here
    float scale;                       // scale * log2(e), > 0
    int D;                             // head dim (<= HD, a multiple of 8)
    int oq, ok, ov, om;                // element offsets
    int sq[3], sk[3], sv[3];           // batch, head and row strides
    int sm[4];
} pc;

layout(std430, set = 0, binding = 0) readonly buffer Q16 { float16_t v[]; } q16;
layout(std430, set = 0, binding = 1) readonly buffer K16 { float16_t v[]; } k16;
layout(std430, set = 0, binding = 2) readonly buffer V16 { float16_t v[]; } v16;
layout(std430, set = 0, binding = 4) writeonly buffer O32 { float v[]; } o32;
layout(std430, set = 0, binding = 4) writeonly buffer O16 { float16_t v[]; } o16;

#define CLAMP0 gl_CooperativeMatrixClampModeConstantNV
#define MAT_Q coopmat<float16_t, gl_ScopeWorkgroup, BQ, HD, gl_MatrixUseA>
#define MAT_K coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB>
#define MAT_V coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB>
#define MAT_P coopmat<float16_t, gl_ScopeWorkgroup, BQ, BC, gl_MatrixUseA>
#define ACC_S coopmat<float, gl_ScopeWorkgroup, BQ, BC, gl_MatrixUseAccumulator>
#define ACC_O coopmat<float, gl_ScopeWorkgroup, BQ, HD, gl_MatrixUseAccumulator>
#define ACC_O16 coopmat<float16_t, gl_ScopeWorkgroup, BQ, HD, gl_MatrixUseAccumulator>
#ifdef NARROW   // M and L as BQ x 16 (smeared over BC for P)
#define ACC_R coopmat<float, gl_ScopeWorkgroup, BQ, 16, gl_MatrixUseAccumulator>
#else
#define ACC_R ACC_S
#endif

#define F_NINF uintBitsToFloat(0xff800000u)
#define F_NAN uintBitsToFloat(0x7fc00000u)

// the reductions' combiners: NaN-propagating max, sum, and a smear (the
// row's value copied over the destination's columns)
float red_max(const in float a, const in float b) { return b > a || isnan(b) ? b : a; }
float red_sum(const in float a, const in float b) { return a + b; }
float red_first(const in float a, const in float b) { return a; }

// the keys a query cannot see: past Lk, or past the query under causal
float hide(const in uint32_t r, const in uint32_t c, const in float s, const in int q0, const in int j0)
{
    int key = j0 + int(c);
    return key >= pc.Lk || (pc.causal != 0u && key > q0 + int(r)) ? F_NINF : s;
}

float new_max(const in uint32_t r, const in uint32_t c, const in float mx, const in float m)
{
    return red_max(m, mx);
}

// P from S and the new maximum m (-inf: nothing visible yet, P = 0)
float prob(const in uint32_t r, const in uint32_t c, const in float s, const in float m)
{
    return m == F_NINF ? 0.0 : exp2((s - m) * pc.scale);
}

// the factor on what the row held: 1 while nothing is visible, 0 for the
// first visible block
float rescale(const in uint32_t r, const in uint32_t c, const in float mold, const in float m)
{
    return m == F_NINF ? 1.0 : mold == F_NINF ? 0.0 : exp2((mold - m) * pc.scale);
}

// O / L (0 where nothing was visible: NaN) rounded to the output type
float finish(const in uint32_t r, const in uint32_t c, const in float o, const in float l)
{
    float x = l > 0.0 ? o * (1.0 / l) : F_NAN;
    if (DTO == DT_F32) return x;
#ifdef BF16
    return uintBitsToFloat(f32_to_bf16(x) << 16);
#else
    return f16_to_f32(f32_to_f16(x));
#endif
}

void main()
{
    uint bhn = pc.items / uint(pc.nqb);
    bool dfull = pc.D == HD;
    for (uint w = gl_WorkGroupID.x; w < pc.items; w += gl_NumWorkGroups.x) {
        // the last query blocks (the longest under causal) first
        int bh = int(w % bhn), qblk = pc.nqb - 1 - int(w / bhn);
        int b = bh / pc.Hq, hq = bh % pc.Hq, kh = hq / pc.grp, i0 = qblk * BQ;
        int bq = min(BQ, pc.Lq - i0);
        int kend = pc.causal != 0u ? min(pc.Lk, i0 + bq) : pc.Lk;
        uint qb = uint(pc.oq + b * pc.sq[0] + hq * pc.sq[1]);
        uint kb = uint(pc.ok + b * pc.sk[0] + kh * pc.sk[1]);
        uint vb = uint(pc.ov + b * pc.sv[0] + kh * pc.sv[1]);

        tensorLayoutNV<2, CLAMP0> lq = createTensorLayoutNV(2, CLAMP0);
        lq = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lq, uint(pc.Lq), uint(pc.D)), uint(pc.sq[2]), 1);
        tensorLayoutNV<2, CLAMP0> lkc = createTensorLayoutNV(2, CLAMP0);
        lkc = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lkc, uint(pc.Lk), uint(pc.D)), uint(pc.sk[2]), 1);
        tensorLayoutNV<2, CLAMP0> lvc = createTensorLayoutNV(2, CLAMP0);
        lvc = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lvc, uint(pc.Lk), uint(pc.D)), uint(pc.sv[2]), 1);
        tensorLayoutNV<2> lk = createTensorLayoutNV(2);
        lk = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lk, uint(pc.Lk), uint(HD)), uint(pc.sk[2]), 1);
        tensorLayoutNV<2> lv = createTensorLayoutNV(2);
        lv = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lv, uint(pc.Lk), uint(HD)), uint(pc.sv[2]), 1);
        tensorViewNV<2, false, 1, 0> tv = createTensorViewNV(2, false, 1, 0);

        MAT_Q qm;
        coopMatLoadTensorNV(qm, q16.v, qb, sliceTensorLayoutNV(lq, i0, BQ, 0, HD));

        ACC_O o = ACC_O(0.0);
        ACC_R m = ACC_R(F_NINF), l = ACC_R(0.0);
        for (int j0 = 0; j0 < kend; j0 += BC) {
            bool inside = dfull && j0 + BC <= pc.Lk;
            MAT_K km;
            if (inside) coopMatLoadTensorNV(km, k16.v, kb, sliceTensorLayoutNV(lk, j0, BC, 0, HD), tv);
            else coopMatLoadTensorNV(km, k16.v, kb, sliceTensorLayoutNV(lkc, j0, BC, 0, HD), tv);
            ACC_S s = ACC_S(0.0);
            s = coopMatMulAdd(qm, km, s);
            // keys past Lk, or (causal) past the block's first query
            if (j0 + BC > pc.Lk || (pc.causal != 0u && j0 + BC - 1 > i0))
                coopMatPerElementNV(s, s, hide, i0, j0);

            ACC_R mx, mn, e, ps;
            ACC_S p;
            coopMatReduceNV(mx, s, gl_CooperativeMatrixReduceRowNV, red_max);
            coopMatPerElementNV(mn, mx, new_max, m);
#ifdef NARROW
            ACC_S mw;
            coopMatReduceNV(mw, mn, gl_CooperativeMatrixReduceRowNV, red_first);
            coopMatPerElementNV(p, s, prob, mw);
#else
            coopMatPerElementNV(p, s, prob, mn);
#endif
            coopMatPerElementNV(e, m, rescale, mn);
            m = mn;
            coopMatReduceNV(ps, p, gl_CooperativeMatrixReduceRowNV, red_sum);
            l = l * e + ps;
            ACC_O eo;
            coopMatReduceNV(eo, e, gl_CooperativeMatrixReduceRowNV, red_first);
            o = o * eo;

            MAT_P pm = MAT_P(p);
            MAT_V vm;
            if (inside) coopMatLoadTensorNV(vm, v16.v, vb, sliceTensorLayoutNV(lv, j0, BC, 0, HD));
            else coopMatLoadTensorNV(vm, v16.v, vb, sliceTensorLayoutNV(lvc, j0, BC, 0, HD));
            o = coopMatMulAdd(pm, vm, o);
        }

        ACC_O lo;
        coopMatReduceNV(lo, l, gl_CooperativeMatrixReduceRowNV, red_first);
        coopMatPerElementNV(o, o, finish, lo);
        tensorLayoutNV<2, CLAMP0> lout = createTensorLayoutNV(2, CLAMP0);
        lout = setTensorLayoutDimensionNV(lout, uint(pc.Lq), uint(pc.D));
        uint ob = uint(bh) * uint(pc.Lq) * uint(pc.D);
        if (DTO == DT_F32) {
            coopMatStoreTensorNV(o, o32.v, ob, sliceTensorLayoutNV(lout, i0, BQ, 0, HD));
        } else {
            ACC_O16 h = ACC_O16(o);
            coopMatStoreTensorNV(h, o16.v, ob, sliceTensorLayoutNV(lout, i0, BQ, 0, HD));
        }
    }
}
