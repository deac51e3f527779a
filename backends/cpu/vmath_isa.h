/* vmath_isa.h - the body of one vmath table (vmath.h), included once by
 * each vmath_<isa>.c.  That file is compiled for its instruction set and
 * defines, before including this one:
 *   VM_TABLE      the table's symbol, VM_NAME its name
 *   VF, VW        the f32 vector type (__m128, __m256, __m512) and its lanes
 *   VM_SL(f)      SLEEF's u10 function f at this width (Sleef_expf8_u10avx2)
 *   VM_SL15(f), VM_SL05(f)  the u15 and u05 forms, for functions SLEEF has
 *                 at no 1.0 ulp (erfc, hypot)
 *   VLOAD, VSTORE unaligned load and store, VSTREAM aligned non-temporal store,
 *   VSQRT(v) the hardware square root
 *   VM_F16C       (optional) VH2F(p) / VF2H(p, v): halves <-> VF (F16C)
 * Only static functions here: nothing compiled for a wide instruction set
 * may be shared with (and picked by the linker for) code that runs on any
 * x86-64.  Vector operators are GCC's vector extensions on the intrinsic
 * types. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sleef.h>
#include "core/dtype.h"
#include "vmath.h"

typedef int32_t vm_vi __attribute__((vector_size(VW * 4)));

static inline VF vm_splat(float x) { return (VF){0} + x; }
/* mask ? a : b, mask lanes all ones or zero */
static inline VF vm_sel(vm_vi m, VF a, VF b) { return (VF)(((vm_vi)a & m) | ((vm_vi)b & ~m)); }

/* ---- the functions, one vector at a time ---- */
static inline VF vm_exp(VF v) { return VM_SL(exp)(v); }
static inline VF vm_log(VF v) { return VM_SL(log)(v); }
static inline VF vm_log1p(VF v) { return VM_SL(log1p)(v); }
static inline VF vm_expm1(VF v) { return VM_SL(expm1)(v); }
static inline VF vm_sin(VF v) { return VM_SL(sin)(v); }
static inline VF vm_cos(VF v) { return VM_SL(cos)(v); }
static inline VF vm_tan(VF v) { return VM_SL(tan)(v); }
static inline VF vm_tanh(VF v) { return VM_SL(tanh)(v); }
static inline VF vm_erf(VF v) { return VM_SL(erf)(v); }
static inline VF vm_erfc(VF v) { return VM_SL15(erfc)(v); }
static inline VF vm_sqrt(VF v) { return VSQRT(v); }
static inline VF vm_rsqrt(VF v) { return vm_splat(1.0f) / VSQRT(v); }
/* exp of -|x| only, so a large negative x gives e / (1 + e), not 1 / inf */
static inline VF vm_sigmoid(VF v)
{
    VF neg = vm_sel(v > vm_splat(0.0f), -v, v), e = vm_exp(neg), s = vm_splat(1.0f) / (vm_splat(1.0f) + e);
    return vm_sel(v > vm_splat(0.0f), s, e * s);
}
static inline VF vm_silu(VF v) { return v * vm_sigmoid(v); }
static inline VF vm_gelu(VF v)
{
    return vm_splat(0.5f) * v * (vm_splat(1.0f) + vm_erf(v * vm_splat(0.70710678118654752f)));
}
/* 0.5 x (1 + tanh(u)) == x * sigmoid(2u): one exp instead of a tanh */
static inline VF vm_gelu_tanh(VF v)
{
    VF u = vm_splat(0.79788456080286536f) * (v + vm_splat(0.044715f) * v * v * v);
    return v * vm_sigmoid(vm_splat(2.0f) * u);
}
static inline VF vm_softplus(VF v)
{
    return vm_sel(v > vm_splat(20.0f), v, vm_log1p(vm_exp(v)));
}

/* whole vectors, then the tail through a zero-padded vector (the padding's
 * results are thrown away; floating-point exceptions are not trapped) */
#define VM_MAP(name, FN) \
    static void map_##name(float *o, const float *x, int64_t n) \
    { \
        int64_t i = 0; \
        for (; i + VW <= n; i += VW) VSTORE(o + i, FN(VLOAD(x + i))); \
        if (i < n) { \
            float t[VW] = {0}; \
            memcpy(t, x + i, (size_t)(n - i) * sizeof(float)); \
            VSTORE(t, FN(VLOAD(t))); \
            memcpy(o + i, t, (size_t)(n - i) * sizeof(float)); \
        } \
    }
