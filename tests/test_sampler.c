/* test_sampler.c - models/sampler*.c against diffusers' schedulers
 * (tests/ref/gen_diffusion.py wrote tests/ref/diffusion/ref_sched.safetensors
 * with diffusers on the GPU machine's CPU, tests/ref/gen_samplers.py wrote
 * ref_sched_more.safetensors with diffusers' scheduler source: each
 * scheduler built with from_config of SD's scheduler config, as pipelines
 * swap samplers).
 *
 * For configs eps (SD 1.x: scaled_linear, leading, steps_offset 1), v (the
 * same with v_prediction) and tr (trailing, offset 0), samplers euler,
 * euler_a, dpmpp_2m, dpmpp_2m_karras, ddim (ref_sched), lms, lms_karras,
 * euler_karras (ref_sched_more) and issue 37's 16 rows (ref_sched_37: Heun,
 * DPM++ 2M SDE, DPM++ 2S a, UniPC with their Karras and exponential rows, the
 * exponential Euler / LMS / DPM++ 2M, LCM; one loop entry per model call,
 * the SDE and LCM draws recorded), and 4 and 20 steps: timesteps
 * and sigmas (1e-6 relative), init_noise_sigma, the whole 4-step loop with
 * fake model outputs and diffusers' ancestral draws (scale_model_input and
 * x after each step, within 1e-5 of the largest reference value) on the CPU
 * and on a Vulkan device (lavapipe) where there is one, img2img's timesteps
 * at strength 0.6 and add_noise (the newer rows: and the first 4 steps from
 * there).  Noise: equal bits for CPU thread counts 1/2/4, on both devices,
 * for any batch around an image.  The table's rows, names and config
 * errors. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/sampler.h"
#include "core/random.h"

#define REF "tests/ref/diffusion/ref_sched.safetensors"
#define REF_MORE "tests/ref/diffusion/ref_sched_more.safetensors"
#define REF_37 "tests/ref/diffusion/ref_sched_37.safetensors"
#define SCHED_REL 1e-6
#define LOOP_REL 1e-5

extern void lm_cpu_set_threads(int n);

static lm_tensor_set ref, ref_more, ref_37;
static bool have_ref, have_37;
static const lm_tensor_set *cur = &ref;   /* the fixture get() reads */

static const char *const base_json =
    "{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": 1000, \"beta_start\": 0.00085,"
    " \"beta_end\": 0.012, \"beta_schedule\": \"scaled_linear\", \"steps_offset\": 1,"
    " \"timestep_spacing\": \"leading\", \"prediction_type\": \"epsilon\", \"clip_sample\": false,"
    " \"set_alpha_to_one\": false, \"trained_betas\": null}";

/* the fixture's configs: eps, v, tr */
static void config_of(const char *cn, lm_sched_config *c)
{
    cJSON *j = cJSON_Parse(base_json);
    assert_non_null(j);
    if (!strcmp(cn, "v")) cJSON_ReplaceItemInObject(j, "prediction_type", cJSON_CreateString("v_prediction"));
    if (!strcmp(cn, "tr")) {
        cJSON_ReplaceItemInObject(j, "timestep_spacing", cJSON_CreateString("trailing"));
        cJSON_ReplaceItemInObject(j, "steps_offset", cJSON_CreateNumber(0));
    }
    lm_status st = lm_sched_config_from_json(j, cn, c);
    if (st) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    cJSON_Delete(j);
}

static lm_array *get(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static lm_array *get(const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int i = lm_tensor_set_find(cur, name);
    return i < 0 ? NULL : cur->arrays[i];
}

/* the largest |got - want| over the largest |want| */
static double rel_err(lm_array *got, lm_array *want)
{
    assert_non_null(got);
    assert_int_equal(got->size, want->size);
    double *g = tu_read(got), *w = tu_read(want), num = 0, den = 0;
    for (int64_t i = 0; i < want->size; i++) {
        double e = fabs(g[i] - w[i]);
        if (!(e <= num)) num = e;   /* NaN wins */
        if (fabs(w[i]) > den) den = fabs(w[i]);
    }
    free(g);
    free(w);
    return den > 0 ? num / den : num;
}

static lm_array *slice0(lm_array *a, int64_t i)
{
    lm_array *s = lm_slice(a, 0, i, i + 1, 1);
    lm_array *r = lm_squeeze(s, 0);
    lm_array_release(s);
    return r;
}

static const char *const config_names[] = {"eps", "v", "tr"};

/* the fixtures and the samplers each holds (the third: issue 37's rows, one
 * entry per model call, skipped with a line when the file is missing) */
typedef struct suite {
    const lm_tensor_set *set;
    const bool *present;
    int n;
    const char *names[16];
} suite;
static const suite suites[] = {
    {&ref, &have_ref, 5, {"euler", "euler_a", "dpmpp_2m", "dpmpp_2m_karras", "ddim"}},
    {&ref_more, &have_ref, 3, {"lms", "lms_karras", "euler_karras"}},
    {&ref_37, &have_37, 16, {"heun", "heun_karras", "heun_exponential", "lms_exponential", "euler_exponential",
                            "dpmpp_2m_exponential", "dpmpp_2m_sde", "dpmpp_2m_sde_karras", "dpmpp_2m_sde_exponential",
                            "dpmpp_2s_a", "dpmpp_2s_a_karras", "dpmpp_2s_a_exponential", "unipc", "unipc_karras",
                            "unipc_exponential", "lcm"}},
};
#define NSUITES ((int)(sizeof suites / sizeof *suites))
#define SUITE_PRESENT(su) (*suites[su].present)
static const char *const suite_files[] = {"ref_sched", "ref_sched_more", "ref_sched_37"};

/* each fixture's worst of one measure, printed after the test's line */
static void print_suites(const char *what, const double *worst)
{
    for (int su = 0; su < NSUITES; su++)
        if (SUITE_PRESENT(su)) printf("    %s's %d samplers: %s worst %.2g\n", suite_files[su], suites[su].n, what, worst[su]);
}

static lm_sampler *make(const char *cn, const char *sn, int n, double strength)
{
    lm_sched_config c;
    config_of(cn, &c);
    const lm_sampler_info *row = lm_sampler_find(sn);
    if (!row) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(row);
    lm_sampler *s = lm_sampler_new_row(&c, row, n, strength);
    if (!s) fprintf(stderr, "%s.%s.%d: %s\n", cn, sn, n, lm_error_message());
    assert_non_null(s);
    lm_sched_config_clear(&c);
    return s;
}

#define NEED_REF() do { if (!have_ref) { printf("%s missing: skipped\n", REF); skip(); } \
                         if (!have_37) printf("  %s missing: issue 37's rows skipped\n", REF_37); } while (0)

