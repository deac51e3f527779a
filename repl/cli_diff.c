/* cli_diff.c - `lumen diff A B`: two dumps of the same program (lm.trace,
 * LUMEN_DUMP, tools/torch_dump.py) compared tensor by tensor in execution
 * order, to find the first tensor that differs and where the error grows.
 *
 *   lumen diff A B [--rtol R] [--atol A] [--all]
 *       B is the reference.  Tensors pair by op and location, the k-th with
 *       the k-th; without a location ("-") by op and order only, and the
 *       output says so; else, for the last tensor of a location
 *       ("0012.attention.mid_block.attentions.0"), B's last tensor there.
 *       Rows for the tensors out of tolerance (--all: every tensor), the
 *       unpaired tensors of both sides named.  Exit 0 when all pairs match,
 *       1 on a difference or a tensor of A without a partner, 2 on a usage
 *       or file error.  On a terminal that can show images, the heat map
 *       of the first difference when its tensors look like an image. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/compare.h"
#include "core/io/image.h"
#include "core/io/io.h"
#include "core/lumen.h"
#include "lua/term_image.h"
#include "repl.h"

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: lumen diff A B [--rtol R] [--atol A] [--all] [--]\n"
               "compares two dumps (lm.trace, LUMEN_DUMP=path, tools/torch_dump.py) tensor by\n"
               "tensor in execution order against the reference B: the first tensor out of\n"
               "tolerance and the tensors where the error grows. Tensors pair by op and\n"
               "location (file:line or a layer name), the k-th with the k-th; tensors without\n"
               "a location by op and order only (said in the output); unpaired ones are named.\n"
               "Exit status: 0 all match, 1 a difference or a tensor of A without a partner,\n"
               "2 a usage or file error.\n");
    return rc;
}

/* "0007.add.x.lua:3" -> length of "0007.add." (0 when not a dump name) */
static size_t prefix_len(const char *name)
{
    const char *p = strchr(name, '.');
    p = p ? strchr(p + 1, '.') : NULL;
    return p ? (size_t)(p - name + 1) : 0;
}

/* How a tensor of A found its partner in B. */
enum { BY_NONE, BY_NAME, BY_PLACE, BY_ORDER, BY_LAYER };

/* One dump, its tensors in execution order: dump names start with the
 * execution index, so sorting the names gives the run's order whatever
 * order the writer (safetensors.torch sorts) put them in. */
typedef struct side {
    const lm_tensor_set *s;
    int *ord;        /* tensor indices in execution order */
    int *occ;        /* per tensor: earlier tensors with its op and location */
    int *pair;       /* per tensor: the partner's index on the other side, -1 */
    int *kord;       /* tensor indices by op and location, then execution order */
    int *lord;       /* tensor indices by location (none last), then execution order */
} side;

/* execution order: the leading index as a number (past 9999 it has more
 * digits, and "10000." sorts before "9999." as text), then the name */
static int dump_name_cmp(const char *a, const char *b)
{
    long ia = strtol(a, NULL, 10), ib = strtol(b, NULL, 10);
    return ia != ib ? (ia < ib ? -1 : 1) : strcmp(a, b);
}

static const lm_tensor_set *sort_set;
static int by_name(const void *x, const void *y)
{
    return dump_name_cmp(sort_set->names[*(const int *)x], sort_set->names[*(const int *)y]);
}

/* the location of a dump name ("x.lua:3", "mid.resnet0"); NULL for none:
 * not a dump name, or "-" (a node built where no location was set) */
static const char *loc_of(const char *name)
{
    size_t n = prefix_len(name);
    return n && name[n] && strcmp(name + n, "-") && strcmp(name + n, "?") ? name + n : NULL;
}

/* "add.x.lua:3" of "0007.add.x.lua:3": op and location */
static const char *kind_of(const char *name) { return strchr(name, '.') + 1; }

/* name and op + location equal ("0007.add." vs "0009.add.", same "x.lua:3") */
static bool same_kind(const char *x, const char *y)
{
    return prefix_len(x) && prefix_len(y) && !strcmp(kind_of(x), kind_of(y));
}