#define VM_MAP_ROW(NAME, name) VM_MAP(name, vm_##name)
LM_VM_UNARY_FNS(VM_MAP_ROW)
#undef VM_MAP_ROW

/* one loop per broadcast case, so no test runs per vector */
#define VM_MAP2(name, FN) \
    static void map2_##name(float *o, const float *a, int sa, const float *b, int sb, int64_t n) \
    { \
        VF a1 = vm_splat(a[0]), b1 = vm_splat(b[0]); \
        int64_t i = 0; \
        if (sa && sb) \
            for (; i + VW <= n; i += VW) VSTORE(o + i, FN(VLOAD(a + i), VLOAD(b + i))); \
        else if (sa) \
            for (; i + VW <= n; i += VW) VSTORE(o + i, FN(VLOAD(a + i), b1)); \
        else if (sb) \
            for (; i + VW <= n; i += VW) VSTORE(o + i, FN(a1, VLOAD(b + i))); \
        else \
            for (; i + VW <= n; i += VW) VSTORE(o + i, FN(a1, b1)); \
        if (i < n) { \
            float ta[VW] = {0}, tb[VW] = {0}; \
            for (int64_t k = i; k < n; k++) { \
                ta[k - i] = a[k * sa]; \
                tb[k - i] = b[k * sb]; \
            } \
            VSTORE(ta, FN(VLOAD(ta), VLOAD(tb))); \
            memcpy(o + i, ta, (size_t)(n - i) * sizeof(float)); \
        } \
    }
static inline VF vm_add(VF a, VF b) { return a + b; }
static inline VF vm_sub(VF a, VF b) { return a - b; }
static inline VF vm_mul(VF a, VF b) { return a * b; }
static inline VF vm_div(VF a, VF b) { return a / b; }
static inline VF vm_max(VF a, VF b) { return vm_sel((a > b) | (a != a), a, b); }
static inline VF vm_min(VF a, VF b) { return vm_sel((a < b) | (a != a), a, b); }
VM_MAP2(add, vm_add)
VM_MAP2(sub, vm_sub)
VM_MAP2(mul, vm_mul)
VM_MAP2(div, vm_div)
VM_MAP2(max, vm_max)
VM_MAP2(min, vm_min)
VM_MAP2(pow, VM_SL(pow))
VM_MAP2(atan2, VM_SL(atan2))
/* max(a, b) + log1p(exp(-|a - b|)); equal infinities give that infinity
 * (as torch.logaddexp), a NaN operand gives NaN */
static inline VF vm_logaddexp(VF a, VF b)
{
    VF m = vm_sel(a > b, a, b), d = a - b;
    VF ad = vm_sel(d < vm_splat(0.0f), -d, d);
    VF r = m + vm_log1p(vm_exp(-ad));
    return vm_sel(a == b, a + vm_splat(0.6931471805599453f), vm_sel(d != d, d, r));
}
VM_MAP2(logaddexp, vm_logaddexp)
/* SLEEF has hypot only at 0.5 and 3.5 ulp (no u10 form): the 0.5-ulp one */
VM_MAP2(hypot, VM_SL05(hypot))

static void stream_copy(float *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    while (i < n && ((uintptr_t)(dst + i) & (VW * 4 - 1))) {
        dst[i] = src[i];
        i++;
    }
    for (; i + VW <= n; i += VW) VSTREAM(dst + i, VLOAD(src + i));
    for (; i < n; i++) dst[i] = src[i];
    _mm_sfence();
}

/* four accumulators; NaN is found by a sum of x - x (inf - inf is NaN
 * too, so a row with an infinity is rescanned for a real NaN) */
static float row_max(const float *x, int64_t n)
{
    VF m0 = vm_splat(-INFINITY), m1 = m0, m2 = m0, m3 = m0, bad = vm_splat(0);
    int64_t i = 0;
    for (; i + 4 * VW <= n; i += 4 * VW) {
        VF a = VLOAD(x + i), b = VLOAD(x + i + VW), c = VLOAD(x + i + 2 * VW), d = VLOAD(x + i + 3 * VW);
        m0 = vm_sel(a > m0, a, m0);
        m1 = vm_sel(b > m1, b, m1);
        m2 = vm_sel(c > m2, c, m2);
        m3 = vm_sel(d > m3, d, m3);
        bad += (a - a) + (b - b) + (c - c) + (d - d);
    }
    m0 = vm_sel(m1 > m0, m1, m0);
    m2 = vm_sel(m3 > m2, m3, m2);
    m0 = vm_sel(m2 > m0, m2, m0);
    float t[VW], u[VW], r = -INFINITY, b = 0;
    VSTORE(t, m0);
    VSTORE(u, bad);
    for (int k = 0; k < VW; k++) {
        r = t[k] > r ? t[k] : r;
        b += u[k];
    }
    for (; i < n; i++) {
        r = x[i] > r ? x[i] : r;
        b += x[i] - x[i];
    }
    if (b != b)
        for (i = 0; i < n; i++)
            if (x[i] != x[i]) return NAN;
    return r;
}

