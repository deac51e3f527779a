/* sampler_table.c - the sampler table: one row per sampler a user can name,
 * and the names read from it (lm_sampler_find, the CLI's --sampler, Lua's
 * lm.diffusion.samplers(), A1111's infotext).  Adding a sampler: its row
 * here, its kind's step in models/sampler_steps.c (docs/DEVELOPING.md). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include "models/sampler_impl.h"
#include "error.h"

#define ALL_PREDS (LM_PRED_BIT(LM_PRED_EPSILON) | LM_PRED_BIT(LM_PRED_V) | LM_PRED_BIT(LM_PRED_SAMPLE))
#define NOT_SAMPLE (LM_PRED_BIT(LM_PRED_EPSILON) | LM_PRED_BIT(LM_PRED_V))

static const lm_sampler_info rows[] = {
    /* name, A1111 sampler and schedule type, kind, sigmas, ancestral, orders, predictions,
       the diffusers scheduler, the config keys it reads beyond the common ones */
    {"euler", "Euler", "Normal", LM_SAMPLER_EULER, LM_SIGMAS_DEFAULT, false, 1, 1, ALL_PREDS,
     "EulerDiscreteScheduler", "final_sigmas_type, use_karras_sigmas"},
    {"euler_karras", "Euler", "Karras", LM_SAMPLER_EULER, LM_SIGMAS_KARRAS, false, 1, 1, ALL_PREDS,
     "EulerDiscreteScheduler(use_karras_sigmas=True)", "final_sigmas_type, sigma_min, sigma_max"},
    {"euler_a", "Euler a", "Normal", LM_SAMPLER_EULER_A, LM_SIGMAS_DEFAULT, true, 1, 1, NOT_SAMPLE,
     "EulerAncestralDiscreteScheduler", ""},
    {"dpm++2m", "DPM++ 2M", "Normal", LM_SAMPLER_DPMPP_2M, LM_SIGMAS_DEFAULT, false, 1, 2, ALL_PREDS,
     "DPMSolverMultistepScheduler(algorithm_type=\"dpmsolver++\", solver_order=2)",
     "solver_order, solver_type, lower_order_final, euler_at_final, final_sigmas_type, "
     "lambda_min_clipped, use_karras_sigmas"},
    {"dpm++2m_karras", "DPM++ 2M", "Karras", LM_SAMPLER_DPMPP_2M, LM_SIGMAS_KARRAS, false, 1, 2, ALL_PREDS,
     "DPMSolverMultistepScheduler(algorithm_type=\"dpmsolver++\", solver_order=2, use_karras_sigmas=True)",
     "solver_order, solver_type, lower_order_final, euler_at_final, final_sigmas_type, lambda_min_clipped"},
    {"ddim", "DDIM", "Normal", LM_SAMPLER_DDIM, LM_SIGMAS_NONE, false, 1, 1, ALL_PREDS,
     "DDIMScheduler", "clip_sample, clip_sample_range, set_alpha_to_one"},
    {"lms", "LMS", "Normal", LM_SAMPLER_LMS, LM_SIGMAS_DEFAULT, false, 1, 4, ALL_PREDS,
     "LMSDiscreteScheduler", "use_karras_sigmas"},
    {"lms_karras", "LMS", "Karras", LM_SAMPLER_LMS, LM_SIGMAS_KARRAS, false, 1, 4, ALL_PREDS,
     "LMSDiscreteScheduler(use_karras_sigmas=True)", ""},
    /* issue 37 */
    {"heun", "Heun", "Normal", LM_SAMPLER_HEUN, LM_SIGMAS_DEFAULT, false, 2, 2, ALL_PREDS,
     "HeunDiscreteScheduler", "clip_sample, clip_sample_range, use_karras_sigmas"},
    {"heun_karras", "Heun", "Karras", LM_SAMPLER_HEUN, LM_SIGMAS_KARRAS, false, 2, 2, ALL_PREDS,
     "HeunDiscreteScheduler(use_karras_sigmas=True)", "clip_sample, clip_sample_range"},
    {"heun_exponential", "Heun", "Exponential", LM_SAMPLER_HEUN, LM_SIGMAS_EXPONENTIAL, false, 2, 2, ALL_PREDS,
     "HeunDiscreteScheduler(use_exponential_sigmas=True)", "clip_sample, clip_sample_range"},
    {"lms_exponential", "LMS", "Exponential", LM_SAMPLER_LMS, LM_SIGMAS_EXPONENTIAL, false, 1, 4, ALL_PREDS,
     "LMSDiscreteScheduler(use_exponential_sigmas=True)", ""},
    {"euler_exponential", "Euler", "Exponential", LM_SAMPLER_EULER, LM_SIGMAS_EXPONENTIAL, false, 1, 1, ALL_PREDS,
     "EulerDiscreteScheduler(use_exponential_sigmas=True)", "final_sigmas_type, sigma_min, sigma_max"},
    {"dpm++2m_exponential", "DPM++ 2M", "Exponential", LM_SAMPLER_DPMPP_2M, LM_SIGMAS_EXPONENTIAL, false, 1, 2,
     ALL_PREDS, "DPMSolverMultistepScheduler(algorithm_type=\"dpmsolver++\", solver_order=2, "
     "use_exponential_sigmas=True)",
     "solver_order, solver_type, lower_order_final, euler_at_final, final_sigmas_type, lambda_min_clipped"},
    {"dpm++2m_sde", "DPM++ 2M SDE", "Normal", LM_SAMPLER_DPMPP_2M_SDE, LM_SIGMAS_DEFAULT, true, 1, 2, ALL_PREDS,
     "DPMSolverMultistepScheduler(algorithm_type=\"sde-dpmsolver++\", solver_order=2)",
     "solver_order, solver_type, lower_order_final, euler_at_final, final_sigmas_type, "
     "lambda_min_clipped, use_karras_sigmas, use_exponential_sigmas"},
    {"dpm++2m_sde_karras", "DPM++ 2M SDE", "Karras", LM_SAMPLER_DPMPP_2M_SDE, LM_SIGMAS_KARRAS, true, 1, 2,
     ALL_PREDS, "DPMSolverMultistepScheduler(algorithm_type=\"sde-dpmsolver++\", solver_order=2, "
     "use_karras_sigmas=True)",
     "solver_order, solver_type, lower_order_final, euler_at_final, final_sigmas_type, lambda_min_clipped"},
    {"dpm++2m_sde_exponential", "DPM++ 2M SDE", "Exponential", LM_SAMPLER_DPMPP_2M_SDE, LM_SIGMAS_EXPONENTIAL,
     true, 1, 2, ALL_PREDS, "DPMSolverMultistepScheduler(algorithm_type=\"sde-dpmsolver++\", solver_order=2, "
     "use_exponential_sigmas=True)",
     "solver_order, solver_type, lower_order_final, euler_at_final, final_sigmas_type, lambda_min_clipped"},
    {"dpm++2s_a", "DPM++ 2S a", "Normal", LM_SAMPLER_DPMPP_2S_A, LM_SIGMAS_DEFAULT, true, 1, 2, ALL_PREDS,
     "DPMSolverSinglestepScheduler(algorithm_type=\"sde-dpmsolver++\", solver_order=2)",
     "solver_order, solver_type, lambda_min_clipped, use_karras_sigmas"},
    {"dpm++2s_a_karras", "DPM++ 2S a", "Karras", LM_SAMPLER_DPMPP_2S_A, LM_SIGMAS_KARRAS, true, 1, 2, ALL_PREDS,
     "DPMSolverSinglestepScheduler(algorithm_type=\"sde-dpmsolver++\", solver_order=2, use_karras_sigmas=True)",
     "solver_order, solver_type, lambda_min_clipped"},
    {"dpm++2s_a_exponential", "DPM++ 2S a", "Exponential", LM_SAMPLER_DPMPP_2S_A, LM_SIGMAS_EXPONENTIAL, true, 1,
     2, ALL_PREDS, "DPMSolverSinglestepScheduler(algorithm_type=\"sde-dpmsolver++\", solver_order=2, "
     "use_exponential_sigmas=True)", "solver_order, solver_type, lambda_min_clipped"},
    {"unipc", "UniPC", "Normal", LM_SAMPLER_UNIPC, LM_SIGMAS_DEFAULT, false, 1, 2, ALL_PREDS,
     "UniPCMultistepScheduler(solver_type=\"bh2\", solver_order=2)",
     "solver_order, solver_type (bh1, bh2), lower_order_final, final_sigmas_type, predict_x0, "
     "disable_corrector, use_karras_sigmas, use_exponential_sigmas, sigma_min, sigma_max"},
    {"unipc_karras", "UniPC", "Karras", LM_SAMPLER_UNIPC, LM_SIGMAS_KARRAS, false, 1, 2, ALL_PREDS,
     "UniPCMultistepScheduler(solver_type=\"bh2\", solver_order=2, use_karras_sigmas=True)",
     "solver_order, solver_type (bh1, bh2), lower_order_final, final_sigmas_type, predict_x0, "
     "disable_corrector, sigma_min, sigma_max"},
    {"unipc_exponential", "UniPC", "Exponential", LM_SAMPLER_UNIPC, LM_SIGMAS_EXPONENTIAL, false, 1, 2, ALL_PREDS,
     "UniPCMultistepScheduler(solver_type=\"bh2\", solver_order=2, use_exponential_sigmas=True)",
     "solver_order, solver_type (bh1, bh2), lower_order_final, final_sigmas_type, predict_x0, "
     "disable_corrector, sigma_min, sigma_max"},
    {"lcm", "LCM", "Normal", LM_SAMPLER_LCM, LM_SIGMAS_NONE, true, 1, 1, ALL_PREDS,
     "LCMScheduler", "original_inference_steps, timestep_scaling, clip_sample, clip_sample_range"},
};

