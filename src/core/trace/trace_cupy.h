/*
 * trace_cupy.h: a CuPy memory-hook log (its reader, cupy_hook.c, attaches
 * this to the trace) as the replay through kind "cupy" (replay_cupy.c)
 * walks it; internal to trace/.
 *
 * The log's lines become two things: the rows every pool replays (trace.h:
 * an allocate per served `malloc`, a free per `free` of a live pointer, a
 * refused `malloc` as an `oom` entry), and the operations below, which the
 * CuPy model replays as CuPy performed them: the frees a malloc's
 * gc.collect() caused (logged after its `malloc_preprocess` line, before
 * its `malloc` line) follow their MALLOC as GCFREE operations, the user's
 * free_all_blocks() calls are FREE_ALL, and the `alloc` lines (the pool's
 * cudaMallocs, mem_ptr 0 where the device refused) are a list of their own
 * for the recorded addresses.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TRACE_CUPY_H
#define CUPOLA_TRACE_CUPY_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

enum {
    CP_CUPY_MALLOC = 0, /* a served malloc: size (mem_size), ptr, arena, ord */
    CP_CUPY_OOM,        /* a malloc CuPy refused (mem_ptr 0): size, arena */
    CP_CUPY_FREE,       /* ord */
    CP_CUPY_GCFREE,     /* ord: freed by the gc.collect() of the MALLOC/OOM before it */
    CP_CUPY_FREE_ALL    /* the user's free_all_blocks(); flag 1: of arena only */
};

#define CP_CUPY_NO_TOTAL UINT64_MAX

typedef struct cp_cupy_op {
    uint64_t size;
    uint64_t ptr;
    uint64_t arena;   /* the stream identifier CuPy's arena is keyed by */
    uint64_t total;   /* total_bytes logged on the line, or CP_CUPY_NO_TOTAL */
    uint32_t ord;
    uint32_t line;    /* the log's line (from 1) */
    uint32_t row;     /* the trace's row it is (or the latest before it), for timelines */
    uint8_t kind;
    uint8_t flag;     /* MALLOC, OOM: how many GCFREE operations follow */
} cp_cupy_op;

typedef struct cp_trace_cupy {
    cp_cupy_op *op;
    size_t nop, cop;
    uint64_t *dev_size, *dev_addr; /* the alloc lines, in order */
    uint32_t *dev_line;
    size_t ndev, cdev;
    size_t dev_refused;            /* alloc lines with mem_ptr 0 */
    size_t zero_mallocs;           /* mallocs of size 0 (never reach the pool) */
    int has_stream, has_preprocess, has_free_all, has_total;
    uint64_t peak_total;           /* the highest total_bytes logged (has_total) */
} cp_trace_cupy;

/* The replay of a CuPy log through the cupy model (cp_trace_replay hands it
 * every replay of such a log whose pool is of kind "cupy"). */
cp_status cp_trace_replay_cupy(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                               cp_replay_result *out);

#endif /* CUPOLA_TRACE_CUPY_H */
