/* test_flux2.c - models/flux2.c (Flux2Transformer2DModel and
 * Flux2KleinPipeline's latent helpers) and models/vae.c's
 * AutoencoderKLFlux2 against diffusers (tests/ref/gen_dit.py wrote
 * tests/ref/dit/klein, the tiny klein pipeline of diffusers' own tests, and
 * klein_ref.safetensors, its stage outputs).
 *
 * f32 within 1e-4 of the largest reference value, on the CPU and on a
 * Vulkan device (lavapipe) where there is one: one transformer call
 * (tr.out: two images of 4x6 tokens, ten text tokens); the VAE's raw decode
 * and encode mean and its batch-norm statistics; the latent helpers (ids
 * equal to diffusers' for a 4x6 grid and 10 and 32 text tokens, patchify
 * and unpatchify, pack and unpack); and the whole 4-step klein image
 * without and with CFG from diffusers' latents and prompt embeddings
 * (every step's latents, then unpack, batch-norm denormalization,
 * unpatchify, decode and postprocess against the image), with the
 * scheduler's sigmas and timesteps from the reference.  bf16 and f16 runs
 * of the transformer against the f32 result, loosely.  Errors: a missing,
 * an unexpected and a misshaped weight, guidance_embeds true, axes that do
 * not add up to the head dim, bad inputs, the VAE's missing statistics. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/flux2.h"
#include "models/vae.h"

#define KLEIN "tests/ref/dit/klein/"
#define REF_FILE "tests/ref/dit/klein_ref.safetensors"
#define REL_TOL 1e-4

static lm_tensor_set ref;
static char tmpdir[64];

static lm_array *rget(const char *name) { return tu_set_get(&ref, name); }

/* max |got - want| / max |want| <= tol, printed */
static double check_tol(lm_array *got, lm_array *want, const char *name, const char *where, double tol)
{
    double err, rel = tu_rel_err(got, want, &err);
    printf("  %-22s %-10s max abs err %.3g, relative %.3g\n", name, where, err, rel);
    assert_true(rel <= tol);
    return rel;
}

static double check(lm_array *got, const char *name, const char *where)
{
    return check_tol(got, rget(name), name, where, REL_TOL);
}

/* the int32 ids of reference `name` [B, n, 4], row b (malloc'd) */
static int32_t *ids_of(const char *name, int64_t b, int64_t *n)
{
    lm_array *a = rget(name);
    assert_int_equal(a->ndim, 3);
    assert_int_equal(a->shape[2], 4);
    int32_t *all = malloc(sizeof *all * (size_t)a->size);
    assert_int_equal(lm_array_read(a, all, LM_I32), LM_OK);
    *n = a->shape[1];
    int32_t *row = malloc(sizeof *row * (size_t)(*n * 4));
    memcpy(row, all + b * *n * 4, sizeof *row * (size_t)(*n * 4));
    free(all);
    return row;
}

static lm_flux2 *load_tr(lm_dtype dt, lm_device *dev)
{
    lm_flux2 *m = lm_flux2_load(KLEIN "transformer", NULL, dt, dev);
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    return m;
}

/* tr.out from tr.x, tr.ctx, tr.t and the ids (new reference) */
static lm_array *transformer_call(lm_flux2 *m)
{
    int64_t S, L;
    int32_t *img = ids_of("tr.img_ids", 0, &S), *txt = ids_of("tr.txt_ids", 0, &L);
    lm_array *y = lm_flux2_forward(m, rget("tr.x"), rget("tr.ctx"), rget("tr.t"), img, S, txt, L);
    if (!y) fprintf(stderr, "%s\n", lm_error_message());
    free(img);
    free(txt);
    return y;
}

