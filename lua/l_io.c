/* l_io.c - the Lua face of files, images and comparison: lm.load, lm.save,
 * lm.compare, lm.allclose, lm.compare_file and the lm.image table.
 *
 * Arrays made here from Lua values are pushed as userdata at once, so a Lua
 * error raised later never leaks them; C results are checked and turned
 * into Lua errors only after everything C-owned is released. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"
#include "core/io/compare_sets.h"
#include "core/io/image.h"
#include "core/io/io.h"
#include "core/io/gguf.h"

#define REPORT_MT "lumen.compare_report"

/* The option names each function knows (the options rule, l_args.c). */
static const char *const LOAD_OPTS[] = {"device", NULL};
static const char *const SAVE_ST_OPTS[] = {"format", "metadata", NULL};
static const char *const SAVE_NPZ_OPTS[] = {"format", "compress", NULL};
static const char *const SAVE_NPY_OPTS[] = {"format", NULL};
static const char *const SAVE_PNG_OPTS[] = {"format", "layout", "range", "bits", "level", "text", NULL};
static const char *const WRITE_PNG_OPTS[] = {"layout", "range", "bits", "level", "text", NULL};
static const char *const READ_PNG_OPTS[] = {"layout", "dtype", NULL};
#define COMPARE_OPTS "rtol", "atol", "equal_nan", "check_dtype", "peak"
static const char *const CMP_OPTS[] = {COMPARE_OPTS, NULL};
static const char *const CMP_FILE_OPTS[] = {COMPARE_OPTS, "only", "allow_missing", NULL};
static const char *const GRID_OPTS[] = {"nrow", "pad", "pad_value", "layout", NULL};
static const char *const DIFF_OPTS[] = {"scale", "layout", NULL};

/* ---- small helpers ---- */

static bool opt_field(lua_State *L, int opts, const char *name)
{
    if (opts == 0 || lua_type(L, opts) != LUA_TTABLE) return false;
    if (lua_getfield(L, opts, name) != LUA_TNIL) return true;
    lua_pop(L, 1);
    return false;
}

/* The options table at idx checked against known: its index, 0 if nil. */
static int opts_arg(lua_State *L, int idx, const char *fname, const char *const *known)
{
    return lm_lua_check_opts(L, idx, fname, known);
}

/* The tensor at idx, or a new one made from a number/table and left on the
 * stack (so Lua owns it).  Borrowed either way. */
static lm_array *arg_array(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    if (luaL_testudata(L, idx, LM_LUA_TENSOR)) return lm_lua_check_array(L, idx);
    lm_array *a = lm_lua_to_array(L, idx, LM_DTYPE_COUNT);
    lm_lua_push_array(L, a);
    return lm_lua_check_array(L, -1);
}

static lm_layout opt_layout(lua_State *L, int opts, const char *fname)
{
    const char *s = lm_lua_opt_str(L, opts, fname, "layout", "CHW");
    if (!strcmp(s, "CHW") || !strcmp(s, "chw")) return LM_LAYOUT_CHW;
    if (!strcmp(s, "HWC") || !strcmp(s, "hwc")) return LM_LAYOUT_HWC;
    luaL_error(L, "layout must be \"CHW\" or \"HWC\", not \"%s\"", s);
    return LM_LAYOUT_CHW;
}

static void push_shape(lua_State *L, int ndim, const int64_t *shape)
{
    lm_lua_push_shape(L, ndim, shape);
}

static void push_meta(lua_State *L, const lm_tensor_set *s)
{
    lua_createtable(L, 0, s->nmeta);
    for (int i = 0; i < s->nmeta; i++) {
        lua_pushstring(L, s->meta[i].value);
        lua_setfield(L, -2, s->meta[i].key);
    }
}

/* GGUF metadata as Lua values: integers, floats, booleans, strings, and
 * arrays as sequences (a u64 past 2^63 becomes a float) */
