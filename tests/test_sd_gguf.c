/* test_sd_gguf.c - single-file SD checkpoints as GGUF (models/sd_single.c
 * reading stable-diffusion.cpp's layout: the original key names, any tensor
 * f32/f16 or block-quantized).
 *
 * The fixtures are the tiny single files `make diffusion-fixtures` builds
 * ($BUILD/ref/diffusion/{sd1,sdxl}.safetensors), written here as GGUF:
 *  - unquantized (f32 as they are, and every float tensor cast to f16 beside
 *    an f16 .safetensors twin): the same family, the same inferred configs
 *    and every diffusers-named weight equal bit for bit to the .safetensors';
 *  - q8_0 and q4_k by convert's rule (linear weights only): the UNet's linear
 *    weights stay quantized on the CPU (its backend runs QLINEAR), the rest
 *    is dequantized; the UNet's output on diffusers' inputs against the f32
 *    one, the relative max error printed and bounded (q8_0), finite (q4_k);
 *    on a Vulkan device (lavapipe) the same file loads and its output is
 *    held against the CPU's;
 *  - the committed diffusers folders (sd1, sd2, sdxl) under the single
 *    file's names (lm_sd_single_from_folder, convert's folder input), as
 *    GGUF, read back to the folders' tensors bit for bit;
 *  - malformed: truncated, a quantized type on a conv kernel, a key missing,
 *    a wrong shape, an integer weight: errors naming the file, the key and
 *    the shapes or dtype. */
#include <cjson/cJSON.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/backend.h"
#include "core/io/gguf.h"
#include "core/io/io.h"
#include "models/diffusers_config.h"
#include "models/sd_single.h"
#include "models/unet.h"
#include "core/quant.h"

#define DIR "tests/ref/diffusion/"

static char tmpdir[64];

