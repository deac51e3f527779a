/* error.c - the per-thread error message and the cancel flag. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "error.h"

static _Thread_local char msg[1024];
static _Thread_local lm_status last;
static volatile int cancel_flag;

lm_status lm_error_set(lm_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    last = st;
    return st;
}

lm_status lm_error_prefix(const char *fmt, ...)
{
    char pre[256], old[sizeof msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, msg, sizeof old);
    if (snprintf(msg, sizeof msg, "%s: %s", pre, old) >= (int)sizeof msg)
        msg[sizeof msg - 1] = 0;   /* truncated on purpose */
    return last;
}

const char *lm_error_message(void) { return msg[0] ? msg : "no error"; }
lm_status lm_error_status(void) { return last; }

void lm_error_clear(void)
{
    msg[0] = 0;
    last = LM_OK;
}

const char *lm_status_name(lm_status st)
{
    static const char *names[] = {
        "ok", "bad argument", "shape error", "dtype error", "out of memory",
        "memory limit", "i/o error", "format error", "device error",
        "unsupported", "cancelled", "bad state",
    };
    if ((unsigned)st < sizeof names / sizeof names[0]) return names[st];
    return "unknown";
}

const char *lm_shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t used = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, d ? ",%lld" : "%lld",
                                 (long long)shape[d]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

void lm_cancel(void) { __atomic_store_n(&cancel_flag, 1, __ATOMIC_RELAXED); }
void lm_cancel_clear(void) { __atomic_store_n(&cancel_flag, 0, __ATOMIC_RELAXED); }
int lm_cancel_requested(void) { return __atomic_load_n(&cancel_flag, __ATOMIC_RELAXED); }