#define NROWS ((int)(sizeof rows / sizeof *rows))

const lm_sampler_info *lm_sampler_info_at(int i) { return i >= 0 && i < NROWS ? &rows[i] : NULL; }

const char *lm_sampler_kind_name(lm_sampler_kind k)
{
    return k >= 0 && k < LM_SAMPLER_KIND_COUNT && lm_sampler_methods[k].name ? lm_sampler_methods[k].name : "?";
}

/* the schedule type A1111's full name carries: " Karras", " Exponential" */
static const char *suffix_of(const lm_sampler_info *r)
{
    return r->sigmas == LM_SIGMAS_KARRAS ? " Karras" : r->sigmas == LM_SIGMAS_EXPONENTIAL ? " Exponential" : "";
}

char *lm_sampler_a1111_name(const lm_sampler_info *r, char *buf, size_t n)
{
    if (n) snprintf(buf, n, "%s%s", r ? r->a1111 : "?", r ? suffix_of(r) : "");
    return buf;
}

/* lower case, ' ', '_', '-' dropped, '+' read as 'p'; false if it does not fit */
static bool fold(const char *in, const char *suffix, char *out, size_t n)
{
    size_t k = 0;
    for (int part = 0; part < 2; part++)
        for (const char *p = part ? suffix : in; p && *p; p++) {
            if (*p == ' ' || *p == '_' || *p == '-') continue;
            if (k + 1 >= n) return false;
            out[k++] = *p == '+' ? 'p' : (char)tolower((unsigned char)*p);
        }
    out[k] = 0;
    return true;
}

