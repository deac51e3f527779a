/* l_nnseq.c - the sequence-model half of core/ops_nn.h in Lua: attention,
 * rotary embeddings, sorting and top-k, scatter, one_hot, embedding,
 * triangular masks and the diffusion timestep embedding.
 *
 * Index inputs and outputs are 1-based, as argmax and index_select are:
 * topk/sort/argsort return 1-based i64 indices, and scatter, one_hot and
 * embedding take them (checked through lm_lua_index_arg, l_nnargs.c). */
#include <math.h>
#include <string.h>
#include "l_internal.h"

/* ---- attention ---- */

enum { A_K, A_V, A_MASK, A_DROP, A_CAUSAL, A_SCALE, A_GQA };
static const char *const ATTN[] = {"key", "value", "attn_mask|mask", "dropout_p", "is_causal|causal",
                                   "scale", "enable_gqa", NULL};

static int attention(lua_State *L, const char *fname)
{
    lm_array *q = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, fname, ATTN, 2);
    if (lm_nn_num(&a, A_DROP, 0) != 0)
        return luaL_error(L, "%s: dropout_p must be 0 (inference only)", fname);
    lm_nn_bool(&a, A_GQA, false);      /* checked; grouped heads always work */
    double scale = lm_nn_num(&a, A_SCALE, NAN);
    /* the core reads scale <= 0 as "the default": say so instead */
    if (lm_nn_has(&a, A_SCALE) && !(scale > 0))
        return luaL_error(L, "%s: scale must be positive, got %f", fname, scale);
    return lm_lua_push_array(L, lm_attention(q, lm_nn_tensor(&a, A_K, true), lm_nn_tensor(&a, A_V, true),
                                             lm_nn_tensor(&a, A_MASK, false),
                                             lm_nn_bool(&a, A_CAUSAL, false), scale));
}

static int l_attention(lua_State *L) { return attention(L, "attention"); }
static int l_sdpa(lua_State *L) { return attention(L, "scaled_dot_product_attention"); }

/* ---- rotary position embedding ---- */

enum { R_DIMS, R_TRAD, R_BASE, R_SCALE, R_OFFSET, R_FREQS };
static const char *const ROPE[] = {"dims", "traditional", "base", "scale", "offset", "freqs", NULL};

static int l_rope(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "rope", ROPE, 2);
    int64_t dims = lm_nn_int(&a, R_DIMS, x->ndim ? x->shape[x->ndim - 1] : 0);
    bool trad = lm_nn_bool(&a, R_TRAD, false);
    double scale = lm_nn_num(&a, R_SCALE, 1);
    int64_t offset = lm_nn_int(&a, R_OFFSET, 0);
    lm_array *freqs = lm_nn_tensor(&a, R_FREQS, false);
    if (freqs && lm_nn_has(&a, R_BASE))
        return luaL_error(L, "rope: give base or freqs, not both");
    if (freqs) return lm_lua_push_array(L, lm_rope_freqs(x, dims, trad, freqs, scale, offset));
    return lm_lua_push_array(L, lm_rope(x, dims, trad, lm_nn_num(&a, R_BASE, 10000), scale, offset));
}

enum { RF_DIMS, RF_FREQS, RF_TRAD, RF_SCALE, RF_OFFSET };
static const char *const ROPE_FREQS[] = {"dims", "freqs", "traditional", "scale", "offset", NULL};

static int l_rope_freqs(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "rope_freqs", ROPE_FREQS, 2);
    if (!lm_nn_has(&a, RF_DIMS)) return luaL_error(L, "rope_freqs: dims is required");
    return lm_lua_push_array(L, lm_rope_freqs(x, lm_nn_int(&a, RF_DIMS, 0), lm_nn_bool(&a, RF_TRAD, false),
                                              lm_nn_tensor(&a, RF_FREQS, true), lm_nn_num(&a, RF_SCALE, 1),
                                              lm_nn_int(&a, RF_OFFSET, 0)));
}

enum { RM_POS, RM_AXES, RM_THETA, RM_TRAD };
static const char *const ROPE_MULTI[] = {"pos", "axes_dims", "theta", "traditional", NULL};

