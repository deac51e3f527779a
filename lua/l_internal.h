/* l_internal.h - what the Lua API files (lua/l_*.c) share among themselves;
 * the public face for other rooms is lumen_lua.h. */
#ifndef LM_L_INTERNAL_H
#define LM_L_INTERNAL_H

#include <stdbool.h>
#include "lumen_lua.h"

/* The tensor userdata: one core reference, NULL once t:free() ran. */
typedef struct lm_lua_tensor {
    lm_array *a;
} lm_lua_tensor;

/* ---- l_array.c (and l_tensor.c's metatable) ---- */
lm_lua_tensor *lm_lua_testtensor(lua_State *L, int idx);   /* NULL if not a tensor */
/* lm_lua_to_array with a target device for new arrays (NULL = default). */
lm_array *lm_lua_to_array_on(lua_State *L, int idx, lm_dtype dt, lm_device *dev);
void lm_lua_open_tensor(lua_State *L);        /* metatable; module table on top */

/* ---- l_args.c: argument helpers ---- */
/* 1-based Lua axis (negative from the end) to a 0-based axis for ndim;
 * raises a Lua error naming fname when out of range. */
int lm_lua_axis(lua_State *L, int arg, int ndim, const char *fname);
int lm_lua_axis_value(lua_State *L, lua_Integer ax, int ndim, const char *fname);
/* Pushes a shape as a table {2, 3} that prints as {2, 3} and compares by
 * value (== another shape or a table of the same integers). */
void lm_lua_push_shape(lua_State *L, int ndim, const int64_t *shape);

/* A shape from a table {2, 3} (or varargs of integers starting at arg).
 * Returns ndim; *next receives the first argument after the shape. */
int lm_lua_shape(lua_State *L, int arg, int64_t *shape, int *next);
/* Options: a table {dtype=, device=} or a dtype string at arg. */
typedef struct lm_lua_opts {
    lm_dtype dtype;        /* LM_DTYPE_COUNT when not given */
    lm_device *device;     /* NULL when not given */
} lm_lua_opts;
/* fname names the function in errors; known lists the accepted option
 * names (NULL: dtype and device). */
void lm_lua_opts_read(lua_State *L, int arg, lm_lua_opts *o, const char *fname,
                      const char *const *known);
/* The options rule: an options table may hold only the names in known
 * (NULL-ended; "causal|is_causal" accepts either spelling).  Raises
 * "fname: unknown option 'k' (known: a, b)" otherwise, and when the value at
 * arg is neither nil nor a table.  Returns arg's absolute index, 0 for nil. */
int lm_lua_check_opts(lua_State *L, int arg, const char *fname, const char *const *known);
void lm_lua_opts_unknown(lua_State *L, const char *fname, const char *k, const char *const *known);
bool lm_lua_opt_name_matches(const char *spec, const char *k);
/* Options written inside the shape or data table at tbl, as torch takes
 * dtype= beside the size: lm.zeros{2, 3, dtype = "f16"}.  When that table
 * has string keys they are copied into a new table put at stack index opts
 * (which must be empty: options in both places are an error) and opts is
 * returned; a key that is neither a string nor an entry 1..#t is an error.
 * Returns opts unchanged when there are none. */
int lm_lua_inline_opts(lua_State *L, int tbl, int opts, const char *fname);
/* Raises "fname: too many arguments" when more than max values were passed
 * (for the variadic functions, which the registration cannot check). */
void lm_lua_check_nargs(lua_State *L, int max, const char *fname);
lm_dtype lm_lua_check_dtype(lua_State *L, int arg);
lm_device *lm_lua_check_device(lua_State *L, int arg);
/* Option field of the table at arg (dflt when arg is no table or the field
 * is nil); a value of the wrong type raises an error naming fname. */
bool lm_lua_opt_bool(lua_State *L, int arg, const char *fname, const char *field, bool dflt);
lua_Integer lm_lua_opt_int(lua_State *L, int arg, const char *fname, const char *field,
                           lua_Integer dflt);
lua_Number lm_lua_opt_num(lua_State *L, int arg, const char *fname, const char *field,
                          lua_Number dflt);
