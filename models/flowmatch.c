/* flowmatch.c - FlowMatchEulerDiscreteScheduler's schedule and step (see
 * flowmatch.h).  The arithmetic keeps diffusers' precision: float where it
 * works on float32 arrays, double where numpy works in float64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flowmatch.h"
#include "diffusers_config.h"
#include "lumen.h"

#define FM_MAX_CONFIG (1u << 20)

void lm_flowmatch_config_default(lm_flowmatch_config *c)
{
    memset(c, 0, sizeof *c);
    c->num_train_timesteps = 1000;
    c->shift = 1.0;
    c->base_shift = 0.5;
    c->max_shift = 1.15;
    c->base_image_seq_len = 256;
    c->max_image_seq_len = 4096;
}

/* a boolean key (absent: false); null counts as false */
static lm_status flag(const cJSON *j, const char *key, const char *what, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    *out = false;
    if (!v || cJSON_IsNull(v)) return LM_OK;
    if (!cJSON_IsBool(v)) return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected true or false", what, key);
    *out = cJSON_IsTrue(v);
    return LM_OK;
}

/* a number key that may be null (then def) */
static lm_status num_or_null(const cJSON *j, const char *key, const char *what, double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (v && cJSON_IsNull(v)) {
        *out = def;
        return LM_OK;
    }
    return lm_dfs_num(j, key, what, false, def, out);
}

lm_status lm_flowmatch_config_parse(const cJSON *j, const char *what, lm_flowmatch_config *c)
{
    lm_flowmatch_config_default(c);
    const char *cls = NULL;
    lm_status st = lm_dfs_str(j, "_class_name", what, false, NULL, &cls);
    if (st == LM_OK && cls && strcmp(cls, "FlowMatchEulerDiscreteScheduler"))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: _class_name \"%s\": only FlowMatchEulerDiscreteScheduler "
                            "is implemented here", what, cls);
    static const char *refused[] = {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                                    "stochastic_sampling"};
    for (size_t k = 0; st == LM_OK && k < sizeof refused / sizeof *refused; k++) {
        bool on;
        st = flag(j, refused[k], what, &on);
        if (st == LM_OK && on)
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s is true: not implemented (the Euler step on "
                                "the shifted sigmas is)", what, refused[k]);
    }
    if (st == LM_OK) st = lm_dfs_int(j, "num_train_timesteps", what, false, 1000, 1, 1 << 24,
                                     &c->num_train_timesteps);
    if (st == LM_OK) st = num_or_null(j, "shift", what, 1.0, &c->shift);
    if (st == LM_OK) st = flag(j, "use_dynamic_shifting", what, &c->use_dynamic_shifting);
    if (st == LM_OK) st = num_or_null(j, "base_shift", what, 0.5, &c->base_shift);
    if (st == LM_OK) st = num_or_null(j, "max_shift", what, 1.15, &c->max_shift);
    if (st == LM_OK) st = lm_dfs_int(j, "base_image_seq_len", what, false, 256, 0, INT32_MAX,
                                     &c->base_image_seq_len);
    if (st == LM_OK) st = lm_dfs_int(j, "max_image_seq_len", what, false, 4096, 0, INT32_MAX,
                                     &c->max_image_seq_len);
    if (st == LM_OK) st = num_or_null(j, "shift_terminal", what, 0.0, &c->shift_terminal);
    if (st == LM_OK) st = flag(j, "invert_sigmas", what, &c->invert_sigmas);
    const char *tst = "exponential";
    if (st == LM_OK) st = lm_dfs_str(j, "time_shift_type", what, false, tst, &tst);
    if (st == LM_OK) {
        if (!strcmp(tst, "linear")) c->linear_time_shift = true;
        else if (strcmp(tst, "exponential"))
            st = lm_error_set(LM_ERR_FORMAT, "%s: time_shift_type \"%s\": exponential or linear", what, tst);
    }
    if (st == LM_OK && c->shift_terminal == 1.0)
        st = lm_error_set(LM_ERR_FORMAT, "%s: shift_terminal 1 divides by zero", what);
    return st;
}

lm_status lm_flowmatch_config_load(const char *dir, lm_flowmatch_config *c)
{
    char *path = lm_dfs_path(dir, "scheduler_config.json");
    if (!path) return LM_ERR_NOMEM;
    cJSON *j = NULL;
    lm_status st = lm_dfs_json(path, FM_MAX_CONFIG, false, &j);
    if (st == LM_OK) st = lm_flowmatch_config_parse(j, path, c);
    cJSON_Delete(j);
    free(path);
    return st;
}

void lm_flowmatch_schedule_free(lm_flowmatch_schedule *s)
{
    if (!s) return;
    free(s->sigmas);
    free(s->timesteps);
    memset(s, 0, sizeof *s);
}

/* time_shift(mu, 1, s): exp(mu) / (exp(mu) + (1/s - 1)), or mu / (mu + ...) */
static float shift_f32(const lm_flowmatch_config *c, double mu, float s)
{
    float e = c->linear_time_shift ? (float)mu : (float)exp(mu);
    float r = 1.0f / s - 1.0f;
    return e / (e + r);
}

static double shift_f64(const lm_flowmatch_config *c, double mu, double s)
{
    double e = c->linear_time_shift ? mu : exp(mu);
    return e / (e + (1.0 / s - 1.0));
}

/* the scheduler's sigmas from __init__ (f32 torch): sigma_max, sigma_min */
static void init_range(const lm_flowmatch_config *c, float *smax, float *smin)
{
    float n = (float)c->num_train_timesteps, lo = 1.0f / n, hi = n / n;
    if (!c->use_dynamic_shifting) {
        float sh = (float)c->shift, sm1 = (float)(c->shift - 1.0);
        lo = sh * lo / (1.0f + sm1 * lo);
        hi = sh * hi / (1.0f + sm1 * hi);
    }
    *smax = hi;
    *smin = lo;
}

