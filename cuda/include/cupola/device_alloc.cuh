/*
 * cupola/device_alloc.cuh: the in-kernel allocators' shared state, the shim
 * that lets one source serve three compilers, and the dispatch behind
 * cupola_alloc / cupola_free (cupola/device.h).
 *
 * Compiled by nvcc (cupola's built-in kernels), by NVRTC (a user's module,
 * through <cupola/device.h>) and by the host's C or C++ compiler (the host
 * backend runs the same allocators on CPU threads).  Each allocator lives in
 * its own header with its policy in its header comment:
 *   alloc_bump.cuh       one atomicAdd per thread on an offset
 *   alloc_warp_bump.cuh  one atomicAdd per warp, lanes take consecutive slices
 *   alloc_slab.cuh       size classes 16 B .. 8 KiB in slabs with bitmaps, with free
 *   alloc_malloc.cuh     CUDA's in-kernel malloc/free (the host's malloc on the host)
 *   alloc_heap.cuh       general purpose: 16 B up to the capacity, free from any thread
 * and a plugin pool's allocator is the user's own source (cupola/plugin.h).
 *
 * The shim (cpd_* below) names what the allocators need: relaxed atomics on
 * 32- and 64-bit words, a device-wide fence, and the warp intrinsics.  On
 * the host a warp is one lane: __activemask() is 1, every match returns the
 * caller alone and a shuffle returns the caller's own value, so the warp
 * paths run with warpSize 1; the atomics are GCC builtins, sequentially
 * consistent.  Every allocator is written so that this degenerate warp is
 * one of its ordinary cases, not a separate code path.
 *
 * Every block handed out is 16-byte aligned and a multiple of 16 bytes long
 * (CPD_ALIGN), so two blocks never share a 16-byte granule: the run's
 * verification relies on that.
 *
 * This header compiles as C11, C++ and CUDA C++ (nvcc and NVRTC: no standard
 * headers are included there).
 */
#ifndef CUPOLA_DEVICE_ALLOC_CUH
#define CUPOLA_DEVICE_ALLOC_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define CPD_CUDA 1
#define CPD_FN static __device__ __forceinline__
#define CPD_DEV __device__
#else
#define CPD_CUDA 0
#include <stddef.h>
#include <stdlib.h>
#define CPD_FN static inline
#define CPD_DEV
#endif

typedef unsigned int cpd_u32;
typedef unsigned long long cpd_u64;

/* Kinds (cupola_device_pool.kind); the numbers are part of the ABI between
 * the host side that fills the state and every compiled kernel. */
#define CPD_KIND_BUMP 0u
#define CPD_KIND_WARP_BUMP 1u
#define CPD_KIND_SLAB 2u
#define CPD_KIND_MALLOC 3u
#define CPD_KIND_HEAP 4u
#define CPD_KIND_PLUGIN 5u

#define CPD_ALIGN 16ull
#define CPD_SLAB_CLASSES 10u   /* 16, 32, ..., 8192 bytes */
#define CPD_SLAB_MAX_BYTES 8192ull
#define CPD_SLAB_MAX_SLOTS 32u /* active slabs per class */
#define CPD_SLOT_EMPTY 0xffffffffu     /* no slab yet: the first thread takes one */
#define CPD_SLOT_BUSY 0xfffffffeu      /* a thread is choosing the next slab */
#define CPD_SLOT_EXHAUSTED 0xfffffffdu /* none had room when last looked for */
#define CPD_SLOT_SPECIAL 0xfffffffdu   /* values >= this are not slab indices */
#define CPD_HEAP_CLASSES 12u   /* heap size classes: 16 B .. chunk / 2 (at most 32 KiB) */
#define CPD_HEAP_EVENTS 16u    /* heap event counters (alloc_heap.cuh, CPD_HEAP_COUNTERS) */

/* The device-side state of one pool; kernels receive a pointer to it (the
 * `device_pool` parameter).  Filled by the host side (cuda/devpool.cu,
 * src/core/backend/host_devpool.c); users treat it as opaque. */
