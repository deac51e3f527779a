/* buffer_pool.c - a recording's memory, lent to it through core/memory.c's
 * buffer hook: the pool keeps what its device frees while it captures and
 * gives it back to the recording's later allocations of the same size. */
#include "internal.h"
#include "buffer_pool.h"

static lm_buffer *pool_take(void *ctx, size_t cap)
{
    lm_buffer_pool *p = ctx;
    for (lm_buffer **pp = &p->free; *pp; pp = &(*pp)->next_free)
        if ((*pp)->capacity == cap) {
            lm_buffer *b = *pp;
            *pp = b->next_free;
            b->next_free = NULL;
            return b;
        }
    return NULL;
}

static void pool_hold(void *ctx, lm_buffer *b)
{
    lm_buffer_pool *p = ctx;
    b->next_free = p->free;
    p->free = b;
}

void lm_buffer_pool_capture(lm_buffer_pool *p)
{
    lm_buffer_hook_set(p ? &(lm_buffer_hook){p->device, pool_take, pool_hold, p} : NULL);
}

void lm_buffer_pool_release(lm_buffer_pool *p)
{
    while (p->free) {
        lm_buffer *b = p->free;
        p->free = b->next_free;
        b->next_free = NULL;
        lm_buffer_recycle(b);
    }
}
