/* cli_models.c - `lumen upscale` and `lumen convert`: the pretrained
 * TF.js upscalers (models/tfjs.h) on the command line.
 *
 *   lumen upscale IN.png... -o OUT [options]   (usage() lists them with defaults)
 *       OUT is a file for one input, a folder (made with its parents if
 *       needed) for several or when it ends in '/'.  Alpha is kept, 16-bit
 *       input gives 16-bit output, the PNG carries the model and scale as
 *       tEXt chunks.  Exit 0 when every file was written, 1 if any failed or
 *       was refused, 2 on a usage error.
 *   lumen convert MODEL OUT.safetensors [--scale 4]
 *       the converted weights and topology, which --model and
 *       lm.models.load read back.
 *   lumen convert [--quantize q8_0|q4_k|...] FILE|DIR OUT.gguf
 *       a tensor file (safetensors, npz, GGUF) as GGUF, its float weights
 *       quantized (quantizable below says which); a single-file SD
 *       checkpoint keeps its original names and a diffusers folder gets
 *       them, stable-diffusion.cpp's layout, which the diffusion pipeline
 *       loads back.
 *
 * Nothing is lost: before the model is loaded every input must be a
 * regular file, no output may be an input (same device and inode, so links
 * and other spellings count), no two inputs may map to one output, and an
 * existing output is replaced only with --overwrite.  Each output is
 * written by core/io's PNG writer (a temporary file in its folder, renamed
 * into place) while this run holds an flock on the output folder, and the
 * checks are repeated under that lock, so two runs into one folder never
 * replace each other's results: the later one refuses. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include "core/io/io.h"
#include "core/io/gguf.h"
#include "core/quant.h"
#include "core/lumen.h"
#include "models/dit_files.h"
#include "models/sd_single.h"
#include "models/tfjs.h"
#include "lua/term_image.h"
#include "repl.h"

#define DEFAULT_MODEL "esrgan-slim"
#define DEFAULT_SCALE 4
#define DEFAULT_TILE 256       /* the CPU (and lavapipe, whose memory is the host's) */
#define DEFAULT_TILE_GPU 512   /* a GPU: a 512x512 image in one tile */
#define DEFAULT_OVERLAP 16

typedef struct up_args {
    const char *model, *out, *device_name, *dtype_name;
    lm_device *device;
    lm_dtype dtype;
    int scale;
    int64_t tile, overlap;
    double range;           /* --range, 0 = from the model */
    bool quiet, verbose, overwrite, serial;
    bool show;   /* --show: each output drawn in the terminal (lua/term_image.h) */
    int nin;
    char **in;
} up_args;

static int usage(const char *msg)
{
    if (msg) fprintf(stderr, "lumen: %s\n", msg);
    fprintf(msg ? stderr : stdout,
            "usage: lumen upscale IN.png... -o OUT [options]\n"
            "  -o OUT             a file for one input; a folder for several or when OUT ends in\n"
            "                     '/' (missing folders are made, as `lumen batch` does)\n"
            "  --model NAME|PATH  a package (esrgan-slim, esrgan-medium, esrgan-thick), a package\n"
            "                     folder, a model.json or a converted .safetensors (default " DEFAULT_MODEL ")\n"
            "  --scale N          the package's models/x<N> (default %d)\n"
            "  --device D         cpu, vulkan, vulkan:N (default: $LUMEN_DEVICE or the best device)\n"
            "  --tile N           input tile side in pixels, 0 = whole image (default %d, or %d\n"
            "                     on a GPU)\n"
            "  --overlap N        context pixels around each tile (default %d)\n"
            "  --dtype T          f32, f16 or bf16 weights and computation (default f32)\n"
            "  --range 0,R        the model's value range, 0,1 or 0,255 (default: read from the\n"
            "                     package's model definition)\n"
            "  --overwrite        replace outputs that exist (never an input)\n"
            "  --serial           one image at a time: read, upscale, write (the default overlaps\n"
            "                     reading and writing PNGs with the model; LUMEN_UPSCALE_SERIAL=1)\n"
            "  -q, --quiet        no progress or per-file lines;  -v  say which model, range, device,\n"
            "                     and at the end where the time went (start, model, waits,\n"
            "                     decode, encode and write)\n"
            "  --show             draw each output in the terminal (kitty, iTerm2, sixel or half\n"
            "                     blocks; nothing when stdout is not a terminal; LUMEN_IMAGES=\n"
            "                     kitty|iterm|sixel|blocks|off chooses)\n"
            "       lumen convert ... (lumen convert --help)\n"
            "Models are looked up in $LUMEN_MODELS (colon-separated), $XDG_DATA_HOME/lumen/models,\n"
            "then beside the program (<prefix>/share/lumen/models; build/models in the build tree);\n"
            "`make models` fetches them and `make install` installs them.\n",
            DEFAULT_SCALE, DEFAULT_TILE, DEFAULT_TILE_GPU, DEFAULT_OVERLAP);
    return 2;
}

/* the quantized types convert writes: GGUF's storage types (Q8_K is
 * ggml's activation format for dot products, never a file's) */
static const lm_dtype CONVERT_QUANT[] = {LM_Q4_0, LM_Q4_1, LM_Q5_0, LM_Q5_1, LM_Q8_0,
                                         LM_Q2_K, LM_Q3_K, LM_Q4_K, LM_Q5_K, LM_Q6_K};
#define N_CONVERT_QUANT ((int)(sizeof CONVERT_QUANT / sizeof *CONVERT_QUANT))

