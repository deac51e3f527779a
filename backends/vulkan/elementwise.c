/* elementwise.c - unary, binary, where, copy and cast: one shader
 * (shaders/eltwise.glsl) specialised per op, dtypes and dimension count.
 *
 * Operands are broadcast by giving them stride 0 on the broadcast dims, and
 * dims that are contiguous in every operand are merged, so the common
 * contiguous case runs as a flat loop.  Arithmetic happens in float for
 * f32/f16/bf16 (as the CPU does), double for f64 and int64 for integers,
 * with the result converted (round to nearest even) on store. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"

typedef struct ew_pc {
    uint32_t n, flags;
    int32_t off[4];
    int32_t shape[EW_MAXDIM];
    int32_t st[3 * EW_MAXDIM];
} ew_pc;

/* The shader op codes, from the vk column of the op table (core/op.h):
 * U_<vk> for a unary op, B_<vk> for a binary one (shaders/vkops.h), so a
 * code without its #define does not compile, nor does a code on an op of
 * another class.  NONE means no Vulkan kernel: supports() says no and the
 * node runs on the CPU, so the shaders never see a code they lack. */
#define U_NONE (-1)
#define B_NONE (-1)
#define VK_NOCODE_NONE (-1)
#define VK_CODE_UNARY(t) U_##t
#define VK_CODE_BINARY(t) B_##t
#define VK_CODE_NONE(t) VK_NOCODE_##t
#define VK_CODE_CREATE(t) VK_NOCODE_##t
#define VK_CODE_VIEW(t) VK_NOCODE_##t
#define VK_CODE_TERNARY(t) VK_NOCODE_##t
#define VK_CODE_REDUCE(t) VK_NOCODE_##t
#define VK_CODE_OTHER(t) VK_NOCODE_##t
#define VK_CODE_NN(t) VK_NOCODE_##t
#define VK_CODE(name, cls, ar, dt, bl, gr, vm, vk_, v64) [LM_OP_##name] = VK_CODE_##cls(vk_),
#define VK_F64(name, cls, ar, dt, bl, gr, vm, vk_, v64) [LM_OP_##name] = v64,
static const signed char vk_code[LM_OP_COUNT] = {LM_OPS(VK_CODE)};
static const bool f64_exact_of[LM_OP_COUNT] = {LM_OPS(VK_F64)};
#undef VK_CODE
#undef VK_F64

int lm_vk_unary_code(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT && lm_op_class_of(op) == LM_CLASS_UNARY ? vk_code[op] : -1;
}

int lm_vk_binary_code(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT && lm_op_class_of(op) == LM_CLASS_BINARY ? vk_code[op] : -1;
}

/* f64 runs only where double arithmetic is exact in GLSL (no double
 * transcendentals exist there); the rest would silently lose precision */
static bool f64_exact(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT && f64_exact_of[op];
}

static bool is_floatish(lm_dtype t) { return t == LM_F32 || t == LM_F16 || t == LM_BF16; }

/* the arithmetic kind for value dtypes vals[0..n) and the output */
int lm_vk_kind_for(const lm_dtype *vals, int n, lm_dtype out)
{
    bool f = is_floatish(out), d = out == LM_F64;
    for (int i = 0; i < n; i++) {
        f |= is_floatish(vals[i]);
        d |= vals[i] == LM_F64;
    }
    return d ? KIND_D : f ? KIND_F : KIND_I;
}

/* the integer dtype of the same width: a bit-exact copy */
lm_dtype lm_vk_raw_dtype(lm_dtype t)
{
    switch (lm_dtype_size(t)) {
    case 1: return LM_U8;
    case 2: return LM_I16;
    case 4: return LM_I32;
    default: return LM_I64;
    }
}

static void broadcast_strides(const lm_array *a, int ndim, const int64_t *shape, int64_t *out)
{
    for (int d = 0; d < ndim; d++) {
        int ad = d - (ndim - a->ndim);
        out[d] = ad < 0 || a->shape[ad] != shape[d] ? 0 : a->strides[ad];
    }
}

void lm_vk_contiguous_strides(int ndim, const int64_t *shape, int64_t *out)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) { out[d] = s; s *= shape[d]; }
}