static void scale(float *o, const float *x, int64_t n, float s, bool nt)
{
    VF sv = vm_splat(s);
    int64_t i = 0;
    if (nt) {
        for (; i < n && ((uintptr_t)(o + i) & (VW * 4 - 1)); i++) o[i] = x[i] * s;
        for (; i + VW <= n; i += VW) VSTREAM(o + i, VLOAD(x + i) * sv);
    } else {
        for (; i + VW <= n; i += VW) VSTORE(o + i, VLOAD(x + i) * sv);
    }
    for (; i < n; i++) o[i] = x[i] * s;
}

/* the lanes' sum by halving (a tree, not a serial chain) */
static inline float vm_hsum(VF v)
{
#if VW == 16
    __m256 h = _mm512_castps512_ps256(v) + _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m128 q = _mm256_castps256_ps128(h) + _mm256_extractf128_ps(h, 1);
#elif VW == 8
    __m128 q = _mm256_castps256_ps128(v) + _mm256_extractf128_ps(v, 1);
#else
    __m128 q = v;
#endif
    q = q + _mm_movehl_ps(q, q);
    q = q + _mm_shuffle_ps(q, q, 1);
    return _mm_cvtss_f32(q);
}

#define STAT_CHUNK 512
/* per chunk of 512 (in L1): its f32 mean from four running sums, then the
 * squared deviations from it, merged into the row's in double */
static void moments(const float *x, int64_t n, double *mean_out, double *m2_out)
{
    double mean = 0, m2 = 0, cnt = 0;
    for (int64_t c0 = 0; c0 < n; c0 += STAT_CHUNK) {
        int64_t len = n - c0 < STAT_CHUNK ? n - c0 : STAT_CHUNK, i = 0;
        const float *p = x + c0;
        VF s0 = vm_splat(0), s1 = s0, s2 = s0, s3 = s0;
        float tail = 0;
        for (; i + 4 * VW <= len; i += 4 * VW) {
            s0 += VLOAD(p + i);
            s1 += VLOAD(p + i + VW);
            s2 += VLOAD(p + i + 2 * VW);
            s3 += VLOAD(p + i + 3 * VW);
        }
        for (; i < len; i++) tail += p[i];
        float cm = (vm_hsum((s0 + s1) + (s2 + s3)) + tail) / (float)len;
        VF q0 = vm_splat(0), q1 = q0, q2 = q0, q3 = q0, cv = vm_splat(cm);
        float qt = 0;
        for (i = 0; i + 4 * VW <= len; i += 4 * VW) {
            VF d0 = VLOAD(p + i) - cv, d1 = VLOAD(p + i + VW) - cv, d2 = VLOAD(p + i + 2 * VW) - cv,
               d3 = VLOAD(p + i + 3 * VW) - cv;
            q0 += d0 * d0;
            q1 += d1 * d1;
            q2 += d2 * d2;
            q3 += d3 * d3;
        }
        for (; i < len; i++) qt += (p[i] - cm) * (p[i] - cm);
        double cq = (double)vm_hsum((q0 + q1) + (q2 + q3)) + qt, nb = (double)len, d = (double)cm - mean;
        mean += d * nb / (cnt + nb);
        m2 += cq + d * d * cnt * nb / (cnt + nb);
        cnt += nb;
    }
    *mean_out = mean;
    *m2_out = m2;
}

static double sumsq(const float *x, int64_t n)
{
    double acc = 0;
    for (int64_t c0 = 0; c0 < n; c0 += STAT_CHUNK) {
        int64_t len = n - c0 < STAT_CHUNK ? n - c0 : STAT_CHUNK, i = 0;
        const float *p = x + c0;
        VF s0 = vm_splat(0), s1 = vm_splat(0);
        for (; i + 2 * VW <= len; i += 2 * VW) {
            VF a = VLOAD(p + i), b = VLOAD(p + i + VW);
            s0 += a * a;
            s1 += b * b;
        }
        double t = vm_hsum(s0 + s1);
        for (; i < len; i++) t += (double)p[i] * p[i];
        acc += t;
    }
    return acc;
}

