/* sampler_schedule.c - set_timesteps of diffusers' schedulers: betas,
 * alphas_cumprod, timesteps and sigmas for each space a kind lives in
 * (models/sampler_impl.h).
 *
 * The schedule is built on the host the way diffusers builds it: betas,
 * alphas_cumprod and sigmas are float32 torch tensors there (torch.linspace
 * in float, cumprod accumulated in double on the CPU, sqrt in float), the
 * timestep grids are numpy float64 (linspace, arange, round half to even)
 * cast to float32 or int64 per scheduler; each rounding is repeated here so
 * timesteps come out equal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "models/sampler_impl.h"
#include "error.h"

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

/* _convert_to_exponential into out[n]: exp(linspace(log smax, log smin)) */
static void exponential(double smin, double smax, int n, double *out)
{
    for (int i = 0; i < n; i++) out[i] = exp(np_linspace(log(smax), log(smin), n, i));
}

static const lm_sampler_method *method_of(const lm_sampler *s) { return &lm_sampler_methods[s->row->kind]; }

/* Heun: timesteps [t0, t1, t1, ..., t(n-1), t(n-1)] and sigmas [s0, s1, s1,
 * ..., s(n-1), s(n-1), s(n)] (repeat_interleave of all but the ends) */
static lm_status heun_interleave(lm_sampler *s)
{
    int n = s->n;
    double *ts = malloc((size_t)n * sizeof(double));
    float *sg = malloc((size_t)(n + 1) * sizeof(float));
    if (!ts || !sg) {
        free(ts);
        free(sg);
        return lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
    }
    memcpy(ts, s->ts, (size_t)n * sizeof(double));
    memcpy(sg, s->sig, (size_t)(n + 1) * sizeof(float));
    int k = 0;
    s->ts[k] = ts[0];
    s->sig[k++] = sg[0];
    for (int i = 1; i < n; i++)
        for (int r = 0; r < 2; r++) {
            s->ts[k] = ts[i];
            s->sig[k++] = sg[i];
        }
    s->sig[k] = sg[n];
    s->n = k;
    free(ts);
    free(sg);
    return LM_OK;
}

static lm_spacing spacing_of(const lm_sampler *s)
{
    if (s->c.timestep_spacing != LM_SPACING_DEFAULT) return s->c.timestep_spacing;
    return method_of(s)->space == LM_SPACE_DDPM ? LM_SPACING_LEADING : LM_SPACING_LINSPACE;
}

/* EulerDiscreteScheduler / EulerAncestralDiscreteScheduler /
 * LMSDiscreteScheduler.set_timesteps (float32 timesteps); only Euler reads
 * final_sigmas_type and the Karras bounds sigma_min / sigma_max */
static lm_status sigma_schedule(lm_sampler *s, const float *sigmas_full, const float *log_sigmas)
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
    if (s->karras || s->exponential) {
        bool bounds = method_of(s)->euler_config;
        double smin = bounds && !isnan(s->c.sigma_min) ? s->c.sigma_min : sg[n - 1];
        double smax = bounds && !isnan(s->c.sigma_max) ? s->c.sigma_max : sg[0];
        if (s->karras) karras(smin, smax, n, sg);
        else exponential(smin, smax, n, sg);
        for (int i = 0; i < n; i++) ts[i] = (float)sigma_to_t(sg[i], log_sigmas, T);
    }
    for (int i = 0; i < n; i++) s->sig[i] = (float)sg[i];
    s->sig[n] = method_of(s)->euler_config && s->c.final_sigma_min ? sigmas_full[0] : 0.0f;
    free(sg);
    if (method_of(s)->variant == LM_VARIANT_HEUN) {
        lm_status st = heun_interleave(s);
        if (st != LM_OK) return st;
    }
    float mx = 0;
    for (int i = 0; i <= s->n; i++) mx = s->sig[i] > mx ? s->sig[i] : mx;
    s->init_sigma = spacing_of(s) == LM_SPACING_LEADING ? sqrtf(mx * mx + 1.0f) : mx;
    return LM_OK;
}

/* DPMSolverMultistepScheduler.set_timesteps (int64 timesteps), and
 * DPMSolverSinglestepScheduler's and UniPCMultistepScheduler's where the
 * variant says */
