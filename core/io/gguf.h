/* gguf.h - GGUF files (ggml's format; versions 2 and 3, little endian).
 *
 * A GGUF file is a header of typed key/value metadata and tensor infos,
 * then the tensors' data, each at an offset aligned to general.alignment
 * (32 when absent).  Tensors may be f32/f16/bf16/f64, i8/i16/i32/i64 or one
 * of ggml's block quantizations (Q4_0 ... Q8_K, dtypes of their own: see
 * core/quant.h); ggml lists dimensions innermost first, Lumen's shapes are
 * outermost first, so a ggml [ne0=256, ne1=8] tensor loads as shape {8,256}.
 *
 * The reader treats the file as untrusted: counts, string lengths and
 * array lengths are bounded by what the file could hold, sizes and offsets
 * are computed with checked arithmetic and must lie inside the file, and a
 * bad file is LM_ERR_FORMAT naming the file and the problem.
 *
 * Ownership: lm_gguf_meta_free releases everything an lm_gguf_meta holds. */
#ifndef LM_IO_GGUF_H
#define LM_IO_GGUF_H

#include "io.h"

/* GGUF's value types, numbered as in the file. */
typedef enum lm_gguf_type {
    LM_GGUF_U8 = 0, LM_GGUF_I8, LM_GGUF_U16, LM_GGUF_I16, LM_GGUF_U32, LM_GGUF_I32,
    LM_GGUF_F32, LM_GGUF_BOOL, LM_GGUF_STRING, LM_GGUF_ARRAY, LM_GGUF_U64,
    LM_GGUF_I64, LM_GGUF_F64,
    LM_GGUF_TYPE_COUNT
} lm_gguf_type;

/* One value: unsigned kinds in u, signed in i, f32/f64 in f (an f32 is
 * exact as a double), bool in b; a string is str (len bytes, NUL after;
 * may hold NULs); an array has elem type, n items (nested arrays allowed). */
typedef struct lm_gguf_value {
    lm_gguf_type type;
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        struct { char *s; uint64_t len; } str;
        struct { lm_gguf_type elem; uint64_t n; struct lm_gguf_value *items; } arr;
    };
} lm_gguf_value;

typedef struct lm_gguf_kv {
    char *key;
    lm_gguf_value v;
} lm_gguf_kv;

typedef struct lm_gguf_meta {
    uint32_t version;
    uint64_t alignment;
    int n;
    lm_gguf_kv *kv;
} lm_gguf_meta;

void lm_gguf_meta_free(lm_gguf_meta *m);          /* leaves *m empty */
/* Index of key in m, or -1. */
int lm_gguf_meta_find(const lm_gguf_meta *m, const char *key);
const char *lm_gguf_type_name(lm_gguf_type t);   /* "u8", "string", "array", ... */

/* Bounds the reader applies before allocating (a file may say anything). */
#define LM_GGUF_MAX_TENSORS (1u << 20)
#define LM_GGUF_MAX_KV (1u << 20)
#define LM_GGUF_MAX_DEPTH 8          /* arrays inside arrays */

/* Loads the tensors (wrapping the file's private mapping, as safetensors
 * does) into out, and the metadata into out->meta rendered as text
 * (numbers in decimal, strings as they are, arrays as JSON); meta (may be
 * NULL) receives the typed metadata. */
lm_status lm_load_gguf(const char *path, lm_tensor_set *out, lm_gguf_meta *meta);
/* From memory (tensors copied); what names the source in errors. */
lm_status lm_load_gguf_mem(const void *data, size_t size, const char *what,
                           lm_tensor_set *out, lm_gguf_meta *meta);

/* The typed metadata of a GGUF file alone (tensors not loaded). */
lm_status lm_gguf_read_meta(const char *path, lm_gguf_meta *meta);

/* Writes GGUF v3: the n tensors (names unique; every dtype above; a
 * quantized tensor's blocks as they are) and the metadata kv[0..nkv)
 * (general.alignment, if given, must be a u32 power of two and sets the
 * alignment, else 32).  Atomic (temporary + rename). */
lm_status lm_save_gguf(const char *path, int n, const char *const *names,
                       lm_array *const *arrays, int nkv, const lm_gguf_kv *kv);

#endif
