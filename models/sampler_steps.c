/* sampler_steps.c - each kind's step as its diffusers scheduler computes it
 * (schedulers/scheduling_*.py: step), and the method table that names each
 * kind's space, checks and step (models/sampler_impl.h).
 *
 * The per-step scalars are float32 0-d tensors in diffusers, so they are
 * float arithmetic here too; the latents' work is lazy lm_* ops. */
#include <math.h>
#include <string.h>
#include "models/sampler_impl.h"
#include "error.h"

typedef lm_sampler_tmps tmps;

static lm_array *S(tmps *t, lm_op op, lm_array *a, float v)
{
    return lm_tmps_keep(t, lm_binary_scalar(op, a, (double)v, false));
}

static lm_array *B(tmps *t, lm_op op, lm_array *a, lm_array *b) { return lm_tmps_keep(t, lm_binary(op, a, b)); }

/* ---- config keys each class reads and Lumen does not implement ---- */

static lm_status refuse_other_sigmas(const lm_sched_config *c, const char *name)
{
    if (c->other_sigmas)
        return lm_error_set(LM_ERR_UNSUPPORTED,
                            "%s: exponential, beta, lu-lambda, flow sigmas and dynamic shifting are not supported",
                            name);
    return LM_OK;
}

static lm_status euler_check(const lm_sched_config *c, const char *name)
{
    if (c->continuous_timesteps || c->log_linear)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s is not supported", name,
                            c->log_linear ? "interpolation_type other than \"linear\""
                                          : "timestep_type other than \"discrete\"");
    return refuse_other_sigmas(c, name);
}

static lm_status ddim_check(const lm_sched_config *c, const char *name)
{
    if (c->thresholding) return lm_error_set(LM_ERR_UNSUPPORTED, "%s: thresholding is not supported", name);
    return LM_OK;
}

static lm_status dpm_check(const lm_sched_config *c, const char *name)
{
    lm_status st;
    if ((st = refuse_other_sigmas(c, name)) || (st = ddim_check(c, name))) return st;
    if (strcmp(c->algorithm_type, "dpmsolver++") && strcmp(c->algorithm_type, "deis"))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: algorithm_type \"%s\" is not supported (dpmsolver++)", name,
                            c->algorithm_type);
    if (c->solver_order > 2)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: solver_order %lld is not supported (1 or 2)", name,
                            (long long)c->solver_order);
    if (c->solver_type_bad[0])
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: solver_type \"%s\" is not supported (midpoint, heun)", name,
                            c->solver_type_bad);
    if (c->learned_variance)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: variance_type learned is not supported", name);
    return LM_OK;
}

/* ---- Euler, Euler ancestral ---- */

/* the x0 prediction of a sigma-space step from sample xs and model output mo */
static lm_array *sigma_x0(tmps *t, const lm_sampler *s, lm_array *xs, lm_array *mo, float sigma)
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

/* (sample - x0) / sigma */
static lm_array *sigma_derivative(tmps *t, const lm_sampler *s, lm_array *xs, lm_array *mo, float sigma)
{
    return S(t, LM_OP_DIV, B(t, LM_OP_SUB, xs, sigma_x0(t, s, xs, mo, sigma)), sigma);
}

static lm_array *euler_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    (void)i;
    (void)noise;
    float sigma = s->sig[idx], next = s->sig[idx + 1];
    return B(t, LM_OP_ADD, xs, S(t, LM_OP_MUL, sigma_derivative(t, s, xs, mo, sigma), next - sigma));
}

static lm_array *euler_a_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    (void)i;
    float sigma = s->sig[idx], next = s->sig[idx + 1];
    lm_array *deriv = sigma_derivative(t, s, xs, mo, sigma);
    float sf2 = sigma * sigma, st2 = next * next;
    float up = sqrtf(st2 * (sf2 - st2) / sf2);
    float down = sqrtf(st2 - up * up);
    lm_array *prev = B(t, LM_OP_ADD, xs, S(t, LM_OP_MUL, deriv, down - sigma));
    return B(t, LM_OP_ADD, prev, S(t, LM_OP_MUL, lm_tmps_keep(t, lm_cast(noise, LM_F32)), up));
}

/* ---- LMS ---- */

#define LMS_ORDER 4   /* LMSDiscreteScheduler.step's default order, as pipelines call it */

/* The integral over [a, b] of the Lagrange basis polynomial of node k among
 * nodes[0 .. order): prod over j != k of (tau - nodes[j]) / (nodes[k] -
 * nodes[j]).  diffusers integrates it numerically (scipy's quad, exact for
 * a cubic); this is the same integral in closed form, the polynomial's
 * coefficients built in u = tau - a. */
