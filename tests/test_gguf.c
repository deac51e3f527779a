/* test_gguf.c - GGUF files and ggml's block quantizations against files ggml
 * itself wrote (tests/ref/gguf/gen_gguf.c, run by hand): metadata of every
 * type, every tensor type read bit-exactly, dequantize equal to ggml's f32,
 * quantize equal to ggml's bytes, write -> read round trips, and malformed
 * files refused with a message. */
#include "io_test.h"
#include "core/io/gguf.h"
#include "core/quant.h"
#include "core/io/io_internal.h"
#include "core/ops_nn.h"
#include "backends/cpu/cpu.h"

#define GX(name) "tests/ref/gguf/" name

#define R3(a, b, c) (lm_array_release(a), lm_array_release(b), lm_array_release(c))

static const char *const TYPES[] = {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                                    "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K"};
#define NT (sizeof TYPES / sizeof TYPES[0])

static lm_array *get(const lm_tensor_set *s, const char *fmt, const char *t)
{
    char name[64];
    snprintf(name, sizeof name, fmt, t);
    int i = lm_tensor_set_find(s, name);
    if (i < 0) fail_msg("tensor %s missing", name);
    return s->arrays[i];
}

static void *bytes_of(lm_array *a)
{
    void *b = malloc(lm_array_nbytes(a) + 1);
    assert_int_equal(lm_array_read(a, b, a->dtype), LM_OK);
    return b;
}

static const lm_gguf_value *kv(const lm_gguf_meta *m, const char *key)
{
    int i = lm_gguf_meta_find(m, key);
    if (i < 0) fail_msg("metadata %s missing", key);
    return &m->kv[i].v;
}

static void check_meta(const lm_gguf_meta *m)
{
    assert_int_equal(kv(m, "t.u8")->type, LM_GGUF_U8);
    assert_int_equal(kv(m, "t.u8")->u, 250);
    assert_int_equal(kv(m, "t.i8")->i, -120);
    assert_int_equal(kv(m, "t.u16")->u, 65000);
    assert_int_equal(kv(m, "t.i16")->i, -32000);
    assert_int_equal(kv(m, "t.u32")->u, 4000000000u);
    assert_int_equal(kv(m, "t.i32")->i, -2000000000);
    assert_true(kv(m, "t.f32")->type == LM_GGUF_F32 && kv(m, "t.f32")->f == (double)0.1f);
    assert_true(kv(m, "t.u64")->u == 18446744073709551615ull);
    assert_true(kv(m, "t.i64")->i == INT64_MIN);
    assert_true(kv(m, "t.f64")->f == -2.5e-300);
    assert_true(kv(m, "t.bool")->type == LM_GGUF_BOOL && kv(m, "t.bool")->b);
    assert_true(kv(m, "t.str")->type == LM_GGUF_STRING && kv(m, "t.str")->str.len == 0);
    assert_string_equal(kv(m, "general.name")->str.s, "types \xe2\x80\x94 fixture");
    const lm_gguf_value *a = kv(m, "a.i32");
    assert_true(a->type == LM_GGUF_ARRAY && a->arr.elem == LM_GGUF_I32 && a->arr.n == 4);
    assert_true(a->arr.items[0].i == -1 && a->arr.items[3].i == 4);
    a = kv(m, "a.str");
    assert_true(a->arr.elem == LM_GGUF_STRING && a->arr.n == 3);
    assert_string_equal(a->arr.items[2].str.s, "w\xc3\xb6rld");
    assert_true(kv(m, "a.f64")->arr.items[1].f == 1e-310);
    assert_true(kv(m, "a.f32")->arr.items[2].f == (double)3e38f);
    assert_true(kv(m, "a.u64")->arr.items[0].u == 1ull << 60);
    assert_true(kv(m, "a.i8")->arr.items[0].i == -128 && kv(m, "a.u8")->arr.items[2].u == 255);
    assert_true(kv(m, "a.bool")->arr.n == 3 && !kv(m, "a.bool")->arr.items[1].b);
    assert_true(kv(m, "a.empty")->arr.n == 0);
}

