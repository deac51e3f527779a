/* cli_models.c - `lumen upscale` and `lumen convert`: the pretrained
 * TF.js upscalers (core/models/tfjs.h) on the command line.
 *
 *   lumen upscale IN.png... -o OUT [--model esrgan-slim] [--scale 4]
 *         [--device cpu|vulkan] [--tile 256] [--overlap 16] [--dtype f16] [--quiet]
 *       OUT is a file for one input, a folder (made if needed) for several
 *       or when it ends in '/'.  Alpha is kept, 16-bit input gives 16-bit
 *       output, the PNG carries the model and scale as tEXt chunks.  Exit 0
 *       when every file was written, 1 if any failed, 2 on a usage error.
 *   lumen convert MODEL OUT.safetensors [--scale 4]
 *       the converted weights and topology, which --model and
 *       lm.models.load read back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/io/io.h"
#include "core/lumen.h"
#include "core/models/tfjs.h"
#include "repl.h"

typedef struct up_args {
    const char *model, *out, *device, *dtype;
    int scale;
    int64_t tile, overlap;
    bool quiet;
    int nin;
    char **in;
} up_args;

static int usage(const char *msg)
{
    if (msg) fprintf(stderr, "lumen: %s\n", msg);
    fprintf(stderr,
            "usage: lumen upscale IN.png... -o OUT [--model NAME|PATH] [--scale N] [--device D]\n"
            "                     [--tile N] [--overlap N] [--dtype f32|f16|bf16] [--quiet]\n"
            "       lumen convert MODEL OUT.safetensors [--scale N]\n"
            "MODEL: esrgan-slim, esrgan-medium, esrgan-thick (fetched by `make models` into\n"
            "$LUMEN_MODELS or build/models), a model.json, or a converted .safetensors\n");
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
    FILE *f = fopen(path, "rb");
    if (!f) return 8;
    size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    return n == sizeof h && h[24] == 16 ? 16 : 8;
}

/* "lumen upscale: MESSAGE", without the core's own "upscale: " prefix */
static void report(const char *cmd, const char *what)
{
    const char *msg = lm_error_message();
    size_t n = strlen(cmd);
    if (!strncmp(msg, cmd, n) && !strncmp(msg + n, ": ", 2)) msg += n + 2;
    fprintf(stderr, "lumen %s: %s%s%s\n", cmd, what ? what : "", what ? ": " : "", msg);
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int upscale_one(lm_tfjs_model *m, const up_args *a, double range, const char *in,
                       const char *out)
{
    lm_png_opts ro;
    lm_png_opts_init(&ro);
    ro.dtype = LM_F32;
    ro.has_dtype = true;
    lm_array *img = lm_png_read(in, &ro, NULL);
    if (!img) {
        report("upscale", NULL);
        return 1;
    }
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
    lm_array_release(img);
    if (!up) {
        if (b.on) fputs("\r\033[K", stderr);
        report("upscale", in);
        return 1;
    }
    char scale[16];
    snprintf(scale, sizeof scale, "%d", a->scale);
    lm_kv text[3] = {{"Software", "lumen upscale"}, {"lumen.model", (char *)a->model},
                     {"lumen.scale", scale}};
    lm_png_opts wo;
    lm_png_opts_init(&wo);
    wo.bits = png_bits(in);
    wo.ntext = 3;
    wo.text = text;
    lm_status st = lm_png_write(out, up, &wo);
    lm_array_release(up);
    if (st != LM_OK) {
        report("upscale", NULL);
        return 1;
    }
    if (!a->quiet) printf("%s -> %s\n", in, out);
    return 0;
}

static int cmd_upscale(int argc, char **argv)
{
    up_args a = {.model = "esrgan-slim", .scale = 4, .tile = 256, .overlap = -1};
    a.in = calloc((size_t)argc, sizeof *a.in);
    if (!a.in) return 2;
    int rc = 0;
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        bool more = i + 1 < argc;
        int64_t v;
        if (!strcmp(s, "-o") && more) a.out = argv[++i];
        else if (!strcmp(s, "--model") && more) a.model = argv[++i];
        else if (!strcmp(s, "--device") && more) a.device = argv[++i];
        else if (!strcmp(s, "--dtype") && more) a.dtype = argv[++i];
        else if (!strcmp(s, "--scale") && more && parse_int(argv[i + 1], 1, &v)) a.scale = (int)v, i++;
        else if (!strcmp(s, "--tile") && more && parse_int(argv[i + 1], 0, &v)) a.tile = v, i++;
        else if (!strcmp(s, "--overlap") && more && parse_int(argv[i + 1], 0, &v)) a.overlap = v, i++;
        else if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) a.quiet = true;
        else if (!strcmp(s, "-h") || !strcmp(s, "--help")) { free(a.in); return usage(NULL) & 0; }
        else if (s[0] == '-' && s[1]) { free(a.in); return usage("upscale: unknown or incomplete option"); }
        else a.in[a.nin++] = argv[i];
    }
    if (!a.nin || !a.out) { free(a.in); return usage("upscale needs input files and -o OUT"); }
    size_t ol = strlen(a.out);
    bool to_dir = a.nin > 1 || a.out[ol - 1] == '/' || is_dir(a.out);
    if (to_dir && !is_dir(a.out) && mkdir(a.out, 0777) != 0) {
        fprintf(stderr, "lumen upscale: cannot make folder %s: %s\n", a.out, strerror(errno));
        free(a.in);
        return 1;
    }
    lm_device *dev = NULL;
    if (a.device && !(dev = lm_device_find(a.device))) {
        report("upscale", NULL);
        free(a.in);
        return 2;
    }
    char path[1024];
    double range;
    lm_tfjs_model *m = NULL;
    if (lm_tfjs_find(a.model, a.scale, path, sizeof path, &range) != LM_OK ||
        !(m = lm_tfjs_load(path, dev))) {
        report("upscale", NULL);
        free(a.in);
        return 1;
    }
    lm_dtype dt = LM_F32;
    bool bad_dt = a.dtype && !lm_dtype_from_name(a.dtype, &dt);
    if (bad_dt || (a.dtype && lm_tfjs_set_dtype(m, dt) != LM_OK)) {
        if (bad_dt) fprintf(stderr, "lumen upscale: --dtype %s: unknown dtype\n", a.dtype);
        else report("upscale", NULL);
        lm_tfjs_free(m);
        free(a.in);
        return 2;
    }
    const char *r = lm_tfjs_meta(m, "lumen.range");
    if (r) range = atof(r);
    if (lm_tfjs_scale(m) != a.scale)
        fprintf(stderr, "lumen upscale: note: %s scales by %lld, not %d\n", path,
                (long long)lm_tfjs_scale(m), a.scale), a.scale = (int)lm_tfjs_scale(m);
    for (int i = 0; i < a.nin; i++) {
        char out[2048];
        const char *base = strrchr(a.in[i], '/');
        base = base ? base + 1 : a.in[i];
        if (to_dir)
            snprintf(out, sizeof out, "%s%s%s", a.out, a.out[ol - 1] == '/' ? "" : "/", base);
        else
            snprintf(out, sizeof out, "%s", a.out);
        if (upscale_one(m, &a, range, a.in[i], out) != 0) rc = 1;
        lm_sweep();
    }
    lm_tfjs_free(m);
    free(a.in);
    return rc;
}

static int cmd_convert(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL};
    int nfiles = 0, scale = 4;
    for (int i = 2; i < argc; i++) {
        int64_t v;
        if (!strcmp(argv[i], "--scale") && i + 1 < argc && parse_int(argv[i + 1], 1, &v))
            scale = (int)v, i++;
        else if (argv[i][0] == '-' && argv[i][1]) return usage("convert: unknown or incomplete option");
        else if (nfiles < 2) files[nfiles++] = argv[i];
        else return usage("convert takes a model and an output file");
    }
    if (nfiles != 2) return usage("convert takes a model and an output file");
    char path[1024], rs[32], ss[32];
    double range;
    lm_tfjs_model *m = NULL;
    if (lm_tfjs_find(files[0], scale, path, sizeof path, &range) != LM_OK ||
        !(m = lm_tfjs_load(path, lm_device_cpu()))) {
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
