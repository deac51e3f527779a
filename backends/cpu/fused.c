/* fused.c - fused elementwise groups (compile) run block by block.
 *
 * A group of f32/f16/bf16 values whose steps all have a vector form is
 * compiled into a register program (vc_compile; vmath.h "chain"): each
 * block runs it over an accumulator of a few vectors held in registers.
 * Other groups run every step over block registers of BLOCK elements that
 * stay in L1/L2.  Either way the chain reads its inputs and writes its
 * output once, whatever its length, and values are rounded to each step's
 * dtype exactly as the unfused nodes store them, so results match the
 * unfused graph. */
#include <stdlib.h>
#include <string.h>
#include "cpu.h"
#include "vmath.h"

#define BLOCK 1024
#define MAXREG 48
/* Registers lie REG_STRIDE bytes apart: a multiple of 4 KiB would put the
 * same element of every register at the same address bits, and each step's
 * loads would wait on its stores to another register (4K aliasing); 192
 * more bytes (three cache lines) keep them apart and 64-byte aligned. */
#define REG_STRIDE (BLOCK * 8 + 192)

typedef struct {
    lm_array *out;
    const lm_fused *g;
    int64_t st[MAXREG][LM_MAX_DIMS];
    int direct[MAXREG];
    int constant[MAXREG];   /* one element broadcast: its register is filled once */
    bool nt;                /* output far larger than the caches: stream it */
    int slot[MAXREG];       /* each register's block buffer (-1: read in place) */
    int nslots;
    int failed;
    bool vc;                /* run as a register program (prog) */
    lm_vc_prog prog;
} fz_ctx;

/* Registers share block buffers once dead (after their last reader), so a
 * long chain works in two or three buffers that stay in L1 instead of one
 * per step.  A step's output never shares a buffer with its own inputs;
 * scalar inputs keep theirs (filled once per task). */
static void assign_slots(fz_ctx *c)
{
    const lm_fused *g = c->g;
    int nreg = g->ninputs + g->nsteps, last[MAXREG];
    bool busy[MAXREG] = {0};
    for (int r = 0; r < nreg; r++) last[r] = -1;
    for (int s = 0; s < g->nsteps; s++)
        for (int j = 0; j < g->steps[s].nin; j++) last[g->steps[s].in[j]] = s;
    c->nslots = 0;
    for (int k = 0; k < g->ninputs; k++) {
        c->slot[k] = c->direct[k] && !c->constant[k] ? -1 : c->nslots;
        if (c->slot[k] >= 0) busy[c->nslots++] = true;
    }
    for (int s = 0; s < g->nsteps; s++) {
        int r = g->ninputs + s, free_slot = 0;
        while (free_slot < c->nslots && busy[free_slot]) free_slot++;
        if (free_slot == c->nslots) c->nslots++;
        c->slot[r] = free_slot;
        busy[free_slot] = true;
        for (int j = 0; j < g->steps[s].nin; j++) {
            int q = g->steps[s].in[j];
            if (last[q] == s && c->slot[q] >= 0 && !(q < g->ninputs && c->constant[q])) busy[c->slot[q]] = false;
        }
        if (last[r] < 0) busy[free_slot] = false;   /* nobody reads it (the output) */
    }
}

static lm_dtype reg_dtype(const fz_ctx *c, int r)
{
    return r < c->g->ninputs ? c->out->inputs[r]->dtype : c->g->steps[r - c->g->ninputs].dtype;
}

/* ---- the register path: the chain as a vmath program (vmath.h) ---- */

static int vc_kind(lm_dtype t)
{
    return t == LM_F32 ? LM_VC_IN_F32 : t == LM_F16 ? LM_VC_IN_F16 : t == LM_BF16 ? LM_VC_IN_BF16 : -1;
}

typedef struct {
    lm_vc_prog *p;
    const fz_ctx *c;
    int acc;              /* the register the accumulator holds, -1 none */
    int slot[MAXREG];     /* where a spilled step value is, -1 none */
    int last[MAXREG];     /* the last step reading each register */
    bool busy[LM_VC_MAXSLOTS];
} vc_build;

