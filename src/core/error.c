/* error.c: the per-thread message behind cp_error_set() (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char cp_errbuf[512];

cp_status cp_error_set(cp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cp_errbuf, sizeof cp_errbuf, fmt, ap);
    va_end(ap);
    return st;
}

const char *cp_error_msg(void)
{
    return cp_errbuf;
}
