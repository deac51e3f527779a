/* test_dit_files.c - Z-Image and FLUX.2-klein transformers as one file
 * (models/dit_files.c): the fixtures' transformers written in the original
 * layout by tests/ref/make_dit_single.py ($BUILD/ref/dit/: zimage.safetensors
 * under model.diffusion_model., klein.safetensors without a prefix, and
 * both as ComfyUI-GGUF's Q8_0 GGUF).
 *
 * Each file is read back: the family its keys tell, the sizes inferred
 * from its shapes equal to the folder's transformer/config.json (a folder
 * saying only the RoPE axes given for what the tiny head size keeps from
 * being told), every tensor of the
 * safetensors files bit-identical to the folder's (the FLUX.2 qkv thirds
 * and the swapped modulation halves included), the GGUF's linear weights
 * kept Q8_0.  Whole 4-step 32x32 images (lm_sd_generate, tokenizer_dir =
 * the diffusers folder) from the single file equal the folder's: byte for
 * byte for the f32 safetensors, within 1e-2 for the Q8_0 GGUF, on the CPU
 * and on a Vulkan device where there is one; a folder's own
 * diffusion_pytorch_model.safetensors taken as a single file gives the
 * folder's image.  Errors: no tokenizer_dir, a
 * folder of the other family, a key missing, an unexpected key, a file
 * whose family cannot be told, a FLUX.1 file. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/gguf.h"
#include "core/io/io.h"
#include "quant.h"
#include "models/diffusers_config.h"
#include "models/dit_files.h"
#include "models/sd_pipeline.h"
#include "models/vae.h"

#define DIR "tests/ref/dit/"

static char tmp[256];

static const char *built(const char *name)
{
    static char p[4][512];
    static int k;
    const char *b = getenv("BUILD");
    char *r = p[k++ % 4];
    snprintf(r, 512, "%s/ref/dit/%s", b && *b ? b : "build", name);
    return r;
}

static lm_sd_pipeline *load(const char *path, const char *folder, lm_device *dev)
{
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = LM_F32;
    o.device = dev;
    o.vae_tiling = LM_VAE_TILING_OFF;
    o.tokenizer_dir = folder;
    lm_sd_pipeline *p = lm_sd_pipeline_load(path, &o);
    if (!p) fprintf(stderr, "%s: %s\n", path, lm_error_message());
    return p;
}

/* a whole 4-step 32x32 image of seed 7 */
static lm_array *image(lm_sd_pipeline *p, double cfg)
{
    const char *pr[1] = {"a dog is dancing"};
    lm_sd_gen_opts o;
    lm_sd_gen_opts_init_for(&o, p);
    o.prompts = pr;
    o.nprompts = 1;
    o.steps = 4;
    o.cfg = cfg;
    o.width = o.height = 32;
    o.seed = 7;
    o.max_sequence_length = 32;
    static const int klein_layers[2] = {1, 2};   /* the fixture's text_encoder_out_layers */
    if (lm_sd_pipeline_family(p) != LM_SD_ZIMAGE) {
        o.text_layers = klein_layers;
        o.n_text_layers = 2;
    }
    lm_array *img = lm_sd_generate(p, &o);
    if (!img) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(img);
    return img;
}

/* the folder's images against the single files' (safetensors bit-equal,
 * GGUF within 1e-2), with and without guidance */
