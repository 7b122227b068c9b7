/*
 * cupola/device.h: the device-side header of cupola, on the include path of
 * every module compiled by cupola.module (both backends: NVRTC on the GPU,
 * the host compiler with cupola/host_prelude.h on the CPU).  Include it as
 * <cupola/device.h>.  It needs no other header, so NVRTC compiles it as is.
 *
 * Below: the basics every kernel may use, then allocation inside kernels
 * (cupola_alloc / cupola_free over a cupola.DevicePool, whose allocators live
 * in cupola/device_alloc.cuh and the alloc_*.cuh beside it).
 */
#ifndef CUPOLA_DEVICE_H
#define CUPOLA_DEVICE_H

#define CUPOLA_DEVICE_API 1

#if defined(CUPOLA_HOST_KERNEL)
#define CUPOLA_ON_HOST 1 /* compiled for the host backend (CPU fibers) */
#else
#define CUPOLA_ON_HOST 0
#endif

/* The thread's index in the whole grid (x dimension), and the number of
 * threads in the grid: the two halves of a grid-stride loop:
 *   for (size_t i = cupola_global_index(); i < n; i += cupola_grid_size()) */
static __device__ __forceinline__ unsigned long long cupola_global_index(void)
{
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ unsigned long long cupola_grid_size(void)
{
    return (unsigned long long)gridDim.x * blockDim.x;
}

/* ---- allocation inside kernels (cupola.DevicePool) -------------------------
 *
 *     extern "C" __global__ void k(cupola_device_pool *pool, ...)
 *     {
 *         float *x = (float *)cupola_alloc(pool, 64 * sizeof(float));
 *         if (x) { ...; cupola_free(pool, x); }
 *     }
 *
 * The pool is a cupola.DevicePool passed for a parameter declared
 * "device_pool"; its kind (bump, warp_bump, slab, malloc, heap) decides the
 * policy (each allocator's header under cupola/ states it exactly).  A
 * kernel that is only ever given pools of one kind may say so with
 * -DCUPOLA_POOL_KIND=<CPD_KIND_*> (that allocator alone is compiled in).  A
 * plugin pool's allocator is reached only by kernels compiled with the
 * plugin's source in front of them (cupola/plugin.h); elsewhere
 * cupola_alloc on such a pool returns NULL.  Both calls work
 * from any thread of any kernel, child kernels included (dynamic parallelism,
 * CUDA backend), and on the host backend, where the same code runs on CPU
 * threads with a warp of one lane.
 *
 *   cupola_alloc(pool, bytes) -> a 16-byte aligned block of at least bytes,
 *       or NULL when the pool cannot give one (counted in dp:stats().failed).
 *   cupola_free(pool, ptr)    -> gives it back (a no-op for the bump kinds,
 *       whose memory returns with dp:reset; NULL is ignored).
 */
#include "cupola/device_alloc.cuh"

CPD_FN void *cupola_alloc(cupola_device_pool *pool, size_t bytes)
{
    return cpd_alloc(pool, (cpd_u64)bytes);
}

CPD_FN void cupola_free(cupola_device_pool *pool, void *ptr)
{
    cpd_free(pool, ptr);
}

/* The pool's own bytes (not for malloc pools, whose blocks are CUDA's
 * heap's): what a plugin allocator manages. */
CPD_FN unsigned char *cupola_pool_base(const cupola_device_pool *pool)
{
    return pool->base;
}

CPD_FN unsigned long long cupola_pool_capacity(const cupola_device_pool *pool)
{
    return pool->capacity;
}

/* A plugin created on the host (cupola/plugin.h): the device state its
 * cupola_plugin_create returned (NULL for every other pool). */
CPD_FN void *cupola_pool_peer(const cupola_device_pool *pool)
{
    return pool->peer;
}

#endif /* CUPOLA_DEVICE_H */
