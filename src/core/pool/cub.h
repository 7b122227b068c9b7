/*
 * pool/cub.h: the options of a pool of kind "cub" (pool/cub.c, CUB's
 * CachingDeviceAllocator), as cp_pool_own holds them.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_POOL_CUB_H
#define CUPOLA_POOL_CUB_H

#include <stdint.h>

#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CachingDeviceAllocator's constructor arguments (defaults: its default
 * constructor's, 8, 3, 7 and 3 * 8^7 - 1). */
typedef struct cp_cub_opts {
    uint64_t bin_growth, min_bin, max_bin;
    uint64_t max_cached_bytes;
} cp_cub_opts;

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_POOL_CUB_H */
