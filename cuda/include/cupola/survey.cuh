/*
 * cupola/survey.cuh: the kernels of the survey of in-kernel allocators
 * (cupola.survey, lua/cupola/survey.lua), after the test cases of Winter et
 * al., "Are dynamic memory managers on GPUs slow?" (PPoPP 2021).  Lua
 * composes a module from this header for each allocator and times the
 * launches with events; every allocation, write, check and reduction runs
 * here.
 *
 * The allocator behind SV_ALLOC / SV_FREE is chosen when the module is
 * compiled:
 *   -DCUPOLA_SURVEY_MALLOC        CUDA's in-kernel malloc/free (the pool
 *                                 argument is ignored; on the host backend
 *                                 the C library's)
 *   -DCUPOLA_POOL_KIND=<kind>     a cupola pool of that kind (device.h)
 *   a plugin's source in front    its allocator (cupola/plugin.h)
 * With -DCUPOLA_SURVEY_SCAN the header holds only the prefix sum of the
 * synthetic workload (a kernel with barriers, kept apart so that the host
 * backend runs the others without fibers).
 *
 * Thread i of a test works for allocation i; in `warp` mode (the survey's
 * warp-based test) lane 0 of warp i does, and the other lanes return.
 * Sizes are a constant or an array of one 32-bit size per allocation.
 */
#ifndef CUPOLA_SURVEY_CUH
#define CUPOLA_SURVEY_CUH

#include "cupola/device.h"
#include "cupola/pattern.h"

#ifndef CUPOLA_SURVEY_SCAN

#ifdef CUPOLA_SURVEY_MALLOC
#define SV_ALLOC(pool, n) ((void)(pool), malloc((size_t)(n)))
#define SV_FREE(pool, p) ((void)(pool), free(p))
#else
#define SV_ALLOC(pool, n) cupola_alloc((pool), (size_t)(n))
#define SV_FREE(pool, p) cupola_free((pool), (p))
#endif

/* The allocation a thread works for, or n when it has none. */
static __device__ __forceinline__ unsigned long long sv_index(unsigned long long n, int warp)
{
    unsigned long long t = cupola_global_index();
    if (warp) {
        if (t % 32u)
            return n;
        t /= 32u;
    }
    return t < n ? t : n;
}

static __device__ __forceinline__ unsigned long long sv_size(unsigned long long size,
                                                             const unsigned int *sizes,
                                                             unsigned long long i)
{
    return sizes ? (unsigned long long)sizes[i] : size;
}

/* ptrs[i] = a block of size (or sizes[i]) bytes, or 0. */
extern "C" __global__ void sv_alloc(cupola_device_pool *pool, unsigned long long *ptrs,
                                    unsigned long long n, unsigned long long size,
                                    const unsigned int *sizes, int warp)
{
    unsigned long long i = sv_index(n, warp);
    if (i < n)
        ptrs[i] = (unsigned long long)(size_t)SV_ALLOC(pool, sv_size(size, sizes, i));
}

/* Frees ptrs[i] (0 is skipped). */
extern "C" __global__ void sv_free(cupola_device_pool *pool, const unsigned long long *ptrs,
                                   unsigned long long n, int warp)
{
    unsigned long long i = sv_index(n, warp);
    if (i < n && ptrs[i])
        SV_FREE(pool, (void *)(size_t)ptrs[i]);
}

/* Writes i into every 32-bit word of block i (the survey writes its
 * thread's index). */
extern "C" __global__ void sv_write(const unsigned long long *ptrs, unsigned long long n,
                                    unsigned long long size, const unsigned int *sizes)
{
    unsigned long long i = cupola_global_index();
    unsigned int *p;
    if (i >= n || !ptrs[i])
        return;
    p = (unsigned int *)(size_t)ptrs[i];
    for (unsigned long long k = 0, w = sv_size(size, sizes, i) / 4u; k < w; k++)
        p[k] = (unsigned int)i;
}

/* Checks what sv_write wrote and sums up the blocks:
 *   out[0] += NULLs, out[1] += blocks whose words are not all i,
 *   out[2] += blocks not 16-byte aligned, out[3] = min start,
 *   out[4] = max end, out[5] += bytes asked for, out[6] += bytes asked
 *   for rounded up to 16.
 * (out[3] starts at 2^64-1, the rest at 0.) */
extern "C" __global__ void sv_check(const unsigned long long *ptrs, unsigned long long n,
                                    unsigned long long size, const unsigned int *sizes,
                                    unsigned long long *out)
{
    unsigned long long i = cupola_global_index(), b, a;
    const unsigned int *p;
    if (i >= n)
        return;
    a = ptrs[i];
    if (!a) {
        atomicAdd(&out[0], 1ull);
        return;
    }
    b = sv_size(size, sizes, i);
    p = (const unsigned int *)(size_t)a;
    for (unsigned long long k = 0, w = b / 4u; k < w; k++)
        if (p[k] != (unsigned int)i) {
            atomicAdd(&out[1], 1ull);
            break;
        }
    if (a % 16u)
        atomicAdd(&out[2], 1ull);
    atomicMin(&out[3], a);
    atomicMax(&out[4], a + b);
    atomicAdd(&out[5], b);
    atomicAdd(&out[6], (b + 15u) & ~15ull);
}

/* One alloc+free pair per thread (cupola's own aim): allocate, write the
 * first and last word, read them back, free.  out[0] += NULLs, out[1] +=
 * blocks that did not keep what was written. */