static void whole(lm_device *dev)
{
    static const struct { const char *folder, *st, *gguf; lm_sd_family fam; double cfg; } m[] = {
        {DIR "zimage", "zimage.safetensors", "zimage_q8_0.gguf", LM_SD_ZIMAGE, 3},
        {DIR "klein", "klein.safetensors", "klein_q8_0.gguf", LM_SD_KLEIN_BASE, 4},
    };
    for (size_t k = 0; k < sizeof m / sizeof *m; k++) {
        lm_sd_pipeline *f = load(m[k].folder, NULL, dev), *s = load(built(m[k].st), m[k].folder, dev),
                       *g = load(built(m[k].gguf), m[k].folder, dev);
        assert_non_null(f);
        assert_non_null(s);
        assert_non_null(g);
        assert_int_equal(lm_sd_pipeline_family(s), m[k].fam);
        assert_int_equal(lm_sd_pipeline_family(g), m[k].fam);
        for (int c = 0; c < 2; c++) {
            double cfg = c ? m[k].cfg : (m[k].fam == LM_SD_ZIMAGE ? 0 : 1);
            lm_array *a = image(f, cfg), *b = image(s, cfg), *q = image(g, cfg);
            float *x = tu_read_f32(a), *y = tu_read_f32(b);
            assert_memory_equal(x, y, sizeof *x * (size_t)a->size);
            free(x);
            free(y);
            double e = tu_max_err(a, q);
            printf("  %-6s cfg %g: safetensors bit-equal, Q8_0 GGUF max abs difference %.3g\n",
                   lm_sd_family_name(m[k].fam), cfg, e);
            assert_true(e <= 1e-2);
            assert_true(e > 0);   /* the quantized weights took part */
            lm_array_release(a);
            lm_array_release(b);
            lm_array_release(q);
        }
        lm_sd_pipeline_free(f);
        lm_sd_pipeline_free(s);
        lm_sd_pipeline_free(g);
    }
}

static void test_whole_cpu(void **state)
{
    (void)state;
    whole(lm_device_cpu());
}

static void test_whole_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("  no Vulkan device: skipped");
    printf("  on %s:\n", vk->spec);
    whole(vk);
}

/* the file read back: family, config, tensors */
static void read_back(const char *file, const char *folder, lm_sd_family fam)
{
    lm_dit_file f;
    if (lm_dit_file_read(built(file), folder, lm_device_cpu(), &f) != LM_OK) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(f.family, fam);
    /* the inferred config, the folder's where the folder was given */
    char *cp = lm_dfs_path(folder, "transformer/config.json");
    size_t n;
    char *text = tu_slurp(cp, &n);
    cJSON *want = cJSON_Parse(text);
    assert_non_null(want);
    for (cJSON *it = want->child; it; it = it->next) {
        if (it->string[0] == '_') continue;
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(f.config, it->string);
        if (!got || !(cJSON_Compare(got, it, true) ||
                      (cJSON_IsNumber(got) && cJSON_IsNumber(it) && got->valuedouble == it->valuedouble)))
            fail_msg("%s: config %s differs", file, it->string);
    }
    /* the folder's tensors, bit for bit (safetensors), or the GGUF's Q8_0 kept */
    lm_tensor_set ref;
    char *wp = lm_dfs_path(folder, "transformer/diffusion_pytorch_model.safetensors");
    assert_int_equal(lm_load_file(wp, &ref), LM_OK);
    int fused = 0;
    for (int i = 0; i < ref.count; i++) {
        int j = lm_tensor_set_find(&f.weights, ref.names[i]);
        if (j < 0) {
            /* a quantized Z-Image qkv stays fused (attention.qkv) */
            assert_non_null(strstr(ref.names[i], ".attention.to_"));
            fused++;
            continue;
        }
        lm_array *a = f.weights.arrays[j], *b = ref.arrays[i];
        assert_int_equal(a->size, b->size);
        if (lm_dtype_is_quant(a->dtype)) continue;
        float *x = tu_read_f32(a), *y = tu_read_f32(b);
        if (f.format == LM_FORMAT_SAFETENSORS) assert_memory_equal(x, y, sizeof *x * (size_t)a->size);
        free(x);
        free(y);
    }
    /* 2 layers and 2 refiner blocks */
    assert_int_equal(fused, fam == LM_SD_ZIMAGE && f.format == LM_FORMAT_GGUF ? 3 * 4 : 0);
    printf("  %s: %s, %d tensors, %d quantized kept, %d dequantized\n", file, lm_sd_family_name(f.family),
           f.weights.count, f.quant_kept, f.quant_dequantized);
    if (f.format == LM_FORMAT_GGUF) {
        assert_true(f.quant_kept > 0);
        /* Z-Image's x_pad_token is Q8_0 in the file: dequantized */
        assert_int_equal(f.quant_dequantized, fam == LM_SD_ZIMAGE ? 1 : 0);
        const char *q = fam == LM_SD_ZIMAGE ? "layers.0.attention.qkv.weight" : "transformer_blocks.0.attn.to_k.weight";
        int j = lm_tensor_set_find(&f.weights, q);
        assert_true(j >= 0);
        assert_int_equal(f.weights.arrays[j]->dtype, LM_Q8_0);
    }
    lm_tensor_set_free(&ref);
    cJSON_Delete(want);
    free(text);
    free(cp);
    free(wp);
    lm_dit_file_free(&f);
}