char *lm_sampler_list(char *buf, size_t n, bool a1111)
{
    size_t at = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < NROWS && at < n; i++) {
        const lm_sampler_info *r = &rows[i];
        int w = a1111 ? snprintf(buf + at, n - at, "%s\"%s%s\"", i ? ", " : "", r->a1111, suffix_of(r))
                      : snprintf(buf + at, n - at, "%s%s", i ? ", " : "", r->name);
        if (w < 0) break;
        at += (size_t)w;
    }
    return buf;
}

const lm_sampler_info *lm_sampler_find(const char *name)
{
    char want[64], have[64];
    if (name && fold(name, NULL, want, sizeof want))
        for (int i = 0; i < NROWS; i++) {
            const lm_sampler_info *r = &rows[i];
            if ((fold(r->name, NULL, have, sizeof have) && !strcmp(want, have)) ||
                (fold(r->a1111, suffix_of(r), have, sizeof have) &&
                 !strcmp(want, have)))
                return r;
        }
    char names[1024], a1111[1024];
    lm_error_set(LM_ERR_ARG, "unknown sampler \"%s\" (%s, or A1111's %s)", name ? name : "(null)",
                 lm_sampler_list(names, sizeof names, false), lm_sampler_list(a1111, sizeof a1111, true));
    return NULL;
}

/* An exponential row parses as its kind with the scheduler's own sigmas:
 * lm_sampler_find's row is the whole answer. */
lm_sampler_kind lm_sampler_parse(const char *name, bool *karras)
{
    const lm_sampler_info *r = lm_sampler_find(name);
    if (karras) *karras = r && r->sigmas == LM_SIGMAS_KARRAS;
    return r ? r->kind : LM_SAMPLER_NONE;
}

const char *lm_sampler_name(lm_sampler_kind k, bool karras)
{
    for (int i = 0; i < NROWS; i++)
        if (rows[i].kind == k && rows[i].sigmas != LM_SIGMAS_EXPONENTIAL &&
            (rows[i].sigmas == LM_SIGMAS_KARRAS) == karras)
            return rows[i].name;
    return "?";
}
