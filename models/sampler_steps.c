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
    if (c->other_sigmas || c->use_exponential_sigmas)
        return lm_error_set(LM_ERR_UNSUPPORTED,
                            "%s: %s are not supported", name, c->other_sigmas
                            ? "beta, lu-lambda, flow sigmas and dynamic shifting (exponential sigmas: the "
                              "*_exponential rows)" : "exponential sigmas on this row");
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

/* DPM-Solver's keys but algorithm_type (which the SDE rows pass themselves) */
static lm_status dpm_common_check(const lm_sched_config *c, const char *name)
{
    lm_status st;
    if ((st = refuse_other_sigmas(c, name)) || (st = ddim_check(c, name))) return st;
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

static lm_status dpm_check(const lm_sched_config *c, const char *name)
{
    if (strcmp(c->algorithm_type, "dpmsolver++") && strcmp(c->algorithm_type, "deis"))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: algorithm_type \"%s\" is not supported (dpmsolver++; "
                            "sde-dpmsolver++ is the dpm++2m_sde rows)", name, c->algorithm_type);
    return dpm_common_check(c, name);
}

/* DPMSolverSinglestepScheduler: final_sigmas_type sigma_min would need
 * lower_order_final as the file says it (absent: false), which Lumen keeps
 * as DPM++ 2M's default (true) */
static lm_status dpm2s_check(const lm_sched_config *c, const char *name)
{
    if (c->final_sigma_min)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: final_sigmas_type \"sigma_min\" is not supported (zero)", name);
    return dpm_common_check(c, name);
}

static lm_status unipc_check(const lm_sched_config *c, const char *name)
{
    lm_status st;
    if ((st = refuse_other_sigmas(c, name)) || (st = ddim_check(c, name))) return st;
    if (c->solver_order > 2)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: solver_order %lld is not supported (1 or 2)", name,
                            (long long)c->solver_order);
    if (c->solver_type_bad[0])
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: solver_type \"%s\" is not supported (bh1, bh2)", name,
                            c->solver_type_bad);
    if (c->predict_x0_false)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: predict_x0 false is not supported", name);
    if (c->disable_corrector)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: disable_corrector (a non-empty list) is not supported", name);
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

/* clip_sample (Heun, LCM: absent is false) */
static lm_array *clip_x0(tmps *t, const lm_sampler *s, lm_array *x0)
{
    if (!x0 || s->c.clip_sample != 1) return x0;
    return lm_tmps_keep(t, lm_clamp(x0, -s->c.clip_sample_range, s->c.clip_sample_range));
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

/* ---- Heun ---- */

/* HeunDiscreteScheduler.step: even calls (from the step's start) an Euler
 * step, keeping the derivative, dt and the sample; odd calls the average of
 * that derivative and the one at the Euler step's end, from the kept sample */
static lm_array *heun_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    (void)noise;
    bool first = i % 2 == 0;
    if (!first && (!s->held || !s->nhist)) {
        lm_error_set(LM_ERR_STATE, "heun: the second call of a step without its first");
        return NULL;
    }
    float sigma = first ? s->sig[idx] : s->sig[idx - 1], next = first ? s->sig[idx + 1] : s->sig[idx];
    lm_array *x0 = clip_x0(t, s, sigma_x0(t, s, xs, mo, first ? sigma : next));
    if (!x0) return NULL;
    if (first) {
        lm_array *d = S(t, LM_OP_DIV, B(t, LM_OP_SUB, xs, x0), sigma);
        if (!d) return NULL;
        lm_sampler_hist_push(s, i, d);
        lm_sampler_hold(s, xs);
        s->held_dt = next - sigma;
        return B(t, LM_OP_ADD, xs, S(t, LM_OP_MUL, d, s->held_dt));
    }
    lm_array *d = S(t, LM_OP_DIV, B(t, LM_OP_SUB, xs, x0), next);
    lm_array *avg = S(t, LM_OP_DIV, B(t, LM_OP_ADD, s->hist[s->nhist - 1], d), 2.0f);
    return B(t, LM_OP_ADD, s->held, S(t, LM_OP_MUL, avg, s->held_dt));
}

