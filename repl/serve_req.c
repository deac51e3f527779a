/* serve_req.c - lumen serve's requests read into jobs, the models folder,
 * and the JSON it answers with.
 *
 * Every field is checked here, before a job is queued: its JSON type, its
 * range (models/family.h's options, then --max-* limits), the sampler by
 * name, the model by name inside --models.  A model name is a name of an
 * entry of that folder: no '/', no "..", nothing hidden, and its real path
 * (symlinks followed) inside the folder's; anything else is refused without
 * touching the file system beyond the folder.  Unknown fields are left
 * alone (clients send fields of other servers' APIs). */
#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/lumen.h"
#include "models/family.h"
#include "models/sampler.h"
#include "serve.h"

/* ---- errors ---- */

char *serve_error_json(int status, const char *msg)
{
    cJSON *r = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", status == 429 ? "rate_limit_error"
                            : status < 500 ? "invalid_request_error" : "server_error");
    cJSON_AddNumberToObject(e, "code", status);
    cJSON_AddItemToObject(r, "error", e);
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    return s;
}

#define BAD(code, ...) do { *status = (code); snprintf(why, wn, __VA_ARGS__); goto fail; } while (0)

/* ---- the models folder ---- */

static bool has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcasecmp(s + n - m, suf);
}

/* whether path's real path lies inside --models */
static bool inside(const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) return false;
    size_t n = strlen(serve_config.models_real);
    return !strncmp(real, serve_config.models_real, n) && real[n] == '/';
}

/* an entry that is a model: a diffusers folder or a checkpoint file */
static bool is_model(const char *name)
{
    char p[PATH_MAX];
    struct stat sb;
    if (name[0] == '.') return false;
    snprintf(p, sizeof p, "%s/%s", serve_config.models, name);
    if (stat(p, &sb) != 0 || !inside(p)) return false;
    if (S_ISDIR(sb.st_mode)) {
        snprintf(p, sizeof p, "%s/%s/model_index.json", serve_config.models, name);
        return access(p, R_OK) == 0;
    }
    return S_ISREG(sb.st_mode) && (has_suffix(name, ".safetensors") || has_suffix(name, ".gguf"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

cJSON *serve_model_names(void)
{
    cJSON *arr = cJSON_CreateArray();
    DIR *d = opendir(serve_config.models);
    if (!d) return arr;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strlen(e->d_name) >= 256 || !is_model(e->d_name)) continue;
        if (n == cap) {
            char **g = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
            if (!g) break;
            names = g;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        cJSON_AddItemToArray(arr, cJSON_CreateString(names[i]));
        free(names[i]);
    }
    free(names);
    return arr;
}

/* POST /sdapi/v1/options' sd_model_checkpoint, else --model */
static pthread_mutex_t chosen_lock = PTHREAD_MUTEX_INITIALIZER;
static char chosen[256];

bool serve_default_model(char *out, size_t n)
{
    pthread_mutex_lock(&chosen_lock);
    bool set = chosen[0] != 0;
    if (set) snprintf(out, n, "%s", chosen);
    pthread_mutex_unlock(&chosen_lock);
    if (set) return true;
    if (serve_config.default_model) {
        snprintf(out, n, "%s", serve_config.default_model);
        return true;
    }
    cJSON *names = serve_model_names();
    cJSON *first = cJSON_GetArrayItem(names, 0);
    bool ok = first != NULL;
    if (ok) snprintf(out, n, "%s", first->valuestring);
    cJSON_Delete(names);
    return ok;
}

char *serve_model_path(const char *name, int *status, char *why, size_t wn)
{
    char p[PATH_MAX];
    if (!*name || strlen(name) >= 256 || strchr(name, '/') || strchr(name, '\\') || name[0] == '.') {
        *status = 400;
        snprintf(why, wn, "model \"%.256s\": a model is named by an entry of the --models folder "
                 "(no '/', no '..', no absolute path, nothing hidden)", name);
        return NULL;
    }
    for (const char *c = name; *c; c++)
        if ((unsigned char)*c < 0x20) {
            *status = 400;
            snprintf(why, wn, "model: a control character in the name");
            return NULL;
        }
    static const char *const ext[] = {"", ".safetensors", ".gguf"};
    for (int k = 0; k < 3; k++) {
        char entry[300];
        snprintf(entry, sizeof entry, "%s%s", name, ext[k]);
        snprintf(p, sizeof p, "%s/%s", serve_config.models, entry);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        if (!inside(p)) {
            *status = 403;
            snprintf(why, wn, "model \"%s\": its path leaves the --models folder (a symbolic link "
                     "out of it); refused", name);
            return NULL;
        }
        if (!is_model(entry)) continue;
        return strdup(p);
    }
    *status = 404;
    cJSON *names = serve_model_names();
    char *list = cJSON_PrintUnformatted(names);
    snprintf(why, wn, "model \"%s\": no such model in the --models folder (it has %.700s)", name,
             list ? list : "[]");
    free(list);
    cJSON_Delete(names);
    return NULL;
}

/* ---- listings ---- */

char *serve_list_openai_models(void)
{
    cJSON *names = serve_model_names(), *r = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON *it;
    cJSON_ArrayForEach(it, names) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", it->valuestring);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "lumen");
        cJSON_AddItemToArray(data, m);
    }
    cJSON_AddStringToObject(r, "object", "list");
    cJSON_AddItemToObject(r, "data", data);
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    cJSON_Delete(names);
    return s;
}

char *serve_list_a1111_models(void)
{
    cJSON *names = serve_model_names(), *r = cJSON_CreateArray(), *it;
    cJSON_ArrayForEach(it, names) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "title", it->valuestring);
        cJSON_AddStringToObject(m, "model_name", it->valuestring);
        cJSON_AddNullToObject(m, "hash");
        cJSON_AddNullToObject(m, "sha256");
        cJSON_AddStringToObject(m, "filename", it->valuestring);
        cJSON_AddNullToObject(m, "config");
        cJSON_AddItemToArray(r, m);
    }
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    cJSON_Delete(names);
    return s;
}

