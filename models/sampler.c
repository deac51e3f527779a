/* sampler.c - Euler, Euler ancestral, DPM++ 2M (Karras) and DDIM as
 * diffusers' schedulers compute them (schedulers/scheduling_*.py), and the
 * seeded noise diffusion starts from.
 *
 * The schedule is built on the host the way diffusers builds it: betas,
 * alphas_cumprod and sigmas are float32 torch tensors there (torch.linspace
 * in float, cumprod accumulated in double on the CPU, sqrt in float), the
 * timestep grids are numpy float64 (linspace, arange, round half to even)
 * cast to float32 or int64 per scheduler; each rounding is repeated here so
 * timesteps come out equal.  The per-step scalars are float32 0-d tensors in
 * diffusers, so they are float arithmetic here too. */
#include <ctype.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "models/diffusers_config.h"
#include "models/sampler.h"
#include "error.h"
#include "ops.h"
#include "random.h"

#define SCHED_JSON_MAX (1u << 20)
#define MAX_TRAIN_STEPS 100000

struct lm_sampler {
    lm_sampler_kind kind;
    lm_sched_config c;          /* trained_betas not kept */
    bool karras;
    int steps;                  /* num_inference_steps asked for */
    int64_t T;                  /* num_train_timesteps */
    float *acp;                 /* alphas_cumprod [T] */
    int n;                      /* len(scheduler.timesteps) */
    double *ts;                 /* scheduler.timesteps [n] */
    float *sig;                 /* scheduler.sigmas [n + 1]; NULL for DDIM */
    int begin;                  /* img2img's t_start */
    float init_sigma;
    /* DPM++: the previous x0 prediction (model_outputs[-2]) and how many
       steps ran since i = 0 (lower_order_nums) */
    lm_array *prev_x0;
    int lower_order_nums;
};

/* ---------------------------------------------------------------- config */

void lm_sched_config_default(lm_sched_config *c)
{
    memset(c, 0, sizeof *c);
    c->num_train_timesteps = 1000;
    c->beta_start = 0.0001;
    c->beta_end = 0.02;
    c->beta_schedule = LM_BETA_LINEAR;
    c->prediction_type = LM_PRED_EPSILON;
    c->timestep_spacing = LM_SPACING_DEFAULT;
    c->clip_sample = -1;
    c->clip_sample_range = 1.0;
    c->set_alpha_to_one = -1;
    c->sigma_min = NAN;
    c->sigma_max = NAN;
    c->solver_order = 2;
    c->lower_order_final = true;
    c->lambda_min_clipped = -INFINITY;
    strcpy(c->algorithm_type, "dpmsolver++");
}

void lm_sched_config_clear(lm_sched_config *c)
{
    if (!c) return;
    free(c->trained_betas);
    c->trained_betas = NULL;
}

static lm_status get_bool(const cJSON *o, const char *key, const char *what, bool def, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return LM_OK;
    }
    if (!cJSON_IsBool(v)) return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected true or false", what, key);
    *out = cJSON_IsTrue(v);
    return LM_OK;
}

static lm_status get_tristate(const cJSON *o, const char *key, const char *what, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = -1;
        return LM_OK;
    }
    bool b;
    lm_status st = get_bool(o, key, what, false, &b);
    *out = b;
    return st;
}

/* the index of s in names (n of them), else an error listing them */
static lm_status get_enum(const cJSON *o, const char *key, const char *what, const char *const *names,
                          int n, int def, int *out)
{
    const char *s;
    lm_status st = lm_dfs_str(o, key, what, false, NULL, &s);
    if (st != LM_OK) return st;
    if (!s) {
        *out = def;
        return LM_OK;
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return LM_OK;
        }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s \"%s\" is not supported (supported: %s)", what, key, s,
                        list);
}

/* lambda_min_clipped may be -inf (written -Infinity by Python's json) */
static lm_status get_num_inf(const cJSON *o, const char *key, const char *what, double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return LM_OK;
    }
    if (!cJSON_IsNumber(v) || isnan(v->valuedouble))
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a number", what, key);
    *out = v->valuedouble;
    return LM_OK;
}