static const char *single(const char *model)
{
    static char buf[4][512];
    static int k;
    const char *b = getenv("BUILD");
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/ref/diffusion/%s.safetensors", b && *b ? b : "build", model);
    return p;
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static lm_sd_component *comp_of(lm_sd_single *s, int c)
{
    lm_sd_component *v[4] = {&s->unet, &s->vae, &s->text_encoder, &s->text_encoder_2};
    return v[c];
}

/* convert's rule (repl/cli_models.c): float, 2+ dimensions, rows of whole
 * blocks, not a bias nor an embedding */
static bool quantizable(const char *name, const lm_array *a, lm_dtype qt)
{
    size_t n = strlen(name);
    return lm_dtype_is_float(a->dtype) && a->ndim >= 2 && a->shape[a->ndim - 1] % lm_dtype_block(qt) == 0 &&
           !(n > 5 && !strcmp(name + n - 5, ".bias")) && !strstr(name, "embedding");
}

/* model's single file as GGUF at out: float tensors cast to f16 (f16), or
 * quantized as qt by the rule (qt != LM_DTYPE_COUNT); an f16 .safetensors
 * twin at twin when given.  Returns the number quantized. */
static int write_gguf(const char *model, const char *out, lm_dtype qt, bool f16, const char *twin)
{
    lm_tensor_set s;
    assert_int_equal(lm_load_file_to(single(model), lm_device_cpu(), &s), LM_OK);
    lm_array **arr = calloc((size_t)s.count, sizeof *arr);
    assert_non_null(arr);
    int nq = 0;
    for (int i = 0; i < s.count; i++) {
        lm_array *a = s.arrays[i];
        if (qt != LM_DTYPE_COUNT && quantizable(s.names[i], a, qt)) arr[i] = lm_quantize(a, qt), nq++;
        else if (f16 && lm_dtype_is_float(a->dtype)) arr[i] = lm_cast(a, LM_F16);
        else arr[i] = lm_array_retain(a);
        assert_non_null(arr[i]);
    }
    assert_int_equal(lm_save_gguf(out, s.count, (const char *const *)s.names, arr, 0, NULL), LM_OK);
    if (twin)
        assert_int_equal(lm_save_safetensors(twin, s.count, (const char *const *)s.names, arr, 0, NULL), LM_OK);
    for (int i = 0; i < s.count; i++) lm_array_release(arr[i]);
    free(arr);
    lm_tensor_set_free(&s);
    return nq;
}

static void *bytes(lm_array *a)
{
    void *p = malloc(lm_array_nbytes(a) + 1);
    assert_non_null(p);
    assert_int_equal(lm_array_read(a, p, a->dtype), LM_OK);
    return p;
}

/* the two reads agree: family, configs, every weight's name, dtype and bits */
static void same_read(const char *a_path, const char *b_path)
{
    lm_sd_single a, b;
    assert_int_equal(lm_sd_single_read(a_path, &a), LM_OK);
    assert_int_equal(lm_sd_single_read(b_path, &b), LM_OK);
    assert_int_equal(a.family, b.family);
    assert_int_equal(b.format, LM_FORMAT_GGUF);
    assert_int_equal(b.quant_kept + b.quant_dequantized, 0);
    assert_true(cJSON_Compare(a.scheduler, b.scheduler, true));
    int n = 0;
    for (int c = 0; c < 4; c++) {
        lm_sd_component *x = comp_of(&a, c), *y = comp_of(&b, c);
        assert_true((x->config == NULL) == (y->config == NULL));
        if (!x->config) continue;
        assert_true(cJSON_Compare(x->config, y->config, true));
        assert_int_equal(x->weights.count, y->weights.count);
        for (int i = 0; i < x->weights.count; i++, n++) {
            assert_string_equal(x->weights.names[i], y->weights.names[i]);
            lm_array *p = x->weights.arrays[i], *q = y->weights.arrays[i];
            assert_int_equal(p->dtype, q->dtype);
            assert_int_equal(lm_array_nbytes(p), lm_array_nbytes(q));
            void *u = bytes(p), *v = bytes(q);
            assert_memory_equal(u, v, lm_array_nbytes(p));
            free(u);
            free(v);
        }
    }
    printf("  %s == %s: %s, configs and %d weights bit for bit\n", b_path, a_path,
           lm_sd_family_name(b.family), n);
    lm_sd_single_free(&a);
    lm_sd_single_free(&b);
}

static void test_unquantized(void **state)
{
    (void)state;
    static const char *const models[2] = {"sd1", "sdxl"};
    for (int m = 0; m < 2; m++) {
        char g[256], g16[256], t16[256];
        snprintf(g, sizeof g, "%s/%s.gguf", tmpdir, models[m]);
        snprintf(g16, sizeof g16, "%s/%s-f16.gguf", tmpdir, models[m]);
        snprintf(t16, sizeof t16, "%s/%s-f16.safetensors", tmpdir, models[m]);
        write_gguf(models[m], g, LM_DTYPE_COUNT, false, NULL);
        write_gguf(models[m], g16, LM_DTYPE_COUNT, true, t16);
        same_read(single(models[m]), g);
        same_read(t16, g16);
    }
}

static lm_array *ref_get(const lm_tensor_set *r, const char *model, const char *name)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", model, name);
    int i = lm_tensor_set_find(r, k);
    return i < 0 ? NULL : r->arrays[i];
}

/* max |a - b| / max |b| over the elements, as f32 */
static double rel_err(lm_array *a, lm_array *b)
{
    int64_t n = b->size;
    float *x = tu_read_f32(a), *y = tu_read_f32(b);
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(isfinite(x[i]));
        d = fmax(d, fabs((double)x[i] - y[i]));
        r = fmax(r, fabs((double)y[i]));
    }
    free(x);
    free(y);
    return r > 0 ? d / r : d;
}

/* the UNet of path (read onto dev) on diffusers' inputs for model */
static lm_array *unet_out(const char *path, const char *model, lm_device *dev, int *kept, int *deq)
{
    lm_tensor_set ru;
    assert_int_equal(lm_load_file(DIR "ref_unet.safetensors", &ru), LM_OK);
    lm_sd_single s;
    lm_sd_single_opts o = {.dev = dev};
    if (lm_sd_single_read_opts(path, &o, &s) != LM_OK) fail_msg("%s", lm_error_message());
    *kept = s.quant_kept;
    *deq = s.quant_dequantized;
    int nq = 0;
    for (int i = 0; i < s.unet.weights.count; i++) nq += lm_dtype_is_quant(s.unet.weights.arrays[i]->dtype);
    lm_unet *u = lm_unet_load_from(s.unet.config, &s.unet.weights, s.file, LM_F32, dev);
    if (!u) fail_msg("%s", lm_error_message());
    lm_array *x = ref_get(&ru, model, "x"), *t = ref_get(&ru, model, "t");
    lm_array *ctx = ref_get(&ru, model, "ctx"), *te = ref_get(&ru, model, "text_embeds");
    lm_array *ti = ref_get(&ru, model, "time_ids");
    assert_non_null(x);
    lm_array *y = lm_unet_forward(u, x, t, ctx, te, ti);
    if (!y || lm_array_eval(y) != LM_OK) fail_msg("%s", lm_error_message());
    lm_array *h = lm_array_to(y, lm_device_cpu());
    assert_non_null(h);
    assert_int_equal(lm_array_eval(h), LM_OK);
    printf("    %s on %s: %d UNet weights quantized in the model, %d file tensors kept quantized, "
           "%d dequantized at load\n", path, dev->spec, nq, *kept, *deq);
    lm_array_release(y);
    lm_unet_free(u);
    lm_sd_single_free(&s);
    lm_tensor_set_free(&ru);
    return h;
}

