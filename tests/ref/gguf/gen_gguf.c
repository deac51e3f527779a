/* gen_gguf.c - makes the GGUF fixtures of tests/test_gguf.c with ggml itself.
 *
 * Run by hand, never by make (make and CI reach only Debian's archive):
 *   G=/work/ggml-src B=/work/ggml-build     # a ggml checkout and its CPU build
 *   cc -O1 -o /tmp/gen_gguf tests/ref/gguf/gen_gguf.c -I$G/include -I$G/src \
 *      -L$B/src -lggml-base -lggml -Wl,-rpath,$B/src -lm
 *   /tmp/gen_gguf tests/ref/gguf
 * (built against ggml-org/ggml d99724f2b141fed9e1a9f402213506c081433465).
 *
 * Writes, with ggml's gguf writer:
 *   types.gguf   one 8x256 source (normal values, outliers, zeros, subnormals,
 *                all-equal blocks, tiny and huge blocks) as f32 "src"; for
 *                every type T in f32 f16 bf16 q4_0 ... q8_K: "q.T" = the source
 *                quantized by ggml (ggml_quantize_chunk without an imatrix,
 *                which is quantize_row_T_ref; q8_K through
 *                quantize_row_q8_K_ref) and "deq.T" = ggml's to_float of it;
 *                a 3-D f32 tensor "cube" (ne 5,3,2); metadata of every value
 *                type, arrays of every element type and of strings.
 *   align.gguf   general.alignment = 64, two small tensors, odd-sized metadata. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "gguf.h"
#include "ggml-quants.h"

#define ROWS 8
#define COLS 256
#define N (ROWS * COLS)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float nrand(void) { return (float)(sqrt(-2 * log(urand())) * cos(6.283185307179586 * urand())); }

/* each 32-block of the source gets a character, so every block format sees
 * zeros, constants, outliers and denormal magnitudes */
static void make_source(float *x)
{
    for (int b = 0; b < N / 32; b++) {
        float *p = x + b * 32;
        int kind = b % 10;
        for (int i = 0; i < 32; i++) {
            float v = nrand();
            switch (kind) {
            case 0: p[i] = 0.0f; break;                          /* all zero */
            case 1: p[i] = 0.75f; break;                         /* all equal */
            case 2: p[i] = -3.5f; break;                         /* all equal, negative */
            case 3: p[i] = v * 1e-39f; break;                    /* subnormal */
            case 4: p[i] = i == 7 ? 1000.0f : v; break;          /* one outlier */
            case 5: p[i] = i == 3 ? -5000.0f : v * 0.01f; break; /* negative outlier */
            case 6: p[i] = v * 1e4f; break;                      /* large */
            case 7: p[i] = (float)urand(); break;                /* all positive */
            case 8: p[i] = i % 2 ? 0.0f : v; break;              /* half zeros */
            default: p[i] = v; break;
            }
        }
    }
}

static const enum ggml_type TYPES[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_K,
};
#define NTYPES (int)(sizeof TYPES / sizeof TYPES[0])

static void fail(const char *m) { fprintf(stderr, "gen_gguf: %s\n", m); exit(1); }

static struct ggml_tensor *add(struct ggml_context *g, struct gguf_context *gf, const char *name,
                               enum ggml_type t, int nd, const int64_t *ne, const void *data)
{
    struct ggml_tensor *x = ggml_new_tensor(g, t, nd, ne);
    ggml_set_name(x, name);
    gguf_add_tensor(gf, x);
    gguf_set_tensor_data(gf, name, data);
    return x;
}

static void metadata(struct gguf_context *gf)
{
    gguf_set_val_str(gf, "general.architecture", "lumen-test");
    gguf_set_val_str(gf, "general.name", "types \xe2\x80\x94 fixture");
    gguf_set_val_u8(gf, "t.u8", 250);
    gguf_set_val_i8(gf, "t.i8", -120);
    gguf_set_val_u16(gf, "t.u16", 65000);
    gguf_set_val_i16(gf, "t.i16", -32000);
    gguf_set_val_u32(gf, "t.u32", 4000000000u);
    gguf_set_val_i32(gf, "t.i32", -2000000000);
    gguf_set_val_f32(gf, "t.f32", 0.1f);
    gguf_set_val_u64(gf, "t.u64", 18446744073709551615ull);
    gguf_set_val_i64(gf, "t.i64", -9223372036854775807ll - 1);
    gguf_set_val_f64(gf, "t.f64", -2.5e-300);
    gguf_set_val_bool(gf, "t.bool", true);
    gguf_set_val_str(gf, "t.str", "");
    const uint8_t au8[] = {0, 1, 255};
    const int8_t ai8[] = {-128, 0, 127};
    const uint16_t au16[] = {1, 65535};
    const int16_t ai16[] = {-32768, 32767};
    const uint32_t au32[] = {7, 4294967295u};
    const int32_t ai32[] = {-1, 2, -3, 4};
    const float af32[] = {1.5f, -0.0f, 3e38f};
    const uint64_t au64[] = {1ull << 60};
    const int64_t ai64[] = {-5, 1ll << 62};
    const double af64[] = {3.141592653589793, 1e-310};
    const int8_t abool[] = {1, 0, 1};
    gguf_set_arr_data(gf, "a.u8", GGUF_TYPE_UINT8, au8, 3);
    gguf_set_arr_data(gf, "a.i8", GGUF_TYPE_INT8, ai8, 3);
    gguf_set_arr_data(gf, "a.u16", GGUF_TYPE_UINT16, au16, 2);
    gguf_set_arr_data(gf, "a.i16", GGUF_TYPE_INT16, ai16, 2);
    gguf_set_arr_data(gf, "a.u32", GGUF_TYPE_UINT32, au32, 2);
    gguf_set_arr_data(gf, "a.i32", GGUF_TYPE_INT32, ai32, 4);
    gguf_set_arr_data(gf, "a.f32", GGUF_TYPE_FLOAT32, af32, 3);
    gguf_set_arr_data(gf, "a.u64", GGUF_TYPE_UINT64, au64, 1);
    gguf_set_arr_data(gf, "a.i64", GGUF_TYPE_INT64, ai64, 2);
    gguf_set_arr_data(gf, "a.f64", GGUF_TYPE_FLOAT64, af64, 2);
    gguf_set_arr_data(gf, "a.bool", GGUF_TYPE_BOOL, abool, 3);
    gguf_set_arr_data(gf, "a.empty", GGUF_TYPE_INT32, ai32, 0);
    const char *strs[] = {"hello", "", "w\xc3\xb6rld"};
    gguf_set_arr_str(gf, "a.str", strs, 3);
}