static void run_transformer(lm_device *dev)
{
    lm_flux2 *m = load_tr(LM_F32, dev);
    const lm_flux2_config *c = lm_flux2_get_config(m);
    assert_int_equal(c->inner_dim, 32);
    assert_int_equal(c->mlp_hidden, 96);
    assert_int_equal(c->out_channels, 16);
    assert_int_equal(c->naxes, 4);
    assert_int_equal(lm_flux2_dtype(m), LM_F32);
    assert_ptr_equal(lm_flux2_device(m), dev);
    lm_array *y = transformer_call(m);
    assert_non_null(y);
    assert_int_equal(lm_array_eval(y), LM_OK);
    /* every node ran on the device: none fell back to the CPU */
    lm_eval_stats es = lm_eval_last_stats();
    printf("  %s: %lld nodes, %lld kernels, %lld CPU fallbacks\n", dev->spec, (long long)es.nodes,
           (long long)es.kernels, (long long)es.fallbacks);
    assert_int_equal(es.fallbacks, 0);
    check(y, "tr.out", dev->spec);
    lm_array_release(y);
    lm_flux2_free(m);
}

static void test_transformer_cpu(void **state)
{
    (void)state;
    run_transformer(lm_device_cpu());
}

static void test_transformer_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_transformer(vk);
}

/* bf16 and f16 weights and activations against the f32 result, on the CPU
 * and on a Vulkan device where there is one */
static void test_transformer_half(void **state)
{
    (void)state;
    lm_flux2 *m = load_tr(LM_F32, lm_device_cpu());
    lm_array *want = transformer_call(m);
    assert_int_equal(lm_array_eval(want), LM_OK);
    lm_flux2_free(m);
    const lm_dtype dts[2] = {LM_BF16, LM_F16};
    const double tol[2] = {5e-2, 1e-2};
    lm_device *vk = tu_vulkan_device();
    for (int k = 0; k < 4; k++) {
        lm_device *dev = k < 2 ? lm_device_cpu() : vk;
        if (!dev) break;
        m = load_tr(dts[k % 2], dev);
        lm_array *y = transformer_call(m);
        assert_non_null(y);
        assert_int_equal(y->dtype, dts[k % 2]);
        assert_int_equal(lm_array_eval(y), LM_OK);
        assert_int_equal(lm_eval_last_stats().fallbacks, 0);
        char what[96];
        snprintf(what, sizeof what, "%s %s", lm_dtype_name(dts[k % 2]), dev->spec);
        check_tol(y, want, "tr.out vs f32", what, tol[k % 2]);
        lm_array_release(y);
        lm_flux2_free(m);
    }
    lm_array_release(want);
}

/* max |a - b| over two arrays of one shape */
static double max_diff(lm_array *a, lm_array *b)
{
    assert_int_equal(a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++) assert_int_equal(a->shape[d], b->shape[d]);
    double *x = tu_read(a), *y = tu_read(b), e = 0;
    for (int64_t i = 0; i < a->size; i++) e = fmax(e, fabs(x[i] - y[i]));
    free(x);
    free(y);
    return e;
}

/* A sharded bf16 checkpoint (two shards and diffusers' index, as the
 * real FLUX.2-klein folders ship) loads and computes bit for bit what the
 * f32 file cast to bf16 at load does. */
