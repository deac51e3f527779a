/* cli_files.c - `lumen compare` and `lumen inspect`: the files room on the
 * command line, for shells and CI scripts.
 *
 *   lumen compare A B [--rtol R] [--atol A] [--only PATTERN] [--allow-missing]
 *       one row per tensor (A is held against the reference B; the worst
 *       element's index counts from 1, as lm.compare's in Lua); exit 0 when
 *       everything matches, 1 on any mismatch, 2 on a usage or file error.
 *   lumen inspect FILE [--stats]
 *       names, dtypes, shapes and sizes (and min/max/mean/std); metadata. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/io/compare_sets.h"
#include "core/io/io.h"
#include "core/lumen.h"
#include "repl.h"

static void usage_to(FILE *f)
{
    fprintf(f,
            "usage: lumen compare A B [--rtol R] [--atol A] [--only PATTERN] [--allow-missing] [--]\n"
            "       lumen inspect FILE [--stats]\n"
            "compare holds each tensor of A against the one of the same name in the reference B\n"
            "and prints a row per tensor; the worst element's index counts from 1, as in Lua.\n"
            "Exit status: 0 all match, 1 a mismatch or nothing compared, 2 a usage or file error.\n");
}

static int usage(const char *msg)
{
    fprintf(stderr, "lumen: %s\n", msg);
    usage_to(stderr);
    return 2;
}

static bool asks_help(int argc, char **argv)
{
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return true;
    return false;
}

/* a tolerance: a number >= 0, inf included (lm.compare takes math.huge);
 * NaN, negatives and an overflow such as 1e309 refused */
static bool parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    if (!*s || *end || isnan(*out) || *out < 0) return false;
    return isfinite(*out) || (!errno && strpbrk(s, "iI"));
}

static int cmd_compare(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL}, *only = NULL;
    int nfiles = 0;
    bool allow_missing = false;
    lm_compare_opts o;
    lm_compare_opts_init(&o);
    bool opts = true;   /* "--" ends the options: a file may start with '-' */
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) {
            opts = false;
        } else if (!opts) {
            if (nfiles == 2) return usage("compare takes two files");
            files[nfiles++] = a;
        } else if ((!strcmp(a, "--rtol") || !strcmp(a, "--atol")) && i + 1 < argc) {
            if (!parse_num(argv[++i], a[2] == 'r' ? &o.rtol : &o.atol))
                return usage("--rtol/--atol take a non-negative number (inf too)");
        } else if (!strcmp(a, "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(a, "--allow-missing")) {
            allow_missing = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "lumen compare: unknown or incomplete option '%s'\n", a);
            usage_to(stderr);
            return 2;
        } else if (nfiles < 2) {
            files[nfiles++] = a;
        } else {
            return usage("compare takes two files");
        }
    }
    if (nfiles != 2) return usage("compare takes two files");
    lm_tensor_set got;
    if (lm_load_file(files[0], &got) != LM_OK) {
        fprintf(stderr, "lumen compare: %s\n", lm_error_message());
        return 2;
    }
    lm_compare_set cs;
    lm_status st = lm_compare_file(files[1], &got, &o, only, allow_missing, &cs);
    lm_tensor_set_free(&got);
    if (st != LM_OK) {
        fprintf(stderr, "lumen compare: %s\n", lm_error_message());
        return 2;
    }
    /* 1-based, as lm.compare prints it in Lua */
    char *text = lm_compare_set_format(&cs, 1);
    printf("%s\n", text ? text : "(out of memory)");
    free(text);
    int rc = cs.ok ? 0 : 1;
    if (cs.reason[0])   /* no success: said on stderr too, naming the files */
        fprintf(stderr, "lumen compare: %s against %s: nothing compared: %s\n", files[0], files[1],
                cs.reason);
    lm_compare_set_free(&cs);
    return rc;
}

typedef struct stats { double min, max, mean, std; int64_t nan; } stats;

