/*
 * <cupola/device.h>: allocation inside kernels, for kernels of your own.
 *
 *     #include <cupola/device.h>
 *     extern "C" __global__ void k(cupola_device_pool *pool, ...)
 *     {
 *         float *x = (float *)cupola_alloc(pool, 64 * sizeof(float));
 *         if (x) { ...; cupola_free(pool, x); }
 *     }
 *
 * The pool is a cupola.DevicePool passed for a parameter declared
 * "device_pool"; its kind (bump, warp_bump, slab, malloc) decides the policy
 * (each allocator's header under cupola/ states it exactly).  Both calls work
 * from any thread of any kernel, child kernels included (dynamic parallelism,
 * CUDA backend), and on the host backend, where the same code runs on CPU
 * threads with a warp of one lane.
 *
 *   cupola_alloc(pool, bytes) -> a 16-byte aligned block of at least bytes,
 *       or NULL when the pool cannot give one (counted in dp:stats().failed).
 *   cupola_free(pool, ptr)    -> gives it back (a no-op for the bump kinds,
 *       whose memory returns with dp:reset; NULL is ignored).
 */
#ifndef CUPOLA_DEVICE_H
#define CUPOLA_DEVICE_H

#include "device_alloc.cuh"

CPD_FN void *cupola_alloc(cupola_device_pool *pool, size_t bytes)
{
    return cpd_alloc(pool, (cpd_u64)bytes);
}

CPD_FN void cupola_free(cupola_device_pool *pool, void *ptr)
{
    cpd_free(pool, ptr);
}

#endif /* CUPOLA_DEVICE_H */