static int usage_convert(const char *msg)
{
    FILE *f = msg ? stderr : stdout;
    if (msg) fprintf(stderr, "lumen convert: %s\n", msg);
    fprintf(f,
            "usage: lumen convert IN OUT [--quantize TYPE] [--scale N] [--overwrite]\n"
            "  The output's extension chooses the format:\n"
            "  OUT.gguf           IN (a safetensors, npz, npy or GGUF file, a single-file SD\n"
            "                     checkpoint or a diffusers folder) as GGUF; with --quantize its\n"
            "                     float weights of 2+ dimensions quantized as TYPE (the rest kept;\n"
            "                     an SD checkpoint in stable-diffusion.cpp's layout, its linear\n"
            "                     weights quantized: biases, embeddings, norms and conv kernels\n"
            "                     kept); weights already quantized as another type are\n"
            "                     requantized (from their dequantized values)\n"
            "  OUT.safetensors    a TF.js model (a package name or folder, a model.json) as the\n"
            "                     weights and topology --model reads (--scale N: the package's\n"
            "                     models/x<N>, default 4); or a tensor file (safetensors, npz, npy,\n"
            "                     GGUF) or a diffusers folder as safetensors, quantized GGUF\n"
            "                     tensors dequantized to f32 (safetensors has no quantized types)\n"
            "  --quantize TYPE    ");
    for (int i = 0; i < N_CONVERT_QUANT; i++)
        fprintf(f, "%s%s", lm_dtype_name(CONVERT_QUANT[i]), i + 1 < N_CONVERT_QUANT ? " " : "\n");
    fprintf(f, "                     (only with a .gguf output)\n"
               "  --overwrite        replace OUT if it exists (never the input)\n");
    return 2;
}

static bool parse_int(const char *s, int64_t lo, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > (1 << 20)) return false;
    *out = v;
    return true;
}

/* ---- progress on a terminal ---- */
typedef struct bar {
    const char *name;
    bool on;
} bar;

static void progress(void *ctx, int64_t done, int64_t total)
{
    bar *b = ctx;
    if (!b->on || total < 2) return;
    int width = 30, fill = (int)(done * width / total);
    fprintf(stderr, "\r%-24.24s [%.*s%*s] %lld/%lld tiles", b->name, fill,
            "##############################", width - fill, "", (long long)done, (long long)total);
    if (done == total) fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* 16 when the PNG's IHDR says 16 bits per sample */
static int png_bits(const char *path)
{
    unsigned char h[25];
    int fd = lm_io_open_read(path);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        lm_error_clear();
        return 8;
    }
    size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    return n == sizeof h && h[24] == 16 ? 16 : 8;
}

/* "lumen upscale: MESSAGE" (the message of this thread's last error),
 * without the core's own "upscale: " prefix */
static void report_fmt(char *buf, size_t n, const char *cmd, const char *what)
{
    const char *msg = lm_error_message();
    size_t k = strlen(cmd);
    if (!strncmp(msg, cmd, k) && !strncmp(msg + k, ": ", 2)) msg += k + 2;
    snprintf(buf, n, "lumen %s: %s%s%s\n", cmd, what ? what : "", what ? ": " : "", msg);
}

static void report(const char *cmd, const char *what)
{
    char buf[3072];
    report_fmt(buf, sizeof buf, cmd, what);
    fputs(buf, stderr);
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a folder" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* ---- options ---- */

/* "upscale: --tile -5: expected ..." and the usage; 2 */
static int bad_value(const char *opt, const char *val, const char *accepted)
{
    fprintf(stderr, "lumen upscale: %s %s: expected %s (lumen upscale --help lists the "
            "options)\n", opt, val, accepted);
    return 2;
}

/* --range 0,R (or R): R > 0 */
static bool parse_range(const char *s, double *r)
{
    char *end;
    double lo = 0, hi = strtod(s, &end);
    if (end != s && (*end == ',' || *end == ':')) {
        lo = hi;
        const char *h = end + 1;
        hi = strtod(h, &end);
        if (end == h) return false;
    }
    if (end == s || *end || lo != 0 || !(hi > 0) || hi > 1e9) return false;
    *r = hi;
    return true;
}

/* 0 = parsed, else the exit status (usage printed) */
static int parse_upscale(int argc, char **argv, up_args *a)
{
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        bool takes = !strcmp(s, "-o") || !strcmp(s, "--model") || !strcmp(s, "--device") ||
                     !strcmp(s, "--dtype") || !strcmp(s, "--scale") || !strcmp(s, "--tile") ||
                     !strcmp(s, "--overlap") || !strcmp(s, "--range");
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "lumen upscale: %s needs a value (lumen upscale --help lists the "
                    "options)\n", s);
            return 2;
        }
        const char *v = takes ? argv[++i] : NULL;
        int64_t n;
        if (!strcmp(s, "-o")) a->out = v;
        else if (!strcmp(s, "--model")) a->model = v;
        else if (!strcmp(s, "--device")) a->device_name = v;
        else if (!strcmp(s, "--dtype")) {
            if (!lm_dtype_from_name(v, &a->dtype) ||
                (a->dtype != LM_F32 && a->dtype != LM_F16 && a->dtype != LM_BF16))
                return bad_value(s, v, "f32, f16 or bf16 (default f32)");
            a->dtype_name = v;
        } else if (!strcmp(s, "--scale")) {
            if (!parse_int(v, 1, &n) || n > 64)
                return bad_value(s, v, "a whole number from 1, one the package has: 2, 3, 4 "
                                 "or 8 for the ESRGANs (default 4)");
            a->scale = (int)n;
        } else if (!strcmp(s, "--tile")) {
            if (!parse_int(v, 0, &n))
                return bad_value(s, v, "a whole number of pixels >= 0, 0 = the whole image "
                                 "(default 256)");
            a->tile = n;
        } else if (!strcmp(s, "--overlap")) {
            if (!parse_int(v, 0, &n))
                return bad_value(s, v, "a whole number of pixels >= 0 (default 16)");
            a->overlap = n;
        } else if (!strcmp(s, "--range")) {
            if (!parse_range(v, &a->range))
                return bad_value(s, v, "0,1 or 0,255 (0,R with R > 0)");
        } else if (!strcmp(s, "--overwrite")) a->overwrite = true;
        else if (!strcmp(s, "--serial")) a->serial = true;
        else if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) a->quiet = true;
        else if (!strcmp(s, "--show")) a->show = true;
        else if (!strcmp(s, "--verbose") || !strcmp(s, "-v")) a->verbose = true;
        else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(NULL);
            return -1;
        }
        else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "lumen upscale: unknown option %s (lumen upscale --help lists the "
                    "options)\n", s);
            return 2;
        } else a->in[a->nin++] = argv[i];
    }
    if (!a->nin || !a->out || !*a->out) return usage("upscale needs input files and -o OUT");
    if (a->device_name && !(a->device = lm_device_find(a->device_name))) {
        report("upscale", NULL);
        return 2;
    }
    return 0;
}