/* streamed stores need an aligned start: elements before it one by one */
static inline int64_t vm_head(const float *o, int64_t n, bool nt)
{
    int64_t h = nt ? (int64_t)((((uintptr_t)0 - (uintptr_t)o) & (VW * 4 - 1)) / 4) : 0;
    return h < n ? h : n;
}

/* one loop per (w, b, nt) case, so no test runs per vector */
#define VM_AFFINE_LOOP(EXPR) \
    do { \
        if (nt) \
            for (; i + VW <= n; i += VW) { VF y = (VLOAD(x + i) - mv) * rv; VSTREAM(o + i, EXPR); } \
        else \
            for (; i + VW <= n; i += VW) { VF y = (VLOAD(x + i) - mv) * rv; VSTORE(o + i, EXPR); } \
    } while (0)

static inline void affine_scalar(float *o, const float *x, int64_t k0, int64_t k1, float mean, float rstd,
                                 const float *w, const float *b)
{
    for (int64_t k = k0; k < k1; k++) {
        float y = (x[k] - mean) * rstd;
        if (w) y *= w[k];
        if (b) y += b[k];
        o[k] = y;
    }
}

static void affine(float *o, const float *x, int64_t n, float mean, float rstd, const float *w, const float *b,
                   bool nt)
{
    VF mv = vm_splat(mean), rv = vm_splat(rstd);
    int64_t i = vm_head(o, n, nt);
    affine_scalar(o, x, 0, i, mean, rstd, w, b);
    if (w && b) VM_AFFINE_LOOP(y * VLOAD(w + i) + VLOAD(b + i));
    else if (w) VM_AFFINE_LOOP(y * VLOAD(w + i));
    else if (b) VM_AFFINE_LOOP(y + VLOAD(b + i));
    else VM_AFFINE_LOOP(y);
    affine_scalar(o, x, i, n, mean, rstd, w, b);
}

static void axpb(float *o, const float *x, int64_t n, float a, float c, bool nt)
{
    VF av = vm_splat(a), cv = vm_splat(c);
    int64_t i = vm_head(o, n, nt);
    for (int64_t k = 0; k < i; k++) o[k] = x[k] * a + c;
    if (nt)
        for (; i + VW <= n; i += VW) VSTREAM(o + i, VLOAD(x + i) * av + cv);
    else
        for (; i + VW <= n; i += VW) VSTORE(o + i, VLOAD(x + i) * av + cv);
    for (; i < n; i++) o[i] = x[i] * a + c;
}

/* Two vectors per step keep two exp chains in flight; f32 partial sums
 * are folded into a double every 2048 elements so long rows stay exact
 * to f32 rounding of each term. */
static double exp_sub_sum(float *o, const float *x, int64_t n, float m)
{
    VF s0 = vm_splat(0), s1 = vm_splat(0), mv = vm_splat(m);
    double acc = 0;
    int64_t i = 0, since = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        VF e0 = vm_exp(VLOAD(x + i) - mv), e1 = vm_exp(VLOAD(x + i + VW) - mv);
        VSTORE(o + i, e0);
        VSTORE(o + i + VW, e1);
        s0 += e0;
        s1 += e1;
        if ((since += 2 * VW) >= 2048) {
            float t[VW];
            VSTORE(t, s0 + s1);
            for (int k = 0; k < VW; k++) acc += t[k];
            s0 = s1 = vm_splat(0);
            since = 0;
        }
    }
    float t[2 * VW];   /* the tail is shorter than two vectors */
    VSTORE(t, s0 + s1);
    for (int k = 0; k < VW; k++) acc += t[k];
    if (i < n) {
        int64_t r = n - i;
        for (int64_t k = 0; k < r; k++) t[k] = x[i + k] - m;
        map_exp(t, t, r);
        for (int64_t k = 0; k < r; k++) acc += (o[i + k] = t[k]);
    }
    return acc;
}

