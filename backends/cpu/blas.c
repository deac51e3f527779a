/* blas.c - OpenBLAS, loaded at run time after choosing its core type.
 *
 * Debian 12's OpenBLAS 0.3.21 does not recognise recent CPUs and falls back
 * to its generic Prescott kernels (4-5x slower sgemm).  OpenBLAS reads
 * OPENBLAS_CORETYPE once, when it is loaded, so we detect the CPU's vector
 * features with cpuid, set the variable, and only then dlopen the library.
 * LUMEN_BLAS_CORE overrides the choice; an OPENBLAS_CORETYPE already set by
 * the user is respected.  Without OpenBLAS a plain C loop keeps matmul
 * working (slowly) and lm_blas_core() says "none". */
#include <cpuid.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu.h"

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);
typedef char *(*corename_fn)(void);

static sgemm_fn p_sgemm;
static dgemm_fn p_dgemm;
static char core[64] = "none";
static int tried;

static unsigned long long xgetbv0(void)
{
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

/* The OpenBLAS core name that best matches this CPU, or NULL to let
 * OpenBLAS decide. */
static const char *detect_core(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return NULL;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx) return NULL;
    unsigned long long xcr0 = xgetbv0();
    if ((xcr0 & 6) != 6) return NULL;             /* OS does not save YMM */
    unsigned b7 = 0, c7 = 0, d7 = 0, a7 = 0;
    __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
    int avx2 = (b7 >> 5) & 1;
    int avx512 = ((b7 >> 16) & 1) && ((b7 >> 17) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1);
    if (avx512 && (xcr0 & 0xe6) == 0xe6) return "SkylakeX";
    if (avx2 && fma) return "Haswell";
    return "Sandybridge";
}

lm_status lm_blas_init(void)
{
    if (tried) return LM_OK;
    tried = 1;
    const char *want = getenv("LUMEN_BLAS_CORE");
    if (!want || !*want) want = getenv("OPENBLAS_CORETYPE");
    if (!want || !*want) want = detect_core();
    if (want) setenv("OPENBLAS_CORETYPE", want, 1);
    if (!getenv("OPENBLAS_NUM_THREADS")) {
        char n[16];
        snprintf(n, sizeof n, "%d", lm_cpu_threads());
        setenv("OPENBLAS_NUM_THREADS", n, 0);
    }
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return LM_OK;   /* no OpenBLAS: the C fallback runs */
    p_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    p_dgemm = (dgemm_fn)dlsym(h, "cblas_dgemm");
    corename_fn cn = (corename_fn)dlsym(h, "openblas_get_corename");
    if (!p_sgemm || !p_dgemm) {
        p_sgemm = NULL;
        p_dgemm = NULL;
        return LM_OK;
    }
    snprintf(core, sizeof core, "%s", cn ? cn() : (want ? want : "unknown"));
    return LM_OK;
}

const char *lm_blas_core(void) { return core; }

#define AT(p, ld, t, i, j) ((t) == LM_CBLAS_NOTRANS ? (p)[(i) * (ld) + (j)] : (p)[(j) * (ld) + (i)])

void lm_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc)
{
    if (p_sgemm) {
        p_sgemm(LM_CBLAS_ROW, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += (double)AT(a, lda, ta, i, l) * AT(b, ldb, tb, l, j);
            c[i * ldc + j] = (float)(alpha * s + (beta != 0 ? beta * c[i * ldc + j] : 0));
        }
}

void lm_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
              const double *b, int ldb, double beta, double *c, int ldc)
{
    if (p_dgemm) {
        p_dgemm(LM_CBLAS_ROW, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += AT(a, lda, ta, i, l) * AT(b, ldb, tb, l, j);
            c[i * ldc + j] = alpha * s + (beta != 0 ? beta * c[i * ldc + j] : 0);
        }
}
