/* cli_generate.c - `lumen generate`: one prompt to PNG images with a Stable
 * Diffusion pipeline (models/sd_pipeline.h).
 *
 *   lumen generate "prompt" --model DIR|FILE -o out.png [options]  (usage() lists them)
 *
 * Each PNG carries a `parameters` tEXt chunk written as AUTOMATIC1111's
 * create_infotext writes it, so A1111, ComfyUI and image browsers read the
 * prompt and settings back.  With --batch-size N the N images (seeds seed,
 * seed+1, ...) run in one UNet call and go to OUT with "%d" replaced by the
 * index, or "_0000"... before the extension, as core/io's batch writer names
 * them.  Outputs are checked (their folders made, as lumen upscale makes
 * them) before the model loads, and again, under an flock on the folder,
 * just before each is renamed into place: an existing file is replaced only
 * with --overwrite.  A NaN in any stage is an error and writes nothing
 * (lm_sd_generate names the stage).  "--" ends the options (a prompt may
 * then start with "-").  Exit 0 when every image was written, 1 on a
 * failure, 2 on a usage error. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/io/io.h"
#include "core/lumen.h"
#include "models/sampler.h"
#include "models/sd_pipeline.h"
#include "repl.h"

typedef struct gen_args {
    const char *prompt, *negative, *model, *out, *sampler, *init, *tokenizer, *prediction;
#define GEN_MAX_REFS 8
    const char *refs[GEN_MAX_REFS];   /* --ref: FLUX.2-klein's reference images, in order */
    int nrefs;
    const char *device_name;
    lm_device *device;
    lm_dtype dtype;
    int64_t steps, width, height, batch, clip_skip;
    double cfg, strength;
    uint64_t seed;
    bool has_seed, overwrite, quiet;
    bool has_steps, has_cfg, has_sampler, has_strength;   /* else the model family's */
} gen_args;

static int usage(const char *msg)
{
    const lm_sd_defaults *d = &lm_sd_defaults_generic;
    char names[512];
    if (msg) fprintf(stderr, "lumen generate: %s\n", msg);
    fprintf(msg ? stderr : stdout,
            "usage: lumen generate \"PROMPT\" --model DIR|FILE -o OUT.png [options]\n"
            "  --model DIR|FILE   a diffusers folder (model_index.json: SD 1.x, 2.x, SDXL,\n"
            "                     Z-Image, FLUX.2-klein) or a single-file .safetensors or\n"
            "                     .gguf checkpoint (SD 1.x, 2.x, SDXL)\n"
            "  --negative TEXT    the negative prompt (default none: SDXL then conditions on\n"
            "                     zeros, as diffusers does; --negative '' on the empty prompt)\n"
            "  --steps N          sampler steps (default: the model family's, %d for SD)\n"
            "  --cfg X            classifier-free guidance scale; <= 1 runs without (default: the\n"
            "                     model family's, %g for SD)\n"
            "  --sampler NAME     %s,\n"
            "                     or A1111's names (\"Euler a\", \"DPM++ 2M Karras\"...) (default:\n"
            "                     the model family's, %s for SD)\n"
            "  --seed N           the seed (default: a random one, printed)\n"
            "  --size WxH         image size, multiples of 8 (default: the model's, 512x512 for\n"
            "                     SD 1.5, 1024x1024 for SDXL)\n"
            "  --init IN.png      img2img: start from this image (its size is the output's)\n"
            "  --strength X       img2img: how much to change it, (0, 1] (default %g)\n"
            "  --ref IN.png       FLUX.2-klein: a reference image to edit from (repeatable, in\n"
            "                     order; sides >= 64, at most 1024x1024 pixels, centre-cropped\n"
            "                     to multiples of 16; the first one's size is the default size)\n"
            "  --batch-size N     N images (seeds N, N+1, ...) in one UNet call; each is the\n"
            "                     same bytes as alone (default 1)\n"
            "  --device D         cpu, vulkan, vulkan:N (default: $LUMEN_DEVICE or the best device)\n"
            "  --dtype T          f32, f16 or bf16 (default f16 on a GPU, f32 on the CPU)\n"
            "  --tokenizer DIR    single files: a diffusers folder (or tokenizer folder) to take\n"
            "                     tokenizer/ [tokenizer_2/] and scheduler/ from\n"
            "  --prediction P     epsilon or v_prediction, overriding the scheduler config\n"
            "  --clip-skip N      A1111's Clip skip: 1 = the text encoder's last layer (default),\n"
            "                     2 = the penultimate (diffusers' clip_skip=1)\n"
            "  -o OUT.png         the output (its folder is made); --overwrite replaces an\n"
            "                     existing file\n"
            "  -q, --quiet        no progress bar or result line\n"
            "  --                 the end of the options: a prompt after it may start with -\n",
            d->steps, d->cfg, lm_sampler_list(names, sizeof names, false), d->sampler,
            d->strength);
    return 2;
}

