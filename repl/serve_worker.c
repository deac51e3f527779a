/* serve_worker.c - lumen serve's queue and its one worker thread.
 *
 * Jobs wait in one FIFO (the server drives one device); the worker takes
 * them in order and runs each to the end, so two generations never share
 * the device.  The pipeline of the last model asked for stays loaded and
 * is reused until a job names another.  Each image is written as lumen
 * generate writes it (lm_png_write, the same `parameters` infotext from
 * repl/cli_generate.c) into a private temporary folder and read back, so a
 * response carries the bytes lumen generate writes for the same settings.
 *
 * Only this thread calls into the engine (lm_*) after start-up; the
 * connection threads parse, queue and wait.  A job is stopped by the
 * sampler's per-step progress hook: when its client has left or
 * /sdapi/v1/interrupt was posted, the hook calls lm_cancel() and the
 * evaluation in flight stops with LM_ERR_CANCELLED; the flag is cleared
 * when the generation returns. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/io/io.h"
#include "core/lumen.h"
#include "models/lora.h"
#include "models/sampler.h"
#include "models/sd_pipeline.h"
#include "repl.h"
#include "serve.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static serve_job *head, *tail, *running;
static int waiting;
static bool stopping, started;
static pthread_t worker;
static char tmpdir[4096];
static unsigned long png_counter;

/* the resident pipeline (only the worker touches it) */
static lm_sd_pipeline *pipe_;
static char pipe_model[256];
static lm_device *device;

/* progress of the running job, read by /progress under the lock */
static struct {
    int step, steps;          /* over all of the job's iterations */
    double start;             /* CLOCK_MONOTONIC seconds */
    bool interrupted;
    char *preview;            /* the latest preview PNG, base64, or NULL */
    bool want_preview;        /* /progress asked since the last one was made */
} prog;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- running a job ---- */

static void fail(serve_job *j, int status, const char *fmt, const char *msg)
{
    j->status = status;
    snprintf(j->error, sizeof j->error, fmt, msg);
}

/* the HTTP status of an engine error */
static int status_of(lm_status st)
{
    switch (st) {
    case LM_ERR_ARG: case LM_ERR_SHAPE: case LM_ERR_DTYPE: case LM_ERR_UNSUPPORTED: return 400;
    case LM_ERR_NOMEM: case LM_ERR_LIMIT: return 507;
    default: return 500;
    }
}

typedef struct step_ctx {
    serve_job *j;
    int iter;
} step_ctx;

static void on_step(void *ctx, int step, int steps)
{
    step_ctx *s = ctx;
    pthread_mutex_lock(&lock);
    prog.steps = steps * (int)s->j->iters;
    prog.step = s->iter * steps + step;
    pthread_mutex_unlock(&lock);
    if (s->j->cancel) lm_cancel();   /* the evaluation in flight stops */
}

static unsigned char *png_bytes(lm_array *img, char *text, size_t *n);

/* The first image's latents decoded by the VAE, when /progress asked for a
 * preview since the last: one decode per poll at most, none unasked. */
static void on_latents(void *ctx, int step, int steps, lm_array *latents)
{
    (void)ctx;
    (void)step;
    (void)steps;
    pthread_mutex_lock(&lock);
    bool want = prog.want_preview;
    prog.want_preview = false;
    pthread_mutex_unlock(&lock);
    if (!want) return;
    lm_array *one = lm_slice(latents, 0, 0, 1, 1);
    lm_array *img = one ? lm_sd_decode_latents(pipe_, one) : NULL;
    lm_array *sq = img ? lm_squeeze(img, 0) : NULL;
    size_t n = 0;
    unsigned char *png = sq ? png_bytes(sq, NULL, &n) : NULL;
    char *b64 = png ? serve_b64_encode(png, n) : NULL;
    lm_array_release(one);
    lm_array_release(img);
    lm_array_release(sq);
    free(png);
    lm_error_clear();   /* a preview that failed is no preview; the generation goes on */
    pthread_mutex_lock(&lock);
    if (b64) {
        free(prog.preview);
        prog.preview = b64;
    }
    pthread_mutex_unlock(&lock);
}

