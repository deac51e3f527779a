/* error.h - status codes and the per-thread error message.
 *
 * Every fallible function in Lumen returns an lm_status (or NULL) and, on
 * failure, leaves a message naming the op, shapes and dtypes in a
 * thread-local buffer.  The message stays until the next failure or
 * lm_error_clear().  Nothing in the library aborts on user input. */
#ifndef LM_ERROR_H
#define LM_ERROR_H

#include <stddef.h>
#include <stdint.h>

typedef enum lm_status {
    LM_OK = 0,
    LM_ERR_ARG,         /* a bad argument: axis out of range, bad option */
    LM_ERR_SHAPE,       /* shapes that do not fit together */
    LM_ERR_DTYPE,       /* a dtype the op does not accept */
    LM_ERR_NOMEM,       /* host or device allocation failed */
    LM_ERR_LIMIT,       /* allocation past the memory limit */
    LM_ERR_IO,          /* a file could not be read or written */
    LM_ERR_FORMAT,      /* a file is malformed */
    LM_ERR_DEVICE,      /* a device failed or is lost */
    LM_ERR_UNSUPPORTED, /* an op or feature this backend lacks */
    LM_ERR_CANCELLED,   /* lm_cancel() stopped an evaluation */
    LM_ERR_STATE,       /* an object in the wrong state (freed, lazy) */
} lm_status;

/* Sets the thread's message (printf format) and returns st, so callers
 * write `return lm_error_set(LM_ERR_SHAPE, "...")`. */
lm_status lm_error_set(lm_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "op: " context, returning the status. */
lm_status lm_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *lm_error_message(void);
lm_status lm_error_status(void);
void lm_error_clear(void);
const char *lm_status_name(lm_status st);

/* Formats a shape as "[2,3,4]" into buf (always NUL-terminated); returns buf. */
const char *lm_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);

/* Cancellation: lm_cancel() may be called from a signal handler; running
 * evaluations stop between nodes (and inside long kernels) with
 * LM_ERR_CANCELLED.  lm_cancel_clear() re-arms. */
void lm_cancel(void);
void lm_cancel_clear(void);
int lm_cancel_requested(void);

#endif