lm_status lm_sched_config_from_json(const cJSON *o, const char *file, lm_sched_config *c)
{
    static const char *const betas[] = {"linear", "scaled_linear", "squaredcos_cap_v2"};
    static const char *const preds[] = {"epsilon", "v_prediction", "sample"};
    static const char *const spacings[] = {"linspace", "leading", "trailing"};
    static const char *const finals[] = {"zero", "sigma_min"};
    lm_sched_config_default(c);
    if (!o || !cJSON_IsObject(o)) return lm_error_set(LM_ERR_FORMAT, "%s: expected a JSON object", file);
    int e, sp = -1, fin = 0;
    lm_status st;
    bool b;
    if ((st = lm_dfs_int(o, "num_train_timesteps", file, false, 1000, 2, MAX_TRAIN_STEPS,
                         &c->num_train_timesteps)) ||
        (st = lm_dfs_num(o, "beta_start", file, false, 0.0001, &c->beta_start)) ||
        (st = lm_dfs_num(o, "beta_end", file, false, 0.02, &c->beta_end)) ||
        (st = get_enum(o, "beta_schedule", file, betas, 3, 0, &e)))
        goto fail;
    c->beta_schedule = (lm_beta_schedule)e;
    if ((st = get_enum(o, "prediction_type", file, preds, 3, 0, &e))) goto fail;
    c->prediction_type = (lm_prediction)e;
    if ((st = get_enum(o, "timestep_spacing", file, spacings, 3, -1, &sp))) goto fail;
    c->timestep_spacing = sp < 0 ? LM_SPACING_DEFAULT : (lm_spacing)(sp + 1);
    if ((st = lm_dfs_int(o, "steps_offset", file, false, 0, 0, MAX_TRAIN_STEPS, &c->steps_offset)) ||
        (st = get_tristate(o, "clip_sample", file, &c->clip_sample)) ||
        (st = lm_dfs_num(o, "clip_sample_range", file, false, 1.0, &c->clip_sample_range)) ||
        (st = get_tristate(o, "set_alpha_to_one", file, &c->set_alpha_to_one)) ||
        (st = get_bool(o, "use_karras_sigmas", file, false, &c->use_karras_sigmas)) ||
        (st = lm_dfs_num(o, "sigma_min", file, false, NAN, &c->sigma_min)) ||
        (st = lm_dfs_num(o, "sigma_max", file, false, NAN, &c->sigma_max)) ||
        (st = get_enum(o, "final_sigmas_type", file, finals, 2, 0, &fin)) ||
        (st = lm_dfs_int(o, "solver_order", file, false, 2, 1, 3, &c->solver_order)) ||
        (st = get_bool(o, "lower_order_final", file, true, &c->lower_order_final)) ||
        (st = get_bool(o, "euler_at_final", file, false, &c->euler_at_final)) ||
        (st = get_num_inf(o, "lambda_min_clipped", file, -INFINITY, &c->lambda_min_clipped)) ||
        (st = get_bool(o, "rescale_betas_zero_snr", file, false, &c->rescale_betas_zero_snr)) ||
        (st = get_bool(o, "thresholding", file, false, &c->thresholding)))
        goto fail;
    c->final_sigma_min = fin == 1;
    /* solver_type: DPM++ maps UniPC's and DEIS's names to midpoint, as
       diffusers does; other samplers ignore the key */
    const char *s;
    if ((st = lm_dfs_str(o, "solver_type", file, false, "midpoint", &s))) goto fail;
    c->solver_heun = !strcmp(s, "heun");
    if (!c->solver_heun && strcmp(s, "midpoint") && strcmp(s, "logrho") && strcmp(s, "bh1") && strcmp(s, "bh2"))
        snprintf(c->solver_type_bad, sizeof c->solver_type_bad, "%s", s);
    static const char *const other[] = {"use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas",
                                        "use_flow_sigmas", "use_dynamic_shifting"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        if ((st = get_bool(o, other[i], file, false, &b))) goto fail;
        c->other_sigmas |= b;
    }
    if ((st = lm_dfs_str(o, "variance_type", file, false, NULL, &s))) goto fail;
    c->learned_variance = s && !strncmp(s, "learned", 7);
    if ((st = lm_dfs_str(o, "timestep_type", file, false, "discrete", &s))) goto fail;
    c->continuous_timesteps = strcmp(s, "discrete") != 0;
    if ((st = lm_dfs_str(o, "interpolation_type", file, false, "linear", &s))) goto fail;
    c->log_linear = strcmp(s, "linear") != 0;
    if ((st = lm_dfs_str(o, "algorithm_type", file, false, "dpmsolver++", &s))) goto fail;
    snprintf(c->algorithm_type, sizeof c->algorithm_type, "%s", s);
    if (!(c->beta_start >= 0 && c->beta_end >= 0 && c->beta_end < 1)) {
        st = lm_error_set(LM_ERR_FORMAT, "%s: beta_start %g / beta_end %g: expected 0 <= beta < 1", file,
                          c->beta_start, c->beta_end);
        goto fail;
    }
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(o, "trained_betas");
    if (tb && !cJSON_IsNull(tb)) {
        int n = cJSON_IsArray(tb) ? cJSON_GetArraySize(tb) : -1;
        if (n != c->num_train_timesteps) {
            st = lm_error_set(LM_ERR_UNSUPPORTED,
                              "%s: trained_betas: expected an array of num_train_timesteps (%lld) numbers, "
                              "got %d entries (diffusers would take its length as the step count; Lumen "
                              "does not)", file, (long long)c->num_train_timesteps, n);
            goto fail;
        }
        c->trained_betas = malloc((size_t)n * sizeof(float));
        if (!c->trained_betas) {
            st = lm_error_set(LM_ERR_NOMEM, "%s: trained_betas: out of memory", file);
            goto fail;
        }
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, tb) {
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1)) {
                st = lm_error_set(LM_ERR_FORMAT, "%s: trained_betas[%d]: expected a number in [0, 1)", file, i);
                goto fail;
            }
            c->trained_betas[i++] = (float)v->valuedouble;
        }
    }
    return LM_OK;
fail:
    lm_sched_config_clear(c);
    return st;
}

lm_status lm_sched_config_read(const char *dir, lm_sched_config *out)
{
    lm_sched_config_default(out);
    char *path = lm_dfs_path(dir, "scheduler_config.json");
    if (!path) return lm_error_status();
    /* lm_dfs_json reads Python's -Infinity (DPM++'s lambda_min_clipped) */
    cJSON *j = NULL;
    lm_status st = lm_dfs_json(path, SCHED_JSON_MAX, false, &j);
    if (st == LM_OK) {
        st = lm_sched_config_from_json(j, path, out);
        cJSON_Delete(j);
    }
    free(path);
    return st;
}

/* -------------------------------------------------------------- schedule */

/* torch.linspace(start, end, n, dtype=float32) on the CPU: float step, the
 * first half counted from start and the second from end. */
