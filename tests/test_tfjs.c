/* test_tfjs.c - models/tfjs.c: a small TF.js layers model that uses every
 * supported layer (tests/ref/gen_tfjs.py computes its output in NHWC with
 * numpy) runs to the same values; the converted safetensors loads back to
 * the same model; malformed model.json and shards give errors naming the
 * layer and field, never crashes; the real ESRGAN packages (when `make
 * models` fetched them) parse to the layer counts they have. */
#include <dirent.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/tfjs.h"

#define TF_DIR LM_FIXTURES "tfjs/"

static lm_array *npy(const char *name)
{
    tu_fixture fx;
    assert_int_equal(tu_load(name, &fx), 0);
    lm_array *a = tu_array(&fx, LM_F32);
    tu_free(&fx);
    return a;
}

static void check_forward(lm_tfjs_model *m)
{
    lm_array *x = npy("tfjs/x.npy");
    tu_fixture y;
    assert_int_equal(tu_load("tfjs/y.npy", &y), 0);
    lm_array *out = lm_tfjs_forward(m, x);
    if (!out) fprintf(stderr, "%s\n", lm_error_message());
    tu_assert_close(out, &y, 1e-5, 1e-5, "tiny model");
    lm_array_release(out);
    lm_array_release(x);
    tu_free(&y);
}

static void test_tiny_model(void **state)
{
    (void)state;
    lm_tfjs_model *m = lm_tfjs_load(TF_DIR "model.json", NULL);
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    assert_string_equal(lm_tfjs_name(m), "tiny");
    assert_string_equal(lm_tfjs_summary(m),
                        "InputLayer:1 Conv2D:5 PixelShuffle2x:1 Concatenate:1 MultiplyBeta:1 "
                        "Add:1 Activation:1 LeakyReLU:1 UpSampling2D:1");
    assert_int_equal(lm_tfjs_layer_count(m), 13);
    assert_int_equal(lm_tfjs_in_channels(m), 3);
    assert_int_equal(lm_tfjs_out_channels(m), 3);
    assert_int_equal(lm_tfjs_scale(m), 2);
    assert_true(lm_tfjs_receptive_radius(m) >= 4);
    check_forward(m);
    /* a wrong input is an error naming the shapes */
    int64_t s[4] = {1, 4, 5, 5};
    lm_array *bad = lm_zeros(4, s, LM_F32, NULL);
    assert_null(lm_tfjs_forward(m, bad));
    assert_non_null(strstr(lm_error_message(), "[1,4,5,5]"));
    lm_array_release(bad);
    lm_tfjs_free(m);
}

/* f16 and bf16 weights and computation stay close to f32 (values ~1) */
static void test_half(void **state)
{
    (void)state;
    lm_tfjs_model *m = lm_tfjs_load(TF_DIR "model.json", NULL);
    assert_non_null(m);
    lm_array *x = npy("tfjs/x.npy");
    tu_fixture y;
    assert_int_equal(tu_load("tfjs/y.npy", &y), 0);
    const lm_dtype dts[2] = {LM_F16, LM_BF16};
    const double tol[2] = {4e-3, 3e-2};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(lm_tfjs_set_dtype(m, dts[i]), LM_OK);
        assert_int_equal(lm_tfjs_dtype(m), dts[i]);
        lm_array *out = lm_tfjs_forward(m, x);
        assert_non_null(out);
        assert_int_equal(out->dtype, LM_F32);    /* the input's dtype */
        tu_assert_close(out, &y, tol[i], tol[i], lm_dtype_name(dts[i]));
        lm_array_release(out);
    }
    assert_int_equal(lm_tfjs_set_dtype(m, LM_I32), LM_ERR_DTYPE);
    lm_array_release(x);
    tu_free(&y);
    lm_tfjs_free(m);
}