static const int *sort_rank;
/* by op and location, then execution order; names not in the dump form last */
static int by_kind(const void *x, const void *y)
{
    int i = *(const int *)x, j = *(const int *)y;
    const char *a = sort_set->names[i], *b = sort_set->names[j];
    bool da = prefix_len(a) > 0, db = prefix_len(b) > 0;
    if (da != db) return da ? -1 : 1;
    int c = da ? strcmp(kind_of(a), kind_of(b)) : 0;
    return c ? c : sort_rank[i] - sort_rank[j];
}

/* by location (tensors without one last), then execution order */
static int by_loc(const void *x, const void *y)
{
    int i = *(const int *)x, j = *(const int *)y;
    const char *a = loc_of(sort_set->names[i]), *b = loc_of(sort_set->names[j]);
    int c = a && b ? strcmp(a, b) : a ? -1 : b ? 1 : 0;
    return c ? c : sort_rank[i] - sort_rank[j];
}

static bool side_init(side *d, const lm_tensor_set *s)
{
    size_t n = (size_t)s->count + 1;
    d->s = s;
    d->ord = malloc(sizeof(int) * n);
    d->occ = malloc(sizeof(int) * n);
    d->pair = malloc(sizeof(int) * n);
    d->kord = malloc(sizeof(int) * n);
    d->lord = malloc(sizeof(int) * n);
    int *rank = malloc(sizeof(int) * n);
    if (!d->ord || !d->occ || !d->pair || !d->kord || !d->lord || !rank) {
        free(rank);
        return false;
    }
    for (int q = 0; q < s->count; q++) {
        d->ord[q] = d->kord[q] = d->lord[q] = q;
        d->pair[q] = -1;
    }
    sort_set = s;
    qsort(d->ord, (size_t)s->count, sizeof *d->ord, by_name);
    for (int q = 0; q < s->count; q++) rank[d->ord[q]] = q;
    sort_rank = rank;
    qsort(d->kord, (size_t)s->count, sizeof *d->kord, by_kind);
    qsort(d->lord, (size_t)s->count, sizeof *d->lord, by_loc);
    /* the k-th add of x.lua:3 pairs with the other run's k-th add there,
     * whatever extra nodes (a cast under f16) shift the indices */
    for (int q = 0; q < s->count; q++) {
        int i = d->kord[q];
        d->occ[i] = q > 0 && same_kind(s->names[d->kord[q - 1]], s->names[i]) ? d->occ[d->kord[q - 1]] + 1 : 0;
    }
    free(rank);
    return true;
}

/* the tensor of b with x's op and location and occurrence k, -1 if none */
static int find_kind(const side *b, const char *x, int k)
{
    int lo = 0, hi = b->s->count;
    const char *kx = kind_of(x);
    while (lo < hi) {   /* the first of b's tensors whose kind is not below x's */
        int mid = (lo + hi) / 2;
        const char *m = b->s->names[b->kord[mid]];
        if (prefix_len(m) && strcmp(kind_of(m), kx) < 0) lo = mid + 1;
        else hi = mid;
    }
    int q = lo + k;
    return q < b->s->count && same_kind(b->s->names[b->kord[q]], x) ? b->kord[q] : -1;
}

static void side_free(side *d)
{
    free(d->ord);
    free(d->occ);
    free(d->pair);
    free(d->kord);
    free(d->lord);
}

static bool same_shape(const lm_array *x, const lm_array *y)
{
    if (x->ndim != y->ndim) return false;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != y->shape[d]) return false;
    return true;
}

