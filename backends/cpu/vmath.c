/* vmath.c - chooses the vmath table (vmath.h) once, at start. */
#include <cpuid.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vmath.h"

extern const lm_vmath lm_vmath_sse2, lm_vmath_avx2, lm_vmath_avx512;

const lm_vmath *lm_vm = &lm_vmath_sse2;

/* F16C from CPUID leaf 1: clang before 16 has no "f16c" for
 * __builtin_cpu_supports (and make fuzz builds with clang) */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* widest first; __builtin_cpu_supports also checks that the OS saves the
 * wider registers */
static bool runs(const lm_vmath *t)
{
    __builtin_cpu_init();
    if (t == &lm_vmath_avx512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && has_f16c();
    if (t == &lm_vmath_avx2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    return true;
}

static const lm_vmath *const tables[] = {&lm_vmath_avx512, &lm_vmath_avx2, &lm_vmath_sse2};

const lm_vmath *lm_vmath_get(const char *isa)
{
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (isa && !strcmp(isa, tables[i]->name)) return runs(tables[i]) ? tables[i] : NULL;
    return NULL;
}

void lm_vmath_use(const lm_vmath *t)
{
    if (t) lm_vm = t;
}

void lm_vmath_init(void)
{
    static bool done;
    if (done) return;
    done = true;
    const lm_vmath *best = &lm_vmath_sse2;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (runs(tables[i])) {
            best = tables[i];
            break;
        }
    const char *want = getenv("LUMEN_ISA");
    if (want && *want) {
        const lm_vmath *t = lm_vmath_get(want);
        if (t) best = t;
        else
            fprintf(stderr, "lumen: LUMEN_ISA=%s is not one this CPU runs (sse2, avx2, avx512); using %s\n",
                    want, best->name);
    }
    lm_vm = best;
}
