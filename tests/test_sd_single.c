/* test_sd_single.c - models/sd_single.c against the single files that
 * diffusers' scripts/convert_diffusers_to_original_{stable_diffusion,sdxl}.py
 * wrote from tiny random pipelines (tests/ref/gen_diffusion.py: sd1.safetensors,
 * sd2.safetensors, sdxl.safetensors beside the diffusers folders sd1/, sd2/,
 * sdxl/).
 *
 * For each: the family; every renamed tensor equal, bit for bit, to the
 * diffusers folder's tensor of the same name, and the two sets of names
 * equal; the inferred configs against the folders' config.json (every
 * difference printed; none allowed on the keys the shapes decide); the
 * configs with config_dir equal to the folder's; the text encoders built
 * through lm_clip_text_load_from giving the same bits as the folder's.
 * Errors: an unknown key, a missing key, a truncated tensor, shapes that
 * contradict the inferred config, a config_dir that contradicts the shapes,
 * a file of no known family, a missing tokenizer; the skip list. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/clip_text.h"
#include "models/sd_single.h"
/* The UNet and VAE loaders come from their own branches (issue 24): the
 * end-to-end half runs where they are merged. */
#if __has_include("models/unet.h") && __has_include("models/vae.h")
#include "models/unet.h"
#include "models/vae.h"
#define HAVE_NETS 1
#endif

#define DIR "tests/ref/diffusion/"

/* the single files: built by `make diffusion-fixtures` (tests/ref/make_single.py)
 * into $BUILD/ref/diffusion/, not committed */
static const char *single(const char *model)
{
    static char buf[4][512];
    static int k;
    const char *b = getenv("BUILD");
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/ref/diffusion/%s.safetensors", b && *b ? b : "build", model);
    return p;
}

static const char *const comp_names[4] = {"unet", "vae", "text_encoder", "text_encoder_2"};

