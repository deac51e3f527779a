/* sampler.h - the samplers of a diffusion pipeline, matching diffusers'
 * schedulers built with Scheduler.from_config(pipeline.scheduler.config):
 *   LM_SAMPLER_EULER     EulerDiscreteScheduler
 *   LM_SAMPLER_EULER_A   EulerAncestralDiscreteScheduler
 *   LM_SAMPLER_DPMPP_2M  DPMSolverMultistepScheduler (dpmsolver++, order 2,
 *                        lower_order_final, final sigmas zero, as its defaults;
 *                        karras = use_karras_sigmas=True)
 *   LM_SAMPLER_DDIM      DDIMScheduler (eta 0)
 * and the seeded noise the pipeline starts from.
 *
 * The schedule (timesteps, sigmas) is host arithmetic in double, rounded to
 * float32 where diffusers keeps float32 tensors, so timesteps equal
 * diffusers'.  The work on latents (scale_input, step, add_noise) is lazy
 * lm_* ops on the latent's device; Euler, Euler a and DPM++ compute a step
 * in f32 and return the model output's dtype, as diffusers does.
 *
 * A sampler is stateful like diffusers' (DPM++ 2M keeps the previous
 * model output): call lm_sampler_step with i = 0, 1, ... count-1 in order;
 * i = 0 starts over.
 *
 * Ownership: lm_sampler_new returns a sampler freed with lm_sampler_free;
 * every lm_array * returned is a new reference (lazy) the caller releases;
 * array arguments are borrowed. */
#ifndef LM_SAMPLER_H
#define LM_SAMPLER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "array.h"
#include "device.h"

typedef enum lm_sampler_kind {
    LM_SAMPLER_NONE = -1,      /* lm_sampler_parse: no such sampler */
    LM_SAMPLER_EULER = 0,
    LM_SAMPLER_EULER_A,
    LM_SAMPLER_DPMPP_2M,
    LM_SAMPLER_DDIM,
} lm_sampler_kind;

typedef enum lm_beta_schedule { LM_BETA_LINEAR, LM_BETA_SCALED_LINEAR, LM_BETA_SQUAREDCOS } lm_beta_schedule;
typedef enum lm_prediction { LM_PRED_EPSILON, LM_PRED_V, LM_PRED_SAMPLE } lm_prediction;
/* LM_SPACING_DEFAULT: the key was absent; the sampler class's default applies
 * (leading for DDIM, linspace for the others), as from_config does. */
typedef enum lm_spacing { LM_SPACING_DEFAULT, LM_SPACING_LINSPACE, LM_SPACING_LEADING,
                          LM_SPACING_TRAILING } lm_spacing;

/* The keys of scheduler_config.json that the four samplers read.  A key
 * absent from the file takes the default of the class being built (the
 * tri-state fields hold -1 for "absent"), as from_config does. */
typedef struct lm_sched_config {
    int64_t num_train_timesteps;        /* 1000 */
    double beta_start, beta_end;        /* 0.0001, 0.02 */
    lm_beta_schedule beta_schedule;     /* linear */
    float *trained_betas;               /* NULL, else num_train_timesteps values (owned) */
    lm_prediction prediction_type;      /* epsilon */
    lm_spacing timestep_spacing;
    int64_t steps_offset;               /* 0 */
    int clip_sample;                    /* DDIM: -1 absent (true) */
    double clip_sample_range;           /* 1.0 */
    int set_alpha_to_one;               /* DDIM: -1 absent (true) */
    bool use_karras_sigmas;             /* Euler, DPM++ */
    double sigma_min, sigma_max;        /* Euler's Karras bounds; NAN = from the schedule */
    bool final_sigma_min;               /* final_sigmas_type "sigma_min" (else "zero") */
    /* DPM++ */
    int64_t solver_order;               /* 2 (1 and 2 supported) */
    bool solver_heun;                   /* solver_type "heun" (else "midpoint") */
    bool lower_order_final;             /* true */
    bool euler_at_final;                /* false */
    double lambda_min_clipped;          /* -inf */
    /* refused when set (kept to name them in the error) */
    bool rescale_betas_zero_snr, thresholding, other_sigmas, learned_variance,
         continuous_timesteps, log_linear;
    char algorithm_type[32];            /* "dpmsolver++" */
    char solver_type_bad[32];           /* a solver_type DPM++ does not know, else "" */
} lm_sched_config;