/* every tensor of types.gguf: dtype, shape, ggml's dequantized values bit
 * for bit, and Lumen's quantize of the source equal to ggml's bytes */
static void test_gguf_types(void **state)
{
    (void)state;
    lm_tensor_set s;
    lm_gguf_meta m;
    lm_status st = lm_load_gguf(GX("types.gguf"), &s, &m);
    if (st) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    assert_int_equal(s.format, LM_FORMAT_GGUF);
    assert_int_equal(m.version, 3);
    assert_int_equal(m.alignment, 32);
    check_meta(&m);
    lm_array *src = get(&s, "%s", "src");
    io_expect_shape(src, 2, (int64_t[]){8, 256});
    float *x = bytes_of(src);
    for (size_t t = 0; t < NT; t++) {
        lm_array *q = get(&s, "q.%s", TYPES[t]), *d = get(&s, "deq.%s", TYPES[t]);
        lm_dtype dt;
        assert_true(lm_dtype_from_name_any(TYPES[t], &dt));
        assert_int_equal(q->dtype, dt);
        io_expect_shape(q, 2, (int64_t[]){8, 256});
        float *want = bytes_of(d);
        lm_array *dq = lm_dequantize(q);
        assert_non_null(dq);
        float *got = bytes_of(dq);
        if (memcmp(got, want, 2048 * sizeof(float))) fail_msg("%s: dequantize differs from ggml", TYPES[t]);
        /* quantize: ggml's bytes */
        unsigned char *qb = bytes_of(q);
        lm_array *qq = lm_quantize(src, dt);
        if (dt == LM_F32 || dt == LM_F16 || dt == LM_BF16) {
            assert_null(qq);   /* not a quantized dtype: lm_cast's job */
            void *c = malloc(lm_array_nbytes(q));
            lm_convert(c, dt, x, LM_F32, 2048);
            if (memcmp(c, qb, lm_array_nbytes(q))) fail_msg("%s: conversion differs from ggml", TYPES[t]);
            free(c);
        } else {
            assert_non_null(qq);
            unsigned char *mine = bytes_of(qq);
            size_t nb = lm_array_nbytes(q);
            assert_int_equal(nb, lm_array_nbytes(qq));
            for (size_t i = 0; i < nb; i++)
                if (mine[i] != qb[i]) fail_msg("%s: quantize differs from ggml at byte %zu", TYPES[t], i);
            free(mine);
        }
        lm_array_release(qq);
        lm_array_release(dq);
        free(qb);
        free(got);
        free(want);
    }
    free(x);
    lm_array *cube = get(&s, "%s", "cube");
    io_expect_shape(cube, 3, (int64_t[]){2, 3, 5});
    double e[30];
    for (int i = 0; i < 30; i++) e[i] = i - 0.5;
    io_expect(cube, e, 30);
    /* the text form of the metadata in the set */
    int k = -1;
    for (int i = 0; i < s.nmeta; i++) if (!strcmp(s.meta[i].key, "a.str")) k = i;
    assert_true(k >= 0);
    assert_string_equal(s.meta[k].value, "[\"hello\",\"\",\"w\xc3\xb6rld\"]");
    lm_gguf_meta_free(&m);
    lm_tensor_set_free(&s);
}

static void test_gguf_alignment(void **state)
{
    (void)state;
    lm_tensor_set s;
    lm_gguf_meta m;
    assert_int_equal(lm_load_file(GX("align.gguf"), &s), LM_OK);
    assert_int_equal(s.format, LM_FORMAT_GGUF);
    io_expect(get(&s, "%s", "a"), (double[]){1, 2, 3}, 3);
    io_expect(get(&s, "%s", "h"), (double[]){0, 0.25, 0.5, 0.75, 1, 1.25, 1.5}, 7);
    lm_tensor_set_free(&s);
    assert_int_equal(lm_load_gguf(GX("align.gguf"), &s, &m), LM_OK);
    assert_int_equal(m.alignment, 64);
    lm_gguf_meta_free(&m);
    lm_tensor_set_free(&s);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    void *d;
    assert_int_equal(lm_io_read_all(path, &d, n), LM_OK);
    return d;
}