static lm_sd_component *comp_of(lm_sd_single *s, int c)
{
    lm_sd_component *v[4] = {&s->unet, &s->vae, &s->text_encoder, &s->text_encoder_2};
    return v[c];
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* the folder's weights of one component (either variant) */
static void load_folder(const char *model, int c, lm_tensor_set *out)
{
    static const char *const stems[2] = {"diffusion_pytorch_model", "model"};
    static const char *const vars[2] = {"", ".fp16"};
    char p[512];
    for (int s = 0; s < 2; s++)
        for (int v = 0; v < 2; v++) {
            snprintf(p, sizeof p, DIR "%s/%s/%s%s.safetensors", model, comp_names[c], stems[s], vars[v]);
            if (!exists(p)) continue;
            assert_int_equal(lm_load_file(p, out), LM_OK);
            return;
        }
    fail_msg("no weights for %s/%s", model, comp_names[c]);
}

/* transformers 5 saves CLIPTextModel without "text_model.": names compare
 * without it */
static const char *bare(const char *n)
{
    return strncmp(n, "text_model.", 11) ? n : n + 11;
}

static int find_bare(const lm_tensor_set *s, const char *name)
{
    for (int i = 0; i < s->count; i++)
        if (!strcmp(bare(s->names[i]), bare(name))) return i;
    return -1;
}

static void *bytes(lm_array *a)
{
    void *p = malloc(lm_array_nbytes(a) + 1);
    assert_non_null(p);
    assert_int_equal(lm_array_read(a, p, a->dtype), LM_OK);
    return p;
}

/* every tensor of mine equals the folder's of the same name; same names */
static void same_tensors(const char *model, int c, const lm_tensor_set *mine)
{
    lm_tensor_set ref = {0};
    load_folder(model, c, &ref);
    int bad = 0, skipped = 0;
    for (int i = 0; i < mine->count; i++) {
        int j = find_bare(&ref, mine->names[i]);
        if (j < 0) {
            fprintf(stderr, "  %s/%s: %s is not in the folder\n", model, comp_names[c], mine->names[i]);
            bad++;
            continue;
        }
        lm_array *a = mine->arrays[i], *b = ref.arrays[j];
        bool same = a->dtype == b->dtype && a->ndim == b->ndim;
        for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
        if (same) {
            void *x = bytes(a), *y = bytes(b);
            same = !memcmp(x, y, lm_array_nbytes(a));
            free(x);
            free(y);
        }
        if (!same) {
            fprintf(stderr, "  %s/%s: %s differs\n", model, comp_names[c], mine->names[i]);
            bad++;
        }
    }
    for (int j = 0; j < ref.count; j++) {
        if (strstr(ref.names[j], "position_ids")) { skipped++; continue; }
        if (find_bare(mine, ref.names[j]) < 0) {
            fprintf(stderr, "  %s/%s: the folder's %s was not made\n", model, comp_names[c], ref.names[j]);
            bad++;
        }
    }
    printf("  %s/%s: %d tensors, %d bit-identical to the folder's (%d folder buffers skipped)\n",
           model, comp_names[c], mine->count, mine->count - bad, skipped);
    assert_int_equal(bad, 0);
    assert_int_equal(mine->count + skipped, ref.count);
    lm_tensor_set_free(&ref);
}

/* keys whose value the tensor shapes decide */
static bool decided(const char *k)
{
    static const char *const keys[] = {
        "in_channels", "out_channels", "block_out_channels", "layers_per_block",
        "down_block_types", "up_block_types", "mid_block_type", "cross_attention_dim",
        "use_linear_projection", "transformer_layers_per_block", "addition_embed_type",
        "addition_time_embed_dim", "projection_class_embeddings_input_dim", "latent_channels",
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "max_position_embeddings", "projection_dim", "time_embedding_dim",
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(k, keys[i])) return true;
    return false;
}

/* transformer_layers_per_block 1 and [1, 1] say the same */
static bool same_value(const char *k, const cJSON *a, const cJSON *b)
{
    if (cJSON_Compare(a, b, true)) return true;
    if (!strcmp(k, "transformer_layers_per_block") || !strcmp(k, "attention_head_dim")) {
        const cJSON *n = cJSON_IsNumber(a) ? a : cJSON_IsNumber(b) ? b : NULL;
        const cJSON *l = n == a ? b : a;
        if (!n || !cJSON_IsArray(l)) return false;
        const cJSON *e;
        cJSON_ArrayForEach(e, l) if (!cJSON_IsNumber(e) || e->valuedouble != n->valuedouble) return false;
        return true;
    }
    return false;
}

/* compares the inferred config with the folder's; returns the number of
 * differences on decided keys, prints all */
static int compare_config(const char *model, const char *sub, const char *file, const cJSON *mine,
                          bool strict)
{
    char p[512];
    snprintf(p, sizeof p, DIR "%s/%s/%s", model, sub, file);
    FILE *f = fopen(p, "rb");
    if (!f) fail_msg("%s missing", p);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *ref = cJSON_Parse(buf);
    assert_non_null(ref);
    int bad = 0, conv = 0, same = 0;
    for (const cJSON *e = ref->child; e; e = e->next) {
        if (e->string[0] == '_' || !strcmp(e->string, "transformers_version") ||
            !strcmp(e->string, "dtype") || !strcmp(e->string, "torch_dtype"))
            continue;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(mine, e->string);
        /* absent means diffusers' default, which is null for these */
        if ((m && same_value(e->string, m, e)) || (!m && cJSON_IsNull(e))) { same++; continue; }
        /* projection_dim of a model without a projection is unused, so no
         * shape tells it */
        if (!m && !strcmp(e->string, "projection_dim") && !strict) { conv++; continue; }
        char *x = m ? cJSON_PrintUnformatted(m) : NULL, *y = cJSON_PrintUnformatted(e);
        bool hard = strict || decided(e->string);
        /* a key inferred only when the model has it (absent = diffusers' default) */
        if (!m && !hard) {
            free(y);
            continue;
        }
        printf("  %s/%s: %s: inferred %s, folder %s%s\n", model, sub, e->string, x ? x : "(absent)",
               y, hard ? "  <-- shapes decide this" : "  (a convention)");
        if (hard) bad++;
        else conv++;
        free(x);
        free(y);
    }
    printf("  %s/%s: %d keys agree, %d convention differences, %d errors\n", model, sub, same, conv, bad);
    cJSON_Delete(ref);
    return bad;
}

static void check_model(const char *model, lm_sd_family fam)
{
    char path[256], folder[256];
    snprintf(path, sizeof path, "%s", single(model));
    snprintf(folder, sizeof folder, DIR "%s", model);
    lm_sd_single s;
    lm_sd_single_opts o = {0};
    if (fam == LM_SD_2) o.prediction_type = "v_prediction";
    lm_status st = lm_sd_single_read_opts(path, &o, &s);
    if (st) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    assert_int_equal(s.family, fam);
    printf("  %s: family %s\n", model, lm_sd_family_name(s.family));
    int bad = 0;
    for (int c = 0; c < 4; c++) {
        lm_sd_component *k = comp_of(&s, c);
        if (c == 3 && fam != LM_SD_XL) {
            assert_null(k->config);
            assert_int_equal(k->weights.count, 0);
            continue;
        }
        assert_non_null(k->config);
        same_tensors(model, c, &k->weights);
        bad += compare_config(model, comp_names[c], "config.json", k->config, false);
    }
    bad += compare_config(model, "scheduler", "scheduler_config.json", s.scheduler, false);
    assert_int_equal(bad, 0);
    const char *t1, *t2;
    assert_int_not_equal(lm_sd_single_tokenizers(&s, &t1, &t2), LM_OK);
    printf("  without a tokenizer: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "no tokenizer"));
    lm_sd_single_free(&s);

    /* with the folder's configs: equal on every key; tokenizers found */
    o.config_dir = folder;
    st = lm_sd_single_read_opts(path, &o, &s);
    if (st) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    bad = 0;
    for (int c = 0; c < (fam == LM_SD_XL ? 4 : 3); c++)
        bad += compare_config(model, comp_names[c], "config.json", comp_of(&s, c)->config, true);
    assert_int_equal(bad, 0);
    assert_int_equal(lm_sd_single_tokenizers(&s, &t1, &t2), LM_OK);
    assert_non_null(t1);
    if (fam == LM_SD_XL) assert_non_null(t2);

    /* the text encoders from the single file compute what the folder's do */
    for (int c = 2; c < (fam == LM_SD_XL ? 4 : 3); c++) {
        char sub[300];
        snprintf(sub, sizeof sub, "%s/%s", folder, comp_names[c]);
        lm_clip_text *ref = lm_clip_text_load(sub, NULL, LM_F32, lm_device_cpu());
        lm_clip_text *mine = lm_clip_text_load_from(comp_of(&s, c)->config, &comp_of(&s, c)->weights,
                                                    path, LM_F32, lm_device_cpu());
        if (!ref || !mine) fprintf(stderr, "%s\n", lm_error_message());
        assert_non_null(ref);
        assert_non_null(mine);
        assert_int_equal(comp_of(&s, c)->weights.count, 0);
        int64_t V = lm_clip_text_get_config(ref)->vocab_size;
        int32_t ids[2 * 7];
        for (int i = 0; i < 14; i++) ids[i] = (int32_t)((i * 37 + 5) % V);
        lm_clip_text_out a, b;
        assert_int_equal(lm_clip_text_forward(ref, ids, 2, 7, &a), LM_OK);
        assert_int_equal(lm_clip_text_forward(mine, ids, 2, 7, &b), LM_OK);
        lm_array *pa[2] = {a.last_hidden_state, a.text_embeds ? a.text_embeds : a.pooled};
        lm_array *pb[2] = {b.last_hidden_state, b.text_embeds ? b.text_embeds : b.pooled};
        for (int k = 0; k < 2; k++) {
            assert_non_null(pb[k]);
            assert_int_equal(lm_array_nbytes(pa[k]), lm_array_nbytes(pb[k]));
            void *x = bytes(pa[k]), *y = bytes(pb[k]);
            assert_memory_equal(x, y, lm_array_nbytes(pa[k]));
            free(x);
            free(y);
        }
        printf("  %s/%s: lm_clip_text_load_from output bit-identical to the folder's\n", model,
               comp_names[c]);
        lm_clip_text_out_free(&a);
        lm_clip_text_out_free(&b);
        lm_clip_text_free(ref);
        lm_clip_text_free(mine);
    }
    lm_sd_single_free(&s);
}

/* the same tensors when the file is placed on a Vulkan device (the views:
 * qkv thirds, transposes, reshapes, run there) */
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
    static const char *const models[3] = {"sd1", "sd2", "sdxl"};
    for (int m = 0; m < 3; m++) {
        char path[256];
        snprintf(path, sizeof path, "%s", single(models[m]));
        lm_sd_single s;
        lm_sd_single_opts o = {.dev = vk};
        assert_int_equal(lm_sd_single_read_opts(path, &o, &s), LM_OK);
        for (int c = 0; c < 4; c++)
            if (comp_of(&s, c)->config) {
                for (int i = 0; i < comp_of(&s, c)->weights.count; i++)
                    assert_ptr_equal(comp_of(&s, c)->weights.arrays[i]->device, vk);
                same_tensors(models[m], c, &comp_of(&s, c)->weights);
            }
        lm_sd_single_free(&s);
    }
}

#ifdef HAVE_NETS
static void same_bits(const char *what, lm_array *a, lm_array *b)
{
    if (!a || !b) fprintf(stderr, "%s: %s\n", what, lm_error_message());
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(lm_array_nbytes(a), lm_array_nbytes(b));
    void *x = bytes(a), *y = bytes(b);
    assert_memory_equal(x, y, lm_array_nbytes(a));
    free(x);
    free(y);
}

static double max_abs_diff(lm_array *a, lm_array *ref)
{
    lm_array *d = lm_binary(LM_OP_SUB, a, ref);
    lm_array *m = d ? lm_unary(LM_OP_ABS, d) : NULL;
    double v = -1;
    int64_t n = m ? m->size : 0;
    float *buf = malloc(sizeof *buf * (size_t)(n + 1));
    if (m && lm_array_read(m, buf, LM_F32) == LM_OK)
        for (int64_t i = 0; i < n; i++) v = buf[i] > v ? buf[i] : v;
    free(buf);
    lm_array_release(d);
    lm_array_release(m);
    return v;
}

static lm_array *ref_get(const lm_tensor_set *r, const char *model, const char *name)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", model, name);
    int i = lm_tensor_set_find(r, k);
    return i < 0 ? NULL : r->arrays[i];
}