static void test_sharded_bf16(void **state)
{
    (void)state;
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(KLEIN "transformer/diffusion_pytorch_model.safetensors", &s), LM_OK);
    const char *shard[2] = {"diffusion_pytorch_model-00001-of-00002.safetensors",
                            "diffusion_pytorch_model-00002-of-00002.safetensors"};
    cJSON *idx = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(idx, "weight_map");
    cJSON_AddObjectToObject(idx, "metadata");
    for (int h = 0; h < 2; h++) {
        const char *names[64];
        lm_array *arrs[64];
        int n = 0;
        for (int i = h; i < s.count; i += 2) {
            assert_true(n < 64);
            names[n] = s.names[i];
            arrs[n] = lm_cast(s.arrays[i], LM_BF16);
            assert_int_equal(lm_array_eval(arrs[n]), LM_OK);
            cJSON_AddStringToObject(map, s.names[i], shard[h]);
            n++;
        }
        char p[160];
        snprintf(p, sizeof p, "%s/%s", tmpdir, shard[h]);
        assert_int_equal(lm_save_safetensors(p, n, names, arrs, 0, NULL), LM_OK);
        for (int i = 0; i < n; i++) lm_array_release(arrs[i]);
    }
    lm_tensor_set_free(&s);
    char *text = cJSON_Print(idx), p[160];
    cJSON_Delete(idx);
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors.index.json", tmpdir);
    tu_spit(p, text, strlen(text));
    free(text);
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    tu_copy_file(KLEIN "transformer/config.json", p);
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    unlink(p);

    lm_flux2 *a = lm_flux2_load(tmpdir, NULL, LM_BF16, lm_device_cpu());
    if (!a) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(a);
    lm_flux2 *b = load_tr(LM_BF16, lm_device_cpu());
    lm_array *ya = transformer_call(a), *yb = transformer_call(b);
    double d = max_diff(ya, yb);
    printf("  sharded bf16 folder against the f32 file at bf16: max difference %g\n", d);
    assert_true(d == 0);
    lm_array_release(ya);
    lm_array_release(yb);
    lm_flux2_free(a);
    lm_flux2_free(b);
    for (int h = 0; h < 2; h++) {
        snprintf(p, sizeof p, "%s/%s", tmpdir, shard[h]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors.index.json", tmpdir);
    unlink(p);
}

/* Quantized linear weights (as a GGUF of the transformer would give them:
 * every 2-D weight whose rows are whole q8_0 blocks) stay quantized and go
 * through lm_linear's quantized product, on the CPU and on a Vulkan device;
 * the result is near the f32 one. */
static void test_quantized(void **state)
{
    (void)state;
    lm_flux2 *m = load_tr(LM_F32, lm_device_cpu());
    lm_array *want = transformer_call(m);
    assert_int_equal(lm_array_eval(want), LM_OK);
    lm_flux2_free(m);
    char *text = tu_slurp(KLEIN "transformer/config.json", NULL);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    lm_device *devs[2] = {lm_device_cpu(), tu_vulkan_device()};
    for (int k = 0; k < 2 && devs[k]; k++) {
        lm_tensor_set s = {0};
        assert_int_equal(lm_load_safetensors(KLEIN "transformer/diffusion_pytorch_model.safetensors", &s), LM_OK);
        int nq = 0;
        for (int i = 0; i < s.count; i++) {
            lm_array *a = s.arrays[i];
            if (a->ndim != 2 || a->shape[1] % 32) continue;
            lm_array *q = lm_quantize(a, LM_Q8_0);
            assert_non_null(q);
            lm_array_release(a);
            s.arrays[i] = q;
            nq++;
        }
        m = lm_flux2_load_from(cfg, &s, "q8_0 transformer", LM_F32, devs[k]);
        if (!m) fprintf(stderr, "%s\n", lm_error_message());
        assert_non_null(m);
        lm_array *y = transformer_call(m);
        char what[96];
        snprintf(what, sizeof what, "q8_0 %s", devs[k]->spec);
        printf("  %d of the weights q8_0\n", nq);
        check_tol(y, want, "tr.out vs f32", what, 2e-2);
        lm_array_release(y);
        lm_flux2_free(m);
    }
    cJSON_Delete(cfg);
    lm_array_release(want);
}

/* ---- the pipeline's helpers ---- */

static void assert_ids(const int32_t *got, const char *name, int64_t b, int64_t n)
{
    int64_t rn;
    int32_t *want = ids_of(name, b, &rn);
    assert_int_equal(rn, n);
    for (int64_t i = 0; i < 4 * n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "%s[%lld]: element %lld: got %d, diffusers %d\n", name, (long long)b,
                    (long long)i, got[i], want[i]);
            fail();
        }
    free(want);
}

