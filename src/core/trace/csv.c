/*
 * csv.c: the reader of RMM's logging-adaptor CSV (format and rules in
 * trace.h), which bids on any file no other reader claims: one that is not
 * an RMM log is refused by its header.
 *
 *     Thread,Time,Action,Pointer,Size,Stream
 *     0,2.000,allocate,0x7f76ec000000,154389504,0x0
 */
#include "reader.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

#define HEADER "Thread,Time,Action,Pointer,Size,Stream"

/* Lines of at most 1 KiB; a truncated gzip stream is an error. */
static const cp_line_rule lines = {1024, 1024, "line too long", CP_CUT_NEVER, 0};

/* A decimal column past this reads as too big: the bound of the parser the
 * reader was first written with (a number whose last digit would take it
 * past (2^64 - 1 - 9) / 10 * 10 + 9), kept so the messages stay as they were. */
#define DEC_MAX ((UINT64_MAX - 9) / 10 * 10 + 9)

static int dec(const char *s, uint64_t *out)
{
    return cp_parse_dec(s, strlen(s), DEC_MAX, out);
}

static int hex(const char *s, uint64_t *out)
{
    return cp_parse_hex(s, strlen(s), 16, out);
}

static cp_status parse_row(cp_trace_builder *b, char *line)
{
    char *col[7];
    int ncol = 0;
    char *p = line;
    cp_tb_row r;
    char *end;
    int rc;

    memset(&r, 0, sizeof r);
    col[ncol++] = p;
    for (; *p; p++) {
        if (*p == ',') {
            *p = '\0';
            if (ncol == 7)
                break;
            col[ncol++] = p + 1;
        }
    }
    if (ncol != 6)
        return ncol < 6 ? cp_error_set(CP_ERR_INVALID, "%s:%zu: expected 6 columns "
                                       "(Thread,Time,Action,Pointer,Size,Stream), found %d",
                                       b->path, b->line, ncol)
                        : cp_error_set(CP_ERR_INVALID, "%s:%zu: expected 6 columns, found more",
                                       b->path, b->line);
    if ((rc = dec(col[0], &r.thread)) == CP_NUM_NOT)
        return cp_tb_bad(b, "thread is not a decimal number", col[0]);
    /* Rows keep the thread in 32 bits (an OS thread id fits); a larger one
     * was cut, and 2^64-1 wrapped the thread table's key to its empty mark
     * (counted as a new thread on every row). */
    if (rc == CP_NUM_BIG || r.thread > UINT32_MAX)
        return cp_tb_bad(b, "thread is above 2^32-1", col[0]);
    errno = 0;
    r.time_us = strtod(col[1], &end);
    if (end == col[1] || *end || errno)
        return cp_tb_bad(b, "time is not a number", col[1]);
    if (!isfinite(r.time_us)) /* strtod takes "nan" and "inf" */
        return cp_tb_bad(b, "time is not a finite number", col[1]);
    if (strcmp(col[2], "allocate") == 0)
        r.is_free = 0;
    else if (strcmp(col[2], "free") == 0)
        r.is_free = 1;
    else if (strcmp(col[2], "allocate failure") == 0 || strcmp(col[2], "free failure") == 0)
        return CP_OK; /* RMM logs refused requests; they did not change the heap */
    else
        return cp_tb_bad(b, "action must be 'allocate' or 'free'", col[2]);
    if (hex(col[3], &r.ptr) != 0)
        return cp_tb_bad(b, "pointer is not a hexadecimal number", col[3]);
    if (r.ptr == 0)
        return cp_tb_bad(b, "pointer is 0", NULL);
    /* An empty Size is a missing one: allowed on a free (it takes its
     * allocation's size, like 0), refused on an allocate. */
    if (!*col[4] && r.is_free)
        r.size = 0;
    else if (!*col[4])
        return cp_tb_bad(b, "size is missing", NULL);
    else if ((rc = dec(col[4], &r.size)) != 0)
        return rc == CP_NUM_BIG ? cp_error_set(CP_ERR_INVALID, "%s:%zu: size %s is above "
                                               "2^63-1, the largest byte count a trace holds",
                                               b->path, b->line, col[4])
                                : cp_tb_bad(b, "size is not a number", col[4]);
    if (hex(col[5], &r.stream) != 0)
        return cp_tb_bad(b, "stream is not a hexadecimal number", col[5]);
    return cp_tb_add(b, &r);
}

static cp_status load(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p)
{
    cp_lines l;
    cp_status st = CP_OK;
    int rc = CP_LINE_END;

    if (p->device > 0)
        return cp_error_set(CP_ERR_INVALID, "%s: device %d: an RMM log holds one device",
                            b->path, p->device);
    if ((st = cp_lines_init(&l, gz, b->path, &lines)) != CP_OK)
        return st;
    while (st == CP_OK && (rc = cp_lines_next(&l)) == CP_LINE_OK) {
        b->line = l.line;
        if (l.line == 1) {
            if (strcmp(l.buf, HEADER) != 0)
                st = cp_error_set(CP_ERR_INVALID, "%s:1: header must be '" HEADER "', "
                                  "found '%.80s'", b->path, l.buf);
            continue;
        }
        if (l.len == 0)
            continue; /* a blank line (the end of a file often has one) */
        st = parse_row(b, l.buf);
    }
    if (st == CP_OK && rc == CP_LINE_ERROR)
        st = l.st;
    else if (st == CP_OK && l.line == 0)
        st = cp_error_set(CP_ERR_INVALID, "%s:1: empty file (expected the header '" HEADER
                          "')", b->path);
    cp_lines_fini(&l);
    return st;
}

/* Anything: the reader of last resort. */
static int bid(const cp_trace_probe *p)
{
    return p->folder ? CP_BID_NONE : CP_BID_RMM_CSV;
}

const cp_trace_reader cp_reader_rmm_csv = {
    .name = "rmm_csv",
    .what = "an RMM log (CSV)",
    .bid = bid,
    .load = load,
};
