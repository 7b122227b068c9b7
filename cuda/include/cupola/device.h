/*
 * cupola/device.h: the device-side header of cupola, on the include path of
 * every module compiled by cupola.module (both backends: NVRTC on the GPU,
 * the host compiler with cupola/host_prelude.h on the CPU).  Include it as
 * <cupola/device.h>.  It needs no other header, so NVRTC compiles it as is.
 *
 * The device-side allocation helpers (cupola_alloc / cupola_free over a
 * cupola.DevicePool) are declared here by the device-allocation part of
 * cupola; what is below are the basics every kernel may use.
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

#endif /* CUPOLA_DEVICE_H */
