/*
 * cupola/dp_body.cuh: one thread of dp:run and one thread of its
 * verification, shared by the CUDA kernels (cuda/devpool.cu), the host
 * backend's CPU threads (src/core/backend/host_devpool.c) and the run-time
 * compiled kernels of plugin pools (cupola/dp_harness.cuh: NVRTC, or the
 * host compiler), so every pool is run, checked and counted the same way.
 *
 * A run thread i: asks the pool for size(i) bytes (cupola_alloc), writes the
 * pattern of seed(i) over the whole block, optionally holds it for hold_ns
 * and checks it is still its own, then either frees it (free=true) or
 * records it for the verification pass (free=false).
 *
 * Overlap detection, the part a broken allocator cannot pass:
 *  - pattern: every byte of a block depends on its thread and offset
 *    (cupola/pattern.h), so a byte another thread wrote over is seen by the
 *    owner's check;
 *  - claims: one bit per 16-byte granule of the pool (allocators hand out
 *    16-byte granules, device_alloc.cuh), set with atomicOr when a block is
 *    checked: a bit already set means another live block covers that
 *    granule, whatever the order the threads ran in.  Claims of free=false
 *    blocks stay until dp:reset (the blocks are still live); a free=true
 *    thread claims, checks and releases its claims before it frees.  A block
 *    outside the pool counts as an overlap.  malloc pools (CUDA's heap) have
 *    no claim map: their blocks are checked by pattern only.
 *  - a block that is not 16-byte aligned counts as misaligned.
 * A free=false thread that already found an overlap while holding marks its
 * record (bit 0), so the verification pass does not count it twice.
 */
#ifndef CUPOLA_DP_BODY_CUH
#define CUPOLA_DP_BODY_CUH

#include "cupola/device_alloc.cuh"
#include "cupola/pattern.h"

#if CPD_CUDA
#define CPR_FN static __device__ __forceinline__
#else
#include <time.h>
#define CPR_FN static inline
#endif

/* What one run asks for (the same struct on both backends). */
typedef struct cpd_run_params {
    cpd_u64 threads;
    cpd_u64 min_bytes, max_bytes;
    cpd_u64 seed;
    cpd_u64 hold_ns;
    cpd_u64 first; /* index of this launch's thread 0 (child launches) */
    cpd_u64 t0;    /* when holds are counted from (0: each thread's own start) */
    int free_blocks;
    int verify;
} cpd_run_params;

/* Per-thread outcome bits. */
#define CPD_R_OK 1u
#define CPD_R_FAILED 2u
#define CPD_R_OVERLAP 4u
#define CPD_R_MISALIGNED 8u

/* Counters of a run: ok, failed, overlaps, misaligned, errors (child launches). */
#define CPD_NCOUNTERS 5

/* Adds a thread's outcome to a run's counters: one atomic per warp and
 * counter on the GPU (a warp is one lane on the host). */
CPR_FN void cpd_run_count(unsigned long long *c, cpd_u32 r)
{
    cpd_u32 m = cpd_activemask();
    cpd_u32 k[4];
    k[0] = (cpd_u32)cpd_popc(cpd_ballot(m, (r & CPD_R_OK) != 0));
    k[1] = (cpd_u32)cpd_popc(cpd_ballot(m, (r & CPD_R_FAILED) != 0));
    k[2] = (cpd_u32)cpd_popc(cpd_ballot(m, (r & CPD_R_OVERLAP) != 0));
    k[3] = (cpd_u32)cpd_popc(cpd_ballot(m, (r & CPD_R_MISALIGNED) != 0));
    if ((m & cpd_lanemask_lt()) == 0)
        for (int j = 0; j < 4; j++)
            if (k[j])
                cpd_add64(&c[j], (cpd_u64)k[j]);
}

CPR_FN cpd_u64 cpd_run_size(const cpd_run_params *prm, cpd_u64 i)
{
    cpd_u64 span = prm->max_bytes - prm->min_bytes;
    if (span == 0)
        return prm->min_bytes;
    return prm->min_bytes + cupola_mix64(prm->seed ^ (i * 0x9e3779b97f4a7c15ull)) % (span + 1);
}

CPR_FN cpd_u64 cpd_run_seed(const cpd_run_params *prm, cpd_u64 i)
{
    return cupola_mix64(prm->seed + i);
}

CPR_FN cpd_u64 cpd_now_ns(void)
{
#if CPD_CUDA
    cpd_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (cpd_u64)ts.tv_sec * 1000000000ull + (cpd_u64)ts.tv_nsec;
#endif
}