static int bad_value(const char *opt, const char *val, const char *accepted)
{
    fprintf(stderr, "lumen generate: %s %s: expected %s\n", opt, val, accepted);
    return 2;
}

/* a whole number in option id's range (models/family.h), the CLI's value
 * being the option's plus offset (A1111's Clip skip: 1); else the usage
 * error naming the option and the range */
static int parse_opt_int(const char *opt, const char *s, lm_sd_opt id, int64_t offset, int64_t *out)
{
    char *end, range[96];
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || lm_sd_option_check_int(id, NULL, NULL, (int64_t)v - offset) != LM_OK) {
        lm_error_clear();
        return bad_value(opt, s, lm_sd_option_range(id, offset, range, sizeof range));
    }
    *out = v;
    return 0;
}

static int parse_opt_num(const char *opt, const char *s, lm_sd_opt id, double *out)
{
    char *end, range[96];
    double v = strtod(s, &end);
    if (!*s || *end || v != v || lm_sd_option_check_num(id, NULL, NULL, v) != LM_OK) {
        lm_error_clear();
        return bad_value(opt, s, lm_sd_option_range(id, 0, range, sizeof range));
    }
    *out = v;
    return 0;
}

/* the error, after what unless the message names it already */
static void report(const char *what)
{
    const char *msg = lm_error_message();
    if (!strncmp(msg, "generate: ", 10)) msg += 10;
    if (what && strstr(msg, what)) what = NULL;
    fprintf(stderr, "lumen generate: %s%s%s\n", what ? what : "", what ? ": " : "", msg);
}

