/* cpu.h - internals shared by the CPU backend's kernel files.
 *
 * Kernels receive a node whose inputs are evaluated host arrays (any strides)
 * and whose output buffer is allocated contiguous.  They return LM_OK or set
 * an error.  Long kernels poll lm_cancel_requested() between blocks. */
#ifndef LM_CPU_H
#define LM_CPU_H

#include "core/backend.h"
#include "core/lumen.h"
#include "core/compile.h"
#include "vmath.h"

/* Host address of element 0 of a (buf->host + offset * elemsize). */
static inline void *lm_cpu_ptr(const lm_array *a)
{
    return (char *)a->buf->host + a->offset * (int64_t)lm_dtype_size(a->dtype);
}

/* A contiguous copy of a converted to dtype dt, or a's own memory when it is
 * already contiguous of that dtype.  *owned receives what to free() (NULL if
 * nothing).  NULL + error on allocation failure. */
void *lm_cpu_contiguous(const lm_array *a, lm_dtype dt, void **owned);
/* a kernel's scratch memory, released with free(): from 4 MiB on, on 2 MiB
 * boundaries with transparent huge pages asked for (cpu.c); NULL when out
 * of memory */
void *lm_cpu_scratch(size_t bytes);

/* Strided gather: count elements starting at flat (row-major) index `start`
 * of the logical array (ndim, shape, strides in elements, base pointer of
 * element 0, dtype st), converted to dt into dst. */
void lm_cpu_gather(void *dst, lm_dtype dt, const void *base, lm_dtype st, int ndim,
                   const int64_t *shape, const int64_t *strides, int64_t start,
                   int64_t count);

/* lm_convert, with the half and bfloat16 pairs at the CPU's vector width
 * (vmath.h); the same results. */
void lm_cpu_convert(void *dst, lm_dtype dt, const void *src, lm_dtype st, int64_t n);

/* ---- thread pool (backends/cpu/threads.c) ---- */
typedef void (*lm_cpu_task)(void *ctx, int64_t begin, int64_t end);
/* Splits [0, n) into chunks of at least `grain` and runs fn on the pool
 * (the calling thread takes part).  Runs inline when n <= grain or when
 * called from inside a pool task. */
void lm_cpu_parallel_for(int64_t n, int64_t grain, lm_cpu_task fn, void *ctx);
int lm_cpu_threads(void);
void lm_cpu_set_threads(int n);

/* ---- BLAS (backends/cpu/blas.c): OpenBLAS loaded at run time so its core
 * type can be chosen first (Debian 12's build misdetects recent CPUs). ---- */
enum { LM_CBLAS_ROW = 101, LM_CBLAS_NOTRANS = 111, LM_CBLAS_TRANS = 112 };
/* registers the CPU device (the registry the build writes calls it: core/backend.h) */
lm_status lm_cpu_register(void);

lm_status lm_blas_init(void);
const char *lm_blas_core(void);   /* "Haswell", "SkylakeX", ... */
void lm_sgemm(int transa, int transb, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc);
void lm_dgemm(int transa, int transb, int m, int n, int k, double alpha,
              const double *a, int lda, const double *b, int ldb, double beta,
              double *c, int ldc);
/* lm_sgemm and lm_dgemm run on the calling thread.  A product split over
 * the pool is cut into tiles of C of mb x nb (a function of m, n, k only,
 * never of the thread count, so the bits do not depend on it); tile
 * (i0, j0) is lm_gemm_tile, and lm_gemm_tiled runs them all on the pool. */
void lm_gemm_tiling(int64_t m, int64_t n, int64_t k, int64_t *mb, int64_t *nb);
void lm_gemm_tile(bool f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                  int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc, int64_t i0,
                  int64_t j0, int64_t mb, int64_t nb);
void lm_gemm_tiled(bool f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* ---- kernels by family ---- */
lm_status lm_cpu_run_create(lm_device *d, lm_array *node);
lm_status lm_cpu_run_unary(lm_device *d, lm_array *node);
lm_status lm_cpu_run_binary(lm_device *d, lm_array *node);
lm_status lm_cpu_run_where(lm_device *d, lm_array *node);
lm_status lm_cpu_run_reduce(lm_device *d, lm_array *node);
lm_status lm_cpu_run_matmul(lm_device *d, lm_array *node);
lm_status lm_cpu_run_other(lm_device *d, lm_array *node);
lm_status lm_cpu_run_nn(lm_device *d, lm_array *node);     /* nn_*.c */
bool lm_cpu_supports_nn(const lm_array *node);
lm_status lm_cpu_run_fused(lm_device *d, lm_fused *group, lm_array *out);
/* Whether the fused kernel's register path (vmath chain) computes op. */
bool lm_cpu_vc_supported(lm_op op);
/* *p = the f32 unary op as a register program (vmath.h chain); false if
 * it has none. */
bool lm_cpu_vc_unary(lm_vc_prog *p, lm_op op, const lm_params *params);


/* The inverse of lm_cpu_gather for one dtype: writes count contiguous
 * elements of src to the strided destination starting at flat index start. */
void lm_cpu_scatter(void *base, lm_dtype dt, int ndim, const int64_t *shape, const int64_t *strides,
                    int64_t start, int64_t count, const void *src);
/* Copies a transposed layout ([..., R, C] with R of stride 1) to dst in
 * row-major order by cache-sized tiles; false if a has another layout. */
bool lm_cpu_transpose_copy(void *dst, const lm_array *a);
/* The same, calling fn(ctx, seg, n) on each stretch of n elements of dst
 * just written, while it is still in cache (fn works in place). */
typedef void (*lm_cpu_seg_fn)(void *ctx, void *seg, int64_t n);
bool lm_cpu_transpose_map(void *dst, const lm_array *a, lm_cpu_seg_fn fn, void *ctx);
/* dst = fn(a, b) in row-major order for a transposed 4-byte operand a and
 * a b of a's shape, either of the same layout (fn on stretches of their
 * rows as stored, then tiles transposed out) or row-major (a's tiles
 * transposed into cache, then fn with b's rows into dst); false for other
 * layouts.  fn(ctx, o, x, y, n): x from a, y from b. */
typedef void (*lm_cpu_pair_fn)(void *ctx, void *o, const void *x, const void *y, int64_t n);
bool lm_cpu_transpose_map2(void *dst, const lm_array *a, const lm_array *b, lm_cpu_pair_fn fn, void *ctx);
/* Elementwise steps on blocks, shared by the plain and fused kernels:
 * inputs and output in the compute dtype ct (f32, f64 or i64; bool-valued
 * ops write u8).  sa/sb are 1 for a block, 0 for one broadcast value. */
lm_dtype lm_cpu_compute_type(lm_dtype t);
/* false (nothing written) when the kernels have no case for op in ct */
bool lm_cpu_ew_unary(lm_op op, const lm_params *p, lm_dtype ct, void *o, const void *x, int64_t n);
bool lm_cpu_ew_binary(lm_op op, lm_dtype ct, void *o, const void *a, int sa, const void *b, int sb, int64_t n);
bool lm_cpu_ew_has(lm_op op, lm_dtype ct);   /* ct: F32, F64 or I64 */
/* The vmath table's function (lm_vm_unary) for an f32 unary op, or -1. */
int lm_cpu_vm_unary_of(lm_op op);
/* Strides of input `in` aligned to the output shape (0 on broadcast axes). */
void lm_cpu_bcast_strides(const lm_array *in, const lm_array *out, int64_t *strides);

#endif