/* A1111's names: "DPM++ 2M Karras" for a Karras row (its sampler_name with
 * the scheduler folded in, as A1111 1.x lists them), the plain name else */
static void a1111_name(const lm_sampler_info *r, char *buf, size_t n)
{
    if (r->a1111_schedule && !strcmp(r->a1111_schedule, "Karras"))
        snprintf(buf, n, "%s Karras", r->a1111);
    else snprintf(buf, n, "%s", r->a1111);
}

char *serve_list_samplers(void)
{
    cJSON *r = cJSON_CreateArray();
    const lm_sampler_info *row;
    for (int i = 0; (row = lm_sampler_info_at(i)); i++) {
        char name[96];
        a1111_name(row, name, sizeof name);
        cJSON *m = cJSON_CreateObject(), *al = cJSON_CreateArray();
        cJSON_AddStringToObject(m, "name", name);
        cJSON_AddItemToArray(al, cJSON_CreateString(row->name));
        cJSON_AddItemToObject(m, "aliases", al);
        cJSON *o = cJSON_CreateObject();
        if (row->a1111_schedule) cJSON_AddStringToObject(o, "scheduler", row->a1111_schedule);
        cJSON_AddItemToObject(m, "options", o);
        cJSON_AddItemToArray(r, m);
    }
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    return s;
}

/* A1111's scheduler list: those the sampler table's rows name, and
 * Automatic (the sampler's own) */