/* 0 = parsed, -1 = help printed, else the exit status */
static int parse_args(int argc, char **argv, gen_args *a)
{
    bool options = true;
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (options && !strcmp(s, "--")) {   /* getopt's end of options */
            options = false;
            continue;
        }
        if (!options) {
            if (a->prompt)
                return usage("one prompt only (quote it: lumen generate -- \"-a red fox\" ...)");
            a->prompt = s;
            continue;
        }
        static const char *const valued[] = {
            "-o", "--model", "--negative", "--steps", "--cfg", "--sampler", "--seed", "--size",
            "--init", "--strength", "--device", "--dtype", "--batch-size", "--tokenizer",
            "--prediction", "--clip-skip", "--ref", NULL};
        bool takes = false;
        for (int k = 0; valued[k]; k++) takes |= !strcmp(s, valued[k]);
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "lumen generate: %s needs a value (lumen generate --help lists the "
                    "options)\n", s);
            return 2;
        }
        const char *v = takes ? argv[++i] : NULL;
        int64_t n;
        int rc = 0;
        if (!strcmp(s, "-o")) a->out = v;
        else if (!strcmp(s, "--model")) a->model = v;
        else if (!strcmp(s, "--negative")) a->negative = v;
        else if (!strcmp(s, "--sampler")) a->sampler = v, a->has_sampler = true;
        else if (!strcmp(s, "--init")) a->init = v;
        else if (!strcmp(s, "--ref")) {
            if (a->nrefs == GEN_MAX_REFS)
                return usage("--ref: at most 8 reference images");
            a->refs[a->nrefs++] = v;
        }
        else if (!strcmp(s, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(s, "--device")) a->device_name = v;
        else if (!strcmp(s, "--prediction")) {
            if (strcmp(v, "epsilon") && strcmp(v, "v_prediction"))
                return bad_value(s, v, "epsilon or v_prediction");
            a->prediction = v;
        } else if (!strcmp(s, "--steps")) {
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_STEPS, 0, &a->steps))) return rc;
            a->has_steps = true;
        } else if (!strcmp(s, "--clip-skip")) {
            /* A1111's: 1 = the last layer, 2 = the penultimate (diffusers' 1) */
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_CLIP_SKIP, 1, &a->clip_skip))) return rc;
        } else if (!strcmp(s, "--batch-size")) {
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_BATCH, 0, &a->batch))) return rc;
        } else if (!strcmp(s, "--seed")) {
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_SEED, 0, &n))) return rc;
            a->seed = (uint64_t)n;
            a->has_seed = true;
        } else if (!strcmp(s, "--cfg")) {
            if ((rc = parse_opt_num(s, v, LM_SD_OPT_CFG, &a->cfg))) return rc;
            a->has_cfg = true;
        } else if (!strcmp(s, "--strength")) {
            if ((rc = parse_opt_num(s, v, LM_SD_OPT_STRENGTH, &a->strength))) return rc;
            a->has_strength = true;
        } else if (!strcmp(s, "--size")) {
            if (lm_sd_size_parse(NULL, NULL, v, &a->width, &a->height) != LM_OK) {
                char range[96], what[128];
                lm_error_clear();
                lm_sd_option_range(LM_SD_OPT_SIZE, 0, range, sizeof range);
                snprintf(what, sizeof what, "WxH or N, each %s (pixels)", range);
                return bad_value(s, v, what);
            }
            if (a->width % 8 || a->height % 8)
                return bad_value(s, v, "a width and height divisible by 8 (the VAE's scale)");
        } else if (!strcmp(s, "--dtype")) {
            if (!lm_dtype_from_name(v, &a->dtype) ||
                (a->dtype != LM_F32 && a->dtype != LM_F16 && a->dtype != LM_BF16))
                return bad_value(s, v, "f32, f16 or bf16");
        } else if (!strcmp(s, "--overwrite")) a->overwrite = true;
        else if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) a->quiet = true;
        else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(NULL);
            return -1;
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "lumen generate: unknown option %s (lumen generate --help lists "
                    "the options)\n", s);
            return 2;
        } else if (a->prompt) {
            return usage("one prompt only (quote it: lumen generate \"a red fox\" ...)");
        } else a->prompt = s;
    }
    if (!a->prompt) return usage("no prompt given");
    if (!a->model) return usage("no model given (--model DIR|FILE)");
    if (!a->out || !*a->out) return usage("no output given (-o OUT.png)");
    if (a->out[strlen(a->out) - 1] == '/') {
        fprintf(stderr, "lumen generate: -o %s names a folder; -o takes the image's file name "
                "(%simage.png)\n", a->out, a->out);
        return 2;
    }
    /* options that would do nothing: refused, not ignored */
    if (a->has_strength && !a->init) {
        fprintf(stderr, "lumen generate: --strength is img2img's: give --init IN.png\n");
        return 2;
    }
    struct stat msb;
    if (a->tokenizer && stat(a->model, &msb) == 0 && S_ISDIR(msb.st_mode)) {
        fprintf(stderr, "lumen generate: --tokenizer %s: --model %s is a diffusers folder, which "
                "has its own tokenizer; --tokenizer is for single-file checkpoints (.safetensors, "
                ".gguf)\n", a->tokenizer, a->model);
        return 2;
    }
    /* the batch's seeds, each one that can be given back */
    if (a->has_seed &&
        lm_sd_seeds_check(NULL, "--seed", "--batch-size", (int64_t)a->seed, a->batch) != LM_OK) {
        fprintf(stderr, "lumen generate: %s\n", lm_error_message());
        return 2;
    }
    /* img2img's steps, when known before the model (else the family's, checked once it loads) */
    if (a->init && a->has_steps && a->has_strength &&
        lm_sd_img2img_check_for(NULL, lm_sd_family_peek(a->model), a->steps, a->strength) != LM_OK) {
        fprintf(stderr, "lumen generate: --%s\n", lm_error_message());
        return 2;
    }
    const char *schedule;
    if (a->sampler && !lm_sd_sampler_a1111(a->sampler, &schedule)) {
        char names[512], a1111[512], all[1100];
        snprintf(all, sizeof all, "%s, or A1111's %s", lm_sampler_list(names, sizeof names, false),
                 lm_sampler_list(a1111, sizeof a1111, true));
        return bad_value("--sampler", a->sampler, all);
    }
    if (a->device_name && !(a->device = lm_device_find(a->device_name))) {
        report("--device");
        return 2;
    }
    return 0;
}

