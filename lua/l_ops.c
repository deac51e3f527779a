/* l_ops.c - the core's ops as tensor methods and module functions:
 * elementwise, reductions, shapes, linear algebra, joining.
 *
 * Each entry of lm_lua_op_methods is both t:name(...) and lm.name(t, ...);
 * a new op is one line in a table here (and its docstring). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"
#include "core/quant.h"

/* ---- elementwise ---- */

static int unary(lua_State *L, lm_op op)
{
    return lm_lua_push_array(L, lm_unary(op, lm_lua_check_array(L, 1)));
}

#define UNARY_OPS(X) \
    X(neg, NEG, "-x") X(abs, ABS, "|x|") X(sign, SIGN, "-1, 0 or 1 by the sign of x") \
    X(exp, EXP, "e^x") X(log, LOG, "the natural logarithm") X(log1p, LOG1P, "log(1 + x), exact near 0") \
    X(expm1, EXPM1, "e^x - 1, exact near 0") X(sqrt, SQRT, "the square root") \
    X(rsqrt, RSQRT, "1 / sqrt(x)") X(square, SQUARE, "x * x") X(reciprocal, RECIPROCAL, "1 / x") \
    X(sin, SIN, "the sine") X(cos, COS, "the cosine") X(tan, TAN, "the tangent") \
    X(tanh, TANH, "the hyperbolic tangent") X(sigmoid, SIGMOID, "1 / (1 + e^-x)") \
    X(relu, RELU, "max(x, 0)") \
    X(gelu_tanh, GELU_TANH, "GELU, the tanh approximation") X(silu, SILU, "x * sigmoid(x) (swish)") \
    X(softplus, SOFTPLUS, "log(1 + e^x)") X(erf, ERF, "the error function") \
    X(erfc, ERFC, "1 - erf(x), exact where erf(x) is near 1") \
    X(floor, FLOOR, "rounds down") X(ceil, CEIL, "rounds up") X(round, ROUND, "rounds half to even") \
    X(isnan, ISNAN, "true where x is NaN (bool)") X(isinf, ISINF, "true where x is infinite (bool)") \
    X(logical_not, LOGICAL_NOT, "not x (bool)")

#define UNARY_FN(name, OP, doc) static int u_##name(lua_State *L) { return unary(L, LM_OP_##OP); }
UNARY_OPS(UNARY_FN)

/* t:gelu{approximate="tanh"}: as in PyTorch, approximate is keyword-only,
 * so x:gelu("tanh") is an error rather than the erf form. */
static int o_gelu(lua_State *L)
{
    static const char *const KNOWN[] = {"approximate", NULL};
    lm_array *a = lm_lua_check_array(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING)
        return luaL_error(L, "gelu: approximate is given by name: x:gelu{approximate = \"%s\"}",
                          lua_tostring(L, 2));
    int opts = lm_lua_check_opts(L, 2, "gelu", KNOWN);
    const char *ap = "none";
    if (opts && lua_getfield(L, opts, "approximate") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "gelu: approximate must be \"none\" or \"tanh\", got %s",
                              luaL_typename(L, -1));
        ap = lua_tostring(L, -1);
    }
    if (strcmp(ap, "none") && strcmp(ap, "tanh"))
        return luaL_error(L, "gelu: approximate must be \"none\" or \"tanh\", not \"%s\"", ap);
    return lm_lua_push_array(L, lm_unary(strcmp(ap, "tanh") ? LM_OP_GELU : LM_OP_GELU_TANH, a));
}

static int binary(lua_State *L, lm_op op)
{
    lm_lua_tensor *ta = lm_lua_testtensor(L, 1), *tb = lm_lua_testtensor(L, 2);
    if (ta && lua_type(L, 2) == LUA_TNUMBER)
        return lm_lua_push_array(L, lm_binary_scalar(op, ta->a, lua_tonumber(L, 2), false));
    if (tb && lua_type(L, 1) == LUA_TNUMBER)
        return lm_lua_push_array(L, lm_binary_scalar(op, tb->a, lua_tonumber(L, 1), true));
    lm_array *a = lm_lua_to_array(L, 1, LM_DTYPE_COUNT);
    if (!a) return lm_lua_error(L);
    lm_array *b = lm_lua_to_array(L, 2, LM_DTYPE_COUNT);
    lm_array *r = b ? lm_binary(op, a, b) : NULL;
    lm_array_release(a);
    lm_array_release(b);
    return lm_lua_push_array(L, r);
}