/* the last tensor (in execution order) of location loc, -1 if none */
static int last_of(const side *d, const char *loc)
{
    int lo = 0, hi = d->s->count;
    while (lo < hi) {   /* the first tensor whose location is past loc (or none) */
        int mid = (lo + hi) / 2;
        const char *l = loc_of(d->s->names[d->lord[mid]]);
        if (l && strcmp(l, loc) <= 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    const char *l = loc_of(d->s->names[d->lord[lo - 1]]);
    return l && !strcmp(l, loc) ? d->lord[lo - 1] : -1;
}

/* Pairs A's tensors with B's, each of B's at most once, and says how
 * (how[i] for A's tensor i):
 *  - the same op at the same location, the k-th with the k-th (BY_NAME
 *    when the names agree, else BY_PLACE: the indices moved);
 *  - tensors without a location ("-"): the k-th of an op with the other
 *    dump's k-th of that op also without one (BY_ORDER: nothing tells two
 *    programs apart there, the report says so);
 *  - a dump of another framework (tools/torch_dump.py): a location's last
 *    tensor with the other dump's last tensor there when their shapes agree
 *    (BY_LAYER: a layer's output, as lm.diff's reference pairs it);
 *  - names not in the dump form: the same name. */
/* written by another framework (tools/torch_dump.py): its names are
 * modules, not ops, so its tensors pair by layer only (a module "attention"
 * is not Lumen's attention op of that scope, nor is index 7 Lumen's 7th) */
static bool foreign(const lm_tensor_set *s)
{
    for (int i = 0; i < s->nmeta; i++)
        if (!strcmp(s->meta[i].key, "writer")) return strncmp(s->meta[i].value, "lumen", 5) != 0;
    return false;
}

static void pair_all(side *a, side *b, int *how)
{
    const lm_tensor_set *sa = a->s, *sb = b->s;
    bool kinds = !foreign(sa) && !foreign(sb);
    for (int i = 0; i < sa->count; i++) {
        how[i] = BY_NONE;
        const char *x = sa->names[i];
        int j = -1;
        if (!prefix_len(x)) {
            j = lm_tensor_set_find(sb, x);
        } else if (kinds) {
            j = find_kind(b, x, a->occ[i]);
            if (j >= 0 && !same_shape(sa->arrays[i], sb->arrays[j])) j = -1;   /* not the same tensor */
        }
        if (j < 0 || b->pair[j] >= 0) continue;
        how[i] = !loc_of(x) && prefix_len(x) ? BY_ORDER : !strcmp(x, sb->names[j]) ? BY_NAME : BY_PLACE;
        a->pair[i] = j;
        b->pair[j] = i;
    }
    for (int i = 0; i < sa->count; i++) {
        const char *loc = loc_of(sa->names[i]);
        if (a->pair[i] >= 0 || !loc || last_of(a, loc) != i) continue;
        int j = last_of(b, loc);
        if (j < 0 || b->pair[j] >= 0 || !same_shape(sa->arrays[i], sb->arrays[j])) continue;
        how[i] = BY_LAYER;
        a->pair[i] = j;
        b->pair[j] = i;
    }
}

/* "unpaired: 3 of A's 9 tensors (a.st): n1, n2, n3" (the first five) */
static void print_unpaired(const side *d, const char *file, const char *which, int count)
{
    if (!count) return;
    printf("unpaired: %d of %s %d tensors (%s) pair with none of the other's:", count, which, d->s->count, file);
    int shown = 0;
    for (int q = 0; q < d->s->count && shown < 5; q++) {
        int i = d->ord[q];
        if (d->pair[i] >= 0) continue;
        printf("%s %s", shown ? "," : "", d->s->names[i]);
        shown++;
    }
    printf("%s\n", count > shown ? ", ... (--all lists every one)" : "");
}

/* The heat map of where a differs from its reference b, drawn in the
 * terminal when they look like an image ([H,W], [C,H,W], [1,C,H,W]) and
 * the terminal can show one (lua/term_image.h: not when stdout is a file
 * or a pipe, nor with LUMEN_IMAGES=off).  A problem here is a warning. */
static void show_heat(const char *name, lm_array *a, lm_array *b)
{
    lm_term_proto p;
    if (lm_term_detect(&p, NULL) != LM_OK) {
        fprintf(stderr, "lumen diff: %s\n", lm_error_message());
        return;
    }
    if (p == LM_TERM_OFF || a->ndim < 2 || a->ndim > 4 || a->ndim != b->ndim ||
        (a->ndim == 4 && a->shape[0] != 1))
        return;
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k]) return;
    int d = a->ndim == 4 ? 1 : 0;
    if (a->ndim >= 3 && a->shape[d] > 4) return;   /* feature maps, not an image */
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/lumen-diff-XXXXXX.png", tmp && *tmp ? tmp : "/tmp");
    int fd = n > 0 && (size_t)n < sizeof path ? mkstemps(path, 4) : -1;
    if (fd < 0) {
        fprintf(stderr, "lumen diff: no temporary file for the heat map of %s\n", name);
        return;
    }
    close(fd);
    lm_array *a3 = a->ndim == 4 ? lm_reshape(a, 3, a->shape + 1) : lm_array_retain(a);
    lm_array *b3 = b->ndim == 4 ? lm_reshape(b, 3, b->shape + 1) : lm_array_retain(b);
    lm_status st = a3 && b3 ? lm_image_diff(b3, a3, path, NAN, LM_LAYOUT_CHW, NULL) : lm_error_status();
    lm_array_release(a3);
    lm_array_release(b3);
    if (st == LM_OK) {
        printf("heat map of %s (black: equal, white: its largest error, magenta: NaN on one side):\n", name);
        st = lm_term_show_file(path, NULL, NULL);
    }
    if (st != LM_OK) fprintf(stderr, "lumen diff: heat map of %s: %s\n", name, lm_error_message());
    unlink(path);
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
    int first = -1, bad = 0, unpaired = 0, unpaired_b = 0, grow = -1, by[BY_LAYER + 1] = {0};
    double last = 0, jump = 0;
    side da = {0}, db = {0};
    int *how = malloc(sizeof(int) * ((size_t)a.count + 1));
    int rc = 2;
    if (!how || !side_init(&da, &a) || !side_init(&db, &b)) {
        fprintf(stderr, "lumen diff: out of memory\n");
        goto done;
    }
    pair_all(&da, &db, how);
    for (int q = 0; q < a.count; q++) {
        int i = da.ord[q];
        int j = da.pair[i];
        by[how[i]]++;
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
            goto done;
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
            if (strcmp(a.names[i], b.names[j]) && strlen(row) + strlen(b.names[j]) + 8 < sizeof row)
                snprintf(row + strlen(row), sizeof row - strlen(row), "  <- %s", b.names[j]);
            printf("%s\n", row);
        }
    }
    for (int q = 0; q < b.count; q++) {
        int j = db.ord[q];
        if (db.pair[j] >= 0) continue;
        unpaired_b++;
        if (all) {
            if (!headed) printf("%s\n", head);
            headed = true;
            printf("%-32s only in %s\n", b.names[j], fb);
        }
    }
    if (first >= 0) printf("first difference: %s\n", a.names[first]);
    if (first >= 0) show_heat(a.names[first], a.arrays[first], b.arrays[da.pair[first]]);
    if (grow >= 0 && jump >= 10) printf("largest growth: %s (nmse x%.3g)\n", a.names[grow], jump);
    if (by[BY_ORDER])
        printf("note: %d pairs by op and order only: those tensors record no location ('-'), so the k-th "
               "matmul pairs with the k-th matmul of whatever program wrote the other dump\n", by[BY_ORDER]);
    if (by[BY_PLACE] || by[BY_LAYER])
        printf("paired: %d by name, %d by op and location at another index, %d by layer (a location's last "
               "tensor)%s\n", by[BY_NAME], by[BY_PLACE], by[BY_LAYER], by[BY_ORDER] ? ", the rest by order" : "");
    print_unpaired(&da, fa, "A's", unpaired);
    print_unpaired(&db, fb, "B's", unpaired_b);
    printf("%s: %d tensors, %d out of tolerance, %d unpaired\n", bad || unpaired ? "DIFF" : "ok", a.count,
           bad, unpaired);
    rc = bad || unpaired ? 1 : 0;
done:
    free(how);
    side_free(&da);
    side_free(&db);
    lm_tensor_set_free(&a);
    lm_tensor_set_free(&b);
    return rc;
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