static void torch_linspace_f32(double start_d, double end_d, int64_t n, float *out)
{
    float start = (float)start_d, end = (float)end_d;
    if (n == 1) {
        out[0] = start;
        return;
    }
    float step = (end - start) / (float)(n - 1);
    int64_t half = n / 2;
    for (int64_t i = 0; i < n; i++)
        out[i] = i < half ? start + step * (float)i : end - step * (float)(n - 1 - i);
}

/* betas_for_alpha_bar(T), cosine: Python floats, then float32 */
static double alpha_bar_cos(double t)
{
    double c = cos((t + 0.008) / 1.008 * M_PI / 2);
    return c * c;
}

static lm_status make_alphas_cumprod(const lm_sched_config *c, float *acp)
{
    int64_t T = c->num_train_timesteps;
    float *b = malloc((size_t)T * sizeof(float));
    if (!b) return lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
    if (c->trained_betas) {
        memcpy(b, c->trained_betas, (size_t)T * sizeof(float));
    } else if (c->beta_schedule == LM_BETA_LINEAR) {
        torch_linspace_f32(c->beta_start, c->beta_end, T, b);
    } else if (c->beta_schedule == LM_BETA_SCALED_LINEAR) {
        torch_linspace_f32(pow(c->beta_start, 0.5), pow(c->beta_end, 0.5), T, b);
        for (int64_t i = 0; i < T; i++) b[i] = b[i] * b[i];
    } else {
        for (int64_t i = 0; i < T; i++) {
            double t1 = (double)i / (double)T, t2 = (double)(i + 1) / (double)T;
            double v = 1 - alpha_bar_cos(t2) / alpha_bar_cos(t1);
            b[i] = (float)(v < 0.999 ? v : 0.999);
        }
    }
    /* torch.cumprod on the CPU accumulates float in double */
    double p = 1.0;
    for (int64_t i = 0; i < T; i++) {
        float alpha = 1.0f - b[i];
        p *= (double)alpha;
        acp[i] = (float)p;
    }
    free(b);
    return LM_OK;
}

/* ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5 in float32 */
static float acp_sigma(float a) { return sqrtf((1.0f - a) / a); }

/* numpy.linspace(start, stop, num)[i] (float64, endpoint included) */
static double np_linspace(double start, double stop, int64_t num, int64_t i)
{
    if (num > 1 && i == num - 1) return stop;
    if (num <= 1) return start;
    double step = (stop - start) / (double)(num - 1);
    return (double)i * step + start;
}

/* numpy.arange(start, 0, -step) as numpy fills it: length
 * ceil((0 - start) / -step), values start + i * ((start - step) - start). */
static int np_arange_down(double start, double step, double *out, int max)
{
    double len_d = ceil((0.0 - start) / -step);
    if (!(len_d >= 0)) return 0;
    int len = len_d > max ? max : (int)len_d;
    if (len > 0) out[0] = start;
    if (len > 1) out[1] = start + -step;
    double delta = (len > 1 ? out[1] : start) - start;
    for (int i = 2; i < len; i++) out[i] = start + (double)i * delta;
    return len;
}

/* numpy.interp(x, arange(T), fp) with fp float32 */
static double np_interp(double x, const float *fp, int64_t T)
{
    if (x <= 0) return fp[0];
    if (x >= (double)(T - 1)) return fp[T - 1];
    int64_t j = (int64_t)floor(x);
    if ((double)j == x) return fp[j];
    double slope = ((double)fp[j + 1] - (double)fp[j]) / 1.0;
    return slope * (x - (double)j) + (double)fp[j];
}

/* _sigma_to_t: the fractional timestep of sigma on the log-sigma table */
static double sigma_to_t(double sigma, const float *log_sigmas, int64_t T)
{
    double ls = log(sigma > 1e-10 ? sigma : 1e-10);
    int64_t cnt = 0, best = -1, low = 0;
    for (int64_t j = 0; j < T; j++) {
        cnt += ls - (double)log_sigmas[j] >= 0;
        if (cnt > best) {
            best = cnt;
            low = j;
        }
    }
    if (low > T - 2) low = T - 2;
    double lo = log_sigmas[low], hi = log_sigmas[low + 1];
    double w = (lo - ls) / (lo - hi);
    w = w < 0 ? 0 : w > 1 ? 1 : w;
    return (1 - w) * (double)low + w * (double)(low + 1);
}

/* _convert_to_karras (rho 7) into out[n] */
static void karras(double smin, double smax, int n, double *out)
{
    double rho = 7.0, min_inv = pow(smin, 1 / rho), max_inv = pow(smax, 1 / rho);
    for (int i = 0; i < n; i++) {
        double ramp = np_linspace(0, 1, n, i);
        out[i] = pow(max_inv + ramp * (min_inv - max_inv), rho);
    }
}

static lm_spacing spacing_of(const lm_sampler *s)
{
    if (s->c.timestep_spacing != LM_SPACING_DEFAULT) return s->c.timestep_spacing;
    return s->kind == LM_SAMPLER_DDIM ? LM_SPACING_LEADING : LM_SPACING_LINSPACE;
}