#define BINARY_OPS(X) \
    X(add, ADD, "a + b") X(sub, SUB, "a - b") X(mul, MUL, "a * b") \
    X(div, DIV, "a / b (true division: integers give f32)") \
    X(pow, POW, "a ^ b") X(mod, MOD, "a % b with the sign of b (as Lua and Python)") \
    X(floor_divide, FLOOR_DIVIDE, "floor(a / b), as a // b: integers stay integers and exact (Python's "\
      "rounding toward -inf; an integer division by zero is an error)") \
    X(logaddexp, LOGADDEXP, "log(e^a + e^b), without overflow") \
    X(maximum, MAXIMUM, "the larger of a and b (NaN wins)") \
    X(minimum, MINIMUM, "the smaller of a and b (NaN wins)") X(atan2, ATAN2, "atan2(a, b)") \
    X(hypot, HYPOT, "sqrt(a^2 + b^2), without overflow or underflow (integers give f32)") \
    X(eq, EQ, "a == b (bool)") X(ne, NE, "a ~= b (bool)") X(lt, LT, "a < b (bool)") \
    X(le, LE, "a <= b (bool)") X(gt, GT, "a > b (bool)") X(ge, GE, "a >= b (bool)") \
    X(logical_and, LOGICAL_AND, "a and b (bool)") X(logical_or, LOGICAL_OR, "a or b (bool)") \
    X(logical_xor, LOGICAL_XOR, "a xor b (bool)")

#define BINARY_FN(name, OP, doc) static int b_##name(lua_State *L) { return binary(L, LM_OP_##OP); }
BINARY_OPS(BINARY_FN)

/* Every unary and binary op of the table (core/op.h) has a Lua name: the
 * lists above, plus copy, astype (cast), clamp and gelu, which take their
 * own arguments.  An op added to the table without one fails here. */
#define COUNT_ROW(name, OP, doc) + 1
#define COUNT_CLASS(name, cls, ar, dt, bl, gr, vm, vk, v64) + (LM_CLASS_##cls == LM_CLASS_UNARY ? 1 : 0)
_Static_assert(0 LM_OPS(COUNT_CLASS) == 0 UNARY_OPS(COUNT_ROW) + 4,
               "a unary op of core/op.h has no Lua name in UNARY_OPS (lua/l_ops.c)");
#undef COUNT_CLASS
#define COUNT_CLASS(name, cls, ar, dt, bl, gr, vm, vk, v64) + (LM_CLASS_##cls == LM_CLASS_BINARY ? 1 : 0)
_Static_assert(0 LM_OPS(COUNT_CLASS) == 0 BINARY_OPS(COUNT_ROW),
               "a binary op of core/op.h has no Lua name in BINARY_OPS (lua/l_ops.c)");
#undef COUNT_CLASS
#undef COUNT_ROW

static double opt_bound(lua_State *L, int arg)
{
    return lua_isnoneornil(L, arg) ? NAN : luaL_checknumber(L, arg);
}

static int o_clamp(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    return lm_lua_push_array(L, lm_clamp(a, opt_bound(L, 2), opt_bound(L, 3)));
}

static int o_where(lua_State *L)
{
    lm_array *c = lm_lua_to_array(L, 1, LM_DTYPE_COUNT);
    lm_array *a = c ? lm_lua_to_array(L, 2, LM_DTYPE_COUNT) : NULL;
    lm_array *b = a ? lm_lua_to_array(L, 3, LM_DTYPE_COUNT) : NULL;
    lm_array *r = b ? lm_where(c, a, b) : NULL;
    lm_array_release(c);
    lm_array_release(a);
    lm_array_release(b);
    return lm_lua_push_array(L, r);
}

static int o_astype(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    return lm_lua_push_array(L, lm_cast(a, lm_lua_check_dtype(L, 2)));
}

static int o_copy(lua_State *L) { return unary(L, LM_OP_COPY); }

