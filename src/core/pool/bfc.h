/*
 * pool/bfc.h: what the replay (trace/replay.c) and the binding read of a
 * pool of kind "bfc" (pool/bfc.c, XLA's BFC allocator) beyond cp_resource,
 * and its options as cp_pool_own holds them.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_BFC_H
#define CUPOLA_BFC_H

#include <stdint.h>

#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tsl::BFCAllocator's total_memory and Options (0 / false: JAX's defaults;
 * memory_limit 0 over the device upstream: 0.75 of the device's memory). */
typedef struct cp_bfc_opts {
    uint64_t memory_limit;
    double fragmentation_fraction;
    int allow_growth, garbage_collection;
    int spatial; /* enable_spatial_partitioning: -1 JAX's (on without growth), 0 off, 1 on */
} cp_bfc_opts;

typedef struct cp_bfc_stats {
    uint64_t num_allocs, bytes_in_use, peak_bytes_in_use, pool_bytes, peak_pool_bytes;
    uint64_t regions; /* AllocationRegions made since creation */
    uint64_t bytes_limit;
} cp_bfc_stats;

/* Whether r is a bfc pool (not through an adaptor). */
int cp_bfc_is(const cp_resource *r);
/* Nonzero: over the virtual upstream. */
int cp_bfc_virtual(const cp_resource *r);
void cp_bfc_figures(const cp_resource *r, cp_bfc_stats *out);
/* From now on the k-th allocation (from 0) was given addr[k] by the
 * recording (0: unknown): a region it makes is placed there, and the
 * model's address is compared with it; with chunk and in_use (NULL: not
 * recorded), also its chunk's size and bytes_in_use after it (UINT64_MAX:
 * not recorded for that one).  The arrays must outlive the use. */
void cp_bfc_use_recorded(cp_resource *r, const uint64_t *addr, const uint64_t *chunk,
                         const uint64_t *in_use, uint64_t n);
typedef struct cp_bfc_recorded {
    uint64_t mismatches, first_mismatch;             /* addresses */
    uint64_t chunk_mismatches, first_chunk_mismatch; /* chunk sizes or bytes_in_use */
} cp_bfc_recorded;
/* Ends it: the allocations that differed from the recording, and the first
 * of each kind (its ordinal). */
void cp_bfc_end_recorded(cp_resource *r, cp_bfc_recorded *out);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_BFC_H */
