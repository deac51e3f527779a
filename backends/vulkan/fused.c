/* fused.c - compile's fused elementwise groups (LM_OP_FUSED) as one dispatch
 * of the interpreter shader shaders/fused.comp.
 *
 * The host turns a group (core/compile.h: lm_fused) plus the node's geometry
 * into a small program of uint words (vkops.h, FZ_*): per input its dtype,
 * register, offset and broadcast strides over the collapsed output shape;
 * per step its op code, arithmetic kind, dtypes, registers and clamp
 * bounds, chosen exactly as elementwise.c chooses them for the unfused node,
 * so the fused result equals the unfused one.  Registers are packed by
 * liveness (a 10-op chain needs two or three), and the register count picks
 * one of four pipeline variants (with the dimension count: few pipelines).
 *
 * Two kernels read the same program: the interpreter (fused.comp), one
 * pipeline for every chain, and fused_spec.comp, which takes the steps as
 * specialization constants so the driver compiles each chain to
 * straight-line code (a pipeline per distinct chain); see use_spec().
 *
 * Programs live on the device in fixed slots of one buffer, written with
 * vkCmdUpdateBuffer in the command stream the first time a program is seen
 * and found again by content (a compiled function replays the same program
 * on every call), least recently used slot first out.  Ordering against
 * kernels that still read an evicted slot is exec.c's usual barrier logic.
 *
 * Not handled (supports() says no, and the core replays the steps unfused):
 * f64 and i64 values anywhere in the group, more than 16 inputs or 32
 * steps, geometry that stays above 6 dims after merging, devices without
 * 18 storage-buffer bindings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"
#include "core/compile.h"

#define FZ_SLOTS 64               /* programs kept on the device */
#define FZ_SLOT_BYTES 4096
#define FZ_LOCAL 128              /* fused.comp's workgroup size */

typedef struct fz_prog {
    uint32_t w[FZ_MAXWORDS];
    int nwords;
    int ndim, nslot;
} fz_prog;

typedef struct lm_vk_fzcache {
    lm_vk_mem *all;               /* FZ_SLOTS * FZ_SLOT_BYTES */
    lm_vk_mem slot[FZ_SLOTS];     /* views of it, one per program */
    uint32_t *words[FZ_SLOTS];    /* the program each slot holds (NULL: none) */
    int nwords[FZ_SLOTS];
    uint64_t used[FZ_SLOTS], clock;
} lm_vk_fzcache;

_Static_assert(FZ_MAXWORDS * 4 <= FZ_SLOT_BYTES, "fused program slot too small");

static lm_dtype reg_dtype(const lm_array *node, const lm_fused *g, int r)
{
    return r < g->ninputs ? node->inputs[r]->dtype : g->steps[r - g->ninputs].dtype;
}

/* dtypes a register can hold: 32 bits at most */
static bool reg_ok(lm_dtype t) { return t != LM_F64 && t != LM_I64 && t < LM_DTYPE_COUNT; }

/* clamp bounds as ew_launch (elementwise.c) passes them */
static void clamp_words(const lm_params *p, uint32_t *w)
{
    double lo = p->f[0], hi = p->f[1];
    float lf = (float)lo, hf = (float)hi;
    int64_t li = isnan(lo) ? 0 : lo < -9.2e18 ? INT64_MIN : lo > 9.2e18 ? INT64_MAX : (int64_t)lo;
    int64_t hii = isnan(hi) ? 0 : hi < -9.2e18 ? INT64_MIN : hi > 9.2e18 ? INT64_MAX : (int64_t)hi;
    w[FS_FLAGS] = (uint32_t)p->i[0] & 3u;
    memcpy(&w[FS_LOF], &lf, 4);
    memcpy(&w[FS_HIF], &hf, 4);
    w[FS_LOI] = (uint32_t)((uint64_t)li & 0xffffffffu);
    w[FS_LOI + 1] = (uint32_t)((uint64_t)li >> 32);
    w[FS_HII] = (uint32_t)((uint64_t)hii & 0xffffffffu);
    w[FS_HII + 1] = (uint32_t)((uint64_t)hii >> 32);
}