/* ---- transposes of 4-byte elements ---- */
static inline void vm_t4(float *d, int64_t ldd, const float *s, int64_t lds)
{
    __m128 a0 = _mm_loadu_ps(s), a1 = _mm_loadu_ps(s + lds), a2 = _mm_loadu_ps(s + 2 * lds),
           a3 = _mm_loadu_ps(s + 3 * lds);
    _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
    _mm_storeu_ps(d, a0);
    _mm_storeu_ps(d + ldd, a1);
    _mm_storeu_ps(d + 2 * ldd, a2);
    _mm_storeu_ps(d + 3 * ldd, a3);
}

#if defined(__AVX512F__)
/* 16x16: within each 128-bit lane by unpacks and shuffles (4x4 blocks),
 * then the lanes by two rounds of shuffle_f32x4 */
#define VM_TB 16
static inline __attribute__((always_inline)) void vm_tblock(float *d, int64_t ldd, const float *s, int64_t lds)
{
    __m512 r[16], t[16];
    for (int k = 0; k < 16; k++) r[k] = _mm512_loadu_ps(s + k * lds);
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 16; k += 4) {
        r[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);
        r[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xEE);
        r[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        r[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        t[k] = _mm512_shuffle_f32x4(r[k], r[k + 4], 0x88);
        t[k + 4] = _mm512_shuffle_f32x4(r[k], r[k + 4], 0xDD);
        t[k + 8] = _mm512_shuffle_f32x4(r[k + 8], r[k + 12], 0x88);
        t[k + 12] = _mm512_shuffle_f32x4(r[k + 8], r[k + 12], 0xDD);
    }
    for (int k = 0; k < 4; k++) {
        _mm512_storeu_ps(d + k * ldd, _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88));
        _mm512_storeu_ps(d + (k + 8) * ldd, _mm512_shuffle_f32x4(t[k], t[k + 8], 0xDD));
        _mm512_storeu_ps(d + (k + 4) * ldd, _mm512_shuffle_f32x4(t[k + 4], t[k + 12], 0x88));
        _mm512_storeu_ps(d + (k + 12) * ldd, _mm512_shuffle_f32x4(t[k + 4], t[k + 12], 0xDD));
    }
}
#elif defined(__AVX__)
#define VM_TB 8
static inline __attribute__((always_inline)) void vm_tblock(float *d, int64_t ldd, const float *s, int64_t lds)
{
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(s + k * lds);
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(d + k * ldd, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps(d + (k + 4) * ldd, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}
#else
#define VM_TB 4
#define vm_tblock vm_t4
#endif

/* a block of up to VM_TB rows of dst (h x w) from src, into buf (pitch w) */
static inline void vm_tchunk(float *buf, const float *src, int64_t lds, int64_t h, int64_t w)
{
    int64_t c = 0;
    if (h == VM_TB)
        for (; c + VM_TB <= w; c += VM_TB) vm_tblock(buf + c, w, src + c * lds, lds);
    for (; c < w; c++)
        for (int64_t r = 0; r < h; r++) memcpy(buf + r * w + c, src + c * lds + r, 4);
}

static void transpose32(void *dstv, int64_t ldd, const void *srcv, int64_t lds, int64_t R, int64_t C,
                        void (*fn)(void *ctx, void *seg, int64_t n), void *ctx, bool nt)
{
    float *dst = dstv;
    const float *src = srcv;
    if (!fn && !nt) {   /* straight into dst */
        int64_t r = 0;
        for (; r + VM_TB <= R; r += VM_TB) {
            int64_t c = 0;
            for (; c + VM_TB <= C; c += VM_TB) vm_tblock(dst + r * ldd + c, ldd, src + c * lds + r, lds);
            for (; c < C; c++)
                for (int64_t k = 0; k < VM_TB; k++) memcpy(dst + (r + k) * ldd + c, src + c * lds + r + k, 4);
        }
        for (; r < R; r++)
            for (int64_t c = 0; c < C; c++) memcpy(dst + r * ldd + c, src + c * lds + r, 4);
        return;
    }
    /* through a buffer in L1: VM_TB rows of up to TBW, the op applied
     * there in one call, then the rows out (whole lines when streamed) */
    enum { TBW = 64 };
    _Alignas(64) float buf[VM_TB * TBW];
    for (int64_t r0 = 0; r0 < R; r0 += VM_TB)
        for (int64_t c0 = 0; c0 < C; c0 += TBW) {
            int64_t h = R - r0 < VM_TB ? R - r0 : VM_TB, w = C - c0 < TBW ? C - c0 : TBW;
            /* the next block's source lines are fetched while this one
             * is moved: one line from each of many rows is more streams
             * than the hardware prefetchers follow */
            int64_t cn = c0 + TBW < C ? c0 + TBW : 0, rn = c0 + TBW < C ? r0 : r0 + VM_TB;
            if (rn < R)
                for (int64_t k = cn; k < cn + TBW && k < C; k++) _mm_prefetch((const char *)(src + k * lds + rn), _MM_HINT_T0);
            vm_tchunk(buf, src + c0 * lds + r0, lds, h, w);
            if (fn) fn(ctx, buf, h * w);
            for (int64_t r = 0; r < h; r++) {
                float *d = dst + (r0 + r) * ldd + c0;
                const float *s = buf + r * w;
                if (!nt) {
                    memcpy(d, s, (size_t)w * 4);
                    continue;
                }
                int64_t i = 0;
                for (; i < w && ((uintptr_t)(d + i) & (VW * 4 - 1)); i++) d[i] = s[i];
                for (; i + VW <= w; i += VW) VSTREAM(d + i, VLOAD(s + i));
                for (; i < w; i++) d[i] = s[i];
            }
        }
    if (nt) _mm_sfence();
}

/* ---- half and bfloat16 ---- */
#ifdef VM_F16C
static void f16_to_f32(float *o, const uint16_t *x, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) VSTORE(o + i, VH2F(x + i));
    for (; i < n; i++) o[i] = lm_f16_to_f32(x[i]);
}
static void f32_to_f16(uint16_t *o, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) VF2H(o + i, VLOAD(x + i));
    for (; i < n; i++) o[i] = lm_f32_to_f16(x[i]);
}
#else
static void f16_to_f32(float *o, const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) o[i] = lm_f16_to_f32(x[i]);
}
static void f32_to_f16(uint16_t *o, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) o[i] = lm_f32_to_f16(x[i]);
}
#endif