static int l_rope_multi(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "rope_multi", ROPE_MULTI, 2);
    lm_array *pos = lm_nn_tensor(&a, RM_POS, true);
    if (!lm_nn_has(&a, RM_AXES)) return luaL_error(L, "rope_multi: axes_dims is required");
    int64_t dims[LM_MAX_DIMS];
    int n = lm_nn_ints(&a, RM_AXES, dims, LM_MAX_DIMS);
    return lm_lua_push_array(L, lm_rope_multi(x, pos, n, dims, lm_nn_num(&a, RM_THETA, 10000),
                                              lm_nn_bool(&a, RM_TRAD, false)));
}

static const char *const ROPE_ANGLES[] = {"angles", "dims", "traditional", NULL};

static int l_rope_angles(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "rope_angles", ROPE_ANGLES, 2);
    lm_array *ang = lm_nn_tensor(&a, 0, true);
    int64_t dflt = ang->ndim ? 2 * ang->shape[ang->ndim - 1] : 0;
    return lm_lua_push_array(L, lm_rope_angles(x, ang, lm_nn_int(&a, 1, dflt), lm_nn_bool(&a, 2, false)));
}

/* ---- sorting and selection ---- */

static const char *const TOPK[] = {"k", "dim|axis", "largest", "sorted", NULL};

/* values, indices: Lua gets 1-based indices, as from argmax */
static int l_topk(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "topk", TOPK, 2);
    if (!lm_nn_has(&a, 0)) return luaL_error(L, "topk: k is required");
    int axis = lm_nn_axis(&a, 1, x->ndim, x->ndim - 1);
    lm_nn_bool(&a, 3, true);           /* results are always sorted */
    lm_array *v = NULL, *i = NULL;
    if (lm_topk(x, lm_nn_int(&a, 0, 1), axis, lm_nn_bool(&a, 2, true), &v, &i) != LM_OK)
        return lm_lua_error(L);
    lm_lua_push_array(L, v);
    return 1 + lm_lua_push_array(L, lm_lua_one_based(i));
}

static const char *const SORT[] = {"dim|axis", "descending", "stable", NULL};

/* sorts are always stable: stable=false is allowed (any order is right) */
static int sort_args(lua_State *L, lm_nn_args *a, const char *fname, lm_array *x, bool *desc)
{
    lm_nn_args_read(L, a, fname, SORT, 2);
    lm_nn_bool(a, 2, true);
    *desc = lm_nn_bool(a, 1, false);
    return lm_nn_axis(a, 0, x->ndim, x->ndim - 1);
}

static int l_sort(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    bool desc;
    int axis = sort_args(L, &a, "sort", x, &desc);
    lm_lua_push_array(L, lm_sort(x, axis, desc));
    lm_array *i = lm_argsort(x, axis, desc);
    return 1 + lm_lua_push_array(L, i ? lm_lua_one_based(i) : NULL);
}

static int l_argsort(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    bool desc;
    int axis = sort_args(L, &a, "argsort", x, &desc);
    lm_array *i = lm_argsort(x, axis, desc);
    return lm_lua_push_array(L, i ? lm_lua_one_based(i) : NULL);
}

/* ---- scatter, one_hot, embedding ---- */

static const char *const SCATTER[] = {"dim|axis", "index", "src|value", NULL};

static int scatter(lua_State *L, const char *fname,
                   lm_array *(*fn)(lm_array *, int, lm_array *, lm_array *))
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, fname, SCATTER, 2);
    if (!lm_nn_has(&a, 0)) return luaL_error(L, "%s: dim is required", fname);
    if (!lm_nn_has(&a, 1)) return luaL_error(L, "%s: index is required", fname);
    if (!lm_nn_has(&a, 2)) return luaL_error(L, "%s: src is required", fname);
    int axis = lm_nn_axis(&a, 0, x->ndim, 0);
    /* both live on the stack, so an error below cannot leak them */
    lm_lua_push_array(L, lm_lua_index_arg(L, a.at[1], fname, "index", x->shape[axis], false));
    int at_idx = lua_gettop(L);
    if (lua_type(L, a.at[2]) == LUA_TNUMBER)
        lm_lua_push_array(L, lm_scalar(lua_tonumber(L, a.at[2]), x->dtype, x->device));
    else
        lua_pushvalue(L, a.at[2]);
    lm_array *src = lm_lua_testtensor(L, -1) ? lm_lua_check_array(L, -1) : NULL;
    if (!src)
        return luaL_error(L, "%s: src must be a tensor or a number, got %s", fname,
                          luaL_typename(L, a.at[2]));
    return lm_lua_push_array(L, fn(x, axis, lm_lua_check_array(L, at_idx), src));
}