/* ---- where the outputs go, checked before any model runs ---- */

typedef struct plan {
    char **out;          /* one path per input */
    struct stat *in_st;  /* each input's stat */
    char dir[2048];      /* the output folder (all outputs share it) */
} plan;

static void plan_free(plan *p, int n)
{
    for (int i = 0; p->out && i < n; i++) free(p->out[i]);
    free(p->out);
    free(p->in_st);
}

/* mkdir -p; 0 or errno */
static int make_dirs(const char *dir)
{
    char p[2048];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return errno;
        *s = c;
        if (!c) break;
    }
    return is_dir(dir) ? 0 : ENOTDIR;
}

/* Why output path o cannot be written now (NULL if it can) */
static const char *output_problem(const up_args *a, const plan *p, const char *o, char *why,
                                  size_t n)
{
    struct stat sb;
    if (stat(o, &sb) != 0) return NULL;
    for (int k = 0; k < a->nin; k++)
        if (sb.st_dev == p->in_st[k].st_dev && sb.st_ino == p->in_st[k].st_ino) {
            snprintf(why, n, "%s is the input %s; lumen upscale never replaces an input", o,
                     a->in[k]);
            return why;
        }
    if (!S_ISREG(sb.st_mode)) snprintf(why, n, "%s exists and is %s", o, file_kind(sb.st_mode));
    else if (!a->overwrite) snprintf(why, n, "%s exists (--overwrite replaces it)", o);
    else return NULL;
    return why;
}

/* Every check that needs no model; 0 = all well, else the exit status */
static int plan_outputs(const up_args *a, plan *p)
{
    p->out = calloc((size_t)a->nin, sizeof *p->out);
    p->in_st = calloc((size_t)a->nin, sizeof *p->in_st);
    if (!p->out || !p->in_st) return 1;
    int bad = 0;
    for (int i = 0; i < a->nin; i++) {
        /* a FIFO or a device would block the PNG reader or never end */
        if (stat(a->in[i], &p->in_st[i]) != 0 || access(a->in[i], R_OK) != 0) {
            fprintf(stderr, "lumen upscale: %s: %s\n", a->in[i], strerror(errno));
            bad = 1;
        } else if (!S_ISREG(p->in_st[i].st_mode)) {
            fprintf(stderr, "lumen upscale: %s is %s; inputs must be PNG files\n", a->in[i],
                    file_kind(p->in_st[i].st_mode));
            bad = 1;
        }
    }
    if (bad) return 1;
    size_t ol = strlen(a->out);
    bool slash = a->out[ol - 1] == '/', to_dir = slash || is_dir(a->out);
    if (a->nin > 1 && !to_dir) {
        const char *ext = ol > 4 ? a->out + ol - 4 : "";
        struct stat sb;
        if (!strcasecmp(ext, ".png") || stat(a->out, &sb) == 0) {
            fprintf(stderr, "lumen upscale: %d inputs need a folder for -o, and %s names a "
                    "file (write %s/ for a folder of that name)\n", a->nin, a->out, a->out);
            return 2;
        }
        to_dir = true;
    }
    if (to_dir) snprintf(p->dir, sizeof p->dir, "%.*s", (int)(slash ? ol - 1 : ol), a->out);
    else {
        const char *s = strrchr(a->out, '/');
        if (s) snprintf(p->dir, sizeof p->dir, "%.*s", (int)(s - a->out), a->out);
        else snprintf(p->dir, sizeof p->dir, ".");
    }
    if (!p->dir[0]) snprintf(p->dir, sizeof p->dir, "/");
    for (int i = 0; i < a->nin; i++) {
        const char *base = strrchr(a->in[i], '/');
        base = base ? base + 1 : a->in[i];
        size_t n = strlen(p->dir) + strlen(base) + strlen(a->out) + 2;
        if (!(p->out[i] = malloc(n))) return 1;
        if (to_dir) snprintf(p->out[i], n, "%s%s%s", p->dir, !strcmp(p->dir, "/") ? "" : "/", base);
        else snprintf(p->out[i], n, "%s", a->out);
        char why[2600];
        if (output_problem(a, p, p->out[i], why, sizeof why)) {
            fprintf(stderr, "lumen upscale: %s\n", why);
            bad = 1;
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(p->out[k], p->out[i])) {
                fprintf(stderr, "lumen upscale: %s and %s would both be written to %s; give "
                        "inputs with distinct names\n", a->in[k], a->in[i], p->out[i]);
                bad = 1;
                break;
            }
    }
    if (bad) return 1;
    return lm_cli_out_dir(p->dir, a->out, "upscale");
}

/* The folder of an output made (as mkdir -p) and writable: 0, or 1 with
 * "lumen PROG: output OUT: cannot make folder DIR: why" printed.  lumen
 * upscale and lumen generate check their outputs with it before a model
 * loads (lumen batch makes its folders as it goes, lm._batch.mkdirs). */
int lm_cli_out_dir(const char *dir, const char *out, const char *prog)
{
    int e = make_dirs(dir);
    if (e) {
        fprintf(stderr, "lumen %s: output %s: cannot make folder %s: %s\n", prog, out, dir, strerror(e));
        return 1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "lumen %s: output %s: cannot write into folder %s: %s\n", prog, out, dir,
                strerror(errno));
        return 1;
    }
    return 0;
}

/* An flock on the output folder while one output is checked again and
 * renamed into place; waits for another run's write (a few seconds at
 * most), refuses after a minute.  -1 with the message printed ("lumen
 * PROG: ...").  lumen upscale and lumen generate share it. */