static int o_quantize(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    const char *name = luaL_checkstring(L, 2);
    lm_dtype t;
    if (!lm_dtype_from_name_any(name, &t) || !lm_dtype_is_quant(t))
        return luaL_error(L, "quantize: unknown quantized dtype '%s' (q4_0 q4_1 q5_0 q5_1 q8_0 q2_k "
                          "q3_k q4_k q5_k q6_k q8_k)", name);
    return lm_lua_push_array(L, lm_quantize(a, t));
}

static int o_dequantize(lua_State *L) { return lm_lua_push_array(L, lm_dequantize(lm_lua_check_array(L, 1))); }

/* ---- reductions ---- */

/* Axes at arg: nil (all), a number or a table; returns the count. */
static int read_axes(lua_State *L, int arg, int ndim, int *axes, const char *fname)
{
    if (lua_isnoneornil(L, arg)) return 0;
    if (lua_type(L, arg) == LUA_TNUMBER) {
        axes[0] = lm_lua_axis(L, arg, ndim, fname);
        return 1;
    }
    luaL_checktype(L, arg, LUA_TTABLE);
    int n = (int)luaL_len(L, arg);
    if (n > LM_MAX_DIMS) luaL_error(L, "%s: too many axes", fname);
    for (int i = 0; i < n; i++) {
        lua_geti(L, arg, i + 1);
        axes[i] = lm_lua_axis_value(L, luaL_checkinteger(L, -1), ndim, fname);
        lua_pop(L, 1);
    }
    if (n == 0) luaL_error(L, "%s: empty axis list (pass nil to reduce every axis)", fname);
    return n;
}

/* t:sum(axis, {keepdims=true}): the options table may also come second;
 * keepdims may come third as a boolean. */
static int reduce(lua_State *L, lm_op op, const char *fname)
{
    static const char *const KEEP[] = {"keepdims", NULL};
    static const char *const KEEP_DDOF[] = {"keepdims", "ddof", NULL};
    lm_array *a = lm_lua_check_array(L, 1);
    int axes[LM_MAX_DIMS], opt = 3;
    if (lua_istable(L, 2) && !lua_rawlen(L, 2) && lua_isnoneornil(L, 3)) opt = 2;
    if (lua_type(L, opt) != LUA_TBOOLEAN)
        lm_lua_check_opts(L, opt, fname, op == LM_OP_VAR || op == LM_OP_STD ? KEEP_DDOF : KEEP);
    int n = opt == 2 ? 0 : read_axes(L, 2, a->ndim, axes, fname);
    bool keep = lm_lua_opt_bool(L, opt, fname, "keepdims",
                                lua_type(L, opt) == LUA_TBOOLEAN && lua_toboolean(L, opt));
    if (op == LM_OP_VAR || op == LM_OP_STD) {
        int ddof = (int)lm_lua_opt_int(L, opt, fname, "ddof", 0);
        return lm_lua_push_array(L, op == LM_OP_VAR ? lm_var(a, n, axes, ddof, keep)
                                                    : lm_std(a, n, axes, ddof, keep));
    }
    return lm_lua_push_array(L, lm_reduce(op, a, n, axes, keep));
}

static int r_sum(lua_State *L) { return reduce(L, LM_OP_SUM, "sum"); }
static int r_mean(lua_State *L) { return reduce(L, LM_OP_MEAN, "mean"); }
static int r_prod(lua_State *L) { return reduce(L, LM_OP_PROD, "prod"); }
static int r_logsumexp(lua_State *L) { return reduce(L, LM_OP_LOGSUMEXP, "logsumexp"); }
static int r_all(lua_State *L) { return reduce(L, LM_OP_ALL, "all"); }
static int r_any(lua_State *L) { return reduce(L, LM_OP_ANY, "any"); }
static int r_var(lua_State *L) { return reduce(L, LM_OP_VAR, "var"); }
static int r_std(lua_State *L) { return reduce(L, LM_OP_STD, "std"); }

/* t:max(axis) reduces; t:max(u) with a tensor or number is lm.maximum */
static int r_max(lua_State *L)
{
    if (lm_lua_testtensor(L, 2) || (lua_type(L, 2) == LUA_TNUMBER && !lua_isinteger(L, 2)))
        return binary(L, LM_OP_MAXIMUM);
    return reduce(L, LM_OP_MAX, "max");
}