/* Reads dir/scheduler_config.json (dir: the scheduler/ folder).  Errors name
 * the file and the key.  Free with lm_sched_config_clear. */
lm_status lm_sched_config_read(const char *dir, lm_sched_config *out);
/* From a parsed object; file names it in errors. */
lm_status lm_sched_config_from_json(const cJSON *config, const char *file, lm_sched_config *out);
/* diffusers' defaults (EulerDiscreteScheduler's, keys absent). */
void lm_sched_config_default(lm_sched_config *out);
void lm_sched_config_clear(lm_sched_config *c);   /* frees trained_betas */

typedef struct lm_sampler lm_sampler;

/* steps: inference steps (1 .. num_train_timesteps).  strength 1.0 is
 * text-to-image; strength in (0, 1) keeps the last steps as diffusers'
 * img2img get_timesteps does (int(steps * strength) of them; none is an
 * error).  karras: Karras sigmas (Euler, DPM++; config use_karras_sigmas
 * also turns them on).  NULL with the error set on a config the sampler does
 * not implement (named). */
lm_sampler *lm_sampler_new(const lm_sched_config *c, lm_sampler_kind k, bool karras, int steps,
                           double strength);
void lm_sampler_free(lm_sampler *s);   /* NULL is fine */

int lm_sampler_count(const lm_sampler *s);           /* steps actually run */
double lm_sampler_timestep(const lm_sampler *s, int i);  /* the t given to the UNet at step i */
/* sigma at step i (i = count: the final sigma); NAN for DDIM, which has none */
double lm_sampler_sigma(const lm_sampler *s, int i);
/* The whole schedule after set_timesteps (before img2img's cut):
 * diffusers' scheduler.timesteps and scheduler.sigmas (nsig = n + 1, 0 for
 * DDIM).  Borrowed; valid while s lives. */
const double *lm_sampler_schedule(const lm_sampler *s, int *n, const float **sigmas, int *nsig);
/* what text-to-image multiplies the initial noise by (init_noise_sigma) */
double lm_sampler_init_sigma(const lm_sampler *s);
lm_sampler_kind lm_sampler_get_kind(const lm_sampler *s);

/* scale_model_input at step i: the UNet's input */
lm_array *lm_sampler_scale_input(lm_sampler *s, lm_array *x, int i);
/* whether step i needs a standard normal noise tensor shaped like x */
bool lm_sampler_needs_noise(const lm_sampler *s, int i);
/* x after step i from the model's output (noise NULL unless needs_noise) */
lm_array *lm_sampler_step(lm_sampler *s, lm_array *model_out, int i, lm_array *x, lm_array *noise);
/* img2img: the clean latents x0 noised to the first kept step (add_noise) */
lm_array *lm_sampler_add_noise(lm_sampler *s, lm_array *x0, lm_array *noise);

/* "euler", "euler_a", "dpm++2m", "dpm++2m_karras", "ddim" and A1111's
 * "Euler", "Euler a", "DPM++ 2M", "DPM++ 2M Karras", "DDIM" (case and the
 * separators ' ', '_', '-' ignored); LM_SAMPLER_NONE (error set) else. */
lm_sampler_kind lm_sampler_parse(const char *name, bool *karras);
const char *lm_sampler_name(lm_sampler_kind k, bool karras);   /* "dpm++2m_karras" */

/* Standard normal noise, a pure function of (seed, stream, element index):
 * Philox-4x32-10 (core/random.h) keyed by (seed, stream), Box-Muller, drawn
 * on the host in f32 and placed on dev (NULL = default) in dt.  The same on
 * every device and thread count.  Stream 0 is the initial latents, stream k
 * the k-th ancestral draw.  A tensor's first elements do not depend on its
 * size, so noise for a batch is drawn per image (each with its own seed) and
 * concatenated.  Not torch's generator: a seed gives other images than
 * diffusers does for that seed. */
lm_array *lm_diffusion_noise(uint64_t seed, uint64_t stream, int ndim, const int64_t *shape,
                             lm_dtype dt, lm_device *dev);

#endif
