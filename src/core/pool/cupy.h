/*
 * pool/cupy.h: CuPy's memory pool (pool/cupy.c states the policy) as the
 * replay of a CuPy log drives it: mallocs by CuPy's own arena identifier
 * (the stream pointer), Python's gc.collect() as a call back into the
 * replay, the recorded addresses, and CuPy's figures under its own names.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_POOL_CUPY_H
#define CUPOLA_POOL_CUPY_H

#include <stddef.h>
#include <stdint.h>

#include "pool/resource.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_cupy cp_cupy;

/* The model behind a pool of kind "cupy", or NULL for any other resource. */
cp_cupy *cp_cupy_of(cp_resource *r);
/* CuPy's ALLOCATION_UNIT_SIZE rounding (512 bytes); 0 stays 0. */
uint64_t cp_cupy_round(uint64_t bytes);

/* The pool's figures: CuPy's names first, then the model's counters. */
typedef struct cp_cupy_stats {
    uint64_t used_bytes, total_bytes, free_bytes, n_free_blocks;
    uint64_t total_bytes_peak;       /* the highest total_bytes so far */
    uint64_t used_bytes_peak;        /* the highest used_bytes so far */
    uint64_t whole_free_bytes;       /* what free_all_blocks() would give back now */
    uint64_t device_allocs;          /* cudaMalloc calls that succeeded */
    uint64_t device_frees;           /* cudaFree calls (free_all_blocks) */
    uint64_t device_alloc_failures;  /* cudaMalloc calls refused */
    uint64_t free_all_blocks_calls;  /* free_all_blocks rounds of the pool's own, and the user's */
    uint64_t gc_rounds;              /* the rounds that ran gc.collect() */
    uint64_t ooms;                   /* OutOfMemoryError raised */
    uint64_t tie_choices;            /* mallocs that had equal free chunks to choose from */
} cp_cupy_stats;
void cp_cupy_get_stats(cp_cupy *m, cp_cupy_stats *out);
/* What free_all_blocks() would give back now (cheap: a counter). */
uint64_t cp_cupy_whole_free(const cp_cupy *m);

/* Python's gc.collect() inside a malloc: the frees it causes, given by the
 * caller (a replay: the frees the log wrote inside this malloc). */
typedef void (*cp_cupy_gc_fn)(void *ud);

/* SingleDeviceMemoryPool.malloc of an already rounded size (> 0) on the
 * arena of stream identifier arena.  want: the address CuPy handed out (a
 * recording), which breaks ties between equal free chunks (0: the address
 * rule, lowest address first).  gc: NULL, or called where CuPy calls
 * gc.collect().  CP_ERR_OOM where CuPy raises OutOfMemoryError. */
cp_status cp_cupy_malloc(cp_cupy *m, uint64_t size, uint64_t arena, uint64_t want,
                         cp_cupy_gc_fn gc, void *gc_ud, uint64_t *out);
/* PooledMemory.free: the chunk goes back to the arena it came from.
 * CP_ERR_INVALID for an address that is not a live chunk. */
cp_status cp_cupy_free(cp_cupy *m, uint64_t ptr);
/* free_all_blocks(stream): all arenas (all = 1) or arena's only; the bytes
 * given back. */
uint64_t cp_cupy_free_all_blocks(cp_cupy *m, int all, uint64_t arena);

/* Holding the pool's cudaMallocs to a log's `alloc` lines (sizes, in
 * order; addr 0: the device refused), on a fresh pool.  take = 1 (the
 * recorded addresses, virtual upstream only): each call takes the line's
 * address or refusal while the sizes agree and the line's block meets none
 * the pool still holds; from the first that differs the pool makes
 * addresses of its own, above every recorded one (refused where none are
 * left below 2^64).  take = 0:
 * the upstream answers and the pool only compares.  The arrays must live
 * until cp_cupy_end_recorded. */
cp_status cp_cupy_use_recorded(cp_cupy *m, const uint64_t *size, const uint64_t *addr, size_t n,
                               int take);
/* Where the cudaMallocs first differed from the log's (size, or served
 * against refused): 0 when they did not; else *call is the call (from 0)
 * and the sizes, the model's (0: it made no more calls) and the log's (0:
 * the log has no more). */
int cp_cupy_divergence(cp_cupy *m, size_t *call, uint64_t *model_size, uint64_t *log_size);
/* From now on the pool's cudaMallocs are its own (with take, addresses
 * above the log's), as after a divergence, without counting one: for a
 * replay that stopped doing what the log shows (the recorded addresses say
 * nothing of a pool that holds other blocks than the run's). */
void cp_cupy_leave_recorded(cp_cupy *m);
/* The log's alloc lines the model has matched. */
size_t cp_cupy_recorded_used(cp_cupy *m);
/* The end of the log: its calls the model did not make count as a
 * divergence; the pool lets go of the log's arrays.  Returns whether the
 * pool was held to a log. */
int cp_cupy_end_recorded(cp_cupy *m);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_POOL_CUPY_H */
