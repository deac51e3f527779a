/* node.c - array lifetime: reference counts, the live registry, keep/sweep,
 * and the constructor every op builder uses.
 *
 * Graph building is single-threaded (one host thread owns the arrays);
 * kernels run on other threads but never touch reference counts. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static lm_array *live_head;
static int64_t live_count;
static uint64_t next_id = 1;
/* lm_share_set's value; 0 reads as 1 */
static _Thread_local int share_now;

int lm_share_set(int images)
{
    int was = lm_share_get();
    share_now = images > 1 ? images : 1;
    return was;
}

int lm_share_get(void) { return share_now > 1 ? share_now : 1; }

int lm_array_share(const lm_array *a) { return a && lm_node_of(a)->share > 1 ? lm_node_of(a)->share : 1; }

static const struct {
    const char *name;
    lm_op_class cls;
    signed char arity;
    lm_op_dtype_rule dt;
    lm_op_bool_rule bl;
    bool grad;
} op_info[LM_OP_COUNT] = {
#define LM_OP_INFO(name, cls, ar, dt, bl, gr, vm, vk, v64) {#name, LM_CLASS_##cls, ar, LM_DT_##dt, LM_BOOL_##bl, gr},
    LM_OPS(LM_OP_INFO)
#undef LM_OP_INFO
};