static void test_helpers(void **state)
{
    (void)state;
    int32_t img[24 * 4], txt[32 * 4];
    lm_flux2_latent_ids(4, 6, img);
    assert_ids(img, "tr.img_ids", 0, 24);
    assert_ids(img, "tr.img_ids", 1, 24);
    lm_flux2_text_ids(10, txt);
    assert_ids(txt, "tr.txt_ids", 0, 10);
    assert_ids(txt, "tr.txt_ids", 1, 10);
    lm_flux2_text_ids(32, txt);
    assert_ids(txt, "enc.text_ids", 0, 32);
    assert_ids(txt, "enc.text_ids", 1, 32);
    printf("  ids: the 4x6 grid, 10 and 32 text tokens as diffusers'\n");
    /* two reference latents of 2x3 and 1x2 cells: t = 10 and 20 */
    int64_t rh[2] = {2, 1}, rw[2] = {3, 2};
    int32_t ref_ids[8 * 4];
    const int32_t want_ref[8 * 4] = {10, 0, 0, 0, 10, 0, 1, 0, 10, 0, 2, 0, 10, 1, 0, 0, 10, 1, 1, 0,
                                     10, 1, 2, 0, 20, 0, 0, 0, 20, 0, 1, 0};
    lm_flux2_image_ids(2, rh, rw, 10, ref_ids);
    assert_memory_equal(ref_ids, want_ref, sizeof want_ref);

    /* patchify: channel c*4 + 2*dy + dx of cell (i, j) is pixel (2i+dy, 2j+dx) of channel c */
    lm_array *z = rget("vae.encode_mean");   /* [1, 4, 8, 12] */
    lm_array *p = lm_flux2_patchify(z);
    assert_non_null(p);
    assert_int_equal(p->shape[1], 16);
    assert_int_equal(p->shape[2], 4);
    assert_int_equal(p->shape[3], 6);
    double *zv = tu_read(z), *pv = tu_read(p);
    for (int64_t c = 0; c < 4; c++)
        for (int64_t q = 0; q < 4; q++)
            for (int64_t i = 0; i < 4; i++)
                for (int64_t j = 0; j < 6; j++)
                    assert_true(pv[((c * 4 + q) * 4 + i) * 6 + j] ==
                                zv[(c * 8 + 2 * i + q / 2) * 12 + 2 * j + q % 2]);
    free(zv);
    free(pv);
    lm_array *back = lm_flux2_unpatchify(p);
    assert_true(max_diff(back, z) == 0);
    /* pack: token i*6 + j holds cell (i, j)'s channels; unpack inverts it,
     * with the standard ids, with none, and with the tokens shuffled */
    lm_array *pk = lm_flux2_pack(p);
    assert_non_null(pk);
    assert_int_equal(pk->shape[1], 24);
    assert_int_equal(pk->shape[2], 16);
    lm_array *up = lm_flux2_unpack(pk, img, 4, 4, 6), *up0 = lm_flux2_unpack(pk, NULL, 4, 4, 6);
    assert_true(max_diff(up, p) == 0);
    assert_true(max_diff(up0, p) == 0);
    int64_t rev[24], n24 = 24;
    int32_t rids[24 * 4];
    for (int64_t i = 0; i < 24; i++) {
        rev[i] = 23 - i;
        memcpy(rids + 4 * i, img + 4 * (23 - i), sizeof(int32_t) * 4);
    }
    lm_array *ri = lm_from_data(1, &n24, LM_I64, rev, NULL);
    lm_array *shuf = lm_index_select(pk, 1, ri);
    lm_array *up2 = lm_flux2_unpack(shuf, rids, 4, 4, 6);
    assert_true(max_diff(up2, p) == 0);
    printf("  patchify, unpatchify, pack and unpack (ids in order, none, reversed) exact\n");
    /* ids that repeat a cell are refused */
    rids[4 * 5 + 1] = rids[4 * 6 + 1];
    rids[4 * 5 + 2] = rids[4 * 6 + 2];
    assert_null(lm_flux2_unpack(shuf, rids, 4, 4, 6));
    tu_expect_message("outside the 4 x 6 grid or repeat a cell", NULL);
    assert_null(lm_flux2_patchify(rget("tr.x")));
    tu_expect_message("flux2 patchify", "expected [B, C, H, W]");
    lm_array *parts[] = {p, back, pk, up, up0, ri, shuf, up2};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) lm_array_release(parts[i]);
}