static void test_read(void **state)
{
    (void)state;
    read_back("zimage.safetensors", DIR "zimage", LM_SD_ZIMAGE);
    read_back("klein.safetensors", DIR "klein", LM_SD_KLEIN);
    read_back("zimage_q8_0.gguf", DIR "zimage", LM_SD_ZIMAGE);
    read_back("klein_q8_0.gguf", DIR "klein", LM_SD_KLEIN);
    /* a diffusers-named transformer as one file: the folder's own, under
     * its names, taken as it is */
    static const char *const dfs[2] = {DIR "zimage", DIR "klein"};
    for (int k = 0; k < 2; k++) {
        char p[256];
        snprintf(p, sizeof p, "%s/transformer/diffusion_pytorch_model.safetensors", dfs[k]);
        lm_sd_pipeline *a = load(p, dfs[k], lm_device_cpu()), *b = load(dfs[k], NULL, lm_device_cpu());
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(lm_sd_pipeline_family(a), lm_sd_pipeline_family(b));
        lm_array *x = image(a, 0), *y = image(b, 0);
        assert_true(tu_max_err(x, y) == 0);
        printf("  %s: the folder's image\n", p);
        lm_array_release(x);
        lm_array_release(y);
        lm_sd_pipeline_free(a);
        lm_sd_pipeline_free(b);
    }
}

/* The config from the shapes alone: a folder whose transformer/config.json
 * says only the RoPE axes (what the tiny head size keeps from being told)
 * gives the sizes the fixtures' configs have */
static void test_infer(void **state)
{
    (void)state;
    static const struct { const char *file, *folder, *axes; const char *told[10]; } m[] = {
        {"zimage_q8_0.gguf", DIR "zimage", "{\"axes_dims\": [8, 4, 4]}",
         {"in_channels", "dim", "n_layers", "n_refiner_layers", "n_heads", "n_kv_heads", "cap_feat_dim",
          "qk_norm", "all_patch_size", NULL}},
        {"klein.safetensors", DIR "klein", "{\"axes_dims_rope\": [4, 4, 4, 4]}",
         {"in_channels", "num_layers", "num_single_layers", "attention_head_dim", "num_attention_heads",
          "joint_attention_dim", "timestep_guidance_channels", "mlp_ratio", "out_channels", "guidance_embeds"}},
    };
    for (size_t k = 0; k < sizeof m / sizeof *m; k++) {
        char d[300], p[400];
        snprintf(d, sizeof d, "%s/cfg%zu", tmp, k);
        snprintf(p, sizeof p, "%s/transformer", d);
        assert_int_equal(mkdir(d, 0755) == 0 && mkdir(p, 0755) == 0, 1);
        snprintf(p, sizeof p, "%s/transformer/config.json", d);
        tu_spit(p, m[k].axes, strlen(m[k].axes));
        lm_dit_file f;
        if (lm_dit_file_read(built(m[k].file), d, lm_device_cpu(), &f) != LM_OK) fprintf(stderr, "%s\n", lm_error_message());
        char *cp = lm_dfs_path(m[k].folder, "transformer/config.json");
        size_t n;
        char *text = tu_slurp(cp, &n);
        cJSON *want = cJSON_Parse(text);
        assert_non_null(want);
        for (int i = 0; i < 10 && m[k].told[i]; i++) {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(f.config, m[k].told[i]),
                        *b = cJSON_GetObjectItemCaseSensitive(want, m[k].told[i]);
            if (!a || !b || !(cJSON_Compare(a, b, true) ||
                              (cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble == b->valuedouble)))
                fail_msg("%s: inferred %s differs from %s", m[k].file, m[k].told[i], cp);
        }
        printf("  %s: the sizes from the shapes equal %s's\n", m[k].file, cp);
        unlink(p);
        snprintf(p, sizeof p, "%s/transformer", d);
        rmdir(p);
        rmdir(d);
        cJSON_Delete(want);
        free(text);
        free(cp);
        lm_dit_file_free(&f);
    }
}