int lm_cli_lock_dir(const char *dir, const char *prog)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "lumen %s: %s: %s\n", prog, dir, strerror(errno));
        return -1;
    }
    for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
        if (errno != EWOULDBLOCK || tries >= 600) {
            fprintf(stderr, "lumen %s: cannot lock %s: %s\n", prog, dir,
                    errno == EWOULDBLOCK ? "another run holds it" : strerror(errno));
            close(fd);
            return -1;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

/* -v's stage clock (issue 36: where a folder's time goes), seconds of the
 * process's wall clock: the main thread's model and waits, and what the
 * reader and writer threads spent beside it (each thread adds to its own) */
typedef struct up_times {
    double model;      /* main thread: tiles, uploads, the model, downloads */
    double first;      /* the first image's share of model (pipelines, first blocks) */
    double wait_in;    /* main thread: waiting for the reader's next image */
    double wait_out;   /* main thread: waiting for the writer (LOOKAHEAD) */
    double read;       /* decoding the inputs (the reader, or --serial's main thread) */
    double write;      /* encoding and writing the outputs (the writer, or --serial) */
} up_times;

static double up_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* The model over one decoded image: a new f32 CPU array, or NULL with the
 * message ("lumen upscale: IN: ...") in err. */
static lm_array *upscale_image(lm_tfjs_model *m, const up_args *a, double range, const char *in,
                               lm_array *img, char *err, size_t nerr)
{
    const char *base = strrchr(in, '/');
    bar b = {base ? base + 1 : in, !a->quiet && isatty(2)};
    lm_upscale_opts o;
    lm_upscale_opts_init(&o);
    o.tile = a->tile;
    o.overlap = a->overlap;
    o.range = range;
    o.progress = progress;
    o.progress_ctx = &b;
    lm_array *up = lm_tfjs_upscale(m, img, &o);
    if (!up) {
        if (b.on) fputs("\r\033[K", stderr);
        report_fmt(err, nerr, "upscale", in);
    }
    return up;
}

/* Writes the result (the array up, or the plain image px) to out under
 * the folder's lock, checking again that out may be written: another run
 * may have written this name while the model ran.  0, or 1 with the
 * message in err (a failed lock has printed its own). */
static int write_result(const up_args *a, const plan *p, const char *out, lm_array *up,
                        const lm_png_f32 *px, int bits, char *err, size_t nerr)
{
    char scale[16];
    snprintf(scale, sizeof scale, "%d", a->scale);
    lm_kv text[3] = {{"Software", "lumen upscale"}, {"lumen.model", (char *)a->model},
                     {"lumen.scale", scale}};
    lm_png_opts wo;
    lm_png_opts_init(&wo);
    wo.bits = bits;
    wo.ntext = 3;
    wo.text = text;
    char why[2600];
    int fd = lm_cli_lock_dir(p->dir, "upscale");
    lm_status st = LM_ERR_IO;
    if (fd >= 0 && output_problem(a, p, out, why, sizeof why))
        snprintf(err, nerr, "lumen upscale: %s (written meanwhile by another run?); not "
                 "replaced\n", why);
    else if (fd >= 0 && (st = px ? lm_png_write_f32(out, px, &wo) : lm_png_write(out, up, &wo)) != LM_OK)
        report_fmt(err, nerr, "upscale", NULL);
    if (fd >= 0) close(fd);
    return st == LM_OK ? 0 : 1;
}

/* --show: the output is written; a terminal that cannot show it is a
 * warning.  Makes no lm_array (the pipeline's writer thread calls it). */
static void show_output(const char *out)
{
    if (lm_term_show_file(out, NULL, NULL) != LM_OK)
        fprintf(stderr, "lumen upscale: --show: %s\n", lm_error_message());
}

/* --serial: read, upscale, write, one image after the other */
static int upscale_one(lm_tfjs_model *m, const up_args *a, const plan *p, double range,
                       const char *in, const char *out, up_times *tm)
{
    double t0 = up_now();
    lm_png_opts ro;
    lm_png_opts_init(&ro);
    ro.dtype = LM_F32;
    ro.has_dtype = true;
    char err[3072] = "";
    lm_array *img = lm_png_read(in, &ro, NULL);
    double t1 = up_now();
    tm->read += t1 - t0;
    if (!img) {
        report("upscale", NULL);
        return 1;
    }
    lm_array *up = upscale_image(m, a, range, in, img, err, sizeof err);
    lm_array_release(img);
    double t2 = up_now();
    tm->model += t2 - t1;
    int rc = up ? write_result(a, p, out, up, NULL, png_bits(in), err, sizeof err) : 1;
    tm->write += up_now() - t2;
    lm_array_release(up);
    fputs(err, stderr);
    if (rc == 0 && !a->quiet) printf("%s -> %s\n", in, out);
    if (rc == 0 && a->show) show_output(out);
    return rc;
}

/* ---- the folder as a pipeline ----
 * Three threads: a reader decodes image k+1 while the main thread runs the
 * model over image k and a writer encodes and writes image k-1.  Only the
 * main thread touches arrays and devices (the core is single-threaded);
 * the reader and the writer work on plain memory (lm_png_read_f32,
 * lm_png_write_f32: the values and bytes of lm_png_read / lm_png_write),
 * so the files are the ones --serial writes.  Each stage takes the images
 * in order and runs at most LOOKAHEAD images ahead of the next, which
 * bounds memory; the writer prints every image's line or message, so they
 * come in the order of the inputs, as with --serial. */
#define LOOKAHEAD 2

typedef struct up_job {
    lm_png_f32 in;      /* the reader's decoded image (freed by the main thread) */
    lm_array *up;       /* the result, kept until written (the main thread's) */
    bool failed;        /* a stage failed: err says why */
    bool written;       /* the writer wrote it */
    char err[3072];
} up_job;

typedef struct up_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int decoded, computed, written;   /* images each stage has finished, in order */
    bool stop;                        /* no more images (Ctrl-C): the others wind down */
    up_job *job;
    const up_args *a;
    const plan *p;
    double t_read, t_write;           /* the reader's and the writer's own seconds */
} up_pipe;