const char *lm_op_name(lm_op op)
{
    static char lower[LM_OP_COUNT][24];
    if ((unsigned)op >= LM_OP_COUNT) return "?";
    if (!lower[op][0]) {
        const char *s = op_info[op].name;
        size_t i = 0;
        for (; s[i] && i < sizeof lower[op] - 1; i++)
            lower[op][i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
        lower[op][i] = 0;
    }
    return lower[op];
}

lm_op_class lm_op_class_of(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT ? op_info[op].cls : LM_CLASS_NONE;
}

int lm_op_arity(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT ? op_info[op].arity : -1;
}

lm_op_dtype_rule lm_op_dtype_rule_of(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT ? op_info[op].dt : LM_DT_OWN;
}

lm_op_bool_rule lm_op_bool_rule_of(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT ? op_info[op].bl : LM_BOOL_SAME;
}

bool lm_op_differentiable(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT && op_info[op].grad;
}

lm_op lm_op_by_name(const char *name)
{
    for (int op = 0; name && op < LM_OP_COUNT; op++)
        if (!strcmp(lm_op_name((lm_op)op), name)) return (lm_op)op;
    return LM_OP_COUNT;
}

lm_array *lm_array_retain(lm_array *a)
{
    if (a) a->refcount++;
    return a;
}

static bool stack_push(lm_array ***stack, int64_t *n, int64_t *cap, lm_array *a)
{
    if (*n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 64;
        lm_array **ns = realloc(*stack, (size_t)nc * sizeof *ns);
        if (!ns) return false;
        *stack = ns;
        *cap = nc;
    }
    (*stack)[(*n)++] = a;
    return true;
}

/* Drops the graph part of a node (inputs, params) - used after evaluation
 * and on free.  Inputs whose count reaches zero are queued, not recursed
 * into, so a 1,000,000-node chain does not overflow the stack. */
static void drop_graph(lm_array *a, lm_array ***stack, int64_t *n, int64_t *cap)
{
    for (int i = 0; i < a->ninputs; i++) {
        lm_array *in = a->inputs[i];
        if (in && --in->refcount == 0 && !stack_push(stack, n, cap, in))
            in->refcount++;   /* leak rather than crash */
    }
    free(a->inputs);
    a->inputs = NULL;
    a->ninputs = 0;
    if (a->params.ext) {
        if (a->params.ext_free) a->params.ext_free(a->params.ext);
        else free(a->params.ext);
        a->params.ext = NULL;
    }
}

static void destroy(lm_array *a, lm_array ***stack, int64_t *n, int64_t *cap)
{
    drop_graph(a, stack, n, cap);
    if (a->buf) lm_buffer_release(a->buf);
    lm_node *self = lm_node_of(a);
    if (self->live_prev) lm_node_of(self->live_prev)->live_next = self->live_next;
    else live_head = self->live_next;
    if (self->live_next) lm_node_of(self->live_next)->live_prev = self->live_prev;
    live_count--;
    free(a);
}

void lm_array_release(lm_array *a)
{
    if (!a || --a->refcount > 0) return;
    lm_array **stack = NULL;
    int64_t n = 0, cap = 0;
    destroy(a, &stack, &n, &cap);
    while (n > 0) destroy(stack[--n], &stack, &n, &cap);
    free(stack);
}

/* Called by eval once a node holds its result: the MLX detach. */
void lm_array_detach(lm_array *a)
{
    lm_array **stack = NULL;
    int64_t n = 0, cap = 0;
    drop_graph(a, &stack, &n, &cap);
    while (n > 0) destroy(stack[--n], &stack, &n, &cap);
    free(stack);
    a->op = LM_OP_NONE;
}

bool lm_array_is_contiguous(const lm_array *a)
{
    int64_t expect = 1;
    for (int d = a->ndim - 1; d >= 0; d--) {
        if (a->shape[d] != 1 && a->strides[d] != expect) return false;
        expect *= a->shape[d];
    }
    return true;
}

size_t lm_array_nbytes(const lm_array *a) { return lm_dtype_nbytes(a->dtype, a->size); }

void lm_array_keep(lm_array *a)
{
    if (!a || (a->flags & LM_ARRAY_KEPT)) return;
    a->flags |= LM_ARRAY_KEPT;
    a->refcount++;
}

void lm_array_unkeep(lm_array *a)
{
    if (!a || !(a->flags & LM_ARRAY_KEPT)) return;
    a->flags &= ~(uint32_t)LM_ARRAY_KEPT;
    lm_array_release(a);
}

void lm_array_free(lm_array *a)
{
    if (!a) return;
    lm_array_retain(a);   /* dropping inputs must not free a itself */
    lm_array_detach(a);
    if (a->buf) lm_buffer_release(a->buf);
    a->buf = NULL;
    a->flags |= LM_ARRAY_FREED;
    lm_array_release(a);
}

/* a private mark: the array is in the pending graph of a kept array */
#define SWEEP_HELD (1u << 31)

/* Marks every array a kept lazy array still needs (a loaded weight not yet
 * uploaded holds its host copy): sweeping those would break the kept one.
 * False when out of memory (then nothing is swept). */
static bool mark_held(void)
{
    lm_array **stack = NULL;
    int64_t n = 0, cap = 0;
    bool ok = true;
    for (lm_array *a = live_head; a && ok; a = lm_node_of(a)->live_next) {
        if (!(a->flags & LM_ARRAY_KEPT) || !a->ninputs) continue;
        ok = stack_push(&stack, &n, &cap, a);
        while (ok && n > 0) {
            lm_array *x = stack[--n];
            for (int i = 0; i < x->ninputs && ok; i++) {
                lm_array *in = x->inputs[i];
                if (in->flags & SWEEP_HELD) continue;
                in->flags |= SWEEP_HELD;
                ok = stack_push(&stack, &n, &cap, in);
            }
        }
    }
    free(stack);
    return ok;
}

int lm_sweep(void)
{
    bool marked = mark_held();
    const uint32_t spare = LM_ARRAY_KEPT | LM_ARRAY_FREED | SWEEP_HELD;
    /* Collect first: freeing drops inputs, which may unlink other arrays. */
    int64_t n = 0;
    for (lm_array *a = live_head; a; a = lm_node_of(a)->live_next)
        if (!(a->flags & spare)) n++;
    lm_array **v = marked ? malloc((size_t)(n ? n : 1) * sizeof *v) : NULL;
    for (lm_array *a = live_head; a; a = lm_node_of(a)->live_next) a->flags &= ~SWEEP_HELD;
    if (!v) return 0;
    int64_t k = 0;
    for (lm_array *a = live_head; a && k < n; a = lm_node_of(a)->live_next)
        if (!(a->flags & spare)) v[k++] = lm_array_retain(a);
    for (int64_t i = 0; i < k; i++) {
        lm_array_free(v[i]);
        lm_array_release(v[i]);
    }
    free(v);
    return (int)k;
}

int64_t lm_array_live_count(void) { return live_count; }

bool lm_shape_fits(int ndim, const int64_t *shape, int64_t *numel)
{
    int64_t span = 1, size = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return false;
        /* zeros count as 1: strides of the other dimensions are still products */
        if (!lm_mul64(span, shape[d] ? shape[d] : 1, &span) || span > LM_MAX_SPAN) return false;
        size *= shape[d];   /* <= span, cannot overflow */
    }
    if (numel) *numel = size;
    return true;
}

