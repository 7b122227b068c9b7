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

/* splitmix64: a cheap, well-mixed function of one 64-bit word. */
CP_HD uint64_t cp_body_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The integrity pattern: byte i of a buffer filled with seed.  Every byte
 * depends on seed and on its offset, so a block handed out twice, shifted or
 * overwritten by another buffer's pattern is caught. */
CP_HD uint8_t cp_body_pattern_byte(uint64_t seed, uint64_t i)
{
    return (uint8_t)(cp_body_mix64(seed ^ (i >> 3)) >> ((i & 7u) * 8u));
}

#endif /* CUPOLA_KERNEL_BODY_H */