/* The pattern of seed over n bytes at p: 8-byte words where p is aligned. */
CPR_FN void cpd_pattern_write(unsigned char *p, cpd_u64 n, cpd_u64 seed)
{
    cpd_u64 i = 0;
    if (((size_t)p & 7u) == 0) {
        for (; i + 8 <= n; i += 8)
            *(cpd_u64 *)(void *)(p + i) = cupola_mix64(seed ^ (i >> 3));
    }
    for (; i < n; i++)
        p[i] = cupola_pattern_byte(seed, i);
}

/* 1 when the n bytes at p still hold the pattern of seed. */
CPR_FN int cpd_pattern_check(const unsigned char *p, cpd_u64 n, cpd_u64 seed)
{
    cpd_u64 i = 0;
    if (((size_t)p & 7u) == 0) {
        for (; i + 8 <= n; i += 8)
            if (*(const volatile cpd_u64 *)(const void *)(p + i) != cupola_mix64(seed ^ (i >> 3)))
                return 0;
    }
    for (; i < n; i++)
        if (((const volatile unsigned char *)p)[i] != cupola_pattern_byte(seed, i))
            return 0;
    return 1;
}

/* Sets (set=1) or clears the claim bits of [p, p+n); with set, returns 1
 * when a bit was already set or the block is not inside the pool. */
CPR_FN int cpd_claims(const cupola_device_pool *pool, cpd_u32 *claims, const unsigned char *p,
                      cpd_u64 n, int set)
{
    cpd_u64 off = (cpd_u64)(p - pool->base);
    cpd_u64 g0, g1;
    int hit = 0;
    if (p < pool->base || off >= pool->capacity || n > pool->capacity - off)
        return set;
    g0 = off >> 4;
    g1 = (off + n - 1) >> 4;
    for (cpd_u64 w = g0 >> 5; w <= (g1 >> 5); w++) {
        cpd_u64 lo = w == (g0 >> 5) ? (g0 & 31u) : 0;
        cpd_u64 hi = w == (g1 >> 5) ? (g1 & 31u) : 31;
        cpd_u32 mask = (hi - lo == 31) ? 0xffffffffu : (((1u << (hi - lo + 1)) - 1u) << lo);
        if (set)
            hit |= (cpd_or32(&claims[w], mask) & mask) != 0;
        else
            cpd_and32(&claims[w], ~mask);
    }
    return hit;
}

/* The first half of thread i: its block, with its pattern written (NULL
 * when the pool gave none).  kind is pool->kind (a constant in the CUDA
 * kernels, instantiated per kind).  A run of one size asks with the size
 * straight from the kernel's parameters: the compiler sees a value uniform
 * across the warp, as in a hand-written kernel, and may aggregate the
 * atomics of the bump kinds itself. */
CPR_FN unsigned char *cpd_run_alloc(cupola_device_pool *pool, const cpd_run_params *prm, cpd_u64 i,
                                    cpd_u32 kind)
{
    cpd_u64 n;
    unsigned char *p;
    if (prm->min_bytes == prm->max_bytes) {
        n = prm->min_bytes;
        p = (unsigned char *)cpd_alloc_kind(pool, n, kind);
    } else {
        n = cpd_run_size(prm, i);
        p = (unsigned char *)cpd_alloc_kind(pool, n, kind);
    }
    if (p)
        cpd_pattern_write(p, n, cpd_run_seed(prm, i));
    return p;
}

/* The second half: hold until t0 + hold_ns and check, then free the block
 * or record it for the verification pass.  ptrs is NULL when nothing needs
 * the records (free_blocks, or an unverified run of a pool that is not
 * malloc); claims NULL for pools without a claim map. */
CPR_FN cpd_u32 cpd_run_finish(cupola_device_pool *pool, const cpd_run_params *prm, cpd_u64 i,
                              unsigned char *p, cpd_u64 t0, cpd_u64 *ptrs, cpd_u32 *claims,
                              cpd_u32 kind)
{
    cpd_u64 n = cpd_run_size(prm, i), seed = cpd_run_seed(prm, i);
    cpd_u32 r = CPD_R_OK;

    if (!p) {
        if (ptrs && !prm->free_blocks)
            ptrs[i] = 0;
        return CPD_R_FAILED;
    }
    if (prm->hold_ns) {
        while (cpd_now_ns() - t0 < prm->hold_ns)
            ;
        if (prm->verify && !cpd_pattern_check(p, n, seed))
            r |= CPD_R_OVERLAP;
    }
    if (prm->free_blocks) {
        if (prm->verify) {
            if ((size_t)p % CPD_ALIGN)
                r |= CPD_R_MISALIGNED;
            if (claims) {
                int hit = cpd_claims(pool, claims, p, n, 1);
                if (hit || !cpd_pattern_check(p, n, seed))
                    r |= CPD_R_OVERLAP;
                if (!hit)
                    cpd_claims(pool, claims, p, n, 0);
            } else if (!cpd_pattern_check(p, n, seed)) {
                r |= CPD_R_OVERLAP;
            }
        }
        cpd_free_kind(pool, p, kind);
    } else if (ptrs) {
        ptrs[i] = (cpd_u64)(size_t)p | ((r & CPD_R_OVERLAP) ? 1u : 0u);
    }
    return r;
}