static void test_quantized(void **state)
{
    (void)state;
    static const char *const models[2] = {"sd1", "sdxl"};
    for (int m = 0; m < 2; m++) {
        int kept, deq;
        lm_array *ref = unet_out(single(models[m]), models[m], lm_device_cpu(), &kept, &deq);
        static const lm_dtype qs[2] = {LM_Q8_0, LM_Q4_K};
        for (int k = 0; k < 2; k++) {
            char g[256];
            snprintf(g, sizeof g, "%s/%s-%s.gguf", tmpdir, models[m], lm_dtype_name(qs[k]));
            int nq = write_gguf(models[m], g, qs[k], false, NULL);
            assert_true(nq > 0);
            lm_array *y = unet_out(g, models[m], lm_device_cpu(), &kept, &deq);
            /* the CPU runs QLINEAR with these: every quantized tensor is a
             * linear weight kept as it is, but the text encoders' embeddings
             * and SDXL's OpenCLIP projection, dequantized */
            assert_true(kept > 0);
            assert_int_equal(kept + deq, nq);
            double e = rel_err(y, ref);
            printf("  %s %s: UNet output vs f32: max |diff| / max |f32| = %.3g\n", models[m],
                   lm_dtype_name(qs[k]), e);
            if (qs[k] == LM_Q8_0) assert_true(e < 0.02);
            lm_array_release(y);
        }
        lm_array_release(ref);
    }
}

/* On a Vulkan device: the quantized file loads (QLINEAR where its backend
 * says it runs it, dequantized at load otherwise) and computes what the CPU
 * computes from the same file. */
static void test_vulkan(void **state)
{
    (void)state;
    lm_device *vk = NULL;
    for (int i = 0; i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) { vk = lm_device_at(i); break; }
    if (!vk) {
        printf("no Vulkan device: the Vulkan half skipped\n");
        skip();
    }
    char g[256];
    snprintf(g, sizeof g, "%s/sd1-vk-q8_0.gguf", tmpdir);
    write_gguf("sd1", g, LM_Q8_0, false, NULL);
    int k1, d1, k2, d2;
    lm_array *c = unet_out(g, "sd1", lm_device_cpu(), &k1, &d1);
    lm_array *v = unet_out(g, "sd1", vk, &k2, &d2);
    assert_int_equal(k1 + d1, k2 + d2);
    double e = rel_err(v, c);
    printf("  sd1 q8_0 UNet on %s vs the CPU: max |diff| / max |cpu| = %.3g (%s)\n", vk->spec, e,
           k2 ? "QLINEAR on both" : "dequantized at load there, QLINEAR on the CPU");
    assert_true(e < 0.02);
    lm_array_release(c);
    lm_array_release(v);
}

/* A diffusers folder written under the single file's names
 * (lm_sd_single_from_folder, what `lumen convert DIR x.gguf` writes) and read
 * back as a GGUF gives the folder's own tensors, bit for bit, all of them. */