static void test_convert_roundtrip(void **state)
{
    (void)state;
    lm_tfjs_model *m = lm_tfjs_load(TF_DIR "model.json", NULL);
    assert_non_null(m);
    const char *path = "build/test_tfjs_tiny.safetensors";
    lm_kv kv[1] = {{"lumen.range", "1"}};
    assert_int_equal(lm_tfjs_save(m, path, 1, kv), LM_OK);
    lm_tfjs_free(m);
    lm_tfjs_model *back = lm_tfjs_load(path, NULL);
    if (!back) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(back);
    assert_string_equal(lm_tfjs_meta(back, "lumen.range"), "1");
    assert_string_equal(lm_tfjs_meta(back, "lumen.kernel_layout"), "OIHW");
    assert_int_equal(lm_tfjs_layer_count(back), 13);
    check_forward(back);
    lm_tfjs_free(back);
    /* a plain safetensors without the topology says so */
    int64_t s[1] = {2};
    lm_array *z = lm_zeros(1, s, LM_F32, NULL);
    const char *name = "z";
    assert_int_equal(lm_save_safetensors(path, 1, &name, &z, 0, NULL), LM_OK);
    lm_array_release(z);
    assert_null(lm_tfjs_load(path, NULL));
    assert_non_null(strstr(lm_error_message(), "tfjs.topology"));
    remove(path);
}

/* lm_tfjs_upscale: tiles with enough context give the untiled result; alpha
 * is resized bilinearly; gray comes back as RGB; a bad image is an error.
 * (The small model's stride-2 convolution wants even sizes and tile
 * offsets, as it would in Keras.) */
static void test_upscale_tiles(void **state)
{
    (void)state;
    lm_tfjs_model *m = lm_tfjs_load(TF_DIR "model.json", NULL);
    assert_non_null(m);
    int64_t shape[3] = {4, 14, 12};
    lm_array *img = lm_random_uniform(3, shape, 0, 1, LM_F32, lm_random_key(7), NULL);
    assert_non_null(img);
    lm_upscale_opts o;
    lm_upscale_opts_init(&o);
    lm_array *whole = lm_tfjs_upscale(m, img, &o);
    if (!whole) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(whole);
    assert_int_equal(whole->shape[0], 4);
    assert_int_equal(whole->shape[1], 28);
    assert_int_equal(whole->shape[2], 24);
    o.tile = 4;
    o.overlap = 2 * ((lm_tfjs_receptive_radius(m) + 3) / 2);
    lm_array *tiled = lm_tfjs_upscale(m, img, &o);
    double *a = tu_read(whole);
    tu_assert_close_data(tiled, a, whole->size, 1e-5, 1e-5, "tiled vs whole");
    /* alpha: the input's fourth plane resized bilinearly */
    lm_array *alpha = lm_slice(img, 0, 3, 4, 1);
    int64_t s4[4] = {1, 1, 14, 12};
    lm_array *a4 = lm_reshape(alpha, 4, s4);
    double sc[2] = {2, 2};
    lm_array *up = lm_upsample(a4, NULL, sc, LM_UPSAMPLE_BILINEAR, false);
    double *u = tu_read(up);
    lm_array *wa = lm_slice(whole, 0, 3, 4, 1);
    tu_assert_close_data(wa, u, 28 * 24, 1e-6, 1e-6, "alpha");
    /* gray: the same as RGB made of three copies */
    lm_array *gray = lm_slice(img, 0, 0, 1, 1);
    lm_array *g3 = lm_concat(3, (lm_array *[]){gray, gray, gray}, 0);
    lm_array *from_gray = lm_tfjs_upscale(m, gray, NULL);
    lm_array *from_rgb = lm_tfjs_upscale(m, g3, NULL);
    assert_non_null(from_gray);
    assert_int_equal(from_gray->shape[0], 3);
    double *r = tu_read(from_rgb);
    tu_assert_close_data(from_gray, r, from_rgb->size, 0, 0, "gray");
    /* errors */
    int64_t bad[3] = {5, 4, 4};
    lm_array *five = lm_zeros(3, bad, LM_F32, NULL);
    assert_null(lm_tfjs_upscale(m, five, NULL));
    assert_non_null(strstr(lm_error_message(), "[5,4,4]"));
    free(a);
    free(u);
    free(r);
    lm_array *rel[] = {img, whole, tiled, alpha, a4, up, wa, gray, g3, from_gray, from_rgb, five};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) lm_array_release(rel[i]);
    lm_tfjs_free(m);
}

/* ---- malformed inputs through lm_tfjs_load_mem ---- */
typedef struct shards {
    char *data[2];
    size_t size[2];
    int cut;        /* bytes removed from the second shard (negative: added) */
    bool missing;   /* the second shard cannot be read */
} shards;