/* One elementwise launch.  ins: up to 3 inputs (bindings 0..2); out is
 * binding 3 unless out_strided (then its strides/offset come via slot 2). */
typedef struct ew_job {
    int code, mode, kind;
    lm_dtype dt[4];                /* bindings 0..2, out */
    int nin;
    const lm_vk_mem *mem[4];
    int64_t off[4];
    int ndim;
    int64_t shape[LM_MAX_DIMS];
    int64_t st[4][LM_MAX_DIMS];    /* inputs, then out */
    bool out_strided;
    int64_t n;
    uint32_t flags;
    double lo, hi;
} ew_job;

/* the shader's vector path (eltwise.glsl's VEC): the elements a unit, 0
 * where it does not apply.  A unary or binary op (not where, not clamp: its
 * bounds ride in the stride slots) along the innermost collapsed dim: each
 * operand has stride 1 there and every unit starts 16-byte aligned (its
 * offset, its buffer's and each outer stride a multiple of 16 bytes), or an
 * input has stride 0 there (a scalar over the row, or a broadcast scalar
 * when the op is flat: its bit in *scal, read once a unit); outer dims take
 * any stride (0 too: a bias over rows).  Over more than one dim the inner
 * extent is a multiple of the unit; a flat op's n need not be (the tail
 * runs the scalar code).  4: f32 arithmetic with every operand f32; 8:
 * f32/f16/bf16 arithmetic with a 16-bit operand or result; a same-dtype
 * copy (describe() makes it a raw integer move) 16 bytes a unit.  Each
 * result is computed and rounded by the scalar path's functions, so the
 * bits are the same.  LUMEN_VK_VEC4=0 turns the path off, for
 * comparisons. */
static int vec_unit(const ew_job *j, int ndim, const int64_t *shape, int64_t (*st)[LM_MAX_DIMS], uint32_t *scal)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("LUMEN_VK_VEC4");
        off = e && !strcmp(e, "0");
    }
    *scal = 0;
    if (off || ndim < 1 || j->mode == EW_WHERE) return 0;
    if (j->mode == EW_UNARY && j->code == U_CLAMP) return 0;
    bool raw = j->kind == KIND_I && j->out_strided && j->dt[0] == j->dt[3];
    if (j->kind != KIND_F && !raw) return 0;
    int in = ndim - 1;   /* the inner dim */
    int unit = raw ? 16 / (int)lm_dtype_size(j->dt[0]) : 4;
    if (!raw)
        for (int k = 0; k <= j->nin; k++) {
            lm_dtype t = j->dt[k < j->nin ? k : 3];
            if (!is_floatish(t)) return 0;
            bool bcast = k < j->nin && st[k][in] == 0;
            if (t != LM_F32 && !bcast) unit = 8;
        }
    for (int k = 0; k <= j->nin; k++) {
        int slot = k < j->nin ? k : 3;
        if (k < j->nin && st[k][in] == 0 && !raw) {   /* st[nin]: the output's (a copy's) strides */
            *scal |= 1u << k;
            continue;
        }
        int64_t align = 16 / (int64_t)lm_dtype_size(j->dt[slot]);
        if (st[k][in] != 1 || j->off[slot] % align || j->mem[slot]->off % 16) return 0;
        for (int d = 0; d < in; d++)
            if (st[k][d] % align) return 0;
    }
    if (ndim > 1 && shape[in] % unit) return 0;
    return unit;
}

/* units an invocation (LUMEN_VK_EW_ITEMS, default 1: as many invocations as
 * units, up to lm_vk_groups' cap, past which the loop strides), for
 * measurements */
static uint64_t ew_items(void)
{
    static int64_t per = -1;
    if (per < 0) {
        const char *e = getenv("LUMEN_VK_EW_ITEMS");
        per = e ? atoll(e) : 1;
        if (per < 1) per = 1;
    }
    return (uint64_t)per;
}