static bool vc_emit(vc_build *b, lm_vc_ins ins)
{
    if (b->p->n >= LM_VC_MAXINS) return false;
    b->p->ins[b->p->n++] = ins;
    return true;
}

/* register q as an operand: a constant, an input, a spilled value or the
 * accumulator itself */
static void vc_operand(const vc_build *b, int q, lm_vc_ins *ins)
{
    const fz_ctx *c = b->c;
    if (q == b->acc) {
        ins->src = LM_VC_ACC;
    } else if (q < c->g->ninputs && c->constant[q]) {
        const lm_array *in = c->out->inputs[q];
        ins->src = LM_VC_CONST;
        lm_convert(&ins->k, LM_F32, lm_cpu_ptr(in), in->dtype, 1);
    } else if (q < c->g->ninputs) {
        ins->src = (uint8_t)vc_kind(c->out->inputs[q]->dtype);
        ins->idx = (uint8_t)q;
    } else {
        ins->src = LM_VC_SLOT;
        ins->idx = (uint8_t)b->slot[q];
    }
}

/* the accumulator is about to change: a step value in it that a later
 * step reads goes to a slot first */
static bool vc_keep(vc_build *b, int s)
{
    int v = b->acc;
    if (v < b->c->g->ninputs || b->last[v] <= s || b->slot[v] >= 0) return true;
    int k = 0;
    while (k < LM_VC_MAXSLOTS && b->busy[k]) k++;
    if (k == LM_VC_MAXSLOTS) return false;
    b->busy[k] = true;
    b->slot[v] = k;
    if (k >= b->p->nslots) b->p->nslots = k + 1;
    return vc_emit(b, (lm_vc_ins){.op = LM_VC_SPILL, .idx = (uint8_t)k});
}

/* the accumulator to hold q at step s, spilling a value still to be read */
static bool vc_take(vc_build *b, int q, int s)
{
    if (b->acc == q) return true;
    if (!vc_keep(b, s - 1)) return false;   /* read by this step too */
    lm_vc_ins ins = {.op = LM_VC_LOAD};
    vc_operand(b, q, &ins);
    b->acc = q;
    return vc_emit(b, ins);
}

static int vc_op(lm_op op)
{
    switch (op) {
    case LM_OP_NEG: return LM_VC_NEG;
    case LM_OP_ABS: return LM_VC_ABS;
    case LM_OP_SQUARE: return LM_VC_SQUARE;
    case LM_OP_RECIPROCAL: return LM_VC_RECIP;
    case LM_OP_RELU: return LM_VC_RELU;
    case LM_OP_SIGN: return LM_VC_SIGN;
    case LM_OP_CLAMP: return LM_VC_CLAMP;
    case LM_OP_ADD: return LM_VC_ADD;
    case LM_OP_SUB: return LM_VC_SUB;
    case LM_OP_MUL: return LM_VC_MUL;
    case LM_OP_DIV: return LM_VC_DIV;
    case LM_OP_MAXIMUM: return LM_VC_MAX;
    case LM_OP_MINIMUM: return LM_VC_MIN;
    case LM_OP_POW: return LM_VC_POW;
    case LM_OP_ATAN2: return LM_VC_ATAN2;
    default: return lm_cpu_vm_unary_of(op) >= 0 ? LM_VC_UNARY : -1;
    }
}

bool lm_cpu_vc_supported(lm_op op)
{
    return vc_op(op) >= 0;
}

/* the instruction of a step (its operand filled in by the caller) */
static lm_vc_ins vc_step(lm_op op, const lm_params *params)
{
    int vop = vc_op(op);
    lm_vc_ins ins = {.op = (uint8_t)vop};
    if (vop == LM_VC_UNARY) ins.fn = (uint8_t)lm_cpu_vm_unary_of(op);
    if (vop == LM_VC_CLAMP) {
        ins.has = (uint8_t)params->i[0];
        ins.k = (float)params->f[0];
        ins.k2 = (float)params->f[1];
    }
    return ins;
}