/* ---- timesteps and sigmas ---- */
static void test_schedules(void **state)
{
    (void)state;
    NEED_REF();
    int checked = 0, exact = 0;
    double worst_t = 0, worst_s = 0, su_t[NSUITES] = {0}, su_s[NSUITES] = {0};
    for (int su = 0; su < NSUITES; su++)
    if (SUITE_PRESENT(su))
    for (int ci = 0; ci < 3; ci++)
        for (int si = 0; si < suites[su].n; si++)
            for (int n = 4; n <= 20; n += 16) {
                const char *cn = config_names[ci], *sn = suites[su].names[si];
                cur = suites[su].set;
                lm_array *wt = get("%s.%s.%d.timesteps", cn, sn, n), *ws = get("%s.%s.%d.sigmas", cn, sn, n);
                assert_non_null(wt);
                lm_sampler *s = make(cn, sn, n, 1.0);
                int nt, nsig;
                const float *sig;
                const double *ts = lm_sampler_schedule(s, &nt, &sig, &nsig);
                double *w = tu_read(wt);
                int ok = nt == wt->size;
                for (int i = 0; ok && i < nt; i++) {
                    double e = fabs(ts[i] - w[i]) / fmax(fabs(w[i]), 1);
                    if (e > worst_t) worst_t = e;
                    if (e > su_t[su]) su_t[su] = e;
                    if (e > SCHED_REL) ok = 0;
                    exact += ts[i] == w[i];
                }
                if (!ok) {
                    fprintf(stderr, "%s.%s.%d timesteps differ:\n  got ", cn, sn, n);
                    for (int i = 0; i < nt; i++) fprintf(stderr, "%.9g ", ts[i]);
                    fprintf(stderr, "\n want ");
                    for (int i = 0; i < wt->size; i++) fprintf(stderr, "%.9g ", w[i]);
                    fprintf(stderr, "\n");
                }
                assert_true(ok);
                free(w);
                assert_int_equal(nsig > 0, ws != NULL);
                if (ws) {
                    assert_int_equal(nsig, ws->size);
                    double *v = tu_read(ws);
                    for (int i = 0; i < nsig; i++) {
                        double e = fabs(sig[i] - v[i]) / fmax(fabs(v[i]), 1e-30);
                        if (v[i] == 0) e = fabs(sig[i]);
                        if (e > worst_s) worst_s = e;
                        if (e > su_s[su]) su_s[su] = e;
                        if (e > SCHED_REL)
                            fprintf(stderr, "%s.%s.%d sigma %d: %.9g, diffusers %.9g\n", cn, sn, n, i, sig[i], v[i]);
                        assert_true(e <= SCHED_REL);
                    }
                    free(v);
                }
                if (n == 4) {
                    lm_array *wi = get("%s.%s.4.init_sigma", cn, sn);
                    assert_non_null(wi);
                    double want;
                    assert_int_equal(lm_array_get(wi, (int64_t[]){0}, &want), LM_OK);
                    assert_true(fabs(lm_sampler_init_sigma(s) - want) <= SCHED_REL * want);
                }
                lm_sampler_free(s);
                checked++;
            }
    printf("  %d schedules: timesteps worst %.2g relative (%d exactly equal), sigmas worst %.2g relative\n",
           checked, worst_t, exact, worst_s);
    print_suites("timesteps (relative)", su_t);
    print_suites("sigmas (relative)", su_s);
}

/* ---- the 4-step loops ---- */
static void run_loops(lm_device *dev)
{
    double worst_scaled = 0, worst_x = 0, su_x[NSUITES] = {0};
    int loops = 0, ncalls = 0;
    for (int su = 0; su < NSUITES; su++)
    if (SUITE_PRESENT(su))
    for (int ci = 0; ci < 3; ci++)
        for (int si = 0; si < suites[su].n; si++, loops++) {
            const char *cn = config_names[ci], *sn = suites[su].names[si];
            cur = suites[su].set;
            lm_sampler *s = make(cn, sn, 4, 1.0);
            lm_array *x = lm_array_to(get("%s.%s.4.x0", cn, sn), dev);
            lm_array *mos = get("%s.%s.4.model_out", cn, sn), *noise = get("%s.%s.4.noise", cn, sn);
            lm_array *scaled = get("%s.%s.4.scaled", cn, sn), *xs = get("%s.%s.4.xs", cn, sn);
            assert_non_null(x);
            assert_non_null(mos);
            int calls = (int)mos->shape[0];   /* 4, Heun's 7 */
            assert_int_equal(lm_sampler_count(s), calls);
            ncalls += calls;
            for (int i = 0; i < calls; i++) {
                lm_array *sc = lm_sampler_scale_input(s, x, i);
                lm_array *want_sc = slice0(scaled, i), *want_x = slice0(xs, i);
                double e = rel_err(sc, want_sc);
                if (e > worst_scaled) worst_scaled = e;
                if (e > LOOP_REL) fprintf(stderr, "%s.%s step %d scaled: %.3g\n", cn, sn, i, e);
                assert_true(e <= LOOP_REL);
                lm_array *mo0 = slice0(mos, i), *mo = lm_array_to(mo0, dev);
                lm_array *nz0 = slice0(noise, i), *nz = lm_array_to(nz0, dev);
                lm_array *nx = lm_sampler_step(s, mo, i, x, lm_sampler_needs_noise(s, i) ? nz : NULL);
                if (!nx) fprintf(stderr, "%s\n", lm_error_message());
                assert_non_null(nx);
                assert_true(nx->device == dev);
                e = rel_err(nx, want_x);
                if (e > worst_x) worst_x = e;
                if (e > su_x[su]) su_x[su] = e;
                if (e > LOOP_REL) fprintf(stderr, "%s.%s step %d x: %.3g\n", cn, sn, i, e);
                assert_true(e <= LOOP_REL);
                lm_array_release(x);
                x = nx;
                lm_array *rel[] = {sc, want_sc, want_x, mo0, mo, nz0, nz};
                for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) lm_array_release(rel[k]);
            }
            lm_array_release(x);
            lm_sampler_free(s);
        }
    printf("  %s: %d loops of 4 steps (%d model calls): scaled input worst %.2g, x worst %.2g (relative to the "
           "largest value)\n", dev->spec, loops, ncalls, worst_scaled, worst_x);
    print_suites("x", su_x);
}