/* A tolerance (rtol, atol): NAN when absent (the dtype's default); NaN or a
 * negative number given raises an error naming fname and field. */
lua_Number lm_lua_opt_tol(lua_State *L, int arg, const char *fname, const char *field);
/* (arg 0 counts as no table.)  The string stays valid while the table holds it. */
const char *lm_lua_opt_str(lua_State *L, int arg, const char *fname, const char *field,
                           const char *dflt);
/* ---- l_nnargs.c: PyTorch-style arguments of the NN functions ---- */
#define LM_NN_MAX_ARGS 12
/* names: the parameters after the input in PyTorch's order, NULL-ended;
 * "causal|is_causal" accepts either spelling.  at[i] is the stack index
 * of parameter i's value, 0 when not given (nil counts as not given). */
typedef struct lm_nn_args {
    lua_State *L;
    const char *fname;
    const char *const *names;
    int n;
    int at[LM_NN_MAX_ARGS];
} lm_nn_args;
/* Reads positional values from arg `first` on and a trailing options
 * table; raises on unknown names, names given twice, too many values. */
void lm_nn_args_read(lua_State *L, lm_nn_args *a, const char *fname, const char *const *names,
                     int first);
bool lm_nn_has(const lm_nn_args *a, int i);
const char *lm_nn_name(const lm_nn_args *a, int i);
/* Readers return dflt when the value is absent and raise on a wrong type. */
lm_array *lm_nn_tensor(const lm_nn_args *a, int i, bool required);   /* borrowed */
lua_Integer lm_nn_int(const lm_nn_args *a, int i, lua_Integer dflt);
double lm_nn_num(const lm_nn_args *a, int i, double dflt);
bool lm_nn_bool(const lm_nn_args *a, int i, bool dflt);
const char *lm_nn_string(const lm_nn_args *a, int i, const char *dflt);
/* An integer or a table of 1..max integers into out; returns the count
 * (0 when absent). */
int lm_nn_ints(const lm_nn_args *a, int i, int64_t *out, int max);
/* An integer or {h, w}: out = {v, v} or {h, w}; {dflt, dflt} when absent. */
void lm_nn_pair(const lm_nn_args *a, int i, int64_t dflt, int64_t out[2]);
/* A 1-based axis (negative from the end) as the core's 0-based one. */
int lm_nn_axis(const lm_nn_args *a, int i, int ndim, int dflt);
/* ---- l_indices.c: index tensors ---- */
/* Lua indices at arg (a tensor or table; 1-based, negative from the end)
 * as the core's 0-based i64 tensor (new reference, lazy).  The values are
 * checked at once (a lazy tensor is evaluated first; only a compile
 * placeholder stays unchecked until the compiled function runs): 0, and
 * with n > 0 values outside -n..n, raise an error naming fname and what.
 * wrap: negatives become i + n here (for ops that do not count from the
 * end themselves). */
lm_array *lm_lua_index_arg(lua_State *L, int arg, const char *fname, const char *what, int64_t n,
                           bool wrap);
/* The same for an index along axis (0-based; named 1-based) of size n. */
lm_array *lm_lua_index_tensor(lua_State *L, int idx, const char *fname, int axis, int64_t n);
/* The core's 0-based index tensor turned 1-based (takes over idx). */
lm_array *lm_lua_one_based(lm_array *idx);

/* ---- l_torch.c: PyTorch's names ---- */
/* Adds the aliases (t:view, t:to(dtype), lm.cat ...); module table on top,
 * after the op methods (its t:to replaces the device-only one). */
void lm_lua_open_torch(lua_State *L);
/* Pushes the value t.name gives for a name that is no method or property:
 * a function raising "tensor has no method 'name'" (with the Lumen
 * spelling for torch names), so t:name() fails with that message. */
void lm_lua_push_missing_method(lua_State *L, int name);

/* ---- l_compile.c: lm.compile, lm.compile_mode, lm.export_dot ---- */
void lm_lua_open_compile(lua_State *L);   /* module table on top */
/* l_diff.c: fn (at stack index fn) run on the n arguments from first, fused
 * and unfused; a divergence is printed to stderr, or raised when raise. */
