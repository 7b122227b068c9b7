/*
 * record.c: one line of a `cupola record` file into a row (format and rules
 * in record.h; trace.c reads the lines and keeps the rows).
 */
#include "record.h"
#include "trace_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NCOL 10

int cp_record_is_magic(const char *line)
{
    return strncmp(line, CP_RECORD_MAGIC, sizeof CP_RECORD_MAGIC - 1) == 0;
}

/* Hexadecimal with its 0x, as the recorder writes it: at most 16 digits. */
static int hex(const char *s, uint64_t *out)
{
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return -1;
    return cp_trace_parse_hex(s, out);
}

static int dec(const char *s, uint64_t *out, uint64_t max)
{
    uint64_t v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (max - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

int cp_record_parse(char *line, cp_record_row *out, const char **why, const char **detail)
{
    char *col[NCOL];
    int ncol = 0, alloc, is_free, device_kind;
    char *p, *end;
    uint64_t dev;

    memset(out, 0, sizeof *out);
    *detail = NULL;
    col[ncol++] = line;
    for (p = line; *p; p++) {
        if (*p == ',') {
            if (ncol == NCOL) {
                *why = "expected 10 columns (" CP_RECORD_HEADER "), found more";
                return -1;
            }
            *p = '\0';
            col[ncol++] = p + 1;
        }
    }
    if (ncol != NCOL) {
        *why = "expected 10 columns (" CP_RECORD_HEADER ")";
        return -1;
    }
    alloc = strcmp(col[2], "allocate") == 0;
    is_free = strcmp(col[2], "free") == 0;
    if (!alloc && !is_free && strcmp(col[2], "allocate failure") != 0 &&
        strcmp(col[2], "map") != 0 && strcmp(col[2], "unmap") != 0) {
        *why = "action must be allocate, free, 'allocate failure', map or unmap";
        *detail = col[2];
        return -1;
    }
    if (strcmp(col[7], "device") != 0 && strcmp(col[7], "managed") != 0 &&
        strcmp(col[7], "pinned") != 0 && strcmp(col[7], "vmm") != 0 &&
        strcmp(col[7], "unknown") != 0) {
        *why = "kind must be device, managed, pinned, vmm or unknown";
        *detail = col[7];
        return -1;
    }
    device_kind = strcmp(col[7], "device") == 0;
    if (dec(col[0], &out->thread, UINT32_MAX) != 0) {
        *why = "thread is not a decimal number below 2^32";
        *detail = col[0];
        return -1;
    }
    errno = 0;
    out->time_us = strtod(col[1], &end);
    if (end == col[1] || *end || errno || !isfinite(out->time_us)) {
        *why = "time is not a finite number";
        *detail = col[1];
        return -1;
    }
    if (hex(col[3], &out->ptr) != 0) {
        *why = "pointer is not a hexadecimal number (0x...)";
        *detail = col[3];
        return -1;
    }
    if (dec(col[4], &out->size, (uint64_t)INT64_MAX) != 0) {
        *why = "size is not a decimal number below 2^63";
        *detail = col[4];
        return -1;
    }
    if (hex(col[5], &out->stream) != 0) {
        *why = "stream is not a hexadecimal number (0x...)";
        *detail = col[5];
        return -1;
    }
    if (dec(col[6], &dev, 65535) != 0) {
        *why = "device is not a number in 0..65535";
        *detail = col[6];
        return -1;
    }
    out->device = (uint32_t)dev;
    if (hex(col[8], &out->pool) != 0) {
        *why = "pool is not a hexadecimal number (0x...)";
        *detail = col[8];
        return -1;
    }
    /* Only device memory allocated or freed is replayed; the rest is kept
     * apart (counted as ignored by the loader). */
    out->replayed = device_kind && (alloc || is_free);
    out->is_free = is_free;
    if (out->replayed && out->ptr == 0) {
        *why = "pointer is 0";
        return -1;
    }
    if (out->replayed && alloc && out->size == 0) {
        *why = "an allocate of size 0 (sizes must be positive)";
        return -1;
    }
    return 0;
}