/* the UNet and VAE built by lm_unet_load_from / lm_vae_load_from from the
 * single file's inferred configs (no config_dir) compute the same bits as
 * those loaded from the diffusers folders, on diffusers' inputs */
static void test_end_to_end(void **state)
{
    (void)state;
    static const char *const models[3] = {"sd1", "sd2", "sdxl"};
    lm_tensor_set ru, rv;
    assert_int_equal(lm_load_file(DIR "ref_unet.safetensors", &ru), LM_OK);
    assert_int_equal(lm_load_file(DIR "ref_vae.safetensors", &rv), LM_OK);
    for (int m = 0; m < 3; m++) {
        lm_sd_single s;
        lm_sd_single_opts o = {0};
        if (m == 1) o.prediction_type = "v_prediction";
        assert_int_equal(lm_sd_single_read_opts(single(models[m]), &o, &s), LM_OK);
        char dir[256];
        snprintf(dir, sizeof dir, DIR "%s/unet", models[m]);
        lm_unet *ua = lm_unet_load(dir, NULL, LM_F32, lm_device_cpu());
        lm_unet *ub = lm_unet_load_from(s.unet.config, &s.unet.weights, s.file, LM_F32, lm_device_cpu());
        if (!ua || !ub) fprintf(stderr, "%s\n", lm_error_message());
        assert_non_null(ua);
        assert_non_null(ub);
        lm_array *x = ref_get(&ru, models[m], "x"), *t = ref_get(&ru, models[m], "t");
        lm_array *ctx = ref_get(&ru, models[m], "ctx"), *te = ref_get(&ru, models[m], "text_embeds");
        lm_array *ti = ref_get(&ru, models[m], "time_ids"), *want = ref_get(&ru, models[m], "out");
        assert_non_null(x);
        lm_array *oa = lm_unet_forward(ua, x, t, ctx, te, ti);
        lm_array *ob = lm_unet_forward(ub, x, t, ctx, te, ti);
        same_bits("unet", oa, ob);
        printf("  %s: UNet from the single file == UNet from the folder, bit for bit "
               "(max |diff| to diffusers %.3g)\n", models[m], want ? max_abs_diff(ob, want) : -1.0);
        lm_array_release(oa);
        lm_array_release(ob);
        lm_unet_free(ua);
        lm_unet_free(ub);

        snprintf(dir, sizeof dir, DIR "%s/vae", models[m]);
        lm_vae *va = lm_vae_load(dir, NULL, LM_F32, lm_device_cpu());
        lm_vae *vb = lm_vae_load_from(s.vae.config, &s.vae.weights, s.file, LM_F32, lm_device_cpu());
        if (!va || !vb) fprintf(stderr, "%s\n", lm_error_message());
        assert_non_null(va);
        assert_non_null(vb);
        lm_vae_tiling off = {.mode = LM_VAE_TILING_OFF};
        assert_int_equal(lm_vae_set_tiling(va, &off), LM_OK);
        assert_int_equal(lm_vae_set_tiling(vb, &off), LM_OK);
        lm_array *z = ref_get(&rv, models[m], "z"), *img = ref_get(&rv, models[m], "img");
        if (!z) z = ref_get(&rv, "sd1", "z");
        if (!img) img = ref_get(&rv, "sd1", "img");
        assert_non_null(z);
        assert_non_null(img);
        lm_array *da = lm_vae_decode(va, z), *db = lm_vae_decode(vb, z);
        same_bits("vae decode", da, db);
        lm_array *ma, *la, *mb, *lb;
        assert_int_equal(lm_vae_encode(va, img, &ma, &la), LM_OK);
        assert_int_equal(lm_vae_encode(vb, img, &mb, &lb), LM_OK);
        same_bits("vae encode mean", ma, mb);
        same_bits("vae encode logvar", la, lb);
        printf("  %s: VAE from the single file == VAE from the folder (encode, decode), bit for bit\n",
               models[m]);
        lm_array_release(da); lm_array_release(db);
        lm_array_release(ma); lm_array_release(la); lm_array_release(mb); lm_array_release(lb);
        lm_vae_free(va);
        lm_vae_free(vb);
        lm_sd_single_free(&s);
    }
    lm_tensor_set_free(&ru);
    lm_tensor_set_free(&rv);
}
#endif