typedef struct cupola_device_pool {
    cpd_u32 kind;
    cpd_u32 slab_shift;         /* slab: log2 of the slab size */
    unsigned char *base;        /* the pool's bytes (bump, warp_bump, slab) */
    cpd_u64 capacity;           /* bytes */
    cpd_u64 offset;             /* bump kinds: next free byte; malloc: live bytes */
    cpd_u64 peak;               /* malloc: high-water mark of offset */
    cpd_u64 failed;             /* requests answered with NULL */
    /* slab */
    cpd_u32 nslabs;             /* slabs in the pool */
    cpd_u32 slots;              /* active slabs per class, 1 .. CPD_SLAB_MAX_SLOTS */
    cpd_u32 taken;              /* slabs handed to a class so far (may run past nslabs) */
    cpd_u32 words;              /* bitmap words per slab */
    cpd_u32 *slab_class;        /* per slab: class + 1; 0 while fresh */
    cpd_u32 *slab_used;         /* per slab: blocks reserved */
    cpd_u32 *bitmaps;           /* per slab: `words` words, bit set = block in use */
    cpd_u32 *class_slabs;       /* per class: nslabs entries, slab indices (EMPTY: not yet written) */
    cpd_u32 class_count[CPD_SLAB_CLASSES];
    cpd_u32 active[CPD_SLAB_CLASSES * CPD_SLAB_MAX_SLOTS];
    /* heap (alloc_heap.cuh says what each array holds) */
    cpd_u32 chunk_shift;        /* log2 of the chunk size */
    cpd_u32 nchunks;            /* chunks in the pool */
    cpd_u32 cwords;             /* words of the chunk map: ceil(nchunks / 32) */
    cpd_u32 nclasses;           /* slab classes: 16 B .. chunk / 2 */
    cpd_u32 bwords;             /* bitmap words per chunk */
    cpd_u32 epoch;              /* bumped when memory comes back while a class is exhausted */
    cpd_u32 exhausted;          /* nonzero once some class found no memory */
    cpd_u32 sweeping;           /* runs that missed, sweeping the cache and looking again */
    cpd_u32 nslots_total;
    cpd_u32 low;                /* a map word at or below the lowest with a free chunk (a hint) */
    cpd_u32 *cmap;              /* per chunk: 1 bit, set = in use */
    cpd_u32 *cfull;             /* per cmap word: 1 bit, set = that word is full (a hint) */
    cpd_u32 *cstate;            /* per chunk: tag | active | count */
    cpd_u32 *run_len;           /* per chunk that starts a run: its length in chunks */
    cpd_u32 *hbitmaps;          /* per chunk: bwords words, one bit per block of its class */
    cpd_u32 *partial;           /* per class: cwords words, slabs that may have room */
    cpd_u32 *hslots;            /* the active slots of every class */
    cpd_u32 *hcache;            /* nbuckets buckets of 32 entries: a free chunk + 1, or 0 */
    cpd_u32 nbuckets;           /* buckets of the free-chunk cache (0: none) */
    cpd_u64 chunks_live, chunks_peak;
    cpd_u32 slot_base[CPD_HEAP_CLASSES + 1]; /* class c's slots: hslots[slot_base[c] .. slot_base[c+1]) */
    cpd_u32 exhausted_epoch[CPD_HEAP_CLASSES];
    /* heap streams (alloc_heap_stream.cuh: a variant, laid out for every
     * heap): class c's are hstream[stream_base[c] .. stream_base[c+1]) */
    cpd_u64 *hstream;           /* per stream: its run (hi) and the blocks handed out of it (lo) */
    cpd_u32 *hprep;             /* per stream: a run prepared for it, or 0 */
    cpd_u32 stream_base[CPD_HEAP_CLASSES + 1];
    cpd_u32 stream_off[CPD_HEAP_CLASSES]; /* nonzero: the class's streams found no chunk (until reset) */
    cpd_u64 hev[CPD_HEAP_EVENTS]; /* event counts (variant CPD_HEAP_COUNTERS; the survey reads them) */
    /* plugin created on the host: what its cupola_plugin_create gave for
     * the device (cupola/plugin.h) */
    void *peer;
} cupola_device_pool;