/* ---- the VAE ---- */

static lm_vae *load_vae(lm_device *dev)
{
    lm_vae *v = lm_vae_load(KLEIN "vae", NULL, LM_F32, dev);
    if (!v) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(v);
    return v;
}

static void run_vae(lm_device *dev)
{
    lm_vae *v = load_vae(dev);
    const lm_vae_config *c = lm_vae_get_config(v);
    assert_true(c->flux2);
    assert_int_equal(c->patch_size[0], 2);
    assert_int_equal(c->patch_size[1], 2);
    assert_true(c->batch_norm_eps == 1e-4);
    lm_array *mean, *var;
    double eps = 0;
    assert_int_equal(lm_vae_bn(v, &mean, &var, &eps), LM_OK);
    assert_true(eps == 1e-4);
    assert_int_equal(mean->shape[0], 16);
    double *mv = tu_read(mean), *vv = tu_read(var);
    /* gen_dit.py set them to linspace(-0.3, 0.4) and linspace(0.5, 2.0) */
    assert_true(fabs(mv[0] + 0.3) < 1e-7 && fabs(mv[15] - 0.4) < 1e-7);
    assert_true(fabs(vv[0] - 0.5) < 1e-7 && fabs(vv[15] - 2.0) < 1e-7);
    free(mv);
    free(vv);
    lm_array *dec = lm_vae_decode(v, rget("vae.z"));
    check(dec, "vae.decode", dev->spec);
    lm_array *em, *elv;
    assert_int_equal(lm_vae_encode(v, rget("vae.image"), &em, &elv), LM_OK);
    check(em, "vae.encode_mean", dev->spec);
    /* normalize then denormalize is the identity (to rounding) */
    lm_array *pz = lm_flux2_patchify(em);
    lm_array *nz = lm_flux2_bn_normalize(pz, mean, var, eps);
    lm_array *dz = lm_flux2_bn_denormalize(nz, mean, var, eps);
    assert_true(max_diff(dz, pz) < 1e-6);
    lm_array *parts[] = {mean, var, dec, em, elv, pz, nz, dz};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) lm_array_release(parts[i]);
    lm_vae_free(v);
}

static void test_vae_cpu(void **state)
{
    (void)state;
    run_vae(lm_device_cpu());
}

static void test_vae_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_vae(vk);
}

/* ---- the whole klein image ---- */

/* row b of a reference [B, L, D] as [1, L, D] (new reference) */
static lm_array *row_of(const char *name, int64_t b)
{
    lm_array *a = rget(name);
    return lm_slice(a, 0, b, b + 1, 1);
}

static float ref_scalar(const char *name, int64_t i)
{
    lm_array *a = rget(name);
    float *v = malloc(sizeof *v * (size_t)a->size);
    assert_int_equal(lm_array_read(a, v, LM_F32), LM_OK);
    float r = v[i];
    free(v);
    return r;
}

/* Flux2KleinPipeline(prompt "a dog is dancing", 32x32, 4 steps,
 * guidance_scale g) from img.<name>.latents, as the pipeline runs it:
 * Euler steps over sched.4.64, CFG against the empty prompt's embeddings
 * when g > 1, then unpack, denormalize, unpatchify, decode, postprocess. */