int main(int argc, char **argv)
{
    if (argc != 2) fail("usage: gen_gguf OUTDIR");
    char path[4096];
    static float src[N], deq[NTYPES][N];
    static unsigned char q[NTYPES][N * 4];
    make_source(src);

    struct ggml_init_params ip = {.mem_size = 1 << 20, .mem_buffer = NULL, .no_alloc = true};
    struct ggml_context *g = ggml_init(ip);
    struct gguf_context *gf = gguf_init_empty();
    metadata(gf);
    int64_t ne[2] = {COLS, ROWS};
    add(g, gf, "src", GGML_TYPE_F32, 2, ne, src);
    for (int t = 0; t < NTYPES; t++) {
        enum ggml_type ty = TYPES[t];
        const struct ggml_type_traits *tr = ggml_get_type_traits(ty);
        size_t bytes = ggml_row_size(ty, COLS) * ROWS;
        if (ty == GGML_TYPE_Q8_K) {
            quantize_row_q8_K_ref(src, (block_q8_K *)q[t], N);
            dequantize_row_q8_K((const block_q8_K *)q[t], deq[t], N);
        } else {
            if (ggml_quantize_chunk(ty, src, q[t], 0, ROWS, COLS, NULL) != bytes) fail("quantize size");
            /* ggml_quantize_chunk without an imatrix must be the _ref row
             * quantizer, which Lumen copies: say so if it ever is not */
            if (tr->from_float_ref && ty != GGML_TYPE_F32) {
                static unsigned char chk[N * 4];
                tr->from_float_ref(src, chk, N);
                if (memcmp(chk, q[t], bytes)) fail("ggml_quantize_chunk differs from from_float_ref");
            }
            if (ty == GGML_TYPE_F32) memcpy(deq[t], q[t], bytes);
            else tr->to_float(q[t], deq[t], N);
        }
        char name[64];
        snprintf(name, sizeof name, "q.%s", ggml_type_name(ty));
        add(g, gf, name, ty, 2, ne, q[t]);
        snprintf(name, sizeof name, "deq.%s", ggml_type_name(ty));
        add(g, gf, name, GGML_TYPE_F32, 2, ne, deq[t]);
    }
    static float cube[30];
    for (int i = 0; i < 30; i++) cube[i] = (float)i - 0.5f;
    int64_t ne3[3] = {5, 3, 2};
    add(g, gf, "cube", GGML_TYPE_F32, 3, ne3, cube);
    snprintf(path, sizeof path, "%s/types.gguf", argv[1]);
    if (!gguf_write_to_file(gf, path, false)) fail("write types.gguf");
    gguf_free(gf);

    /* ggml's writer pads with the alignment its context was read with, not
     * the general.alignment key set on it: write the metadata alone, read it
     * back (which takes the key), then add the tensors */
    gf = gguf_init_empty();
    gguf_set_val_u32(gf, "general.alignment", 64);
    gguf_set_val_str(gf, "odd", "abc");
    snprintf(path, sizeof path, "%s/align.gguf", argv[1]);
    if (!gguf_write_to_file(gf, path, false)) fail("write align.gguf");
    gguf_free(gf);
    gf = gguf_init_from_file(path, (struct gguf_init_params){.no_alloc = true, .ctx = NULL});
    if (!gf || gguf_get_alignment(gf) != 64) fail("reread align.gguf");
    static float a[3] = {1, 2, 3};
    static uint16_t h[7];
    for (int i = 0; i < 7; i++) h[i] = ggml_fp32_to_fp16((float)i * 0.25f);
    int64_t na[1] = {3}, nh[1] = {7};
    add(g, gf, "a", GGML_TYPE_F32, 1, na, a);
    add(g, gf, "h", GGML_TYPE_F16, 1, nh, h);
    snprintf(path, sizeof path, "%s/align.gguf", argv[1]);
    if (!gguf_write_to_file(gf, path, false)) fail("write align.gguf");
    gguf_free(gf);
    ggml_free(g);
    printf("gen_gguf: wrote %s/types.gguf and align.gguf (%d types)\n", argv[1], NTYPES);
    return 0;
}