lm_status lm_flowmatch_set_timesteps(const lm_flowmatch_config *c, int steps, const float *sigmas,
                                     bool has_mu, double mu, lm_flowmatch_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (steps < 1 || steps > (1 << 20))
        return lm_error_set(LM_ERR_ARG, "flow-match scheduler: %d steps (1 or more)", steps);
    if (c->use_dynamic_shifting && !has_mu)
        return lm_error_set(LM_ERR_ARG, "flow-match scheduler: use_dynamic_shifting needs mu");
    float *s = malloc(sizeof *s * (size_t)(steps + 1)), *t = malloc(sizeof *t * (size_t)steps);
    if (!s || !t) {
        free(s);
        free(t);
        return lm_error_set(LM_ERR_NOMEM, "flow-match scheduler: out of memory");
    }
    double N = (double)c->num_train_timesteps;
    if (sigmas) {
        /* np.array(sigmas).astype(np.float32): the shift in float32 */
        float sh = (float)c->shift, sm1 = (float)(c->shift - 1.0);
        for (int i = 0; i < steps; i++)
            s[i] = c->use_dynamic_shifting ? shift_f32(c, mu, sigmas[i]) : sh * sigmas[i] / (1.0f + sm1 * sigmas[i]);
        if (c->shift_terminal) {
            float one = 1.0f - s[steps - 1], scale = one / (float)(1.0 - c->shift_terminal);
            for (int i = 0; i < steps; i++) s[i] = 1.0f - (1.0f - s[i]) / scale;
        }
    } else {
        /* np.linspace(sigma_max * N, sigma_min * N, steps) / N in float64 */
        float smax, smin;
        init_range(c, &smax, &smin);
        double a = (double)smax * N, b = (double)smin * N, step = steps > 1 ? (b - a) / (steps - 1) : 0;
        double *d = malloc(sizeof *d * (size_t)steps);
        if (!d) {
            free(s);
            free(t);
            return lm_error_set(LM_ERR_NOMEM, "flow-match scheduler: out of memory");
        }
        for (int i = 0; i < steps; i++) {
            double ts = i == steps - 1 && steps > 1 ? b : (double)i * step + a;
            double v = ts / N;
            d[i] = c->use_dynamic_shifting ? shift_f64(c, mu, v) : c->shift * v / (1.0 + (c->shift - 1.0) * v);
        }
        if (c->shift_terminal) {
            double scale = (1.0 - d[steps - 1]) / (1.0 - c->shift_terminal);
            for (int i = 0; i < steps; i++) d[i] = 1.0 - (1.0 - d[i]) / scale;
        }
        for (int i = 0; i < steps; i++) s[i] = (float)d[i];
        free(d);
    }
    float nf = (float)N;
    for (int i = 0; i < steps; i++) {
        if (c->invert_sigmas) s[i] = 1.0f - s[i];
        t[i] = s[i] * nf;
    }
    s[steps] = c->invert_sigmas ? 1.0f : 0.0f;
    out->steps = steps;
    out->sigmas = s;
    out->timesteps = t;
    return LM_OK;
}

lm_array *lm_flowmatch_step(const lm_flowmatch_schedule *s, int i, lm_array *x, lm_array *v)
{
    if (!s || !s->sigmas || i < 0 || i >= s->steps) {
        lm_error_set(LM_ERR_ARG, "flow-match step %d: the schedule has %d steps", i, s ? s->steps : 0);
        return NULL;
    }
    if (!x || !v) {
        lm_error_set(LM_ERR_ARG, "flow-match step %d: no sample or velocity", i);
        return NULL;
    }
    float dt = s->sigmas[i + 1] - s->sigmas[i];
    lm_array *xf = lm_cast(x, LM_F32), *vf = lm_cast(v, LM_F32);
    lm_array *d = lm_binary_scalar(LM_OP_MUL, vf, (double)dt, false);
    lm_array *r = lm_binary(LM_OP_ADD, xf, d);
    lm_array_release(xf);
    lm_array_release(vf);
    lm_array_release(d);
    if (!r) lm_error_prefix("flow-match step %d", i);
    return r;
}

double lm_flowmatch_zimage_mu(double image_seq_len, double base_seq, double max_seq, double base_shift,
                              double max_shift)
{
    double m = (max_shift - base_shift) / (max_seq - base_seq);
    double b = base_shift - m * base_seq;
    return image_seq_len * m + b;
}

double lm_flowmatch_klein_mu(double image_seq_len, int num_steps)
{
    const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
    if (image_seq_len > 4300) return a2 * image_seq_len + b2;
    double m200 = a2 * image_seq_len + b2, m10 = a1 * image_seq_len + b1;
    double a = (m200 - m10) / 190.0, b = m200 - 200.0 * a;
    return a * num_steps + b;
}

void lm_flowmatch_zimage_sigmas(int steps, float *out)
{
    /* torch.linspace on float32: the first half from the start, the second
     * from the end */
    float start = 1.0f, end = (float)(1.0 / steps);
    if (steps == 1) {
        out[0] = start;
        return;
    }
    float step = (end - start) / (float)(steps - 1);
    int half = steps / 2;
    for (int i = 0; i < steps; i++)
        out[i] = i < half ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

void lm_flowmatch_klein_sigmas(int steps, float *out)
{
    double start = 1.0, stop = 1.0 / steps;
    if (steps == 1) {
        out[0] = (float)start;
        return;
    }
    double step = (stop - start) / (steps - 1);
    for (int i = 0; i < steps; i++) out[i] = (float)(i == steps - 1 ? stop : (double)i * step + start);
}
