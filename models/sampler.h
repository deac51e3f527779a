/* sampler.h - the samplers of a diffusion pipeline, one row each in a table
 * (models/sampler_table.c), matching diffusers' schedulers built with
 * Scheduler.from_config(pipeline.scheduler.config):
 *   euler, euler_karras  EulerDiscreteScheduler (use_karras_sigmas)
 *   euler_a              EulerAncestralDiscreteScheduler
 *   dpm++2m, _karras     DPMSolverMultistepScheduler (dpmsolver++, order 2,
 *                        lower_order_final, final sigmas zero, as its defaults)
 *   ddim                 DDIMScheduler (eta 0)
 *   lms, lms_karras      LMSDiscreteScheduler (order 4)
 *   heun, heun_karras    HeunDiscreteScheduler (2 model calls per step but the last)
 *   dpm++2m_sde, _karras DPMSolverMultistepScheduler(algorithm_type="sde-dpmsolver++")
 *   dpm++2s_a, _karras   DPMSolverSinglestepScheduler(algorithm_type="sde-dpmsolver++")
 *   unipc                UniPCMultistepScheduler (bh2, order 2, predict_x0)
 *   lcm                  LCMScheduler
 *   *_exponential        use_exponential_sigmas=True (Euler, DPM++ 2M, DPM++ 2M SDE)
 * and the seeded noise the pipeline starts from.  A row names the sampler
 * (Lumen's name, A1111's name and schedule type) and says what it is; the
 * kind's step function lives in models/sampler_steps.c (docs/DEVELOPING.md,
 * "Adding a sampler").
 *
 * The schedule (timesteps, sigmas) is host arithmetic in double, rounded to
 * float32 where diffusers keeps float32 tensors, so timesteps equal
 * diffusers'.  The work on latents (scale_input, step, add_noise) is lazy
 * lm_* ops on the latent's device; every kind but DDIM computes a step in
 * f32 and returns the model output's dtype, as diffusers does (LMS: diffusers
 * steps in the latents' dtype; the two differ by f16 rounding only).
 *
 * A sampler is stateful like diffusers' (DPM++ 2M keeps the previous
 * model output, LMS the last four derivatives, Heun its first call's
 * derivative): call lm_sampler_step with i = 0, 1, ... count-1 in order (one
 * call per model evaluation); i = 0 starts over.
 *
 * Ownership: lm_sampler_new returns a sampler freed with lm_sampler_free;
 * every lm_array * returned is a new reference (lazy) the caller releases;
 * array arguments are borrowed; rows are static. */
#ifndef LM_SAMPLER_H
#define LM_SAMPLER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "array.h"
#include "device.h"

typedef enum lm_sampler_kind {
    LM_SAMPLER_NONE = -1,      /* lm_sampler_parse: no such sampler */
    LM_SAMPLER_EULER = 0,
    LM_SAMPLER_EULER_A,
    LM_SAMPLER_DPMPP_2M,
    LM_SAMPLER_DDIM,
    LM_SAMPLER_LMS,
    LM_SAMPLER_HEUN,
    LM_SAMPLER_DPMPP_2M_SDE,
    LM_SAMPLER_DPMPP_2S_A,
    LM_SAMPLER_UNIPC,
    LM_SAMPLER_LCM,
    LM_SAMPLER_KIND_COUNT
} lm_sampler_kind;

typedef enum lm_beta_schedule { LM_BETA_LINEAR, LM_BETA_SCALED_LINEAR, LM_BETA_SQUAREDCOS } lm_beta_schedule;
typedef enum lm_prediction { LM_PRED_EPSILON, LM_PRED_V, LM_PRED_SAMPLE } lm_prediction;
/* LM_SPACING_DEFAULT: the key was absent; the sampler class's default applies
 * (leading for DDIM, linspace for the others), as from_config does. */
typedef enum lm_spacing { LM_SPACING_DEFAULT, LM_SPACING_LINSPACE, LM_SPACING_LEADING,
                          LM_SPACING_TRAILING } lm_spacing;

/* The keys of scheduler_config.json that the samplers read.  A key
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
    bool use_exponential_sigmas;        /* picks a kind's exponential row */
    double sigma_min, sigma_max;        /* Euler's Karras bounds; NAN = from the schedule */
    bool final_sigma_min;               /* final_sigmas_type "sigma_min" (else "zero") */
    /* DPM++ */
    int64_t solver_order;               /* 2 (1 and 2 supported) */
    bool solver_heun;                   /* solver_type "heun" (else "midpoint") */
    bool lower_order_final;             /* true */
    bool euler_at_final;                /* false */
    double lambda_min_clipped;          /* -inf */
    bool solver_bh1;                    /* UniPC: solver_type "bh1" (else bh2) */
    bool predict_x0_false;              /* UniPC: predict_x0 false (refused) */
    bool disable_corrector;             /* UniPC: a non-empty disable_corrector (refused) */
    /* LCM */
    int64_t original_inference_steps;   /* 50 */
    double timestep_scaling;            /* 10.0 */
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

/* ---- the sampler table ---- */