/* the init image as [3,H,W] f32 in 0..1, as lumen generate reads --init */
static lm_array *decode_init(const serve_job *j)
{
    lm_png_opts ro;
    lm_png_opts_init(&ro);
    ro.dtype = LM_F32;
    ro.has_dtype = true;
    return lm_cli_init_rgb(lm_png_read_mem(j->init_png, j->init_size, "init_images[0]", &ro, NULL));
}

/* A1111's mask as [C,H,W] f32 in 0..1 (models/sd_inpaint.h takes it to
 * gray), inverted for inpainting_mask_invert */
static lm_array *decode_mask(const serve_job *j)
{
    lm_png_opts ro;
    lm_png_opts_init(&ro);
    ro.dtype = LM_F32;
    ro.has_dtype = true;
    lm_array *m = lm_png_read_mem(j->mask_png, j->mask_size, "mask", &ro, NULL);
    if (!m || !j->mask_invert) return m;
    lm_array *inv = lm_binary_scalar(LM_OP_SUB, m, 1, true);
    lm_array_release(m);
    return inv;
}

/* the PNG bytes lm_png_write gives for image [3,H,W] with the infotext
 * (NULL: none) */
static unsigned char *png_bytes(lm_array *img, char *text, size_t *n)
{
    char path[4200];
    pthread_mutex_lock(&lock);
    unsigned long k = ++png_counter;
    pthread_mutex_unlock(&lock);
    snprintf(path, sizeof path, "%s/%lu.png", tmpdir, k);
    lm_kv kv[1] = {{"parameters", text}};
    lm_png_opts wo;
    lm_png_opts_init(&wo);
    wo.ntext = text ? 1 : 0;
    wo.text = kv;
    if (lm_png_write(path, img, &wo) != LM_OK) return NULL;
    unsigned char *buf = NULL;
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (f && fstat(fileno(f), &sb) == 0 && (buf = malloc((size_t)sb.st_size + 1)) &&
        fread(buf, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size) {
        *n = (size_t)sb.st_size;
    } else {
        lm_error_set(LM_ERR_IO, "serve: cannot read back %s: %s", path, strerror(errno));
        free(buf);
        buf = NULL;
    }
    if (f) fclose(f);
    unlink(path);
    return buf;
}

static bool ensure_pipeline(serve_job *j)
{
    if (pipe_ && !strcmp(pipe_model, j->model)) return true;
    int status;
    char why[1024];
    char *path = serve_model_path(j->model, &status, why, sizeof why);
    if (!path) {
        fail(j, status, "%s", why);
        return false;
    }
    lm_sd_pipeline_free(pipe_);
    pipe_ = NULL;
    pipe_model[0] = 0;
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.device = device;
    lo.dtype = (lm_dtype)serve_config.dtype;
    lo.prewarm_width = j->width;   /* the load's dry run plans this job's size and sampler */
    lo.prewarm_height = j->height;
    if (j->sampler[0]) lo.prewarm_sampler = j->sampler;
    if (!serve_config.quiet) fprintf(stderr, "lumen serve: loading model %s\n", j->model);
    pipe_ = lm_sd_pipeline_load(path, &lo);
    free(path);
    if (!pipe_) {
        fail(j, 500, "loading the model: %s", lm_error_message());
        return false;
    }
    snprintf(pipe_model, sizeof pipe_model, "%s", j->model);
    return true;
}

/* one iteration's images appended to j->images */
static bool keep_images(serve_job *j, lm_array *imgs, const uint64_t *seeds,
                        const lm_cli_infotext_args *info)
{
    for (int i = 0; i < (int)j->batch; i++) {
        lm_cli_infotext_args a = *info;
        a.seed = seeds[i];
        a.width = imgs->shape[3];
        a.height = imgs->shape[2];
        serve_image *im = &j->images[j->nimages];
        lm_array *one = lm_slice(imgs, 0, i, i + 1, 1), *sq = one ? lm_squeeze(one, 0) : NULL;
        char *text = lm_cli_generate_infotext(&a);
        size_t n = 0;
        unsigned char *png = sq && text ? png_bytes(sq, text, &n) : NULL;
        lm_array_release(one);
        lm_array_release(sq);
        im->b64 = png ? serve_b64_encode(png, n) : NULL;
        free(png);
        if (!im->b64) {
            free(text);
            fail(j, 500, "writing the PNG: %s", lm_error_message()[0] ? lm_error_message() : "out of memory");
            return false;
        }
        im->infotext = text;
        im->seed = seeds[i];
        j->nimages++;
    }
    return true;
}

/* The prompt's <lora:NAME:W> tags loaded for this job, each NAME a
 * NAME.safetensors of --lora-dir (no path, no link out of it), as
 * lumen generate --lora-dir loads them; *clean the prompt without them (NULL
 * when it has none), hashes A1111's Lora hashes.  false: j failed (400/404). */
static bool job_loras(serve_job *j, char **clean, char *hashes, size_t cap)
{
    enum { MAXT = 64 };
    char *names[MAXT], *rest = NULL, why[1200] = "";
    double w[MAXT];
    int status = 400;
    *clean = NULL;
    int n = lm_lora_tags(j->prompt, &rest, names, w, MAXT);
    free(rest);
    if (n < 0) {
        fail(j, 400, "%s", lm_error_message());
        return false;
    }
    if (n > MAXT) snprintf(why, sizeof why, "prompt: %d <lora:...> tags (at most %d)", n, MAXT);
    for (int i = 0; i < n && i < MAXT; i++) {
        const char *nm = names[i];
        if (why[0]) {
        } else if (!serve_config.lora_dir)
            snprintf(why, sizeof why, "prompt: <lora:%.200s>: this server has no LoRA folder (lumen serve "
                     "--lora-dir DIR)", nm);
        else if (nm[0] == '.' || strchr(nm, '/') || strchr(nm, '\\'))
            snprintf(why, sizeof why, "prompt: <lora:%.200s>: a LoRA is named by a file of the LoRA folder "
                     "(NAME for NAME.safetensors), without a path", nm);
        else {
            char path[4400], real[4096];
            snprintf(path, sizeof path, "%s/%s.safetensors", serve_config.lora_real, nm);
            size_t k = strlen(serve_config.lora_real);
            if (!realpath(path, real)) {
                status = 404;
                snprintf(why, sizeof why, "prompt: <lora:%.200s>: no %.200s.safetensors in the LoRA folder", nm,
                         nm);
            } else if (strncmp(real, serve_config.lora_real, k) || real[k] != '/')
                snprintf(why, sizeof why, "prompt: <lora:%.200s>: its file leaves the LoRA folder (a "
                         "symbolic link)", nm);
        }
    }
    for (int i = 0; i < n && i < MAXT; i++) free(names[i]);
    if (why[0]) {
        fail(j, status, "%s", why);
        return false;
    }
    if (!n) return true;
    if (lm_lora_load_tags(pipe_, j->prompt, serve_config.lora_real, "lumen serve --lora-dir DIR", true,
                          clean) != LM_OK) {
        fail(j, 400, "%s", lm_error_message());
        lm_lora_unload_all(pipe_);
        return false;
    }
    lm_lora_hashes(pipe_, hashes, cap);
    return true;
}

static void run_job(serve_job *j)
{
    lm_error_clear();
    if (!ensure_pipeline(j)) return;
    const lm_sd_defaults *d = lm_sd_pipeline_defaults(pipe_);
    if (!j->steps) j->steps = d->steps;
    if (j->cfg < 0) j->cfg = d->cfg;
    if (!j->sampler[0]) snprintf(j->sampler, sizeof j->sampler, "%s", d->sampler);
    if (j->strength < 0) j->strength = d->strength;
    char *clean = NULL, hashes[2048] = "";
    if (!job_loras(j, &clean, hashes, sizeof hashes)) return;
    lm_array *init = NULL, *mask = NULL;
    uint64_t *seeds = NULL;
    if (j->init_png) {
        if (lm_sd_img2img_check_for(NULL, lm_sd_pipeline_row(pipe_), j->steps, j->strength) != LM_OK) {
            fail(j, 400, "%s", lm_error_message());
            goto done;
        }
        if (!(init = decode_init(j))) {
            fail(j, 400, "init_images[0]: %s", lm_error_message());
            goto done;
        }
        if (j->mask_png && !(mask = decode_mask(j))) {
            fail(j, 400, "mask: %s", lm_error_message());
            goto done;
        }
    }
    j->images = calloc((size_t)(j->batch * j->iters), sizeof *j->images);
    seeds = calloc((size_t)j->batch, sizeof *seeds);
    if (!j->images || !seeds) {
        fail(j, 507, "%s", "out of memory");
        goto done;
    }
    lm_cli_infotext_args info = {.pipeline = pipe_, .prompt = j->prompt, .negative = j->negative,
                                 .sampler = j->sampler, .steps = j->steps, .clip_skip = j->clip_skip,
                                 .cfg = j->cfg, .strength = j->strength, .img2img = init != NULL,
                                 .lora_hashes = hashes[0] ? hashes : NULL, .inpaint = mask != NULL,
                                 .mask_blur = (double)j->mask_blur, .full_res = j->full_res,
                                 .padding = j->full_res_padding};
    for (int k = 0; k < (int)j->iters; k++) {
        const char *prompts[1] = {clean ? clean : j->prompt}, *negs[1] = {j->negative};
        for (int i = 0; i < (int)j->batch; i++) seeds[i] = j->seed + (uint64_t)(k * j->batch + i);
        lm_sd_gen_opts go;
        lm_sd_gen_opts_init_for(&go, pipe_);
        go.batch = (int)j->batch;
        go.prompts = prompts;
        go.nprompts = 1;
        go.negatives = negs;
        go.nnegatives = j->negative ? 1 : 0;
        go.seeds = seeds;
        go.steps = (int)j->steps;
        go.cfg = j->cfg;
        go.sampler = j->sampler;
        go.width = j->width;   /* with an init image: resized to them (A1111's "Just resize") */
        go.height = j->height;
        go.init = init;
        go.strength = j->strength;
        go.mask = mask;   /* A1111 pastes the init image back outside the blurred mask */
        go.mask_blur = (double)j->mask_blur;
        go.mask_overlay = mask != NULL;
        go.inpaint_crop = j->full_res;
        go.inpaint_padding = j->full_res_padding;
        go.clip_skip = j->clip_skip > 1 ? (int)j->clip_skip - 1 : 0;
        step_ctx sc = {j, k};
        go.progress = on_step;
        go.progress_ctx = &sc;
        go.step_latents = on_latents;
        if (j->cancel) lm_cancel();
        lm_array *imgs = lm_sd_generate(pipe_, &go);
        lm_cancel_clear();
        if (!imgs) {
            lm_status st = lm_error_status();
            if (j->cancel == 2) fail(j, 409, "%s", "interrupted (POST /sdapi/v1/interrupt)");
            else if (j->cancel) fail(j, 503, "%s", "stopped: the client left or the server is stopping");
            else fail(j, status_of(st), "%s", lm_error_message());
            goto done;
        }
        bool ok = keep_images(j, imgs, seeds, &info);
        lm_array_release(imgs);
        if (!ok) goto done;
    }
    j->status = 200;
done:
    free(seeds);
    lm_array_release(init);
    lm_array_release(mask);
    if (clean) lm_lora_unload_all(pipe_);   /* the base weights back, bit for bit */
    free(clean);
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!head && !stopping) pthread_cond_wait(&wake, &lock);
        if (!head) break;
        serve_job *j = head;
        head = j->next;
        if (!head) tail = NULL;
        waiting--;
        running = j;
        prog.step = 0;
        prog.steps = 0;
        prog.start = now_s();
        prog.interrupted = false;
        free(prog.preview);
        prog.preview = NULL;
        prog.want_preview = false;
        pthread_mutex_unlock(&lock);
        if (j->cancel) fail(j, 503, "%s", "stopped before it ran: the client left");
        else run_job(j);
        if (!j->status) fail(j, 500, "%s", "the job ended without a result");
        pthread_mutex_lock(&lock);
        running = NULL;
        pthread_cond_broadcast(&j->done);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int serve_worker_start(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/lumen-serve-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "lumen serve: cannot make a temporary folder %s: %s\n", tmpdir, strerror(errno));
        return -1;
    }
    if (serve_config.device_name && !(device = lm_device_find(serve_config.device_name))) {
        fprintf(stderr, "lumen serve: --device %s: %s\n", serve_config.device_name, lm_error_message());
        rmdir(tmpdir);
        return -1;
    }
    if (pthread_create(&worker, NULL, worker_main, NULL) != 0) {
        fprintf(stderr, "lumen serve: cannot start the worker thread\n");
        rmdir(tmpdir);
        return -1;
    }
    started = true;
    return 0;
}

