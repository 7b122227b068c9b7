/*
 * devpool.h: the types of the backends' device-pool operations (the
 * dp_* block of cp_backend): pools whose memory kernels allocate from
 * while they run (cuda/include/cupola/device_alloc.cuh has the allocators).
 *
 * A run (dp_launch .. dp_finish) is one experiment: `threads` kernel threads
 * each allocate, write a pattern over the block, optionally hold it and
 * free it; a verification pass on the device counts overlaps.  launch only
 * enqueues on the stream, so runs on several streams can be in flight at
 * once; finish waits for one and collects its counts.
 *
 * The types sit below both the backends and the CUDA side (cuda/devpool_cuda.h),
 * which includes them without the backend table.  This header compiles as C
 * and C++.
 */
#ifndef CUPOLA_DEVPOOL_H
#define CUPOLA_DEVPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_devpool cp_devpool; /* a pool and its device-side state */
typedef struct cp_dp_run cp_dp_run;   /* a run launched and not yet finished */

/* The same numbers as CPD_KIND_* in cupola/device_alloc.cuh. */
typedef enum cp_dp_kind {
    CP_DP_BUMP = 0,
    CP_DP_WARP_BUMP,
    CP_DP_SLAB,
    CP_DP_MALLOC,
    CP_DP_HEAP,
    CP_DP_KIND_COUNT
} cp_dp_kind;

typedef struct cp_dp_run_args {
    uint64_t threads;              /* >= 1 */
    uint64_t min_bytes, max_bytes; /* 1 <= min <= max; thread i's size is drawn from seed */
    unsigned block;                /* threads per block, 1..1024 */
    int free_blocks;               /* free each block in the same kernel */
    int verify;                    /* check for overlaps (0: counts only, for timing) */
    int reset_first;               /* reset the pool on the stream before the run */
    uint64_t hold_us;              /* hold each block this long before checking it */
    uint64_t seed;                 /* patterns and sizes */
    unsigned children;             /* > 0: a parent kernel launches this many child grids */
} cp_dp_run_args;

typedef struct cp_dp_run_result {
    uint64_t ok, failed, overlaps, misaligned;
    uint64_t launch_errors; /* child launches that failed (nested runs) */
    double ms;              /* the allocating kernel(s), from events (host: the clock) */
} cp_dp_run_result;

typedef struct cp_dp_stats {
    uint64_t capacity, used, peak, failed;
} cp_dp_stats;

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_DEVPOOL_H */