static const void *get_shard(void *ctx, const char *path, size_t *size)
{
    shards *s = ctx;
    int i = strstr(path, "shard2") ? 1 : 0;
    if (i == 1 && s->missing) {
        lm_error_set(LM_ERR_IO, "%s: cannot open: No such file or directory", path);
        return NULL;
    }
    *size = s->size[i] - (i == 1 ? (size_t)s->cut : 0);
    return s->data[i];
}

static void load_shards(shards *s)
{
    size_t n;
    memset(s, 0, sizeof *s);
    s->data[0] = tu_slurp(TF_DIR "group1-shard1of2.bin", &s->size[0]);
    char *b = tu_slurp(TF_DIR "group1-shard2of2.bin", &n);
    s->data[1] = realloc(b, n + 8);
    memset(s->data[1] + n, 0, 8);
    s->size[1] = n;
}

/* text with the first `from` replaced by `to` */
static char *replace(const char *text, const char *from, const char *to)
{
    const char *p = strstr(text, from);
    assert_non_null(p);
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *r = malloc(n + 1);
    size_t a = (size_t)(p - text);
    memcpy(r, text, a);
    strcpy(r + a, to);
    strcat(r, p + strlen(from));
    return r;
}

static void expect_error(const char *json, shards *s, const char *want1, const char *want2)
{
    lm_tfjs_model *m = lm_tfjs_load_mem(json, strlen(json), "m.json", get_shard, s, NULL);
    if (m) fprintf(stderr, "loaded, expected an error with '%s'\n", want1);
    assert_null(m);
    const char *msg = lm_error_message();
    if (!strstr(msg, want1) || (want2 && !strstr(msg, want2)))
        fprintf(stderr, "message: %s\nexpected: '%s' and '%s'\n", msg, want1, want2 ? want2 : "");
    assert_non_null(strstr(msg, want1));
    if (want2) assert_non_null(strstr(msg, want2));
}

static void test_malformed(void **state)
{
    (void)state;
    size_t n;
    char *json = tu_slurp(TF_DIR "model.json", &n);
    shards s;
    load_shards(&s);
    /* the good text loads from memory */
    lm_tfjs_model *m = lm_tfjs_load_mem(json, n, "m.json", get_shard, &s, NULL);
    assert_non_null(m);
    lm_tfjs_free(m);

    static const struct { const char *from, *to, *want1, *want2; } edits[] = {
        {"\"PixelShuffle2x\"", "\"Bogus\"", "layer 'ps' (Bogus)", "layer class 'Bogus' is not supported"},
        {"\"channels_last\"", "\"channels_first\"", "layer 'c1' (Conv2D): data_format", "only channels_last"},
        {"\"padding\": \"same\"", "\"padding\": \"causal\"", "layer 'c1' (Conv2D): padding", "causal"},
        {"\"activation\": \"relu\"", "\"activation\": \"mish\"", "layer 'c1' (Conv2D): activation", "mish"},
        {"\"filters\": 4", "\"filters\": 5", "layer 'c1' (Conv2D): kernel", "has shape [3,3,3,4], the layer needs [3,3,3,5]"},
        {"[\"c1\", 0, 0", "[\"nope\", 0, 0", "inbound_nodes", "'nope' is not a layer defined before"},
        {"[\"c1\", 0, 0", "[\"c1\", 1, 0", "inbound_nodes", "shared layers"},
        {"\"name\": \"c1/bias\"", "\"name\": \"c9/bias\"", "weight 'c1/bias' is not in the weights", NULL},
        {"\"dtype\": \"float32\"}", "\"dtype\": \"int32\"}", "dtype 'int32'", NULL},
        {"group1-shard1of2.bin", "../secret.bin", "inside the model's folder", NULL},
        {"\"Functional\"", "\"Sequential\"", "Functional models only", NULL},
        {"\"layers-model\"", "\"graph-model\"", "only layers-model", NULL},
        {"\"output_layers\": [", "\"output_layers\": [[\"in\", 0, 0], ", "output_layers", "exactly one"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        char *t = replace(json, edits[i].from, edits[i].to);
        expect_error(t, &s, edits[i].want1, edits[i].want2);
        free(t);
    }
    /* dilation with a stride (c2 has stride 2) */
    char *t = replace(json, "\"strides\": [2, 2], \"padding\": \"same\", \"data_format\": "
                      "\"channels_last\", \"dilation_rate\": [1, 1]",
                      "\"strides\": [2, 2], \"padding\": \"same\", \"data_format\": "
                      "\"channels_last\", \"dilation_rate\": [2, 2]");
    expect_error(t, &s, "layer 'c2' (Conv2D): dilation_rate", "strides");
    free(t);
    /* shards: truncated, too long, missing */
    s.cut = 4;
    expect_error(json, &s, "a shard is missing or truncated", "out/bias");
    s.cut = -4;
    expect_error(json, &s, "shards hold 3024 bytes, its weights 3020", NULL);
    s.cut = 0;
    s.missing = true;
    expect_error(json, &s, "group1-shard2of2.bin", "cannot open");
    s.missing = false;
    /* every prefix of the text fails cleanly */
    for (size_t len = 0; len < n; len += 37) {
        lm_tfjs_model *p = lm_tfjs_load_mem(json, len, "m.json", get_shard, &s, NULL);
        assert_null(p);
        assert_non_null(strstr(lm_error_message(), "m.json"));
    }
    expect_error("[1, 2]", &s, "modelTopology", "missing");
    expect_error("{\"modelTopology\": {}, \"weightsManifest\": []}", &s, "modelTopology",
                 "expected model_config");
    /* a file that is not there */
    assert_null(lm_tfjs_load("build/no/such/model.json", NULL));
    assert_non_null(strstr(lm_error_message(), "build/no/such/model.json"));
    free(json);
    free(s.data[0]);
    free(s.data[1]);
}

/* Inputs kept from fuzzing (tests/fuzz/regress/tfjs: model.json, NUL,
 * the bytes of every shard) load or fail cleanly; the seed loads. */
static const void *same_shard(void *ctx, const char *path, size_t *size)
{
    (void)path;
    shards *s = ctx;
    *size = s->size[0];
    return s->data[0];
}

static void test_fuzz_regress(void **state)
{
    (void)state;
    const char *dir = "tests/fuzz/regress/tfjs";
    DIR *dd = opendir(dir);
    assert_non_null(dd);
    int seen = 0;
    for (struct dirent *e; (e = readdir(dd));) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n;
        char *d = tu_slurp(path, &n);
        char *nul = memchr(d, 0, n);
        size_t jlen = nul ? (size_t)(nul - d) : n;
        shards s = {{nul ? nul + 1 : d + n}, {nul ? n - jlen - 1 : 0}, 0, false};
        lm_tfjs_model *m = lm_tfjs_load_mem(d, jlen, path, same_shard, &s, NULL);
        if (!strcmp(e->d_name, "seed_tiny")) assert_non_null(m);
        lm_tfjs_free(m);
        free(d);
        seen++;
    }
    closedir(dd);
    assert_true(seen >= 1);
}