static double lagrange_integral(const double *nodes, int order, int k, double a, double b)
{
    double p[LMS_ORDER] = {1};
    int deg = 0;
    for (int j = 0; j < order; j++) {
        if (j == k) continue;
        double d = nodes[k] - nodes[j], c0 = (a - nodes[j]) / d, c1 = 1 / d;
        for (int e = deg + 1; e >= 0; e--) p[e] = (e ? p[e - 1] * c1 : 0) + p[e] * c0;
        deg++;
    }
    double h = b - a, hp = h, r = 0;
    for (int e = 0; e <= deg; e++, hp *= h) r += p[e] * hp / (e + 1);
    return r;
}

/* LMSDiscreteScheduler.step(order=4): the derivative joins the last ones;
 * x moves by the Lagrange integrals over [sigma, next] of the latest
 * min(idx + 1, 4) sigmas times the derivatives, newest first.  As diffusers
 * does, the order counts from the schedule's start, not img2img's first step,
 * and only the derivatives kept since i = 0 enter the sum. */
static lm_array *lms_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    (void)noise;
    lm_array *d = sigma_derivative(t, s, xs, mo, s->sig[idx]);
    if (!d) return NULL;
    lm_sampler_hist_push(s, i, d);
    int order = idx + 1 < LMS_ORDER ? idx + 1 : LMS_ORDER;
    double nodes[LMS_ORDER];
    for (int k = 0; k < order; k++) nodes[k] = s->sig[idx - k];
    lm_array *sum = NULL;
    for (int k = 0; k < order && k < s->nhist; k++) {
        float coeff = (float)lagrange_integral(nodes, order, k, s->sig[idx], s->sig[idx + 1]);
        lm_array *term = S(t, LM_OP_MUL, s->hist[s->nhist - 1 - k], coeff);
        sum = sum ? B(t, LM_OP_ADD, sum, term) : term;
    }
    return B(t, LM_OP_ADD, xs, sum);
}

/* ---- DPM++ 2M ---- */

static lm_array *dpm_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    (void)noise;
    float a0, s0, l0, at, st, lt;
    lm_sched_dpm_alpha_sigma(s->sig[idx], &a0, &s0, &l0);
    lm_sched_dpm_alpha_sigma(s->sig[idx + 1], &at, &st, &lt);
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
    lm_array *prev_x0 = i > 0 && s->nhist ? s->hist[s->nhist - 1] : NULL;
    if (s->c.solver_order == 1 || s->lower_order_nums < 1 || lower_final || !prev_x0) {
        r = B(t, LM_OP_SUB, S(t, LM_OP_MUL, xs, st / s0), S(t, LM_OP_MUL, x0, at * em1));
    } else {
        float a1, s1, l1;
        lm_sched_dpm_alpha_sigma(s->sig[idx - 1], &a1, &s1, &l1);
        float r0 = (l0 - l1) / h;
        lm_array *d1 = S(t, LM_OP_MUL, B(t, LM_OP_SUB, x0, prev_x0), 1.0f / r0);
        r = B(t, LM_OP_SUB, S(t, LM_OP_MUL, xs, st / s0), S(t, LM_OP_MUL, x0, at * em1));
        if (s->c.solver_heun)
            r = B(t, LM_OP_ADD, r, S(t, LM_OP_MUL, d1, at * (em1 / h + 1.0f)));
        else
            r = B(t, LM_OP_SUB, r, S(t, LM_OP_MUL, d1, 0.5f * (at * em1)));
    }
    if (s->lower_order_nums < s->c.solver_order) s->lower_order_nums++;
    if (x0) lm_sampler_hist_push(s, i, x0);
    return r;
}

/* ---- DDIM ---- */

static lm_array *ddim_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *x, lm_array *mo, lm_array *noise)
{
    (void)i;
    (void)noise;
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
        x0 = lm_tmps_keep(t, lm_clamp(x0, -r, r));
    }
    /* eta 0: std_dev_t = 0 */
    float dir = sqrtf(1.0f - ap - 0.0f);
    return B(t, LM_OP_ADD, S(t, LM_OP_MUL, x0, sqrtf(ap)), S(t, LM_OP_MUL, eps, dir));
}

/* ---- the kinds ---- */

const lm_sampler_method lm_sampler_methods[LM_SAMPLER_KIND_COUNT] = {
    /*                     name       space           euler_config history upcast check        step */
    [LM_SAMPLER_EULER]   = {"euler",   LM_SPACE_SIGMA, true,        false,  true,  euler_check,  euler_step},
    [LM_SAMPLER_EULER_A] = {"euler_a", LM_SPACE_SIGMA, false,       false,  true,  NULL,         euler_a_step},
    [LM_SAMPLER_DPMPP_2M]= {"dpm++2m", LM_SPACE_DPM,   false,       true,   true,  dpm_check,    dpm_step},
    [LM_SAMPLER_DDIM]    = {"ddim",    LM_SPACE_DDPM,  false,       false,  false, ddim_check,   ddim_step},
    [LM_SAMPLER_LMS]     = {"lms",     LM_SPACE_SIGMA, false,       true,   true,  refuse_other_sigmas, lms_step},
};