static int l_scatter(lua_State *L) { return scatter(L, "scatter", lm_scatter); }
static int l_scatter_add(lua_State *L) { return scatter(L, "scatter_add", lm_scatter_add); }

static const char *const ONE_HOT[] = {"num_classes", NULL};

static int l_one_hot(lua_State *L)
{
    lm_nn_args a;
    lm_nn_args_read(L, &a, "one_hot", ONE_HOT, 2);
    lua_Integer n = lm_nn_int(&a, 0, 0);
    if (n < 1)
        return luaL_error(L, "one_hot: num_classes must be given and > 0 (Lumen does not read the "
                             "data to infer it)");
    lm_array *idx = lm_lua_index_arg(L, 1, "one_hot", "indices", n, true);
    lm_array *r = lm_one_hot(idx, n);
    lm_array_release(idx);
    return lm_lua_push_array(L, r);
}

static const char *const EMBEDDING[] = {"weight", NULL};

/* F.embedding(input, weight): the indices come first, as in PyTorch */
static int l_embedding(lua_State *L)
{
    lm_nn_args a;
    lm_nn_args_read(L, &a, "embedding", EMBEDDING, 2);
    lm_array *w = lm_nn_tensor(&a, 0, true);
    if (w->ndim != 2) return luaL_error(L, "embedding: weight must be 2-d [V, D], got %d-d", w->ndim);
    lm_array *idx = lm_lua_index_arg(L, 1, "embedding", "indices", w->shape[0], false);
    lm_array *r = lm_embedding(w, idx);
    lm_array_release(idx);
    return lm_lua_push_array(L, r);
}

/* ---- triangles and the timestep embedding ---- */

static const char *const DIAGONAL[] = {"diagonal", NULL};

static int tri(lua_State *L, const char *fname, lm_array *(*fn)(lm_array *, int64_t))
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, fname, DIAGONAL, 2);
    return lm_lua_push_array(L, fn(x, lm_nn_int(&a, 0, 0)));
}

static int l_tril(lua_State *L) { return tri(L, "tril", lm_tril); }
static int l_triu(lua_State *L) { return tri(L, "triu", lm_triu); }

static const char *const TIMESTEP[] = {"dim", "max_period", "flip_sin_to_cos",
                                       "downscale_freq_shift|shift", "scale", NULL};

static int l_timestep_embedding(lua_State *L)
{
    lm_array *t = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "timestep_embedding", TIMESTEP, 2);
    if (!lm_nn_has(&a, 0)) return luaL_error(L, "timestep_embedding: dim is required");
    return lm_lua_push_array(L, lm_timestep_embedding(t, lm_nn_int(&a, 0, 0), lm_nn_num(&a, 1, 10000),
                                                      lm_nn_bool(&a, 2, true), lm_nn_num(&a, 3, 0),
                                                      lm_nn_num(&a, 4, 1)));
}

/* ---- the tables ---- */

#define OPTS "  Options may be positional (PyTorch's order) or in a table; an unknown name is an error."

const lm_lua_func lm_lua_nnseq_methods[] = {
    {"topk", l_topk, "t:topk(k, [dim=-1], [largest=true]) -> values, indices\nThe k largest (or "
     "smallest) entries along dim, sorted, and their 1-based i64 indices; ties keep the lower index "
     "first, NaN counts as largest.  Also lm.topk(x, k, {dim=, largest=, sorted=})." OPTS},
    {"sort", l_sort, "t:sort([dim=-1], [descending=false]) -> values, indices\nA stable sort along "
     "dim and the 1-based i64 indices it took (torch.sort); NaN sorts last (first when "
     "descending).  Also lm.sort(x, {dim=, descending=, stable=})." OPTS},
    {"argsort", l_argsort, "t:argsort([dim=-1], [descending=false]) -> tensor\nThe 1-based i64 "
     "indices that sort t stably along dim.  Also lm.argsort(x, ...)." OPTS},
    {"scatter", l_scatter, "t:scatter(dim, index, src) -> tensor\nTensor.scatter: a copy of t with "
     "out[..., index[p], ...] = src[p] along dim for every position p of index (1-based, negative "
     "from the end; same ndim as t); src is a tensor or a number.  With duplicate indices the "
     "last position in row-major order wins.  Also lm.scatter(x, dim, index, src)."},
    {"scatter_add", l_scatter_add, "t:scatter_add(dim, index, src) -> tensor\nTensor.scatter_add: "
     "as scatter, adding src into the copy of t (duplicates accumulate).  Also lm.scatter_add(...)."},
    {"tril", l_tril, "t:tril([diagonal=0]) -> tensor\nKeeps the lower triangle of the last two axes "
     "(j <= i + diagonal), zeroes the rest.  Also lm.tril(x, k)."},
    {"triu", l_triu, "t:triu([diagonal=0]) -> tensor\nKeeps the upper triangle of the last two axes "
     "(j >= i + diagonal), zeroes the rest.  Also lm.triu(x, k)."},
    {NULL, NULL, NULL},
};

