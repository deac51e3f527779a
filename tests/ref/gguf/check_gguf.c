/* check_gguf.c - reads a GGUF through ggml's own reader (a check that files
 * Lumen writes are what ggml expects), run by hand:
 *   G=/work/ggml-src B=/work/ggml-build
 *   cc -O1 -o /tmp/check_gguf tests/ref/gguf/check_gguf.c -I$G/include -I$G/src \
 *      -L$B/src -lggml-base -lggml -Wl,-rpath,$B/src -lm
 *   /tmp/check_gguf FILE [REFERENCE]
 * Prints the version, alignment, every key with its type and value (arrays:
 * length and first items), and every tensor's name, type, ne and a hash
 * (FNV-1a) of its bytes and of its dequantized f32 values.  With REFERENCE,
 * also compares: the same keys with the same types and values, the same
 * tensors with the same bytes; exits 1 on any difference. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "gguf.h"

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

static void print_scalar(enum gguf_type t, const void *p)
{
    switch (t) {
    case GGUF_TYPE_UINT8: printf("%u", *(const uint8_t *)p); break;
    case GGUF_TYPE_INT8: printf("%d", *(const int8_t *)p); break;
    case GGUF_TYPE_UINT16: printf("%u", *(const uint16_t *)p); break;
    case GGUF_TYPE_INT16: printf("%d", *(const int16_t *)p); break;
    case GGUF_TYPE_UINT32: printf("%u", *(const uint32_t *)p); break;
    case GGUF_TYPE_INT32: printf("%d", *(const int32_t *)p); break;
    case GGUF_TYPE_FLOAT32: printf("%.9g", *(const float *)p); break;
    case GGUF_TYPE_UINT64: printf("%" PRIu64, *(const uint64_t *)p); break;
    case GGUF_TYPE_INT64: printf("%" PRId64, *(const int64_t *)p); break;
    case GGUF_TYPE_FLOAT64: printf("%.17g", *(const double *)p); break;
    case GGUF_TYPE_BOOL: printf("%s", *(const int8_t *)p ? "true" : "false"); break;
    default: printf("?");
    }
}

static size_t type_bytes(enum gguf_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* a key's value as bytes, for comparing two files */
static uint64_t kv_hash(const struct gguf_context *g, int64_t k)
{
    enum gguf_type t = gguf_get_kv_type(g, k);
    if (t == GGUF_TYPE_STRING) return fnv(gguf_get_val_str(g, k), strlen(gguf_get_val_str(g, k)));
    if (t != GGUF_TYPE_ARRAY) return fnv(gguf_get_val_data(g, k), type_bytes(t));
    enum gguf_type at = gguf_get_arr_type(g, k);
    size_t n = gguf_get_arr_n(g, k);
    uint64_t h = fnv(&n, sizeof n) ^ (uint64_t)at;
    if (at == GGUF_TYPE_STRING) {
        for (size_t i = 0; i < n; i++) h = h * 31 + fnv(gguf_get_arr_str(g, k, i), strlen(gguf_get_arr_str(g, k, i)));
    } else if (at != GGUF_TYPE_ARRAY) {
        h = h * 31 + fnv(gguf_get_arr_data(g, k), n * type_bytes(at));
    }
    return h;
}

static struct gguf_context *open_file(const char *path, struct ggml_context **ctx)
{
    struct gguf_context *g = gguf_init_from_file(path, (struct gguf_init_params){.no_alloc = false, .ctx = ctx});
    if (!g) { fprintf(stderr, "check_gguf: ggml cannot read %s\n", path); exit(1); }
    return g;
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: check_gguf FILE [REFERENCE]\n"); return 2; }
    struct ggml_context *ctx;
    struct gguf_context *g = open_file(argv[1], &ctx);
    printf("%s: GGUF v%u, alignment %zu, %" PRId64 " keys, %" PRId64 " tensors\n", argv[1],
           gguf_get_version(g), gguf_get_alignment(g), gguf_get_n_kv(g), gguf_get_n_tensors(g));
    for (int64_t k = 0; k < gguf_get_n_kv(g); k++) {
        enum gguf_type t = gguf_get_kv_type(g, k);
        printf("  %s (%s) = ", gguf_get_key(g, k), gguf_type_name(t));
        if (t == GGUF_TYPE_STRING) printf("\"%s\"", gguf_get_val_str(g, k));
        else if (t == GGUF_TYPE_ARRAY) {
            enum gguf_type at = gguf_get_arr_type(g, k);
            size_t n = gguf_get_arr_n(g, k);
            printf("%zu x %s [", n, gguf_type_name(at));
            for (size_t i = 0; i < n && i < 4; i++) {
                if (i) printf(", ");
                if (at == GGUF_TYPE_STRING) printf("\"%s\"", gguf_get_arr_str(g, k, i));
                else if (at != GGUF_TYPE_ARRAY) print_scalar(at, (const char *)gguf_get_arr_data(g, k) + i * type_bytes(at));
            }
            printf("%s]", n > 4 ? ", ..." : "");
        } else print_scalar(t, gguf_get_val_data(g, k));
        printf("\n");
    }
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        const char *name = gguf_get_tensor_name(g, i);
        struct ggml_tensor *x = ggml_get_tensor(ctx, name);
        int64_t n = ggml_nelements(x);
        float *f = malloc((size_t)n * sizeof *f + 1);
        const struct ggml_type_traits *tr = ggml_get_type_traits(x->type);
        if (x->type == GGML_TYPE_F32) memcpy(f, x->data, (size_t)n * 4);
        else if (tr->to_float) tr->to_float(x->data, f, n);
        else memset(f, 0, (size_t)n * sizeof *f);
        printf("  tensor %s %s ne=[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] bytes %016" PRIx64
               " f32 %016" PRIx64 " first %.9g\n", name, ggml_type_name(x->type), x->ne[0], x->ne[1], x->ne[2],
               x->ne[3], fnv(x->data, ggml_nbytes(x)), fnv(f, (size_t)n * 4), n ? f[0] : 0.0f);
        free(f);
    }
    int bad = 0;
    if (argc > 2) {
        struct ggml_context *rctx;
        struct gguf_context *r = open_file(argv[2], &rctx);
        for (int64_t k = 0; k < gguf_get_n_kv(r); k++) {
            int64_t j = gguf_find_key(g, gguf_get_key(r, k));
            if (j < 0) { printf("DIFF key %s missing\n", gguf_get_key(r, k)); bad++; continue; }
            if (gguf_get_kv_type(g, j) != gguf_get_kv_type(r, k) || kv_hash(g, j) != kv_hash(r, k)) {
                printf("DIFF key %s differs\n", gguf_get_key(r, k));
                bad++;
            }
        }
        for (int64_t i = 0; i < gguf_get_n_tensors(r); i++) {
            const char *name = gguf_get_tensor_name(r, i);
            struct ggml_tensor *a = ggml_get_tensor(ctx, name), *b = ggml_get_tensor(rctx, name);
            if (!a) { printf("DIFF tensor %s missing\n", name); bad++; continue; }
            if (a->type != b->type || !ggml_are_same_shape(a, b) || memcmp(a->data, b->data, ggml_nbytes(b))) {
                printf("DIFF tensor %s differs\n", name);
                bad++;
            }
        }
        printf("compared with %s: %" PRId64 " keys, %" PRId64 " tensors, %d differences\n", argv[2],
               gguf_get_n_kv(r), gguf_get_n_tensors(r), bad);
        gguf_free(r);
        ggml_free(rctx);
    }
    gguf_free(g);
    ggml_free(ctx);
    return bad != 0;
}