/* ---- DPM++ 2M ---- */

/* convert_model_output (dpmsolver++, UniPC's predict_x0): the x0 prediction at sigma */
static lm_array *dpm_x0(tmps *t, const lm_sampler *s, lm_array *xs, lm_array *mo, float sigma)
{
    float a0, s0, l0;
    lm_sched_dpm_alpha_sigma(sigma, &a0, &s0, &l0);
    switch (s->c.prediction_type) {
    case LM_PRED_EPSILON: return S(t, LM_OP_DIV, B(t, LM_OP_SUB, xs, S(t, LM_OP_MUL, mo, s0)), a0);
    case LM_PRED_SAMPLE: return mo;
    default: return B(t, LM_OP_SUB, S(t, LM_OP_MUL, xs, a0), S(t, LM_OP_MUL, mo, s0));
    }
}

static float dpm_lambda(float sigma)
{
    float a, st, l;
    lm_sched_dpm_alpha_sigma(sigma, &a, &st, &l);
    return l;
}

/* sde-dpmsolver++'s first-order update from x at sigma s (lambda ls) to
 * sigma t: (st / ss * e^-h) x + (at (1 - e^-2h)) x0 + (st sqrt(1 - e^-2h)) noise */
static lm_array *sde_first(tmps *t, lm_array *x, lm_array *x0, lm_array *noise, float ss, float at, float st, float h)
{
    float e2 = 1.0f - expf(-2.0f * h);
    lm_array *r = B(t, LM_OP_ADD, S(t, LM_OP_MUL, x, st / ss * expf(-h)), S(t, LM_OP_MUL, x0, at * e2));
    return B(t, LM_OP_ADD, r, S(t, LM_OP_MUL, noise, st * sqrtf(e2)));
}

/* DPMSolverMultistepScheduler.step, dpmsolver++ or (sde) sde-dpmsolver++ */
static lm_array *dpm_multistep(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise,
                               bool sde)
{
    float a0, s0, l0, at, st, lt;
    lm_sched_dpm_alpha_sigma(s->sig[idx], &a0, &s0, &l0);
    lm_sched_dpm_alpha_sigma(s->sig[idx + 1], &at, &st, &lt);
    lm_array *x0 = dpm_x0(t, s, xs, mo, s->sig[idx]), *nz = NULL;
    if (sde && !(nz = lm_tmps_keep(t, lm_cast(noise, LM_F32)))) return NULL;
    if (i == 0) s->lower_order_nums = 0;
    bool last = idx == s->n - 1;
    bool lower_final = last && (s->c.euler_at_final || (s->c.lower_order_final && s->n < 15) ||
                                !s->c.final_sigma_min);
    float h = lt - l0, em1 = expf(-h) - 1.0f;
    lm_array *r;
    lm_array *prev_x0 = i > 0 && s->nhist ? s->hist[s->nhist - 1] : NULL;
    bool first = s->c.solver_order == 1 || s->lower_order_nums < 1 || lower_final || !prev_x0;
    if (sde && first) {
        r = sde_first(t, xs, x0, nz, s0, at, st, h);
    } else if (sde) {
        float r0 = (l0 - dpm_lambda(s->sig[idx - 1])) / h, e2 = 1.0f - expf(-2.0f * h);
        lm_array *d1 = S(t, LM_OP_MUL, B(t, LM_OP_SUB, x0, prev_x0), 1.0f / r0);
        r = B(t, LM_OP_ADD, S(t, LM_OP_MUL, xs, st / s0 * expf(-h)), S(t, LM_OP_MUL, x0, at * e2));
        r = B(t, LM_OP_ADD, r, S(t, LM_OP_MUL, d1, s->c.solver_heun ? at * (e2 / (-2.0f * h) + 1.0f)
                                                                     : 0.5f * (at * e2)));
        r = B(t, LM_OP_ADD, r, S(t, LM_OP_MUL, nz, st * sqrtf(e2)));
    } else if (first) {
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

static lm_array *dpm_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    return dpm_multistep(t, s, i, idx, xs, mo, noise, false);
}

static lm_array *dpm_sde_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    return dpm_multistep(t, s, i, idx, xs, mo, noise, true);
}

