/*
 * error.h: status codes and the per-thread error message of the core.
 *
 * The core never raises and never prints: a failing function returns a
 * cp_status and leaves a message in a thread-local buffer, which the binding
 * turns into a Lua error (or into nil, msg, "out_of_memory").  Thread-local,
 * because stream workers and user threads may fail concurrently.
 */
#ifndef CUPOLA_ERROR_H
#define CUPOLA_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cp_status {
    CP_OK = 0,
    CP_ERR_OOM,         /* the memory is not there; callers report out_of_memory */
    CP_ERR_INVALID,     /* an argument the core rejects (misuse) */
    CP_ERR_NOT_READY,   /* an event or stream that has not completed */
    CP_ERR_UNSUPPORTED, /* the backend or device cannot do this */
    CP_ERR_BACKEND      /* any other device or OS failure */
} cp_status;

#if defined(__GNUC__)
#define CP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CP_PRINTF(a, b)
#endif

/* Stores the message for this thread and returns st, so that a failure reads
 * `return cp_error_set(CP_ERR_INVALID, "size %zu too large", n);` */
cp_status cp_error_set(cp_status st, const char *fmt, ...) CP_PRINTF(2, 3);

/* The last message stored on this thread ("" when none). */
const char *cp_error_msg(void);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_ERROR_H */
