/*
 * record.c: the reader of `cupola record`'s files (the recorder is
 * src/record/; the lines both know are in record_format.h; the format is
 * stated in docs/API.md, "Recording a program").
 *
 *     # cupola record 1: pid 4711, device 0, start_unix_ns ..., flush_ms 50, cupti 130000
 *     Thread,Time,Action,Pointer,Size,Stream,Device,Kind,Pool,Call
 *     4711,12.345,allocate,0x7f2a00000000,4194304,0x0,0,device,0x0,cudaMalloc
 *
 * A file is recognised by its first line ("# cupola record "); lines that
 * start with '#' are notes.  The first six columns are RMM's.  Action is
 * allocate, free, "allocate failure", map or unmap; Kind is device, managed,
 * pinned, vmm or unknown.  Only device memory that was allocated and freed
 * (Kind "device", Action allocate/free) becomes rows of the trace; every
 * other line is counted in the trace's `ignored` (managed and pinned memory,
 * vmm handles and mappings, failures), so nothing but device memory is
 * replayed.
 *
 * The recorder writes whole lines and flushes them as it goes, and "# end"
 * as the last line when its process exits.  A program killed mid-run leaves
 * a file cut anywhere (a plain file inside a line or between two, a gzip
 * stream inside a block, no trailer, no end line).  Such a file loads: every
 * line before the cut is read, a last line without its newline is dropped
 * (it may be a prefix of a longer one), and the trace carries a warning
 * (cp_trace_warning).
 */
#include "reader.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "record_format.h"
#include "text.h"

#define NCOL 10

/* The first line is read as an RMM log's (a cut there is an error); the
 * rest may end anywhere (above). */
static const cp_line_rule first_line = {1024, 1024, "line too long", CP_CUT_NEVER, 0};
static const cp_line_rule later_lines = {1024, 1024, "line too long", CP_CUT_ANY, 0};

typedef struct record_row {
    int replayed;   /* 1: a device allocate or free (the fields below hold) */
    int is_free;
    uint64_t thread, ptr, size, stream, pool;
    double time_us;
    uint32_t device;
} record_row;

/* Hexadecimal with its 0x, as the recorder writes it: at most 16 digits. */
static int hex(const char *s, uint64_t *out)
{
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return -1;
    return cp_parse_hex(s, strlen(s), 16, out) == CP_NUM_OK ? 0 : -1;
}

static int dec(const char *s, uint64_t *out, uint64_t max)
{
    return cp_parse_dec(s, strlen(s), max, out) == CP_NUM_OK ? 0 : -1;
}

/* One row (line without its newline; modified in place).  0 with *out
 * filled; -1 with *why (and *detail, the offending text, or NULL). */
static int parse(char *line, record_row *out, const char **why, const char **detail)
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
     * apart (counted as ignored). */
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

typedef struct record_state {
    int header;     /* the column line was read */
    int end;        /* ... and the end line */
} record_state;

/* One line after the first. */
static cp_status line(cp_trace_builder *b, record_state *rs, char *buf)
{
    record_row row;
    cp_tb_row r;
    const char *why, *detail;
    if (strcmp(buf, CP_RECORD_END) == 0)
        rs->end = 1;
    if (buf[0] == '#' || buf[0] == '\0')
        return CP_OK;
    if (!rs->header) {
        if (strcmp(buf, CP_RECORD_HEADER) != 0)
            return cp_error_set(CP_ERR_INVALID, "%s:%zu: expected the column line '"
                                CP_RECORD_HEADER "', found '%.80s'", b->path, b->line, buf);
        rs->header = 1;
        return CP_OK;
    }
    if (parse(buf, &row, &why, &detail) != 0)
        return cp_tb_bad(b, why, detail);
    if (!row.replayed) {
        b->t->info.ignored++;
        return CP_OK;
    }
    memset(&r, 0, sizeof r);
    r.is_free = row.is_free;
    r.ptr = row.ptr;
    r.size = row.size;
    r.stream = row.stream;
    r.thread = row.thread;
    r.time_us = row.time_us;
    return cp_tb_add(b, &r);
}

/* The file ends early: what came before loads, with a warning; a file cut
 * before its column line is refused. */
static cp_status cut(cp_trace_builder *b, const record_state *rs, size_t at, const char *gzmsg)
{
    if (!rs->header)
        return cp_error_set(CP_ERR_INVALID, "%s:%zu: a cupola record file cut before its "
                            "column line", b->path, at);
    cp_tb_cut(b, "%s:%zu: the recording is cut here (%s; the program was stopped while "
              "recording?): the %zu events before it were loaded", b->path, at,
              gzmsg ? gzmsg : "a last line without its newline", b->t->n);
    return CP_OK;
}

static cp_status load(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p)
{
    record_state rs = {0, 0};
    cp_lines l;
    cp_status st;
    int rc = CP_LINE_END;

    if (p->device > 0) /* (said of RMM's logs, whose columns the recording has) */
        return cp_error_set(CP_ERR_INVALID, "%s: device %d: an RMM log holds one device",
                            b->path, p->device);
    if ((st = cp_lines_init(&l, gz, b->path, &first_line)) != CP_OK)
        return st;
    while (st == CP_OK && (rc = cp_lines_next(&l)) == CP_LINE_OK) {
        b->line = l.line;
        if (l.line == 1)
            l.rule = &later_lines; /* the magic line (the bid read it) */
        else
            st = line(b, &rs, l.buf);
    }
    if (st == CP_OK && rc == CP_LINE_ERROR)
        st = l.st;
    else if (st == CP_OK && rc == CP_LINE_CUT)
        st = cut(b, &rs, l.line, l.cut_reason);
    else if (st == CP_OK && !rs.header)
        st = cp_error_set(CP_ERR_INVALID, "%s: a cupola record file without its column "
                          "line ('" CP_RECORD_HEADER "')", b->path);
    else if (st == CP_OK && !rs.end)
        cp_tb_cut(b, "%s: no '" CP_RECORD_END "' line: the recording stopped before its "
                  "process ended (killed, or still running): the %zu events in it were "
                  "loaded", b->path, b->t->n);
    cp_lines_fini(&l);
    return st;
}

static int bid(const cp_trace_probe *p)
{
    return !p->folder && strncmp(p->line, CP_RECORD_MAGIC, sizeof CP_RECORD_MAGIC - 1) == 0
               ? CP_BID_RECORD
               : CP_BID_NONE;
}

const cp_trace_reader cp_reader_record = {
    .name = "cupola_record",
    .what = "a cupola record file",
    .bid = bid,
    .load = load,
};
