/* vmath.h - vectorised f32 math for the CPU kernels, at the width of the
 * running CPU.
 *
 * The transcendentals come from SLEEF (the 1.0-ulp "u10" variants); each
 * instruction set has its own table, built from one body (vmath_isa.h) in
 * its own file compiled for that set (vmath_sse2.c, vmath_avx2.c,
 * vmath_avx512.c).  lm_vmath_init() picks the widest table the CPU runs
 * once, at start; LUMEN_ISA=sse2|avx2|avx512 forces a narrower one.  The
 * library itself stays built for baseline x86-64.  Accuracy per function:
 * docs/CPU_MATH.md.  f64 keeps libm. */
#ifndef LM_VMATH_H
#define LM_VMATH_H

#include <stdbool.h>
#include <stdint.h>

/* functions with a vector form: o[i] = f(x[i]).  One row each: the enum,
 * the map functions, the chain interpreter's cases and the tables of every
 * instruction set are made from this list (vmath_isa.h defines vm_<name>);
 * the op table (core/op.h, column vm) names the row an op uses. */
#define LM_VM_UNARY_FNS(X) \
    X(EXP, exp) X(LOG, log) X(LOG1P, log1p) X(EXPM1, expm1) X(SIN, sin) X(COS, cos) \
    X(TAN, tan) X(TANH, tanh) X(ERF, erf) X(SQRT, sqrt) X(RSQRT, rsqrt) \
    X(SIGMOID, sigmoid) X(SILU, silu) X(GELU, gelu) X(GELU_TANH, gelu_tanh) \
    X(SOFTPLUS, softplus) X(ERFC, erfc)

typedef enum {
#define LM_VM_ENUM(NAME, name) LM_VM_##NAME,
    LM_VM_UNARY_FNS(LM_VM_ENUM)
#undef LM_VM_ENUM
    LM_VM_NUNARY
} lm_vm_unary;

/* the vm column of core/op.h for ops the kernel's own loop computes */
#define LM_VM_NONE (-1)

/* o[i] = f(a[i*sa], b[i*sb]); sa/sb are 1 (a block) or 0 (one value).
 * maximum/minimum return a NaN operand (the first when both are).  One row
 * each, as LM_VM_UNARY_FNS: the enum and every instruction set's table are
 * made from it (vmath_isa.h defines map2_<name>), and so is the test's
 * table of references (tests/test_cpu_vmath.c: r_<name>), so a row without
 * its function or its reference does not compile. */
#define LM_VM_BINARY_FNS(X) \
    X(ADD, add) X(SUB, sub) X(MUL, mul) X(DIV, div) X(MAXIMUM, max) X(MINIMUM, min) X(POW, pow) \
    X(ATAN2, atan2) X(LOGADDEXP, logaddexp) X(HYPOT, hypot)

typedef enum {
#define LM_VM_ENUM(NAME, name) LM_VM_##NAME,
    LM_VM_BINARY_FNS(LM_VM_ENUM)
#undef LM_VM_ENUM
    LM_VM_NBINARY
} lm_vm_binary;

/* A compiled elementwise chain (fused.c) as a straight-line program over
 * an accumulator of a few f32 vectors that stays in registers: each
 * instruction combines the accumulator with one operand (a constant, an
 * input read at the current position, a spilled value, or the accumulator
 * itself).  Values are f32 in registers; f16/bf16 steps round through
 * their dtype, so results equal the unfused ops' bit for bit. */
typedef enum {
    LM_VC_LOAD,         /* acc = operand */
    LM_VC_SPILL,        /* slot[idx] = acc */
    LM_VC_UNARY,        /* acc = f(acc), f an lm_vm_unary (fn) */
    LM_VC_NEG, LM_VC_ABS, LM_VC_SQUARE, LM_VC_RECIP, LM_VC_RELU, LM_VC_SIGN,
    LM_VC_CLAMP,        /* bounds k (has & 1), k2 (has & 2) */
    /* acc = acc op operand, or operand op acc when rev */
    LM_VC_ADD, LM_VC_SUB, LM_VC_MUL, LM_VC_DIV, LM_VC_MAX, LM_VC_MIN, LM_VC_POW, LM_VC_ATAN2,
    LM_VC_ROUND_F16, LM_VC_ROUND_BF16   /* acc rounded to that dtype (nearest even) */
} lm_vc_op;

typedef enum {
    LM_VC_NONE, LM_VC_CONST, LM_VC_IN_F32, LM_VC_IN_F16, LM_VC_IN_BF16, LM_VC_SLOT, LM_VC_ACC
} lm_vc_src;

