/*
 * devpool_layout.h: how a device pool's one allocation is laid out, and the
 * host-side arithmetic both backends share (cuda/devpool.cu, host_devpool.c).
 *
 * One allocation holds, each part 256-byte aligned:
 *   the cupola_device_pool state | the claim map (1 bit per 16-byte granule
 *   of the pool, for the run's overlap check; none for malloc pools) | slab
 *   metadata (slab_class, slab_used, bitmaps, class_slabs; slab pools only)
 *   | heap metadata (cmap, cfull, cstate, run_len, hbitmaps, partial,
 *   hcache, hslots; heap pools only) | the pool's bytes (none for malloc pools:
 *   CUDA's heap holds them).
 * Plain C (static inline): host code on both backends.
 */
#ifndef CUPOLA_DEVPOOL_LAYOUT_H
#define CUPOLA_DEVPOOL_LAYOUT_H

#include <string.h>

#include "cupola/device_alloc.cuh"

typedef struct cpd_layout {
    cpd_u64 claims_off, claims_bytes;
    cpd_u64 class_off, used_off, bitmaps_off, bitmaps_bytes, lists_off, lists_bytes;
    /* heap: its metadata is one range [heap_off, heap_off + heap_bytes) */
    cpd_u64 heap_off, heap_bytes;
    cpd_u64 cmap_off, cfull_off, cstate_off, runlen_off, hbitmaps_off, partial_off, hslots_off, hcache_off;
    cpd_u64 hstream_off, hprep_off;
    cpd_u64 base_off, total;
    cpd_u32 slab_shift, nslabs, slots, words;
    cpd_u32 chunk_shift, nchunks, cwords, nclasses, bwords, nslots_total, nbuckets, nstreams_total;
    cpd_u32 slot_base[CPD_HEAP_CLASSES + 1];
    cpd_u32 stream_base[CPD_HEAP_CLASSES + 1];
} cpd_layout;


static inline cpd_u64 cpd_align256(cpd_u64 x)
{
    return (x + 255u) & ~(cpd_u64)255u;
}

/* The heap's geometry (alloc_heap.cuh states the rules) and its metadata
 * from `at` on; returns where the metadata ends. */
static inline cpd_u64 cpd_layout_heap(cpd_u64 capacity, cpd_layout *L, cpd_u64 at)
{
    cpd_u32 cs = 16, nc;
    while (cs > 8 && (capacity >> cs) < 64u)
        cs--;
    L->chunk_shift = cs;
    L->nchunks = nc = (cpd_u32)(capacity >> cs);
    L->cwords = (nc + 31u) / 32u;
    L->nclasses = cs - 4u;
    L->bwords = cs >= 9 ? 1u << (cs - 9u) : 1u;
    L->slot_base[0] = 0;
    L->stream_base[0] = 0;
    for (cpd_u32 c = 0; c < CPD_HEAP_CLASSES; c++) {
        cpd_u32 a = 0, k = 0;
        if (c < L->nclasses) {
            cpd_u32 nb = 1u << (cs - 4u - c);
            a = CPD_HEAP_SLOTS_ROOM;
            if (a > nc / 16u)
                a = nc / 16u;
            if (a < 1u)
                a = 1u;
            if (nb >= CPD_HEAP_STREAM_MIN_BLOCKS) {
                k = 4096u / nb;
                if (k > CPD_HEAP_STREAMS_ROOM)
                    k = CPD_HEAP_STREAMS_ROOM;
                if (k > nc / 16u)
                    k = nc / 16u;
                if (k < 1u)
                    k = 1u;
            }
        }
        L->slot_base[c + 1] = L->slot_base[c] + a;
        L->stream_base[c + 1] = L->stream_base[c] + k;
    }
    L->nslots_total = L->slot_base[CPD_HEAP_CLASSES];
    L->nstreams_total = L->stream_base[CPD_HEAP_CLASSES];
    /* the free-chunk cache: a bucket of 32 entries per 16 chunks, 1 to 16384
     * buckets (2 MiB): room for every chunk of a pool up to 32 GiB, so that
     * the warps of a whole device passing chunks on seldom meet the map */
    L->nbuckets = nc / 16u;
    if (L->nbuckets < 1u)
        L->nbuckets = nc ? 1u : 0u;
    if (L->nbuckets > 16384u)
        L->nbuckets = 16384u;
    L->heap_off = at;
    L->cmap_off = at;
    at = cpd_align256(at + (cpd_u64)L->cwords * 4u);
    L->cfull_off = at;
    at = cpd_align256(at + (cpd_u64)((L->cwords + 31u) / 32u) * 4u);
    L->cstate_off = at;
    at = cpd_align256(at + (cpd_u64)nc * 4u);
    L->runlen_off = at;
    at = cpd_align256(at + (cpd_u64)nc * 4u);
    L->hbitmaps_off = at;
    at = cpd_align256(at + (cpd_u64)nc * L->bwords * 4u);
    L->partial_off = at;
    at = cpd_align256(at + (cpd_u64)L->nclasses * L->cwords * 4u);
    L->hcache_off = at;
    at = cpd_align256(at + (cpd_u64)L->nbuckets * 32u * 4u);
    L->hstream_off = at;
    at = cpd_align256(at + (cpd_u64)L->nstreams_total * 8u);
    L->hprep_off = at;
    at = cpd_align256(at + (cpd_u64)L->nstreams_total * 4u);
    L->hslots_off = at;
    at = cpd_align256(at + (cpd_u64)L->nslots_total * 4u);
    L->heap_bytes = at - L->heap_off;
    return at;
}