char *serve_list_schedulers(void)
{
    cJSON *r = cJSON_CreateArray();
    const char *seen[16];
    int nseen = 0;
    const lm_sampler_info *row;
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "name", "automatic");
    cJSON_AddStringToObject(a, "label", "Automatic");
    cJSON_AddNullToObject(a, "aliases");
    cJSON_AddItemToArray(r, a);
    for (int i = 0; (row = lm_sampler_info_at(i)); i++) {
        const char *l = row->a1111_schedule;
        bool dup = !l;
        for (int k = 0; k < nseen && !dup; k++) dup = !strcmp(seen[k], l);
        if (dup || nseen == 16) continue;
        seen[nseen++] = l;
        char name[64];
        size_t k = 0;
        for (; l[k] && k + 1 < sizeof name; k++) name[k] = (char)tolower((unsigned char)l[k]);
        name[k] = 0;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "name", name);
        cJSON_AddStringToObject(m, "label", l);
        cJSON_AddNullToObject(m, "aliases");
        cJSON_AddItemToArray(r, m);
    }
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    return s;
}

char *serve_options_json(void)
{
    char model[256] = "";
    serve_default_model(model, sizeof model);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "sd_model_checkpoint", model);
    cJSON_AddNumberToObject(r, "CLIP_stop_at_last_layers", 1);
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    return s;
}

int serve_options_set(const char *body, size_t n, char *why, size_t wn)
{
    int status = 400;
    cJSON *root = cJSON_ParseWithLength(body, n);
    cJSON *ck = cJSON_GetObjectItemCaseSensitive(root, "sd_model_checkpoint");
    if (!cJSON_IsObject(root)) snprintf(why, wn, "options: the body must be a JSON object");
    else if (ck && !cJSON_IsString(ck)) snprintf(why, wn, "options: sd_model_checkpoint must be a string");
    else if (ck && strlen(ck->valuestring) >= sizeof chosen)
        snprintf(why, wn, "options: sd_model_checkpoint: name too long");
    else {
        char *p = ck ? serve_model_path(ck->valuestring, &status, why, wn) : NULL;
        if (!ck || p) {
            status = 200;
            if (ck) {
                pthread_mutex_lock(&chosen_lock);
                snprintf(chosen, sizeof chosen, "%s", ck->valuestring);
                pthread_mutex_unlock(&chosen_lock);
            }
        }
        free(p);
    }
    cJSON_Delete(root);
    return status;
}

/* ---- fields ---- */

typedef struct reader {
    cJSON *root;
    const char *who;   /* "txt2img", "images/generations" */
    int *status;
    char *why;
    size_t wn;
} reader;

static bool bad(reader *r, int code, const char *fmt, const char *a, const char *b)
{
    *r->status = code;
    snprintf(r->why, r->wn, fmt, r->who, a, b);
    return false;
}

/* a string field (absent or null: *out untouched) */
static bool get_str(reader *r, const char *key, const char **out)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsString(v)) return bad(r, 400, "%s: %s must be a string%s", key, "");
    *out = v->valuestring;
    return true;
}

/* a whole-number field in lo..hi (absent or null: *out untouched) */
static bool get_int(reader *r, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    if (!v || cJSON_IsNull(v)) return true;
    char range[96];
    snprintf(range, sizeof range, "a whole number from %" PRId64 " to %" PRId64, lo, hi);
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
    /* the range first (NaN fails it): the cast is then defined */
    if (!cJSON_IsNumber(v) || !(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d) {
        char *txt = cJSON_PrintUnformatted(v);
        char val[64];
        snprintf(val, sizeof val, "%.40s", txt ? txt : "?");
        free(txt);
        *r->status = 400;
        snprintf(r->why, r->wn, "%s: %s %s: expected %s", r->who, key, val, range);
        return false;
    }
    *out = (int64_t)d;
    return true;
}

/* A1111 fields asking for what is not done here (hires fix, face
 * restoration, tiling, variation seeds, inpainting, scripts): refused when
 * they ask for it, not ignored; their off values pass (clients send them) */
static bool refuse_unserved(reader *r)
{
    static const char *const flags[] = {"enable_hr", "restore_faces", "tiling"};
    for (int k = 0; k < 3; k++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r->root, flags[k])))
            return bad(r, 400, "%s: %s: not served by lumen serve%s", flags[k], "");
    cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, "subseed_strength");
    if (cJSON_IsNumber(v) && v->valuedouble != 0)
        return bad(r, 400, "%s: %s: variation seeds are not served by lumen serve%s", "subseed_strength", "");
    v = cJSON_GetObjectItemCaseSensitive(r->root, "alwayson_scripts");
    if (v && v->child) return bad(r, 400, "%s: %s: scripts are not run by lumen serve%s", "alwayson_scripts", "");
    v = cJSON_GetObjectItemCaseSensitive(r->root, "script_name");
    if (cJSON_IsString(v) && *v->valuestring)
        return bad(r, 400, "%s: %s: scripts are not run by lumen serve%s", "script_name", "");
    return true;
}