/* ---- outputs ---- */

/* The name of image i of n, as lm_png_write names a batch: "%d" / "%0Nd" in
 * the path replaced by i, else "_%04d" before the extension. */
static char *out_name(const char *out, int i, int n)
{
    size_t len = strlen(out) + 32;
    char *r = malloc(len);
    if (!r) return NULL;
    if (n == 1) {
        snprintf(r, len, "%s", out);
        return r;
    }
    const char *pct = strchr(out, '%');
    if (pct) {
        const char *d = pct + 1;
        while (*d >= '0' && *d <= '9') d++;
        if (*d == 'd') {
            char fmt[16];
            snprintf(fmt, sizeof fmt, "%%%.*sd", (int)(d - pct - 1), pct + 1);
            char num[24];
            snprintf(num, sizeof num, fmt, i);
            snprintf(r, len, "%.*s%s%s", (int)(pct - out), out, num, d + 1);
            return r;
        }
    }
    const char *slash = strrchr(out, '/'), *dot = strrchr(out, '.');
    if (!dot || (slash && dot < slash)) dot = out + strlen(out);
    snprintf(r, len, "%.*s_%04d%s", (int)(dot - out), out, i, dot);
    return r;
}

/* why OUT cannot be written, or NULL */
static const char *out_problem(const gen_args *a, const char *o, char *why, size_t n)
{
    struct stat sb;
    if (lstat(o, &sb) != 0) return NULL;
    if (S_ISDIR(sb.st_mode)) snprintf(why, n, "%s is a folder", o);
    else if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))   /* found now, not after the run */
        snprintf(why, n, "%s exists and is %s; only regular files are written", o,
                 S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)" : S_ISSOCK(sb.st_mode) ? "a socket"
                 : "a device");
    else if (!a->overwrite) snprintf(why, n, "%s exists (--overwrite replaces it)", o);
    else {
        /* the output must not be one of the images read */
        struct stat ib;
        const char *in[GEN_MAX_REFS + 1];
        int nin = 0;
        if (a->init) in[nin++] = a->init;
        for (int k = 0; k < a->nrefs; k++) in[nin++] = a->refs[k];
        for (int k = 0; k < nin; k++)
            if (stat(in[k], &ib) == 0 && stat(o, &sb) == 0 && ib.st_dev == sb.st_dev && ib.st_ino == sb.st_ino) {
                snprintf(why, n, "%s is the %s image", o, in[k] == a->init ? "--init" : "--ref");
                return why;
            }
        return NULL;
    }
    return why;
}

/* the folder of path ("." for none) */
static void dir_of(const char *path, char *dir, size_t n)
{
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
    else snprintf(dir, n, ".");
}

/* Whether a file can be made beside path under a name as long as the PNG
 * writer's temporary (core/io's "PATH.PID-K-HEX.tmp"): made and removed at
 * once, so a name too long for the folder, a read-only file system or a
 * permission is found before the model loads, not after the run.  0, or 1
 * with the reason printed. */
static int probe_name(const char *path)
{
    size_t n = strlen(path) + 64;
    char *t = malloc(n);
    if (!t) return 1;
    snprintf(t, n, "%s.%ld-9999-fffff.tmp", path, (long)getpid());
    int fd = open(t, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666), e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(t);
    }
    free(t);
    if (fd >= 0 || e == EEXIST) return 0;
    fprintf(stderr, "lumen generate: output %s: cannot create a file there: %s%s\n", path,
            strerror(e), e == ENAMETOOLONG ? " (the writer's temporary adds about 20 bytes to the "
            "name)" : "");
    return 1;
}