static void test_loops_cpu(void **state)
{
    (void)state;
    NEED_REF();
    run_loops(lm_device_cpu());
}

static void test_loops_vulkan(void **state)
{
    (void)state;
    NEED_REF();
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_loops(vk);
}

/* f16 latents and model outputs: the step computes in f32 (diffusers
 * upcasts the sample) and returns f16 */
static void test_loops_f16(void **state)
{
    (void)state;
    NEED_REF();
    double worst = 0;
    int loops = 0;
    for (int su = 0; su < NSUITES; su++)
    if (SUITE_PRESENT(su))
    for (int si = 0; si < suites[su].n; si++, loops++) {
        const char *sn = suites[su].names[si];
        cur = suites[su].set;
        lm_sampler *s = make("eps", sn, 4, 1.0);
        lm_array *x = lm_cast(get("eps.%s.4.x0", sn), LM_F16);
        lm_array *mos = get("eps.%s.4.model_out", sn), *noise = get("eps.%s.4.noise", sn);
        lm_array *xs = get("eps.%s.4.xs", sn);
        for (int i = 0; i < (int)mos->shape[0]; i++) {
            lm_array *mo0 = slice0(mos, i), *mo = lm_cast(mo0, LM_F16), *nz0 = slice0(noise, i);
            lm_array *nz = lm_cast(nz0, LM_F16), *want = slice0(xs, i);
            lm_array *sc = lm_sampler_scale_input(s, x, i);
            assert_int_equal(sc->dtype, LM_F16);
            lm_array *nx = lm_sampler_step(s, mo, i, x, lm_sampler_needs_noise(s, i) ? nz : NULL);
            assert_non_null(nx);
            assert_int_equal(nx->dtype, LM_F16);
            double e = rel_err(nx, want);
            if (e > worst) worst = e;
            assert_true(e <= 1e-2);
            lm_array_release(x);
            x = nx;
            lm_array *rel[] = {mo0, mo, nz0, nz, want, sc};
            for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) lm_array_release(rel[k]);
        }
        lm_array_release(x);
        lm_sampler_free(s);
    }
    printf("  f16 latents, %d samplers x 4 steps: x worst %.2g relative (f16 rounding)\n", loops, worst);
}

/* ---- img2img: get_timesteps(20, 0.6), add_noise and (where recorded) the
 * first 4 steps from there ---- */
static void test_img2img(void **state)
{
    (void)state;
    NEED_REF();
    double worst = 0, worst_x = 0, su_x[NSUITES] = {0}, su_n[NSUITES] = {0};
    int kept = 0, starts = 0, loops = 0;
    for (int su = 0; su < NSUITES; su++)
    if (SUITE_PRESENT(su))
    for (int ci = 0; ci < 3; ci++)
        for (int si = 0; si < suites[su].n; si++, starts++) {
            const char *cn = config_names[ci], *sn = suites[su].names[si];
            cur = suites[su].set;
            lm_sampler *s = make(cn, sn, 20, 0.6);
            kept = lm_sampler_count(s);
            lm_array *wt = get("%s.%s.20.s06.timesteps", cn, sn);
            assert_non_null(wt);
            assert_int_equal(lm_sampler_count(s), wt->size);
            double *w = tu_read(wt);
            for (int i = 0; i < lm_sampler_count(s); i++)
                assert_true(fabs(lm_sampler_timestep(s, i) - w[i]) <= SCHED_REL * fmax(fabs(w[i]), 1));
            free(w);
            lm_array *nd = lm_sampler_add_noise(s, get("%s.%s.20.s06.x0_clean", cn, sn),
                                                get("%s.%s.20.s06.noise", cn, sn));
            double e = rel_err(nd, get("%s.%s.20.s06.noised", cn, sn));
            if (e > worst) worst = e;
            if (e > su_n[su]) su_n[su] = e;
            assert_true(e <= LOOP_REL);
            lm_array *mos = get("%s.%s.20.s06.model_out", cn, sn), *xs = get("%s.%s.20.s06.xs", cn, sn);
            lm_array *draws = get("%s.%s.20.s06.draws", cn, sn);
            lm_array *x = lm_array_retain(get("%s.%s.20.s06.noised", cn, sn));
            for (int i = 0; mos && i < 4; i++) {
                lm_array *mo = slice0(mos, i), *want = slice0(xs, i), *nz = draws ? slice0(draws, i) : NULL;
                assert_true(!lm_sampler_needs_noise(s, i) || nz);
                lm_array *nx = lm_sampler_step(s, mo, i, x, lm_sampler_needs_noise(s, i) ? nz : NULL);
                lm_array_release(nz);
                if (!nx) fprintf(stderr, "%s.%s img2img step %d: %s\n", cn, sn, i, lm_error_message());
                assert_non_null(nx);
                e = rel_err(nx, want);
                if (e > worst_x) worst_x = e;
                if (e > su_x[su]) su_x[su] = e;
                if (e > LOOP_REL) fprintf(stderr, "%s.%s img2img step %d x: %.3g\n", cn, sn, i, e);
                assert_true(e <= LOOP_REL);
                lm_array_release(x);
                x = nx;
                lm_array_release(mo);
                lm_array_release(want);
            }
            loops += mos != NULL;
            lm_array_release(x);
            lm_array_release(nd);
            lm_sampler_free(s);
        }
    printf("  %d img2img starts at strength 0.6 of 20 steps (%d steps kept, timesteps equal): add_noise worst "
           "%.2g; %d of them stepped 4 times: x worst %.2g\n", starts, kept, worst, loops, worst_x);
    print_suites("add_noise", su_n);
    print_suites("img2img x", su_x);
}

/* ---- noise ---- */
static uint32_t *noise_bits(uint64_t seed, uint64_t stream, int ndim, const int64_t *shape, lm_device *dev)
{
    lm_array *a = lm_diffusion_noise(seed, stream, ndim, shape, LM_F32, dev);
    assert_non_null(a);
    assert_true(a->device == (dev ? dev : lm_device_default()));
    uint32_t *b = malloc((size_t)a->size * 4);
    assert_int_equal(lm_array_read(a, b, LM_F32), LM_OK);
    lm_array_release(a);
    return b;
}