lm_status lm_shape_check(const char *what, int ndim, const int64_t *shape, int64_t *numel)
{
    if (lm_shape_fits(ndim, shape, numel)) return LM_OK;
    char s[160];
    lm_shape_str(s, sizeof s, ndim, shape);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) return lm_error_set(LM_ERR_SHAPE, "%s: negative dimension in shape %s", what, s);
    return lm_error_set(LM_ERR_SHAPE, "%s: shape %s is too large (its dimensions, zeros counted as 1, "
                        "multiply past %lld elements)", what, s, (long long)LM_MAX_SPAN);
}

/* A bare array registered as live, refcount 1. */
lm_array *lm_array_alloc(lm_dtype dt, int ndim, const int64_t *shape, lm_device *dev)
{
    if ((unsigned)dt >= LM_DTYPE_COUNT && !lm_dtype_is_quant(dt)) {
        lm_error_set(LM_ERR_DTYPE, "invalid dtype %d", (int)dt);
        return NULL;
    }
    /* a quantized array stores whole blocks along its last dimension */
    if (lm_dtype_is_quant(dt) && (ndim < 1 || shape[ndim - 1] % lm_dtype_block(dt))) {
        lm_error_set(LM_ERR_SHAPE, "a %s tensor needs a last dimension that is a multiple of %lld, got %lld",
                     lm_dtype_name(dt), (long long)lm_dtype_block(dt), ndim < 1 ? 0LL : (long long)shape[ndim - 1]);
        return NULL;
    }
    if (ndim < 0 || ndim > LM_MAX_DIMS) {
        lm_error_set(LM_ERR_SHAPE, "arrays have at most %d dimensions, got %d", LM_MAX_DIMS, ndim);
        return NULL;
    }
    int64_t size;
    if (lm_shape_check("array", ndim, shape, &size) != LM_OK) return NULL;
    lm_node *node = calloc(1, sizeof *node);
    lm_array *a = node ? &node->a : NULL;
    if (!a) {
        lm_error_set(LM_ERR_NOMEM, "out of host memory for an array");
        return NULL;
    }
    a->refcount = 1;
    a->dtype = dt;
    a->ndim = ndim;
    a->size = size;
    a->device = dev ? dev : lm_device_default();
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        a->shape[d] = shape[d];
        a->strides[d] = st;
        st *= shape[d] ? shape[d] : 1;
    }
    a->id = next_id++;
    node->where = lm_where_now;
    node->share = share_now;
    node->live_next = live_head;
    if (live_head) lm_node_of(live_head)->live_prev = a;
    live_head = a;
    live_count++;
    return a;
}

/* The placement rule (docs/CORE.md "Where work runs"): inputs on one device
 * keep the work there; inputs on several run on the default device when one
 * of them is on it, else fail naming the devices.  Weak scalars (numbers
 * from the host language) follow the others; argument order never counts. */