static lm_status ew_launch(lm_vk_dev *v, ew_job *j)
{
    int nops = j->nin + 1;
    int64_t st[4][LM_MAX_DIMS];
    for (int k = 0; k < nops; k++) memcpy(st[k], k < j->nin ? j->st[k] : j->st[3], sizeof st[k]);
    int ndim = lm_vk_collapse(j->ndim, j->shape, nops, st);
    if (ndim > EW_MAXDIM)
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: elementwise over %d uncollapsible dims", ndim);
    ew_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.n = (uint32_t)j->n;
    pc.flags = j->flags;
    for (int k = 0; k < j->nin; k++) pc.off[k] = (int32_t)j->off[k];
    pc.off[3] = j->out_strided ? 0 : (int32_t)j->off[3];
    for (int d = 0; d < ndim; d++) {
        pc.shape[d] = (int32_t)j->shape[d];
        for (int k = 0; k < j->nin; k++) pc.st[k * EW_MAXDIM + d] = (int32_t)st[k][d];
        if (j->out_strided) pc.st[2 * EW_MAXDIM + d] = (int32_t)st[j->nin][d];
    }
    if (j->out_strided) pc.off[2] = (int32_t)j->off[3];
    if (j->code == U_CLAMP && j->mode == EW_UNARY) {
        float lf = (float)j->lo, hf = (float)j->hi;
        /* integer bounds truncate, as the CPU's (int64_t) cast does */
        int64_t li = isnan(j->lo) ? 0 : j->lo < -9.2e18 ? INT64_MIN : j->lo > 9.2e18 ? INT64_MAX : (int64_t)j->lo;
        int64_t hi = isnan(j->hi) ? 0 : j->hi < -9.2e18 ? INT64_MIN : j->hi > 9.2e18 ? INT64_MAX : (int64_t)j->hi;
        memcpy(&pc.st[6], &lf, 4);
        memcpy(&pc.st[7], &hf, 4);
        memcpy(&pc.st[8], &li, 8);
        memcpy(&pc.st[10], &hi, 8);
        memcpy(&pc.st[12], &j->lo, 8);
        memcpy(&pc.st[14], &j->hi, 8);
    }
    uint32_t scal;
    int unit = vec_unit(j, ndim, j->shape, st, &scal);
    uint32_t spec[11] = {(uint32_t)j->code, j->dt[0], j->dt[1], j->dt[2], j->dt[3],
                         (uint32_t)j->kind, (uint32_t)ndim, (uint32_t)j->mode, j->out_strided, (uint32_t)unit, scal};
    lm_vk_arg args[4] = {{j->mem[0], false}, {j->mem[1], false}, {j->mem[2], false}, {j->mem[3], true}};
    const char *shader = j->kind == KIND_D ? "eltwise_f64" : "eltwise";
    uint64_t items = unit ? (uint64_t)j->n / (uint64_t)unit : (uint64_t)j->n, per = ew_items();
    return lm_vk_dispatch(v, shader, spec, 11, args, 4, &pc, sizeof pc,
                          lm_vk_groups(v, (items + per - 1) / per, 256), 1, 1);
}

static bool describe(const lm_array *node, ew_job *j)
{
    memset(j, 0, sizeof *j);
    lm_op_class cls = lm_op_class_of(node->op);
    j->mode = cls == LM_CLASS_UNARY ? EW_UNARY : cls == LM_CLASS_BINARY ? EW_BINARY : EW_WHERE;
    j->code = j->mode == EW_UNARY ? lm_vk_unary_code(node->op) : j->mode == EW_BINARY ? lm_vk_binary_code(node->op) : 0;
    if (j->code < 0) return false;
    j->nin = node->ninputs;
    if (j->nin != (j->mode == EW_UNARY ? 1 : j->mode == EW_BINARY ? 2 : 3)) return false;
    j->ndim = node->ndim;
    j->n = node->size;
    memcpy(j->shape, node->shape, sizeof j->shape);
    for (int k = 0; k < j->nin; k++) {
        const lm_array *a = node->inputs[k];
        j->dt[k] = a->dtype;
        j->off[k] = a->offset;
        broadcast_strides(a, node->ndim, node->shape, j->st[k]);
    }
    for (int k = j->nin; k < 3; k++) j->dt[k] = LM_F32;
    j->dt[3] = node->dtype;
    j->out_strided = node->op == LM_OP_COPY;
    if (j->out_strided) {
        memcpy(j->st[3], node->strides, sizeof j->st[3]);
        j->off[3] = node->offset;
    } else {
        lm_vk_contiguous_strides(node->ndim, node->shape, j->st[3]);
    }
    const lm_dtype *vals = j->mode == EW_WHERE ? &j->dt[1] : j->dt;
    j->kind = lm_vk_kind_for(vals, j->mode == EW_WHERE ? 2 : j->nin, node->dtype);
    if (node->op == LM_OP_COPY && node->inputs[0]->dtype == node->dtype) {
        j->dt[0] = j->dt[3] = lm_vk_raw_dtype(node->dtype);
        j->kind = KIND_I;
    }
    if (node->op == LM_OP_CLAMP) {
        j->flags = (uint32_t)node->params.i[0] & 3u;
        j->lo = node->params.f[0];
        j->hi = node->params.f[1];
    }
    return true;
}