/* Every FLUX.2 matrix of whole blocks Q8_0 (final_layer.adaLN_modulation.1
 * too, which ComfyUI-GGUF keeps F32): the swapped halves and the qkv thirds
 * are the file's blocks, moved whole */
static void test_quant_rows(void **state)
{
    (void)state;
    lm_tensor_set s;
    assert_int_equal(lm_load_file(built("klein.safetensors"), &s), LM_OK);
    for (int i = 0; i < s.count; i++)
        if (s.arrays[i]->ndim == 2 && s.arrays[i]->shape[1] % 32 == 0) {
            lm_array *q = lm_quantize(s.arrays[i], LM_Q8_0);
            assert_non_null(q);
            lm_array_release(s.arrays[i]);
            s.arrays[i] = q;
        }
    char path[512];
    snprintf(path, sizeof path, "%s/kq.gguf", tmp);
    assert_int_equal(lm_save_gguf(path, s.count, (const char *const *)s.names, s.arrays, 0, NULL), LM_OK);
    lm_dit_file f;
    assert_int_equal(lm_dit_file_read(path, DIR "klein", lm_device_cpu(), &f), LM_OK);
    static const struct { const char *orig, *dfs; int64_t from, rows; } m[] = {
        {"final_layer.adaLN_modulation.1.weight", "norm_out.linear.weight", 32, 32},   /* shift, scale */
        {"final_layer.adaLN_modulation.1.weight", "norm_out.linear.weight", 0, 32},
        {"double_blocks.0.img_attn.qkv.weight", "transformer_blocks.0.attn.to_q.weight", 0, 32},
        {"double_blocks.0.img_attn.qkv.weight", "transformer_blocks.0.attn.to_k.weight", 32, 32},
        {"double_blocks.0.txt_attn.qkv.weight", "transformer_blocks.0.attn.add_v_proj.weight", 64, 32},
    };
    for (size_t k = 0; k < sizeof m / sizeof *m; k++) {
        lm_array *a = f.weights.arrays[lm_tensor_set_find(&f.weights, m[k].dfs)];
        lm_array *b = s.arrays[lm_tensor_set_find(&s, m[k].orig)];
        assert_int_equal(a->dtype, LM_Q8_0);
        lm_array *da = lm_dequantize(a), *db = lm_dequantize(b);
        float *x = tu_read_f32(da), *y = tu_read_f32(db);
        int64_t at = k == 1 ? 32 : 0, w = a->shape[1];   /* the second half of the swap */
        assert_memory_equal(x + at * w, y + m[k].from * w, sizeof *x * (size_t)(m[k].rows * w));
        free(x);
        free(y);
        lm_array_release(da);
        lm_array_release(db);
    }
    printf("  Q8_0 qkv thirds and swapped modulation halves: the file's blocks (%d kept)\n", f.quant_kept);
    lm_dit_file_free(&f);
    lm_tensor_set_free(&s);
}

/* path rewritten with key `drop` left out and `extra` (a copy of the first
 * tensor) added, into tmp/name */
static const char *edited(const char *path, const char *name, const char *drop, const char *extra)
{
    static char out[512];
    lm_tensor_set s;
    assert_int_equal(lm_load_file(path, &s), LM_OK);
    snprintf(out, sizeof out, "%s/%s", tmp, name);
    tu_save_edited(&s, out, drop, extra);
    lm_tensor_set_free(&s);
    return out;
}