/* EulerDiscreteScheduler / EulerAncestralDiscreteScheduler.set_timesteps */
static lm_status euler_schedule(lm_sampler *s, const float *sigmas_full, const float *log_sigmas)
{
    int N = s->steps;
    int64_t T = s->T;
    double *ts = s->ts;
    int n = N;
    switch (spacing_of(s)) {
    case LM_SPACING_LEADING: {
        int64_t ratio = T / N;
        for (int i = 0; i < N; i++) ts[i] = (float)((double)((N - 1 - i) * ratio)) + (float)s->c.steps_offset;
        break;
    }
    case LM_SPACING_TRAILING:
        n = np_arange_down((double)T, (double)T / N, ts, N + 1);
        for (int i = 0; i < n; i++) ts[i] = (float)rint(ts[i]) - 1.0f;
        break;
    default:
        for (int i = 0; i < N; i++) ts[i] = (float)np_linspace(0, (double)(T - 1), N, N - 1 - i);
        break;
    }
    s->n = n;
    double *sg = malloc((size_t)n * sizeof(double));
    if (!sg) return lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
    for (int i = 0; i < n; i++) sg[i] = np_interp(ts[i], sigmas_full, T);
    if (s->karras) {
        double smin = isnan(s->c.sigma_min) ? sg[n - 1] : s->c.sigma_min;
        double smax = isnan(s->c.sigma_max) ? sg[0] : s->c.sigma_max;
        karras(smin, smax, n, sg);
        for (int i = 0; i < n; i++) ts[i] = (float)sigma_to_t(sg[i], log_sigmas, T);
    }
    for (int i = 0; i < n; i++) s->sig[i] = (float)sg[i];
    s->sig[n] = s->kind == LM_SAMPLER_EULER && s->c.final_sigma_min ? sigmas_full[0] : 0.0f;
    free(sg);
    float mx = 0;
    for (int i = 0; i <= n; i++) mx = s->sig[i] > mx ? s->sig[i] : mx;
    s->init_sigma = spacing_of(s) == LM_SPACING_LEADING ? sqrtf(mx * mx + 1.0f) : mx;
    return LM_OK;
}

/* DPMSolverMultistepScheduler.set_timesteps (int64 timesteps) */
static lm_status dpm_schedule(lm_sampler *s, const float *sigmas_full, const float *log_sigmas)
{
    int N = s->steps;
    int64_t T = s->T;
    double *ts = s->ts;
    /* lambda_t = log(alpha_t) - log(sigma_t), searchsorted on its flip */
    int64_t clipped = 0;
    for (int64_t i = T - 1; i >= 0; i--) {
        float lam = logf(sqrtf(s->acp[i])) - logf(sqrtf(1.0f - s->acp[i]));
        if ((double)lam < s->c.lambda_min_clipped) clipped++;
        else break;
    }
    int64_t last = T - clipped;
    int n = N;
    switch (spacing_of(s)) {
    case LM_SPACING_LEADING: {
        int64_t ratio = last / (N + 1);
        for (int i = 0; i < N; i++) ts[i] = (double)((N - i) * ratio + s->c.steps_offset);
        break;
    }
    case LM_SPACING_TRAILING:
        n = np_arange_down((double)last, (double)T / N, ts, N + 1);
        for (int i = 0; i < n; i++) ts[i] = rint(ts[i]) - 1;
        break;
    default:
        for (int i = 0; i < N; i++) ts[i] = rint(np_linspace(0, (double)(last - 1), N + 1, N - i));
        break;
    }
    s->n = n;
    if (s->karras) {
        double *sg = malloc((size_t)n * sizeof(double));
        if (!sg) return lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
        karras(sigmas_full[0], sigmas_full[T - 1], n, sg);
        for (int i = 0; i < n; i++) {
            double t = sigma_to_t(sg[i], log_sigmas, T);
            ts[i] = s->c.beta_schedule != LM_BETA_SQUAREDCOS ? rint(t) : trunc(t);
            s->sig[i] = (float)sg[i];
        }
        free(sg);
    } else {
        for (int i = 0; i < n; i++) {
            if (ts[i] < 0 || ts[i] > (double)(T - 1))
                return lm_error_set(LM_ERR_ARG, "dpm++2m: timestep %g outside [0, %lld] (steps_offset %lld)",
                                    ts[i], (long long)(T - 1), (long long)s->c.steps_offset);
            s->sig[i] = sigmas_full[(int64_t)ts[i]];
        }
    }
    s->sig[n] = s->c.final_sigma_min ? sigmas_full[0] : 0.0f;
    s->init_sigma = 1.0f;
    return LM_OK;
}

/* DDIMScheduler.set_timesteps (int64 timesteps, no sigmas) */
static lm_status ddim_schedule(lm_sampler *s)
{
    int N = s->steps;
    int64_t T = s->T;
    double *ts = s->ts;
    int n = N;
    switch (spacing_of(s)) {
    case LM_SPACING_LINSPACE:
        for (int i = 0; i < N; i++) ts[i] = rint(np_linspace(0, (double)(T - 1), N, N - 1 - i));
        break;
    case LM_SPACING_TRAILING:
        n = np_arange_down((double)T, (double)T / N, ts, N + 1);
        for (int i = 0; i < n; i++) ts[i] = rint(ts[i]) - 1;
        break;
    default: {
        int64_t ratio = T / N;
        for (int i = 0; i < N; i++) ts[i] = (double)((N - 1 - i) * ratio + s->c.steps_offset);
        break;
    }
    }
    s->n = n;
    for (int i = 0; i < n; i++)
        if (ts[i] < 0 || ts[i] > (double)(T - 1))
            return lm_error_set(LM_ERR_ARG, "ddim: timestep %g outside [0, %lld] (steps_offset %lld)", ts[i],
                                (long long)(T - 1), (long long)s->c.steps_offset);
    s->init_sigma = 1.0f;
    return LM_OK;
}

static const char *const kind_names[] = {"euler", "euler_a", "dpm++2m", "ddim"};