/* ---- the shim -------------------------------------------------------------- */
#if CPD_CUDA
CPD_FN cpd_u64 cpd_add64(cpd_u64 *p, cpd_u64 v) { return atomicAdd(p, v); }
CPD_FN cpd_u32 cpd_add32(cpd_u32 *p, cpd_u32 v) { return atomicAdd(p, v); }
CPD_FN cpd_u32 cpd_sub32(cpd_u32 *p, cpd_u32 v) { return atomicSub(p, v); }
CPD_FN cpd_u32 cpd_or32(cpd_u32 *p, cpd_u32 v) { return atomicOr(p, v); }
CPD_FN cpd_u32 cpd_and32(cpd_u32 *p, cpd_u32 v) { return atomicAnd(p, v); }
CPD_FN cpd_u32 cpd_cas32(cpd_u32 *p, cpd_u32 cmp, cpd_u32 v) { return atomicCAS(p, cmp, v); }
CPD_FN cpd_u32 cpd_exch32(cpd_u32 *p, cpd_u32 v) { return atomicExch(p, v); }
CPD_FN cpd_u64 cpd_max64(cpd_u64 *p, cpd_u64 v) { return atomicMax(p, v); }
CPD_FN cpd_u64 cpd_cas64(cpd_u64 *p, cpd_u64 cmp, cpd_u64 v) { return atomicCAS(p, cmp, v); }
CPD_FN cpd_u64 cpd_exch64(cpd_u64 *p, cpd_u64 v) { return atomicExch(p, v); }
CPD_FN cpd_u32 cpd_min32(cpd_u32 *p, cpd_u32 v) { return atomicMin(p, v); }
CPD_FN cpd_u32 cpd_load32(const cpd_u32 *p) { return *(const volatile cpd_u32 *)p; }
/* The four words at p (16-byte aligned) in one load, each as a cpd_load32. */
CPD_FN void cpd_load4x32(const cpd_u32 *p, cpd_u32 *v)
{
    asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "l"(p)
                 : "memory");
}
CPD_FN void cpd_store32(cpd_u32 *p, cpd_u32 v) { *(volatile cpd_u32 *)p = v; }
CPD_FN void cpd_fence(void) { __threadfence(); }
CPD_FN void cpd_pause(void) { __nanosleep(64); }
CPD_FN cpd_u32 cpd_activemask(void) { return __activemask(); }
CPD_FN cpd_u32 cpd_lanemask_lt(void)
{
    cpd_u32 m;
    asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}
CPD_FN cpd_u32 cpd_match_any64(cpd_u32 mask, cpd_u64 v) { return __match_any_sync(mask, v); }
CPD_FN cpd_u32 cpd_match_all64(cpd_u32 mask, cpd_u64 v, int *pred) { return __match_all_sync(mask, v, pred); }
CPD_FN cpd_u64 cpd_shfl64(cpd_u32 mask, cpd_u64 v, int src) { return __shfl_sync(mask, v, src); }
CPD_FN int cpd_ffs(cpd_u32 x) { return __ffs((int)x); }
CPD_FN int cpd_popc(cpd_u32 x) { return __popc(x); }
CPD_FN cpd_u64 cpd_load64(const cpd_u64 *p) { return *(const volatile cpd_u64 *)p; }
CPD_FN cpd_u32 cpd_ballot(cpd_u32 mask, int pred) { return __ballot_sync(mask, pred); }
/* A number that differs between warps running at the same time, to spread
 * them over the active slabs: the SM and the warp slot on it. */
