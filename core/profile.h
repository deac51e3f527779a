/* profile.h - where an evaluation's time goes, kernel by kernel.
 *
 * lm_profile_begin() opens a session; lm_profile_end() closes the innermost
 * one and hands back its rows, one per (op, kernel, shapes, dtype, device),
 * sorted by total time.  Sessions nest (up to LM_PROFILE_DEPTH): each sees
 * everything that ran while it was open.  While none is open the hooks cost
 * one test per node and a backend records nothing extra (Vulkan makes no
 * query pool, no timestamps, no barriers).
 *
 * What a row's time is: on the CPU the wall time of the node's kernel; on
 * Vulkan the GPU time of the node's dispatches from timestamp queries (timer
 * "gpu"; profiling puts a barrier before each timed dispatch so the time is
 * the kernel's own), or, where the queue cannot time, no time per node and
 * one "submit" row of host time around each submit (said in the notes).
 * Transfers between host and device are rows of their own (op "upload" /
 * "download", bytes moved, host wall time after the device is idle), so are
 * allocations that miss the buffer cache ("alloc") and GPU pipelines created
 * on first use ("pipeline"); a node its device could not run is a row on
 * device "cpu" whose kernel says "fallback from <device>" (its copies are the
 * transfer rows).
 *
 * LUMEN_PROFILE (read once, at lm_init): "1" prints a report on stderr
 * after each top-level evaluation that ran a node; "total" prints one at
 * exit over the whole run. */
#ifndef LM_PROFILE_H
#define LM_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "array.h"
#include "device.h"

#define LM_PROFILE_DEPTH 8

typedef struct lm_profile_row {
    char op[32];        /* "matmul", "fused", "upload", "download", "submit" */
    char kernel[96];    /* the backend's kernels: "matmul_tiled", "fused(add,gelu) [fz_3]", "" */
    char shape[160];    /* inputs -> output: "[64,32] [32,16] -> [64,16]"; "" for transfers */
    char dtype[24];     /* the output's; "f16->f32" where the first input's differs */
    char device[32];    /* "cpu", "vulkan:0" */
    char timer[8];      /* "gpu" (timestamps), "host" (wall time), "none" (untimed GPU work) */
    int64_t count;
    int64_t bytes;      /* transfers: bytes moved in all */
    double total_ms, min_ms, max_ms;
    double host_ms;     /* wall time of the host calls (for GPU rows: recording them) */
} lm_profile_row;

typedef struct lm_profile {
    int nrows;
    lm_profile_row *rows;   /* by total_ms, largest first */
    double total_ms;        /* the sum of the rows' total_ms */
    int64_t evals;          /* top-level evaluations that ran a node */
    char notes[256];        /* what the reader must know: "vulkan:0: no timestamps ..." */
} lm_profile;

/* Opens a session (waiting for every device first, so earlier work is not
 * counted).  LM_ERR_STATE past LM_PROFILE_DEPTH open sessions. */
lm_status lm_profile_begin(void);
/* Closes the innermost session (waiting for every device, so all of its
 * work is timed) and returns its rows; the caller frees them with
 * lm_profile_free.  NULL + error when no session is open or out of memory
 * (the session is closed either way). */
lm_profile *lm_profile_end(void);
void lm_profile_free(lm_profile *p);
/* Merges rows that differ only in what is not kept: BY_SHAPE keeps every
 * field (the rows as made), BY_KERNEL drops the shapes, BY_OP the shapes and
 * the kernels (one row per op, dtype, device and timer).  Counts, times and
 * bytes add up; the order is by total again. */
typedef enum { LM_PROFILE_BY_SHAPE, LM_PROFILE_BY_KERNEL, LM_PROFILE_BY_OP } lm_profile_by;
void lm_profile_group(lm_profile *p, lm_profile_by by);
/* The report as a table (caller frees): the first max_rows rows (all when
 * max_rows <= 0) and a line for the rest.  NULL when out of memory. */
char *lm_profile_format(const lm_profile *p, int max_rows);
/* Open sessions (0: profiling is off). */
int lm_profile_depth(void);
/* Reads LUMEN_PROFILE; lm_init calls it once. */
void lm_profile_init_env(void);

/* ---- hooks for the core's evaluation and the backends ---- */
typedef enum { LM_PROFILE_KERNEL, LM_PROFILE_FALLBACK } lm_profile_kind;
/* Around one node's execution (eval.c): the wall time between them, less
 * the transfers recorded meanwhile, is its host time.  ok=false drops it. */
void lm_profile_node_begin(const lm_array *node, lm_profile_kind kind);
void lm_profile_node_end(bool ok);
/* After an evaluation's devices are synced: settles the nodes' times into
 * the sessions; top marks the outermost evaluation (LUMEN_PROFILE=1 reports). */
void lm_profile_eval_end(bool top);
/* A backend names the kernel the current node runs (several are joined). */
void lm_profile_kernel_name(const char *name);
/* A backend that times the current node itself (a GPU) takes its handle,
 * and later reports each piece of its time; -1 when there is nothing to
 * time (no session, no node, or a node timed on the host). */
int64_t lm_profile_device_entry(void);
void lm_profile_device_time(int64_t entry, double ms);
/* Host work that is no node's kernel, as a row of its own (timer "host"):
 * op "upload"/"download" (a transfer, bytes moved), "alloc" (memory from the
 * backend on a cache miss, bytes), "pipeline" (a GPU pipeline created on first
 * use, kernel = its shader), "submit" (host time around a submit where the
 * device cannot time kernels).  Inside a node, its own host time excludes it. */
void lm_profile_host(const char *op, const char *kernel, const lm_device *d, double ms, int64_t bytes);
/* A line for the report's notes, once per session. */
void lm_profile_note(const char *text);
/* A monotonic clock in milliseconds. */
double lm_profile_now_ms(void);

#endif