/* what this sampler's class reads from the config and Lumen does not do */
static lm_status check_config(const lm_sched_config *c, lm_sampler_kind k)
{
    const char *name = kind_names[k];
    if (c->rescale_betas_zero_snr)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: rescale_betas_zero_snr is not supported", name);
    if (k == LM_SAMPLER_EULER_A && c->prediction_type == LM_PRED_SAMPLE)
        return lm_error_set(LM_ERR_UNSUPPORTED,
                            "euler_a: prediction_type \"sample\" is not supported (nor by diffusers' "
                            "EulerAncestralDiscreteScheduler)");
    if (k == LM_SAMPLER_EULER && (c->continuous_timesteps || c->log_linear))
        return lm_error_set(LM_ERR_UNSUPPORTED, "euler: %s is not supported",
                            c->log_linear ? "interpolation_type other than \"linear\""
                                          : "timestep_type other than \"discrete\"");
    if ((k == LM_SAMPLER_EULER || k == LM_SAMPLER_DPMPP_2M) && c->other_sigmas)
        return lm_error_set(LM_ERR_UNSUPPORTED,
                            "%s: exponential, beta, lu-lambda, flow sigmas and dynamic shifting are not supported",
                            name);
    if ((k == LM_SAMPLER_DDIM || k == LM_SAMPLER_DPMPP_2M) && c->thresholding)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: thresholding is not supported", name);
    if (k == LM_SAMPLER_DPMPP_2M) {
        if (strcmp(c->algorithm_type, "dpmsolver++") && strcmp(c->algorithm_type, "deis"))
            return lm_error_set(LM_ERR_UNSUPPORTED, "dpm++2m: algorithm_type \"%s\" is not supported (dpmsolver++)",
                                c->algorithm_type);
        if (c->solver_order > 2)
            return lm_error_set(LM_ERR_UNSUPPORTED, "dpm++2m: solver_order %lld is not supported (1 or 2)",
                                (long long)c->solver_order);
        if (c->solver_type_bad[0])
            return lm_error_set(LM_ERR_UNSUPPORTED, "dpm++2m: solver_type \"%s\" is not supported (midpoint, heun)",
                                c->solver_type_bad);
        if (c->learned_variance)
            return lm_error_set(LM_ERR_UNSUPPORTED, "dpm++2m: variance_type learned is not supported");
    }
    return LM_OK;
}

lm_sampler *lm_sampler_new(const lm_sched_config *c, lm_sampler_kind k, bool karras_, int steps,
                           double strength)
{
    if (!c || k < LM_SAMPLER_EULER || k > LM_SAMPLER_DDIM) {
        lm_error_set(LM_ERR_ARG, "sampler: no config or an unknown sampler kind %d", (int)k);
        return NULL;
    }
    if (check_config(c, k) != LM_OK) return NULL;
    int64_t T = c->num_train_timesteps;
    if (steps < 1 || steps > T) {
        lm_error_set(LM_ERR_ARG, "%s: steps %d: expected 1 to num_train_timesteps (%lld)", kind_names[k], steps,
                     (long long)T);
        return NULL;
    }
    if (!(strength > 0 && strength <= 1)) {
        lm_error_set(LM_ERR_ARG, "%s: strength %g: expected a value in (0, 1]", kind_names[k], strength);
        return NULL;
    }
    lm_sampler *s = calloc(1, sizeof *s);
    float *sigmas_full = malloc((size_t)T * sizeof(float)), *log_sigmas = malloc((size_t)T * sizeof(float));
    if (!s || !sigmas_full || !log_sigmas) goto nomem;
    s->kind = k;
    s->c = *c;
    s->c.trained_betas = NULL;
    s->karras = (k == LM_SAMPLER_EULER || k == LM_SAMPLER_DPMPP_2M) && (karras_ || c->use_karras_sigmas);
    s->steps = steps;
    s->T = T;
    s->acp = malloc((size_t)T * sizeof(float));
    s->ts = malloc((size_t)(steps + 1) * sizeof(double));
    if (!s->acp || !s->ts) goto nomem;
    if (k != LM_SAMPLER_DDIM && !(s->sig = malloc((size_t)(steps + 2) * sizeof(float)))) goto nomem;
    if (make_alphas_cumprod(c, s->acp) != LM_OK) goto fail;
    for (int64_t i = 0; i < T; i++) {
        sigmas_full[i] = acp_sigma(s->acp[i]);
        log_sigmas[i] = logf(sigmas_full[i]);
    }
    lm_status st = k == LM_SAMPLER_DDIM      ? ddim_schedule(s)
                   : k == LM_SAMPLER_DPMPP_2M ? dpm_schedule(s, sigmas_full, log_sigmas)
                                              : euler_schedule(s, sigmas_full, log_sigmas);
    if (st != LM_OK) goto fail;
    if (s->n < 1) {
        lm_error_set(LM_ERR_ARG, "%s: %d steps give no timesteps", kind_names[k], steps);
        goto fail;
    }
    /* img2img: get_timesteps(num_inference_steps, strength) */
    int init = (int)((double)steps * strength);
    if (init > steps) init = steps;
    int t_start = steps - init > 0 ? steps - init : 0;
    if (t_start >= s->n) {
        lm_error_set(LM_ERR_ARG, "%s: strength %g of %d steps leaves no step to run", kind_names[k], strength,
                     steps);
        goto fail;
    }
    s->begin = t_start;
    free(sigmas_full);
    free(log_sigmas);
    return s;
nomem:
    lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
fail:
    free(sigmas_full);
    free(log_sigmas);
    lm_sampler_free(s);
    return NULL;
}

