/* sampler.c - the scheduler config a pipeline's scheduler_config.json
 * gives, the sampler object (one row of the sampler table on a schedule:
 * models/sampler_table.c, sampler_schedule.c, sampler_steps.c) and the
 * seeded noise diffusion starts from. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "models/diffusers_config.h"
#include "models/sampler_impl.h"
#include "error.h"
#include "random.h"

#define SCHED_JSON_MAX (1u << 20)
#define MAX_TRAIN_STEPS 100000

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
    c->original_inference_steps = 50;
    c->timestep_scaling = 10.0;
    strcpy(c->algorithm_type, "dpmsolver++");
}

void lm_sched_config_clear(lm_sched_config *c)
{
    if (!c) return;
    free(c->trained_betas);
    c->trained_betas = NULL;
}

static lm_status get_tristate(const cJSON *o, const char *key, const char *what, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = -1;
        return LM_OK;
    }
    bool b;
    lm_status st = lm_dfs_bool(o, key, what, false, false, &b);
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
        (st = lm_dfs_bool(o, "use_karras_sigmas", file, false, false, &c->use_karras_sigmas)) ||
        (st = lm_dfs_num(o, "sigma_min", file, false, NAN, &c->sigma_min)) ||
        (st = lm_dfs_num(o, "sigma_max", file, false, NAN, &c->sigma_max)) ||
        (st = get_enum(o, "final_sigmas_type", file, finals, 2, 0, &fin)) ||
        (st = lm_dfs_int(o, "solver_order", file, false, 2, 1, 3, &c->solver_order)) ||
        (st = lm_dfs_bool(o, "lower_order_final", file, false, true, &c->lower_order_final)) ||
        (st = lm_dfs_bool(o, "euler_at_final", file, false, false, &c->euler_at_final)) ||
        (st = get_num_inf(o, "lambda_min_clipped", file, -INFINITY, &c->lambda_min_clipped)) ||
        (st = lm_dfs_bool(o, "rescale_betas_zero_snr", file, false, false, &c->rescale_betas_zero_snr)) ||
        (st = lm_dfs_bool(o, "thresholding", file, false, false, &c->thresholding)) ||
        (st = lm_dfs_bool(o, "use_exponential_sigmas", file, false, false, &c->use_exponential_sigmas)) ||
        (st = lm_dfs_int(o, "original_inference_steps", file, false, 50, 1, MAX_TRAIN_STEPS,
                         &c->original_inference_steps)) ||
        (st = lm_dfs_num(o, "timestep_scaling", file, false, 10.0, &c->timestep_scaling)))
        goto fail;
    if ((st = lm_dfs_bool(o, "predict_x0", file, false, true, &b))) goto fail;
    c->predict_x0_false = !b;
    const cJSON *dc = cJSON_GetObjectItemCaseSensitive(o, "disable_corrector");
    c->disable_corrector = dc && cJSON_IsArray(dc) && cJSON_GetArraySize(dc) > 0;
    c->final_sigma_min = fin == 1;
    /* solver_type: DPM++ maps UniPC's and DEIS's names to midpoint, as
       diffusers does; other samplers ignore the key */
    const char *s;
    if ((st = lm_dfs_str(o, "solver_type", file, false, "midpoint", &s))) goto fail;
    c->solver_heun = !strcmp(s, "heun");
    c->solver_bh1 = !strcmp(s, "bh1");
    if (!c->solver_heun && strcmp(s, "midpoint") && strcmp(s, "logrho") && strcmp(s, "bh1") && strcmp(s, "bh2"))
        snprintf(c->solver_type_bad, sizeof c->solver_type_bad, "%s", s);
    static const char *const other[] = {"use_beta_sigmas", "use_lu_lambdas", "use_flow_sigmas",
                                        "use_dynamic_shifting"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        if ((st = lm_dfs_bool(o, other[i], file, false, false, &b))) goto fail;
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
    if (!(c->beta_start >= 0 && c->beta_start < 1 && c->beta_end >= 0 && c->beta_end < 1)) {
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
    /* a first beta of 0 makes sigma 0 at t = 0, whose log the samplers'
     * timestep table takes: NaN timesteps, then a NaN image blamed on the UNet */
    if (!c->trained_betas && c->beta_schedule != LM_BETA_SQUAREDCOS && c->beta_start == 0) {
        st = lm_error_set(LM_ERR_FORMAT, "%s: beta_start 0: the first beta would be 0, so sigma 0 at "
                          "t = 0 (no timestep table has log 0): expected 0 < beta_start < 1", file);
        goto fail;
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

/* ---------------------------------------------------------------- sampler */

static const lm_sampler_method *method_of(const lm_sampler *s) { return &lm_sampler_methods[s->row->kind]; }

/* the row of kind k with sigmas sg (DEFAULT also finds NONE: DDIM's, LCM's) */
static const lm_sampler_info *row_of(lm_sampler_kind k, lm_sigma_schedule sg)
{
    const lm_sampler_info *r;
    for (int i = 0; (r = lm_sampler_info_at(i)); i++)
        if (r->kind == k && (r->sigmas == sg || (sg == LM_SIGMAS_DEFAULT && r->sigmas == LM_SIGMAS_NONE)))
            return r;
    return NULL;
}

/* what the row's class reads from the config and Lumen does not do */
static lm_status check_config(const lm_sched_config *c, const lm_sampler_info *row)
{
    static const char *const preds[] = {"epsilon", "v_prediction", "sample"};
    const lm_sampler_method *m = &lm_sampler_methods[row->kind];
    if (c->rescale_betas_zero_snr)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: rescale_betas_zero_snr is not supported", m->name);
    if (!(row->predictions & LM_PRED_BIT(c->prediction_type))) {
        char list[64] = "";
        for (int p = 0; p < 3; p++)
            if (row->predictions & LM_PRED_BIT(p))
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", preds[p]);
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: prediction_type \"%s\" is not supported (nor by diffusers' "
                            "%s: %s)", m->name, preds[c->prediction_type], row->diffusers, list);
    }
    return m->check ? m->check(c, m->name) : LM_OK;
}

lm_sampler *lm_sampler_new(const lm_sched_config *c, lm_sampler_kind k, bool karras, int steps, double strength)
{
    if (!c || k < 0 || k >= LM_SAMPLER_KIND_COUNT) {
        lm_error_set(LM_ERR_ARG, "sampler: no config or an unknown sampler kind %d", (int)k);
        return NULL;
    }
    const lm_sampler_info *row = row_of(k, karras ? LM_SIGMAS_KARRAS : LM_SIGMAS_DEFAULT);
    if (!row) {
        if (karras)
            lm_error_set(LM_ERR_UNSUPPORTED, "%s: no Karras schedule (no row of the sampler table has one)",
                         lm_sampler_kind_name(k));
        else
            lm_error_set(LM_ERR_UNSUPPORTED, "sampler kind %d has no row in the sampler table "
                         "(models/sampler_table.c)", (int)k);
        return NULL;
    }
    return lm_sampler_new_row(c, row, steps, strength);
}

lm_sampler *lm_sampler_new_row(const lm_sched_config *c, const lm_sampler_info *row, int steps, double strength)
{
    if (!c || !row || row->kind < 0 || row->kind >= LM_SAMPLER_KIND_COUNT) {
        lm_error_set(LM_ERR_ARG, "sampler: no config or no row");
        return NULL;
    }
    lm_sampler_kind k = row->kind;
    if (!lm_sampler_methods[k].step) {   /* a kind half added */
        lm_error_set(LM_ERR_UNSUPPORTED, "sampler kind %d has no row in lm_sampler_methods "
                     "(models/sampler_steps.c; docs/DEVELOPING.md, \"Adding a sampler\")", (int)k);
        return NULL;
    }
    const char *name = lm_sampler_kind_name(k);
    /* the config's use_karras_sigmas / use_exponential_sigmas pick the kind's
       Karras / exponential row where it has one */
    if (row->sigmas == LM_SIGMAS_DEFAULT) {
        const lm_sampler_info *alt = c->use_karras_sigmas ? row_of(k, LM_SIGMAS_KARRAS)
                                     : c->use_exponential_sigmas ? row_of(k, LM_SIGMAS_EXPONENTIAL) : NULL;
        if (alt) row = alt;
    }
    /* diffusers' classes take one of them (the row's own counts) */
    if ((c->use_karras_sigmas || row->sigmas == LM_SIGMAS_KARRAS) &&
        (c->use_exponential_sigmas || row->sigmas == LM_SIGMAS_EXPONENTIAL)) {
        lm_error_set(LM_ERR_UNSUPPORTED, "%s: use_karras_sigmas and use_exponential_sigmas: only one of them "
                     "(row %s, the config's use_karras_sigmas %s, use_exponential_sigmas %s)", name, row->name,
                     c->use_karras_sigmas ? "true" : "false", c->use_exponential_sigmas ? "true" : "false");
        return NULL;
    }
    /* the row passes use_exponential_sigmas itself: not refused as a key Lumen lacks */
    lm_sched_config cc = *c;
    if (row->sigmas == LM_SIGMAS_EXPONENTIAL) cc.use_exponential_sigmas = false;
    if (check_config(&cc, row) != LM_OK) return NULL;
    int64_t T = c->num_train_timesteps;
    if (steps < 1 || steps > T) {
        lm_error_set(LM_ERR_ARG, "%s: steps %d: expected 1 to num_train_timesteps (%lld)", name, steps,
                     (long long)T);
        return NULL;
    }
    if (!(strength > 0 && strength <= 1)) {
        lm_error_set(LM_ERR_ARG, "%s: strength %g: expected a value in (0, 1]", name, strength);
        return NULL;
    }
    lm_sampler *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->row = row;
    s->c = *c;
    s->c.trained_betas = NULL;   /* read from c by the schedule below, not kept */
    s->karras = row->sigmas == LM_SIGMAS_KARRAS;
    s->exponential = row->sigmas == LM_SIGMAS_EXPONENTIAL;
    s->steps = steps;
    s->T = T;
    s->acp = malloc((size_t)T * sizeof(float));
    /* room for Heun's doubled schedule */
    s->ts = malloc((size_t)(2 * steps + 2) * sizeof(double));
    if (!s->acp || !s->ts) goto nomem;
    if (method_of(s)->space != LM_SPACE_DDPM && !(s->sig = malloc((size_t)(2 * steps + 3) * sizeof(float))))
        goto nomem;
    if (lm_sched_build(s, c) != LM_OK) goto fail;
    if (s->n < 1) {
        lm_error_set(LM_ERR_ARG, "%s: %d steps give no timesteps", name, steps);
        goto fail;
    }
    /* img2img: get_timesteps(num_inference_steps, strength) */
    int init = (int)((double)steps * strength);
    if (init > steps) init = steps;
    int t_start = (steps - init > 0 ? steps - init : 0) * (method_of(s)->order > 1 ? method_of(s)->order : 1);
    if (t_start >= s->n) {
        lm_error_set(LM_ERR_ARG, "%s: strength %g of %d steps leaves no step to run", name, strength, steps);
        goto fail;
    }
    s->begin = t_start;
    return s;
nomem:
    lm_error_set(LM_ERR_NOMEM, "sampler: out of memory");
fail:
    lm_sampler_free(s);
    return NULL;
}

void lm_sampler_free(lm_sampler *s)
{
    if (!s) return;
    for (int k = 0; k < s->nhist; k++) lm_array_release(s->hist[k]);
    lm_array_release(s->held);
    free(s->acp);
    free(s->ts);
    free(s->sig);
    free(s);
}

int lm_sampler_count(const lm_sampler *s) { return s ? s->n - s->begin : 0; }
lm_sampler_kind lm_sampler_get_kind(const lm_sampler *s) { return s ? s->row->kind : LM_SAMPLER_NONE; }
const lm_sampler_info *lm_sampler_get_info(const lm_sampler *s) { return s ? s->row : NULL; }
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
    return step_ok(s, i) && s->row->ancestral && !(method_of(s)->last_no_noise && s->begin + i == s->n - 1);
}

/* ------------------------------------------------------- work on latents */

void lm_sampler_hold(lm_sampler *s, lm_array *a)
{
    lm_array_retain(a);
    lm_array_release(s->held);
    s->held = a;
}

void lm_sampler_hist_push(lm_sampler *s, int i, lm_array *a)
{
    if (i == 0 || s->nhist == LM_SAMPLER_HISTORY) {
        int drop = i == 0 ? s->nhist : 1;
        for (int k = 0; k < drop; k++) lm_array_release(s->hist[k]);
        memmove(s->hist, s->hist + drop, (size_t)(s->nhist - drop) * sizeof *s->hist);
        s->nhist -= drop;
    }
    s->hist[s->nhist++] = lm_array_retain(a);
}

static lm_status check_step(const lm_sampler *s, const char *what, int i)
{
    if (!s) return lm_error_set(LM_ERR_ARG, "sampler %s: no sampler", what);
    if (!step_ok(s, i))
        return lm_error_set(LM_ERR_ARG, "%s %s: step %d outside [0, %d)", method_of(s)->name, what, i,
                            s->n - s->begin);
    return LM_OK;
}

lm_array *lm_sampler_scale_input(lm_sampler *s, lm_array *x, int i)
{
    if (check_step(s, "scale_input", i) != LM_OK || !x) return NULL;
    if (method_of(s)->space != LM_SPACE_SIGMA) return lm_array_retain(x);
    float sigma = s->sig[s->begin + i];
    return lm_binary_scalar(LM_OP_DIV, x, (double)sqrtf(sigma * sigma + 1.0f), false);
}

lm_array *lm_sampler_step(lm_sampler *s, lm_array *model_out, int i, lm_array *x, lm_array *noise)
{
    if (check_step(s, "step", i) != LM_OK) return NULL;
    const lm_sampler_method *m = method_of(s);
    if (!model_out || !x) {
        lm_error_set(LM_ERR_ARG, "%s step: no model output or latents", m->name);
        return NULL;
    }
    if (lm_sampler_needs_noise(s, i) && !noise) {
        lm_error_set(LM_ERR_ARG, "%s step %d: needs noise", m->name, i);
        return NULL;
    }
    if (m->history && i > 0 && i != s->next) {
        lm_error_set(LM_ERR_STATE, "%s step %d: steps must run in order from 0", m->name, i);
        return NULL;
    }
    int idx = s->begin + i;
    lm_sampler_tmps t = {0};
    lm_array *r;
    if (m->upcast) {
        /* diffusers upcasts the sample to f32 and returns the model's dtype */
        lm_array *xs = lm_tmps_keep(&t, lm_cast(x, LM_F32)), *mo = lm_tmps_keep(&t, lm_cast(model_out, LM_F32));
        r = xs && mo ? m->step(&t, s, i, idx, xs, mo, noise) : NULL;
        if (r && model_out->dtype != LM_F32) r = lm_tmps_keep(&t, lm_cast(r, model_out->dtype));
    } else {
        r = m->step(&t, s, i, idx, x, model_out, noise);
    }
    if (!r) {
        lm_tmps_done(&t, NULL);
        lm_error_prefix("%s step %d: ", m->name, i);
        return NULL;
    }
    s->next = i + 1;
    return lm_tmps_done(&t, r);
}

lm_array *lm_sampler_add_noise(lm_sampler *s, lm_array *x0, lm_array *noise)
{
    return lm_sampler_add_noise_at(s, x0, noise, 0);
}

lm_array *lm_sampler_add_noise_at(lm_sampler *s, lm_array *x0, lm_array *noise, int i)
{
    if (check_step(s, "add_noise", i) != LM_OK) return NULL;
    if (!x0 || !noise) {
        lm_error_set(LM_ERR_ARG, "%s add_noise: no latents or noise", method_of(s)->name);
        return NULL;
    }
    int idx = s->begin + i;
    float a, b;   /* x0 * a + noise * b */
    switch (method_of(s)->space) {
    case LM_SPACE_DDPM: {
        float acp = s->acp[(int64_t)s->ts[idx]];
        a = sqrtf(acp);
        b = sqrtf(1.0f - acp);
        break;
    }
    case LM_SPACE_DPM: {
        float l;
        lm_sched_dpm_alpha_sigma(s->sig[idx], &a, &b, &l);
        break;
    }
    default: a = 1.0f, b = s->sig[idx]; break;
    }
    lm_sampler_tmps t = {0};
    lm_array *xa = a == 1.0f ? x0 : lm_tmps_keep(&t, lm_binary_scalar(LM_OP_MUL, x0, (double)a, false));
    lm_array *nb = lm_tmps_keep(&t, lm_binary_scalar(LM_OP_MUL, noise, (double)b, false));
    lm_array *r = xa && nb ? lm_tmps_keep(&t, lm_binary(LM_OP_ADD, xa, nb)) : NULL;
    if (!r) {
        lm_tmps_done(&t, NULL);
        lm_error_prefix("%s add_noise: ", method_of(s)->name);
        return NULL;
    }
    return lm_tmps_done(&t, r);
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