/* A1111's mask: null or "" is none (clients send them) */
static bool given_mask(const cJSON *root)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "mask");
    return v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !*v->valuestring);
}

/* inpaint_full_res: A1111's API default is true ("Only masked"): its
 * img2img request model takes StableDiffusionProcessingImg2Img's defaults,
 * inpaint_full_res=True with inpaint_full_res_padding=0 (the web UI's 32 is
 * the UI's own).  Absent or null (as every field here) is that default; a
 * boolean, or 0 / 1 as pydantic reads a bool, is taken; anything else is
 * refused rather than read as false. */
static bool get_full_res(reader *r, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, "inpaint_full_res");
    *out = true;
    if (!v || cJSON_IsNull(v)) return true;
    if (cJSON_IsBool(v)) *out = cJSON_IsTrue(v);
    else if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) *out = v->valuedouble == 1;
    else return bad(r, 400, "%s: %s must be true or false (or 1 / 0)%s", "inpaint_full_res", "");
    return true;
}

/* img2img's inpainting fields (models/sd_inpaint.h): mask (base64 PNG, white =
 * repaint), mask_blur (A1111's default 4), inpainting_mask_invert,
 * inpaint_full_res ("Only masked"; absent = true, A1111's API default) with
 * inpaint_full_res_padding (default 0, A1111's API's); masked content other
 * than "original" (inpainting_fill 1) is refused, not ignored (absent = 1
 * here, where A1111's default is 0, fill, which Lumen does not do) */
static bool take_mask(reader *r, serve_job *j)
{
    if (!given_mask(r->root)) return true;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, "mask");
    if (!cJSON_IsString(v)) return bad(r, 400, "%s: %s must be a base64 PNG string%s", "mask", "");
    const char *s = v->valuestring, *comma = strchr(s, ',');
    if (!strncmp(s, "data:", 5) && comma) s = comma + 1;
    if (!(j->mask_png = serve_b64_decode(s, strlen(s), &j->mask_size)) || !j->mask_size)
        return bad(r, 400, "%s: %s is not base64%s", "mask", "");
    int64_t inv = 0, fill = 1;
    j->mask_blur = 4;
    if (!get_int(r, "mask_blur", 0, 256, &j->mask_blur) || !get_int(r, "inpainting_mask_invert", 0, 1, &inv) ||
        !get_int(r, "inpainting_fill", 0, 3, &fill) ||
        !get_int(r, "inpaint_full_res_padding", 0, 65536, &j->full_res_padding) || !get_full_res(r, &j->full_res))
        return false;
    j->mask_invert = inv == 1;
    if (fill != 1)
        return bad(r, 400, "%s: %s: masked content other than 1 (original) is not served by lumen serve%s",
                   "inpainting_fill", "");
    return true;
}

static bool get_num(reader *r, const char *key, lm_sd_opt id, double *out)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || lm_sd_option_check_num(id, r->who, key, v->valuedouble) != LM_OK) {
        *r->status = 400;
        if (!cJSON_IsNumber(v)) snprintf(r->why, r->wn, "%s: %s must be a number", r->who, key);
        else snprintf(r->why, r->wn, "%s", lm_error_message());
        lm_error_clear();
        return false;
    }
    *out = v->valuedouble;
    return true;
}