bool lm_cpu_vc_unary(lm_vc_prog *p, lm_op op, const lm_params *params)
{
    int vop = vc_op(op);
    if (vop < 0 || vop >= LM_VC_ADD) return false;
    memset(p, 0, sizeof *p);
    p->nin = 1;
    p->in_src[0] = p->out_src = LM_VC_IN_F32;
    p->ins[0] = (lm_vc_ins){.op = LM_VC_LOAD, .src = LM_VC_IN_F32};
    p->ins[1] = vc_step(op, params);
    p->n = 2;
    return true;
}

/* The group as a program when every value is f32, f16 or bf16 and every
 * step has a vector form; false otherwise (the block path runs it). */
static bool vc_compile(const fz_ctx *c, lm_vc_prog *p)
{
    const lm_fused *g = c->g;
    int nin = g->ninputs, nreg = nin + g->nsteps;
    if (nin > LM_VC_MAXIN) return false;
    vc_build b = {.p = p, .c = c, .acc = -1};
    memset(p, 0, sizeof *p);
    p->nin = nin;
    for (int r = 0; r < nreg; r++) {
        b.slot[r] = -1;
        b.last[r] = -1;
        if (vc_kind(reg_dtype(c, r)) < 0) return false;
    }
    for (int k = 0; k < nin; k++) p->in_src[k] = (uint8_t)vc_kind(reg_dtype(c, k));
    for (int s = 0; s < g->nsteps; s++)
        for (int j = 0; j < g->steps[s].nin; j++) b.last[g->steps[s].in[j]] = s;
    for (int s = 0; s < g->nsteps; s++) {
        const lm_fused_step *st = &g->steps[s];
        lm_op op = st->op;
        int r = nin + s;
        if (op == LM_OP_CAST || op == LM_OP_COPY) {
            if (!vc_take(&b, st->in[0], s) || !vc_keep(&b, s)) return false;
        } else {
            int vop = vc_op(op);
            if (vop < 0 || st->nin != (vop >= LM_VC_ADD && vop <= LM_VC_ATAN2 ? 2 : 1)) return false;
            lm_vc_ins ins = vc_step(op, &st->params);
            if (st->nin == 1) {
                if (!vc_take(&b, st->in[0], s)) return false;
            } else {
                int q0 = st->in[0], q1 = st->in[1];
                /* the second operand already in the accumulator: read the
                 * first as the operand, reversed */
                if (b.acc == q1 && q0 != q1 && !(q0 >= nin && b.slot[q0] < 0)) {
                    ins.rev = 1;
                    vc_operand(&b, q0, &ins);
                } else {
                    if (!vc_take(&b, q0, s)) return false;
                    vc_operand(&b, q1, &ins);
                }
            }
            if (!vc_keep(&b, s) || !vc_emit(&b, ins)) return false;
        }
        b.acc = r;
        if (st->dtype == LM_F16 && !vc_emit(&b, (lm_vc_ins){.op = LM_VC_ROUND_F16})) return false;
        if (st->dtype == LM_BF16 && !vc_emit(&b, (lm_vc_ins){.op = LM_VC_ROUND_BF16})) return false;
        /* slots of values read for the last time are free again */
        for (int j = 0; j < st->nin; j++) {
            int q = st->in[j];
            if (q >= nin && b.last[q] == s && b.slot[q] >= 0) b.busy[b.slot[q]] = false;
        }
    }
    p->out_src = (uint8_t)vc_kind(g->steps[g->nsteps - 1].dtype);
    return true;
}