/* one step's op fields; false if the shader has no such op */
static bool encode_step(const lm_array *node, const lm_fused *g, int s, uint32_t *w)
{
    const lm_fused_step *st = &g->steps[s];
    lm_op_class cls = lm_op_class_of(st->op);
    int mode = cls == LM_CLASS_UNARY ? EW_UNARY : cls == LM_CLASS_BINARY ? EW_BINARY
             : st->op == LM_OP_WHERE ? EW_WHERE : -1;
    if (mode < 0 || st->nin != (mode == EW_UNARY ? 1 : mode == EW_BINARY ? 2 : 3)) return false;
    int code = mode == EW_UNARY ? lm_vk_unary_code(st->op) : mode == EW_BINARY ? lm_vk_binary_code(st->op) : 0;
    if (code < 0 || !reg_ok(st->dtype)) return false;
    lm_dtype dt[3] = {LM_F32, LM_F32, LM_F32};
    for (int j = 0; j < st->nin; j++) {
        if (st->in[j] < 0 || st->in[j] >= g->ninputs + s) return false;
        dt[j] = reg_dtype(node, g, st->in[j]);
        if (!reg_ok(dt[j])) return false;
    }
    int kind = mode == EW_WHERE ? lm_vk_kind_for(&dt[1], 2, st->dtype) : lm_vk_kind_for(dt, st->nin, st->dtype);
    if (kind == KIND_D ||
        (kind == KIND_I && (st->op == LM_OP_FLOOR_DIVIDE || st->op == LM_OP_MOD)))
        return false;
    w[FS_MODE] = (uint32_t)mode;
    w[FS_CODE] = (uint32_t)code;
    w[FS_KIND] = (uint32_t)kind;
    w[FS_DTO] = (uint32_t)st->dtype;
    for (int j = 0; j < 3; j++) w[FS_DT + j] = (uint32_t)dt[j];
    if (st->op == LM_OP_CLAMP) clamp_words(&st->params, w);
    return true;
}

/* packs registers into slots by liveness: a register's slot is free again
 * after the step that reads it last (a step reads before it writes) */
static int assign_slots(const lm_fused *g, uint32_t *w)
{
    int nreg = g->ninputs + g->nsteps, last[FZ_MAXIN + FZ_MAXSTEP], slot[FZ_MAXIN + FZ_MAXSTEP];
    bool busy[FZ_MAXIN + FZ_MAXSTEP] = {0};
    for (int r = 0; r < nreg; r++) last[r] = -1;
    for (int s = 0; s < g->nsteps; s++)
        for (int j = 0; j < g->steps[s].nin; j++) last[g->steps[s].in[j]] = s;
    int nslot = 0;
    for (int r = 0; r < nreg - 1; r++) {
        if (r >= g->ninputs) {         /* free what step r - ninputs read last */
            int s = r - g->ninputs;
            for (int q = 0; q < r; q++)
                if (last[q] == s && slot[q] >= 0) busy[slot[q]] = false;
        }
        int k = 0;
        while (busy[k]) k++;
        slot[r] = k;
        busy[k] = last[r] >= 0;        /* an unread register frees at once */
        if (k + 1 > nslot) nslot = k + 1;
    }
    for (int k = 0; k < g->ninputs; k++) w[FZ_IN + k * FZ_IN_WORDS + FI_SLOT] = (uint32_t)slot[k];
    for (int s = 0; s < g->nsteps; s++) {
        uint32_t *sw = &w[FZ_STEP + s * FZ_STEP_WORDS];
        for (int j = 0; j < g->steps[s].nin; j++) sw[FS_SLOT + j] = (uint32_t)slot[g->steps[s].in[j]];
        if (s + 1 < g->nsteps) sw[FS_OSLOT] = (uint32_t)slot[g->ninputs + s];
    }
    return nslot < 1 ? 1 : nslot;
}

