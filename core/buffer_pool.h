/* buffer_pool.h - the memory of a recording (core/replay.c): while a pool
 * captures, buffers of its device that are freed go to it instead of the
 * cache, still counted as active, and the recording's own later nodes take
 * them from there.  So the recording reuses memory as an evaluation does,
 * and no one else is given memory its replays will write. */
#ifndef LM_BUFFER_POOL_H
#define LM_BUFFER_POOL_H

#include "device.h"

typedef struct lm_buffer_pool {
    lm_device *device;
    lm_buffer *free;   /* freed while recording: the recording's, still counted active */
} lm_buffer_pool;
/* From now on, buffers of p->device freed go to p and allocations take from
 * p first; NULL stops.  One pool at a time, per thread. */
void lm_buffer_pool_capture(lm_buffer_pool *p);
/* Hands p's buffers back to the device's cache (no longer active). */
void lm_buffer_pool_release(lm_buffer_pool *p);

#endif