static void run_image(const char *name, double g, lm_device *dev)
{
    lm_flux2 *m = load_tr(LM_F32, dev);
    lm_vae *v = load_vae(dev);
    char key[64];
    snprintf(key, sizeof key, "img.%s.latents", name);
    lm_array *lat = lm_flux2_pack(rget(key));   /* [1, 64, 16] */
    int32_t img_ids[64 * 4], txt_ids[32 * 4];
    lm_flux2_latent_ids(8, 8, img_ids);
    lm_flux2_text_ids(32, txt_ids);
    lm_array *pos = row_of("enc.prompt_embeds", 0), *neg = row_of("enc.prompt_embeds", 1);
    char where[64];
    for (int i = 0; i < 4; i++) {
        float t = ref_scalar("sched.4.64.timesteps", i);
        float s0 = ref_scalar("sched.4.64.sigmas", i), s1 = ref_scalar("sched.4.64.sigmas", i + 1);
        int64_t one = 1;
        float tv = t / 1000.0f;
        lm_array *ta = lm_from_data(1, &one, LM_F32, &tv, dev);
        lm_array *np = lm_flux2_forward(m, lat, pos, ta, img_ids, 64, txt_ids, 32);
        if (g > 1) {
            lm_array *nn = lm_flux2_forward(m, lat, neg, ta, img_ids, 64, txt_ids, 32);
            lm_array *d = lm_binary(LM_OP_SUB, np, nn);
            lm_array *gd = lm_binary_scalar(LM_OP_MUL, d, g, false);
            lm_array_release(np);
            np = lm_binary(LM_OP_ADD, nn, gd);
            lm_array_release(nn);
            lm_array_release(d);
            lm_array_release(gd);
        }
        lm_array *step = lm_binary_scalar(LM_OP_MUL, np, (double)(s1 - s0), false);
        lm_array *next = lm_binary(LM_OP_ADD, lat, step);
        assert_non_null(next);
        assert_int_equal(lm_array_eval(next), LM_OK);
        lm_array_release(lat);
        lat = next;
        lm_array_release(step);
        lm_array_release(np);
        lm_array_release(ta);
        snprintf(key, sizeof key, "img.%s.step%d", name, i);
        snprintf(where, sizeof where, "%s", dev->spec);
        check(lat, key, where);
    }
    lm_array *mean, *var;
    double eps;
    assert_int_equal(lm_vae_bn(v, &mean, &var, &eps), LM_OK);
    lm_array *z = lm_flux2_unpack(lat, img_ids, 4, 8, 8);
    lm_array *zd = lm_flux2_bn_denormalize(z, mean, var, eps);
    lm_array *zu = lm_flux2_unpatchify(zd);
    lm_array *im = lm_vae_decode(v, zu);
    /* postprocess: (x / 2 + 0.5).clamp(0, 1) */
    lm_array *half = lm_binary_scalar(LM_OP_MUL, im, 0.5, false);
    lm_array *sh = lm_binary_scalar(LM_OP_ADD, half, 0.5, false);
    lm_array *out = lm_clamp(sh, 0, 1);
    snprintf(key, sizeof key, "img.%s.image", name);
    check(out, key, dev->spec);
    lm_array *parts[] = {lat, pos, neg, mean, var, z, zd, zu, im, half, sh, out};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) lm_array_release(parts[i]);
    lm_vae_free(v);
    lm_flux2_free(m);
}

static void test_image_cpu(void **state)
{
    (void)state;
    run_image("nocfg", 1.0, lm_device_cpu());
    run_image("cfg", 4.0, lm_device_cpu());
}

static void test_image_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_image("nocfg", 1.0, vk);
    run_image("cfg", 4.0, vk);
}

/* Loading, running and freeing leaves no array alive and no device memory
 * in use, round after round. */
static void test_flat_memory(void **state)
{
    (void)state;
    lm_device *cpu = lm_device_cpu();
    lm_device_clear_cache(cpu);
    int64_t live0 = lm_array_live_count();
    size_t mem0 = lm_device_memory(cpu).active;
    for (int k = 0; k < 2; k++) {
        lm_flux2 *m = load_tr(LM_F32, cpu);
        lm_array *y = transformer_call(m);
        assert_int_equal(lm_array_eval(y), LM_OK);
        lm_array_release(y);
        lm_flux2_free(m);
        lm_vae *v = load_vae(cpu);
        lm_array *d = lm_vae_decode(v, rget("vae.z"));
        assert_int_equal(lm_array_eval(d), LM_OK);
        lm_array_release(d);
        lm_vae_free(v);
        lm_device_clear_cache(cpu);
        printf("  round %d: %lld live arrays (%lld before), %zu bytes active (%zu before)\n", k + 1,
               (long long)lm_array_live_count(), (long long)live0, lm_device_memory(cpu).active, mem0);
        assert_int_equal(lm_array_live_count(), live0);
        assert_true(lm_device_memory(cpu).active == mem0);
    }
}

