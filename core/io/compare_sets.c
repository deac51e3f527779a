/* compare_sets.c - tensor sets and files against a reference (see compare_sets.h). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compare_sets.h"
#include "internal.h"


bool lm_compare_name_matches(const char *only, const char *name)
{
    if (!only || !*only) return true;
    if (strpbrk(only, "*?[")) return fnmatch(only, name, 0) == 0;
    return strstr(name, only) != NULL;
}

static lm_status push_name(char ***list, int *n, const char *name)
{
    char **l = realloc(*list, ((size_t)*n + 1) * sizeof *l);
    if (!l) return lm_error_set(LM_ERR_NOMEM, "compare: out of memory");
    *list = l;
    if (!(l[*n] = strdup(name))) return lm_error_set(LM_ERR_NOMEM, "compare: out of memory");
    (*n)++;
    return LM_OK;
}

/* The index of the one tensor `only` selects in s, or -1 (none or several). */
static int single_selected(const lm_tensor_set *s, const char *only)
{
    int found = -1;
    for (int i = 0; i < s->count; i++)
        if (lm_compare_name_matches(only, s->names[i])) {
            if (found >= 0) return -1;
            found = i;
        }
    return found;
}

lm_status lm_compare_sets(const lm_tensor_set *got, const lm_tensor_set *ref,
                          const lm_compare_opts *o, const char *only, bool allow_missing,
                          lm_compare_set *out)
{
    memset(out, 0, sizeof *out);
    out->entries = calloc((size_t)got->count + 1, sizeof *out->entries);
    if (!out->entries) return lm_error_set(LM_ERR_NOMEM, "compare: out of memory");
    lm_status st = LM_OK;
    bool ok = true;
    int single_got = single_selected(got, only), single_ref = single_selected(ref, only);
    for (int i = 0; st == LM_OK && i < got->count; i++) {
        if (!lm_compare_name_matches(only, got->names[i])) continue;
        int j = lm_tensor_set_find(ref, got->names[i]);
        if (single_got >= 0 && single_ref >= 0) j = single_ref;
        if (j < 0) {
            st = push_name(&out->extra, &out->nextra, got->names[i]);
            ok = false;
            continue;
        }
        lm_compare_entry *e = &out->entries[out->count];
        if (!(e->name = strdup(got->names[i]))) {
            st = lm_error_set(LM_ERR_NOMEM, "compare: out of memory");
            break;
        }
        out->count++;
        st = lm_compare(got->arrays[i], ref->arrays[j], o, &e->r);
        if (st != LM_OK) lm_error_prefix("%s", got->names[i]);
        ok = ok && e->r.ok;
    }
    for (int j = 0; st == LM_OK && j < ref->count && !(single_got >= 0 && single_ref >= 0); j++)
        if (lm_compare_name_matches(only, ref->names[j]) &&
            lm_tensor_set_find(got, ref->names[j]) < 0) {
            st = push_name(&out->missing, &out->nmissing, ref->names[j]);
            ok = ok && allow_missing;
        }
    /* nothing compared is no success: say why (as lm.diff's reason) */
    if (st == LM_OK && out->count == 0) {
        int ng = 0, nr = 0;
        for (int i = 0; i < got->count; i++) ng += lm_compare_name_matches(only, got->names[i]);
        for (int j = 0; j < ref->count; j++) nr += lm_compare_name_matches(only, ref->names[j]);
        if (!got->count && !ref->count)
            snprintf(out->reason, sizeof out->reason, "neither side holds a tensor");
        else if (!ng && !nr)
            snprintf(out->reason, sizeof out->reason, "only \"%.60s\" selects no name on either "
                     "side", only);
        else if (!ng)
            snprintf(out->reason, sizeof out->reason, "no tensor to hold against the reference's %d",
                     nr);
        else if (!nr)
            snprintf(out->reason, sizeof out->reason, "the reference holds no tensor%s",
                     ref->count ? " of those selected" : "");
        else
            snprintf(out->reason, sizeof out->reason, "no name is on both sides");
        ok = false;
    }
    out->ok = ok;
    if (st != LM_OK) lm_compare_set_free(out);
    return st;
}

lm_status lm_compare_file(const char *path, const lm_tensor_set *got, const lm_compare_opts *o,
                          const char *only, bool allow_missing, lm_compare_set *out)
{
    lm_tensor_set ref;
    memset(out, 0, sizeof *out);
    if (lm_load_file(path, &ref) != LM_OK) return lm_error_status();
    lm_status st = lm_compare_sets(got, &ref, o, only, allow_missing, out);
    lm_tensor_set_free(&ref);
    return st;
}

void lm_compare_set_free(lm_compare_set *s)
{
    if (!s) return;
    for (int i = 0; i < s->count; i++) free(s->entries[i].name);
    for (int i = 0; i < s->nmissing; i++) free(s->missing[i]);
    for (int i = 0; i < s->nextra; i++) free(s->extra[i]);
    free(s->entries);
    free(s->missing);
    free(s->extra);
    memset(s, 0, sizeof *s);
}

char *lm_compare_set_format(const lm_compare_set *s, int index_base)
{
    size_t cap = 256 + (size_t)(s->count + 1) * 700 + (size_t)(s->nmissing + s->nextra) * 300;
    char *buf = malloc(cap), line[512];
    if (!buf) return NULL;
    size_t l = 0;
    int bad = 0;
    lm_compare_row_header(line, sizeof line);
    lm_str_append(buf, &l, cap, "%s\n", line);
    for (int i = 0; i < s->count; i++) {
        const lm_compare_report *r = &s->entries[i].r;
        lm_compare_row(s->entries[i].name, r, line, sizeof line);
        lm_str_append(buf, &l, cap, "%s\n", line);
        if (!r->ok) bad++;
        if (!r->ok && r->has_worst) {
            char idx[128];
            lm_compare_worst_str(r, index_base, idx, sizeof idx);
            lm_str_append(buf, &l, cap, "    worst %s: %.9g vs %.9g\n", idx,
                                  r->worst_a, r->worst_b);
        }
    }
    for (int i = 0; i < s->nmissing; i++)
        lm_str_append(buf, &l, cap, "%-32.200s missing (only in the reference)\n",
                              s->missing[i]);
    for (int i = 0; i < s->nextra; i++)
        lm_str_append(buf, &l, cap, "%-32.200s extra (not in the reference)\n",
                              s->extra[i]);
    if (s->reason[0])
        lm_str_append(buf, &l, cap, "nothing compared: %s (%d missing, %d extra)", s->reason,
                      s->nmissing, s->nextra);
    else
        lm_str_append(buf, &l, cap, "%s: %d compared, %d mismatched, %d missing, %d extra",
                      s->ok ? "ok" : "MISMATCH", s->count, bad, s->nmissing, s->nextra);
    return buf;
}