/* Streams the tensor in chunks so inspecting a big file stays small. */
static lm_status tensor_stats(lm_array *a, stats *s)
{
    enum { CHUNK = 1 << 18 };
    int64_t flat_shape[1] = {a->size};
    lm_array *flat = lm_reshape(a, 1, flat_shape);
    double *buf = malloc(sizeof(double) * CHUNK);
    double sum = 0, sq = 0;
    int64_t n = 0;
    s->min = INFINITY;
    s->max = -INFINITY;
    s->nan = 0;
    lm_status st = flat && buf ? LM_OK : lm_error_set(LM_ERR_NOMEM, "inspect: out of memory");
    for (int64_t i = 0; st == LM_OK && i < a->size; i += CHUNK) {
        int64_t m = a->size - i < CHUNK ? a->size - i : CHUNK;
        lm_array *part = lm_slice(flat, 0, i, i + m, 1);
        st = part ? lm_array_read(part, buf, LM_F64) : lm_error_status();
        lm_array_release(part);
        for (int64_t k = 0; st == LM_OK && k < m; k++) {
            double v = buf[k];
            if (isnan(v)) { s->nan++; continue; }
            if (v < s->min) s->min = v;
            if (v > s->max) s->max = v;
            sum += v;
            sq += v * v;
            n++;
        }
    }
    free(buf);
    lm_array_release(flat);
    s->mean = n ? sum / (double)n : NAN;
    /* an infinity makes the spread meaningless: say so rather than 0 */
    s->std = n && isfinite(s->mean) ? sqrt(fmax(0, sq / (double)n - s->mean * s->mean)) : NAN;
    return st;
}

static int cmd_inspect(int argc, char **argv)
{
    const char *file = NULL;
    bool want_stats = false;
    bool opts = true;   /* "--" ends the options: a file may start with '-' */
    for (int i = 2; i < argc; i++) {
        if (opts && !strcmp(argv[i], "--")) opts = false;
        else if (!opts) {
            if (file) return usage("inspect takes one file");
            file = argv[i];
        }
        else if (!strcmp(argv[i], "--stats")) want_stats = true;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "lumen inspect: unknown option '%s'\n", argv[i]);
            usage_to(stderr);
            return 2;
        }
        else if (!file) file = argv[i];
        else return usage("inspect takes one file");
    }
    if (!file) return usage("inspect takes one file");
    lm_tensor_set s;
    if (lm_load_file(file, &s) != LM_OK) {
        fprintf(stderr, "lumen inspect: %s\n", lm_error_message());
        return 2;
    }
    printf("%s: %s, %d tensor%s\n", file, lm_format_name(s.format), s.count, s.count == 1 ? "" : "s");
    printf("%-32s %-6s %-18s %12s%s\n", "name", "dtype", "shape", "bytes",
           want_stats ? "          min          max         mean          std" : "");
    int rc = 0;
    size_t total = 0;
    for (int i = 0; i < s.count; i++) {
        lm_array *a = s.arrays[i];
        char sh[96];
        total += lm_array_nbytes(a);
        printf("%-32s %-6s %-18s %12zu", s.names[i], lm_dtype_name(a->dtype),
               lm_shape_str(sh, sizeof sh, a->ndim, a->shape), lm_array_nbytes(a));
        stats st;
        if (want_stats && tensor_stats(a, &st) != LM_OK) {
            printf("  (%s)", lm_error_message());
            rc = 2;
        } else if (want_stats) {
            printf(" %12.5g %12.5g %12.5g %12.5g", st.min, st.max, st.mean, st.std);
            if (st.nan) printf("  (%lld NaN)", (long long)st.nan);
        }
        printf("\n");
    }
    printf("total %zu bytes\n", total);
    for (int i = 0; i < s.nmeta; i++) printf("metadata %s = %s\n", s.meta[i].key, s.meta[i].value);
    lm_tensor_set_free(&s);
    return rc;
}

/* Runs a files subcommand if argv[1] names one: returns its exit status, or
 * -1 when argv[1] is not a files subcommand. */
int lm_cli_files(int argc, char **argv)
{
    if (argc < 2 || !argv[1]) return -1;
    bool compare = !strcmp(argv[1], "compare"), inspect = !strcmp(argv[1], "inspect");
    if (!compare && !inspect) return -1;
    if (asks_help(argc, argv)) {
        usage_to(stdout);
        return 0;
    }
    if (lm_init() != LM_OK) {
        fprintf(stderr, "lumen: %s\n", lm_error_message());
        return 2;
    }
    return compare ? cmd_compare(argc, argv) : cmd_inspect(argc, argv);
}