void lm_sampler_free(lm_sampler *s)
{
    if (!s) return;
    lm_array_release(s->prev_x0);
    free(s->acp);
    free(s->ts);
    free(s->sig);
    free(s);
}

int lm_sampler_count(const lm_sampler *s) { return s ? s->n - s->begin : 0; }
lm_sampler_kind lm_sampler_get_kind(const lm_sampler *s) { return s ? s->kind : LM_SAMPLER_NONE; }
double lm_sampler_init_sigma(const lm_sampler *s) { return s ? (double)s->init_sigma : NAN; }

static bool step_ok(const lm_sampler *s, int i) { return s && i >= 0 && i < s->n - s->begin; }

double lm_sampler_timestep(const lm_sampler *s, int i)
{
    return step_ok(s, i) ? s->ts[s->begin + i] : NAN;
}

double lm_sampler_sigma(const lm_sampler *s, int i)
{
    if (!s || !s->sig || i < 0 || i > s->n - s->begin) return NAN;
    return s->sig[s->begin + i];
}

const double *lm_sampler_schedule(const lm_sampler *s, int *n, const float **sigmas, int *nsig)
{
    *n = s->n;
    *sigmas = s->sig;
    *nsig = s->sig ? s->n + 1 : 0;
    return s->ts;
}

bool lm_sampler_needs_noise(const lm_sampler *s, int i)
{
    return step_ok(s, i) && s->kind == LM_SAMPLER_EULER_A;
}

/* ------------------------------------------------------- work on latents */

/* Temporaries of one computation, released together. */
typedef struct tmps {
    lm_array *a[24];
    int n;
} tmps;

static lm_array *tk(tmps *t, lm_array *a)
{
    if (a && t->n < (int)(sizeof t->a / sizeof *t->a)) t->a[t->n++] = a;
    return a;
}

static lm_array *tmps_done(tmps *t, lm_array *result)
{
    lm_array_retain(result);
    for (int i = 0; i < t->n; i++) lm_array_release(t->a[i]);
    t->n = 0;
    return result;
}

static lm_array *S(tmps *t, lm_op op, lm_array *a, float v)
{
    return tk(t, lm_binary_scalar(op, a, (double)v, false));
}

static lm_array *B(tmps *t, lm_op op, lm_array *a, lm_array *b) { return tk(t, lm_binary(op, a, b)); }

static lm_array *f32(tmps *t, lm_array *a) { return tk(t, lm_cast(a, LM_F32)); }

static lm_status check_step(const lm_sampler *s, const char *what, int i)
{
    if (!s) return lm_error_set(LM_ERR_ARG, "sampler %s: no sampler", what);
    if (!step_ok(s, i))
        return lm_error_set(LM_ERR_ARG, "%s %s: step %d outside [0, %d)", kind_names[s->kind], what, i,
                            s->n - s->begin);
    return LM_OK;
}

lm_array *lm_sampler_scale_input(lm_sampler *s, lm_array *x, int i)
{
    if (check_step(s, "scale_input", i) != LM_OK || !x) return NULL;
    if (s->kind == LM_SAMPLER_DPMPP_2M || s->kind == LM_SAMPLER_DDIM) return lm_array_retain(x);
    float sigma = s->sig[s->begin + i];
    return lm_binary_scalar(LM_OP_DIV, x, (double)sqrtf(sigma * sigma + 1.0f), false);
}

/* the x0 prediction of Euler's step from sample xs (f32) and model output mo */
static lm_array *euler_x0(tmps *t, const lm_sampler *s, lm_array *xs, lm_array *mo, float sigma)
{
    switch (s->c.prediction_type) {
    case LM_PRED_EPSILON: return B(t, LM_OP_SUB, xs, S(t, LM_OP_MUL, mo, sigma));
    case LM_PRED_SAMPLE: return mo;
    default: {
        float q = sigma * sigma + 1.0f;
        return B(t, LM_OP_ADD, S(t, LM_OP_MUL, mo, -sigma / sqrtf(q)), S(t, LM_OP_DIV, xs, q));
    }
    }
}

static lm_array *euler_step(tmps *t, lm_sampler *s, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    float sigma = s->sig[idx], next = s->sig[idx + 1];
    lm_array *x0 = euler_x0(t, s, xs, mo, sigma);
    lm_array *deriv = S(t, LM_OP_DIV, B(t, LM_OP_SUB, xs, x0), sigma);
    if (s->kind == LM_SAMPLER_EULER) return B(t, LM_OP_ADD, xs, S(t, LM_OP_MUL, deriv, next - sigma));
    float sf2 = sigma * sigma, st2 = next * next;
    float up = sqrtf(st2 * (sf2 - st2) / sf2);
    float down = sqrtf(st2 - up * up);
    lm_array *prev = B(t, LM_OP_ADD, xs, S(t, LM_OP_MUL, deriv, down - sigma));
    return B(t, LM_OP_ADD, prev, S(t, LM_OP_MUL, f32(t, noise), up));
}

/* _sigma_to_alpha_sigma_t and lambda = log(alpha) - log(sigma) */
static void dpm_alpha_sigma(float sigma, float *alpha_t, float *sigma_t, float *lambda)
{
    *alpha_t = 1.0f / sqrtf(sigma * sigma + 1.0f);
    *sigma_t = sigma * *alpha_t;
    *lambda = logf(*alpha_t) - logf(*sigma_t);
}