/* an option of models/family.h's table, then a --max-* limit */
static bool get_opt(reader *r, const char *key, lm_sd_opt id, int64_t limit, const char *flag,
                    int64_t *out)
{
    const lm_sd_option *o = lm_sd_option_get(id);
    int64_t hi = o->ihi < limit ? o->ihi : limit;
    if (!get_int(r, key, o->ilo, hi, out)) {
        if (hi == limit && limit < o->ihi) {
            size_t n = strlen(r->why);
            snprintf(r->why + n, r->wn - n, " (this server's %s)", flag);
        }
        return false;
    }
    return true;
}

static bool check_size(reader *r, int64_t w, int64_t h)
{
    if (w % 8 || h % 8) {
        char s[64];
        snprintf(s, sizeof s, "%" PRId64 "x%" PRId64, w, h);
        return bad(r, 400, "%s: size %s: expected a width and height divisible by 8%s", s, "");
    }
    return true;
}

/* sampler_name (+ A1111's scheduler) to a row's Lumen name */
static bool find_sampler(reader *r, const char *name, const char *sched, char *out, size_t n)
{
    const lm_sampler_info *row = NULL;
    if (sched && *sched && strcasecmp(sched, "Automatic")) {
        for (int i = 0; (row = lm_sampler_info_at(i)); i++)
            if (!strcasecmp(row->a1111, name) && row->a1111_schedule &&
                !strcasecmp(row->a1111_schedule, sched)) break;
        if (!row) {
            char both[200];
            snprintf(both, sizeof both, "%.90s %.90s", name, sched);
            row = lm_sampler_find(both);
        }
    } else row = lm_sampler_find(name);
    lm_error_clear();
    if (!row) {
        char list[1024], what[256];
        snprintf(what, sizeof what, "%.100s%s%.100s", name, sched && *sched ? "\" with scheduler \"" : "",
                 sched && *sched ? sched : "");
        *r->status = 400;
        snprintf(r->why, r->wn, "%s: unknown sampler \"%s\": expected one of %s (GET /sdapi/v1/samplers "
                 "lists them)", r->who, what, lm_sampler_list(list, sizeof list, true));
        return false;
    }
    snprintf(out, n, "%s", row->name);
    return true;
}

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&s, sizeof s, 1, f) != 1) s = 0;
        fclose(f);
    }
    if (!s) s = (uint64_t)time(NULL) ^ (uint64_t)clock();
    return s % 4294967296u;   /* A1111's seeds are 32-bit */
}

static serve_job *job_new(serve_api api)
{
    serve_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->api = api;
    j->cfg = -1;
    j->strength = -1;
    j->batch = 1;
    j->iters = 1;
    j->clip_skip = 1;
    pthread_cond_init(&j->done, NULL);
    return j;
}

void serve_job_free(serve_job *j)
{
    if (!j) return;
    free(j->prompt);
    free(j->negative);
    free(j->init_png);
    free(j->mask_png);
    cJSON_Delete(j->echo);
    for (int i = 0; i < j->nimages; i++) {
        free(j->images[i].b64);
        free(j->images[i].infotext);
    }
    free(j->images);
    pthread_cond_destroy(&j->done);
    free(j);
}

static bool parse_root(reader *r, const char *body, size_t n)
{
    r->root = cJSON_ParseWithLength(body, n);
    if (!r->root) {
        const char *at = cJSON_GetErrorPtr();
        char where[48];
        snprintf(where, sizeof where, "%zu", at && at >= body && at <= body + n ? (size_t)(at - body) : (size_t)0);
        return bad(r, 400, "%s: the body is not JSON (malformed at byte %s)%s", where, "");
    }
    if (!cJSON_IsObject(r->root)) return bad(r, 400, "%s: the body must be a JSON object%s%s", "", "");
    return true;
}