static void test_gguf_versions(void **state)
{
    (void)state;
    size_t n;
    unsigned char *d = slurp(GX("types.gguf"), &n);
    lm_tensor_set s;
    for (uint32_t v = 1; v <= 4; v++) {
        memcpy(d + 4, &v, 4);
        lm_status st = lm_load_gguf_mem(d, n, "mem", &s, NULL);
        if (v == 2 || v == 3) {
            assert_int_equal(st, LM_OK);
            assert_int_equal(s.count, 30);
            lm_tensor_set_free(&s);
        } else {
            assert_int_equal(st, LM_ERR_FORMAT);
            assert_non_null(strstr(lm_error_message(), "version"));
        }
    }
    free(d);
}

/* Lumen writes; Lumen and (by hand, tests/ref/gguf/check_gguf.c) ggml read */
static void test_gguf_roundtrip(void **state)
{
    (void)state;
    lm_tensor_set s, r;
    lm_gguf_meta m, m2;
    assert_int_equal(lm_load_gguf(GX("types.gguf"), &s, &m), LM_OK);
    /* add a nested array, which ggml's writer cannot make */
    lm_gguf_value inner[2] = {{.type = LM_GGUF_ARRAY}, {.type = LM_GGUF_ARRAY}};
    lm_gguf_value ints[3] = {{.type = LM_GGUF_I16, .i = -7}, {.type = LM_GGUF_I16, .i = 8}, {.type = LM_GGUF_I16, .i = 9}};
    inner[0].arr.elem = inner[1].arr.elem = LM_GGUF_I16;
    inner[0].arr.n = 1; inner[0].arr.items = ints;
    inner[1].arr.n = 2; inner[1].arr.items = ints + 1;
    lm_gguf_kv *kvs = calloc((size_t)m.n + 1, sizeof *kvs);
    memcpy(kvs, m.kv, (size_t)m.n * sizeof *kvs);
    kvs[m.n].key = "nested";
    kvs[m.n].v.type = LM_GGUF_ARRAY;
    kvs[m.n].v.arr.elem = LM_GGUF_ARRAY;
    kvs[m.n].v.arr.n = 2;
    kvs[m.n].v.arr.items = inner;
    const char *p = io_tmp("rt.gguf");
    assert_int_equal(lm_save_gguf(p, s.count, (const char *const *)s.names, s.arrays, m.n + 1, kvs), LM_OK);
    assert_int_equal(lm_load_gguf(p, &r, &m2), LM_OK);
    check_meta(&m2);
    assert_int_equal(m2.n, m.n + 1);
    const lm_gguf_value *nv = kv(&m2, "nested");
    assert_true(nv->arr.n == 2 && nv->arr.items[1].arr.n == 2 && nv->arr.items[1].arr.items[1].i == 9);
    assert_int_equal(r.count, s.count);
    for (int i = 0; i < s.count; i++) {
        assert_string_equal(r.names[i], s.names[i]);
        assert_int_equal(r.arrays[i]->dtype, s.arrays[i]->dtype);
        void *a = bytes_of(s.arrays[i]), *b = bytes_of(r.arrays[i]);
        assert_memory_equal(a, b, lm_array_nbytes(s.arrays[i]));
        free(a);
        free(b);
    }
    free(kvs);
    lm_gguf_meta_free(&m);
    lm_gguf_meta_free(&m2);
    lm_tensor_set_free(&s);
    lm_tensor_set_free(&r);
}

/* ---- malformed files, built by hand ---- */

typedef struct hb { unsigned char b[4096]; size_t n; } hb;
static void h32(hb *h, uint32_t v) { memcpy(h->b + h->n, &v, 4); h->n += 4; }
static void h64(hb *h, uint64_t v) { memcpy(h->b + h->n, &v, 8); h->n += 8; }
static void hstr(hb *h, const char *s) { h64(h, strlen(s)); memcpy(h->b + h->n, s, strlen(s)); h->n += strlen(s); }