const lm_lua_func lm_lua_nnseq_funcs[] = {
    {"attention", l_attention, "lm.attention(q, k, v, {mask=nil, causal=false, scale=1/sqrt(D)}) -> "
     "tensor\nsoftmax(q k^T * scale + mask) v: q [B, Hq, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv] "
     "with Hq a multiple of Hk (grouped-query heads).  mask broadcasts to [B, Hq, Lq, Lk]: bool "
     "(true = attend) or float (added).  causal: query i sees keys j <= i (PyTorch's top-left "
     "alignment).  Memory stays O(L) (online softmax over key blocks).  Option names of "
     "F.scaled_dot_product_attention work too (attn_mask, is_causal, dropout_p=0, enable_gqa)." OPTS},
    {"scaled_dot_product_attention", l_sdpa, "lm.scaled_dot_product_attention(q, k, v, [attn_mask], "
     "[dropout_p=0], [is_causal=false], [scale]) -> tensor\nAlias of lm.attention (PyTorch's name)."},
    {"rope", l_rope, "lm.rope(x, [dims=D], {traditional=false, base=10000, scale=1, offset=0, freqs=nil})"
     " -> tensor\nRotary position embedding of x [..., L, D] (positions along axis -2), MLX's "
     "mx.fast.rope: the first dims features rotate by angle (offset + row) * scale * "
     "base^(-2j/dims), or * freqs[j] with a freqs tensor of dims/2.  traditional pairs (2j, 2j+1) "
     "(GPT-J, FLUX); else (j, j + dims/2) (GPT-NeoX, HF LLaMA)." OPTS},
    {"rope_freqs", l_rope_freqs, "lm.rope_freqs(x, dims, freqs, {traditional=false, scale=1, offset=0}) "
     "-> tensor\nRoPE with explicit frequencies freqs [dims/2]: angle (offset + row) * scale * "
     "freqs[j].  Same as lm.rope(x, dims, {freqs=})." OPTS},
    {"rope_multi", l_rope_multi, "lm.rope_multi(x, pos, axes_dims, {theta=10000, traditional=false}) "
     "-> tensor\nMulti-axis RoPE (FLUX and Z-Image DiTs; FLUX uses traditional=true): pos [..., L, "
     "n] holds n positions per token; axis a rotates its own axes_dims[a] features with "
     "frequencies theta^(-2j/axes_dims[a])." OPTS},
    {"rope_angles", l_rope_angles, "lm.rope_angles(x, angles, [dims=2*#angles], {traditional=false}) "
     "-> tensor\nRotates x [..., L, D] by an angle table (radians) broadcastable to [..., L, dims/2]."},
    {"one_hot", l_one_hot, "lm.one_hot(indices, num_classes) -> tensor\nF.one_hot with 1-based "
     "classes: i64 [..., num_classes] with a 1 in column indices[...] (negative counts from the end). "
     " num_classes is required; 0 and out-of-range indices are errors."},
    {"embedding", l_embedding, "lm.embedding(indices, weight) -> tensor\nF.embedding: the rows of "
     "weight [V, D] at the 1-based indices (a tensor or table of any shape) -> [..., D]; 0 and "
     "out-of-range indices are errors."},
    {"timestep_embedding", l_timestep_embedding, "lm.timestep_embedding(t, dim, {max_period=10000, "
     "flip_sin_to_cos=true, downscale_freq_shift=0, scale=1}) -> tensor\nSinusoidal embedding of "
     "timesteps t [N] -> [N, dim]: freq_j = exp(-ln(max_period) * j / (dim/2 - shift)), [cos | sin] "
     "of t * freq * scale when flip_sin_to_cos (ldm, Flux: the defaults), else [sin | cos] "
     "(diffusers' get_timestep_embedding defaults: flip_sin_to_cos=false, "
     "downscale_freq_shift=1)." OPTS},
    {NULL, NULL, NULL},
};