/* Fills L for a pool of kind and capacity. */
static inline void cpd_layout_make(cpd_u32 kind, cpd_u64 capacity, cpd_layout *L)
{
    cpd_u64 at = cpd_align256(sizeof(cupola_device_pool));
    memset(L, 0, sizeof *L);
    if (kind != CPD_KIND_MALLOC) {
        L->claims_off = at;
        L->claims_bytes = ((capacity / 16u + 31u) / 32u) * 4u;
        at = cpd_align256(at + L->claims_bytes);
    }
    if (kind == CPD_KIND_SLAB) {
        /* 64 KiB slabs, halved down to 8 KiB (one block of the largest
         * class) while fewer than 256 would fit, so small pools still have
         * slabs for every class. */
        L->slab_shift = 16;
        while (L->slab_shift > 13 && (capacity >> L->slab_shift) < 256u)
            L->slab_shift--;
        L->nslabs = (cpd_u32)(capacity >> L->slab_shift);
        L->words = 1u << (L->slab_shift - 9u);
        L->slots = L->nslabs / (4u * CPD_SLAB_CLASSES);
        if (L->slots < 1)
            L->slots = 1;
        if (L->slots > CPD_SLAB_MAX_SLOTS)
            L->slots = CPD_SLAB_MAX_SLOTS;
        L->class_off = at;
        at = cpd_align256(at + (cpd_u64)L->nslabs * 4u);
        L->used_off = at;
        at = cpd_align256(at + (cpd_u64)L->nslabs * 4u);
        L->bitmaps_off = at;
        L->bitmaps_bytes = (cpd_u64)L->nslabs * L->words * 4u;
        at = cpd_align256(at + L->bitmaps_bytes);
        L->lists_off = at;
        L->lists_bytes = (cpd_u64)CPD_SLAB_CLASSES * L->nslabs * 4u;
        at = cpd_align256(at + L->lists_bytes);
    }
    if (kind == CPD_KIND_HEAP)
        at = cpd_layout_heap(capacity, L, at);
    if (kind != CPD_KIND_MALLOC) {
        L->base_off = at;
        at = cpd_align256(at + capacity);
    }
    L->total = at;
}

/* The state of a fresh (or just reset) pool whose allocation starts at mem
 * (a device address on CUDA), written to *st on the host. */