CPD_FN cpd_u32 cpd_warp_hash(void)
{
    cpd_u32 sm, warp;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(warp));
    return sm * 64u + warp;
}
#else
CPD_FN cpd_u64 cpd_add64(cpd_u64 *p, cpd_u64 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
CPD_FN cpd_u32 cpd_add32(cpd_u32 *p, cpd_u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
CPD_FN cpd_u32 cpd_sub32(cpd_u32 *p, cpd_u32 v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
CPD_FN cpd_u32 cpd_or32(cpd_u32 *p, cpd_u32 v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
CPD_FN cpd_u32 cpd_and32(cpd_u32 *p, cpd_u32 v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
CPD_FN cpd_u32 cpd_cas32(cpd_u32 *p, cpd_u32 cmp, cpd_u32 v)
{
    __atomic_compare_exchange_n(p, &cmp, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp; /* the value found, as atomicCAS returns */
}
CPD_FN cpd_u32 cpd_exch32(cpd_u32 *p, cpd_u32 v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
CPD_FN cpd_u64 cpd_cas64(cpd_u64 *p, cpd_u64 cmp, cpd_u64 v)
{
    __atomic_compare_exchange_n(p, &cmp, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
CPD_FN cpd_u64 cpd_exch64(cpd_u64 *p, cpd_u64 v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
CPD_FN cpd_u64 cpd_max64(cpd_u64 *p, cpd_u64 v)
{
    cpd_u64 cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return cur;
}
CPD_FN cpd_u32 cpd_min32(cpd_u32 *p, cpd_u32 v)
{
    cpd_u32 cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (cur > v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return cur;
}
CPD_FN cpd_u32 cpd_load32(const cpd_u32 *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
CPD_FN void cpd_load4x32(const cpd_u32 *p, cpd_u32 *v)
{
    for (int i = 0; i < 4; i++)
        v[i] = cpd_load32(p + i);
}
CPD_FN void cpd_store32(cpd_u32 *p, cpd_u32 v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
/* Every shared word the allocators touch goes through the sequentially
 * consistent atomics above on the host, which already order what the GPU's
 * __threadfence orders; a separate fence would add nothing (and
 * ThreadSanitizer does not model fences). */
CPD_FN void cpd_fence(void) {}
CPD_FN int cpd_ffs(cpd_u32 x) { return __builtin_ffs((int)x); }
CPD_FN int cpd_popc(cpd_u32 x) { return __builtin_popcount(x); }
CPD_FN cpd_u64 cpd_load64(const cpd_u64 *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
#ifndef CPD_WARP_SIM
/* (with CPD_WARP_SIM the includer defines the warp functions: 32 lanes as
 * coroutines, tests/c/test_warpsim.c) */
CPD_FN void cpd_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
CPD_FN cpd_u32 cpd_activemask(void) { return 1u; }
CPD_FN cpd_u32 cpd_lanemask_lt(void) { return 0u; }
CPD_FN cpd_u32 cpd_match_any64(cpd_u32 mask, cpd_u64 v) { (void)v; return mask; }
CPD_FN cpd_u32 cpd_match_all64(cpd_u32 mask, cpd_u64 v, int *pred) { (void)v; *pred = 1; return mask; }
CPD_FN cpd_u64 cpd_shfl64(cpd_u32 mask, cpd_u64 v, int src) { (void)mask; (void)src; return v; }
CPD_FN cpd_u32 cpd_ballot(cpd_u32 mask, int pred) { return pred ? mask : 0u; }
/* The host's "warp" is a CPU thread: number them as they first allocate. */
#ifdef __cplusplus
#define CPD_TLS thread_local
#else
#define CPD_TLS _Thread_local
#endif
static CPD_TLS cpd_u32 cpd_host_warp_id;
static cpd_u32 cpd_host_warps;
CPD_FN cpd_u32 cpd_warp_hash(void)
{
    if (cpd_host_warp_id == 0)
        cpd_host_warp_id = cpd_add32(&cpd_host_warps, 1u) + 1u;
    return cpd_host_warp_id;
}
#endif /* CPD_WARP_SIM */
#endif

/* A well-mixed 32-bit function of a word (lowbias32). */
CPD_FN cpd_u32 cpd_hash32(cpd_u32 x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

CPD_FN cpd_u64 cpd_round_up(cpd_u64 bytes)
{
    return (bytes + CPD_ALIGN - 1) & ~(CPD_ALIGN - 1);
}

/* The warp's leader among peers: its lowest lane. */
CPD_FN int cpd_leader(cpd_u32 peers)
{
    return cpd_ffs(peers) - 1;
}

CPD_FN int cpd_is_leader(cpd_u32 peers)
{
    return (peers & cpd_lanemask_lt()) == 0;
}

/* The least v of the lanes in peers (each of them calls it). */
CPD_FN cpd_u32 cpd_warp_min(cpd_u32 peers, cpd_u32 v)
{
    cpd_u32 r = v;
    for (cpd_u32 b = peers; b; b &= b - 1u) {
        cpd_u32 o = (cpd_u32)cpd_shfl64(peers, (cpd_u64)v, cpd_ffs(b) - 1);
        r = o < r ? o : r;
    }
    return r;
}

CPD_FN void cpd_count_failure(cupola_device_pool *pool)
{
    cpd_add64(&pool->failed, 1ull);
}

/* A plugin pool's allocator (cupola/plugin.h): defined by the plugin's
 * source, which defines CUPOLA_PLUGIN before including this header. */
#ifdef CUPOLA_PLUGIN
CPD_DEV void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                unsigned long long threads);
CPD_DEV void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes);
CPD_DEV void cupola_plugin_free(cupola_device_pool *pool, void *ptr);

CPD_FN void *cpd_plugin_alloc(cupola_device_pool *pool, cpd_u64 bytes)
{
    void *p = cupola_plugin_alloc(pool, bytes);
    if (!p)
        cpd_count_failure(pool);
    return p;
}
#endif

#include "cupola/alloc_bump.cuh"
#include "cupola/alloc_warp_bump.cuh"
#include "cupola/alloc_slab.cuh"
#include "cupola/alloc_malloc.cuh"
#include "cupola/alloc_heap.cuh"

/* ---- the dispatch ---------------------------------------------------------- */

/* A block of at least `bytes` bytes, 16-byte aligned, or NULL when the pool
 * cannot give one (exhausted, or a request its kind refuses); a NULL is
 * counted in the pool's `failed`.  A request of 0 bytes returns NULL and is
 * not counted.  kind is the pool's: a caller that knows it at compile time
 * (cupola's own run kernels are instantiated per kind) gets only that
 * allocator inlined, so only malloc pools' kernels call CUDA's malloc (CUDA
 * fixes its heap size once such a kernel has run). */
CPD_FN void *cpd_alloc_kind(cupola_device_pool *pool, cpd_u64 bytes, cpd_u32 kind)
{
    if (bytes == 0)
        return 0;
    switch (kind) {
    case CPD_KIND_BUMP: return cpd_bump_alloc(pool, bytes);
    case CPD_KIND_WARP_BUMP: return cpd_warp_bump_alloc(pool, bytes);
    case CPD_KIND_SLAB: return cpd_slab_alloc(pool, bytes);
    case CPD_KIND_MALLOC: return cpd_malloc_alloc(pool, bytes);
    case CPD_KIND_HEAP: return cpd_heap_alloc(pool, bytes);
#ifdef CUPOLA_PLUGIN
    case CPD_KIND_PLUGIN: return cpd_plugin_alloc(pool, bytes);
#endif
    default:
        /* a plugin's allocator lives in the plugin's source: a kernel
         * compiled without it cannot reach it (cupola/plugin.h) */
        cpd_count_failure(pool);
        return 0;
    }
}

/* Returns a block to the pool it came from.  NULL is ignored; the bump
 * kinds ignore every free (their memory comes back with dp:reset). */
CPD_FN void cpd_free_kind(cupola_device_pool *pool, void *ptr, cpd_u32 kind)
{
    if (!ptr)
        return;
    switch (kind) {
    case CPD_KIND_SLAB: cpd_slab_free(pool, ptr); break;
    case CPD_KIND_MALLOC: cpd_malloc_free(pool, ptr); break;
    case CPD_KIND_HEAP: cpd_heap_free(pool, ptr); break;
#ifdef CUPOLA_PLUGIN
    case CPD_KIND_PLUGIN: cupola_plugin_free(pool, ptr); break;
#endif
    default: break;
    }
}

/* The kind a call is compiled for: CUPOLA_POOL_KIND when the includer
 * names one (the allocator is then inlined alone), else the pool's own. */
#ifdef CUPOLA_POOL_KIND
#define CPD_KIND_OF(pool) ((void)(pool), (cpd_u32)(CUPOLA_POOL_KIND))
#else
#define CPD_KIND_OF(pool) ((pool)->kind)
#endif

CPD_FN void *cpd_alloc(cupola_device_pool *pool, cpd_u64 bytes)
{
    return cpd_alloc_kind(pool, bytes, CPD_KIND_OF(pool));
}

CPD_FN void cpd_free(cupola_device_pool *pool, void *ptr)
{
    cpd_free_kind(pool, ptr, CPD_KIND_OF(pool));
}

#endif /* CUPOLA_DEVICE_ALLOC_CUH */
