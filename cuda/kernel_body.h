/*
 * kernel_body.h: the per-element bodies of cupola's built-in kernels.
 *
 * Compiled twice: by nvcc inside the CUDA kernels (cuda/kernels.cu) and by gcc
 * inside the host backend's CPU loops (src/core/backend/host_kernels.c), so both
 * backends compute bit-for-bit the same values.  Everything here is a pure
 * function of its arguments.
 */
#ifndef CUPOLA_KERNEL_BODY_H
#define CUPOLA_KERNEL_BODY_H

#include <stdint.h>

#include "include/cupola/pattern.h"

#ifdef __CUDACC__
#define CP_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#define CP_HD static inline
#endif

/* data[i] = sqrtf(i): the smallest body that writes every element, the
 * benchmarks' workload. */
CP_HD float cp_body_sqrt_index(uint64_t i)
{
    return sqrtf((float)i);
}

/* The integrity pattern: byte i of a buffer filled with seed
 * (cupola/pattern.h, shared with the device pools' runs). */
CP_HD uint8_t cp_body_pattern_byte(uint64_t seed, uint64_t i)
{
    return cupola_pattern_byte(seed, i);
}

#endif /* CUPOLA_KERNEL_BODY_H */