bool lm_vk_supports_elementwise(lm_vk_dev *v, const lm_array *node)
{
    ew_job j;
    if (!describe(node, &j)) return false;
    if (j.kind == KIND_D && (!v->feat.f64 || !f64_exact(node->op))) return false;
    /* integer // and % by zero are errors, which a shader cannot raise:
     * the CPU runs them */
    if (j.kind == KIND_I && (node->op == LM_OP_FLOOR_DIVIDE || node->op == LM_OP_MOD)) return false;
    int64_t st[4][LM_MAX_DIMS];
    memcpy(st, j.st, sizeof st);
    int64_t shape[LM_MAX_DIMS];
    memcpy(shape, j.shape, sizeof shape);
    if (j.nin < 3) memcpy(st[j.nin], j.st[3], sizeof st[0]);
    return lm_vk_collapse(j.ndim, shape, j.nin + 1, st) <= EW_MAXDIM;
}

lm_status lm_vk_run_elementwise(lm_vk_dev *v, lm_array *node)
{
    ew_job j;
    if (!describe(node, &j))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s has no kernel for %s (result %s)", lm_op_name(node->op),
                            lm_dtype_name(node->inputs[0]->dtype), lm_dtype_name(node->dtype));
    for (int k = 0; k < j.nin; k++) j.mem[k] = lm_vk_mem_of(node->inputs[k]);
    j.mem[3] = lm_vk_mem_of(node);
    lm_status st = ew_launch(v, &j);
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}

lm_status lm_vk_move(lm_vk_dev *v, const lm_array *a, const lm_vk_mem *dst, lm_dtype dt,
                     int64_t doff, const int64_t *dst_strides)
{
    ew_job j;
    memset(&j, 0, sizeof j);
    j.code = U_COPY;
    j.mode = EW_UNARY;
    j.nin = 1;
    if (a->dtype == dt) {
        j.kind = KIND_I;
        j.dt[0] = j.dt[3] = lm_vk_raw_dtype(dt);
    } else {
        j.dt[0] = a->dtype;
        j.dt[3] = dt;
        j.kind = lm_vk_kind_for(&a->dtype, 1, dt);
    }
    j.dt[1] = j.dt[2] = LM_F32;
    j.mem[0] = lm_vk_mem_of(a);
    j.mem[3] = dst;
    j.off[0] = a->offset;
    j.off[3] = doff;
    j.ndim = a->ndim;
    j.n = a->size;
    memcpy(j.shape, a->shape, sizeof j.shape);
    memcpy(j.st[0], a->strides, sizeof j.st[0]);
    memcpy(j.st[3], dst_strides, sizeof(int64_t) * (size_t)a->ndim);   /* callers pass a->ndim of them */
    j.out_strided = true;
    if (!j.n) return LM_OK;
    return ew_launch(v, &j);
}

lm_status lm_vk_contiguous_copy(lm_vk_dev *v, const lm_array *a, lm_buffer **out)
{
    *out = NULL;
    lm_buffer *b = lm_buffer_alloc(v->dev, (size_t)a->size * lm_dtype_size(a->dtype));
    if (!b) return lm_error_status();
    int64_t cs[LM_MAX_DIMS];
    lm_vk_contiguous_strides(a->ndim, a->shape, cs);
    lm_status st = lm_vk_move(v, a, b->handle, a->dtype, 0, cs);
    if (st != LM_OK) {
        lm_buffer_release(b);
        return st;
    }
    *out = b;
    return LM_OK;
}