/* Waits until *count > i or the pipeline stops; whether *count > i. */
static bool pipe_wait(up_pipe *q, const int *count, int i)
{
    pthread_mutex_lock(&q->mu);
    while (*count <= i && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
    bool ok = *count > i;
    pthread_mutex_unlock(&q->mu);
    return ok;
}

static void pipe_done(up_pipe *q, int *count, int i)
{
    pthread_mutex_lock(&q->mu);
    *count = i + 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static void pipe_stop(up_pipe *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Each thread touches job i only between the wait for its stage's turn and
 * its pipe_done; a stopped pipeline leaves the rest to the main thread's
 * clean-up after the joins. */
static void *reader(void *arg)
{
    up_pipe *q = arg;
    for (int i = 0; i < q->a->nin; i++) {
        if (i >= LOOKAHEAD && !pipe_wait(q, &q->computed, i - LOOKAHEAD)) break;
        up_job *j = &q->job[i];
        double t0 = up_now();
        if (lm_png_read_f32(q->a->in[i], &j->in) != LM_OK) {
            report_fmt(j->err, sizeof j->err, "upscale", NULL);
            j->failed = true;
        }
        q->t_read += up_now() - t0;
        pipe_done(q, &q->decoded, i);
    }
    return NULL;
}

static void *writer(void *arg)
{
    up_pipe *q = arg;
    for (int i = 0; i < q->a->nin; i++) {
        if (!pipe_wait(q, &q->computed, i)) break;
        up_job *j = &q->job[i];
        double t0 = up_now();
        if (!j->failed) {
            lm_png_f32 px = {j->up->shape[0], j->up->shape[1], j->up->shape[2], 0,
                             (float *)j->up->buf->host + j->up->offset};
            j->written = write_result(q->a, q->p, q->p->out[i], NULL, &px, j->in.bits, j->err,
                                      sizeof j->err) == 0;
        }
        fputs(j->err, stderr);
        if (j->written && !q->a->quiet) printf("%s -> %s\n", q->a->in[i], q->p->out[i]);
        if (j->written && q->a->show) show_output(q->p->out[i]);
        q->t_write += up_now() - t0;
        pipe_done(q, &q->written, i);
    }
    return NULL;
}

/* The main thread's part: the model over each decoded image.  Results are
 * kept (lm_sweep leaves them) until the writer has written them.  Returns
 * the number of images not written. */
static int upscale_pipelined(lm_tfjs_model *m, const up_args *a, const plan *p, double range,
                             up_times *tm)
{
    up_pipe q = {.a = a, .p = p};
    q.job = calloc((size_t)a->nin, sizeof *q.job);
    if (!q.job) {
        fprintf(stderr, "lumen upscale: out of memory\n");
        return a->nin;
    }
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    pthread_t rt, wt;
    bool have_r = pthread_create(&rt, NULL, reader, &q) == 0;
    bool have_w = have_r && pthread_create(&wt, NULL, writer, &q) == 0;
    if (!have_w)
        fprintf(stderr, "lumen upscale: cannot start the reader and writer threads (--serial "
                "needs none)\n");
    int freed = 0;
    for (int i = 0; i < a->nin && have_w; i++) {
        up_job *j = &q.job[i];
        double t0 = up_now();
        pipe_wait(&q, &q.decoded, i);
        double t1 = up_now();
        /* at most LOOKAHEAD results wait for the writer; those written go */
        if (i >= LOOKAHEAD) pipe_wait(&q, &q.written, i - LOOKAHEAD);
        double t2 = up_now();
        tm->wait_in += t1 - t0;
        tm->wait_out += t2 - t1;
        pthread_mutex_lock(&q.mu);
        int written = q.written;
        pthread_mutex_unlock(&q.mu);
        for (; freed < written; freed++) {
            lm_array_unkeep(q.job[freed].up);
            lm_array_release(q.job[freed].up);
            q.job[freed].up = NULL;
        }
        if (!j->failed) {
            int64_t shape[3] = {j->in.c, j->in.h, j->in.w};
            lm_array *img = lm_from_data(3, shape, LM_F32, j->in.data, lm_device_cpu());
            if (!img) report_fmt(j->err, sizeof j->err, "upscale", a->in[i]);
            j->up = img ? upscale_image(m, a, range, a->in[i], img, j->err, sizeof j->err) : NULL;
            lm_array_release(img);
            lm_array_keep(j->up);
            j->failed = !j->up;
        }
        free(j->in.data);
        j->in.data = NULL;
        lm_sweep();
        if (i == 0) tm->first = up_now() - t2;
        tm->model += up_now() - t2;
        pipe_done(&q, &q.computed, i);
        if (lm_cancel_requested()) break;   /* Ctrl-C: no more images */
    }
    pipe_stop(&q);   /* the reader and writer finish what they hold and end */
    double tj = up_now();
    if (have_r) pthread_join(rt, NULL);
    if (have_w) pthread_join(wt, NULL);
    tm->wait_out += up_now() - tj;   /* the last images' writes */
    tm->read = q.t_read;
    tm->write = q.t_write;
    int failed = 0;
    for (int i = 0; i < a->nin; i++) {
        failed += !q.job[i].written;
        lm_array_unkeep(q.job[i].up);
        lm_array_release(q.job[i].up);
        free(q.job[i].in.data);
    }
    pthread_cond_destroy(&q.cv);
    pthread_mutex_destroy(&q.mu);
    free(q.job);
    return failed;
}

static int cmd_upscale(int argc, char **argv)
{
    double t_start = up_now();
    up_times tm = {0};
    up_args a = {.model = DEFAULT_MODEL, .scale = DEFAULT_SCALE, .tile = -1,
                 .overlap = DEFAULT_OVERLAP, .dtype = LM_F32};
    a.in = calloc((size_t)argc, sizeof *a.in);
    if (!a.in) return 2;
    int rc = parse_upscale(argc, argv, &a);
    if (rc) {
        free(a.in);
        return rc < 0 ? 0 : rc;
    }
    /* --show: the terminal asked (and LUMEN_IMAGES read) here, before the
     * writer thread shows anything */
    lm_term_proto shown_as;
    if (a.show && lm_term_detect(&shown_as, NULL) != LM_OK) {
        fprintf(stderr, "lumen upscale: --show: %s\n", lm_error_message());
        free(a.in);
        return 2;
    }
    /* cheap checks first: the model's file, the inputs, the outputs */
    lm_tfjs_found f;
    plan p = {0};
    lm_tfjs_model *m = NULL;
    if (lm_tfjs_find(a.model, a.scale, &f) != LM_OK) {
        report("upscale", NULL);
        rc = 1;
        goto done;
    }
    if ((rc = plan_outputs(&a, &p)) != 0) goto done;
    /* the start, in two parts for -v: the library and its devices (lm_init
     * opens them), then the model (its file, the weights' upload) */
    lm_init();
    double t_dev = up_now();
    if (!(m = lm_tfjs_load(f.path, a.device)) ||
        (a.dtype_name && lm_tfjs_set_dtype(m, a.dtype) != LM_OK)) {
        report("upscale", NULL);
        rc = 1;
        goto done;
    }
    /* unless --tile: smaller tiles bound the working memory, larger ones
     * recompute less of the overlap and dispatch fewer kernels (on the H100,
     * esrgan-thick x2 over a 512x512 image took 84 ms in 256-tiles and 52 ms
     * whole); a GPU's own memory takes a 512 tile */
    if (a.tile < 0) {
        const char *kind = lm_tfjs_device(m)->kind;
        size_t n = strlen(kind);
        bool gpu = n > 4 && !strcmp(kind + n - 4, "-gpu") && strcmp(kind, "cpu-gpu");
        a.tile = gpu ? DEFAULT_TILE_GPU : DEFAULT_TILE;
    }
    double range = f.range;
    const char *from = f.range_from, *r = lm_tfjs_meta(m, "lumen.range");
    if (r) range = atof(r), from = "the converted file's lumen.range";
    if (a.range > 0) range = a.range, from = "--range";
    if (lm_tfjs_scale(m) != a.scale)
        fprintf(stderr, "lumen upscale: note: %s scales by %lld, not %d\n", f.path,
                (long long)lm_tfjs_scale(m), a.scale), a.scale = (int)lm_tfjs_scale(m);
    if (a.verbose)
        fprintf(stderr, "lumen upscale: model %s x%d, range 0..%g (%s), %s, tile %lld overlap "
                "%lld\n", f.path, a.scale, range, from, lm_tfjs_device(m)->spec,
                (long long)a.tile, (long long)a.overlap);
    int failed = 0;
    const char *ser = getenv("LUMEN_UPSCALE_SERIAL");
    bool serial = a.serial || (ser && *ser && strcmp(ser, "0"));
    double t_loaded = up_now();
    if (serial)
        for (int i = 0; i < a.nin; i++) {
            failed += upscale_one(m, &a, &p, range, a.in[i], p.out[i], &tm) != 0;
            lm_sweep();
        }
    else
        failed = upscale_pipelined(m, &a, &p, range, &tm);
    rc = failed ? 1 : 0;
    if (a.verbose) {
        double t_end = up_now();
        if (serial)
            fprintf(stderr, "lumen upscale: %d images in %.3f s: start %.3f s (the device, the "
                    "model), then one at a time: decode %.3f s, model %.3f s, encode and write "
                    "%.3f s\n", a.nin, t_end - t_start, t_loaded - t_start, tm.read, tm.model,
                    tm.write);
        else
            fprintf(stderr, "lumen upscale: %d images in %.3f s: start %.3f s (the devices %.3f s, "
                    "the model %.3f s), model %.3f s (the first image %.3f s), waiting for the reader "
                    "%.3f s and the writer %.3f s; beside the model, decode %.3f s, encode and write "
                    "%.3f s\n", a.nin, t_end - t_start, t_loaded - t_start, t_dev - t_start,
                    t_loaded - t_dev, tm.model, tm.first, tm.wait_in, tm.wait_out, tm.read, tm.write);
    }
    if (!a.quiet)
        printf("%d of %d written (%s x%d, range 0..%g)\n", a.nin - failed, a.nin, a.model,
               a.scale, range);
done:
    lm_tfjs_free(m);
    plan_free(&p, a.nin);
    free(a.in);
    return rc;
}

/* A single-file SD checkpoint (its keys name a UNet), which convert writes
 * in stable-diffusion.cpp's GGUF layout */
static bool sd_checkpoint(const lm_tensor_set *s)
{
    for (int i = 0; i < s->count; i++)
        if (!strncmp(s->names[i], "model.diffusion_model.", 22)) return true;
    return false;
}

/* Which tensors a quantized GGUF holds quantized: float tensors of two or
 * more dimensions whose last dimension (ggml's rows) is whole blocks of qt.
 * In an SD checkpoint that is the linear weights (attention, feed-forward,
 * time and label embeddings' MLPs, CLIP's layers): conv kernels end in their
 * kernel width (3 or 1) and stay as they are, and, as stable-diffusion.cpp
 * decides, biases and the token / position embeddings are kept too. */
static bool quantizable(const char *name, const lm_array *a, lm_dtype qt, bool sd)
{
    if (qt == LM_DTYPE_COUNT || !lm_dtype_is_float(a->dtype) || a->ndim < 2 ||
        a->shape[a->ndim - 1] % lm_dtype_block(qt))
        return false;
    size_t n = strlen(name);
    return !sd || !((n > 5 && !strcmp(name + n - 5, ".bias")) || strstr(name, "embedding"));
}

/* FILE's tensors (or a diffusers folder's, under the single file's names)
 * into OUT.gguf: those quantizable() says are quantized as
 * qt (LM_DTYPE_COUNT: none, the file as GGUF); vectors (biases, norms), odd
 * shapes and other dtypes are kept (u8/bool, which GGUF lacks, as i8/i32).
 * An SD checkpoint keeps its original names (stable-diffusion.cpp's layout)
 * and is read as the pipeline reads it first, so a file the pipeline would
 * refuse is refused here, naming the key.  The source's string metadata is
 * kept, plus lumen.source and lumen.quantize. */
static int convert_quantize(const char *in, const char *out, lm_dtype qt)
{
    lm_tensor_set s;
    /* a diffusers folder: its tensors under the single file's names */
    bool folder = is_dir(in);
    if ((folder ? lm_sd_single_from_folder(in, &s, NULL) : lm_load_file_to(in, lm_device_cpu(), &s)) != LM_OK) {
        report("convert", NULL);
        return 1;
    }
    int nq = 0, nk = 0, nre = 0, rc = 1;
    /* a Z-Image / FLUX.2 transformer under the same prefix is written as
     * any tensor file (models/dit_files.c reads it back) */
    bool sd = folder || (sd_checkpoint(&s) && lm_dit_file_family(&s) == LM_SD_UNKNOWN);
    lm_array **arr = calloc((size_t)s.count + 1, sizeof *arr);
    lm_gguf_kv *kv = calloc((size_t)s.nmeta + 2, sizeof *kv);
    if (!arr || !kv) goto done;
    if (sd && !folder) {
        lm_sd_single chk;
        lm_sd_single_opts so = {.dev = lm_device_cpu()};
        if (lm_sd_single_read_opts(in, &so, &chk) != LM_OK) {
            report("convert", NULL);
            goto done;
        }
        lm_sd_single_free(&chk);
    }
    for (int i = 0; i < s.count; i++) {
        lm_array *a = s.arrays[i], *deq = NULL;
        /* a tensor quantized as another type: requantized from its values
         * (one more rounding, as ggml's quantize --allow-requantize) */
        if (qt != LM_DTYPE_COUNT && lm_dtype_is_quant(a->dtype) && a->dtype != qt) {
            if (!(deq = lm_dequantize(a))) {
                lm_error_prefix("tensor '%s'", s.names[i]);
                report("convert", NULL);
                goto done;
            }
            if (quantizable(s.names[i], deq, qt, sd)) a = deq, nre++;
        }
        bool q = quantizable(s.names[i], a, qt, sd);
        arr[i] = q ? lm_quantize(a, qt)
                 : a->dtype == LM_U8 || a->dtype == LM_BOOL ? lm_cast(a, a->dtype == LM_U8 ? LM_I32 : LM_I8)
                                                            : lm_array_retain(s.arrays[i]);
        lm_array_release(deq);
        if (!arr[i]) {
            lm_error_prefix("tensor '%s'", s.names[i]);
            report("convert", NULL);
            goto done;
        }
        nq += q, nk += !q;
    }
    int n = 0;
    for (int i = 0; i < s.nmeta; i++) {
        if (!strcmp(s.meta[i].key, "lumen.source") || !strcmp(s.meta[i].key, "lumen.quantize")) continue;
        kv[n].key = s.meta[i].key;
        kv[n].v.type = LM_GGUF_STRING;
        kv[n].v.str.s = s.meta[i].value;
        kv[n++].v.str.len = strlen(s.meta[i].value);
    }
    kv[n] = (lm_gguf_kv){.key = "lumen.source", .v = {.type = LM_GGUF_STRING, .str = {(char *)in, strlen(in)}}};
    n++;
    const char *qn = qt == LM_DTYPE_COUNT ? "none" : lm_dtype_name(qt);
    kv[n] = (lm_gguf_kv){.key = "lumen.quantize", .v = {.type = LM_GGUF_STRING, .str = {(char *)qn, strlen(qn)}}};
    n++;
    if (s.format == LM_FORMAT_GGUF) n = 0;   /* its typed metadata is copied as it is below */
    lm_gguf_meta m = {0};
    lm_status st = LM_OK;
    if (s.format == LM_FORMAT_GGUF && (st = lm_gguf_read_meta(in, &m)) == LM_OK) {
        lm_gguf_kv *all = realloc(kv, sizeof *kv * (size_t)(m.n + 2));
        if (!all) st = lm_error_set(LM_ERR_NOMEM, "convert: out of memory");
        else {
            kv = all;
            for (int i = 0; i < m.n; i++)
                if (strcmp(m.kv[i].key, "lumen.quantize")) kv[n++] = m.kv[i];
            kv[n++] = (lm_gguf_kv){.key = "lumen.quantize", .v = {.type = LM_GGUF_STRING, .str = {(char *)qn, strlen(qn)}}};
        }
    }
    if (st == LM_OK) st = lm_save_gguf(out, s.count, (const char *const *)s.names, arr, n, kv);
    lm_gguf_meta_free(&m);
    if (st != LM_OK) report("convert", NULL);
    else {
        if (qt == LM_DTYPE_COUNT) printf("%s -> %s (%d tensors as they are)\n", in, out, nk);
        else if (nre) printf("%s -> %s (%d tensors as %s, %d of them requantized from another type; %d kept)\n",
                             in, out, nq, qn, nre, nk);
        else printf("%s -> %s (%d tensors as %s, %d kept)\n", in, out, nq, qn, nk);
        rc = 0;
    }
done:
    for (int i = 0; arr && i < s.count; i++) lm_array_release(arr[i]);
    free(arr);
    free(kv);
    lm_tensor_set_free(&s);
    return rc;
}

/* A tensor file (safetensors, npz, npy, GGUF) or a diffusers folder (its
 * single file's names) as OUT.safetensors: quantized tensors dequantized to
 * f32, string metadata kept, plus lumen.source. */
static int convert_safetensors(const char *in, const char *out)
{
    lm_tensor_set s;
    bool folder = is_dir(in);
    if ((folder ? lm_sd_single_from_folder(in, &s, NULL) : lm_load_file_to(in, lm_device_cpu(), &s)) != LM_OK) {
        report("convert", NULL);
        return 1;
    }
    int rc = 1, ndq = 0;
    lm_array **arr = calloc((size_t)s.count + 1, sizeof *arr);
    lm_kv *kv = calloc((size_t)s.nmeta + 1, sizeof *kv);
    if (!arr || !kv) {
        fprintf(stderr, "lumen convert: out of memory\n");
        goto done;
    }
    for (int i = 0; i < s.count; i++) {
        lm_array *a = s.arrays[i];
        bool q = lm_dtype_is_quant(a->dtype);
        if (!(arr[i] = q ? lm_dequantize(a) : lm_array_retain(a))) {
            lm_error_prefix("tensor '%s'", s.names[i]);
            report("convert", NULL);
            goto done;
        }
        ndq += q;
    }
    int n = 0;
    for (int i = 0; i < s.nmeta; i++)
        if (strcmp(s.meta[i].key, "lumen.source")) kv[n++] = (lm_kv){s.meta[i].key, s.meta[i].value};
    kv[n++] = (lm_kv){"lumen.source", (char *)in};
    if (lm_save_safetensors(out, s.count, (const char *const *)s.names, arr, n, kv) != LM_OK) {
        report("convert", NULL);
        goto done;
    }
    if (ndq) printf("%s -> %s (%d tensors, %d of them dequantized to f32)\n", in, out, s.count, ndq);
    else printf("%s -> %s (%d tensors as they are)\n", in, out, s.count);
    rc = 0;
done:
    for (int i = 0; arr && i < s.count; i++) lm_array_release(arr[i]);
    free(arr);
    free(kv);
    lm_tensor_set_free(&s);
    return rc;
}

/* IN is tensors (a tensor file, or a diffusers folder), not a TF.js model:
 * a safetensors file that a TF.js conversion wrote (tfjs.topology) is a
 * model, and so are folders, model.json files and package names */
static bool tensor_input(const char *in)
{
    if (is_dir(in)) {
        char mi[4096];
        snprintf(mi, sizeof mi, "%s/model_index.json", in);
        struct stat sb;
        return stat(mi, &sb) == 0;
    }
    lm_file_format fmt = lm_file_detect(in);
    lm_error_clear();
    if (fmt == LM_FORMAT_NPY || fmt == LM_FORMAT_NPZ || fmt == LM_FORMAT_GGUF) return true;
    if (fmt != LM_FORMAT_SAFETENSORS) return false;
    lm_tensor_set s;
    if (lm_load_file_to(in, lm_device_cpu(), &s) != LM_OK) {
        lm_error_clear();
        return true;    /* the tensor path's reader names what is wrong */
    }
    bool tfjs = false;
    for (int i = 0; i < s.nmeta; i++) tfjs |= !strcmp(s.meta[i].key, "tfjs.topology");
    lm_tensor_set_free(&s);
    return !tfjs;
}

static bool ends_with_ci(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcasecmp(s + a - b, suffix);
}

static int cmd_convert(int argc, char **argv)
{
    lm_dtype quant = LM_DTYPE_COUNT;
    const char *files[2] = {NULL, NULL};
    int nfiles = 0, scale = 4;
    bool overwrite = false;
    for (int i = 2; i < argc; i++) {
        int64_t v;
        if (!strcmp(argv[i], "--scale") && i + 1 < argc && parse_int(argv[i + 1], 1, &v))
            scale = (int)v, i++;
        else if (!strcmp(argv[i], "--overwrite")) overwrite = true;
        else if (!strcmp(argv[i], "--quantize") && i + 1 < argc) {
            bool known = lm_dtype_from_name_any(argv[i + 1], &quant);
            int k = 0;
            while (known && k < N_CONVERT_QUANT && CONVERT_QUANT[k] != quant) k++;
            if (!known || k == N_CONVERT_QUANT) {
                fprintf(stderr, "lumen convert: --quantize %s: %s; one of", argv[i + 1],
                        known && quant == LM_Q8_K ? "q8_k is ggml's format for activations in dot "
                        "products, not a file's" : "not a quantized type GGUF files store");
                for (k = 0; k < N_CONVERT_QUANT; k++) fprintf(stderr, " %s", lm_dtype_name(CONVERT_QUANT[k]));
                fputc('\n', stderr);
                return 2;
            }
            i++;
        }
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage_convert(NULL);
            return 0;
        }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "lumen convert: %s: unknown option, or --scale without a whole "
                    "number >= 1, or --quantize without a dtype\n", argv[i]);
            return 2;
        }
        else if (nfiles < 2) files[nfiles++] = argv[i];
        else return usage_convert("takes an input and an output file");
    }
    if (nfiles != 2) return usage_convert("takes an input and an output file");
    /* the output's extension chooses the format, before anything is read */
    bool gguf = ends_with_ci(files[1], ".gguf"), st_out = ends_with_ci(files[1], ".safetensors");
    if (!gguf && !st_out) {
        fprintf(stderr, "lumen convert: %s: the output's extension chooses the format: .gguf or "
                ".safetensors (lumen convert --help)\n", files[1]);
        return 2;
    }
    if (quant != LM_DTYPE_COUNT && !gguf) {
        fprintf(stderr, "lumen convert: --quantize %s writes GGUF (safetensors has no quantized "
                "types): name the output .gguf, not %s\n", lm_dtype_name(quant), files[1]);
        return 2;
    }
    /* an existing file is replaced only when asked, as upscale does */
    struct stat osb;
    if (!overwrite && lstat(files[1], &osb) == 0) {
        fprintf(stderr, "lumen convert: %s exists (--overwrite replaces it); not replaced\n", files[1]);
        return 1;
    }
    /* an output that is the input (another spelling, a link) is never
     * written, --overwrite or not */
    struct stat isb;
    if (lstat(files[1], &osb) == 0 && stat(files[0], &isb) == 0 && stat(files[1], &osb) == 0 &&
        isb.st_dev == osb.st_dev && isb.st_ino == osb.st_ino) {
        fprintf(stderr, "lumen convert: %s is the input %s; not replaced\n", files[1], files[0]);
        return 1;
    }
    if (gguf) return convert_quantize(files[0], files[1], quant);
    if (tensor_input(files[0])) return convert_safetensors(files[0], files[1]);
    char rs[32], ss[32];
    lm_tfjs_found f;
    char *path = f.path;
    double range = 1;
    lm_tfjs_model *m = NULL;
    if (lm_tfjs_find(files[0], scale, &f) != LM_OK ||
        (range = f.range, !(m = lm_tfjs_load(path, lm_device_cpu())))) {
        report("convert", NULL);
        return 1;
    }
    const char *r = lm_tfjs_meta(m, "lumen.range");
    snprintf(rs, sizeof rs, "%g", r ? atof(r) : range);
    snprintf(ss, sizeof ss, "%lld", (long long)lm_tfjs_scale(m));
    lm_kv kv[3] = {{"lumen.range", rs}, {"lumen.scale", ss}, {"lumen.source", path}};
    lm_status st = lm_tfjs_save(m, files[1], 3, kv);
    if (st == LM_OK)
        printf("%s -> %s (%d layers: %s)\n", path, files[1], lm_tfjs_layer_count(m), lm_tfjs_summary(m));
    else
        report("convert", NULL);
    lm_tfjs_free(m);
    return st == LM_OK ? 0 : 1;
}

int lm_cli_models(int argc, char **argv)
{
    if (argc < 2 || !argv[1]) return -1;
    bool up = !strcmp(argv[1], "upscale"), conv = !strcmp(argv[1], "convert");
    if (!up && !conv) return -1;
    if (lm_init() != LM_OK) {
        fprintf(stderr, "lumen: %s\n", lm_error_message());
        return 2;
    }
    return up ? cmd_upscale(argc, argv) : cmd_convert(argc, argv);
}