static void test_from_folder(void **state)
{
    (void)state;
    static const char *const models[3] = {"sd1", "sd2", "sdxl"};
    static const lm_sd_family fams[3] = {LM_SD_1, LM_SD_2, LM_SD_XL};
    static const char *const comp[4] = {"unet", "vae", "text_encoder", "text_encoder_2"};
    static const char *const stem[4] = {"diffusion_pytorch_model", "diffusion_pytorch_model", "model", "model"};
    for (int m = 0; m < 3; m++) {
        char dir[256], g[256];
        snprintf(dir, sizeof dir, DIR "%s", models[m]);
        snprintf(g, sizeof g, "%s/%s-folder.gguf", tmpdir, models[m]);
        lm_tensor_set t;
        lm_sd_family fam;
        if (lm_sd_single_from_folder(dir, &t, &fam) != LM_OK) fail_msg("%s", lm_error_message());
        assert_int_equal(fam, fams[m]);
        assert_int_equal(lm_save_gguf(g, t.count, (const char *const *)t.names, t.arrays, 0, NULL), LM_OK);
        lm_tensor_set_free(&t);
        lm_sd_single s;
        if (lm_sd_single_read(g, &s) != LM_OK) fail_msg("%s", lm_error_message());
        assert_int_equal(s.family, fams[m]);
        int n = 0;
        for (int c = 0; c < 4; c++) {
            lm_sd_component *x = comp_of(&s, c);
            if (!x->config) continue;
            char cd[300];
            snprintf(cd, sizeof cd, "%s/%s", dir, comp[c]);
            lm_tensor_set ref;
            assert_int_equal(lm_dfs_load_weights_stem(cd, stem[c], NULL, lm_device_cpu(), &ref, NULL), LM_OK);
            int nref = 0;
            for (int i = 0; i < ref.count; i++) nref += !strstr(ref.names[i], "position_ids");
            assert_int_equal(x->weights.count, nref);
            for (int i = 0; i < x->weights.count; i++, n++) {
                const char *nm = x->weights.names[i];
                int k = lm_tensor_set_find(&ref, nm);
                if (k < 0 && !strncmp(nm, "text_model.", 11)) k = lm_tensor_set_find(&ref, nm + 11);
                if (k < 0) fail_msg("%s: %s/%s not in the folder", models[m], comp[c], nm);
                lm_array *a = x->weights.arrays[i], *b = ref.arrays[k];
                assert_int_equal(a->dtype, b->dtype);
                assert_int_equal(lm_array_nbytes(a), lm_array_nbytes(b));
                void *u = bytes(a), *v = bytes(b);
                assert_memory_equal(u, v, lm_array_nbytes(a));
                free(u);
                free(v);
            }
            lm_tensor_set_free(&ref);
        }
        printf("  %s folder -> original names -> GGUF -> read: %d weights equal to the folder's, bit for bit\n",
               models[m], n);
        lm_sd_single_free(&s);
    }
}

/* ---- errors ---- */

static void expect_error(const char *file, const char *what)
{
    lm_sd_single s;
    lm_status st = lm_sd_single_read(file, &s);
    printf("  error: %s\n", lm_error_message());
    assert_int_not_equal(st, LM_OK);
    assert_non_null(strstr(lm_error_message(), file));
    if (what) assert_non_null(strstr(lm_error_message(), what));
    assert_int_equal(s.unet.weights.count, 0);
}

/* sd1 as GGUF with key `drop` left out and (name, a) put in its place or added */
static void rewrite(const char *out, const char *drop, const char *name, lm_array *a)
{
    lm_tensor_set s;
    assert_int_equal(lm_load_file_to(single("sd1"), lm_device_cpu(), &s), LM_OK);
    const char **names = calloc((size_t)s.count + 1, sizeof *names);
    lm_array **arrs = calloc((size_t)s.count + 1, sizeof *arrs);
    int n = 0;
    for (int i = 0; i < s.count; i++) {
        if (drop && !strcmp(s.names[i], drop)) continue;
        names[n] = s.names[i];
        arrs[n++] = name && !strcmp(s.names[i], name) ? a : s.arrays[i];
    }
    assert_int_equal(lm_save_gguf(out, n, names, arrs, 0, NULL), LM_OK);
    free(names);
    free(arrs);
    lm_tensor_set_free(&s);
}