static void push_gguf_value(lua_State *L, const lm_gguf_value *v)
{
    luaL_checkstack(L, 4, "lm.load: GGUF metadata nested too deep");
    switch (v->type) {
    case LM_GGUF_U8: case LM_GGUF_U16: case LM_GGUF_U32: case LM_GGUF_U64:
        if (v->u > (uint64_t)INT64_MAX) lua_pushnumber(L, (lua_Number)v->u);
        else lua_pushinteger(L, (lua_Integer)v->u);
        break;
    case LM_GGUF_I8: case LM_GGUF_I16: case LM_GGUF_I32: case LM_GGUF_I64: lua_pushinteger(L, v->i); break;
    case LM_GGUF_F32: case LM_GGUF_F64: lua_pushnumber(L, v->f); break;
    case LM_GGUF_BOOL: lua_pushboolean(L, v->b); break;
    case LM_GGUF_STRING: lua_pushlstring(L, v->str.s, (size_t)v->str.len); break;
    case LM_GGUF_ARRAY:
        lua_createtable(L, v->arr.n < INT32_MAX ? (int)v->arr.n : 0, 0);
        for (uint64_t i = 0; i < v->arr.n; i++) {
            push_gguf_value(L, &v->arr.items[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    default: lua_pushnil(L);
    }
}

static void push_gguf_meta(lua_State *L, const char *path)
{
    lm_gguf_meta m;
    if (lm_gguf_read_meta(path, &m) != LM_OK) lm_lua_error(L);
    lua_createtable(L, 0, m.n);
    for (int i = 0; i < m.n; i++) {
        push_gguf_value(L, &m.kv[i].v);
        lua_setfield(L, -2, m.kv[i].key);
    }
    lm_gguf_meta_free(&m);
}

/* Lua metadata to GGUF values: integers -> i64 (general.alignment -> u32),
 * floats -> f64, booleans, strings, sequences -> arrays of one kind.  The
 * values point into the Lua stack's strings; items live in userdata. */
static void to_gguf_value(lua_State *L, int idx, lm_gguf_value *v, const char *key, int depth, int anchor)
{
    idx = lua_absindex(L, idx);
    memset(v, 0, sizeof *v);
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            v->type = strcmp(key, "general.alignment") ? LM_GGUF_I64 : LM_GGUF_U32;
            v->i = lua_tointeger(L, idx);
        } else {
            v->type = LM_GGUF_F64;
            v->f = lua_tonumber(L, idx);
        }
        return;
    case LUA_TBOOLEAN: v->type = LM_GGUF_BOOL; v->b = lua_toboolean(L, idx); return;
    case LUA_TSTRING: {
        size_t n;
        v->type = LM_GGUF_STRING;
        v->str.s = (char *)lua_tolstring(L, idx, &n);
        v->str.len = n;
        return;
    }
    case LUA_TTABLE: {
        if (depth >= LM_GGUF_MAX_DEPTH) luaL_error(L, "lm.save: metadata '%s' nested too deep", key);
        lua_Integer n = luaL_len(L, idx);
        v->type = LM_GGUF_ARRAY;
        v->arr.n = (uint64_t)n;
        v->arr.items = lua_newuserdatauv(L, sizeof *v->arr.items * (size_t)(n + 1), 0);
        lua_rawseti(L, anchor, (lua_Integer)lua_rawlen(L, anchor) + 1);   /* alive until save returns */
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, i);
            to_gguf_value(L, -1, &v->arr.items[i - 1], key, depth + 1, anchor);
            lua_pop(L, 1);   /* strings stay alive in the table */
            lm_gguf_value *it = &v->arr.items[i - 1];
            if (i == 1) v->arr.elem = it->type;
            else if (it->type != v->arr.elem) {
                /* integers and floats mixed: all floats */
                if ((it->type == LM_GGUF_F64 && v->arr.elem == LM_GGUF_I64) ||
                    (it->type == LM_GGUF_I64 && v->arr.elem == LM_GGUF_F64)) v->arr.elem = LM_GGUF_F64;
                else luaL_error(L, "lm.save: metadata '%s': an array mixes %s and %s values", key,
                                lm_gguf_type_name(v->arr.elem), lm_gguf_type_name(it->type));
            }
        }
        for (uint64_t i = 0; v->arr.elem == LM_GGUF_F64 && i < v->arr.n; i++)
            if (v->arr.items[i].type == LM_GGUF_I64) {
                v->arr.items[i].f = (double)v->arr.items[i].i;
                v->arr.items[i].type = LM_GGUF_F64;
            }
        if (n == 0) v->arr.elem = LM_GGUF_I32;
        return;
    }
    default:
        luaL_error(L, "lm.save: metadata '%s' is a %s; GGUF metadata holds numbers, booleans, strings "
                   "and arrays of them", key, luaL_typename(L, idx));
    }
}