static void test_errors(void **state)
{
    (void)state;
    lm_device *cpu = lm_device_cpu();
    /* no folder for the rest */
    assert_null(load(built("klein.safetensors"), NULL, cpu));
    tu_expect_message("FLUX.2 transformer file holds the transformer only", "--tokenizer");
    assert_null(load(built("zimage_q8_0.gguf"), NULL, cpu));
    tu_expect_message("Z-Image", "tokenizer_dir");
    /* a folder of the other family */
    assert_null(load(built("zimage.safetensors"), DIR "klein", cpu));
    tu_expect_message("is a Z-Image transformer", "Flux2KleinPipeline");
    /* a key missing, one unexpected */
    assert_null(load(edited(built("klein.safetensors"), "k1.safetensors", "double_blocks.0.txt_mlp.2.weight", NULL),
                     DIR "klein", cpu));
    tu_expect_message("missing key double_blocks.0.txt_mlp.2.weight", "k1.safetensors");
    assert_null(load(edited(built("klein.safetensors"), "k2.safetensors", NULL, "double_blocks.0.img_mod.lin.bias"),
                     DIR "klein", cpu));
    tu_expect_message("unexpected key double_blocks.0.img_mod.lin.bias", "k2.safetensors");
    assert_null(load(edited(built("zimage.safetensors"), "z1.safetensors",
                            "model.diffusion_model.layers.1.feed_forward.w2.weight", NULL), DIR "zimage", cpu));
    tu_expect_message("missing weight layers.1.feed_forward.w2.weight", "z1.safetensors");
    assert_null(load(edited(built("zimage.safetensors"), "z2.safetensors", "model.diffusion_model.cap_embedder.1.weight",
                            NULL), DIR "zimage", cpu));
    tu_expect_message("cannot be told", "z2.safetensors");
    /* a ComfyUI all-in-one checkpoint: its text encoder and VAE left to the folder */
    lm_sd_pipeline *aio = load(edited(built("zimage.safetensors"), "aio.safetensors", NULL,
                                      "text_encoders.qwen3_4b.transformer.model.embed_tokens.weight"),
                               DIR "zimage", cpu);
    assert_non_null(aio);
    assert_int_equal(lm_sd_pipeline_family(aio), LM_SD_ZIMAGE);
    lm_sd_pipeline_free(aio);
    /* ... but not in a file without the prefix */
    assert_null(load(edited(built("klein.safetensors"), "k3.safetensors", NULL, "vae.decoder.conv_in.weight"),
                     DIR "klein", cpu));
    tu_expect_message("unexpected key vae.decoder.conv_in.weight", "k3.safetensors");
    /* the family cannot be told: the VAE's weights alone */
    assert_null(load(DIR "zimage/vae/diffusion_pytorch_model.safetensors", DIR "zimage", cpu));
    tu_expect_message("cannot be told from its keys", "FLUX.2");
    /* FLUX.1: double blocks with their own modulation */
    assert_null(load(edited(built("klein.safetensors"), "f1.safetensors", "double_stream_modulation_img.lin.weight",
                            "double_blocks.0.img_mod.lin.weight"), DIR "klein", cpu));
    tu_expect_message("FLUX.1", "f1.safetensors");
    /* the head size is not the release's and no folder says the axes */
    lm_dit_file f;
    assert_int_not_equal(lm_dit_file_read(built("klein.safetensors"), NULL, cpu, &f), LM_OK);
    tu_expect_message("axes_dims_rope", "transformer/config.json");
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    if (access(built("zimage.safetensors"), R_OK) != 0) {
        fprintf(stderr, "%s missing: `make dit-fixtures` builds it\n", built("zimage.safetensors"));
        return -1;
    }
    return tu_tmpdir(tmp, sizeof tmp, "dit_files");
}

static int teardown(void **state)
{
    (void)state;
    tu_tmpdir_remove(tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_infer),
        cmocka_unit_test(test_quant_rows),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_whole_cpu),
        cmocka_unit_test(test_whole_vulkan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
