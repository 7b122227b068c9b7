/* error.c: the per-thread message behind cp_error_set() (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

const char *cp_shown(const char *s, size_t len, char *buf)
{
    size_t i, n, k = 0;
    /* n counts characters: the bytes that follow a UTF-8 lead byte go with it */
    for (i = 0, n = 0; i < len && i < 4 * CP_SHOWN_MAX &&
                       (n < CP_SHOWN_MAX || ((unsigned char)s[i] & 0xc0) == 0x80);
         i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xc0) != 0x80)
            n++;
        if (c == '\n')
            k += (size_t)snprintf(buf + k, CP_SHOWN_BUF - k, "\\n");
        else if (c == '\t')
            k += (size_t)snprintf(buf + k, CP_SHOWN_BUF - k, "\\t");
        else if (c < 0x20 || c == 0x7f)
            k += (size_t)snprintf(buf + k, CP_SHOWN_BUF - k, "\\%u", (unsigned)c);
        else
            buf[k++] = (char)c;
    }
    if (i < len) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}
