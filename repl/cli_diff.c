/* cli_diff.c - `lumen diff A B`: two dumps of the same program (lm.trace,
 * LUMEN_DUMP, tools/torch_dump.py) compared tensor by tensor in execution
 * order, to find the first tensor that differs and where the error grows.
 *
 *   lumen diff A B [--rtol R] [--atol A] [--all]
 *       B is the reference.  Tensors pair by name, else by their index
 *       prefix ("0007.") and op, else, for the last tensor of a location
 *       ("0012.attention.mid_block.attentions.0"), B's last tensor there; rows for the tensors out of tolerance
 *       (--all: every tensor).  Exit 0 when all pairs match, 1 on a
 *       difference or an unpaired tensor, 2 on a usage or file error. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/compare.h"
#include "core/io/io.h"
#include "core/lumen.h"
#include "repl.h"

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: lumen diff A B [--rtol R] [--atol A] [--all] [--]\n"
               "compares two dumps (lm.trace, LUMEN_DUMP=path, tools/torch_dump.py) tensor by\n"
               "tensor in execution order against the reference B: the first tensor out of\n"
               "tolerance and the tensors where the error grows.\n"
               "Exit status: 0 all match, 1 a difference, 2 a usage or file error.\n");
    return rc;
}

/* "0007.add.x.lua:3" -> length of "0007.add." (0 when not a dump name) */
static size_t prefix_len(const char *name)
{
    const char *p = strchr(name, '.');
    p = p ? strchr(p + 1, '.') : NULL;
    return p ? (size_t)(p - name + 1) : 0;
}

/* The same name, else the same index and op, else (a dump of another
 * framework: tools/torch_dump.py against lm.trace) a layer's output: when
 * A's tensor i is the last of its location in A, B's last tensor of that
 * location with the same shape, as lm.diff's reference pairs them. */
static bool last_at(const lm_tensor_set *s, int i, const char *loc)
{
    for (int j = 0; j < s->count; j++) {
        size_t m = prefix_len(s->names[j]);
        if (m && !strcmp(s->names[j] + m, loc) && strcmp(s->names[j], s->names[i]) > 0) return false;
    }
    return true;
}

static bool same_shape(const lm_array *x, const lm_array *y)
{
    if (x->ndim != y->ndim) return false;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != y->shape[d]) return false;
    return true;
}

static int pair_of(const lm_tensor_set *ref, const lm_tensor_set *a, int k)
{
    const char *name = a->names[k];
    int i = lm_tensor_set_find(ref, name);
    size_t n = prefix_len(name);
    for (int j = 0; i < 0 && n && j < ref->count; j++)
        if (prefix_len(ref->names[j]) == n && !strncmp(ref->names[j], name, n)) i = j;
    if (i >= 0 || !n || !last_at(a, k, name + n)) return i;
    for (int j = 0; j < ref->count; j++) {
        size_t m = prefix_len(ref->names[j]);
        if (m && !strcmp(ref->names[j] + m, name + n) && (i < 0 || strcmp(ref->names[j], ref->names[i]) > 0))
            i = j;
    }
    return i >= 0 && same_shape(a->arrays[k], ref->arrays[i]) ? i : -1;
}

static const lm_tensor_set *sort_set;
static int by_name(const void *x, const void *y)
{
    return strcmp(sort_set->names[*(const int *)x], sort_set->names[*(const int *)y]);
}