/* the sigmas a row steps through */
typedef enum lm_sigma_schedule {
    LM_SIGMAS_NONE,      /* none: DDIM steps on alphas_cumprod at its timesteps */
    LM_SIGMAS_DEFAULT,   /* the scheduler's own: the training sigmas at the timesteps */
    LM_SIGMAS_KARRAS,    /* use_karras_sigmas=True (rho 7); timesteps follow the sigmas */
    LM_SIGMAS_EXPONENTIAL, /* use_exponential_sigmas=True (log-linear); timesteps follow them */
} lm_sigma_schedule;

#define LM_PRED_BIT(p) (1u << (p))   /* lm_sampler_info.predictions */

/* One row per sampler a user can name. */
typedef struct lm_sampler_info {
    const char *name;            /* Lumen's: "dpm++2m_karras" */
    const char *a1111;           /* A1111's infotext "Sampler: DPM++ 2M" */
    const char *a1111_schedule;  /* and "Schedule type: Karras" ("Exponential") */
    lm_sampler_kind kind;        /* its step function (lm_sampler_kind_name) */
    lm_sigma_schedule sigmas;
    bool ancestral;              /* draws noise at every step (lm_sampler_needs_noise) */
    int order_min, order_max;    /* the method's order(s): DPM++ 2M 1..2 (solver_order), LMS 1..4 */
    unsigned predictions;        /* LM_PRED_BIT of each prediction_type it runs */
    const char *diffusers;       /* the scheduler it matches, with from_config's arguments */
    const char *config;          /* scheduler_config.json keys it reads beyond the common ones
                                  * (num_train_timesteps, beta_*, trained_betas, prediction_type,
                                  * timestep_spacing, steps_offset) */
} lm_sampler_info;

/* row i (0, 1, ...), NULL past the last */
const lm_sampler_info *lm_sampler_info_at(int i);
/* The row named name: Lumen's name ("dpm++2m_karras") or A1111's ("DPM++ 2M
 * Karras", "Euler a"; the name with " Karras" or " Exponential" for such a
 * row), case, ' ', '_', '-' ignored and "pp" read as "++".  NULL with the error listing the
 * names if there is none. */
const lm_sampler_info *lm_sampler_find(const char *name);
const char *lm_sampler_kind_name(lm_sampler_kind k);   /* "dpm++2m"; "?" for none */
/* Every row's name joined by ", " into buf (n bytes, cut to fit): Lumen's
 * names, or A1111's quoted ("\"Euler\", \"DPM++ 2M Karras\"").  Returns buf. */
char *lm_sampler_list(char *buf, size_t n, bool a1111);
/* A1111's full name of a row: "DPM++ 2M SDE Karras" (the sampler, then the
 * schedule type unless it is "Normal") into buf.  Returns buf. */
char *lm_sampler_a1111_name(const lm_sampler_info *r, char *buf, size_t n);

typedef struct lm_sampler lm_sampler;

/* The row of kind k with Karras sigmas when karras (or the config's
 * use_karras_sigmas, for a kind that has a Karras row), else its row with
 * the scheduler's own.  steps: inference steps (1 .. num_train_timesteps).
 * strength 1.0 is text-to-image; strength in (0, 1) keeps the last steps as
 * diffusers' img2img get_timesteps does (int(steps * strength) of them; none
 * is an error).  NULL with the error set on a config the sampler does not
 * implement (named), or karras for a kind without a Karras row. */
lm_sampler *lm_sampler_new(const lm_sched_config *c, lm_sampler_kind k, bool karras, int steps,
                           double strength);
/* The same for a row of the table (lm_sampler_find's): a row with the
 * scheduler's own sigmas takes its kind's Karras or exponential row when the
 * config's use_karras_sigmas / use_exponential_sigmas asks for it. */
lm_sampler *lm_sampler_new_row(const lm_sched_config *c, const lm_sampler_info *row, int steps,
                               double strength);
void lm_sampler_free(lm_sampler *s);   /* NULL is fine */

/* model calls actually run (Heun: 2 per step but the last, so 2 * steps - 1
 * for text-to-image) */
int lm_sampler_count(const lm_sampler *s);
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
const lm_sampler_info *lm_sampler_get_info(const lm_sampler *s);   /* its row */

/* scale_model_input at step i: the UNet's input */
lm_array *lm_sampler_scale_input(lm_sampler *s, lm_array *x, int i);
/* whether step i needs a standard normal noise tensor shaped like x */
bool lm_sampler_needs_noise(const lm_sampler *s, int i);
/* x after step i from the model's output (noise NULL unless needs_noise) */
lm_array *lm_sampler_step(lm_sampler *s, lm_array *model_out, int i, lm_array *x, lm_array *noise);
/* img2img: the clean latents x0 noised to the first kept step (add_noise) */
lm_array *lm_sampler_add_noise(lm_sampler *s, lm_array *x0, lm_array *noise);
/* ... to step i's timestep (i = 0 is lm_sampler_add_noise): diffusers'
 * scheduler.add_noise(x0, noise, timesteps[i]) with its begin index set, as
 * the inpaint pipeline calls it on the init latents each step */
lm_array *lm_sampler_add_noise_at(lm_sampler *s, lm_array *x0, lm_array *noise, int i);

/* lm_sampler_find's row as (kind, karras); LM_SAMPLER_NONE (error set) if
 * there is none. */
lm_sampler_kind lm_sampler_parse(const char *name, bool *karras);
const char *lm_sampler_name(lm_sampler_kind k, bool karras);   /* its row's name; "?" if none */

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