/* ---- DPM++ 2S a: DPMSolverSinglestepScheduler(algorithm_type="sde-dpmsolver++") ---- */

/* get_order_list(steps)[idx] with lower_order_final (forced by final sigma 0) */
static int singlestep_order(const lm_sampler *s, int idx)
{
    int N = s->steps;
    if (s->c.solver_order == 1 || idx == N - 1 || (N % 2 == 0 && idx == N - 2)) return 1;
    return idx % 2 == 0 ? 1 : 2;
}

/* order 1 steps from the sample (kept); order 2 steps again from the sample
 * of the order-1 step before it, over both intervals, with the x0 predicted
 * at their middle */
static lm_array *dpm2s_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    lm_array *x0 = dpm_x0(t, s, xs, mo, s->sig[idx]), *nz = lm_tmps_keep(t, lm_cast(noise, LM_F32));
    if (!x0 || !nz) return NULL;
    /* model_outputs[-2] is there from the second step on */
    int order = singlestep_order(s, idx);
    if (order == 2 && (i < 1 || s->nhist < 1 || !s->held)) order = 1;
    lm_array *m1 = order == 2 ? s->hist[s->nhist - 1] : NULL;
    lm_sampler_hist_push(s, i, x0);
    if (order == 1) lm_sampler_hold(s, xs);
    float at, st, lt;
    lm_sched_dpm_alpha_sigma(s->sig[idx + 1], &at, &st, &lt);
    if (order == 1) {
        float a0, s0, l0;
        lm_sched_dpm_alpha_sigma(s->sig[idx], &a0, &s0, &l0);
        return sde_first(t, s->held, x0, nz, s0, at, st, lt - l0);
    }
    float a1, s1, l1;
    lm_sched_dpm_alpha_sigma(s->sig[idx - 1], &a1, &s1, &l1);
    float h = lt - l1, r0 = (dpm_lambda(s->sig[idx]) - l1) / h, e2 = 1.0f - expf(-2.0f * h);
    lm_array *d1 = S(t, LM_OP_MUL, B(t, LM_OP_SUB, x0, m1), 1.0f / r0);
    lm_array *r = B(t, LM_OP_ADD, S(t, LM_OP_MUL, s->held, st / s1 * expf(-h)), S(t, LM_OP_MUL, m1, at * e2));
    r = B(t, LM_OP_ADD, r, S(t, LM_OP_MUL, d1, s->c.solver_heun ? at * (e2 / (-2.0f * h) + 1.0f) : 0.5f * (at * e2)));
    return B(t, LM_OP_ADD, r, S(t, LM_OP_MUL, nz, st * sqrtf(e2)));
}

/* ---- UniPC: UniPCMultistepScheduler (bh1 / bh2, predict_x0, order 1 or 2) ---- */

/* the predictor (multistep_uni_p_bh_update) from x at sig[idx] to
 * sig[idx + 1] with the x0 predictions hist (the newest last) */
static lm_array *unipc_predict(tmps *t, lm_sampler *s, int idx, lm_array *x, int order)
{
    float at, st, lt, a0, s0, l0;
    lm_sched_dpm_alpha_sigma(s->sig[idx + 1], &at, &st, &lt);
    lm_sched_dpm_alpha_sigma(s->sig[idx], &a0, &s0, &l0);
    lm_array *m0 = s->hist[s->nhist - 1];
    float h = lt - l0, hh = -h, hphi1 = expm1f(hh), bh = s->c.solver_bh1 ? hh : expm1f(hh);
    lm_array *r = B(t, LM_OP_SUB, S(t, LM_OP_MUL, x, st / s0), S(t, LM_OP_MUL, m0, at * hphi1));
    if (order < 2) return r;
    float rk = (dpm_lambda(s->sig[idx - 1]) - l0) / h;
    lm_array *d1 = S(t, LM_OP_DIV, B(t, LM_OP_SUB, s->hist[s->nhist - 2], m0), rk);
    return B(t, LM_OP_SUB, r, S(t, LM_OP_MUL, S(t, LM_OP_MUL, d1, 0.5f), at * bh));
}