/* plain integer loops the compiler vectorises at this width (memcpy keeps
 * them within the aliasing rules); the same rounding (nearest even, NaN
 * kept quiet) as lm_f32_to_bf16 */
static void bf16_to_f32(float *o, const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        memcpy(o + i, &u, 4);
    }
}
static void f32_to_bf16(uint16_t *o, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, x + i, 4);
        uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16, q = (v >> 16) | 0x40u;
        o[i] = (uint16_t)((v & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}


/* ---- halves and bfloat16 in registers ---- */
typedef uint32_t vm_vu __attribute__((vector_size(VW * 4)));

static inline VF vm_ld_f16(const uint16_t *p)
{
#ifdef VM_F16C
    return VH2F(p);
#else
    float t[VW];
    for (int k = 0; k < VW; k++) t[k] = lm_f16_to_f32(p[k]);
    return VLOAD(t);
#endif
}

static inline void vm_st_f16(uint16_t *p, VF v)
{
#ifdef VM_F16C
    VF2H(p, v);
#else
    float t[VW];
    VSTORE(t, v);
    for (int k = 0; k < VW; k++) p[k] = lm_f32_to_f16(t[k]);
#endif
}

static inline VF vm_round_f16(VF v)
{
    uint16_t h[VW];
    vm_st_f16(h, v);
    return vm_ld_f16(h);
}

/* bf16 -> f32 is the 16 bits moved up */
static inline VF vm_ld_bf16(const uint16_t *p)
{
#if VW == 16
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
#elif VW == 8
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
#else
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64((const __m128i *)(const void *)p)));
#endif
}

/* f32 bits rounded to bf16 in the low half (nearest even; a NaN kept
 * quiet), as lm_f32_to_bf16 */
static inline vm_vu vm_bf16_bits(VF v)
{
    vm_vu u = (vm_vu)v, r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    vm_vi nan = (vm_vi)(u & 0x7fffffffu) > 0x7f800000;
    return (vm_vu)(((vm_vi)q & nan) | ((vm_vi)r & ~nan));
}

static inline VF vm_round_bf16(VF v) { return (VF)(vm_bf16_bits(v) << 16); }

static inline void vm_st_bf16(uint16_t *p, VF v)
{
    vm_vu h = vm_bf16_bits(v);
#if VW == 16
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16((__m512i)h));
#elif VW == 8
    __m256i x = (__m256i)h;
    _mm_storeu_si128((__m128i *)(void *)p, _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)));