/* Moves the set's arrays into a new table name -> tensor on the stack. */
static void push_set(lua_State *L, lm_tensor_set *s)
{
    lua_createtable(L, 0, s->count);
    for (int i = 0; i < s->count; i++) {
        lm_array *a = s->arrays[i];
        s->arrays[i] = NULL;
        lm_lua_push_array(L, a);
        lua_setfield(L, -2, s->names[i]);
    }
}

/* ---- load / save ---- */

/* opts.device ("cpu", "vulkan", "vulkan:0"; default: the default device) */
static lm_device *opt_device(lua_State *L, int opts)
{
    const char *spec = lm_lua_opt_str(L, opts, "lm.load", "device", NULL);
    if (!spec) return lm_device_default();
    lm_device *d = lm_device_find(spec);
    if (!d) luaL_error(L, "load: option 'device': %s", lm_error_message());
    return d;
}

static int l_load(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    lm_device *dev = opt_device(L, opts_arg(L, 2, "lm.load", LOAD_OPTS));
    lm_tensor_set s;
    if (lm_load_file_to(path, dev, &s) != LM_OK) return lm_lua_error(L);
    lua_settop(L, 1);
    if ((s.format == LM_FORMAT_NPY || s.format == LM_FORMAT_PNG) && s.count == 1) {
        lm_array *a = s.arrays[0];
        s.arrays[0] = NULL;
        lm_lua_push_array(L, a);
    } else {
        push_set(L, &s);
    }
    if (s.format == LM_FORMAT_GGUF) push_gguf_meta(L, path);
    else push_meta(L, &s);
    lm_tensor_set_free(&s);
    return 2;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names (sorted, for reproducible files) and tensors of the table at idx;
 * the arrays list sits in a userdata on the stack so an error frees it. */
static int table_tensors(lua_State *L, int idx, const char ***names, lm_array ***arrays)
{
    int n = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "lm.save: tensor names must be strings");
        n++;
    }
    *names = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n + 1), 0);
    *arrays = lua_newuserdatauv(L, sizeof(lm_array *) * (size_t)(n + 1), 0);
    int k = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) (*names)[k++] = lua_tostring(L, -2);
    qsort(*names, (size_t)n, sizeof **names, cmp_str);
    /* each entry leaves its value (and a converted copy) on the stack */
    luaL_checkstack(L, 2 * n + LUA_MINSTACK, "lm.save: too many tensors in one table");
    for (int i = 0; i < n; i++) {
        int ty = lua_getfield(L, idx, (*names)[i]);
        if (ty != LUA_TNUMBER && ty != LUA_TBOOLEAN && ty != LUA_TTABLE &&
            !luaL_testudata(L, -1, LM_LUA_TENSOR))
            luaL_error(L, "lm.save: the value of '%s' is a %s; lm.save writes tensors (or numbers, "
                       "booleans and nested tables of them); metadata strings go in {metadata = "
                       "{key = \"text\"}}", (*names)[i], luaL_typename(L, -1));
        (*arrays)[i] = arg_array(L, -1);   /* converted values stay on the stack */
    }
    return n;
}

static lm_file_format save_format(lua_State *L, const char *path, int opts)
{
    const char *f = lm_lua_opt_str(L, opts, "lm.save", "format", NULL);
    const char *dot = strrchr(path, '.');
    const char *ext = f ? f : dot ? dot + 1 : "";
    if (!strcmp(ext, "safetensors") || !strcmp(ext, "st")) return LM_FORMAT_SAFETENSORS;
    if (!strcmp(ext, "npy")) return LM_FORMAT_NPY;
    if (!strcmp(ext, "npz")) return LM_FORMAT_NPZ;
    if (!strcmp(ext, "png")) return LM_FORMAT_PNG;
    if (!strcmp(ext, "gguf")) return LM_FORMAT_GGUF;
    luaL_error(L, "lm.save %s: unknown format (use .safetensors, .npy, .npz, .gguf or {format=...})", path);
    return LM_FORMAT_UNKNOWN;
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const lm_kv *)a)->key, ((const lm_kv *)b)->key);
}

static void read_png_opts(lua_State *L, int opts, lm_png_opts *o, const char *fname);