static void test_sd1(void **state) { (void)state; check_model("sd1", LM_SD_1); }
static void test_sd2(void **state) { (void)state; check_model("sd2", LM_SD_2); }
static void test_sdxl(void **state) { (void)state; check_model("sdxl", LM_SD_XL); }

/* ---- errors ---- */

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lumen_sds_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    if (!exists(single("sd1")) || !exists(DIR "sd1/unet/config.json")) {
        fprintf(stderr, "fixtures missing: %s (make diffusion-fixtures) or " DIR "sd1/\n",
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

/* sd1.safetensors rewritten: drop the key `drop`, replace or add (name, a) */
static void rewrite(const char *out, const char *drop, const char *name, lm_array *a)
{
    lm_tensor_set s;
    assert_int_equal(lm_load_file(single("sd1"), &s), LM_OK);
    const char **names = calloc((size_t)s.count + 1, sizeof *names);
    lm_array **arrs = calloc((size_t)s.count + 1, sizeof *arrs);
    int n = 0;
    bool put = false;
    for (int i = 0; i < s.count; i++) {
        if (drop && !strcmp(s.names[i], drop)) continue;
        names[n] = s.names[i];
        arrs[n] = s.arrays[i];
        if (name && !strcmp(s.names[i], name)) arrs[n] = a, put = true;
        n++;
    }
    if (name && !put) names[n] = name, arrs[n++] = a;
    assert_int_equal(lm_save_safetensors(out, n, names, arrs, 0, NULL), LM_OK);
    free(names);
    free(arrs);
    lm_tensor_set_free(&s);
}

static void expect_error(const char *file, const char *what)
{
    lm_sd_single s;
    lm_status st = lm_sd_single_read(file, &s);
    printf("  error: %s\n", lm_error_message());
    assert_int_not_equal(st, LM_OK);
    assert_non_null(strstr(lm_error_message(), what));
    assert_non_null(strstr(lm_error_message(), file));
    assert_int_equal(s.unet.weights.count, 0);
    assert_null(s.unet.config);
}

static lm_array *zeros(int nd, const int64_t *shape)
{
    lm_array *a = lm_zeros(nd, shape, LM_F16, lm_device_cpu());
    assert_non_null(a);
    return a;
}

static void test_errors(void **state)
{
    (void)state;
    char p[256];
    int64_t s3[1] = {3};
    /* an unknown key */
    snprintf(p, sizeof p, "%s/unknown.safetensors", tmpdir);
    lm_array *z = zeros(1, s3);
    rewrite(p, NULL, "model.diffusion_model.input_blocks.1.2.weight", z);
    expect_error(p, "unexpected key model.diffusion_model.input_blocks.1.2.weight [3]");
    lm_array_release(z);
    /* a missing one */
    snprintf(p, sizeof p, "%s/missing.safetensors", tmpdir);
    rewrite(p, "model.diffusion_model.output_blocks.1.0.out_layers.3.bias", NULL, NULL);
    expect_error(p, "missing key model.diffusion_model.output_blocks.1.0.out_layers.3.bias");
    /* a shape that contradicts the inferred config */
    lm_tensor_set ref;
    assert_int_equal(lm_load_file(single("sd1"), &ref), LM_OK);
    const char *k = "model.diffusion_model.middle_block.0.out_layers.3.weight";
    int i = lm_tensor_set_find(&ref, k);
    assert_true(i >= 0);
    int64_t sh[4] = {ref.arrays[i]->shape[0], ref.arrays[i]->shape[1], 1, 1};
    z = zeros(4, sh);
    snprintf(p, sizeof p, "%s/shape.safetensors", tmpdir);
    rewrite(p, NULL, k, z);
    lm_array_release(z);
    expect_error(p, "middle_block.0.out_layers.3.weight has shape");
    assert_non_null(strstr(lm_error_message(), "needs"));
    /* the VAE's 1x1 attention convs must be 1x1 */
    k = "first_stage_model.decoder.mid.attn_1.q.weight";
    i = lm_tensor_set_find(&ref, k);
    assert_true(i >= 0);
    int64_t sq[2] = {ref.arrays[i]->shape[0], ref.arrays[i]->shape[1]};
    z = zeros(2, sq);
    snprintf(p, sizeof p, "%s/vae.safetensors", tmpdir);
    rewrite(p, NULL, k, z);
    lm_array_release(z);
    expect_error(p, "mid.attn_1.q.weight has shape");
    /* the training leftovers on the skip list are skipped */
    int64_t T = 1000;
    z = zeros(1, &T);
    snprintf(p, sizeof p, "%s/skip.safetensors", tmpdir);
    rewrite(p, NULL, "alphas_cumprod", z);
    lm_sd_single s;
    assert_int_equal(lm_sd_single_read(p, &s), LM_OK);
    lm_sd_single_free(&s);
    lm_array_release(z);
    /* no family: the text encoder's keys gone */
    lm_tensor_set_free(&ref);
    assert_int_equal(lm_load_file(single("sd1"), &ref), LM_OK);
    const char **names = calloc((size_t)ref.count, sizeof *names);
    lm_array **arrs = calloc((size_t)ref.count, sizeof *arrs);
    int n = 0;
    for (int j = 0; j < ref.count; j++)
        if (strncmp(ref.names[j], "cond_stage_model.", 17)) names[n] = ref.names[j], arrs[n++] = ref.arrays[j];
    snprintf(p, sizeof p, "%s/nofamily.safetensors", tmpdir);
    assert_int_equal(lm_save_safetensors(p, n, names, arrs, 0, NULL), LM_OK);
    free(names);
    free(arrs);
    lm_tensor_set_free(&ref);
    expect_error(p, "not an SD 1.x, 2.x or SDXL");
    /* a truncated tensor: the file cut short */
    FILE *f = fopen(single("sd1"), "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    snprintf(p, sizeof p, "%s/truncated.safetensors", tmpdir);
    f = fopen(p, "wb");
    assert_int_equal(fwrite(buf, 1, (size_t)len - 100, f), (size_t)len - 100);
    fclose(f);
    free(buf);
    lm_status st = lm_sd_single_read(p, &s);
    printf("  error: %s\n", lm_error_message());
    assert_int_not_equal(st, LM_OK);
    assert_non_null(strstr(lm_error_message(), p));
    /* a config_dir that contradicts the shapes */
    char cd[256];
    snprintf(cd, sizeof cd, "%s/cfg", tmpdir);
    mkdir(cd, 0700);
    snprintf(p, sizeof p, "%s/cfg/unet", tmpdir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/cfg/unet/config.json", tmpdir);
    f = fopen(p, "w");
    fputs("{\"block_out_channels\": [320, 640], \"norm_num_groups\": 8}", f);
    fclose(f);
    lm_sd_single_opts o = {.config_dir = cd};
    st = lm_sd_single_read_opts(single("sd1"), &o, &s);
    printf("  error: %s\n", lm_error_message());
    assert_int_not_equal(st, LM_OK);
    assert_non_null(strstr(lm_error_message(), "block_out_channels"));
    /* a bad prediction type, a tokenizer folder without a vocabulary */
    o = (lm_sd_single_opts){.prediction_type = "sample"};
    assert_int_not_equal(lm_sd_single_read_opts(single("sd1"), &o, &s), LM_OK);
    printf("  error: %s\n", lm_error_message());
    o = (lm_sd_single_opts){.tokenizer = tmpdir};
    assert_int_not_equal(lm_sd_single_read_opts(single("sd1"), &o, &s), LM_OK);
    printf("  error: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "vocab.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd1),
        cmocka_unit_test(test_sd2),
        cmocka_unit_test(test_sdxl),
        cmocka_unit_test(test_vulkan),
#ifdef HAVE_NETS
        cmocka_unit_test(test_end_to_end),
#endif
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