#else
    /* sign-extended 16-bit values survive the signed saturating pack */
    __m128i x = _mm_srai_epi32(_mm_slli_epi32((__m128i)h, 16), 16);
    _mm_storel_epi64((__m128i *)(void *)p, _mm_packs_epi32(x, x));
#endif
}

/* ---- compiled chains (vmath.h): an accumulator of VM_U vectors ---- */
static inline VF vc_neg(VF v) { return -v; }
static inline VF vc_abs(VF v) { return (VF)((vm_vi)v & 0x7fffffff); }
static inline VF vc_square(VF v) { return v * v; }
static inline VF vc_recip(VF v) { return vm_splat(1.0f) / v; }
static inline VF vc_relu(VF v) { return vm_sel((v > vm_splat(0.0f)) | (v != v), v, vm_splat(0.0f)); }
static inline VF vc_sign(VF v)
{
    VF z = vm_splat(0.0f), s = vm_sel(v > z, vm_splat(1.0f), vm_sel(v < z, vm_splat(-1.0f), z));
    return vm_sel(v != v, v, s);
}
static inline VF vc_clamp(VF v, const lm_vc_ins *c)
{
    if (c->has & 1) v = vm_sel(v < vm_splat(c->k), vm_splat(c->k), v);
    if (c->has & 2) v = vm_sel(v > vm_splat(c->k2), vm_splat(c->k2), v);
    return v;
}

#if VW == 16
#define VM_U 8
#define VX(M, x) M(0, x) M(1, x) M(2, x) M(3, x) M(4, x) M(5, x) M(6, x) M(7, x)
#else
#define VM_U 4
#define VX(M, x) M(0, x) M(1, x) M(2, x) M(3, x)
#endif
#define VC_G (VM_U * VW)   /* elements per group */

#define VC_SPLAT(u, v) b##u = v;
#define VC_LD32(u, q) b##u = VLOAD(q + u * VW);
#define VC_LD16(u, q) b##u = vm_ld_f16(q + u * VW);
#define VC_LDB16(u, q) b##u = vm_ld_bf16(q + u * VW);
#define VC_LDSLOT(u, q) b##u = q[u];
#define VC_ACC(u, x) b##u = a##u;
#define VC_SET(u, x) a##u = b##u;
#define VC_SPILL(u, q) q[u] = a##u;
#define VC_UN(u, f) a##u = f(a##u);
#define VC_CLAMP(u, c) a##u = vc_clamp(a##u, c);
#define VC_BIN(u, f) a##u = rev ? f(b##u, a##u) : f(a##u, b##u);
#define VC_ST32(u, o) VSTORE(o + u * VW, a##u);
#define VC_NT32(u, o) VSTREAM(o + u * VW, a##u);
#define VC_ST16(u, o) vm_st_f16(o + u * VW, a##u);
#define VC_STB16(u, o) vm_st_bf16(o + u * VW, a##u);