/* Thread i of a run, both halves (the hold counted from t0 when the run
 * gives one, else from this thread's start). */
CPR_FN cpd_u32 cpd_run_thread(cupola_device_pool *pool, const cpd_run_params *prm, cpd_u64 i,
                              cpd_u64 *ptrs, cpd_u32 *claims, cpd_u32 kind)
{
    cpd_u64 t0 = prm->hold_ns ? (prm->t0 ? prm->t0 : cpd_now_ns()) : 0;
    unsigned char *p = cpd_run_alloc(pool, prm, i, kind);
    return cpd_run_finish(pool, prm, i, p, t0, ptrs, claims, kind);
}

/* Verification of thread i's block after the whole run (free=false). */
CPR_FN cpd_u32 cpd_verify_thread(const cupola_device_pool *pool, const cpd_run_params *prm,
                                 cpd_u64 i, const cpd_u64 *ptrs, cpd_u32 *claims)
{
    cpd_u64 rec = ptrs[i], n;
    const unsigned char *p = (const unsigned char *)(size_t)(rec & ~1ull);
    cpd_u32 r = 0;
    int overlap = 0;
    if (!p)
        return 0;
    n = cpd_run_size(prm, i);
    if ((size_t)p % CPD_ALIGN)
        r |= CPD_R_MISALIGNED;
    if (claims && cpd_claims(pool, claims, p, n, 1))
        overlap = 1;
    if (!cpd_pattern_check(p, n, cpd_run_seed(prm, i)))
        overlap = 1;
    if (overlap && !(rec & 1u))
        r |= CPD_R_OVERLAP;
    return r;
}

/* The reset of a pool's counters (the arrays are cleared beside it, with
 * memsets: a heap's metadata to 0 and its slots to EMPTY): every block
 * returns, `peak` keeps the high-water mark, `failed` counts on.  A malloc
 * pool keeps its live bytes: CUDA's heap cannot be emptied from outside. */
CPR_FN void cpd_reset_state(cupola_device_pool *st)
{
    if (st->kind == CPD_KIND_BUMP || st->kind == CPD_KIND_WARP_BUMP) {
        cpd_u64 u = st->offset < st->capacity ? st->offset : st->capacity;
        if (u > st->peak)
            st->peak = u;
        st->offset = 0;
    } else if (st->kind == CPD_KIND_SLAB) {
        cpd_u64 n = st->taken < st->nslabs ? st->taken : st->nslabs;
        if ((n << st->slab_shift) > st->peak)
            st->peak = n << st->slab_shift;
        st->taken = 0;
        for (cpd_u32 c = 0; c < CPD_SLAB_CLASSES; c++)
            st->class_count[c] = 0;
        for (cpd_u32 i = 0; i < CPD_SLAB_CLASSES * CPD_SLAB_MAX_SLOTS; i++)
            st->active[i] = CPD_SLOT_EMPTY;
    } else if (st->kind == CPD_KIND_HEAP) {
        /* the map's bits past the last chunk stay set for good */
        if (st->nchunks % 32u)
            st->cmap[st->cwords - 1] = ~((1u << (st->nchunks % 32u)) - 1u);
        if ((st->chunks_peak << st->chunk_shift) > st->peak)
            st->peak = st->chunks_peak << st->chunk_shift;
        st->chunks_live = 0;
        st->chunks_peak = 0;
        st->epoch = 0;
        st->exhausted = 0;
        st->sweeping = 0;
        st->low = 0;
        for (cpd_u32 c = 0; c < CPD_HEAP_CLASSES; c++) {
            st->exhausted_epoch[c] = 0;
            st->stream_off[c] = 0;
        }
        for (cpd_u32 e = 0; e < CPD_HEAP_EVENTS; e++)
            st->hev[e] = 0;
    }
}

#endif /* CUPOLA_DP_BODY_CUH */
