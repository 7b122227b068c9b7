/*
 * record_format.h: the lines of a `cupola record` file that both its writer
 * (src/record/record.c) and its reader (trace/record.c) know, defined once;
 * the format is stated in trace/record.h and docs/API.md ("Recording a
 * program").
 *
 *     # cupola record 1: pid 4711, device 0, start_unix_ns ..., flush_ms 50
 *     Thread,Time,Action,Pointer,Size,Stream,Device,Kind,Pool,Call
 *     ...
 *     # end
 *
 * Plain C, no code: included by the recorder, which links nothing of the
 * core.
 */
#ifndef CUPOLA_TRACE_RECORD_FORMAT_H
#define CUPOLA_TRACE_RECORD_FORMAT_H

/* The first line starts so; the version follows, then ": " and the notes. */
#define CP_RECORD_MAGIC "# cupola record "
#define CP_RECORD_VERSION "1"
/* The column line (the first six columns are RMM's) */
#define CP_RECORD_HEADER "Thread,Time,Action,Pointer,Size,Stream,Device,Kind,Pool,Call"
/* The last line of a file its process closed (the reader warns without it) */
#define CP_RECORD_END "# end"

#endif /* CUPOLA_TRACE_RECORD_FORMAT_H */