/* The real packages, when fetched: the layer counts of each. */
static void test_esrgan_packages(void **state)
{
    (void)state;
    static const struct { const char *pkg, *summary; } pk[] = {
        {"esrgan-slim", "InputLayer:1 Conv2D:12 Activation:4 Concatenate:3 Add:3 UpSampling2D:1"},
        {"esrgan-medium", "InputLayer:1 Conv2D:28 Activation:12 Concatenate:11 Add:11 UpSampling2D:1"},
        {"esrgan-thick", "InputLayer:1 Conv2D:154 Activation:120 Concatenate:120 MultiplyBeta:40 "
                         "Add:41 PixelShuffle4x:1"},
    };
    for (size_t i = 0; i < sizeof pk / sizeof *pk; i++) {
        char path[256];
        snprintf(path, sizeof path, "build/models/%s/models/x4/model.json", pk[i].pkg);
        FILE *f = fopen(path, "r");
        if (!f) {
            printf("%s not fetched (make models): skipped\n", pk[i].pkg);
            continue;
        }
        fclose(f);
        lm_tfjs_model *m = lm_tfjs_load(path, lm_device_cpu());
        if (!m) fprintf(stderr, "%s\n", lm_error_message());
        assert_non_null(m);
        assert_string_equal(lm_tfjs_summary(m), pk[i].summary);
        assert_int_equal(lm_tfjs_scale(m), 4);
        assert_int_equal(lm_tfjs_in_channels(m), 3);
        assert_int_equal(lm_tfjs_out_channels(m), 3);
        lm_tfjs_free(m);
    }
}

int main(void)
{
    assert_int_equal(lm_init(), LM_OK);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_model),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_convert_roundtrip),
        cmocka_unit_test(test_upscale_tiles),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_fuzz_regress),
        cmocka_unit_test(test_esrgan_packages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