static int r_min(lua_State *L)
{
    if (lm_lua_testtensor(L, 2) || (lua_type(L, 2) == LUA_TNUMBER && !lua_isinteger(L, 2)))
        return binary(L, LM_OP_MINIMUM);
    return reduce(L, LM_OP_MIN, "min");
}

static int argreduce(lua_State *L, lm_op op, const char *fname)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int axis = lua_isnoneornil(L, 2) || lua_istable(L, 2) ? LM_AXIS_ALL : lm_lua_axis(L, 2, a->ndim, fname);
    int opt = lua_istable(L, 2) ? 2 : 3;
    static const char *const KEEP[] = {"keepdims", NULL};
    lm_lua_check_opts(L, opt, fname, KEEP);
    bool keep = lm_lua_opt_bool(L, opt, fname, "keepdims", false);
    lm_array *r = lm_argreduce(op, a, axis, keep);
    return lm_lua_push_array(L, r ? lm_lua_one_based(r) : NULL);
}

static int r_argmax(lua_State *L) { return argreduce(L, LM_OP_ARGMAX, "argmax"); }
static int r_argmin(lua_State *L) { return argreduce(L, LM_OP_ARGMIN, "argmin"); }

static int r_cumsum(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int axis = lm_lua_axis(L, 2, a->ndim, "cumsum");
    return lm_lua_push_array(L, lm_cumsum(a, axis));
}

/* ---- shapes ---- */

static int s_reshape(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int64_t shape[LM_MAX_DIMS];
    int n = 0;
    bool tbl = lua_istable(L, 2);
    if (tbl) lm_lua_check_nargs(L, 2, "reshape");
    int count = tbl ? (int)luaL_len(L, 2) : lua_gettop(L) - 1;
    if (count > LM_MAX_DIMS) return luaL_error(L, "reshape: more than %d dimensions", LM_MAX_DIMS);
    for (int i = 0; i < count; i++) {
        if (tbl) lua_geti(L, 2, i + 1);
        else lua_pushvalue(L, i + 2);
        /* luaL_checkinteger would say "bad argument #-1": name the size */
        int isint;
        lua_Integer v = lua_tointegerx(L, -1, &isint);
        if (!isint) {
            bool num = lua_type(L, -1) == LUA_TNUMBER;
            return luaL_error(L, "reshape: size %d must be an integer, not %s%s", i + 1,
                              num ? "" : "a ", num ? lua_tostring(L, -1) : luaL_typename(L, -1));
        }
        shape[n++] = v;
        lua_pop(L, 1);
    }
    return lm_lua_push_array(L, lm_reshape(a, n, shape));
}

static int s_permute(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int perm[LM_MAX_DIMS];
    bool tbl = lua_istable(L, 2);
    if (tbl) lm_lua_check_nargs(L, 2, "permute");
    int n = tbl ? (int)luaL_len(L, 2) : lua_gettop(L) - 1;
    if (n != a->ndim) return luaL_error(L, "permute: %d axes given for a %d-d tensor", n, a->ndim);
    for (int i = 0; i < n; i++) {
        if (tbl) lua_geti(L, 2, i + 1);
        else lua_pushvalue(L, i + 2);
        perm[i] = lm_lua_axis_value(L, luaL_checkinteger(L, -1), a->ndim, "permute");
        lua_pop(L, 1);
    }
    return lm_lua_push_array(L, lm_permute(a, perm));
}

static int s_transpose(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (a->ndim < 2 && lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        return 1;
    }
    int x = lua_isnoneornil(L, 2) ? a->ndim - 2 : lm_lua_axis(L, 2, a->ndim, "transpose");
    int y = lua_isnoneornil(L, 3) ? a->ndim - 1 : lm_lua_axis(L, 3, a->ndim, "transpose");
    return lm_lua_push_array(L, lm_transpose(a, x, y));
}

static int s_squeeze(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (lua_isnoneornil(L, 2)) return lm_lua_push_array(L, lm_squeeze_all(a));
    return lm_lua_push_array(L, lm_squeeze(a, lm_lua_axis(L, 2, a->ndim, "squeeze")));
}

