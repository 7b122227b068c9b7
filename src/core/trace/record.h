/*
 * record.h: the reader's side of `cupola record`'s files (the recorder is
 * src/record/; the format is stated in docs/API.md, "Recording a program").
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
 *
 * Plain C, internal to trace/.
 */
#ifndef CUPOLA_TRACE_RECORD_H
#define CUPOLA_TRACE_RECORD_H

#include <stdint.h>

#define CP_RECORD_MAGIC "# cupola record "
#define CP_RECORD_END "# end"
#define CP_RECORD_HEADER "Thread,Time,Action,Pointer,Size,Stream,Device,Kind,Pool,Call"

typedef struct cp_record_row {
    int replayed;   /* 1: a device allocate or free (the fields below hold) */
    int is_free;
    uint64_t thread, ptr, size, stream, pool;
    double time_us;
    uint32_t device;
} cp_record_row;

/* The first line of a recording (without its newline). */
int cp_record_is_magic(const char *line);

/* Parses one row (line without its newline; modified in place).  0 with
 * *out filled; -1 with *why (and *detail, the offending text, or NULL). */
int cp_record_parse(char *line, cp_record_row *out, const char **why, const char **detail);

#endif /* CUPOLA_TRACE_RECORD_H */