static int l_save(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    lm_file_format fmt = save_format(L, path, lua_istable(L, 3) ? 3 : 0);
    const char *const *known = fmt == LM_FORMAT_NPY   ? SAVE_NPY_OPTS
                               : fmt == LM_FORMAT_NPZ ? SAVE_NPZ_OPTS
                               : fmt == LM_FORMAT_PNG ? SAVE_PNG_OPTS
                                                      : SAVE_ST_OPTS;
    /* an option of another format (bits for a .npy) is unknown here */
    int opts = opts_arg(L, 3, "lm.save", known);
    if (fmt == LM_FORMAT_NPY || fmt == LM_FORMAT_PNG) {
        if (lua_istable(L, 2) && !luaL_testudata(L, 2, LM_LUA_TENSOR)) {
            lua_pushnil(L);
            if (lua_next(L, 2) && lua_type(L, -2) == LUA_TSTRING)
                return luaL_error(L, "lm.save %s: a .%s file holds one tensor; use .npz or "
                                  ".safetensors for a table of them", path,
                                  fmt == LM_FORMAT_NPY ? "npy" : "png");
            lua_settop(L, 3);
        }
        lm_png_opts o;
        if (fmt == LM_FORMAT_PNG) read_png_opts(L, opts, &o, "lm.save");
        lm_array *a = arg_array(L, 2);
        lm_status st = fmt == LM_FORMAT_NPY ? lm_save_npy(path, a) : lm_png_write(path, a, &o);
        return st == LM_OK ? 0 : lm_lua_error(L);
    }
    const char **names;
    lm_array **arrays;
    int n;
    if (lua_istable(L, 2) && !luaL_testudata(L, 2, LM_LUA_TENSOR)) {
        n = table_tensors(L, 2, &names, &arrays);
    } else {
        /* one tensor: stored under the name "tensor" */
        names = lua_newuserdatauv(L, sizeof(char *), 0);
        arrays = lua_newuserdatauv(L, sizeof(lm_array *), 0);
        names[0] = "tensor";
        arrays[0] = arg_array(L, 2);
        n = 1;
    }
    lm_status st;
    if (fmt == LM_FORMAT_GGUF) {
        int nkv = 0;
        lm_gguf_kv *kv = NULL;
        if (opt_field(L, opts, "metadata")) {
            int m = lua_gettop(L);
            luaL_checktype(L, m, LUA_TTABLE);
            for (lua_pushnil(L); lua_next(L, m); lua_pop(L, 1)) nkv++;
            kv = lua_newuserdatauv(L, sizeof(lm_gguf_kv) * (size_t)(nkv + 1), 0);
            lua_newtable(L);   /* holds the arrays' items */
            int anchor = lua_gettop(L), k = 0;
            for (lua_pushnil(L); lua_next(L, m); lua_pop(L, 1)) {
                if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "lm.save: metadata keys must be strings");
                kv[k].key = (char *)lua_tostring(L, -2);
                to_gguf_value(L, -1, &kv[k].v, kv[k].key, 0, anchor);
                k++;
            }
        }
        st = lm_save_gguf(path, n, names, arrays, nkv, kv);
    } else if (fmt == LM_FORMAT_NPZ) {
        st = lm_save_npz(path, n, names, arrays, lm_lua_opt_bool(L, opts, "lm.save", "compress", false));
    } else {
        int nmeta = 0;
        lm_kv *meta = NULL;
        if (opt_field(L, opts, "metadata")) {
            int m = lua_gettop(L);
            luaL_checktype(L, m, LUA_TTABLE);
            for (lua_pushnil(L); lua_next(L, m); lua_pop(L, 1)) nmeta++;
            meta = lua_newuserdatauv(L, sizeof(lm_kv) * (size_t)(nmeta + 1), 0);
            lua_newtable(L);   /* keeps numbers turned into strings alive */
            int keep = lua_gettop(L), k = 0;
            for (lua_pushnil(L); lua_next(L, m); lua_pop(L, 1)) {
                if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1))
                    luaL_error(L, "lm.save: metadata must map strings to strings");
                meta[k].key = (char *)lua_tostring(L, -2);
                lua_pushvalue(L, -1);   /* convert a copy, never the key slot */
                meta[k].value = (char *)lua_tostring(L, -1);
                lua_rawseti(L, keep, ++k);
            }
        }
        st = lm_save_safetensors(path, n, names, arrays, nmeta, meta);
    }
    return st == LM_OK ? 0 : lm_lua_error(L);
}

/* ---- comparison ---- */

static void read_compare_opts(lua_State *L, int opts, lm_compare_opts *o, const char *fname)
{
    lm_compare_opts_init(o);
    o->rtol = lm_lua_opt_tol(L, opts, fname, "rtol");
    o->atol = lm_lua_opt_tol(L, opts, fname, "atol");
    o->equal_nan = lm_lua_opt_bool(L, opts, fname, "equal_nan", true);
    o->check_dtype = lm_lua_opt_bool(L, opts, fname, "check_dtype", false);
    o->peak = lm_lua_opt_num(L, opts, fname, "peak", NAN);
}