/* the program over VC_G elements at i */
static void vc_group(const lm_vc_prog *p, void *out, const void *const *in, int64_t i, VF *slots, bool nt)
{
#define VC_DECL(u, x) VF a##u = vm_splat(0.0f), b##u = a##u;
    VX(VC_DECL, 0)
    for (int j = 0; j < p->n; j++) {
        const lm_vc_ins *c = &p->ins[j];
        bool rev = c->rev;
        switch (c->src) {
        case LM_VC_CONST: { VF k = vm_splat(c->k); VX(VC_SPLAT, k) break; }
        case LM_VC_IN_F32: { const float *q = (const float *)in[c->idx] + i; VX(VC_LD32, q) break; }
        case LM_VC_IN_F16: { const uint16_t *q = (const uint16_t *)in[c->idx] + i; VX(VC_LD16, q) break; }
        case LM_VC_IN_BF16: { const uint16_t *q = (const uint16_t *)in[c->idx] + i; VX(VC_LDB16, q) break; }
        case LM_VC_SLOT: { const VF *q = slots + c->idx * VM_U; VX(VC_LDSLOT, q) break; }
        case LM_VC_ACC: VX(VC_ACC, 0) break;
        default: break;
        }
        switch (c->op) {
        case LM_VC_LOAD: VX(VC_SET, 0) break;
        case LM_VC_SPILL: { VF *q = slots + c->idx * VM_U; VX(VC_SPILL, q) break; }
        case LM_VC_UNARY:
            switch (c->fn) {
#define VC_UN_ROW(NAME, name) case LM_VM_##NAME: VX(VC_UN, vm_##name) break;
            LM_VM_UNARY_FNS(VC_UN_ROW)
#undef VC_UN_ROW
            default: break;
            }
            break;
        case LM_VC_NEG: VX(VC_UN, vc_neg) break;
        case LM_VC_ABS: VX(VC_UN, vc_abs) break;
        case LM_VC_SQUARE: VX(VC_UN, vc_square) break;
        case LM_VC_RECIP: VX(VC_UN, vc_recip) break;
        case LM_VC_RELU: VX(VC_UN, vc_relu) break;
        case LM_VC_SIGN: VX(VC_UN, vc_sign) break;
        case LM_VC_CLAMP: VX(VC_CLAMP, c) break;
        case LM_VC_ADD: VX(VC_BIN, vm_add) break;
        case LM_VC_SUB: VX(VC_BIN, vm_sub) break;
        case LM_VC_MUL: VX(VC_BIN, vm_mul) break;
        case LM_VC_DIV: VX(VC_BIN, vm_div) break;
        case LM_VC_MAX: VX(VC_BIN, vm_max) break;
        case LM_VC_MIN: VX(VC_BIN, vm_min) break;
        case LM_VC_POW: VX(VC_BIN, VM_SL(pow)) break;
        case LM_VC_ATAN2: VX(VC_BIN, VM_SL(atan2)) break;
        case LM_VC_ROUND_F16: VX(VC_UN, vm_round_f16) break;
        case LM_VC_ROUND_BF16: VX(VC_UN, vm_round_bf16) break;
        default: break;
        }
    }
    switch (p->out_src) {
    case LM_VC_IN_F32: {
        float *o = (float *)out + i;
        if (nt) {
            VX(VC_NT32, o)
        } else {
            VX(VC_ST32, o)
        }
        break;
    }
    case LM_VC_IN_F16: { uint16_t *o = (uint16_t *)out + i; VX(VC_ST16, o) break; }
    case LM_VC_IN_BF16: { uint16_t *o = (uint16_t *)out + i; VX(VC_STB16, o) break; }
    default: break;
    }
}

static size_t vc_size(int src) { return src == LM_VC_IN_F32 ? 4 : 2; }

static void chain(const lm_vc_prog *p, void *out, const void *const *in, int64_t n, bool nt)
{
    VF slots[(p->nslots > 0 ? p->nslots : 1) * VM_U];
    nt = nt && p->out_src == LM_VC_IN_F32 && !((uintptr_t)out & (VW * 4 - 1));
    int64_t i = 0;
    for (; i + VC_G <= n; i += VC_G) vc_group(p, out, in, i, slots, nt);
    if (i < n) {
        /* the tail through zero-padded copies (the padding's results are
         * thrown away) */
        float tin[p->nin > 0 ? p->nin : 1][VC_G], tout[VC_G];
        const void *tp[LM_VC_MAXIN];
        for (int k = 0; k < p->nin; k++) {
            tp[k] = tin[k];
            if (!in[k]) continue;   /* a constant: in the program */
            size_t esz = vc_size(p->in_src[k]);
            memset(tin[k], 0, sizeof tin[k]);
            memcpy(tin[k], (const char *)in[k] + i * (int64_t)esz, (size_t)(n - i) * esz);
        }
        vc_group(p, tout, tp, 0, slots, false);
        size_t osz = vc_size(p->out_src);
        memcpy((char *)out + i * (int64_t)osz, tout, (size_t)(n - i) * osz);
    }
    if (nt) _mm_sfence();
}

const lm_vmath VM_TABLE = {
    .name = VM_NAME,
    .lanes = VW,
    .unary = {
#define VM_TAB_ROW(NAME, name) [LM_VM_##NAME] = map_##name,
        LM_VM_UNARY_FNS(VM_TAB_ROW)
#undef VM_TAB_ROW
    },
    .binary = {
#define VM_TAB_ROW(NAME, name) [LM_VM_##NAME] = map2_##name,
        LM_VM_BINARY_FNS(VM_TAB_ROW)
#undef VM_TAB_ROW
    },
    .stream_copy = stream_copy,
    .chain = chain,
    .transpose32 = transpose32,
    .moments = moments,
    .sumsq = sumsq,
    .affine = affine,
    .axpb = axpb,
    .max = row_max,
    .scale = scale,
    .exp_sub_sum = exp_sub_sum,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .bf16_to_f32 = bf16_to_f32,
    .f32_to_bf16 = f32_to_bf16,
};