/* the model field, else the default; checked to exist inside --models */
static bool take_model(reader *r, serve_job *j, const char *model)
{
    if (model) snprintf(j->model, sizeof j->model, "%s", model);
    else if (!serve_default_model(j->model, sizeof j->model))
        return bad(r, 404, "%s: no model in the --models folder%s%s", "", "");
    if (model && strlen(model) >= sizeof j->model) return bad(r, 400, "%s: model name too long%s%s", "", "");
    char *p = serve_model_path(j->model, r->status, r->why, r->wn);
    free(p);
    return p != NULL;
}

static bool take_prompts(reader *r, serve_job *j, const char *prompt, const char *neg)
{
    j->prompt = strdup(prompt ? prompt : "");
    if (neg) j->negative = strdup(neg);
    if (!j->prompt || (neg && !j->negative)) return bad(r, 507, "%s: out of memory%s%s", "", "");
    return true;
}

serve_job *serve_job_openai(const char *body, size_t n, int *status, char *why, size_t wn)
{
    reader r = {NULL, "images/generations", status, why, wn};
    serve_job *j = job_new(SERVE_OPENAI);
    const char *model = NULL, *prompt = NULL, *size = NULL, *fmt = NULL, *neg = NULL, *ofmt = NULL;
    int64_t nimg = 1, seed = -1;
    if (!j) BAD(507, "out of memory");
    if (!parse_root(&r, body, n)) goto fail;
    if (!get_str(&r, "model", &model) || !get_str(&r, "prompt", &prompt) ||
        !get_str(&r, "size", &size) || !get_str(&r, "response_format", &fmt) ||
        !get_str(&r, "negative_prompt", &neg) || !get_str(&r, "output_format", &ofmt) ||
        !get_int(&r, "n", 1, serve_config.max_images, &nimg) ||
        !get_int(&r, "seed", -1, 4294967295, &seed) ||
        !get_opt(&r, "steps", LM_SD_OPT_STEPS, serve_config.max_steps, "--max-steps", &j->steps) ||
        !get_num(&r, "cfg_scale", LM_SD_OPT_CFG, &j->cfg))
        goto fail;
    if (!prompt) BAD(400, "images/generations: prompt is required");
    if (fmt && strcmp(fmt, "b64_json"))
        BAD(400, "images/generations: response_format \"%.40s\": only b64_json is served (no URLs)", fmt);
    if (ofmt && strcmp(ofmt, "png"))
        BAD(400, "images/generations: output_format \"%.40s\": only png is written", ofmt);
    if (size && strcmp(size, "auto")) {
        if (lm_sd_size_parse("images/generations", "size", size, &j->width, &j->height) != LM_OK) {
            *status = 400;
            snprintf(why, wn, "%s", lm_error_message());
            lm_error_clear();
            goto fail;
        }
        if (j->width > serve_config.max_side || j->height > serve_config.max_side)
            BAD(400, "images/generations: size %.40s: at most %" PRId64 " pixels a side (this "
                "server's --max-size)", size, serve_config.max_side);
        if (!check_size(&r, j->width, j->height)) goto fail;
    }
    if (!take_model(&r, j, model) || !take_prompts(&r, j, prompt, neg)) goto fail;
    j->batch = nimg;
    j->seed = seed < 0 ? random_seed() : (uint64_t)seed;
    cJSON_Delete(r.root);
    return j;
fail:
    cJSON_Delete(r.root);
    serve_job_free(j);
    return NULL;
}