/* r's block in dtype ct: in place when it already is, else converted into tmp */
static const void *as_type(const fz_ctx *c, void *const *rp, int r, lm_dtype ct, void *tmp, int64_t n)
{
    lm_dtype t = reg_dtype(c, r);
    if (t == ct) return rp[r];
    lm_cpu_convert(tmp, ct, rp[r], t, (size_t)n);
    return tmp;
}

static void run_step(const fz_ctx *c, const lm_fused_step *s, void *const *rp, void *out, char *t1, char *t2,
                     char *t3, int64_t n)
{
    lm_op op = s->op;
    lm_op_class cls = lm_op_class_of(op);
    if (op == LM_OP_CAST || op == LM_OP_COPY) {
        lm_cpu_convert(out, s->dtype, rp[s->in[0]], reg_dtype(c, s->in[0]), (size_t)n);
    } else if (op == LM_OP_WHERE) {
        const uint8_t *cond = as_type(c, rp, s->in[0], LM_BOOL, t1, n);
        const char *a = rp[s->in[1]], *b = rp[s->in[2]];
        size_t esz = lm_dtype_size(s->dtype);
        for (int64_t i = 0; i < n; i++) memcpy((char *)out + i * (int64_t)esz, (cond[i] ? a : b) + i * (int64_t)esz, esz);
    } else if (cls == LM_CLASS_UNARY) {
        bool to_bool = lm_op_dtype_rule_of(op) == LM_DT_BOOL;   /* computes in its input's type */
        lm_dtype ct = lm_cpu_compute_type(to_bool ? reg_dtype(c, s->in[0]) : s->dtype);
        const void *x = as_type(c, rp, s->in[0], ct, t1, n);
        void *o = to_bool || s->dtype == ct ? out : (void *)t2;
        lm_cpu_ew_unary(op, &s->params, ct, o, x, n);
        if (o == t2) lm_cpu_convert(out, s->dtype, t2, ct, (size_t)n);
    } else {
        /* a scalar operand is passed as one value (stride 0), not a block */
        lm_dtype ct = lm_cpu_compute_type(reg_dtype(c, s->in[0]));
        int sa = s->in[0] < c->g->ninputs && c->constant[s->in[0]] ? 0 : 1;
        int sb = s->in[1] < c->g->ninputs && c->constant[s->in[1]] ? 0 : 1;
        const void *a = as_type(c, rp, s->in[0], ct, t1, sa ? n : 1);
        const void *b = as_type(c, rp, s->in[1], ct, t2, sb ? n : 1);
        bool to_bool = lm_op_dtype_rule_of(op) == LM_DT_BOOL;   /* writes u8 directly */
        void *o = to_bool || s->dtype == ct ? out : (void *)t3;
        lm_cpu_ew_binary(op, ct, o, a, sa, b, sb, n);
        if (o == t3) lm_cpu_convert(out, s->dtype, t3, ct, (size_t)n);
    }
}

/* a one-element input (a scalar operand) broadcast over a whole register */
static void fill_constant(char *reg, const lm_array *in)
{
    size_t esz = lm_dtype_size(in->dtype);
    memcpy(reg, lm_cpu_ptr(in), esz);
    for (size_t have = 1; have < BLOCK;) {
        size_t m = have < BLOCK - have ? have : BLOCK - have;
        memcpy(reg + have * esz, reg, m * esz);
        have += m;
    }
}