/* the folder of path, locked as lumen upscale locks its outputs' */
static int lock_dir(const char *path)
{
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    return lm_cli_lock_dir(dir, "generate");
}

/* A1111's infotext_utils.quote: a value with ',', ':' or a newline is
 * written as a JSON string */
static void put_value(char *buf, size_t n, size_t *at, const char *v)
{
    bool q = strpbrk(v, ",:\n") != NULL;
    if (*at >= n) return;
    if (!q) {
        *at += (size_t)snprintf(buf + *at, n - *at, "%s", v);
        return;
    }
    *at += (size_t)snprintf(buf + *at, n - *at, "\"");
    for (const char *c = v; *c && *at < n; c++) {
        if (*c == '"' || *c == '\\') *at += (size_t)snprintf(buf + *at, n - *at, "\\%c", *c);
        else if (*c == '\n') *at += (size_t)snprintf(buf + *at, n - *at, "\\n");
        else if ((unsigned char)*c < 0x20) *at += (size_t)snprintf(buf + *at, n - *at, "\\u%04x", *c);
        else *at += (size_t)snprintf(buf + *at, n - *at, "%c", *c);
    }
    if (*at < n) *at += (size_t)snprintf(buf + *at, n - *at, "\"");
}

/* The `parameters` text as A1111's create_infotext writes it (its key order;
 * values it would leave out are left out).  malloc'd. */
static char *infotext(const gen_args *a, const lm_sd_family_row *row, const char *model, uint64_t seed,
                      int64_t w, int64_t h)
{
    const char *schedule, *sampler = lm_sd_sampler_a1111(a->sampler, &schedule);
    /* a flow-matching family's Euler runs its release's shifted sigmas:
     * Forge and ComfyUI name that schedule Simple */
    if (row->flow) schedule = "Simple";
    size_t n = strlen(a->prompt) + (a->negative ? strlen(a->negative) : 0) + 2 * strlen(model) + 512;
    char *t = malloc(n);
    if (!t) return NULL;
    size_t at = (size_t)snprintf(t, n, "%s", a->prompt);
    /* given, even empty: "Negative prompt: " with nothing after it is the
     * empty prompt, no line is none (SDXL's zeros; A1111 reads both back
     * as an empty negative, the only one it has) */
    if (a->negative)
        at += (size_t)snprintf(t + at, n - at, "\nNegative prompt: %s", a->negative);
    at += (size_t)snprintf(t + at, n - at, "\nSteps: %" PRId64 ", Sampler: %s, Schedule type: %s, "
                           "CFG scale: %g, Seed: %" PRIu64 ", Size: %" PRId64 "x%" PRId64 ", Model: ",
                           a->steps, sampler, schedule, a->cfg, seed, w, h);
    put_value(t, n, &at, model);
    if (a->init && at < n) at += (size_t)snprintf(t + at, n - at, ", Denoising strength: %g", a->strength);
    if (a->clip_skip > 1 && at < n)
        at += (size_t)snprintf(t + at, n - at, ", Clip skip: %" PRId64, a->clip_skip);
    /* A1111 strips the whole text */
    while (at > 0 && at < n && (t[at - 1] == ' ' || t[at - 1] == '\n')) t[--at] = 0;
    return t;
}

/* The same text for lumen serve (repl/serve_worker.c), whose PNGs carry
 * what lumen generate writes for the same settings. */
char *lm_cli_generate_infotext(const lm_cli_infotext_args *i)
{
    gen_args a = {.prompt = i->prompt, .negative = i->negative, .sampler = i->sampler,
                  .init = i->img2img ? "" : NULL, .steps = i->steps, .cfg = i->cfg,
                  .strength = i->strength, .clip_skip = i->clip_skip};
    return infotext(&a, lm_sd_pipeline_row(i->pipeline), lm_sd_pipeline_name(i->pipeline),
                    i->seed, i->width, i->height);
}