static void test_noise(void **state)
{
    (void)state;
    const int64_t one[4] = {1, 4, 64, 64}, two[4] = {2, 4, 64, 64};
    const size_t n = 4 * 64 * 64;
    uint32_t *ref1 = noise_bits(42, 0, 4, one, lm_device_cpu());
    /* thread counts */
    for (int th = 1; th <= 4; th *= 2) {
        lm_cpu_set_threads(th);
        uint32_t *b = noise_bits(42, 0, 4, one, lm_device_cpu());
        assert_memory_equal(b, ref1, n * 4);
        free(b);
    }
    lm_cpu_set_threads(64);   /* back to all of them */
    /* the first image of a batch of two is the image alone; the batch of
       seeds 42 and 43 is their images side by side */
    uint32_t *b2 = noise_bits(42, 0, 4, two, lm_device_cpu());
    assert_memory_equal(b2, ref1, n * 4);
    free(b2);
    uint32_t *s43 = noise_bits(43, 0, 4, one, lm_device_cpu());
    assert_memory_not_equal(s43, ref1, n * 4);
    lm_array *a = lm_diffusion_noise(42, 0, 4, one, LM_F32, lm_device_cpu());
    lm_array *b = lm_diffusion_noise(43, 0, 4, one, LM_F32, lm_device_cpu());
    lm_array *ab[2] = {a, b}, *cat = lm_concat(2, ab, 0);
    uint32_t *c = malloc(2 * n * 4);
    assert_int_equal(lm_array_read(cat, c, LM_F32), LM_OK);
    assert_memory_equal(c, ref1, n * 4);
    assert_memory_equal(c + n, s43, n * 4);
    free(c);
    lm_array_release(cat);
    lm_array_release(a);
    lm_array_release(b);
    /* streams differ */
    uint32_t *st1 = noise_bits(42, 1, 4, one, lm_device_cpu());
    assert_memory_not_equal(st1, ref1, n * 4);
    /* a standard normal: mean and std of 16384 draws */
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, &ref1[i], 4);
        sum += f;
        sq += (double)f * f;
    }
    double mean = sum / n, sd = sqrt(sq / n - mean * mean);
    printf("  noise: mean %.4f, std %.4f over %zu draws\n", mean, sd, n);
    assert_true(fabs(mean) < 0.03 && fabs(sd - 1) < 0.03);
    /* f16 is the f32 draw rounded */
    lm_array *h = lm_diffusion_noise(42, 0, 4, one, LM_F16, lm_device_cpu());
    assert_int_equal(h->dtype, LM_F16);
    float *hf = malloc(n * 4);
    assert_int_equal(lm_array_read(h, hf, LM_F32), LM_OK);
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, &ref1[i], 4);
        assert_true(hf[i] == lm_f16_to_f32(lm_f32_to_f16(f)));
    }
    free(hf);
    lm_array_release(h);
    /* Vulkan: the same bits */
    lm_device *vk = tu_vulkan_device();
    if (vk) {
        uint32_t *v = noise_bits(42, 0, 4, one, vk);
        assert_memory_equal(v, ref1, n * 4);
        free(v);
        printf("  noise on %s: bit-identical to the CPU\n", vk->spec);
        /* why the noise is drawn on the host: the device's own normal
           (lm_random_normal) uses its sin/cos/log (reported, not pinned) */
        lm_key key = lm_random_key(42);
        lm_array *rc = lm_random_normal(4, one, 0, 1, LM_F32, key, lm_device_cpu());
        lm_array *rv = lm_random_normal(4, one, 0, 1, LM_F32, key, vk);
        uint32_t *bc = malloc(n * 4), *bv = malloc(n * 4);
        assert_int_equal(lm_array_read(rc, bc, LM_F32), LM_OK);
        assert_int_equal(lm_array_read(rv, bv, LM_F32), LM_OK);
        size_t ndiff = 0;
        for (size_t i = 0; i < n; i++) ndiff += bc[i] != bv[i];
        printf("  lm_random_normal on %s: %zu of %zu values differ in bits from the CPU's\n", vk->spec, ndiff, n);
        free(bc);
        free(bv);
        lm_array_release(rc);
        lm_array_release(rv);
    } else {
        printf("  no Vulkan device: the Vulkan noise check skipped\n");
    }
    assert_null(lm_diffusion_noise(1, 0, 4, one, LM_I32, NULL));
    free(ref1);
    free(s43);
    free(st1);
}