static inline void cpd_state_init(cupola_device_pool *st, cpd_u32 kind, cpd_u64 capacity,
                                  const cpd_layout *L, unsigned char *mem)
{
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->capacity = capacity;
    st->slab_shift = L->slab_shift;
    st->nslabs = L->nslabs;
    st->slots = L->slots;
    st->words = L->words;
    if (kind != CPD_KIND_MALLOC)
        st->base = mem + L->base_off;
    if (kind == CPD_KIND_SLAB) {
        st->slab_class = (cpd_u32 *)(void *)(mem + L->class_off);
        st->slab_used = (cpd_u32 *)(void *)(mem + L->used_off);
        st->bitmaps = (cpd_u32 *)(void *)(mem + L->bitmaps_off);
        st->class_slabs = (cpd_u32 *)(void *)(mem + L->lists_off);
    }
    for (cpd_u32 i = 0; i < CPD_SLAB_CLASSES * CPD_SLAB_MAX_SLOTS; i++)
        st->active[i] = CPD_SLOT_EMPTY;
    if (kind == CPD_KIND_HEAP) {
        st->chunk_shift = L->chunk_shift;
        st->nchunks = L->nchunks;
        st->cwords = L->cwords;
        st->nclasses = L->nclasses;
        st->bwords = L->bwords;
        st->nslots_total = L->nslots_total;
        memcpy(st->slot_base, L->slot_base, sizeof st->slot_base);
        memcpy(st->stream_base, L->stream_base, sizeof st->stream_base);
        st->hstream = (cpd_u64 *)(void *)(mem + L->hstream_off);
        st->hprep = (cpd_u32 *)(void *)(mem + L->hprep_off);
        st->cmap = (cpd_u32 *)(void *)(mem + L->cmap_off);
        st->cfull = (cpd_u32 *)(void *)(mem + L->cfull_off);
        st->cstate = (cpd_u32 *)(void *)(mem + L->cstate_off);
        st->run_len = (cpd_u32 *)(void *)(mem + L->runlen_off);
        st->hbitmaps = (cpd_u32 *)(void *)(mem + L->hbitmaps_off);
        st->partial = (cpd_u32 *)(void *)(mem + L->partial_off);
        st->hslots = (cpd_u32 *)(void *)(mem + L->hslots_off);
        st->hcache = (cpd_u32 *)(void *)(mem + L->hcache_off);
        st->nbuckets = L->nbuckets;
    }
}

/* Bytes in use and the high-water mark, from a copy of the state and, for
 * slab pools, of slab_class and slab_used (NULL otherwise).  `peak` of a
 * slab pool is the most pool memory it ever had in slabs (slabs return only
 * with reset), `used` the bytes of the blocks reserved now. */
static inline void cpd_usage(const cupola_device_pool *st, const cpd_u32 *slab_class,
                             const cpd_u32 *slab_used, cpd_u64 *used, cpd_u64 *peak)
{
    cpd_u64 u = 0, pk = st->peak;
    if (st->kind == CPD_KIND_BUMP || st->kind == CPD_KIND_WARP_BUMP) {
        u = st->offset < st->capacity ? st->offset : st->capacity;
        if (u > pk)
            pk = u;
    } else if (st->kind == CPD_KIND_SLAB) {
        cpd_u32 n = st->taken < st->nslabs ? st->taken : st->nslabs;
        cpd_u64 in_slabs = (cpd_u64)n << st->slab_shift;
        for (cpd_u32 s = 0; s < n; s++) {
            cpd_u32 nb, k;
            if (slab_class[s] == 0)
                continue;
            nb = 1u << (st->slab_shift - 4u - (slab_class[s] - 1u));
            k = slab_used[s] < nb ? slab_used[s] : nb;
            u += (cpd_u64)k * (CPD_ALIGN << (slab_class[s] - 1u));
        }
        if (in_slabs > pk)
            pk = in_slabs;
    } else {
        u = st->offset;
    }
    *used = u;
    *peak = pk;
}

/* The heap's figures from copies of its state, cstate and run_len: `used`
 * the bytes of the blocks and runs handed out, `peak` the most pool memory
 * in slabs and runs at once. */
static inline void cpd_heap_usage(const cupola_device_pool *st, const cpd_u32 *cstate,
                                  const cpd_u32 *run_len, cpd_u64 *used, cpd_u64 *peak)
{
    cpd_u64 u = 0, pk = st->chunks_peak << st->chunk_shift;
    for (cpd_u32 s = 0; s < st->nchunks; s++) {
        cpd_u32 tag = cstate[s] >> CPD_HEAP_TAG_SHIFT;
        if (tag == CPD_HEAP_RUN) {
            u += (cpd_u64)run_len[s] << st->chunk_shift;
        } else if (tag >= 1 && tag <= st->nclasses) {
            cpd_u32 nb = 1u << (st->chunk_shift - 4u - (tag - 1u));
            cpd_u32 k = cstate[s] & CPD_HEAP_COUNT;
            /* a stream's chunk counts all its blocks from the start; the
             * ones not yet handed out are not in use */
            if (run_len[s] & CPD_HEAP_STREAM_MARK) {
                cpd_u32 handed = run_len[s] & ~CPD_HEAP_STREAM_MARK;
                k = k + handed > nb ? k + handed - nb : 0u;
            }
            u += (cpd_u64)(k < nb ? k : nb) * (CPD_ALIGN << (tag - 1u));
        }
    }
    *used = u;
    *peak = pk > st->peak ? pk : st->peak;
}

#endif /* CUPOLA_DEVPOOL_LAYOUT_H */