static lm_array *dpm_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo)
{
    float a0, s0, l0, at, st, lt;
    dpm_alpha_sigma(s->sig[idx], &a0, &s0, &l0);
    dpm_alpha_sigma(s->sig[idx + 1], &at, &st, &lt);
    /* convert_model_output (dpmsolver++): the x0 prediction */
    lm_array *x0;
    switch (s->c.prediction_type) {
    case LM_PRED_EPSILON: x0 = S(t, LM_OP_DIV, B(t, LM_OP_SUB, xs, S(t, LM_OP_MUL, mo, s0)), a0); break;
    case LM_PRED_SAMPLE: x0 = mo; break;
    default: x0 = B(t, LM_OP_SUB, S(t, LM_OP_MUL, xs, a0), S(t, LM_OP_MUL, mo, s0)); break;
    }
    if (i == 0) s->lower_order_nums = 0;
    bool last = idx == s->n - 1;
    bool lower_final = last && (s->c.euler_at_final || (s->c.lower_order_final && s->n < 15) ||
                                !s->c.final_sigma_min);
    float h = lt - l0, em1 = expf(-h) - 1.0f;
    lm_array *r;
    if (s->c.solver_order == 1 || s->lower_order_nums < 1 || lower_final || !s->prev_x0) {
        r = B(t, LM_OP_SUB, S(t, LM_OP_MUL, xs, st / s0), S(t, LM_OP_MUL, x0, at * em1));
    } else {
        float a1, s1, l1;
        dpm_alpha_sigma(s->sig[idx - 1], &a1, &s1, &l1);
        float r0 = (l0 - l1) / h;
        lm_array *d1 = S(t, LM_OP_MUL, B(t, LM_OP_SUB, x0, s->prev_x0), 1.0f / r0);
        r = B(t, LM_OP_SUB, S(t, LM_OP_MUL, xs, st / s0), S(t, LM_OP_MUL, x0, at * em1));
        if (s->c.solver_heun)
            r = B(t, LM_OP_ADD, r, S(t, LM_OP_MUL, d1, at * (em1 / h + 1.0f)));
        else
            r = B(t, LM_OP_SUB, r, S(t, LM_OP_MUL, d1, 0.5f * (at * em1)));
    }
    if (s->lower_order_nums < s->c.solver_order) s->lower_order_nums++;
    if (x0) {
        lm_array_release(s->prev_x0);
        s->prev_x0 = lm_array_retain(x0);
    }
    return r;
}

static lm_array *ddim_step(tmps *t, lm_sampler *s, int idx, lm_array *x, lm_array *mo)
{
    int64_t ts = (int64_t)s->ts[idx], prev = ts - s->T / s->steps;
    float a = s->acp[ts];
    bool one = s->c.set_alpha_to_one != 0;
    float ap = prev >= 0 ? s->acp[prev] : one ? 1.0f : s->acp[0];
    float beta = 1.0f - a, sa = sqrtf(a), sb = sqrtf(beta);
    lm_array *x0, *eps;
    switch (s->c.prediction_type) {
    case LM_PRED_EPSILON:
        x0 = S(t, LM_OP_DIV, B(t, LM_OP_SUB, x, S(t, LM_OP_MUL, mo, sb)), sa);
        eps = mo;
        break;
    case LM_PRED_SAMPLE:
        x0 = mo;
        eps = S(t, LM_OP_DIV, B(t, LM_OP_SUB, x, S(t, LM_OP_MUL, x0, sa)), sb);
        break;
    default:
        x0 = B(t, LM_OP_SUB, S(t, LM_OP_MUL, x, sa), S(t, LM_OP_MUL, mo, sb));
        eps = B(t, LM_OP_ADD, S(t, LM_OP_MUL, mo, sa), S(t, LM_OP_MUL, x, sb));
        break;
    }
    if (s->c.clip_sample == 1) {
        double r = s->c.clip_sample_range;
        x0 = tk(t, lm_clamp(x0, -r, r));
    }
    /* eta 0: std_dev_t = 0 */
    float dir = sqrtf(1.0f - ap - 0.0f);
    return B(t, LM_OP_ADD, S(t, LM_OP_MUL, x0, sqrtf(ap)), S(t, LM_OP_MUL, eps, dir));
}

lm_array *lm_sampler_step(lm_sampler *s, lm_array *model_out, int i, lm_array *x, lm_array *noise)
{
    if (check_step(s, "step", i) != LM_OK) return NULL;
    if (!model_out || !x) {
        lm_error_set(LM_ERR_ARG, "%s step: no model output or latents", kind_names[s->kind]);
        return NULL;
    }
    if (s->kind == LM_SAMPLER_EULER_A && !noise) {
        lm_error_set(LM_ERR_ARG, "euler_a step %d: needs noise", i);
        return NULL;
    }
    if (s->kind == LM_SAMPLER_DPMPP_2M && i > 0 && !s->prev_x0) {
        lm_error_set(LM_ERR_STATE, "dpm++2m step %d: steps must run in order from 0", i);
        return NULL;
    }
    int idx = s->begin + i;
    tmps t = {0};
    lm_array *r;
    if (s->kind == LM_SAMPLER_DDIM) {
        r = ddim_step(&t, s, idx, x, model_out);
    } else {
        /* diffusers upcasts the sample to f32 and returns the model's dtype */
        lm_array *xs = f32(&t, x), *mo = f32(&t, model_out);
        r = s->kind == LM_SAMPLER_DPMPP_2M ? dpm_step(&t, s, i, idx, xs, mo) : euler_step(&t, s, idx, xs, mo, noise);
        if (r && model_out->dtype != LM_F32) r = tk(&t, lm_cast(r, model_out->dtype));
    }
    if (!r) {
        tmps_done(&t, NULL);
        lm_error_prefix("%s step %d: ", kind_names[s->kind], i);
        return NULL;
    }
    return tmps_done(&t, r);
}