serve_job *serve_job_a1111(const char *body, size_t n, bool img2img, int *status, char *why, size_t wn)
{
    reader r = {NULL, img2img ? "img2img" : "txt2img", status, why, wn};
    serve_job *j = job_new(SERVE_A1111);
    const char *model = NULL, *prompt = NULL, *neg = NULL, *sampler = NULL, *sched = NULL;
    int64_t seed = -1, max = serve_config.max_side;
    if (!j) BAD(507, "out of memory");
    if (!parse_root(&r, body, n)) goto fail;
    if (!get_str(&r, "prompt", &prompt) || !get_str(&r, "negative_prompt", &neg) ||
        !get_str(&r, "sampler_name", &sampler) || !get_str(&r, "scheduler", &sched) ||
        !get_str(&r, "model", &model) ||
        !get_opt(&r, "steps", LM_SD_OPT_STEPS, serve_config.max_steps, "--max-steps", &j->steps) ||
        !get_num(&r, "cfg_scale", LM_SD_OPT_CFG, &j->cfg) ||
        !get_int(&r, "seed", -1, 4294967295, &seed) ||
        !get_int(&r, "width", 8, max, &j->width) || !get_int(&r, "height", 8, max, &j->height) ||
        !get_int(&r, "batch_size", 1, serve_config.max_images, &j->batch) ||
        !get_int(&r, "n_iter", 1, serve_config.max_images, &j->iters) ||
        !get_int(&r, "clip_skip", 1, 64, &j->clip_skip))
        goto fail;
    if (!sampler && !get_str(&r, "sampler_index", &sampler)) goto fail;
    if (!refuse_unserved(&r)) goto fail;
    if (j->batch * j->iters > serve_config.max_images)
        BAD(400, "%s: batch_size %" PRId64 " x n_iter %" PRId64 " images: at most %" PRId64
            " a request (this server's --max-images)", r.who, j->batch, j->iters, serve_config.max_images);
    if ((j->width && !j->height && !img2img) || (j->height && !j->width && !img2img))
        BAD(400, "%s: give both width and height, or neither", r.who);
    if (j->width && j->height && !check_size(&r, j->width, j->height)) goto fail;
    cJSON *ov = cJSON_GetObjectItemCaseSensitive(r.root, "override_settings");
    if (ov && !cJSON_IsNull(ov)) {
        if (!cJSON_IsObject(ov)) BAD(400, "%s: override_settings must be an object", r.who);
        reader o = {ov, r.who, status, why, wn};
        const char *ck = NULL;
        if (!get_str(&o, "sd_model_checkpoint", &ck) ||
            !get_int(&o, "CLIP_stop_at_last_layers", 1, 64, &j->clip_skip))
            goto fail;
        if (ck) {
            if (model && strcmp(model, ck)) BAD(400, "%s: model and sd_model_checkpoint differ", r.who);
            model = ck;
        }
    }
    if (sampler && !find_sampler(&r, sampler, sched, j->sampler, sizeof j->sampler)) goto fail;
    if (!sampler && sched && *sched && strcasecmp(sched, "Automatic"))
        BAD(400, "%s: scheduler \"%.40s\" without sampler_name", r.who, sched);
    if (img2img) {
        cJSON *imgs = cJSON_GetObjectItemCaseSensitive(r.root, "init_images"), *first = cJSON_GetArrayItem(imgs, 0);
        if (!cJSON_IsArray(imgs) || cJSON_GetArraySize(imgs) != 1 || !cJSON_IsString(first))
            BAD(400, "img2img: init_images must be an array of one base64 PNG string");
        const char *s = first->valuestring, *comma = strchr(s, ',');
        if (!strncmp(s, "data:", 5) && comma) s = comma + 1;   /* a data URL */
        if (!(j->init_png = serve_b64_decode(s, strlen(s), &j->init_size)) || !j->init_size)
            BAD(400, "img2img: init_images[0] is not base64");
        if (!get_num(&r, "denoising_strength", LM_SD_OPT_STRENGTH, &j->strength)) goto fail;
        if (!take_mask(&r, j)) goto fail;
    } else if (cJSON_GetObjectItemCaseSensitive(r.root, "init_images"))
        BAD(400, "txt2img: init_images is img2img's (POST /sdapi/v1/img2img)");
    else if (given_mask(r.root))
        BAD(400, "txt2img: mask is img2img's (inpainting: POST /sdapi/v1/img2img with init_images)");
    if (!take_model(&r, j, model) || !take_prompts(&r, j, prompt, neg)) goto fail;
    j->seed = seed < 0 ? random_seed() : (uint64_t)seed;
    if (lm_sd_seeds_check(r.who, "seed", "batch_size x n_iter", (int64_t)j->seed, j->batch * j->iters) != LM_OK) {
        *status = 400;
        snprintf(why, wn, "%s", lm_error_message());
        lm_error_clear();
        goto fail;
    }
    /* A1111's "parameters": the request as read, without the images */
    j->echo = r.root;
    r.root = NULL;
    if (img2img) cJSON_ReplaceItemInObjectCaseSensitive(j->echo, "init_images", cJSON_CreateNull());
    if (j->mask_png) cJSON_ReplaceItemInObjectCaseSensitive(j->echo, "mask", cJSON_CreateNull());
    return j;
fail:
    cJSON_Delete(r.root);
    serve_job_free(j);
    return NULL;
}

