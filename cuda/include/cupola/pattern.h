/*
 * cupola/pattern.h: the integrity pattern cupola writes into blocks and
 * buffers and checks again (built-in kernels, device-pool runs), written
 * once for every compiler that builds it: nvcc (host and device), NVRTC and
 * the host's C or C++ compiler.  No standard header is needed.
 */
#ifndef CUPOLA_PATTERN_H
#define CUPOLA_PATTERN_H

#if defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define CUPOLA_PATTERN_FN static __host__ __device__ __forceinline__
#elif defined(__CUDACC_RTC__)
#define CUPOLA_PATTERN_FN static __device__ __forceinline__
#else
#define CUPOLA_PATTERN_FN static inline
#endif

/* splitmix64: a cheap, well-mixed function of one 64-bit word. */
CUPOLA_PATTERN_FN unsigned long long cupola_mix64(unsigned long long x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Byte i of the pattern of seed.  Every byte depends on seed and on its
 * offset, so a block handed out twice, shifted or overwritten by another
 * block's pattern is caught. */
CUPOLA_PATTERN_FN unsigned char cupola_pattern_byte(unsigned long long seed, unsigned long long i)
{
    return (unsigned char)(cupola_mix64(seed ^ (i >> 3)) >> ((i & 7u) * 8u));
}

#endif /* CUPOLA_PATTERN_H */