/* the corrector (multistep_uni_c_bh_update): the last step from last (at
 * sig[idx - 1]) to sig[idx] again with this step's x0 prediction mt; hist
 * holds the x0 predictions before it */
static lm_array *unipc_correct(tmps *t, lm_sampler *s, int idx, lm_array *mt, lm_array *last, int order)
{
    float at, st, lt, a0, s0, l0;
    lm_sched_dpm_alpha_sigma(s->sig[idx], &at, &st, &lt);
    lm_sched_dpm_alpha_sigma(s->sig[idx - 1], &a0, &s0, &l0);
    lm_array *m0 = s->hist[s->nhist - 1], *corr = NULL;
    float h = lt - l0, hh = -h, hphi1 = expm1f(hh), bh = s->c.solver_bh1 ? hh : expm1f(hh);
    float rho_t = 0.5f;
    if (order >= 2 && s->nhist >= 2 && idx >= 2) {
        float rk = (dpm_lambda(s->sig[idx - 2]) - l0) / h;
        lm_array *d1 = S(t, LM_OP_DIV, B(t, LM_OP_SUB, s->hist[s->nhist - 2], m0), rk);
        /* R = [[1, 1], [rk, 1]], b_k = h_phi_k * k! / B_h: solve R rho = b */
        float hphik = hphi1 / hh - 1.0f, b1 = hphik * 1.0f / bh;
        hphik = hphik / hh - 1.0f / 2.0f;
        float b2 = hphik * 2.0f / bh;
        double rho0 = ((double)b1 - (double)b2) / (1.0 - (double)rk);
        rho_t = (float)((double)b1 - rho0);
        corr = S(t, LM_OP_MUL, d1, (float)rho0);
    }
    lm_array *r = B(t, LM_OP_SUB, S(t, LM_OP_MUL, last, st / s0), S(t, LM_OP_MUL, m0, at * hphi1));
    lm_array *dt = S(t, LM_OP_MUL, B(t, LM_OP_SUB, mt, m0), rho_t);
    lm_array *res = corr ? B(t, LM_OP_ADD, corr, dt) : dt;
    return B(t, LM_OP_SUB, r, S(t, LM_OP_MUL, res, at * bh));
}

static lm_array *unipc_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *xs, lm_array *mo, lm_array *noise)
{
    (void)noise;
    /* the x0 prediction from the sample before the correction, as diffusers */
    lm_array *mt = dpm_x0(t, s, xs, mo, s->sig[idx]), *x = xs;
    if (!mt) return NULL;
    if (i == 0) s->lower_order_nums = 0;
    if (i > 0 && s->held && s->nhist >= 1 && !(x = unipc_correct(t, s, idx, mt, s->held, s->held_order)))
        return NULL;
    lm_sampler_hist_push(s, i, mt);
    int order = (int)s->c.solver_order;
    if (s->c.lower_order_final && s->n - idx < order) order = s->n - idx;
    if (s->lower_order_nums + 1 < order) order = s->lower_order_nums + 1;
    s->held_order = order;
    lm_sampler_hold(s, x);
    lm_array *r = unipc_predict(t, s, idx, x, order);
    if (s->lower_order_nums < s->c.solver_order) s->lower_order_nums++;
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
    /* DDIMScheduler's clip_sample defaults to true: a config without the
     * key clips (SD's own configs say false) */
    if (s->c.clip_sample != 0) {
        double r = s->c.clip_sample_range;
        x0 = lm_tmps_keep(t, lm_clamp(x0, -r, r));
    }
    /* eta 0: std_dev_t = 0 */
    float dir = sqrtf(1.0f - ap - 0.0f);
    return B(t, LM_OP_ADD, S(t, LM_OP_MUL, x0, sqrtf(ap)), S(t, LM_OP_MUL, eps, dir));
}

/* ---- LCM ---- */

/* LCMScheduler.step: the x0 prediction through the consistency model's
 * boundary condition (c_skip, c_out), then noised to the next timestep
 * (not after the last) */