static void push_report(lua_State *L, const lm_compare_report *r)
{
    lm_compare_report *u = lua_newuserdatauv(L, sizeof *u, 0);
    *u = *r;
    luaL_setmetatable(L, REPORT_MT);
}

static int report_index(lua_State *L)
{
    const lm_compare_report *r = luaL_checkudata(L, 1, REPORT_MT);
    const char *k = luaL_checkstring(L, 2);
    const struct { const char *name; double v; } nums[] = {
        {"rtol", r->rtol}, {"atol", r->atol}, {"max_abs", r->max_abs}, {"max_rel", r->max_rel},
        {"mae", r->mae}, {"rmse", r->rmse}, {"nmse", r->nmse}, {"cosine", r->cosine},
        {"psnr", r->psnr}, {"frac_bad", r->frac_bad},
    };
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++)
        if (!strcmp(k, nums[i].name)) { lua_pushnumber(L, nums[i].v); return 1; }
    if (!strcmp(k, "ok")) lua_pushboolean(L, r->ok);
    else if (!strcmp(k, "shape_equal")) lua_pushboolean(L, r->shape_equal);
    else if (!strcmp(k, "dtype_equal")) lua_pushboolean(L, r->dtype_equal);
    else if (!strcmp(k, "dtype_a")) lua_pushstring(L, lm_dtype_name(r->dtype_a));
    else if (!strcmp(k, "dtype_b")) lua_pushstring(L, lm_dtype_name(r->dtype_b));
    else if (!strcmp(k, "shape_a")) push_shape(L, r->ndim_a, r->shape_a);
    else if (!strcmp(k, "shape_b")) push_shape(L, r->ndim_b, r->shape_b);
    else if (!strcmp(k, "count")) lua_pushinteger(L, r->count);
    else if (!strcmp(k, "n_bad") || !strcmp(k, "outside")) lua_pushinteger(L, r->n_bad);
    else if (!strcmp(k, "nan_mismatch")) lua_pushinteger(L, r->nan_mismatch);
    else if (!strcmp(k, "inf_mismatch")) lua_pushinteger(L, r->inf_mismatch);
    else if (!r->has_worst && !strncmp(k, "worst", 5)) lua_pushnil(L);
    else if (!strcmp(k, "worst_a")) lua_pushnumber(L, r->worst_a);
    else if (!strcmp(k, "worst_b")) lua_pushnumber(L, r->worst_b);
    else if (!strcmp(k, "worst_index")) {
        int64_t one[LM_MAX_DIMS];
        for (int d = 0; d < r->ndim_a; d++) one[d] = r->worst_index[d] + 1;
        push_shape(L, r->ndim_a, one);
    } else lua_pushnil(L);
    return 1;
}