extern "C" __global__ void sv_pair(cupola_device_pool *pool, unsigned long long n,
                                   unsigned long long size, unsigned long long *out)
{
    unsigned long long i = cupola_global_index();
    unsigned int *p;
    if (i >= n)
        return;
    p = (unsigned int *)SV_ALLOC(pool, size);
    if (!p) {
        atomicAdd(&out[0], 1ull);
        return;
    }
    unsigned long long last = size >= 8u ? size / 4u - 1u : 0u;
    p[last] = (unsigned int)~i;
    p[0] = (unsigned int)i;
    if (*(volatile unsigned int *)&p[0] != (unsigned int)i ||
        (last && *(volatile unsigned int *)&p[last] != (unsigned int)~i))
        atomicAdd(&out[1], 1ull);
    SV_FREE(pool, p);
}

/* sizes[i]: uniform in [lo, hi], rounded up to 4 (the survey draws them on
 * the host with a seeded generator; here a hash of seed and i). */
extern "C" __global__ void sv_sizes(unsigned int *sizes, unsigned long long n, unsigned long long lo,
                                    unsigned long long hi, unsigned long long seed)
{
    unsigned long long i = cupola_global_index();
    if (i < n) {
        unsigned long long v = lo + cupola_mix64(seed ^ (i * 0x9e3779b97f4a7c15ull)) % (hi - lo + 1u);
        sizes[i] = (unsigned int)((v + 3u) & ~3ull);
    }
}

/* The synthetic workload's write test: each word of the workload, one
 * thread per word, in the order of a contiguous layout (assign and pos
 * from sv_assign), so that how the allocator placed the blocks decides
 * how the writes coalesce. */
extern "C" __global__ void sv_assign(const unsigned long long *offsets, unsigned long long n,
                                     unsigned int *assign, unsigned int *pos)
{
    unsigned long long i = cupola_global_index();
    if (i < n)
        for (unsigned long long k = offsets[i], j = 0; k < offsets[i + 1]; k++, j++) {
            assign[k] = (unsigned int)i;
            pos[k] = (unsigned int)j;
        }
}

extern "C" __global__ void sv_write_words(const unsigned int *assign, const unsigned int *pos,
                                          const unsigned long long *ptrs, unsigned long long words)
{
    unsigned long long j = cupola_global_index();
    unsigned long long a;
    if (j < words && (a = ptrs[assign[j]]) != 0)
        ((unsigned int *)(size_t)a)[pos[j]] = (unsigned int)j;
}

/* The baseline of the synthetic workload: every block carved from one
 * contiguous area at the prefix sum of the sizes. */
extern "C" __global__ void sv_baseline(const unsigned long long *offsets, unsigned long long n,
                                       unsigned long long storage, unsigned long long *ptrs)
{
    unsigned long long i = cupola_global_index();
    if (i < n)
        ptrs[i] = storage + offsets[i] * 4u;
}

#ifdef CPD_HEAP_COUNTERS
/* The heap's event counts (its variant CPD_HEAP_COUNTERS) into out[0..15],
 * and zeroed: one thread. */
extern "C" __global__ void sv_events(cupola_device_pool *pool, unsigned long long *out)
{
    if (cupola_global_index() == 0)
        for (unsigned e = 0; e < CPD_HEAP_EVENTS; e++) {
            out[e] = pool->hev[e];
            pool->hev[e] = 0;
        }
}
#define SV_EVENTS_KERNEL CUPOLA_HK_KERNEL(sv_events)
#else
#define SV_EVENTS_KERNEL
#endif

#if CUPOLA_ON_HOST
#define CUPOLA_HK_MORE_KERNELS                                                                    \
    CUPOLA_HK_KERNEL(sv_alloc) CUPOLA_HK_KERNEL(sv_free) CUPOLA_HK_KERNEL(sv_write)             \
    CUPOLA_HK_KERNEL(sv_check) CUPOLA_HK_KERNEL(sv_pair) CUPOLA_HK_KERNEL(sv_sizes)             \
    CUPOLA_HK_KERNEL(sv_assign) CUPOLA_HK_KERNEL(sv_write_words) CUPOLA_HK_KERNEL(sv_baseline)  \
    SV_EVENTS_KERNEL
#endif

#else /* CUPOLA_SURVEY_SCAN */

/* offsets[0..n] = the exclusive prefix sum of sizes[i] / 4 (words), by one
 * block: each thread sums a stretch, the block scans the stretches. */
extern "C" __global__ void sv_scan(const unsigned int *sizes, unsigned long long n,
                                   unsigned long long *offsets)
{
    __shared__ unsigned long long part[1024];
    unsigned t = threadIdx.x, nt = blockDim.x;
    unsigned long long per = (n + nt - 1u) / nt, lo = (unsigned long long)t * per;
    unsigned long long hi = lo + per < n ? lo + per : n, sum = 0, acc;
    for (unsigned long long i = lo; i < hi; i++)
        sum += sizes[i] / 4u;
    part[t] = sum;
    __syncthreads();
    if (t == 0) {
        acc = 0;
        for (unsigned k = 0; k < nt; k++) {
            unsigned long long v = part[k];
            part[k] = acc;
            acc += v;
        }
        offsets[n] = acc;
    }
    __syncthreads();
    acc = part[t];
    for (unsigned long long i = lo; i < hi; i++) {
        offsets[i] = acc;
        acc += sizes[i] / 4u;
    }
}

#if CUPOLA_ON_HOST
#define CUPOLA_HK_MORE_KERNELS CUPOLA_HK_KERNEL(sv_scan)
#endif

#endif /* CUPOLA_SURVEY_SCAN */

#endif /* CUPOLA_SURVEY_CUH */