/* ---- replies ---- */

char *serve_reply_openai(const serve_job *j)
{
    cJSON *r = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON_AddNumberToObject(r, "created", (double)time(NULL));
    for (int i = 0; i < j->nimages; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "b64_json", j->images[i].b64);
        cJSON_AddStringToObject(d, "revised_prompt", j->prompt);
        cJSON_AddItemToArray(data, d);
    }
    cJSON_AddItemToObject(r, "data", data);
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    return s;
}

char *serve_reply_a1111(const serve_job *j)
{
    cJSON *r = cJSON_CreateObject(), *imgs = cJSON_CreateArray(), *info = cJSON_CreateObject();
    cJSON *seeds = cJSON_CreateArray(), *texts = cJSON_CreateArray();
    cJSON *prompts = cJSON_CreateArray(), *negs = cJSON_CreateArray();
    for (int i = 0; i < j->nimages; i++) {
        cJSON_AddItemToArray(imgs, cJSON_CreateString(j->images[i].b64));
        cJSON_AddItemToArray(seeds, cJSON_CreateNumber((double)j->images[i].seed));
        cJSON_AddItemToArray(texts, cJSON_CreateString(j->images[i].infotext));
        cJSON_AddItemToArray(prompts, cJSON_CreateString(j->prompt));
        cJSON_AddItemToArray(negs, cJSON_CreateString(j->negative ? j->negative : ""));
    }
    /* the infotext's own values, as A1111's Processed.js() gives them */
    cJSON_AddStringToObject(info, "prompt", j->prompt);
    cJSON_AddItemToObject(info, "all_prompts", prompts);
    cJSON_AddStringToObject(info, "negative_prompt", j->negative ? j->negative : "");
    cJSON_AddItemToObject(info, "all_negative_prompts", negs);
    cJSON_AddNumberToObject(info, "seed", (double)j->seed);
    cJSON_AddItemToObject(info, "all_seeds", seeds);
    cJSON_AddNumberToObject(info, "steps", (double)j->steps);
    cJSON_AddNumberToObject(info, "cfg_scale", j->cfg);
    cJSON_AddStringToObject(info, "sampler_name", j->sampler);
    cJSON_AddNumberToObject(info, "batch_size", (double)j->batch);
    cJSON_AddNumberToObject(info, "n_iter", (double)j->iters);
    cJSON_AddStringToObject(info, "sd_model_name", j->model);
    if (j->init_png) cJSON_AddNumberToObject(info, "denoising_strength", j->strength);
    cJSON_AddNumberToObject(info, "clip_skip", (double)j->clip_skip);
    cJSON_AddNumberToObject(info, "index_of_first_image", 0);
    cJSON_AddItemToObject(info, "infotexts", texts);
    char *infos = cJSON_PrintUnformatted(info);
    cJSON_Delete(info);
    cJSON_AddItemToObject(r, "images", imgs);
    cJSON_AddItemToObject(r, "parameters", j->echo ? cJSON_Duplicate(j->echo, true) : cJSON_CreateObject());
    cJSON_AddStringToObject(r, "info", infos ? infos : "{}");
    free(infos);
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    return s;
}