static int report_tostring(lua_State *L)
{
    const lm_compare_report *r = luaL_checkudata(L, 1, REPORT_MT);
    char buf[2048];
    lm_compare_format(r, 1, buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

static int l_compare(lua_State *L)
{
    luaL_checkany(L, 2);
    int opts = opts_arg(L, 3, "lm.compare", CMP_OPTS);
    lm_compare_opts o;
    read_compare_opts(L, opts, &o, "lm.compare");
    lm_array *a = arg_array(L, 1), *b = arg_array(L, 2);
    lm_compare_report r;
    if (lm_compare(a, b, &o, &r) != LM_OK) return lm_lua_error(L);
    push_report(L, &r);
    return 1;
}

/* numpy.allclose(a, b, rtol, atol, equal_nan): positionally or by name */
static int l_allclose(lua_State *L)
{
    static const char *const NAMES[] = {"rtol", "atol", "equal_nan", NULL};
    luaL_checkany(L, 2);
    lm_nn_args args;
    lm_nn_args_read(L, &args, "lm.allclose", NAMES, 3);
    double rtol = lm_nn_num(&args, 0, 1e-5), atol = lm_nn_num(&args, 1, 1e-8);
    bool equal_nan = lm_nn_bool(&args, 2, false);
    lm_array *a = arg_array(L, 1), *b = arg_array(L, 2);
    bool ok;
    if (lm_allclose(a, b, rtol, atol, equal_nan, &ok) != LM_OK) return lm_lua_error(L);
    lua_pushboolean(L, ok);
    return 1;
}

static void push_names(lua_State *L, char **names, int n)
{
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static int set_tostring(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    return 1;
}

/* {ok=, tensors={name=report}, names={...}, missing={...}, extra={...}} */
static void push_compare_set(lua_State *L, const lm_compare_set *cs)
{
    char *text = lm_compare_set_format(cs, 1);
    lua_createtable(L, 0, 5);
    lua_pushboolean(L, cs->ok);
    lua_setfield(L, -2, "ok");
    if (cs->reason[0]) {
        lua_pushfstring(L, "nothing compared: %s", cs->reason);
        lua_setfield(L, -2, "reason");
    }
    lua_createtable(L, 0, cs->count);
    lua_createtable(L, cs->count, 0);
    for (int i = 0; i < cs->count; i++) {
        push_report(L, &cs->entries[i].r);
        lua_setfield(L, -3, cs->entries[i].name);
        lua_pushstring(L, cs->entries[i].name);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -3, "names");
    lua_setfield(L, -2, "tensors");
    push_names(L, cs->missing, cs->nmissing);
    lua_setfield(L, -2, "missing");
    push_names(L, cs->extra, cs->nextra);
    lua_setfield(L, -2, "extra");
    lua_createtable(L, 0, 1);
    lua_pushstring(L, text ? text : "compare_file report");
    free(text);
    lua_pushcclosure(L, set_tostring, 1);
    lua_setfield(L, -2, "__tostring");
    lua_setmetatable(L, -2);
}

static int l_compare_file(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int opts = opts_arg(L, 3, "lm.compare_file", CMP_FILE_OPTS);
    lm_compare_opts o;
    read_compare_opts(L, opts, &o, "lm.compare_file");
    const char *only = lm_lua_opt_str(L, opts, "lm.compare_file", "only", NULL);
    bool allow_missing = lm_lua_opt_bool(L, opts, "lm.compare_file", "allow_missing", false);
    lm_tensor_set got = {0};
    got.count = table_tensors(L, 2, (const char ***)&got.names, &got.arrays);
    lm_compare_set cs;
    if (lm_compare_file(path, &got, &o, only, allow_missing, &cs) != LM_OK) return lm_lua_error(L);
    push_compare_set(L, &cs);
    lm_compare_set_free(&cs);
    return 1;
}

/* ---- images ---- */

static void read_png_opts(lua_State *L, int opts, lm_png_opts *o, const char *fname)
{
    lm_png_opts_init(o);
    o->layout = opt_layout(L, opts, fname);
    o->bits = (int)lm_lua_opt_num(L, opts, fname, "bits", 8);
    o->level = (int)lm_lua_opt_num(L, opts, fname, "level", -1);
    if (opt_field(L, opts, "range")) {
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        if (!lua_isnumber(L, -2) || !lua_isnumber(L, -1)) luaL_error(L, "range must be {lo, hi}");
        o->lo = lua_tonumber(L, -2);
        o->hi = lua_tonumber(L, -1);
        o->has_range = true;
        lua_pop(L, 3);
    }
    const char *dt = lm_lua_opt_str(L, opts, fname, "dtype", NULL);
    if (dt) {
        if (!lm_dtype_from_name(dt, &o->dtype)) luaL_error(L, "unknown dtype '%s'", dt);
        o->has_dtype = true;
    }
    if (opt_field(L, opts, "text")) {
        /* the entries live in a userdata left on the stack */
        int t = lua_gettop(L);
        luaL_checktype(L, t, LUA_TTABLE);
        for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) o->ntext++;
        lm_kv *kv = lua_newuserdatauv(L, sizeof(lm_kv) * (size_t)(o->ntext + 1), 0);
        int k = 0;
        for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "write_png: text must map strings to strings");
            kv[k].key = (char *)lua_tostring(L, -2);
            kv[k++].value = (char *)lua_tostring(L, -1);
        }
        /* Lua's table order changes from run to run: sorted keys keep the
         * file's bytes reproducible */
        qsort(kv, (size_t)o->ntext, sizeof *kv, cmp_kv);
        o->text = kv;
    }
}

static int l_write_png(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    luaL_checkany(L, 2);
    int opts = opts_arg(L, 3, "lm.image.write_png", WRITE_PNG_OPTS);
    lm_png_opts o;
    read_png_opts(L, opts, &o, "lm.image.write_png");
    lm_array *a = arg_array(L, 2);
    if (lm_png_write(path, a, &o) != LM_OK) return lm_lua_error(L);
    lua_pushinteger(L, a->ndim == 4 ? a->shape[0] : 1);
    return 1;
}