/* input geometry: broadcast strides over the output, dims merged */
static bool encode_geometry(const lm_array *node, fz_prog *p)
{
    int nin = node->ninputs, ndim = node->ndim;
    int64_t shape[LM_MAX_DIMS], st[FZ_MAXIN + 1][LM_MAX_DIMS];
    memcpy(shape, node->shape, sizeof shape);
    for (int k = 0; k <= nin; k++) {
        const lm_array *a = k < nin ? node->inputs[k] : node;
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            int ad = d - (ndim - a->ndim);
            if (k == nin) { st[k][d] = s; s *= shape[d]; }
            else st[k][d] = ad < 0 || a->shape[ad] != shape[d] ? 0 : a->strides[ad];
        }
    }
    int nd = lm_vk_collapse(ndim, shape, nin + 1, st);
    if (nd > EW_MAXDIM) return false;
    p->ndim = nd;
    for (int d = 0; d < nd; d++) p->w[FZ_SHAPE + d] = (uint32_t)shape[d];
    for (int k = 0; k < nin; k++) {
        uint32_t *iw = &p->w[FZ_IN + k * FZ_IN_WORDS];
        iw[FI_DT] = (uint32_t)node->inputs[k]->dtype;
        iw[FI_OFF] = (uint32_t)(int32_t)node->inputs[k]->offset;
        for (int d = 0; d < nd; d++) iw[FI_ST + d] = (uint32_t)(int32_t)st[k][d];
    }
    return true;
}

static bool encode(const lm_array *node, const lm_fused *g, fz_prog *p)
{
    if (!g || g->ninputs != node->ninputs || g->ninputs < 1 || g->ninputs > FZ_MAXIN || g->nsteps < 1 ||
        g->nsteps > FZ_MAXSTEP || g->steps[g->nsteps - 1].dtype != node->dtype)
        return false;
    memset(p->w, 0, sizeof p->w);
    p->w[FZ_NIN] = (uint32_t)g->ninputs;
    p->w[FZ_NSTEPS] = (uint32_t)g->nsteps;
    for (int k = 0; k < g->ninputs; k++)
        if (!reg_ok(node->inputs[k]->dtype)) return false;
    for (int s = 0; s < g->nsteps; s++)
        if (!encode_step(node, g, s, &p->w[FZ_STEP + s * FZ_STEP_WORDS])) return false;
    if (!encode_geometry(node, p)) return false;
    int n = assign_slots(g, p->w);
    p->nslot = n <= 4 ? 4 : n <= 8 ? 8 : n <= 16 ? 16 : 48;
    p->nwords = FZ_STEP + g->nsteps * FZ_STEP_WORDS;
    return true;
}

bool lm_vk_supports_fused(lm_vk_dev *v, const lm_array *node)
{
    fz_prog p;
    if (v->feat.max_storage_buffers < LM_VK_WIDE_BINDINGS || !encode(node, node->params.ext, &p)) return false;
    return (uint64_t)p.nslot * FZ_LOCAL * 4 <= v->feat.max_shared;
}

/* the device copy of program p: found by content, else written to the
 * least recently used slot */
static lm_status program_mem(lm_vk_dev *v, const fz_prog *p, const lm_vk_mem **out)
{
    /* a recording's kernels must not read slots later evaluations reuse */
    if (v->capture) return lm_vk_capture_const(v, p->w, (size_t)p->nwords * 4, out);
    lm_vk_fzcache *c = v->fz;
    if (!c) {
        c = v->fz = calloc(1, sizeof *c);
        if (!c) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    }
    if (!c->all) {
        void *h, *host;
        lm_status st = lm_vk_alloc(v->dev, (size_t)FZ_SLOTS * FZ_SLOT_BYTES, &h, &host);
        if (st != LM_OK) return st;
        c->all = h;
        for (int i = 0; i < FZ_SLOTS; i++)
            c->slot[i] = (lm_vk_mem){c->all->block, c->all->off + (VkDeviceSize)i * FZ_SLOT_BYTES,
                                     FZ_SLOT_BYTES, NULL};
    }
    int lru = 0;
    for (int i = 0; i < FZ_SLOTS; i++) {
        if (c->words[i] && c->nwords[i] == p->nwords && !memcmp(c->words[i], p->w, (size_t)p->nwords * 4)) {
            c->used[i] = ++c->clock;
            *out = &c->slot[i];
            return LM_OK;
        }
        if (c->used[i] < c->used[lru]) lru = i;
    }
    uint32_t *w = realloc(c->words[lru], sizeof p->w);
    if (!w) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    c->words[lru] = NULL;
    lm_status st = lm_vk_update_buffer(v, &c->slot[lru], p->w, (size_t)p->nwords * 4);
    if (st != LM_OK) { free(w); return st; }
    memcpy(w, p->w, (size_t)p->nwords * 4);
    c->words[lru] = w;
    c->nwords[lru] = p->nwords;
    c->used[lru] = ++c->clock;
    *out = &c->slot[lru];
    return LM_OK;
}