/* one f32 tensor "t" of ne0 x ne1 at offset off, after kv "k" = u32 kval */
static size_t mk(hb *h, uint64_t nt, uint64_t ne0, uint64_t ne1, uint64_t off, uint32_t type,
                 const char *key, uint32_t kval)
{
    h->n = 0;
    memcpy(h->b, "GGUF", 4);
    h->n = 4;
    h32(h, 3);
    h64(h, nt);
    h64(h, 1);
    hstr(h, key);
    h32(h, LM_GGUF_U32);
    h32(h, kval);
    hstr(h, "t");
    h32(h, 2);
    h64(h, ne0);
    h64(h, ne1);
    h32(h, type);
    h64(h, off);
    while (h->n % 32) h->b[h->n++] = 0;
    memset(h->b + h->n, 0, 64);
    h->n += 64;   /* 16 f32 of data */
    return h->n;
}

static void expect_bad(const hb *h, size_t n, const char *words)
{
    lm_tensor_set s;
    lm_status st = lm_load_gguf_mem(h->b, n, "bad.gguf", &s, NULL);
    if (st == LM_OK) fail_msg("accepted a bad file (%s)", words);
    assert_int_equal(st, LM_ERR_FORMAT);
    if (!strstr(lm_error_message(), words) || !strstr(lm_error_message(), "bad.gguf"))
        fail_msg("message '%s' lacks '%s'", lm_error_message(), words);
}

static void test_gguf_malformed(void **state)
{
    (void)state;
    hb h;
    lm_tensor_set s;
    size_t n = mk(&h, 1, 4, 4, 0, 0, "x", 1);
    assert_int_equal(lm_load_gguf_mem(h.b, n, "ok.gguf", &s, NULL), LM_OK);   /* the base is good */
    io_expect_shape(s.arrays[0], 2, (int64_t[]){4, 4});
    lm_tensor_set_free(&s);
    for (size_t k = 0; k < n - 64; k++) {   /* every truncation of the header */
        lm_status st = lm_load_gguf_mem(h.b, k, "cut.gguf", &s, NULL);
        assert_int_equal(st, LM_ERR_FORMAT);
    }
    n = mk(&h, 1, 4, 4, 0, 0, "x", 1);
    expect_bad(&h, n - 1, "past the end");                       /* data cut short */
    n = mk(&h, 1ull << 40, 4, 4, 0, 0, "x", 1);
    expect_bad(&h, n, "cannot fit");                             /* tensor count */
    n = mk(&h, 1, 1ull << 62, 1ull << 62, 0, 0, "x", 1);
    expect_bad(&h, n, "shape too large");                        /* dims overflow */
    n = mk(&h, 1, 4, 4, UINT64_MAX - 31, 0, "x", 1);
    expect_bad(&h, n, "past the end");                           /* offset overflow */
    n = mk(&h, 1, 4, 4, 4, 0, "x", 1);
    expect_bad(&h, n, "not aligned");                            /* misaligned offset */
    n = mk(&h, 1, 4, 4, 0, 0, "general.alignment", 3);
    expect_bad(&h, n, "power of two");                           /* bad alignment */
    n = mk(&h, 1, 4, 4, 0, 99, "x", 1);
    expect_bad(&h, n, "ggml type 99");                           /* unknown type */
    n = mk(&h, 1, 16, 1, 0, 12, "x", 1);
    expect_bad(&h, n, "block size");                             /* q4_K of 16 */
    n = mk(&h, 1, 4, 4, 0, 0, "x", 1);
    h.b[4 + 4 + 8 + 8 + 8 + 1] = 200;                             /* key type */
    expect_bad(&h, n, "unknown value type");
    n = mk(&h, 1, 4, 4, 0, 0, "x", 1);
    memcpy(h.b, "GGUX", 4);
    expect_bad(&h, n, "magic");
    /* an array longer than the file, and nesting past the bound */
    hb a = {.n = 0};
    memcpy(a.b, "GGUF", 4); a.n = 4; h32(&a, 3); h64(&a, 0); h64(&a, 1);
    hstr(&a, "arr"); h32(&a, LM_GGUF_ARRAY); h32(&a, LM_GGUF_U64); h64(&a, 1ull << 60);
    expect_bad(&a, a.n, "longer than the file");
    a.n = 4; h32(&a, 3); h64(&a, 0); h64(&a, 1);
    hstr(&a, "deep"); h32(&a, LM_GGUF_ARRAY);
    for (int i = 0; i < 20; i++) { h32(&a, LM_GGUF_ARRAY); h64(&a, 1); }
    h32(&a, LM_GGUF_U8); h64(&a, 0);
    expect_bad(&a, a.n, "nested deeper");
    /* a key, or a tensor name, given twice */
    a.n = 4; h32(&a, 3); h64(&a, 0); h64(&a, 3);
    for (int i = 0; i < 3; i++) { hstr(&a, i == 1 ? "k1" : "k0"); h32(&a, LM_GGUF_U8); a.b[a.n++] = 1; }
    expect_bad(&a, a.n, "'k0' given twice");
    a.n = 4; h32(&a, 3); h64(&a, 2); h64(&a, 0);
    for (int i = 0; i < 2; i++) { hstr(&a, "t"); h32(&a, 1); h64(&a, 8); h32(&a, 0); h64(&a, (uint64_t)i * 32); }
    while (a.n % 32) a.b[a.n++] = 0;
    memset(a.b + a.n, 0, 64);
    a.n += 64;
    expect_bad(&a, a.n, "'t' given twice");
}