static int l_read_png(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int opts = opts_arg(L, 2, "lm.image.read_png", READ_PNG_OPTS);
    lm_png_opts o;
    read_png_opts(L, opts, &o, "lm.image.read_png");
    lm_tensor_set text = {0};
    /* an image read is a loaded tensor: it belongs to the default device */
    lm_array *h = lm_png_read(path, &o, &text), *a = lm_array_to(h, NULL);
    lm_array_release(h);
    if (!a) {
        lm_tensor_set_free(&text);
        return lm_lua_error(L);
    }
    lm_lua_push_array(L, a);
    push_meta(L, &text);
    lm_tensor_set_free(&text);
    return 2;
}

static int l_rgb(lua_State *L)
{
    return lm_lua_push_array(L, lm_image_rgb(lm_lua_check_array(L, 1)));
}

static int l_grid(lua_State *L)
{
    int opts = opts_arg(L, 2, "lm.image.grid", GRID_OPTS);
    int nrow = (int)lm_lua_opt_num(L, opts, "lm.image.grid", "nrow", 8), pad = (int)lm_lua_opt_num(L, opts, "lm.image.grid", "pad", 2);
    double pv = lm_lua_opt_num(L, opts, "lm.image.grid", "pad_value", 0);
    lm_layout layout = opt_layout(L, opts, "lm.image.grid");
    lm_array *g;
    if (luaL_testudata(L, 1, LM_LUA_TENSOR)) {
        g = lm_image_grid_batch(lm_lua_check_array(L, 1), nrow, pad, pv, layout);
    } else {
        luaL_checktype(L, 1, LUA_TTABLE);
        int n = (int)luaL_len(L, 1);
        if (n < 1) return luaL_error(L, "grid: no images");
        lm_array **imgs = lua_newuserdatauv(L, sizeof(lm_array *) * (size_t)n, 0);
        luaL_checkstack(L, 2 * n + LUA_MINSTACK, "lm.image.grid: too many images");
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, 1, i + 1);
            imgs[i] = arg_array(L, -1);
        }
        g = lm_image_grid(n, imgs, nrow, pad, pv, layout);
    }
    return lm_lua_push_array(L, g);
}

static int l_diff(lua_State *L)
{
    luaL_checkany(L, 2);
    const char *path = luaL_checkstring(L, 3);
    int opts = opts_arg(L, 4, "lm.image.diff", DIFF_OPTS);
    double scale = lm_lua_opt_num(L, opts, "lm.image.diff", "scale", 0);
    lm_layout layout = opt_layout(L, opts, "lm.image.diff");
    lm_array *a = arg_array(L, 1), *b = arg_array(L, 2);
    lm_diff_stats st;
    if (lm_image_diff(a, b, path, scale, layout, &st) != LM_OK) return lm_lua_error(L);
    lua_createtable(L, 0, 3);
    lua_pushnumber(L, st.max);
    lua_setfield(L, -2, "max");
    lua_pushnumber(L, st.mean);
    lua_setfield(L, -2, "mean");
    lua_pushinteger(L, st.nan_pixels);
    lua_setfield(L, -2, "nan_pixels");
    return 1;
}