static int s_unsqueeze(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    lua_Integer ax = luaL_checkinteger(L, 2);
    /* 1..ndim+1 inserts before that position; -1 appends */
    return lm_lua_push_array(L, lm_unsqueeze(a, (int)lm_lua_axis_value(L, ax, a->ndim + 1, "unsqueeze")));
}

static int s_flatten(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (a->ndim == 0) return lm_lua_push_array(L, lm_reshape(a, 1, (int64_t[]){1}));
    int s = lua_isnoneornil(L, 2) ? 0 : lm_lua_axis(L, 2, a->ndim, "flatten");
    int e = lua_isnoneornil(L, 3) ? a->ndim - 1 : lm_lua_axis(L, 3, a->ndim, "flatten");
    return lm_lua_push_array(L, lm_flatten(a, s, e));
}

static int s_broadcast_to(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int64_t shape[LM_MAX_DIMS];
    int next;
    int n = lm_lua_shape(L, 2, shape, &next);
    lm_lua_check_nargs(L, next - 1, "broadcast_to");
    return lm_lua_push_array(L, lm_broadcast_to(a, n, shape));
}

static int s_contiguous(lua_State *L)
{
    return lm_lua_push_array(L, lm_contiguous(lm_lua_check_array(L, 1)));
}

static int o_matmul(lua_State *L)
{
    return lm_lua_push_array(L, lm_matmul(lm_lua_check_array(L, 1), lm_lua_check_array(L, 2)));
}

static int s_pad(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int64_t pads[2 * LM_MAX_DIMS] = {0};
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)luaL_len(L, 2);
    bool nested = n > 0 && (lua_geti(L, 2, 1), lua_istable(L, -1));
    lua_pop(L, 1);
    int count = nested ? 2 * n : n;
    if (count > 2 * a->ndim || count % 2)
        return luaL_error(L, "pad: %d pad values for a %d-d tensor (before/after pairs from axis 1)", count, a->ndim);
    for (int i = 0; i < count; i++) {
        if (nested) {
            lua_geti(L, 2, i / 2 + 1);
            lua_geti(L, -1, i % 2 + 1);
            lua_remove(L, -2);
        } else {
            lua_geti(L, 2, i + 1);
        }
        pads[i] = luaL_checkinteger(L, -1);
        lua_pop(L, 1);
    }
    return lm_lua_push_array(L, lm_pad(a, pads, luaL_optnumber(L, 3, 0)));
}

/* ---- joining ---- */

/* The tensors of the list at arg in a scratch userdata left on the stack. */
static lm_array **list_arrays(lua_State *L, int arg, int *n, const char *fname)
{
    luaL_checktype(L, arg, LUA_TTABLE);
    *n = (int)luaL_len(L, arg);
    if (*n == 0) luaL_error(L, "%s: empty list of tensors", fname);
    lm_array **v = lua_newuserdatauv(L, sizeof *v * (size_t)*n, 0);
    for (int i = 0; i < *n; i++) {
        lua_geti(L, arg, i + 1);
        v[i] = lm_lua_check_array(L, -1);
        lua_pop(L, 1);
    }
    return v;
}

static int j_concat(lua_State *L)
{
    int n;
    lua_settop(L, 2);
    lm_array **v = list_arrays(L, 1, &n, "concat");
    int axis = lua_isnoneornil(L, 2) ? 0 : lm_lua_axis(L, 2, v[0]->ndim, "concat");
    return lm_lua_push_array(L, lm_concat(n, v, axis));
}

static int j_stack(lua_State *L)
{
    int n;
    lua_settop(L, 2);
    lm_array **v = list_arrays(L, 1, &n, "stack");
    int axis = lua_isnoneornil(L, 2) ? 0 : lm_lua_axis(L, 2, v[0]->ndim + 1, "stack");
    return lm_lua_push_array(L, lm_stack(n, v, axis));
}