void lm_lua_compile_verify(lua_State *L, int fn, int first, int n, bool raise, const char *name);
/* ---- l_grad.c: lm.grad, lm.value_and_grad, lm.vjp, lm.stop_gradient, lm.optim ---- */
void lm_lua_open_grad(lua_State *L);      /* module table on top */
void lm_lua_open_batch(lua_State *L);     /* module table on top: lm.batch */
/* The registry field holding host work that lm.batch hands to the next
 * generation (lm._batch.busy): pipe:generate runs it once, after its first
 * step is queued, so the host works while the device computes */
#define LM_LUA_BUSY_KEY "lumen.busy"
void lm_lua_open_xyz(lua_State *L);       /* l_xyz.c: lm.image.xyz_*; after lm_lua_open_io */

/* ---- l_models.c: lm.models (TF.js layers models) ---- */
void lm_lua_open_models(lua_State *L);    /* module table on top */
void lm_lua_open_profile(lua_State *L);   /* l_profile.c: lm.profile; module table on top */
/* ---- l_print.c ---- */
/* Pushes the full text of a (evaluates it; reads back only printed edges). */
void lm_lua_push_format(lua_State *L, lm_array *a);
/* Pushes "<tensor f32 2x3 cpu>" without evaluating (" lazy" when pending). */
void lm_lua_push_brief(lua_State *L, const lm_array *a);
/* Formatting knobs (lm.set_printoptions). */
typedef struct lm_print_opts {
    int precision;     /* most fraction digits, default 4 */
    int threshold;     /* summarise past this many elements, default 1000 */
    int edgeitems;     /* items kept at each end when summarising, default 3 */
    int linewidth;     /* default 80 */
} lm_print_opts;
extern lm_print_opts lm_lua_print_opts;

/* ---- l_index.c ---- */
/* t[key] for a number or a table key: pushes the view. */
int lm_lua_index_get(lua_State *L, lm_array *a, int key);
/* t[key] = value */
int lm_lua_index_set(lua_State *L, lm_array *a, int key, int val);
extern const lm_lua_func lm_lua_index_methods[];

/* ---- l_ops.c / l_create.c / l_nn.c / l_doc.c ---- */
extern const lm_lua_func lm_lua_op_methods[];    /* tensor methods and lm.* */
extern const lm_lua_func lm_lua_op_module[];     /* lm.* only */
extern const lm_lua_func lm_lua_create_funcs[];
extern const lm_lua_func lm_lua_nn_funcs[];       /* l_nn.c: lm.* only */
extern const lm_lua_func lm_lua_nn_methods[];     /* l_nn.c: methods and lm.* */
extern const lm_lua_func lm_lua_nnseq_funcs[];    /* l_nnseq.c */
extern const lm_lua_func lm_lua_nnseq_methods[];
void lm_lua_open_doc(lua_State *L);               /* registry of docstrings */
/* lm_lua_register for functions that read their arguments with
 * lm_nn_args_read, which checks the count against their parameter list
 * (the docstring shows the options table, not every positional slot). */
void lm_lua_register_nn(lua_State *L, const char *prefix, const lm_lua_func *funcs);
/* Pushes the function at fn as Lua should see it: wrapped so that a call
 * with more arguments than doc's signature has raises an error naming
 * full ("lm.zeros"); unwrapped when the signature has "..." or no doc. */
void lm_lua_push_checked(lua_State *L, int fn, const char *doc, const char *full);
/* Pushes the docstring of the value at idx (or of a name) or nil. */
void lm_lua_push_doc(lua_State *L, int idx);
/* Pushes the table of methods shared by all tensors (registry field). */
void lm_lua_push_methods(lua_State *L);

/* ---- memory accounting (l_array.c) ---- */
void lm_lua_enter(lua_State *L);   /* the state the out-of-memory hook collects in */
void lm_lua_gc_account(lua_State *L, size_t bytes);
void lm_lua_install_oom_hook(lua_State *L);

#endif
