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

#include <stddef.h>

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

/* A value as every message of cupola's shows it (the binding's and the
 * core's alike): at most CP_SHOWN_MAX characters, enough to recognise a
 * misspelt name or path and short enough for one line, a UTF-8 character
 * never split (a run of stray continuation bytes ends at 4 bytes a
 * character), then "..." where it was cut; newline, tab and other control
 * bytes escaped as Lua writes them, so that a NUL or a newline inside a
 * value is seen and does not cut the message.  Writes into buf, which
 * holds CP_SHOWN_BUF bytes (every byte escaped), and returns it. */
#define CP_SHOWN_MAX 40
#define CP_SHOWN_BUF (4 * 4 * CP_SHOWN_MAX + 4)
const char *cp_shown(const char *s, size_t len, char *buf);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_ERROR_H */