static int run(const char *fa, const char *fb, const lm_compare_opts *o, bool all)
{
    lm_tensor_set a, b;
    if (lm_load_file(fa, &a) != LM_OK) {
        fprintf(stderr, "lumen diff: %s\n", lm_error_message());
        return 2;
    }
    if (lm_load_file(fb, &b) != LM_OK) {
        fprintf(stderr, "lumen diff: %s\n", lm_error_message());
        lm_tensor_set_free(&a);
        return 2;
    }
    char head[256], row[1024];
    lm_compare_row_header(head, sizeof head);
    bool headed = false;
    int first = -1, bad = 0, unpaired = 0, grow = -1;
    double last = 0, jump = 0;
    /* dump names start with the execution index: their order is the run's,
     * whatever order the writer (safetensors.torch sorts) put them in */
    int *ord = malloc(sizeof(int) * ((size_t)a.count + 1));
    if (!ord) {
        fprintf(stderr, "lumen diff: out of memory\n");
        lm_tensor_set_free(&a);
        lm_tensor_set_free(&b);
        return 2;
    }
    for (int q = 0; q < a.count; q++) ord[q] = q;
    sort_set = &a;
    qsort(ord, (size_t)a.count, sizeof *ord, by_name);
    for (int q = 0; q < a.count; q++) {
        int i = ord[q];
        int j = pair_of(&b, &a, i);
        if (j < 0) {
            unpaired++;
            if (all) {
                if (!headed) printf("%s\n", head);
                headed = true;
                printf("%-32s only in %s\n", a.names[i], fa);
            }
            continue;
        }
        lm_compare_report r;
        if (lm_compare(a.arrays[i], b.arrays[j], o, &r) != LM_OK) {
            fprintf(stderr, "lumen diff: %s: %s\n", a.names[i], lm_error_message());
            free(ord);
            lm_tensor_set_free(&a);
            lm_tensor_set_free(&b);
            return 2;
        }
        if (!r.ok) {
            bad++;
            if (first < 0) first = i;
        }
        double e = isnan(r.nmse) ? 0 : r.nmse;
        if (last > 0 && e / last > jump) {
            jump = e / last;
            grow = i;
        }
        if (e > 0) last = e;
        if (all || !r.ok) {
            if (!headed) printf("%s\n", head);
            headed = true;
            lm_compare_row(a.names[i], &r, row, sizeof row);
            printf("%s\n", row);
        }
    }
    if (first >= 0) printf("first difference: %s\n", a.names[first]);
    if (grow >= 0 && jump >= 10) printf("largest growth: %s (nmse x%.3g)\n", a.names[grow], jump);
    free(ord);
    printf("%s: %d tensors, %d out of tolerance, %d unpaired\n", bad || unpaired ? "DIFF" : "ok", a.count,
           bad, unpaired);
    lm_tensor_set_free(&a);
    lm_tensor_set_free(&b);
    return bad || unpaired ? 1 : 0;
}

int lm_cli_diff(int argc, char **argv)
{
    if (argc < 2 || !argv[1] || strcmp(argv[1], "diff")) return -1;
    const char *files[2] = {NULL, NULL};
    int nfiles = 0;
    bool all = false, opts = true;
    lm_compare_opts o;
    lm_compare_opts_init(&o);
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        char *end;
        if (opts && !strcmp(s, "--")) opts = false;
        else if (opts && (!strcmp(s, "-h") || !strcmp(s, "--help"))) return usage(stdout, 0);
        else if (opts && !strcmp(s, "--all")) all = true;
        else if (opts && (!strcmp(s, "--rtol") || !strcmp(s, "--atol")) && i + 1 < argc) {
            double v = strtod(argv[++i], &end);
            if (*end || !(v >= 0)) {
                fprintf(stderr, "lumen diff: %s %s: a tolerance is a number >= 0 (inf accepts "
                        "everything)\n", s, argv[i]);
                return usage(stderr, 2);
            }
            if (s[2] == 'r') o.rtol = v;
            else o.atol = v;
        } else if (opts && s[0] == '-' && s[1]) {
            fprintf(stderr, "lumen diff: unknown or incomplete option '%s'\n", s);
            return usage(stderr, 2);
        } else if (nfiles < 2) files[nfiles++] = s;
        else return usage(stderr, 2);
    }
    if (nfiles != 2) return usage(stderr, 2);
    if (lm_init() != LM_OK) {
        fprintf(stderr, "lumen: %s\n", lm_error_message());
        return 2;
    }
    return run(files[0], files[1], &o, all);
}