void serve_worker_stop(void)
{
    if (!started) return;
    pthread_mutex_lock(&lock);
    stopping = true;
    for (serve_job *j = head; j; j = j->next) {
        fail(j, 503, "%s", "the server is stopping");
        pthread_cond_broadcast(&j->done);
    }
    head = tail = NULL;
    waiting = 0;
    if (running) {
        running->cancel = running->cancel ? running->cancel : 1;
        lm_cancel();
    }
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(worker, NULL);
    started = false;
    lm_sd_pipeline_free(pipe_);
    pipe_ = NULL;
    free(prog.preview);
    prog.preview = NULL;
    rmdir(tmpdir);
}

int serve_enqueue(serve_job *j)
{
    pthread_mutex_lock(&lock);
    int r = 0;
    if (stopping) r = 503;
    else if (waiting >= serve_config.queue) r = 429;
    else {
        j->next = NULL;
        if (tail) tail->next = j;
        else head = j;
        tail = j;
        waiting++;
        pthread_cond_signal(&wake);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

void serve_wait(serve_job *j, bool (*alive)(void *), void *ctx)
{
    pthread_mutex_lock(&lock);
    while (!j->status) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 200 * 1000 * 1000;
        if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&j->done, &lock, &t);
        if (!j->status && !j->cancel && alive && !alive(ctx)) {
            j->cancel = 1;
            if (!serve_config.quiet) fprintf(stderr, "lumen serve: a client left; its job stops\n");
        }
    }
    pthread_mutex_unlock(&lock);
}