/* ---- errors ---- */

static void expect_tr_error(const char *needle1, const char *needle2)
{
    assert_null(lm_flux2_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message(needle1, needle2);
}

/* tmpdir's weights: `src`'s, dropping `drop`, adding `extra` */
static void write_weights(const char *src, const char *drop, const char *extra)
{
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(src, &s), LM_OK);
    char p[128];
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    tu_save_edited(&s, p, drop, extra);
    lm_tensor_set_free(&s);
}

/* tmpdir's config.json: `src`'s with `from` replaced by `to` */
static void write_config(const char *src, const char *from, const char *to)
{
    char *text = tu_slurp(src, NULL);
    char *out = tu_replace(text, from, to);
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    tu_spit(p, out, strlen(out));
    free(out);
    free(text);
}

#define TR_CFG KLEIN "transformer/config.json"
#define TR_W KLEIN "transformer/diffusion_pytorch_model.safetensors"
#define VAE_CFG KLEIN "vae/config.json"
#define VAE_W KLEIN "vae/diffusion_pytorch_model.safetensors"

static void test_errors(void **state)
{
    (void)state;
    write_config(TR_CFG, NULL, NULL);
    write_weights(TR_W, NULL, NULL);
    lm_flux2 *ok = lm_flux2_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    assert_non_null(ok);
    /* inputs */
    int64_t S, L;
    int32_t *img = ids_of("tr.img_ids", 0, &S), *txt = ids_of("tr.txt_ids", 0, &L);
    assert_null(lm_flux2_forward(ok, rget("tr.x"), rget("tr.ctx"), rget("tr.t"), img, S - 1, txt, L));
    tu_expect_message("x [2,24,16]: expected [B, 23, 16]", NULL);
    assert_null(lm_flux2_forward(ok, rget("tr.x"), rget("tr.x"), rget("tr.t"), img, S, txt, L));
    tu_expect_message("ctx [2,24,16]: expected [2, 10, 32]", NULL);
    assert_null(lm_flux2_forward(ok, rget("tr.x"), rget("tr.ctx"), rget("tr.ctx"), img, S, txt, L));
    tu_expect_message("t [2,10,32]: expected [2]", NULL);
    assert_null(lm_flux2_forward(ok, rget("tr.x"), rget("tr.ctx"), rget("tr.t"), NULL, S, txt, L));
    tu_expect_message("img_ids and txt_ids are required", NULL);
    free(img);
    free(txt);
    lm_flux2_free(ok);

    /* load_from consumes the set, on success and on failure */
    char *text = tu_slurp(TR_CFG, NULL);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(TR_W, &s), LM_OK);
    ok = lm_flux2_load_from(cfg, &s, "klein transformer", LM_F32, lm_device_cpu());
    assert_non_null(ok);
    assert_int_equal(s.count, 0);
    lm_flux2_free(ok);
    assert_int_equal(lm_load_safetensors(TR_W, &s), LM_OK);
    assert_null(lm_flux2_load_from(cfg, &s, "klein transformer", LM_I32, lm_device_cpu()));
    tu_expect_message("compute dtype i32", NULL);
    assert_int_equal(s.count, 0);
    cJSON_Delete(cfg);

    write_weights(TR_W, "single_transformer_blocks.0.attn.norm_k.weight", NULL);
    expect_tr_error("missing weight single_transformer_blocks.0.attn.norm_k.weight [16]",
                    "diffusion_pytorch_model.safetensors");
    write_weights(TR_W, NULL, "time_guidance_embed.guidance_embedder.linear_1.weight");
    expect_tr_error("unexpected weight time_guidance_embed.guidance_embedder.linear_1.weight",
                    "diffusion_pytorch_model.safetensors");
    write_weights(TR_W, NULL, NULL);
    write_config(TR_CFG, "\"joint_attention_dim\": 32", "\"joint_attention_dim\": 24");
    expect_tr_error("context_embedder.weight has shape [32,32], the config needs [32,24]", NULL);
    write_config(TR_CFG, "\"mlp_ratio\": 3.0", "\"mlp_ratio\": 2.0");
    expect_tr_error("transformer_blocks.0.ff.linear_in.weight has shape [192,32], the config needs [128,32]",
                    NULL);
    write_config(TR_CFG, "\"guidance_embeds\": false", "\"guidance_embeds\": true");
    expect_tr_error("guidance_embeds: true (FLUX.2 [dev]'s guidance embedder) is not supported", "config.json");
    write_config(TR_CFG, "\"attention_head_dim\": 16", "\"attention_head_dim\": 8");
    expect_tr_error("axes_dims_rope add up to 16, attention_head_dim is 8", "config.json");
    write_config(TR_CFG, "\"Flux2Transformer2DModel\"", "\"FluxTransformer2DModel\"");
    expect_tr_error("_class_name: FluxTransformer2DModel is not supported", NULL);

    /* the VAE: its statistics are weights like any other */
    write_config(VAE_CFG, NULL, NULL);
    write_weights(VAE_W, "bn.running_var", NULL);
    assert_null(lm_vae_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message("missing weight bn.running_var [16]", NULL);
    write_weights(VAE_W, NULL, NULL);
    write_config(VAE_CFG, "\"latent_channels\": 4", "\"latent_channels\": 2");
    assert_null(lm_vae_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message("has shape", "the config needs");
    write_config(VAE_CFG, "\"AutoencoderKLFlux2\"", "\"AutoencoderKL\"");
    assert_null(lm_vae_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message("unexpected weight bn.", NULL);
    /* an AutoencoderKL (the same weights without bn.*) has no statistics */
    lm_tensor_set vs = {0};
    assert_int_equal(lm_load_safetensors(VAE_W, &vs), LM_OK);
    const char **names = malloc(sizeof *names * (size_t)vs.count);
    lm_array **arrs = malloc(sizeof *arrs * (size_t)vs.count);
    int n = 0;
    for (int i = 0; i < vs.count; i++)
        if (strncmp(vs.names[i], "bn.", 3)) {
            names[n] = vs.names[i];
            arrs[n++] = vs.arrays[i];
        }
    char wp[128];
    snprintf(wp, sizeof wp, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    unlink(wp);
    assert_int_equal(lm_save_safetensors(wp, n, names, arrs, 0, NULL), LM_OK);
    free(names);
    free(arrs);
    lm_tensor_set_free(&vs);
    lm_vae *kl = lm_vae_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    if (!kl) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(kl);
    lm_array *mean = NULL;
    assert_int_not_equal(lm_vae_bn(kl, &mean, NULL, NULL), LM_OK);
    assert_null(mean);
    tu_expect_message("only AutoencoderKLFlux2 has them", NULL);
    lm_vae_free(kl);
}

static int setup(void **state)
{
    (void)state;
    return tu_setup_models(REF_FILE, &ref, tmpdir, sizeof tmpdir, "flux2");
}

static int teardown(void **state)
{
    (void)state;
    lm_tensor_set_free(&ref);
    tu_tmpdir_remove(tmpdir);
    return 0;
}

int main(void)
{
    struct stat st;
    if (stat(REF_FILE, &st) != 0) {
        printf("test_flux2: %s is missing (tests/ref/gen_dit.py makes it): skipped\n", REF_FILE);
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transformer_cpu),
        cmocka_unit_test(test_transformer_vulkan),
        cmocka_unit_test(test_transformer_half),
        cmocka_unit_test(test_sharded_bf16),
        cmocka_unit_test(test_quantized),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_vae_cpu),
        cmocka_unit_test(test_vae_vulkan),
        cmocka_unit_test(test_image_cpu),
        cmocka_unit_test(test_image_vulkan),
        cmocka_unit_test(test_flat_memory),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