static int j_split(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int axis = lua_isnoneornil(L, 3) ? 0 : lm_lua_axis(L, 3, a->ndim, "split");
    int64_t sizes[256];
    int nsizes = 0, sections = 0;
    if (lua_istable(L, 2)) {
        nsizes = (int)luaL_len(L, 2);
        if (nsizes > 256) return luaL_error(L, "split: at most 256 parts");
        for (int i = 0; i < nsizes; i++) {
            lua_geti(L, 2, i + 1);
            sizes[i] = luaL_checkinteger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        sections = (int)luaL_checkinteger(L, 2);
        if (sections < 1 || sections > 256) return luaL_error(L, "split: sections must be 1..256");
    }
    lm_array *out[256];
    int n = lm_split(a, sections, nsizes ? sizes : NULL, nsizes, axis, out, 256);
    if (n < 0) return lm_lua_error(L);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lm_lua_push_array(L, out[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

#define UNARY_ENTRY(name, OP, doc) {#name, u_##name, "t:" #name "() -> tensor\nElementwise: " doc "."},
#define BINARY_ENTRY(name, OP, doc) {#name, b_##name, "t:" #name "(u) -> tensor\nElementwise " doc \
    ", broadcasting; u may be a tensor or a number.  Also lm." #name "(a, b)."},

const lm_lua_func lm_lua_op_methods[] = {
    UNARY_OPS(UNARY_ENTRY)
    {"gelu", o_gelu, "t:gelu([{approximate=\"none\"|\"tanh\"}]) -> tensor\nElementwise GELU, "
     "x * Phi(x): the exact erf form (approximate=\"none\", the default) or the tanh approximation "
     "0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (approximate=\"tanh\").  As in PyTorch, "
     "approximate is given by name only."},
    BINARY_OPS(BINARY_ENTRY)
    {"clamp", o_clamp, "t:clamp(lo, hi) -> tensor\nLimits t to [lo, hi]; either bound may be nil."},
    {"astype", o_astype, "t:astype(dtype) -> tensor\nt converted to dtype (\"f32\", \"f16\", \"bf16\", "
     "\"f64\", \"i8\", \"u8\", \"i16\", \"i32\", \"i64\", \"bool\").  Float to integer truncates."},
    {"copy", o_copy, "t:copy() -> tensor\nA new contiguous copy of t."},
    {"quantize", o_quantize, "t:quantize(dtype) -> tensor\nt (a float tensor) in one of ggml's block "
     "quantizations: \"q4_0\", \"q4_1\", \"q5_0\", \"q5_1\", \"q8_0\", \"q2_k\", \"q3_k\", \"q4_k\", "
     "\"q5_k\", \"q6_k\", \"q8_k\" (bytes identical to ggml's quantize_row_*_ref).  The last dimension "
     "must be a multiple of the block (32; 256 for the k types).  Computed at once on the CPU."},
    {"dequantize", o_dequantize, "t:dequantize() -> tensor\nA quantized tensor's values as f32 (as "
     "ggml's dequantize_row_*); any other tensor converted to f32.  A quantized tensor takes no other op."},
    {"sum", r_sum, "t:sum([axis|{axes}], [{keepdims=true}]) -> tensor\nThe sum over the axes (all "
     "when nil)."},
    {"mean", r_mean, "t:mean([axis|{axes}], [{keepdims=true}]) -> tensor\nThe mean over the axes."},
    {"prod", r_prod, "t:prod([axis|{axes}], [{keepdims=true}]) -> tensor\nThe product over the axes."},
    {"max", r_max, "t:max([axis|{axes}], [{keepdims=true}]) -> tensor\nThe largest value over the "
     "axes.  t:max(u) with a tensor or float is lm.maximum(t, u)."},
    {"min", r_min, "t:min([axis|{axes}], [{keepdims=true}]) -> tensor\nThe smallest value over the "
     "axes.  t:min(u) with a tensor or float is lm.minimum(t, u)."},
    {"logsumexp", r_logsumexp, "t:logsumexp([axis|{axes}], [{keepdims=true}]) -> tensor\n"
     "log(sum(exp(t))), computed stably."},
    {"all", r_all, "t:all([axis|{axes}], [{keepdims=true}]) -> tensor\nTrue where every element is "
     "non-zero (bool)."},
    {"any", r_any, "t:any([axis|{axes}], [{keepdims=true}]) -> tensor\nTrue where some element is "
     "non-zero (bool)."},
    {"var", r_var, "t:var([axis|{axes}], [{ddof=0, keepdims=false}]) -> tensor\nThe variance."},
    {"std", r_std, "t:std([axis|{axes}], [{ddof=0, keepdims=false}]) -> tensor\nThe standard deviation."},
    {"argmax", r_argmax, "t:argmax([axis], [{keepdims=true}]) -> tensor\n1-based i64 index of the "
     "largest value along axis (of the flattened tensor when nil); the first wins."},
    {"argmin", r_argmin, "t:argmin([axis], [{keepdims=true}]) -> tensor\n1-based i64 index of the "
     "smallest value along axis (of the flattened tensor when nil)."},
    {"cumsum", r_cumsum, "t:cumsum(axis) -> tensor\nRunning sums along axis."},
    {"reshape", s_reshape, "t:reshape(shape | n1, n2, ...) -> tensor\nThe same elements in a new shape (one entry may "
     "be -1); a view when strides allow."},
    {"permute", s_permute, "t:permute(axes | a1, a2, ...) -> tensor\nA view with the axes reordered (1-based)."},
    {"transpose", s_transpose, "t:transpose([a, b]) -> tensor\nA view with axes a and b swapped (the "
     "last two by default).  t.T does the same."},
    {"squeeze", s_squeeze, "t:squeeze([axis]) -> tensor\nRemoves axis (of size 1), or every axis of "
     "size 1."},
    {"unsqueeze", s_unsqueeze, "t:unsqueeze(axis) -> tensor\nInserts an axis of size 1 at position "
     "axis (1..ndim+1; -1 appends)."},
    {"flatten", s_flatten, "t:flatten([first, last]) -> tensor\nMerges axes first..last (all by "
     "default) into one."},
    {"broadcast_to", s_broadcast_to, "t:broadcast_to(shape | n1, n2, ...) -> tensor\nA view of t repeated to shape "
     "(numpy broadcasting)."},
    {"contiguous", s_contiguous, "t:contiguous() -> tensor\nt itself when already row-major "
     "contiguous, else a contiguous copy."},
    {"matmul", o_matmul, "t:matmul(u) -> tensor\nMatrix product (numpy matmul: 1-D operands, "
     "broadcast batch axes).  Also lm.matmul(a, b)."},
    {"pad", s_pad, "t:pad(pads, [value=0]) -> tensor\nPads with a constant: pads = {{before, after}, "
     "...} (or flat {b1, a1, b2, a2, ...}) from axis 1; missing axes are not padded."},
    {"split", j_split, "t:split(sections|{sizes}, [axis=1]) -> {tensor, ...}\nSplits into equal "
     "sections or parts of the given sizes (views), returned in a table."},
    {NULL, NULL, NULL},
};

/* lm.eval(a, b, ...): evaluates together (shared work runs once);
 * lm.async_eval the same without waiting for the device */
static int eval_args(lua_State *L, bool wait)
{
    int n = lua_gettop(L);
    lm_array **v = lua_newuserdatauv(L, sizeof *v * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) v[i] = lm_lua_check_array(L, i + 1);
    if ((wait ? lm_eval(v, n) : lm_eval_async(v, n)) != LM_OK) return lm_lua_error(L);
    lua_pop(L, 1);
    return n;
}

static int m_eval(lua_State *L) { return eval_args(L, true); }
static int m_async_eval(lua_State *L) { return eval_args(L, false); }

const lm_lua_func lm_lua_op_module[] = {
    {"where", o_where, "lm.where(cond, a, b) -> tensor\nElementwise a where cond is true, else b "
     "(broadcasting; a and b may be numbers)."},
    {"concat", j_concat, "lm.concat({a, b, ...}, [axis=1]) -> tensor\nJoins tensors along an "
     "existing axis."},
    {"stack", j_stack, "lm.stack({a, b, ...}, [axis=1]) -> tensor\nJoins tensors of one shape "
     "along a new axis."},
    {"eval", m_eval, "lm.eval(a, b, ...) -> a, b, ...\nEvaluates the tensors together, so work they "
     "share runs once."},
    {"async_eval", m_async_eval, "lm.async_eval(a, b, ...) -> a, b, ...\nAs lm.eval, but returns once "
     "the work is queued on the GPU, so the next graph can be built while it runs. Reading a value "
     "(print, :item(), :to(\"cpu\")), lm.sync() or using it in another evaluation waits for it; an "
     "error a kernel reports appears there. On the CPU, and while profiling, it is lm.eval."},
    {NULL, NULL, NULL},
};