/* ---- progress on a terminal ---- */

typedef struct bar { bool on; int64_t images; } bar;

static void progress(void *ctx, int step, int steps)
{
    bar *b = ctx;
    if (!b->on) return;
    int width = 30, fill = steps ? step * width / steps : width;
    fprintf(stderr, "\rgenerate %" PRId64 " image%s [%.*s%*s] %d/%d steps", b->images,
            b->images == 1 ? "" : "s", fill, "##############################", width - fill, "",
            step, steps);
    if (step == steps) fputs("\r\033[K", stderr);
    fflush(stderr);
}

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &s, sizeof s) != (ssize_t)sizeof s) s = 0;
        close(fd);
    }
    if (!s) s = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return s % 4294967296u;   /* A1111's seeds are 32-bit */
}

/* the init PNG as [3,H,W] f32 in 0..1 (alpha dropped, gray repeated) */
static lm_array *read_init(const char *path)
{
    lm_png_opts ro;
    lm_png_opts_init(&ro);
    ro.dtype = LM_F32;
    ro.has_dtype = true;
    lm_array *img = lm_png_read(path, &ro, NULL), *r = NULL;
    if (!img) return NULL;
    int64_t C = img->shape[0];
    if (C >= 3) r = lm_slice(img, 0, 0, 3, 1);
    else {
        lm_array *g = lm_slice(img, 0, 0, 1, 1);
        int64_t shape[3] = {3, img->shape[1], img->shape[2]};
        r = g ? lm_broadcast_to(g, 3, shape) : NULL;
        lm_array_release(g);
    }
    lm_array_release(img);
    lm_array *c = r ? lm_contiguous(r) : NULL;
    lm_array_release(r);
    return c;
}

static int write_images(const gen_args *a, lm_sd_pipeline *p, lm_array *imgs, char **names,
                        const uint64_t *seeds)
{
    int failed = 0;
    for (int i = 0; i < (int)a->batch; i++) {
        lm_array *one = lm_slice(imgs, 0, i, i + 1, 1), *sq = one ? lm_squeeze(one, 0) : NULL;
        char *text = infotext(a, lm_sd_pipeline_row(p), lm_sd_pipeline_name(p), seeds[i], imgs->shape[3],
                              imgs->shape[2]);
        lm_kv kv[1] = {{"parameters", text}};
        lm_png_opts wo;
        lm_png_opts_init(&wo);
        wo.ntext = 1;
        wo.text = kv;
        char why[4200];
        lm_status st = LM_ERR_IO;
        int fd = sq && text ? lock_dir(names[i]) : -1;
        if (fd >= 0 && out_problem(a, names[i], why, sizeof why))
            fprintf(stderr, "lumen generate: %s (written meanwhile by another run?); not "
                    "replaced\n", why);
        else if (fd >= 0 && (st = lm_png_write(names[i], sq, &wo)) != LM_OK)
            report(NULL);   /* the writer's message names the file */
        else if (!sq || !text)
            report(NULL);
        if (fd >= 0) close(fd);
        if (st == LM_OK && !a->quiet) printf("%s (seed %" PRIu64 ")\n", names[i], seeds[i]);
        failed += st != LM_OK;
        free(text);
        lm_array_release(one);
        lm_array_release(sq);
    }
    return failed ? 1 : 0;
}

