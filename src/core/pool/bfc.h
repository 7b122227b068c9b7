/*
 * pool/bfc.h: what the replay (trace/replay.c) and the binding read of a
 * pool of kind "bfc" (pool/bfc.c, XLA's BFC allocator) beyond cp_resource.
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
 * model's address is compared with it.  addr must outlive the use. */
void cp_bfc_use_recorded(cp_resource *r, const uint64_t *addr, uint64_t n);
/* Ends it: how many allocations got another address than the recording's,
 * and the first of them (its ordinal). */
void cp_bfc_end_recorded(cp_resource *r, uint64_t *mismatches, uint64_t *first);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_BFC_H */