lm_array *lm_sampler_add_noise(lm_sampler *s, lm_array *x0, lm_array *noise)
{
    if (check_step(s, "add_noise", 0) != LM_OK) return NULL;
    if (!x0 || !noise) {
        lm_error_set(LM_ERR_ARG, "%s add_noise: no latents or noise", kind_names[s->kind]);
        return NULL;
    }
    int idx = s->begin;
    tmps t = {0};
    lm_array *r;
    if (s->kind == LM_SAMPLER_DDIM) {
        float a = s->acp[(int64_t)s->ts[idx]];
        r = B(&t, LM_OP_ADD, S(&t, LM_OP_MUL, x0, sqrtf(a)), S(&t, LM_OP_MUL, noise, sqrtf(1.0f - a)));
    } else if (s->kind == LM_SAMPLER_DPMPP_2M) {
        float at, st, l;
        dpm_alpha_sigma(s->sig[idx], &at, &st, &l);
        r = B(&t, LM_OP_ADD, S(&t, LM_OP_MUL, x0, at), S(&t, LM_OP_MUL, noise, st));
    } else {
        r = B(&t, LM_OP_ADD, x0, S(&t, LM_OP_MUL, noise, s->sig[idx]));
    }
    if (!r) {
        tmps_done(&t, NULL);
        lm_error_prefix("%s add_noise: ", kind_names[s->kind]);
        return NULL;
    }
    return tmps_done(&t, r);
}

/* ----------------------------------------------------------------- names */

lm_sampler_kind lm_sampler_parse(const char *name, bool *karras)
{
    char n[32];
    int k = 0;
    if (karras) *karras = false;
    for (const char *p = name; p && *p && k < (int)sizeof n - 1; p++)
        if (*p != ' ' && *p != '_' && *p != '-') n[k++] = (char)tolower((unsigned char)*p);
    n[k] = 0;
    static const struct { const char *n; lm_sampler_kind k; bool karras; } names[] = {
        {"euler", LM_SAMPLER_EULER, false},       {"eulera", LM_SAMPLER_EULER_A, false},
        {"dpm++2m", LM_SAMPLER_DPMPP_2M, false},  {"dpmpp2m", LM_SAMPLER_DPMPP_2M, false},
        {"dpm++2mkarras", LM_SAMPLER_DPMPP_2M, true}, {"dpmpp2mkarras", LM_SAMPLER_DPMPP_2M, true},
        {"ddim", LM_SAMPLER_DDIM, false},
    };
    if (name && strlen(name) < sizeof n)
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            if (!strcmp(n, names[i].n)) {
                if (karras) *karras = names[i].karras;
                return names[i].k;
            }
    lm_error_set(LM_ERR_ARG, "unknown sampler \"%s\" (euler, euler_a, dpm++2m, dpm++2m_karras, ddim)",
                 name ? name : "(null)");
    return LM_SAMPLER_NONE;
}

const char *lm_sampler_name(lm_sampler_kind k, bool karras)
{
    if (k == LM_SAMPLER_DPMPP_2M && karras) return "dpm++2m_karras";
    return k >= LM_SAMPLER_EULER && k <= LM_SAMPLER_DDIM ? kind_names[k] : "?";
}

/* ----------------------------------------------------------------- noise */

lm_array *lm_diffusion_noise(uint64_t seed, uint64_t stream, int ndim, const int64_t *shape, lm_dtype dt,
                             lm_device *dev)
{
    if (!lm_dtype_is_float(dt)) {
        lm_error_set(LM_ERR_DTYPE, "diffusion noise: dtype must be a float type, got %s", lm_dtype_name(dt));
        return NULL;
    }
    int64_t numel;
    if (ndim < 0 || ndim > LM_MAX_DIMS) {
        lm_error_set(LM_ERR_SHAPE, "diffusion noise: %d dimensions", ndim);
        return NULL;
    }
    if (lm_shape_check("diffusion noise", ndim, shape, &numel) != LM_OK) return NULL;
    /* one key per (seed, stream), from a counter range no other key uses */
    lm_key base = lm_random_key(seed), key;
    uint32_t w[4];
    lm_philox4x32(&base, (3ull << 62) | (stream & ((1ull << 62) - 1)), w);
    key.k[0] = w[0];
    key.k[1] = w[1];
    size_t n = (size_t)numel, es = lm_dtype_size(dt);
    if (n > SIZE_MAX / sizeof(float) / 2) {
        lm_error_set(LM_ERR_NOMEM, "diffusion noise: %zu elements", n);
        return NULL;
    }
    float *v = malloc((n ? n : 1) * sizeof(float));
    void *conv = dt == LM_F32 ? v : malloc((n ? n : 1) * es);
    lm_array *r = NULL;
    if (!v || !conv) {
        lm_error_set(LM_ERR_NOMEM, "diffusion noise: out of memory for %zu elements", n);
    } else {
        for (size_t i = 0; i < n; i++) v[i] = lm_random_normal01(&key, (uint64_t)i);
        if (conv != v) lm_convert(conv, dt, v, LM_F32, n);
        r = lm_from_data(ndim, shape, dt, conv, dev);
    }
    if (conv != v) free(conv);
    free(v);
    return r;
}