void serve_interrupt(void)
{
    pthread_mutex_lock(&lock);
    if (running) {
        running->cancel = 2;
        prog.interrupted = true;
    }
    pthread_mutex_unlock(&lock);
}

char *serve_progress_json(void)
{
    pthread_mutex_lock(&lock);
    bool busy = running != NULL;
    double frac = busy && prog.steps ? (double)prog.step / prog.steps : 0;
    double el = busy ? now_s() - prog.start : 0;
    double eta = frac > 0 ? el / frac * (1 - frac) : 0;
    int step = busy ? prog.step : 0, steps = busy ? prog.steps : 0, jobs = waiting + busy;
    bool intr = busy && prog.interrupted;
    const char *job = !busy ? "" : running->init_png ? "img2img" : "txt2img";
    char *preview = busy && prog.preview ? strdup(prog.preview) : NULL;
    if (busy) prog.want_preview = true;   /* the next step decodes a newer one */
    pthread_mutex_unlock(&lock);
    cJSON *r = cJSON_CreateObject(), *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "progress", frac);
    cJSON_AddNumberToObject(r, "eta_relative", eta);
    cJSON_AddBoolToObject(st, "skipped", false);
    cJSON_AddBoolToObject(st, "interrupted", intr);
    cJSON_AddStringToObject(st, "job", job);
    cJSON_AddNumberToObject(st, "job_count", jobs);
    cJSON_AddNumberToObject(st, "job_no", 0);
    cJSON_AddNumberToObject(st, "sampling_step", step);
    cJSON_AddNumberToObject(st, "sampling_steps", steps);
    cJSON_AddItemToObject(r, "state", st);
    /* the running job's first image as of a recent step (decoded at the
     * step after a poll), null before one is made or when idle */
    if (preview) cJSON_AddStringToObject(r, "current_image", preview);
    else cJSON_AddNullToObject(r, "current_image");
    free(preview);
    cJSON_AddNullToObject(r, "textinfo");
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    return s;
}