static void test_gguf_quant_dtype(void **state)
{
    (void)state;
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = (float)(i % 37) - 18.0f;
    lm_array *a = lm_from_data(2, (int64_t[]){2, 256}, LM_F32, x, lm_device_cpu());
    lm_array *q = lm_quantize(a, LM_Q8_0);
    assert_non_null(q);
    assert_int_equal(q->dtype, LM_Q8_0);
    assert_int_equal(lm_array_nbytes(q), 16 * 34);
    /* every op refuses it with a message naming the dtype (the op table's
     * builders meet it at their first cast, view or node) */
    lm_array *m = lm_from_data(2, (int64_t[]){4, 2}, LM_F32, x, lm_device_cpu());
    lm_array *mt = lm_from_data(2, (int64_t[]){256, 2}, LM_F32, x, lm_device_cpu());
    lm_array *refused[] = {
        lm_binary(LM_OP_ADD, q, q), lm_binary(LM_OP_MUL, a, q), lm_unary(LM_OP_EXP, q),
        lm_matmul(m, q), lm_matmul(q, mt), lm_reshape(q, 1, (int64_t[]){512}), lm_slice(q, 1, 0, 128, 1),
        lm_reduce(LM_OP_SUM, q, 0, NULL, false), lm_cast(q, LM_F32), lm_cast(a, LM_Q4_0),
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        if (refused[i]) fail_msg("op %zu accepted a q8_0 tensor", i);
        lm_array *again = NULL;
        switch (i) {   /* the message of each, checked in turn */
        case 0: again = lm_binary(LM_OP_ADD, q, q); break;
        case 3: again = lm_matmul(m, q); break;
        case 5: again = lm_reshape(q, 1, (int64_t[]){512}); break;
        default: continue;
        }
        assert_null(again);
        if (lm_error_status() != LM_ERR_UNSUPPORTED) fail_msg("op %zu: %s", i, lm_error_message());
        assert_non_null(strstr(lm_error_message(), "q8_0"));
        assert_non_null(strstr(lm_error_message(), "dequantize"));
    }
    /* its transpose is the one view it has (matmul(x, w.T) is linear);
     * nothing else reads that either */
    lm_array *qt = lm_transpose(q, 0, 1);
    assert_non_null(qt);
    assert_null(lm_contiguous(qt));
    assert_non_null(strstr(lm_error_message(), "dequantize"));
    lm_array_release(qt);
    lm_array_release(m);
    lm_array_release(mt);
    float f[512];
    assert_int_equal(lm_array_read(q, f, LM_F32), LM_ERR_UNSUPPORTED);
    double item;
    assert_int_equal(lm_array_get(q, (int64_t[]){0, 0}, &item), LM_ERR_UNSUPPORTED);
    /* a last dimension that is not whole blocks */
    lm_array *c = lm_from_data(2, (int64_t[]){16, 32}, LM_F32, x, lm_device_cpu());
    assert_null(lm_quantize(c, LM_Q4_K));
    assert_int_equal(lm_error_status(), LM_ERR_SHAPE);
    assert_non_null(strstr(lm_error_message(), "256"));
    lm_array *c2 = lm_quantize(c, LM_Q4_0);
    assert_non_null(c2);
    /* safetensors refuses it; GGUF keeps it */
    const char *names[] = {"w"};
    assert_int_equal(lm_save_safetensors(io_tmp("q.safetensors"), 1, names, &q, 0, NULL), LM_ERR_DTYPE);
    assert_non_null(strstr(lm_error_message(), "dequantize"));
    /* npy and npz refuse it too (npz once overflowed its buffer here) */
    assert_int_equal(lm_save_npy(io_tmp("q.npy"), q), LM_ERR_DTYPE);
    assert_int_equal(lm_save_npz(io_tmp("q.npz"), 1, names, &q, false), LM_ERR_DTYPE);
    assert_non_null(strstr(lm_error_message(), "q8_0"));
    lm_tensor_set s;
    assert_int_equal(lm_save_gguf(io_tmp("q.gguf"), 1, names, &q, 0, NULL), LM_OK);
    assert_int_equal(lm_load_file(io_tmp("q.gguf"), &s), LM_OK);
    assert_int_equal(s.arrays[0]->dtype, LM_Q8_0);
    lm_array *d1 = lm_dequantize(q), *d2 = lm_dequantize(s.arrays[0]);
    float g1[512], g2[512];
    assert_int_equal(lm_array_read(d1, g1, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(d2, g2, LM_F32), LM_OK);
    assert_memory_equal(g1, g2, sizeof g1);
    for (int i = 0; i < 512; i++) assert_true(fabsf(g1[i] - x[i]) <= 18.0f / 127 / 2 * 1.01f);
    lm_array_release(d1);
    lm_array_release(d2);
    lm_tensor_set_free(&s);
    lm_array_release(c2);
    lm_array_release(c);
    lm_array_release(q);
    lm_array_release(a);
}

/* linear with a quantized weight: integer dots of the weight with the input
 * quantized to Q8_0/Q8_K (blocks of B), against f32 x times the dequantized
 * weight.  Quantizing x moves each element by at most half a step, amax of
 * its block / 127 / 2, so |y - ref| <= sum_k |w_k| * step_k / 2, plus f32
 * rounding of the two sums (1e-5 relative to sum_k |w_k x_k|). */
static void check_qlinear(lm_dtype wt, int64_t M, int64_t N, int64_t K)
{
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
    uint64_t r = 88172645463325252ull + (uint64_t)wt;
    for (int64_t i = 0; i < M * K; i++) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 4 - 2); }
    for (int64_t i = 0; i < N * K; i++) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; w[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1); }
    lm_array *xa = lm_from_data(2, (int64_t[]){M, K}, LM_F32, x, lm_device_cpu());
    lm_array *wa = lm_from_data(2, (int64_t[]){N, K}, LM_F32, w, lm_device_cpu());
    lm_array *wq = lm_quantize(wa, wt), *wd = lm_dequantize(wq);
    float *wdv = malloc(sizeof(float) * (size_t)(N * K)), *y1 = malloc(sizeof(float) * (size_t)(M * N)),
          *y4 = malloc(sizeof(float) * (size_t)(M * N));
    assert_int_equal(lm_array_read(wd, wdv, LM_F32), LM_OK);
    int th = lm_cpu_threads();
    lm_cpu_set_threads(1);
    lm_array *a1 = lm_linear(xa, wq, NULL);
    assert_non_null(a1);
    assert_int_equal(a1->op, LM_OP_QLINEAR);
    assert_int_equal(lm_array_read(a1, y1, LM_F32), LM_OK);
    lm_cpu_set_threads(4);
    lm_array *a4 = lm_linear(xa, wq, NULL);
    assert_int_equal(lm_array_read(a4, y4, LM_F32), LM_OK);
    lm_cpu_set_threads(th);
    if (memcmp(y1, y4, sizeof(float) * (size_t)(M * N))) fail_msg("%s: threads 1 and 4 differ", lm_dtype_name(wt));
    /* each row alone (the one-row kernel) gives the same bits as in the
     * batch (where four rows may go through one call) */
    for (int64_t m = 0; m < M; m++) {
        lm_array *xr = lm_from_data(1, (int64_t[]){K}, LM_F32, x + m * K, lm_device_cpu());
        lm_array *yr = lm_linear(xr, wq, NULL);
        float *row = malloc(sizeof(float) * (size_t)N);
        assert_int_equal(lm_array_read(yr, row, LM_F32), LM_OK);
        if (memcmp(row, y1 + m * N, sizeof(float) * (size_t)N))
            fail_msg("%s: row %lld alone differs from the batch", lm_dtype_name(wt), (long long)m);
        free(row);
        lm_array_release(yr);
        lm_array_release(xr);
    }
    int64_t B = lm_dtype_block(wt) == 256 ? 256 : 32;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0, bound = 0, mag = 0;
            for (int64_t k0 = 0; k0 < K; k0 += B) {
                double amax = 0;
                for (int64_t k = k0; k < k0 + B; k++) amax = fmax(amax, fabs(x[m * K + k]));
                for (int64_t k = k0; k < k0 + B; k++) {
                    ref += (double)x[m * K + k] * wdv[n * K + k];
                    bound += fabs(wdv[n * K + k]) * amax / 127 / 2;
                    mag += fabs((double)x[m * K + k] * wdv[n * K + k]);
                }
            }
            double err = fabs(y1[m * N + n] - ref);
            if (err > bound * 1.01 + 1e-5 * mag)
                fail_msg("%s [%lld,%lld]: %g vs %g, bound %g", lm_dtype_name(wt), (long long)m, (long long)n,
                         (double)y1[m * N + n], ref, bound);
        }
    R3(a1, a4, wd);
    R3(wq, wa, xa);
    free(x); free(w); free(wdv); free(y1); free(y4);
}

