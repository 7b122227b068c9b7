/*
 * record.h: the recorder's core (`cupola record`), plain C with no CUDA or
 * CUPTI: what inject.c (the CUPTI callbacks) hands it, and the files it
 * writes.  Kept apart so that its logic runs on the host (tests/c/test_record.c).
 *
 * Policy:
 *  - An event costs its caller one lock and one copy of a fixed-size record
 *    into an array: no formatting, no system call.  A writer thread swaps the
 *    array every flush period (CUPOLA_RECORD_FLUSH_MS, default 50), formats
 *    the rows and writes them, gzip (gzflush Z_SYNC_FLUSH) or plain (fflush),
 *    so a program killed at any moment leaves every event older than one
 *    period in the file, readable up to the last complete line.
 *  - Files are one per process and device: the -o path "STEM.csv.gz" (or
 *    "STEM.csv", or any name: gzip exactly when it ends in ".gz") becomes
 *    "STEM.pPID.dDEV.csv.gz"; each file is opened when its first event is
 *    written and its path appended to CUPOLA_RECORD_LIST (when set) as one
 *    line, so the launcher knows what every process wrote.
 *  - A free carries no size or kind in the CUDA call: the recorder keeps the
 *    live allocations (address -> size, kind, device) and writes the free
 *    with them, in the file of the allocation's device.  A free of an address
 *    it never saw is written with kind "unknown" and size 0 in device 0's file.
 *  - After fork() the child writes nothing (its copy of the buffers and files
 *    belongs to the parent); a child that execs records afresh.
 *
 * The format (documented in docs/API.md, read by src/core/trace/record.c; the
 * lines both sides know in src/core/trace/record_format.h):
 *     # cupola record 1: pid P, device D, start_unix_ns N[, more]
 *     Thread,Time,Action,Pointer,Size,Stream,Device,Kind,Pool,Call
 *     4711,12.345,allocate,0x7f2a00000000,4194304,0x0,0,device,0x0,cudaMalloc
 *     # end
 * Time in microseconds since the recorder started in that process; the first
 * six columns are RMM's.  Lines starting with '#' are notes; "# end" is the
 * last line of a file whose process exited (closed at exit): a file without
 * it was cut (killed process, or read while it runs).
 */
#ifndef CUPOLA_RECORD_H
#define CUPOLA_RECORD_H

#include <stdint.h>

/* The magic, column and end lines, shared with the reader */
#include "trace/record_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Actions (the Action column) */
enum { CP_REC_ALLOC = 0, CP_REC_FREE, CP_REC_ALLOC_FAIL, CP_REC_MAP, CP_REC_UNMAP };
/* Memory kinds (the Kind column) */
enum { CP_REC_DEVICE = 0, CP_REC_MANAGED, CP_REC_PINNED, CP_REC_VMM, CP_REC_UNKNOWN };

#define CP_REC_MAX_DEVICES 64

typedef struct cp_rec cp_rec;

/* One event as the callback hands it over.  call is a string constant
 * (CUPTI's function name, or a literal), never freed. */
typedef struct cp_rec_event {
    uint64_t t_ns;      /* CLOCK_MONOTONIC; the row's Time is relative to the start */
    uint64_t ptr;       /* address (vmm create/release: the handle) */
    uint64_t size;
    uint64_t stream;
    uint64_t pool;      /* the pool of cudaMallocFromPoolAsync; vmm map: the handle */
    const char *call;
    uint32_t tid;
    int16_t device;
    uint8_t action, kind;
} cp_rec_event;

/* Opens a recorder writing under out (NULL: "cupola-record.csv.gz").
 * flush_ms <= 0: the default 50; list_path: where to append each file's path
 * (NULL: nowhere); note: appended to the first comment line (NULL: none).
 * start_thread: 0 runs no writer thread (the tests call cp_rec_flush).
 * NULL when out of memory. */
cp_rec *cp_rec_open(const char *out, int flush_ms, const char *list_path, const char *note,
                    int start_thread);
/* Records an allocation (action CP_REC_ALLOC or CP_REC_ALLOC_FAIL) or a vmm
 * map/unmap; e->t_ns 0: now. */
void cp_rec_add(cp_rec *r, cp_rec_event *e);
/* Records a free of e->ptr: size, kind and device are the allocation's. */
void cp_rec_free(cp_rec *r, cp_rec_event *e);
/* Writes what is buffered and flushes the files (any thread). */
void cp_rec_flush(cp_rec *r);
/* A note line ("# text") in every file opened from now on and those open. */
void cp_rec_note(cp_rec *r, const char *text);
/* Stops the writer, writes the rest, closes the files (gzip trailer) for
 * good; the memory stays, so a callback that comes later (a library's
 * teardown after the process's exit handlers) is taken and never written. */
void cp_rec_close(cp_rec *r);
/* cp_rec_close, then frees everything (nothing may call in any more). */
void cp_rec_destroy(cp_rec *r);
/* The child side of fork(): forget the parent's buffers, write nothing. */
void cp_rec_forked(cp_rec *r);

/* The file of process pid and device dev for out: buf gets
 * "STEM.pPID.dDEV" + the extension (".csv.gz", ".csv", ".gz" or none).
 * Returns 0, or -1 when n is too small. */
int cp_rec_path(const char *out, long pid, int dev, char *buf, unsigned long n);
/* Writes one row (no newline) into buf; returns its length (< n). */
int cp_rec_format(const cp_rec_event *e, uint64_t t0_ns, char *buf, unsigned long n);

/* Counts since open (for the notes and the tests). */
typedef struct cp_rec_stats {
    uint64_t events, allocs, frees, unknown_frees, dropped, files;
} cp_rec_stats;
void cp_rec_stats_get(cp_rec *r, cp_rec_stats *out);

uint64_t cp_rec_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_RECORD_H */