lm_device *lm_node_place(const char *op, int n, lm_array *const *inputs)
{
    lm_device *def = lm_device_default(), *first = NULL, *other = NULL;
    bool on_default = false;
    for (int pass = 0; pass < 2 && !first; pass++)   /* weak scalars count only if alone */
        for (int i = 0; i < n; i++) {
            const lm_array *a = inputs[i];
            if (pass == 0 && (a->flags & LM_ARRAY_WEAK) && a->ndim == 0) continue;
            if (!first) first = a->device;
            else if (a->device != first && !other) other = a->device;
            if (a->device == def) on_default = true;
        }
    if (!first) return def;
    if (!other) return first;
    if (on_default) return def;
    lm_error_set(LM_ERR_DEVICE, "%s: inputs on %s and %s, and none on the default device %s; "
                 "move them to one device with to()", op, first->spec, other->spec, def->spec);
    return NULL;
}

lm_array *lm_node_new(lm_op op, lm_dtype dt, int ndim, const int64_t *shape,
                      int ninputs, lm_array *const *inputs, const lm_params *p,
                      lm_device *dev)
{
    for (int i = 0; i < ninputs; i++) {
        if (!inputs[i]) return NULL;   /* an earlier builder failed; its message stands */
        if (inputs[i]->flags & LM_ARRAY_FREED) {
            lm_error_set(LM_ERR_STATE, "%s: input %d was freed", lm_op_name(op), i + 1);
            return NULL;
        }
    }
    /* quantized storage is read only by the ops that decode it; every other
     * op refuses it by name (lm_array_to wires its copy by hand) */
    for (int i = 0; i < ninputs; i++)
        if ((lm_dtype_is_quant(inputs[i]->dtype) && !(op == LM_OP_QLINEAR && i == 1) &&
             !(op == LM_OP_DEQUANTIZE && i == 0)) ||
            (lm_dtype_is_quant(dt) && op != LM_OP_COPY)) {
            lm_error_set(LM_ERR_UNSUPPORTED, "%s: dtype %s is quantized storage; dequantize() it first",
                         lm_op_name(op), lm_dtype_name(lm_dtype_is_quant(dt) ? dt : inputs[i]->dtype));
            return NULL;
        }
    if (!dev && !(dev = lm_node_place(lm_op_name(op), ninputs, inputs))) return NULL;
    if (lm_shape_check(lm_op_name(op), ndim, shape, NULL) != LM_OK) return NULL;
    lm_array *a = lm_array_alloc(dt, ndim, shape, dev);
    if (!a) return NULL;
    a->op = op;
    if (p) a->params = *p;
    if (ninputs) {
        a->inputs = calloc((size_t)ninputs, sizeof *a->inputs);
        if (!a->inputs) {
            a->params.ext = NULL;   /* stays with the caller on failure */
            lm_array_release(a);
            lm_error_set(LM_ERR_NOMEM, "out of host memory");
            return NULL;
        }
        a->ninputs = ninputs;
        for (int i = 0; i < ninputs; i++) {
            lm_array *in = inputs[i];
            if (in->device != dev) {
                in = lm_array_to(in, dev);
                if (!in) {
                    lm_array_release(a);
                    return NULL;
                }
                a->inputs[i] = in;
            } else {
                a->inputs[i] = lm_array_retain(in);
            }
            if (in->flags & LM_ARRAY_TRACER) a->flags |= LM_ARRAY_TRACER;
        }
    }
    return a;
}

bool lm_axis_norm(const char *op, int *axis, int ndim)
{
    int ax = *axis;
    if (ax < 0) ax += ndim;
    if (ax < 0 || ax >= ndim) {
        lm_error_set(LM_ERR_ARG, "%s: axis %d out of range for %d dimensions", op, *axis, ndim);
        return false;
    }
    *axis = ax;
    return true;
}