/* LUMEN_VK_FUSED=interp chooses the interpreter; the default is the
 * specialised kernel everywhere: on GPUs it runs at memory speed, and on
 * lavapipe the interpreter runs 10-15x slower than the unfused kernels
 * (its SIMD lanes step through every case of every switch), while building
 * one specialised pipeline there takes about a second per chain */
static bool use_spec(void)
{
    const char *e = getenv("LUMEN_VK_FUSED");
    return !(e && !strcmp(e, "interp"));
}

/* fused_spec.comp's constants from the program words */
static int spec_constants(const fz_prog *p, uint32_t *spec)
{
    int nin = (int)p->w[FZ_NIN], nsteps = (int)p->w[FZ_NSTEPS];
    spec[0] = (uint32_t)p->ndim;
    spec[1] = (uint32_t)nin;
    spec[2] = (uint32_t)nsteps;
    for (int k = 0; k < FZ_MAXIN; k++) {
        const uint32_t *iw = &p->w[FZ_IN + k * FZ_IN_WORDS];
        spec[3 + k] = k < nin ? iw[FI_DT] | iw[FI_SLOT] << 8 : 0;
    }
    for (int s = 0; s < nsteps; s++) {
        const uint32_t *sw = &p->w[FZ_STEP + s * FZ_STEP_WORDS];
        spec[19 + 3 * s] = sw[FS_MODE] | sw[FS_CODE] << 8 | sw[FS_KIND] << 16 | sw[FS_DTO] << 24;
        spec[20 + 3 * s] = sw[FS_DT] | sw[FS_DT + 1] << 8 | sw[FS_DT + 2] << 16;
        spec[21 + 3 * s] = sw[FS_SLOT] | sw[FS_SLOT + 1] << 8 | sw[FS_SLOT + 2] << 16 | sw[FS_OSLOT] << 24;
    }
    return 19 + 3 * nsteps;
}

lm_status lm_vk_run_fused(lm_device *d, lm_fused *group, lm_array *out)
{
    lm_vk_dev *v = lm_vk_of(d);
    lm_status st = lm_vk_ensure_up(v);
    if (st != LM_OK) return st;
    fz_prog p;
    if (!encode(out, group, &p))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: fused group of %d ops (%s) not supported on %s",
                            group ? group->nsteps : 0, lm_dtype_name(out->dtype), d->name);
    if (out->size == 0) return LM_OK;
    const lm_vk_mem *prog = NULL;
    if ((st = program_mem(v, &p, &prog)) != LM_OK) return lm_error_prefix("fused");
    lm_vk_arg args[LM_VK_WIDE_BINDINGS] = {{0}};
    for (int k = 0; k < out->ninputs; k++) args[k] = (lm_vk_arg){lm_vk_mem_of(out->inputs[k]), false};
    args[FZ_MAXIN] = (lm_vk_arg){lm_vk_mem_of(out), true};
    args[FZ_MAXIN + 1] = (lm_vk_arg){prog, false};
    struct { uint32_t n; int32_t out_off; } pc = {(uint32_t)out->size, (int32_t)out->offset};
    uint32_t spec[19 + 3 * FZ_MAXSTEP] = {(uint32_t)p.ndim, (uint32_t)p.nslot};
    bool baked = use_spec();
    int nspec = baked ? spec_constants(&p, spec) : 2;
    st = lm_vk_dispatch(v, baked ? "fused_spec" : "fused", spec, nspec, args, LM_VK_WIDE_BINDINGS, &pc,
                        sizeof pc, lm_vk_groups(v, (uint64_t)out->size, FZ_LOCAL), 1, 1);
    return st == LM_OK ? st : lm_error_prefix("fused");
}