typedef struct {
    uint8_t op, src, idx, fn;   /* idx: the input or slot; fn: the lm_vm_unary */
    uint8_t rev, has;
    float k, k2;                /* the constant operand; clamp's bounds */
} lm_vc_ins;

enum { LM_VC_MAXINS = 192, LM_VC_MAXSLOTS = 48, LM_VC_MAXIN = 48 };
typedef struct {
    int n, nslots, nin;
    uint8_t in_src[LM_VC_MAXIN];   /* each input's kind (LM_VC_IN_*), for tails */
    uint8_t out_src;               /* the output's dtype, as an LM_VC_IN_* kind */
    lm_vc_ins ins[LM_VC_MAXINS];
} lm_vc_prog;

typedef void (*lm_vm_map)(float *o, const float *x, int64_t n);
typedef void (*lm_vm_map2)(float *o, const float *a, int sa, const float *b, int sb, int64_t n);

typedef struct lm_vmath {
    const char *name;   /* "sse2", "avx2", "avx512" */
    int lanes;          /* f32 lanes per vector */
    lm_vm_map unary[LM_VM_NUNARY];
    lm_vm_map2 binary[LM_VM_NBINARY];
    /* the largest x[i], or NaN when any is NaN (-inf for n = 0) */
    float (*max)(const float *x, int64_t n);
    /* o[i] = x[i] * s (o may be x); nt: streamed past the caches */
    void (*scale)(float *o, const float *x, int64_t n, float s, bool nt);
    /* mean and sum of squared deviations of x (f32 chunks of 512 merged in
     * double, Chan's rule), and the sum of squares */
    void (*moments)(const float *x, int64_t n, double *mean, double *m2);
    double (*sumsq)(const float *x, int64_t n);
    /* o[i] = (x[i] - mean) * rstd * w[i] + b[i] (w, b may be NULL) */
    void (*affine)(float *o, const float *x, int64_t n, float mean, float rstd, const float *w, const float *b,
                   bool nt);
    /* o[i] = x[i] * a + c */
    void (*axpb)(float *o, const float *x, int64_t n, float a, float c, bool nt);
    /* o[i] = exp(x[i] - m) (o may be x); returns the sum of the o[i] */
    double (*exp_sub_sum)(float *o, const float *x, int64_t n, float m);
    /* dst[i] = src[i] with stores that bypass the caches (for outputs far
     * larger than them: no read of each line before it is written) */
    void (*stream_copy)(float *dst, const float *src, int64_t n);
    /* dst[r*ldd + c] = src[c*lds + r] for r < R, c < C: 4-byte elements
     * (any bits) moved through in-register transposes of 16x16 (AVX-512),
     * 8x8 (AVX2) or 4x4 (SSE2).  With fn, fn(ctx, seg, n) is applied to
     * each block of the result (n contiguous elements, in place) while it
     * is in L1, before it is written out; nt: written with streamed stores
     * (whole lines, no read for ownership), for outputs far larger than
     * the caches. */
    void (*transpose32)(void *dst, int64_t ldd, const void *src, int64_t lds, int64_t R, int64_t C,
                        void (*fn)(void *ctx, void *seg, int64_t n), void *ctx, bool nt);
    /* out[i] = program p over in[k][i], i < n (inputs and output in the
     * dtypes p names); nt: the output streamed past the caches */
    void (*chain)(const lm_vc_prog *p, void *out, const void *const *in, int64_t n, bool nt);
    /* half and bfloat16 to and from f32, round to nearest even */
    void (*f16_to_f32)(float *o, const uint16_t *x, int64_t n);
    void (*f32_to_f16)(uint16_t *o, const float *x, int64_t n);
    void (*bf16_to_f32)(float *o, const uint16_t *x, int64_t n);
    void (*f32_to_bf16)(uint16_t *o, const float *x, int64_t n);
} lm_vmath;

/* The table in use (the SSE2 one until lm_vmath_init runs). */
extern const lm_vmath *lm_vm;

/* Picks the table once: the widest the CPU and OS support, or LUMEN_ISA's
 * when set and supported (an unknown or unsupported LUMEN_ISA is reported
 * on stderr once and the widest supported table is used instead). */
void lm_vmath_init(void);

/* The table for an instruction set by name, or NULL when this CPU cannot
 * run it (or the name is unknown).  Tests use it to run each level. */
const lm_vmath *lm_vmath_get(const char *isa);

/* Makes `t` the table in use (tests; t from lm_vmath_get). */
void lm_vmath_use(const lm_vmath *t);

#endif
