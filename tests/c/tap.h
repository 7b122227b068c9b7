/*
 * tap.h: the TAP reporting shared by the C tests (header-only: each test is
 * one program).  Lines are "ok N - name" / "not ok N - name", failures add a
 * "#" line with the core's last message, and tap_finish() prints the
 * "# N passed, N failed" line that spec/run.lua reads and returns the exit
 * status.  Skips are reported with "# SKIP" and counted as passed.
 */
#ifndef CUPOLA_TAP_H
#define CUPOLA_TAP_H

#include <stdarg.h>
#include <stdio.h>

#include "error.h"

static int tap_n, tap_passed, tap_failed, tap_skipped;
/* When set, every name is prefixed with "group: " (a case of a table). */
static char tap_group[160];

/* One check; line (0: none) is named on failure. */
static inline void tap_vok(int cond, int line, const char *fmt, va_list ap)
{
    ++tap_n;
    if (cond)
        ++tap_passed;
    else
        ++tap_failed;
    printf("%s %d - ", cond ? "ok" : "not ok", tap_n);
    if (tap_group[0])
        printf("%s: ", tap_group);
    vprintf(fmt, ap);
    printf("\n");
    if (!cond && (line || cp_error_msg()[0])) {
        printf("#  ");
        if (line)
            printf(" line %d;", line);
        if (cp_error_msg()[0])
            printf(" last error: %s", cp_error_msg());
        printf("\n");
    }
    fflush(stdout);
}

static inline void tap_ok(int cond, const char *fmt, ...) CP_PRINTF(2, 3);
static inline void tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_vok(cond, 0, fmt, ap);
    va_end(ap);
}

static inline void tap_ok_line(int cond, int line, const char *fmt, ...) CP_PRINTF(3, 4);
static inline void tap_ok_line(int cond, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_vok(cond, line, fmt, ap);
    va_end(ap);
}

static inline void tap_skip(const char *name, const char *why)
{
    ++tap_n;
    ++tap_skipped;
    printf("ok %d - %s # SKIP %s\n", tap_n, name, why);
}

/* The closing lines; returns the process's exit status. */
static inline int tap_finish(void)
{
    printf("1..%d\n", tap_n);
    if (tap_skipped)
        printf("# %d skipped (counted as passed)\n", tap_skipped);
    printf("# %d passed, %d failed\n", tap_passed + tap_skipped, tap_failed);
    return tap_failed ? 1 : 0;
}

#endif /* CUPOLA_TAP_H */