/* ---- names ---- */
static void test_parse(void **state)
{
    (void)state;
    static const struct { const char *n; lm_sampler_kind k; bool karras; } cases[] = {
        {"euler", LM_SAMPLER_EULER, false},         {"Euler", LM_SAMPLER_EULER, false},
        {"euler_a", LM_SAMPLER_EULER_A, false},     {"Euler a", LM_SAMPLER_EULER_A, false},
        {"dpm++2m", LM_SAMPLER_DPMPP_2M, false},    {"DPM++ 2M", LM_SAMPLER_DPMPP_2M, false},
        {"dpm++2m_karras", LM_SAMPLER_DPMPP_2M, true}, {"DPM++ 2M Karras", LM_SAMPLER_DPMPP_2M, true},
        {"dpmpp_2m", LM_SAMPLER_DPMPP_2M, false},   {"dpmpp_2m_karras", LM_SAMPLER_DPMPP_2M, true},
        {"DDIM", LM_SAMPLER_DDIM, false},           {"ddim", LM_SAMPLER_DDIM, false},
        {"lms", LM_SAMPLER_LMS, false},             {"LMS", LM_SAMPLER_LMS, false},
        {"lms_karras", LM_SAMPLER_LMS, true},       {"LMS Karras", LM_SAMPLER_LMS, true},
        {"euler_karras", LM_SAMPLER_EULER, true},   {"Euler Karras", LM_SAMPLER_EULER, true},
        {"heun", LM_SAMPLER_HEUN, false},           {"Heun Karras", LM_SAMPLER_HEUN, true},
        {"DPM++ 2M SDE", LM_SAMPLER_DPMPP_2M_SDE, false}, {"DPM++ 2M SDE Karras", LM_SAMPLER_DPMPP_2M_SDE, true},
        {"dpmpp_2m_sde_karras", LM_SAMPLER_DPMPP_2M_SDE, true}, {"dpm++2s_a", LM_SAMPLER_DPMPP_2S_A, false},
        {"DPM++ 2S a Karras", LM_SAMPLER_DPMPP_2S_A, true}, {"UniPC", LM_SAMPLER_UNIPC, false},
        {"lcm", LM_SAMPLER_LCM, false},             {"LCM", LM_SAMPLER_LCM, false},
        /* an exponential row parses as its kind; lm_sampler_find names the row */
        {"Euler Exponential", LM_SAMPLER_EULER, false}, {"dpmpp_2m_sde_exponential", LM_SAMPLER_DPMPP_2M_SDE, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool karras = !cases[i].karras;
        assert_int_equal(lm_sampler_parse(cases[i].n, &karras), cases[i].k);
        assert_int_equal(karras, cases[i].karras);
    }
    static const char *const bad[] = {"", "eulerx", "dpm++ 2s", "Euler a Karras", "DDIM Karras",
                                      "DPM++ 3M SDE Karras", "lms_karras_karras", "LCM Karras",
                                      "UniPC Beta", "LCM Exponential", "heun a"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(lm_sampler_parse(bad[i], NULL), LM_SAMPLER_NONE);
        assert_non_null(strstr(lm_error_message(), "unknown sampler"));
    }
    assert_int_equal(lm_sampler_parse(NULL, NULL), LM_SAMPLER_NONE);
    assert_string_equal(lm_sampler_name(LM_SAMPLER_DPMPP_2M, true), "dpm++2m_karras");
    assert_string_equal(lm_sampler_name(LM_SAMPLER_EULER_A, false), "euler_a");
    assert_string_equal(lm_sampler_name(LM_SAMPLER_LMS, true), "lms_karras");
    assert_string_equal(lm_sampler_name(LM_SAMPLER_EULER_A, true), "?");
    assert_string_equal(lm_sampler_name(LM_SAMPLER_EULER, false), "euler");
    assert_string_equal(lm_sampler_find("DPM++ 2M SDE Exponential")->name, "dpm++2m_sde_exponential");
    assert_string_equal(lm_sampler_find("euler exponential")->a1111_schedule, "Exponential");
    char full[64];
    assert_string_equal(lm_sampler_a1111_name(lm_sampler_find("dpmpp_2s_a_karras"), full, sizeof full),
                        "DPM++ 2S a Karras");
    /* the error lists every row */
    lm_sampler_find("nope");
    const lm_sampler_info *r;
    for (int i = 0; (r = lm_sampler_info_at(i)); i++) assert_non_null(strstr(lm_error_message(), r->name));
    printf("  %s\n", lm_error_message());
}

/* ---- the table: every row is whole, found by both its names, and builds ---- */
static void test_table(void **state)
{
    (void)state;
    bool kind_has_row[LM_SAMPLER_KIND_COUNT] = {false};
    const lm_sampler_info *r;
    char list[1024], a1111[1024];
    lm_sampler_list(list, sizeof list, false);
    lm_sampler_list(a1111, sizeof a1111, true);
    int n = 0;
    for (int i = 0; (r = lm_sampler_info_at(i)); i++, n++) {
        assert_non_null(r->name);
        assert_non_null(r->a1111);
        assert_non_null(r->a1111_schedule);
        assert_non_null(r->diffusers);
        assert_non_null(r->config);
        assert_true(r->kind >= 0 && r->kind < LM_SAMPLER_KIND_COUNT);
        assert_string_not_equal(lm_sampler_kind_name(r->kind), "?");
        kind_has_row[r->kind] = true;
        assert_true(r->order_min >= 1 && r->order_min <= r->order_max);
        assert_true(r->predictions & LM_PRED_BIT(LM_PRED_EPSILON));
        assert_true((r->sigmas == LM_SIGMAS_KARRAS) == !strcmp(r->a1111_schedule, "Karras"));
        assert_true((r->sigmas == LM_SIGMAS_EXPONENTIAL) == !strcmp(r->a1111_schedule, "Exponential"));
        /* found by its name and by A1111's (with " Karras" for a Karras row), nothing else
           folding to the same spelling */
        assert_ptr_equal(lm_sampler_find(r->name), r);
        char full[64];
        lm_sampler_a1111_name(r, full, sizeof full);
        assert_ptr_equal(lm_sampler_find(full), r);
        assert_non_null(strstr(list, r->name));
        assert_non_null(strstr(a1111, full));
        for (int j = 0; j < i; j++) assert_string_not_equal(lm_sampler_info_at(j)->name, r->name);
        /* builds on SD's config, with its row, its noise and its sigmas */
        lm_sched_config c;
        config_of("eps", &c);
        lm_sampler *s = lm_sampler_new_row(&c, r, 20, 1.0);
        if (!s) fprintf(stderr, "%s: %s\n", r->name, lm_error_message());
        assert_non_null(s);
        assert_ptr_equal(lm_sampler_get_info(s), r);
        assert_int_equal(lm_sampler_get_kind(s), r->kind);
        assert_int_equal(lm_sampler_needs_noise(s, 0), r->ancestral);
        assert_int_equal(isnan(lm_sampler_sigma(s, 0)), r->sigmas == LM_SIGMAS_NONE);
        lm_sampler_free(s);
        lm_sched_config_clear(&c);
    }
    for (int k = 0; k < LM_SAMPLER_KIND_COUNT; k++) {
        if (!kind_has_row[k] || !strcmp(lm_sampler_kind_name((lm_sampler_kind)k), "?"))
            fprintf(stderr, "sampler kind %d: %s\n", k, kind_has_row[k] ? "no method row" : "no row in the table");
        assert_true(kind_has_row[k]);
        assert_string_not_equal(lm_sampler_kind_name((lm_sampler_kind)k), "?");
    }
    assert_null(lm_sampler_info_at(n));
    assert_null(lm_sampler_info_at(-1));
    printf("  %d rows: %s\n  A1111: %s\n", n, list, a1111);
    /* the config's use_karras_sigmas picks a kind's Karras row where it has one */
    cJSON *j = cJSON_Parse("{\"use_karras_sigmas\": true}");
    lm_sched_config c;
    assert_int_equal(lm_sched_config_from_json(j, "karras", &c), LM_OK);
    cJSON_Delete(j);
    static const struct { lm_sampler_kind k; const char *row; } karras_rows[] = {
        {LM_SAMPLER_EULER, "euler_karras"}, {LM_SAMPLER_EULER_A, "euler_a"}, {LM_SAMPLER_DPMPP_2M, "dpm++2m_karras"},
        {LM_SAMPLER_DDIM, "ddim"}, {LM_SAMPLER_LMS, "lms_karras"}, {LM_SAMPLER_HEUN, "heun_karras"},
        {LM_SAMPLER_DPMPP_2M_SDE, "dpm++2m_sde_karras"}, {LM_SAMPLER_DPMPP_2S_A, "dpm++2s_a_karras"},
        {LM_SAMPLER_UNIPC, "unipc_karras"}, {LM_SAMPLER_LCM, "lcm"},
    };
    for (size_t i = 0; i < sizeof karras_rows / sizeof *karras_rows; i++) {
        lm_sampler *s = lm_sampler_new(&c, karras_rows[i].k, false, 8, 1.0);
        assert_non_null(s);
        assert_string_equal(lm_sampler_get_info(s)->name, karras_rows[i].row);
        lm_sampler_free(s);
    }
    lm_sched_config_clear(&c);
    /* and use_exponential_sigmas its exponential row (Euler a, DDIM and LCM do not read it) */
    j = cJSON_Parse("{\"use_exponential_sigmas\": true}");
    assert_int_equal(lm_sched_config_from_json(j, "exponential", &c), LM_OK);
    cJSON_Delete(j);
    static const struct { lm_sampler_kind k; const char *row; } exp_rows[] = {
        {LM_SAMPLER_EULER, "euler_exponential"}, {LM_SAMPLER_DPMPP_2M, "dpm++2m_exponential"},
        {LM_SAMPLER_DPMPP_2M_SDE, "dpm++2m_sde_exponential"}, {LM_SAMPLER_DDIM, "ddim"}, {LM_SAMPLER_LCM, "lcm"},
        {LM_SAMPLER_HEUN, "heun_exponential"}, {LM_SAMPLER_LMS, "lms_exponential"},
        {LM_SAMPLER_DPMPP_2S_A, "dpm++2s_a_exponential"}, {LM_SAMPLER_UNIPC, "unipc_exponential"},
    };
    for (size_t i = 0; i < sizeof exp_rows / sizeof *exp_rows; i++) {
        lm_sampler *s = lm_sampler_new(&c, exp_rows[i].k, false, 8, 1.0);
        assert_non_null(s);
        assert_string_equal(lm_sampler_get_info(s)->name, exp_rows[i].row);
        lm_sampler_free(s);
    }
    lm_sched_config_clear(&c);
    /* Karras asked of a kind without a Karras row */
    lm_sched_config_default(&c);
    assert_null(lm_sampler_new(&c, LM_SAMPLER_DDIM, true, 8, 1.0));
    assert_non_null(strstr(lm_error_message(), "no Karras"));
}

/* ---- schedules with known values (no fixture): SD 1.x's config ---- */
static void test_known(void **state)
{
    (void)state;
    lm_sampler *s = make("eps", "ddim", 20, 1.0);
    assert_int_equal(lm_sampler_count(s), 20);
    for (int i = 0; i < 20; i++) assert_true(lm_sampler_timestep(s, i) == 951 - 50 * i);
    assert_true(lm_sampler_init_sigma(s) == 1.0);
    assert_true(isnan(lm_sampler_sigma(s, 0)));
    lm_sampler_free(s);
    /* SD's sigma range 0.0292 .. 14.6146 as A1111 and k-diffusion print it */
    s = make("eps", "dpmpp_2m_karras", 20, 1.0);
    assert_true(fabs(lm_sampler_sigma(s, 0) - 14.6146) < 1e-4);
    assert_true(fabs(lm_sampler_sigma(s, 19) - 0.0292) < 1e-4);
    assert_true(lm_sampler_sigma(s, 20) == 0);
    assert_true(lm_sampler_timestep(s, 0) == 999);
    assert_true(lm_sampler_timestep(s, 19) == 0);
    lm_sampler_free(s);
    /* linspace spacing (no fixture covers it): numpy rounds half to even
       (linspace(0, 999, 7) holds 166.5 and 832.5: DPM++ gets 166 and 832)
       and Euler keeps fractional float32 timesteps */
    lm_sched_config c;
    cJSON *j = cJSON_Parse("{\"beta_schedule\": \"squaredcos_cap_v2\"}");
    assert_int_equal(lm_sched_config_from_json(j, "cos", &c), LM_OK);
    cJSON_Delete(j);
    s = lm_sampler_new(&c, LM_SAMPLER_DPMPP_2M, false, 6, 1.0);
    assert_non_null(s);
    static const double dpm6[] = {999, 832, 666, 500, 333, 166};
    for (int i = 0; i < 6; i++) assert_true(lm_sampler_timestep(s, i) == dpm6[i]);
    /* squaredcos_cap_v2: alphas_cumprod telescopes to alpha_bar((t+1)/T) / alpha_bar(0) */
    double ab0 = pow(cos(0.008 / 1.008 * M_PI / 2), 2), ab = pow(cos((0.501 + 0.008) / 1.008 * M_PI / 2), 2) / ab0;
    assert_true(fabs(lm_sampler_sigma(s, 3) - sqrt((1 - ab) / ab)) < 1e-5);
    lm_sampler_free(s);
    s = lm_sampler_new(&c, LM_SAMPLER_DDIM, false, 6, 1.0);
    assert_non_null(s);   /* DDIM's default spacing is leading: 1000 // 6 = 166 apart */
    for (int i = 0; i < 6; i++) assert_true(lm_sampler_timestep(s, i) == 166.0 * (5 - i));
    lm_sampler_free(s);
    s = lm_sampler_new(&c, LM_SAMPLER_EULER, false, 3, 1.0);
    assert_true(lm_sampler_timestep(s, 0) == 999 && lm_sampler_timestep(s, 1) == 499.5 &&
                lm_sampler_timestep(s, 2) == 0);
    assert_true(lm_sampler_init_sigma(s) == lm_sampler_sigma(s, 0));   /* linspace: sigma_max */
    lm_sampler_free(s);
    lm_sched_config_clear(&c);
    /* img2img at strength 0.5 of 4 steps: the last 2 */
    s = make("eps", "euler", 4, 0.5);
    assert_int_equal(lm_sampler_count(s), 2);
    assert_true(lm_sampler_timestep(s, 0) == 251 && lm_sampler_timestep(s, 1) == 1);
    assert_true(isnan(lm_sampler_timestep(s, 2)));
    lm_sampler_free(s);
    /* Heun: every timestep but the first twice, 2 * 4 - 1 model calls, the
       sigmas likewise; img2img at 0.5 keeps the last 2 steps: 3 calls */
    static const double heun4[] = {751, 501, 501, 251, 251, 1, 1};
    s = make("eps", "heun", 4, 1.0);
    assert_int_equal(lm_sampler_count(s), 7);
    for (int i = 0; i < 7; i++) assert_true(lm_sampler_timestep(s, i) == heun4[i]);
    assert_true(lm_sampler_sigma(s, 1) == lm_sampler_sigma(s, 2) && lm_sampler_sigma(s, 1) < lm_sampler_sigma(s, 0));
    assert_true(lm_sampler_sigma(s, 7) == 0);
    lm_sampler_free(s);
    s = make("eps", "heun", 4, 0.5);
    assert_int_equal(lm_sampler_count(s), 3);
    assert_true(lm_sampler_timestep(s, 0) == 251 && lm_sampler_timestep(s, 2) == 1);
    lm_sampler_free(s);
    /* LCM: 4 of the 50-step grid 999, 979, ... whatever the spacing; no
       noise after the last step */
    static const double lcm4[] = {999, 759, 499, 259};
    s = make("tr", "lcm", 4, 1.0);
    for (int i = 0; i < 4; i++) assert_true(lm_sampler_timestep(s, i) == lcm4[i]);
    assert_true(lm_sampler_needs_noise(s, 2) && !lm_sampler_needs_noise(s, 3));
    assert_true(lm_sampler_init_sigma(s) == 1.0);
    lm_array *x = lm_zeros(2, (int64_t[]){2, 2}, LM_F32, lm_device_cpu());
    lm_array *last = lm_sampler_step(s, x, 3, x, NULL);   /* the last step takes no noise */
    assert_non_null(last);
    assert_null(lm_sampler_step(s, x, 2, x, NULL));
    assert_non_null(strstr(lm_error_message(), "lcm step 2: needs noise"));
    lm_array_release(last);
    lm_array_release(x);
    lm_sampler_free(s);
}

/* ---- errors ---- */
static void expect_config_error(const char *json, const char *needle)
{
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    lm_sched_config c;
    lm_status st = lm_sched_config_from_json(j, "sched.json", &c);
    cJSON_Delete(j);
    assert_int_not_equal(st, LM_OK);
    printf("  error: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), needle));
    assert_non_null(strstr(lm_error_message(), "sched.json"));
}

static void expect_new_error(const char *json, lm_sampler_kind k, int steps, double strength, const char *needle)
{
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    lm_sched_config c;
    assert_int_equal(lm_sched_config_from_json(j, "sched.json", &c), LM_OK);
    cJSON_Delete(j);
    lm_sampler *s = lm_sampler_new(&c, k, false, steps, strength);
    lm_sched_config_clear(&c);
    assert_null(s);
    printf("  error: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), needle));
}

static void test_errors(void **state)
{
    (void)state;
    expect_config_error("{\"beta_schedule\": \"sigmoid\"}", "beta_schedule \"sigmoid\" is not supported");
    expect_config_error("{\"timestep_spacing\": \"even\"}", "timestep_spacing");
    expect_config_error("{\"prediction_type\": \"flow_prediction\"}", "prediction_type");
    expect_config_error("{\"num_train_timesteps\": 0}", "num_train_timesteps");
    expect_config_error("{\"trained_betas\": [0.1, 0.2]}", "trained_betas");
    expect_config_error("{\"clip_sample\": 3}", "clip_sample");
    expect_config_error("{\"beta_end\": 1.5}", "beta_end");
    expect_new_error("{\"rescale_betas_zero_snr\": true}", LM_SAMPLER_EULER, 20, 1, "rescale_betas_zero_snr");
    expect_new_error("{\"prediction_type\": \"sample\"}", LM_SAMPLER_EULER_A, 20, 1, "\"sample\"");
    expect_new_error("{\"thresholding\": true}", LM_SAMPLER_DDIM, 20, 1, "thresholding");
    expect_new_error("{\"algorithm_type\": \"sde-dpmsolver++\"}", LM_SAMPLER_DPMPP_2M, 20, 1, "sde-dpmsolver++");
    expect_new_error("{\"solver_order\": 3}", LM_SAMPLER_DPMPP_2M, 20, 1, "solver_order 3");
    expect_new_error("{\"solver_type\": \"rk4\"}", LM_SAMPLER_DPMPP_2M, 20, 1, "solver_type \"rk4\"");
    expect_new_error("{\"use_exponential_sigmas\": true, \"use_karras_sigmas\": true}", LM_SAMPLER_LMS, 20, 1,
                     "use_karras_sigmas and use_exponential_sigmas");
    expect_new_error("{}", LM_SAMPLER_LCM, 51, 1, "original_inference_steps (50)");
    expect_new_error("{\"original_inference_steps\": 2000}", LM_SAMPLER_LCM, 4, 1, "original_inference_steps 2000");
    expect_new_error("{\"predict_x0\": false}", LM_SAMPLER_UNIPC, 20, 1, "predict_x0");
    expect_new_error("{\"disable_corrector\": [0]}", LM_SAMPLER_UNIPC, 20, 1, "disable_corrector");
    expect_new_error("{\"solver_order\": 3}", LM_SAMPLER_UNIPC, 20, 1, "solver_order 3");
    expect_new_error("{\"final_sigmas_type\": \"sigma_min\"}", LM_SAMPLER_DPMPP_2S_A, 20, 1, "sigma_min");
    expect_new_error("{\"thresholding\": true}", LM_SAMPLER_LCM, 4, 1, "thresholding");
    expect_new_error("{\"use_beta_sigmas\": true}", LM_SAMPLER_DPMPP_2M_SDE, 20, 1, "beta");
    expect_new_error("{\"interpolation_type\": \"log_linear\"}", LM_SAMPLER_EULER, 20, 1, "interpolation_type");
    expect_new_error("{\"use_beta_sigmas\": true}", LM_SAMPLER_LMS, 20, 1, "lms: beta, lu-lambda");
    expect_new_error("{}", LM_SAMPLER_EULER, 0, 1, "steps 0");
    expect_new_error("{\"num_train_timesteps\": 10}", LM_SAMPLER_DDIM, 11, 1, "steps 11");
    expect_new_error("{}", LM_SAMPLER_EULER, 4, 0.1, "leaves no step");
    expect_new_error("{}", LM_SAMPLER_EULER, 4, 1.5, "strength");
    /* a UniPC config (solver_type bh2) builds every sampler: DPM++ maps it to midpoint */
    for (int kk = 0; kk < LM_SAMPLER_KIND_COUNT; kk++) {
        cJSON *u = cJSON_Parse("{\"_class_name\": \"UniPCMultistepScheduler\", \"solver_type\": \"bh2\"}");
        lm_sched_config uc;
        assert_int_equal(lm_sched_config_from_json(u, "unipc", &uc), LM_OK);
        cJSON_Delete(u);
        lm_sampler *us = lm_sampler_new(&uc, (lm_sampler_kind)kk, false, 20, 1);
        assert_non_null(us);
        lm_sampler_free(us);
    }
    /* trained_betas of the right length are used */
    char buf[16384];
    int k = snprintf(buf, sizeof buf, "{\"num_train_timesteps\": 100, \"trained_betas\": [");
    for (int i = 0; i < 100; i++) k += snprintf(buf + k, sizeof buf - (size_t)k, "%s0.01", i ? "," : "");
    snprintf(buf + k, sizeof buf - (size_t)k, "]}");
    cJSON *j = cJSON_Parse(buf);
    lm_sched_config c;
    assert_int_equal(lm_sched_config_from_json(j, "tb", &c), LM_OK);
    cJSON_Delete(j);
    lm_sampler *s = lm_sampler_new(&c, LM_SAMPLER_EULER, false, 4, 1);
    assert_non_null(s);
    /* sigma at t = 99 of constant betas 0.01: sqrt(1/0.99^100 - 1) */
    double want = sqrt(1 / pow(0.99, 100) - 1);
    assert_true(fabs(lm_sampler_sigma(s, 0) - want) < 1e-5 * want);
    lm_sampler_free(s);
    lm_sched_config_clear(&c);
    /* a step out of range, a missing noise, a step out of order */
    lm_sampler *e = make("eps", "euler_a", 4, 1.0);
    lm_array *x = lm_zeros(2, (int64_t[]){2, 2}, LM_F32, lm_device_cpu());
    assert_null(lm_sampler_step(e, x, 4, x, NULL));
    assert_non_null(strstr(lm_error_message(), "step 4 outside"));
    assert_null(lm_sampler_step(e, x, 0, x, NULL));
    assert_non_null(strstr(lm_error_message(), "needs noise"));
    lm_sampler_free(e);
    e = make("eps", "dpmpp_2m", 4, 1.0);
    assert_null(lm_sampler_step(e, x, 2, x, NULL));
    assert_non_null(strstr(lm_error_message(), "in order"));
    lm_sampler_free(e);
    e = make("eps", "lms", 4, 1.0);
    assert_null(lm_sampler_step(e, x, 1, x, NULL));
    assert_non_null(strstr(lm_error_message(), "in order"));
    lm_sampler_free(e);
    lm_array_release(x);
}

/* scheduler_config.json as diffusers writes DPM++'s: -Infinity */
static void test_read(void **state)
{
    (void)state;
    char dir[64];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "sched"), 0);
    char path[96];
    snprintf(path, sizeof path, "%s/scheduler_config.json", dir);
    const char *json = "{\"_class_name\": \"DPMSolverMultistepScheduler\", \"lambda_min_clipped\": -Infinity,"
                       " \"beta_schedule\": \"scaled_linear\", \"note\": \"Infinity in a string\", "
                       "\"use_karras_sigmas\": true}";
    tu_spit(path, json, strlen(json));
    lm_sched_config c;
    lm_status st = lm_sched_config_read(dir, &c);
    if (st) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    assert_true(isinf(c.lambda_min_clipped) && c.lambda_min_clipped < 0);
    assert_true(c.use_karras_sigmas);
    assert_int_equal(c.beta_schedule, LM_BETA_SCALED_LINEAR);
    lm_sched_config_clear(&c);
    const char *cut = "{\"beta_schedule\": ";
    tu_spit(path, cut, strlen(cut));
    assert_int_not_equal(lm_sched_config_read(dir, &c), LM_OK);
    printf("  error: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "scheduler_config.json"));
    unlink(path);
    assert_int_not_equal(lm_sched_config_read(dir, &c), LM_OK);
    rmdir(dir);
}

/* DDIM's clip_sample: DDIMScheduler defaults it to true, so a config without
 * the key clips the x0 prediction to [-1, 1] (an x0 far out of range gives
 * the same step whatever its size) and one saying false does not */
static float ddim_step_at(const lm_sched_config *c, double xv)
{
    lm_sampler *s = lm_sampler_new(c, LM_SAMPLER_DDIM, false, 4, 1.0);
    assert_non_null(s);
    int64_t sh[] = {2, 2};
    lm_array *x = lm_full(2, sh, xv, LM_F32, lm_device_cpu());
    lm_array *mo = lm_zeros(2, sh, LM_F32, lm_device_cpu());   /* epsilon 0: x0 = x / sqrt(acp) */
    lm_array *nx = lm_sampler_step(s, mo, 1, x, NULL);
    assert_non_null(nx);
    float v[4];
    assert_int_equal(lm_array_read(nx, v, LM_F32), LM_OK);
    lm_array_release(nx);
    lm_array_release(mo);
    lm_array_release(x);
    lm_sampler_free(s);
    return v[0];
}

static void test_ddim_clip(void **state)
{
    (void)state;
    lm_sched_config c;
    lm_sched_config_default(&c);                 /* no clip_sample key: diffusers clips */
    float a = ddim_step_at(&c, 10.0), b = ddim_step_at(&c, 100.0);
    assert_true(a == b && a > 0.0f && a < 1.0f);
    c.clip_sample = 0;                           /* "clip_sample": false */
    a = ddim_step_at(&c, 10.0), b = ddim_step_at(&c, 100.0);
    assert_true(a > 1.0f && b > 5.0f * a);
    lm_sched_config_clear(&c);
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    have_ref = access(REF, R_OK) == 0 && access(REF_MORE, R_OK) == 0;
    have_37 = have_ref && access(REF_37, R_OK) == 0;
    if (have_37 && lm_load_file_to(REF_37, lm_device_cpu(), &ref_37) != LM_OK) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    if (have_ref && (lm_load_file_to(REF, lm_device_cpu(), &ref) != LM_OK ||
                     lm_load_file_to(REF_MORE, lm_device_cpu(), &ref_more) != LM_OK)) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lm_tensor_set_free(&ref);
    lm_tensor_set_free(&ref_more);
    lm_tensor_set_free(&ref_37);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_loops_cpu),
        cmocka_unit_test(test_loops_vulkan),
        cmocka_unit_test(test_loops_f16),
        cmocka_unit_test(test_img2img),
        cmocka_unit_test(test_noise),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_known),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_ddim_clip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