static void test_errors(void **state)
{
    (void)state;
    char p[256], g[256];
    /* truncated: the last tensor's data cut short */
    snprintf(g, sizeof g, "%s/whole.gguf", tmpdir);
    write_gguf("sd1", g, LM_Q8_0, false, NULL);
    FILE *f = fopen(g, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    snprintf(p, sizeof p, "%s/truncated.gguf", tmpdir);
    f = fopen(p, "wb");
    assert_int_equal(fwrite(buf, 1, (size_t)len - 100, f), (size_t)len - 100);
    fclose(f);
    expect_error(p, NULL);
    /* a quantized type on a tensor that cannot hold one: conv_in's kernel
     * (ggml rows of 3) marked q8_0 in its tensor info (name, n_dims, ne[],
     * type) */
    static const char conv_in[] = "model.diffusion_model.input_blocks.0.0.weight";
    char *at = memmem(buf, (size_t)len, conv_in, sizeof conv_in - 1);
    assert_non_null(at);
    size_t off = (size_t)(at - buf) + sizeof conv_in - 1;
    uint32_t nd, q8 = 8;
    memcpy(&nd, buf + off, 4);
    assert_int_equal(nd, 4);
    memcpy(buf + off + 4 + 8 * nd, &q8, 4);
    snprintf(p, sizeof p, "%s/badtype.gguf", tmpdir);
    f = fopen(p, "wb");
    assert_int_equal(fwrite(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    free(buf);
    expect_error(p, "input_blocks.0.0.weight' (q8_0): first dimension 3 is not a multiple");
    /* a key missing */
    snprintf(p, sizeof p, "%s/missing.gguf", tmpdir);
    rewrite(p, "model.diffusion_model.output_blocks.1.0.out_layers.3.bias", NULL, NULL);
    expect_error(p, "missing key model.diffusion_model.output_blocks.1.0.out_layers.3.bias");
    /* a wrong shape (a quantized one: the shape is still in elements) */
    lm_tensor_set ref;
    assert_int_equal(lm_load_file(single("sd1"), &ref), LM_OK);
    const char *k = "model.diffusion_model.time_embed.2.weight";
    int i = lm_tensor_set_find(&ref, k);
    assert_true(i >= 0);
    int64_t sh[2] = {ref.arrays[i]->shape[0], 2 * ref.arrays[i]->shape[1]};
    lm_array *z = lm_zeros(2, sh, LM_F32, lm_device_cpu()), *zq = lm_quantize(z, LM_Q8_0);
    assert_non_null(zq);
    snprintf(p, sizeof p, "%s/shape.gguf", tmpdir);
    rewrite(p, NULL, k, zq);
    expect_error(p, "time_embed.2.weight has shape");
    assert_non_null(strstr(lm_error_message(), "needs"));
    lm_array_release(zq);
    lm_array_release(z);
    /* an integer weight: no dtype a model computes with */
    k = "model.diffusion_model.time_embed.2.bias";
    i = lm_tensor_set_find(&ref, k);
    assert_true(i >= 0);
    z = lm_zeros(1, ref.arrays[i]->shape, LM_I32, lm_device_cpu());
    snprintf(p, sizeof p, "%s/int.gguf", tmpdir);
    rewrite(p, NULL, k, z);
    expect_error(p, "time_embed.2.bias [");
    assert_non_null(strstr(lm_error_message(), "i32"));
    lm_array_release(z);
    /* a quantized norm weight (stable-diffusion.cpp's converter quantizes any
     * tensor with rows of whole blocks): dequantized at load */
    k = "model.diffusion_model.out.0.weight";
    i = lm_tensor_set_find(&ref, k);
    assert_true(i >= 0 && ref.arrays[i]->shape[0] % 32 == 0);
    zq = lm_quantize(ref.arrays[i], LM_Q8_0);
    assert_non_null(zq);
    snprintf(p, sizeof p, "%s/qnorm.gguf", tmpdir);
    rewrite(p, NULL, k, zq);
    lm_sd_single s;
    assert_int_equal(lm_sd_single_read(p, &s), LM_OK);
    assert_int_equal(s.quant_dequantized, 1);
    i = lm_tensor_set_find(&s.unet.weights, "conv_norm_out.weight");
    assert_true(i >= 0);
    assert_int_equal(s.unet.weights.arrays[i]->dtype, LM_F32);
    lm_sd_single_free(&s);
    lm_array_release(zq);
    lm_tensor_set_free(&ref);
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lumen_sdg_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    if (!exists(single("sd1")) || !exists(single("sdxl")) || !exists(DIR "ref_unet.safetensors")) {
        fprintf(stderr, "fixtures missing: %s (make diffusion-fixtures) or " DIR "ref_unet.safetensors\n",
                single("sd1"));
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unquantized),
        cmocka_unit_test(test_quantized),
        cmocka_unit_test(test_vulkan),
        cmocka_unit_test(test_from_folder),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