static lm_array *lcm_step(tmps *t, lm_sampler *s, int i, int idx, lm_array *x, lm_array *mo, lm_array *noise)
{
    (void)i;
    int64_t ts = (int64_t)s->ts[idx], prev = idx + 1 < s->n ? (int64_t)s->ts[idx + 1] : ts;
    float a = s->acp[ts], ap = s->acp[prev], sa = sqrtf(a), sb = sqrtf(1.0f - a);
    float st = (float)ts * (float)s->c.timestep_scaling;
    float c_skip = 0.25f / (st * st + 0.25f), c_out = st / sqrtf(st * st + 0.25f);
    lm_array *x0;
    switch (s->c.prediction_type) {
    case LM_PRED_EPSILON: x0 = S(t, LM_OP_DIV, B(t, LM_OP_SUB, x, S(t, LM_OP_MUL, mo, sb)), sa); break;
    case LM_PRED_SAMPLE: x0 = mo; break;
    default: x0 = B(t, LM_OP_SUB, S(t, LM_OP_MUL, x, sa), S(t, LM_OP_MUL, mo, sb)); break;
    }
    x0 = clip_x0(t, s, x0);
    lm_array *den = B(t, LM_OP_ADD, S(t, LM_OP_MUL, x0, c_out), S(t, LM_OP_MUL, x, c_skip));
    if (idx == s->n - 1) return den;
    lm_array *nz = lm_tmps_keep(t, lm_cast(noise, LM_F32));
    return B(t, LM_OP_ADD, S(t, LM_OP_MUL, den, sqrtf(ap)), S(t, LM_OP_MUL, nz, sqrtf(1.0f - ap)));
}

/* ---- the kinds ---- */

/* order: diffusers' scheduler.order where it is not 1 (Heun: img2img skips
 * 2 * t_start model calls) */
#define M(...) {__VA_ARGS__}
const lm_sampler_method lm_sampler_methods[LM_SAMPLER_KIND_COUNT] = {
    [LM_SAMPLER_EULER] = M(.name = "euler", .space = LM_SPACE_SIGMA, .euler_config = true, .upcast = true,
                           .check = euler_check, .step = euler_step),
    [LM_SAMPLER_EULER_A] = M(.name = "euler_a", .space = LM_SPACE_SIGMA, .upcast = true, .step = euler_a_step),
    [LM_SAMPLER_DPMPP_2M] = M(.name = "dpm++2m", .space = LM_SPACE_DPM, .history = true, .upcast = true,
                              .check = dpm_check, .step = dpm_step),
    [LM_SAMPLER_DDIM] = M(.name = "ddim", .space = LM_SPACE_DDPM, .check = ddim_check, .step = ddim_step),
    [LM_SAMPLER_LMS] = M(.name = "lms", .space = LM_SPACE_SIGMA, .history = true, .upcast = true,
                         .check = refuse_other_sigmas, .step = lms_step),
    [LM_SAMPLER_HEUN] = M(.name = "heun", .space = LM_SPACE_SIGMA, .history = true, .upcast = true, .order = 2,
                          .variant = LM_VARIANT_HEUN, .check = refuse_other_sigmas, .step = heun_step),
    [LM_SAMPLER_DPMPP_2M_SDE] = M(.name = "dpm++2m_sde", .space = LM_SPACE_DPM, .history = true, .upcast = true,
                                  .check = dpm_common_check, .step = dpm_sde_step),
    [LM_SAMPLER_DPMPP_2S_A] = M(.name = "dpm++2s_a", .space = LM_SPACE_DPM, .history = true, .upcast = true,
                                .variant = LM_VARIANT_SINGLESTEP, .check = dpm2s_check, .step = dpm2s_step),
    [LM_SAMPLER_UNIPC] = M(.name = "unipc", .space = LM_SPACE_DPM, .history = true, .upcast = true,
                           .variant = LM_VARIANT_UNIPC, .check = unipc_check, .step = unipc_step),
    [LM_SAMPLER_LCM] = M(.name = "lcm", .space = LM_SPACE_DDPM, .upcast = true, .variant = LM_VARIANT_LCM,
                         .last_no_noise = true, .check = ddim_check, .step = lcm_step),
};