static void test_gguf_qlinear(void **state)
{
    (void)state;
    const lm_dtype ts[] = {LM_Q8_0, LM_Q4_K, LM_Q4_0, LM_Q5_0, LM_Q2_K, LM_Q3_K, LM_Q5_K, LM_Q6_K,
                           LM_Q4_1, LM_Q5_1, LM_Q8_K};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) check_qlinear(ts[i], 5, 37, 512);
    check_qlinear(LM_Q8_0, 1, 300, 1024);   /* a GEMV */
    /* rows long enough that a task's weight rows span several L2 tiles
     * (quant_linear.c: 256 KB of rows a tile) */
    check_qlinear(LM_Q8_0, 6, 37, 8192);
    check_qlinear(LM_Q4_K, 9, 70, 8192);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_types),
        cmocka_unit_test(test_gguf_alignment),
        cmocka_unit_test(test_gguf_versions),
        cmocka_unit_test(test_gguf_roundtrip),
        cmocka_unit_test(test_gguf_malformed),
        cmocka_unit_test(test_gguf_quant_dtype),
        cmocka_unit_test(test_gguf_qlinear),
    };
    int rc = cmocka_run_group_tests_name("gguf", tests, tu_setup_cpu, NULL);
    io_tmp_cleanup();
    return rc;
}
