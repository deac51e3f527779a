/* replay.h - compiled calls replayed from recorded device work (what a CUDA
 * graph is to PyTorch).
 *
 * A compiled function called again with the inputs of an earlier call
 * (same devices, dtypes and shapes) need not build its graph, plan it and
 * record every kernel again: on a device whose backend can record (the
 * backend.h record_* entries) the second such call is recorded once into
 * memory the recording owns - its inputs, its outputs and every buffer its
 * evaluation used, reused inside it as an evaluation reuses them - and each
 * later call only copies its inputs in, queues the recording and copies the
 * outputs out into fresh buffers.  Calls that cannot be recorded (a host
 * fallback, a transfer, a kernel that reports index errors, profiling) run
 * as before.  The outputs of a replayed call are evaluated arrays whose work
 * is queued, as after lm_eval_async.
 *
 * Ownership: the recordings belong to the compiled function
 * (lm_compiled_free frees them); their memory is counted as active bytes of
 * the device while they live. */
#ifndef LM_REPLAY_H
#define LM_REPLAY_H

#include "array.h"
#include "device.h"

/* ---- replayed calls (core/replay.c) ---- */
typedef struct lm_replays lm_replays;
/* builds the call's lazy outputs on inputs: the output count, or < 0 with
 * the error set (compile.c's replay of the optimised graph) */
typedef int (*lm_replay_build_fn)(void *ctx, lm_array *const *inputs, lm_array **outs);
#define LM_REPLAY_NOT_HANDLED (-3)
/* A call of a compiled function through its recordings *rs (made on first
 * use): the output count with outs[0..nout) set (new references),
 * < 0 from build or -1 with the error set, or LM_REPLAY_NOT_HANDLED when
 * the call must run the ordinary way (first call with these inputs, a
 * device that cannot record, profiling, a recording that failed, replay
 * switched off, or copies that would cost more than the host time saved).
 * kernels: the kernels one call launches (lm_compiled_kernels).  consts are
 * the compiled function's captured tensors: a recording is dropped when one
 * of them was freed or written. */
int lm_replay_call(lm_replays **rs, int nin, lm_array *const *inputs, int nconst, lm_array *const *consts,
                   int nout, int kernels, lm_replay_build_fn build, void *ctx, lm_array **outs);
/* Waits for their last runs and frees them with their memory; NULL is fine. */
void lm_replays_free(lm_replays *rs);
/* Recordings made and calls replayed since the start (tests, benchmarks). */
int64_t lm_replay_recorded_count(void);
int64_t lm_replay_replayed_count(void);

#endif
