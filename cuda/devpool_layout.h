/*
 * devpool_layout.h: how a device pool's one allocation is laid out, and the
 * host-side arithmetic both backends share (cuda/devpool.cu, host_devpool.c).
 *
 * One allocation holds, each part 256-byte aligned:
 *   the cupola_device_pool state | the claim map (1 bit per 16-byte granule
 *   of the pool, for the run's overlap check; none for malloc pools) | slab
 *   metadata (slab_class, slab_used, bitmaps, class_slabs; slab pools only)
 *   | the pool's bytes (none for malloc pools: CUDA's heap holds them).
 * Plain C (static inline): host code on both backends.
 */
#ifndef CUPOLA_DEVPOOL_LAYOUT_H
#define CUPOLA_DEVPOOL_LAYOUT_H

#include <string.h>

#include "cupola/device_alloc.cuh"

typedef struct cpd_layout {
    cpd_u64 claims_off, claims_bytes;
    cpd_u64 class_off, used_off, bitmaps_off, bitmaps_bytes, lists_off, lists_bytes;
    cpd_u64 base_off, total;
    cpd_u32 slab_shift, nslabs, slots, words;
} cpd_layout;

static inline cpd_u64 cpd_align256(cpd_u64 x)
{
    return (x + 255u) & ~(cpd_u64)255u;
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

#endif /* CUPOLA_DEVPOOL_LAYOUT_H */