static lm_status dpm_schedule(lm_sampler *s, const float *sigmas_full, const float *log_sigmas)
{
    int N = s->steps;
    int64_t T = s->T;
    double *ts = s->ts;
    lm_sched_variant var = method_of(s)->variant;
    /* lambda_t = log(alpha_t) - log(sigma_t), searchsorted on its flip (UniPC: none) */
    int64_t clipped = 0;
    for (int64_t i = T - 1; i >= 0 && var != LM_VARIANT_UNIPC; i--) {
        float lam = logf(sqrtf(s->acp[i])) - logf(sqrtf(1.0f - s->acp[i]));
        if ((double)lam < s->c.lambda_min_clipped) clipped++;
        else break;
    }
    int64_t last = T - clipped;
    int n = N;
    switch (var == LM_VARIANT_SINGLESTEP ? LM_SPACING_LINSPACE : spacing_of(s)) {
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
    float final_min = sigmas_full[0];
    if (s->karras || s->exponential) {
        double *sg = malloc((size_t)n * sizeof(double));
        if (!sg) return lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
        /* UniPC reads the bounds from its config (sigma_min / sigma_max) */
        bool bounds = var == LM_VARIANT_UNIPC;
        double smin = bounds && !isnan(s->c.sigma_min) ? s->c.sigma_min : sigmas_full[0];
        double smax = bounds && !isnan(s->c.sigma_max) ? s->c.sigma_max : sigmas_full[T - 1];
        if (s->karras) karras(smin, smax, n, sg);
        else exponential(smin, smax, n, sg);
        /* Karras timesteps are rounded (the multistep class truncates them for
           squaredcos_cap_v2), exponential ones truncated by the int64 cast */
        bool round = s->karras && (var != LM_VARIANT_NONE || s->c.beta_schedule != LM_BETA_SQUAREDCOS);
        for (int i = 0; i < n; i++) {
            double t = sigma_to_t(sg[i], log_sigmas, T);
            ts[i] = round ? rint(t) : trunc(t);
            s->sig[i] = (float)sg[i];
        }
        /* UniPC's final sigma_min is its schedule's last sigma */
        if (var == LM_VARIANT_UNIPC) final_min = (float)sg[n - 1];
        free(sg);
    } else {
        for (int i = 0; i < n; i++) {
            if (ts[i] < 0 || ts[i] > (double)(T - 1))
                return lm_error_set(LM_ERR_ARG, "%s: timestep %g outside [0, %lld] (steps_offset %lld)",
                                    method_of(s)->name, ts[i], (long long)(T - 1), (long long)s->c.steps_offset);
            s->sig[i] = sigmas_full[(int64_t)ts[i]];
        }
    }
    s->sig[n] = s->c.final_sigma_min ? final_min : 0.0f;
    s->init_sigma = 1.0f;
    return LM_OK;
}

/* LCMScheduler.set_timesteps(steps): steps of the reversed grid
 * k - 1, 2k - 1, ... (k = T // original_inference_steps), picked at
 * floor(linspace(0, original_inference_steps, steps, endpoint=False)) */
static lm_status lcm_schedule(lm_sampler *s)
{
    int N = s->steps;
    int64_t T = s->T, orig = s->c.original_inference_steps;
    if (orig > T)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: original_inference_steps %lld > num_train_timesteps %lld",
                            method_of(s)->name, (long long)orig, (long long)T);
    if (N > orig)
        return lm_error_set(LM_ERR_ARG, "%s: steps %d: expected at most original_inference_steps (%lld), as "
                            "diffusers' LCMScheduler", method_of(s)->name, N, (long long)orig);
    int64_t k = T / orig;
    double step = (double)orig / (double)N;
    for (int i = 0; i < N; i++) {
        int64_t j = (int64_t)floor((double)i * step);   /* index into the reversed grid */
        s->ts[i] = (double)((orig - j) * k - 1);
    }
    s->n = N;
    s->init_sigma = 1.0f;
    return LM_OK;
}

/* DDIMScheduler.set_timesteps (int64 timesteps, no sigmas) */
static lm_status ddim_schedule(lm_sampler *s)
{
    if (method_of(s)->variant == LM_VARIANT_LCM) return lcm_schedule(s);
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
            return lm_error_set(LM_ERR_ARG, "%s: timestep %g outside [0, %lld] (steps_offset %lld)",
                                method_of(s)->name, ts[i],
                                (long long)(T - 1), (long long)s->c.steps_offset);
    s->init_sigma = 1.0f;
    return LM_OK;
}

/* ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5 and its log, then the
 * space's set_timesteps */
lm_status lm_sched_build(lm_sampler *s, const lm_sched_config *c)
{
    int64_t T = s->T;
    float *sigmas_full = malloc((size_t)T * sizeof(float)), *log_sigmas = malloc((size_t)T * sizeof(float));
    lm_status st = LM_OK;
    if (!sigmas_full || !log_sigmas) {
        st = lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
        goto done;
    }
    if ((st = make_alphas_cumprod(c, s->acp)) != LM_OK) goto done;
    for (int64_t i = 0; i < T; i++) {
        sigmas_full[i] = acp_sigma(s->acp[i]);
        log_sigmas[i] = logf(sigmas_full[i]);
    }
    switch (method_of(s)->space) {
    case LM_SPACE_SIGMA: st = sigma_schedule(s, sigmas_full, log_sigmas); break;
    case LM_SPACE_DPM: st = dpm_schedule(s, sigmas_full, log_sigmas); break;
    case LM_SPACE_DDPM: st = ddim_schedule(s); break;
    }
done:
    free(sigmas_full);
    free(log_sigmas);
    return st;
}

void lm_sched_dpm_alpha_sigma(float sigma, float *alpha_t, float *sigma_t, float *lambda)
{
    *alpha_t = 1.0f / sqrtf(sigma * sigma + 1.0f);
    *sigma_t = sigma * *alpha_t;
    *lambda = logf(*alpha_t) - logf(*sigma_t);
}