static const lm_lua_func io_funcs[] = {
    {"load", l_load,
     "lm.load(path, [{device=}]) -> tensors, metadata\n"
     "Loads a safetensors, .npz, .npy, PNG or GGUF file, chosen by content.  safetensors,\n"
     "GGUF and npz give a table name -> tensor (safetensors and GGUF tensors map the file:\n"
     "no copy until used; GGUF's quantized tensors keep their dtype, q4_k etc.); .npy and\n"
     "PNG give the tensor itself.  metadata: the safetensors __metadata__ or PNG text as a\n"
     "table of strings; GGUF's typed values (numbers, booleans, strings, arrays as tables).  The tensors belong to the default\n"
     "device (each is uploaded once, on first use, and stays there); device=\"cpu\" keeps\n"
     "them in host memory, device=\"vulkan\" or \"vulkan:N\" names a device."},
    {"save", l_save,
     "lm.save(path, tensors, [{format=, metadata=, compress=, bits=, ...}])\n"
     "Writes a table name -> tensor (or one tensor) as .safetensors (with metadata, a\n"
     "table of strings), .gguf (metadata: numbers, booleans, strings, arrays; integers\n"
     "are written as i64, general.alignment as u32; quantized tensors as they are),\n"
     ".npz (compress=true deflates), .npy (one tensor) or PNG (one\n"
     "image; the options of lm.image.write_png: layout=, range=, bits=8|16, level=,\n"
     "text=), by extension or format=.  An option the format does not have is an error.\n"
     "The file appears complete or not at all."},
    {"compare", l_compare,
     "lm.compare(a, b, {rtol=, atol=, equal_nan=true, check_dtype=false, peak=}) -> report\n"
     "Holds a against the reference b: report.ok, shape_equal, dtype_equal, max_abs,\n"
     "max_rel, mae, rmse, nmse, cosine, psnr, count, n_bad (outside atol + rtol*|b|),\n"
     "frac_bad, nan_mismatch, inf_mismatch, worst_index (1-based), worst_a, worst_b.\n"
     "Default tolerances are torch.testing's for the less precise dtype.\n"
     "print(report) shows a compact table."},
    {"allclose", l_allclose,
     "lm.allclose(a, b, [rtol=1e-5, atol=1e-8, equal_nan=false] | [{rtol=, atol=, equal_nan=}])\n"
     "  -> boolean\n"
     "numpy.allclose: |a - b| <= atol + rtol*|b| everywhere, shapes broadcast.  rtol, atol\n"
     "and equal_nan come positionally or by name: lm.allclose(a, b, {atol = 1e-6})."},
    {"compare_file", l_compare_file,
     "lm.compare_file(path, {name = tensor, ...}, {rtol=, atol=, only=, allow_missing=})\n"
     "  -> report\n"
     "Compares tensors by name with those of a reference file (safetensors, npz, npy).\n"
     "report.ok, report.tensors[name] (as lm.compare), report.names, report.missing\n"
     "(only in the file), report.extra (not in the file); nothing compared gives\n"
     "ok = false and report.reason (\"nothing compared: ...\" why).  only: a glob or substring\n"
     "selecting names.  print(report) shows one row per tensor."},
    {NULL, NULL, NULL},
};

static const lm_lua_func image_funcs[] = {
    {"write_png", l_write_png,
     "lm.image.write_png(path, t, {layout=\"CHW\"|\"HWC\", range={0,1}, bits=8|16,\n"
     "  level=0-9, text={key=value}}) -> files written\n"
     "[H,W], [C,H,W] or [H,W,C] with 1-4 channels.  Floats map range to 0..max,\n"
     "clamped and rounded (NaN -> 0); integers are pixel values.  A batch [N,C,H,W]\n"
     "writes N files: %d / %03d in path is the image's index in the batch, counted from 0 (as the "
     "core's C API counts; lumen batch numbers its jobs from 1), else _0000 before the extension."},
    {"read_png", l_read_png,
     "lm.image.read_png(path, {layout=\"CHW\"|\"HWC\", dtype=}) -> t, text\n"
     "Any PNG (palette, 1-16 bit gray, alpha) as u8 (8-bit files) or i32 (16-bit)\n"
     "pixel values, or a float dtype scaled to 0..1.  text: the text chunks."},
    {"rgb", l_rgb,
     "lm.image.rgb(t) -> t\n"
     "An image [C,H,W] of 1-4 channels as [3,H,W]: RGB kept, alpha dropped, gray repeated,\n"
     "as lumen generate reads --init: lm.image.rgb((lm.image.read_png(path, {dtype=\"f32\"})))\n"
     "(read_png's text dropped by the parentheses)."},
    {"grid", l_grid,
     "lm.image.grid(images_or_batch, {nrow=8, pad=2, pad_value=0, layout=}) -> t\n"
     "A contact sheet of a list of same-shaped images or a batch [N,C,H,W]\n"
     "(torchvision.utils.make_grid)."},
    {"diff", l_diff,
     "lm.image.diff(a, b, path, {scale=, layout=}) -> {max=, mean=, nan_pixels=}\n"
     "Writes a heat-map PNG of where two images or feature maps differ (mean |a-b|\n"
     "over channels; black = equal, white = scale or the largest error, magenta =\n"
     "NaN on one side)."},
    {NULL, NULL, NULL},
};

void lm_lua_open_io(lua_State *L)
{
    if (luaL_newmetatable(L, REPORT_MT)) {
        lua_pushcfunction(L, report_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, report_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    lm_lua_register(L, "lm.", io_funcs);
    lua_newtable(L);
    lm_lua_register(L, "lm.image.", image_funcs);
    lua_setfield(L, -2, "image");
}
