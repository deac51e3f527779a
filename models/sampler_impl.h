/* sampler_impl.h - what the sampler's files share (not installed): the
 * sampler object, each kind's method (models/sampler_steps.c), the schedule
 * builders (models/sampler_schedule.c) and the temporaries of a step.
 *
 * A kind's scheduler class decides three things beyond its step function,
 * named by its space:
 *   SIGMA  x = x0 + sigma * noise: float timesteps, sigmas interpolated on the
 *          training sigmas, the UNet input divided by sqrt(sigma^2 + 1), the
 *          initial noise times sigma_max (Euler, Euler a, LMS, Heun)
 *   DPM    x = alpha * x0 + sigma * noise: int timesteps (lambda-clipped),
 *          the input as it is (DPM-Solver, UniPC)
 *   DDPM   x = sqrt(acp) * x0 + sqrt(1 - acp) * noise: int timesteps, no
 *          sigmas, leading spacing by default (DDIM, LCM)
 * and where its class's set_timesteps differs from its space's, the variant
 * (lm_sched_variant) says how. */
#ifndef LM_SAMPLER_IMPL_H
#define LM_SAMPLER_IMPL_H

#include "models/sampler.h"
#include "ops.h"

#define LM_SAMPLER_HISTORY 4   /* the most earlier steps a multistep kind keeps */

struct lm_sampler {
    const lm_sampler_info *row;
    lm_sched_config c;          /* trained_betas not kept */
    bool karras, exponential;   /* the row's sigmas */
    int steps;                  /* num_inference_steps asked for */
    int64_t T;                  /* num_train_timesteps */
    float *acp;                 /* alphas_cumprod [T] */
    int n;                      /* len(scheduler.timesteps) */
    double *ts;                 /* scheduler.timesteps [n] */
    float *sig;                 /* scheduler.sigmas [n + 1]; NULL for DDPM */
    int begin;                  /* img2img's t_start */
    float init_sigma;
    int next;                   /* the step expected next (kinds that keep history) */
    /* what a multistep kind keeps of earlier steps, oldest first (DPM++:
       the previous x0 prediction; LMS: the last derivatives); emptied at i = 0 */
    lm_array *hist[LM_SAMPLER_HISTORY];
    int nhist;
    int lower_order_nums;       /* DPM++, UniPC: steps run since i = 0 */
    /* what a kind keeps beside hist (emptied at i = 0): Heun's first-call
       sample, DPM++ 2S's sample at its last first-order step, UniPC's last
       sample; Heun's dt; UniPC's last order */
    lm_array *held;
    float held_dt;
    int held_order;
};

/* held = a (retained; the previous one released) */
void lm_sampler_hold(lm_sampler *s, lm_array *a);

/* hist after step i: a at its end, the oldest dropped when it is full */
void lm_sampler_hist_push(lm_sampler *s, int i, lm_array *a);

/* Temporaries of one computation, released together. */
typedef struct lm_sampler_tmps {
    lm_array *a[32];
    int n;
} lm_sampler_tmps;

static inline lm_array *lm_tmps_keep(lm_sampler_tmps *t, lm_array *a)
{
    if (a && t->n < (int)(sizeof t->a / sizeof *t->a)) t->a[t->n++] = a;
    return a;
}

/* releases the temporaries; result survives (a new reference) */
static inline lm_array *lm_tmps_done(lm_sampler_tmps *t, lm_array *result)
{
    lm_array_retain(result);
    for (int i = 0; i < t->n; i++) lm_array_release(t->a[i]);
    t->n = 0;
    return result;
}

typedef enum lm_sampler_space { LM_SPACE_SIGMA, LM_SPACE_DPM, LM_SPACE_DDPM } lm_sampler_space;

/* how a class's set_timesteps differs from its space's builder */
typedef enum lm_sched_variant {
    LM_VARIANT_NONE,
    LM_VARIANT_HEUN,        /* SIGMA: every timestep but the first and sigma but the ends twice */
    LM_VARIANT_SINGLESTEP,  /* DPM: linspace whatever timestep_spacing says; Karras timesteps
                               always rounded */
    LM_VARIANT_UNIPC,       /* DPM: no lambda clipping; Karras timesteps always rounded;
                               final sigma_min is the schedule's last sigma */
    LM_VARIANT_LCM,         /* DDPM: original_inference_steps' grid, spacing ignored */
} lm_sched_variant;

/* One kind's implementation. */
typedef struct lm_sampler_method {
    const char *name;           /* in errors: "dpm++2m" */
    lm_sampler_space space;
    bool euler_config;          /* reads final_sigmas_type, and sigma_min / sigma_max for
                                   Karras (EulerDiscreteScheduler's keys) */
    bool history;               /* keeps earlier steps: steps run from 0 in order */
    bool upcast;                /* steps in f32 and returns the model output's dtype */
    int order;                  /* diffusers' scheduler.order if > 1 (0: 1): img2img skips order * t_start calls */
    lm_sched_variant variant;
    bool last_no_noise;         /* draws no noise at the schedule's last step (LCM) */
    /* the config keys its class reads and Lumen refuses (NULL: none beyond
       rescale_betas_zero_snr and the row's prediction types) */
    lm_status (*check)(const lm_sched_config *c, const char *name);
    /* x after step i (idx = begin + i) from the model output mo; noise for
       ancestral rows; temporaries go to t */
    lm_array *(*step)(lm_sampler_tmps *t, lm_sampler *s, int i, int idx, lm_array *x, lm_array *mo,
                      lm_array *noise);
} lm_sampler_method;

extern const lm_sampler_method lm_sampler_methods[LM_SAMPLER_KIND_COUNT];

/* alphas_cumprod into s->acp (c: the config s was made from, whose
 * trained_betas s does not keep), then set_timesteps of the sampler's space:
 * s->ts, s->n, s->sig, s->init_sigma */
lm_status lm_sched_build(lm_sampler *s, const lm_sched_config *c);
/* DPM-Solver's _sigma_to_alpha_sigma_t and lambda = log(alpha) - log(sigma) */
void lm_sched_dpm_alpha_sigma(float sigma, float *alpha_t, float *sigma_t, float *lambda);

#endif
