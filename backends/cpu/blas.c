/* blas.c - OpenBLAS, loaded at run time after choosing its core type.
 *
 * Debian 12's OpenBLAS 0.3.21 does not recognise recent CPUs and falls back
 * to its generic Prescott kernels (4-5x slower sgemm).  OpenBLAS reads
 * OPENBLAS_CORETYPE once, when it is loaded, so we detect the CPU's vector
 * features with cpuid, set the variable, and only then dlopen the library.
 * LUMEN_BLAS_CORE overrides the choice; an OPENBLAS_CORETYPE already set by
 * the user is respected.  Without OpenBLAS a plain C loop keeps matmul
 * working (slowly) and lm_blas_core() says "none".
 *
 * OpenBLAS runs on one thread, always: its own threading splits a GEMM by
 * the thread count and picks other kernels for the pieces, so the bits of a
 * product changed with LUMEN_THREADS (and OPENBLAS_NUM_THREADS).  Lumen's
 * pool does the parallel work instead, over tiles of C whose size depends on
 * the problem only (lm_gemm_tiling), each tile one single-threaded GEMM over
 * the whole K: the same calls, so the same bits, at any thread count. */
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
typedef void (*set_threads_fn)(int);

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
    /* one thread (see the top): also no idle OpenBLAS threads spinning
     * beside the pool's */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return LM_OK;   /* no OpenBLAS: the C fallback runs */
    /* a copy loaded before us (another library of the process) kept the
     * count it started with */
    set_threads_fn set_threads = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
    if (set_threads) set_threads(1);
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

/* ------------------------------------------------ tiles of C on the pool */

/* Tiles of at least this many multiply-adds (about 0.1 ms on one core),
 * at most MAX_TILES of them, no side cut below MIN_SIDE: on one thread the
 * tiles of a 512^3 product cost 4-7% beside one call (each call packs its
 * own A and B, and small tiles run OpenBLAS's edge kernels), 128x64 tiles
 * cost 8-10%.  Up to 64 tiles: a large product (SD's 8192x320x2560) in
 * 16 tiles gave each of 16 cores one, and the slowest core set the time
 * (13-34 ms for one shape in one call); at 64 they even out, and such
 * tiles stay far above MIN_WORK.  Tile edges stay multiples of 16, so the
 * bits are those of 16 tiles for the shapes checked. */
#define MIN_WORK (1 << 23)
#define MAX_TILES 64
#define MIN_SIDE 128

static int64_t half_side(int64_t x) { return ((x + 1) / 2 + 15) / 16 * 16; }

void lm_gemm_tiling(int64_t m, int64_t n, int64_t k, int64_t *mb, int64_t *nb)
{
    int64_t tm = m, tn = n;
    for (;;) {
        int64_t count = ((m + tm - 1) / tm) * ((n + tn - 1) / tn);
        if (count * 2 > MAX_TILES) break;
        /* halve the longer side (N first on a tie: a tile of whole rows of
         * A reads A once), as long as both halves stay worth a call */
        int64_t hm = half_side(tm), hn = half_side(tn);
        bool can_m = tm > MIN_SIDE && hm < tm, can_n = tn > MIN_SIDE && hn < tn;
        if (can_n && (tn >= tm || !can_m)) {
            if (tm * hn * k < MIN_WORK) break;
            tn = hn;
        } else if (can_m) {
            if (hm * tn * k < MIN_WORK) break;
            tm = hm;
        } else {
            break;
        }
    }
    *mb = tm;
    *nb = tn;
}

void lm_gemm_tile(bool f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                  int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc, int64_t i0,
                  int64_t j0, int64_t mb, int64_t nb)
{
    size_t esz = f64 ? 8 : 4;
    int64_t rows = m - i0 < mb ? m - i0 : mb, cols = n - j0 < nb ? n - j0 : nb;
    /* element (i, l) of op(A) is a[i*lda + l] or a[l*lda + i]; (l, j) of
     * op(B) is b[l*ldb + j] or b[j*ldb + l] */
    const char *at = (const char *)a + (ta == LM_CBLAS_NOTRANS ? i0 * lda : i0) * (int64_t)esz;
    const char *bt = (const char *)b + (tb == LM_CBLAS_NOTRANS ? j0 : j0 * ldb) * (int64_t)esz;
    char *ct = (char *)c + (i0 * ldc + j0) * (int64_t)esz;
    if (f64)
        lm_dgemm(ta, tb, (int)rows, (int)cols, (int)k, alpha, (const double *)at, (int)lda, (const double *)bt,
                 (int)ldb, beta, (double *)ct, (int)ldc);
    else
        lm_sgemm(ta, tb, (int)rows, (int)cols, (int)k, (float)alpha, (const float *)at, (int)lda,
                 (const float *)bt, (int)ldb, (float)beta, (float *)ct, (int)ldc);
}

typedef struct {
    bool f64;
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc, mb, nb, tn;
    double alpha, beta;
    const void *a, *b;
    void *c;
} tiles_ctx;

static void tiles_task(void *p, int64_t t0, int64_t t1)
{
    const tiles_ctx *t = p;
    for (int64_t i = t0; i < t1; i++)
        lm_gemm_tile(t->f64, t->ta, t->tb, t->m, t->n, t->k, t->alpha, t->a, t->lda, t->b, t->ldb, t->beta,
                     t->c, t->ldc, (i / t->tn) * t->mb, (i % t->tn) * t->nb, t->mb, t->nb);
}

void lm_gemm_tiled(bool f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    tiles_ctx t = {f64, ta, tb, m, n, k, lda, ldb, ldc, 0, 0, 0, alpha, beta, a, b, c};
    lm_gemm_tiling(m, n, k, &t.mb, &t.nb);
    t.tn = (n + t.nb - 1) / t.nb;
    lm_cpu_parallel_for(((m + t.mb - 1) / t.mb) * t.tn, 1, tiles_task, &t);
}