static int cmd_generate(int argc, char **argv)
{
    const lm_sd_defaults *d = &lm_sd_defaults_generic;
    gen_args a = {.sampler = NULL, .dtype = LM_DTYPE_COUNT, .steps = d->steps, .cfg = d->cfg,
                  .strength = d->strength, .batch = d->batch, .clip_skip = d->clip_skip + 1};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (!a.has_seed) a.seed = random_seed();
    /* cheap checks first: the outputs, the init image, then the model */
    char **names = calloc((size_t)a.batch, sizeof *names);
    uint64_t *seeds = calloc((size_t)a.batch, sizeof *seeds);
    lm_array *init = NULL, *imgs = NULL, *refs[GEN_MAX_REFS] = {NULL};
    int nref = 0;
    lm_sd_pipeline *p = NULL;
    rc = 1;
    if (!names || !seeds) goto done;
    for (int i = 0; i < (int)a.batch; i++) {
        char why[4200];
        seeds[i] = a.seed + (uint64_t)i;
        if (!(names[i] = out_name(a.out, i, (int)a.batch))) goto done;
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) {
                fprintf(stderr, "lumen generate: images %d and %d would both be %s\n", j, i, names[i]);
                goto done;
            }
        if (out_problem(&a, names[i], why, sizeof why)) {
            fprintf(stderr, "lumen generate: %s; not replaced\n", why);
            goto done;
        }
    }
    /* the folders, made now: a generation is not thrown away for want of one */
    for (int i = 0; i < (int)a.batch; i++) {
        char dir[4096];
        dir_of(names[i], dir, sizeof dir);
        if (lm_cli_out_dir(dir, names[i], "generate") || probe_name(names[i])) goto done;
    }
    if (a.init && !(init = read_init(a.init))) {
        report("--init");   /* the reader's message names the file */
        goto done;
    }
    for (; nref < a.nrefs; nref++)
        if (!(refs[nref] = read_init(a.refs[nref]))) {
            report(a.refs[nref]);
            goto done;
        }
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.dtype = a.dtype;
    lo.device = a.device;
    lo.tokenizer_dir = a.tokenizer;
    lo.prediction = a.prediction;
    lo.tokenizer_option = "--tokenizer DIR";
    if (!(p = lm_sd_pipeline_load(a.model, &lo))) {
        report(NULL);
        goto done;
    }
    /* what was not given is the model family's (the infotext records what ran) */
    const lm_sd_defaults *fd = lm_sd_pipeline_defaults(p);
    if (!a.has_steps) a.steps = fd->steps;
    if (!a.has_cfg) a.cfg = fd->cfg;
    if (!a.has_sampler) a.sampler = fd->sampler;
    if (!a.has_strength) a.strength = fd->strength;
    if (init && lm_sd_img2img_check_for(NULL, lm_sd_pipeline_row(p), a.steps, a.strength) != LM_OK) {
        fprintf(stderr, "lumen generate: --%s\n", lm_error_message());
        rc = 2;   /* a usage error, as when --steps was given */
        goto done;
    }
    lm_sd_gen_opts go;
    lm_sd_gen_opts_init_for(&go, p);
    const char *prompts[1] = {a.prompt}, *negs[1] = {a.negative};
    go.batch = (int)a.batch;
    go.prompts = prompts;
    go.nprompts = 1;
    go.negatives = negs;
    go.nnegatives = a.negative ? 1 : 0;
    go.seeds = seeds;
    go.steps = (int)a.steps;
    go.cfg = a.cfg;
    go.sampler = a.sampler;
    go.width = a.width;
    go.height = a.height;
    go.init = init;
    go.strength = a.strength;
    go.refs = refs;
    go.nrefs = nref;
    go.clip_skip = a.clip_skip > 1 ? (int)a.clip_skip - 1 : 0;
    bar b = {!a.quiet && isatty(2), a.batch};
    go.progress = progress;
    go.progress_ctx = &b;
    imgs = lm_sd_generate(p, &go);
    if (!imgs) {
        if (b.on) fputs("\r\033[K", stderr);
        report(NULL);
        goto done;
    }
    rc = write_images(&a, p, imgs, names, seeds);
done:
    lm_array_release(imgs);
    lm_array_release(init);
    for (int k = 0; k < nref; k++) lm_array_release(refs[k]);
    lm_sd_pipeline_free(p);
    for (int i = 0; names && i < (int)a.batch; i++) free(names[i]);
    free(names);
    free(seeds);
    return rc;
}

int lm_cli_generate(int argc, char **argv)
{
    if (argc < 2 || !argv[1] || strcmp(argv[1], "generate")) return -1;
    if (lm_init() != LM_OK) {
        fprintf(stderr, "lumen: %s\n", lm_error_message());
        return 2;
    }
    return cmd_generate(argc, argv);
}
