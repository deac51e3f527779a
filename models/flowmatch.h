/* flowmatch.h - diffusers' FlowMatchEulerDiscreteScheduler (the sampler of
 * Z-Image and FLUX.2-klein) and the pieces of the pipelines that feed it:
 * the default sigma lists and the two ways of computing the dynamic-shift
 * mu.  The schedule is host data (floats); a step is three lazy ops.
 *
 * set_timesteps follows scheduling_flow_match_euler_discrete.py to the
 * rounding: given sigmas are f32 and shifted in f32 (numpy float32 arrays
 * with Python scalars), sigmas made from num_train_timesteps are f64 (numpy)
 * and rounded to f32 after the shift; timesteps are sigmas * N in f32; the
 * last sigma is 0 (1 with invert_sigmas).  Config keys read from
 * scheduler_config.json: num_train_timesteps, shift, use_dynamic_shifting,
 * base_shift, max_shift, base_image_seq_len, max_image_seq_len,
 * time_shift_type (exponential | linear), shift_terminal, invert_sigmas;
 * use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas and
 * stochastic_sampling set are refused, naming the key.
 *
 * Ownership: lm_flowmatch_schedule holds malloc'd arrays freed with
 * lm_flowmatch_schedule_free; lm_flowmatch_step returns a new reference. */
#ifndef LM_FLOWMATCH_H
#define LM_FLOWMATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "array.h"

typedef struct lm_flowmatch_config {
    int64_t num_train_timesteps;
    double shift;
    bool use_dynamic_shifting;
    double base_shift, max_shift;
    int64_t base_image_seq_len, max_image_seq_len;
    bool linear_time_shift;     /* time_shift_type "linear" (else "exponential") */
    double shift_terminal;      /* 0 = none (null in the config) */
    bool invert_sigmas;
} lm_flowmatch_config;

/* diffusers' defaults (FlowMatchEulerDiscreteScheduler()) */
void lm_flowmatch_config_default(lm_flowmatch_config *c);
/* from a parsed scheduler_config.json (borrowed); what names it in errors */
lm_status lm_flowmatch_config_parse(const cJSON *j, const char *what, lm_flowmatch_config *c);
/* dir/scheduler_config.json */
lm_status lm_flowmatch_config_load(const char *dir, lm_flowmatch_config *c);

typedef struct lm_flowmatch_schedule {
    int steps;
    float *sigmas;      /* steps + 1, the last 0 (1 with invert_sigmas) */
    float *timesteps;   /* steps: sigmas * num_train_timesteps */
} lm_flowmatch_schedule;

/* set_timesteps(steps, sigmas=..., mu=...): sigmas (steps values) may be
 * NULL (then they are spaced from num_train_timesteps as diffusers does);
 * has_mu says whether mu is given (required with use_dynamic_shifting). */
lm_status lm_flowmatch_set_timesteps(const lm_flowmatch_config *c, int steps, const float *sigmas,
                                     bool has_mu, double mu, lm_flowmatch_schedule *out);
void lm_flowmatch_schedule_free(lm_flowmatch_schedule *s);

/* Step i of the schedule: x + (sigmas[i+1] - sigmas[i]) * v in f32 (the
 * scheduler upcasts the sample); v is the velocity the scheduler is given
 * (ZImagePipeline passes the negated transformer output).  A new lazy f32
 * array, or NULL with the error set. */
lm_array *lm_flowmatch_step(const lm_flowmatch_schedule *s, int i, lm_array *x, lm_array *v);

/* ZImagePipeline's calculate_shift: mu linear in image_seq_len through
 * (base_seq, base_shift) and (max_seq, max_shift). */
double lm_flowmatch_zimage_mu(double image_seq_len, double base_seq, double max_seq, double base_shift,
                              double max_shift);
/* Flux2KleinPipeline's compute_empirical_mu(image_seq_len, num_steps). */
double lm_flowmatch_klein_mu(double image_seq_len, int num_steps);
/* The pipelines' default sigmas (steps values into out): Z-Image's
 * torch.linspace(1, 1/steps, steps) in f32; Klein's np.linspace (f64)
 * rounded to f32. */
void lm_flowmatch_zimage_sigmas(int steps, float *out);
void lm_flowmatch_klein_sigmas(int steps, float *out);

#endif