static void fused_task(void *p, int64_t b0, int64_t e0)
{
    fz_ctx *c = p;
    const lm_fused *g = c->g;
    lm_array *node = c->out;
    int nreg = g->ninputs + g->nsteps;
    char *mem = NULL;
    if (posix_memalign((void **)&mem, 64, (size_t)(c->nslots + 3) * REG_STRIDE) != 0) mem = NULL;
    if (!mem) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    char *t1 = mem + (size_t)c->nslots * REG_STRIDE, *t2 = t1 + REG_STRIDE, *t3 = t2 + REG_STRIDE;
    void *rp[MAXREG];
    size_t osz = lm_dtype_size(node->dtype);
    for (int k = 0; k < g->ninputs; k++)
        if (c->constant[k]) fill_constant(rp[k] = mem + (size_t)c->slot[k] * REG_STRIDE, node->inputs[k]);
    for (int64_t blk = b0; blk < e0; blk++) {
        int64_t b = blk * BLOCK, n = node->size - b < BLOCK ? node->size - b : BLOCK;
        for (int k = 0; k < g->ninputs; k++) {
            if (c->constant[k]) continue;   /* filled above */
            const lm_array *in = node->inputs[k];
            size_t esz = lm_dtype_size(in->dtype);
            if (c->direct[k]) {
                rp[k] = (char *)lm_cpu_ptr(in) + b * (int64_t)esz;
            } else {
                rp[k] = mem + (size_t)c->slot[k] * REG_STRIDE;
                lm_cpu_gather(rp[k], in->dtype, lm_cpu_ptr(in), in->dtype, node->ndim, node->shape, c->st[k], b, n);
            }
        }
        /* the next block's direct inputs are fetched while this one runs:
         * a block's bursts of 4 KiB reads, then L1 work, leave the
         * hardware prefetchers behind (the register path reads its inputs
         * evenly, and the hardware alone keeps up better: 20 % faster) */
        if (!c->vc && blk + 1 < e0)
            for (int k = 0; k < g->ninputs; k++) {
                if (!c->direct[k] || c->constant[k]) continue;
                const lm_array *in = node->inputs[k];
                size_t esz = lm_dtype_size(in->dtype);
                const char *nx = (const char *)lm_cpu_ptr(in) + (b + BLOCK) * (int64_t)esz;
                int64_t bytes = (node->size - b - BLOCK < BLOCK ? node->size - b - BLOCK : BLOCK) * (int64_t)esz;
                for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(nx + off);
            }
        char *out = (char *)lm_cpu_ptr(node) + b * (int64_t)osz;
        if (c->vc) {
            const void *in[MAXREG];
            for (int k = 0; k < g->ninputs; k++) in[k] = c->constant[k] ? NULL : rp[k];
            lm_vm->chain(&c->prog, out, in, n, c->nt);
            continue;
        }
        for (int s = 0; s < g->nsteps; s++) {
            int r = g->ninputs + s;
            bool last = s == g->nsteps - 1;
            rp[r] = last && !c->nt ? out : mem + (size_t)c->slot[r] * REG_STRIDE;
            run_step(c, &g->steps[s], rp, rp[r], t1, t2, t3, n);
        }
        if (c->nt) lm_vm->stream_copy((float *)(void *)out, rp[nreg - 1], n * (int64_t)osz / 4);
    }
    free(mem);
}

lm_status lm_cpu_run_fused(lm_device *d, lm_fused *group, lm_array *out)
{
    (void)d;
    if (!group || group->ninputs + group->nsteps > MAXREG || group->ninputs != out->ninputs)
        return lm_error_set(LM_ERR_ARG, "fused: malformed group");
    fz_ctx c;
    memset(&c, 0, sizeof c);
    c.out = out;
    c.g = group;
    for (int k = 0; k < out->ninputs; k++) {
        const lm_array *in = out->inputs[k];
        lm_cpu_bcast_strides(in, out, c.st[k]);
        c.direct[k] = in->ndim == out->ndim && in->size == out->size && lm_array_is_contiguous(in);
        c.constant[k] = in->size == 1 && out->size > 1;
    }
    assign_slots(&c);
    c.vc = vc_compile(&c, &c.prog);
    /* whole 4-byte words per block (f32, f64, i32, i64 results) */
    size_t osz = lm_dtype_size(out->dtype);
    c.nt = osz % 4 == 0 && lm_array_nbytes(out) >= (16u << 20);
    lm_cpu_parallel_for((out->size + BLOCK - 1) / BLOCK, 4, fused_task, &c);
    if (c.failed) return lm_error_set(LM_ERR_NOMEM, "fused: out of host memory for block registers");
    return LM_OK;
}
