/*
 * cupola/alloc_heap_slots.cuh: the heap's slot path, a block of a class:
 * the warp's slot and the active slab in it, whole slabs for the lanes of a
 * warp that fill one or more, filling a slot (a chunk from the cache or the
 * map, a slab from the partial list, EXHAUSTED), the sweep that takes back
 * empty active slabs and the cached chunks when memory is short, and the
 * last resort before a NULL, as alloc_heap.cuh states under "Active slabs",
 * "Whole slabs for a warp" and "NULL only when the memory is not there".
 * Part of the heap: included by alloc_heap.cuh, after alloc_heap_slab.cuh
 * (and alloc_heap_stream.cuh, whose streams the sweep turns off and a
 * class's lanes try first).
 */
#ifndef CUPOLA_ALLOC_HEAP_SLOTS_CUH
#define CUPOLA_ALLOC_HEAP_SLOTS_CUH

/* Takes back the empty active slabs of every class but `except` (their
 * slots become EMPTY), then gives the cached chunks back to the map.  How
 * many slabs and chunks came back. */
CPD_FN cpd_u32 cpd_heap_sweep(cupola_device_pool *pool, cpd_u32 except)
{
    cpd_u32 n = 0;
    for (cpd_u32 c = 0; c < pool->nclasses; c++) {
        if (c == except)
            continue;
        for (cpd_u32 k = pool->slot_base[c]; k < pool->slot_base[c] + cpd_heap_nslots(pool, c); k++) {
            cpd_u32 s = cpd_load32(&pool->hslots[k]), before;
            if (s >= CPD_SLOT_SPECIAL || cpd_heap_count(cpd_load32(&pool->cstate[s])) != 0u)
                continue;
            if (cpd_cas32(&pool->hslots[k], s, CPD_SLOT_EMPTY) != s)
                continue;
            before = cpd_and32(&pool->cstate[s], ~CPD_HEAP_ACTIVE);
            cpd_heap_after_drop(pool, s, before, before & ~CPD_HEAP_ACTIVE);
            n++;
        }
    }
#ifdef CPD_HEAP_STREAM
    n += cpd_heap_stream_sweep(pool);
#endif
    /* last: the slabs just taken back may have gone to the cache */
    return n + cpd_heap_drain(pool);
}

/* A free chunk as an active slab of class c: from the warp's cache buckets
 * for the classes it holds (*from_map 0: counted live already), else the
 * first free chunk of the map (*from_map 1: not yet in the live count). */
CPD_FN cpd_u32 cpd_heap_fresh(cupola_device_pool *pool, cpd_u32 c, cpd_u32 h, int *from_map)
{
    cpd_u32 s = CPD_HEAP_NONE;
    if (pool->nbuckets && cpd_heap_cached_class(pool, c))
        s = cpd_heap_cache_take(pool, h);
    *from_map = s == CPD_HEAP_NONE;
    if (s == CPD_HEAP_NONE)
        s = cpd_heap_claim(pool, 1u, h, CPD_HEAP_REFILL_SPREAD);
    else
        CPD_HEV(pool, CPD_HEV_REFILL_CACHED, 1);
    if (s != CPD_HEAP_NONE)
        cpd_add32(&pool->cstate[s], ((c + 1u) << CPD_HEAP_TAG_SHIFT) | CPD_HEAP_ACTIVE);
    return s;
}

/* The slab to put into a slot of class c (made active; *fresh: a chunk
 * from the map, to be counted live), or CPD_SLOT_EXHAUSTED (with the epoch
 * it saw, so that later threads know whether anything came back since). */
CPD_FN cpd_u32 cpd_heap_next_slab(cupola_device_pool *pool, cpd_u32 c, cpd_u32 h, int *fresh)
{
    cpd_u32 s = cpd_heap_fresh(pool, c, h, fresh), e0;
    if (s != CPD_HEAP_NONE)
        return s;
    if (!cpd_load32(&pool->exhausted))
        cpd_store32(&pool->exhausted, 1u);
    cpd_fence();
    e0 = cpd_load32(&pool->epoch);
    *fresh = 0;
    if ((s = cpd_heap_take_partial(pool, c)) != CPD_HEAP_NONE)
        return s;
    /* (the lanes sweeping together split the cache: look again whatever
     * this lane's share found) */
    cpd_heap_sweep(pool, c);
    if ((s = cpd_heap_fresh(pool, c, h, fresh)) != CPD_HEAP_NONE)
        return s;
    *fresh = 0;
    cpd_store32(&pool->exhausted_epoch[c], e0);
    return CPD_SLOT_EXHAUSTED;
}

/* Fills a slot this thread set BUSY (it held `old`): the next slab is
 * published first (the warps waiting on the slot go on), then the count
 * and the slab it replaces. */
CPD_FN void cpd_heap_refill(cupola_device_pool *pool, cpd_u32 *slot, cpd_u32 old, cpd_u32 c, cpd_u32 h)
{
    int fresh;
    cpd_u32 next = cpd_heap_next_slab(pool, c, h, &fresh);
    CPD_HEV(pool, CPD_HEV_REFILLS, 1);
    cpd_fence();
    cpd_store32(slot, next);
    if (fresh)
        cpd_heap_live(pool, 1ull);
    if (old < CPD_SLOT_SPECIAL) {
        cpd_u32 before = cpd_and32(&pool->cstate[old], ~CPD_HEAP_ACTIVE);
        cpd_heap_after_drop(pool, old, before, before & ~CPD_HEAP_ACTIVE);
    }
}

/* Whether slab s looks like a slab of class c with a free block. */
CPD_FN int cpd_heap_has_room(cupola_device_pool *pool, cpd_u32 s, cpd_u32 c)
{
    cpd_u32 st = cpd_load32(&pool->cstate[s]);
    return cpd_heap_tag(st) == c + 1u && cpd_heap_count(st) < cpd_heap_blocks(pool, c);
}

/* The last resort of one lane: a free block of class c in any active slab
 * of the class, or in a slab on its partial list; NULL (not counted) if none.
 * A reservation can miss a free block while other lanes' reservations
 * overshoot the count for a moment (they give the excess back): the scan
 * goes round again as long as it saw a slab that looked like it had room. */
CPD_FN void *cpd_heap_borrow(cupola_device_pool *pool, cpd_u32 c, cpd_u32 h)
{
    cpd_u32 me = cpd_lanemask_eq();
    cpd_u32 *list = pool->partial + (cpd_u64)c * pool->cwords;
    CPD_HEV(pool, CPD_HEV_BORROW, 1);
    for (int round = 0; round < 4096; round++) {
        int seen = 0;
        for (cpd_u32 k = pool->slot_base[c]; k < pool->slot_base[c] + cpd_heap_nslots(pool, c); k++) {
            cpd_u32 s = cpd_load32(&pool->hslots[k]);
            if (s < CPD_SLOT_SPECIAL && cpd_heap_has_room(pool, s, c)) {
                seen = 1;
                if (cpd_heap_reserve(pool, s, c, me, 1u, 0u))
                    return cpd_heap_take(pool, s, c, h, 0u);
            }
        }
        for (cpd_u32 w = 0; w < pool->cwords; w++) {
            cpd_u32 bits = cpd_load32(&list[w]);
            while (bits) {
                cpd_u32 s = w * 32u + (cpd_u32)cpd_ffs(bits) - 1u;
                bits &= bits - 1u;
                if (cpd_heap_has_room(pool, s, c)) {
                    seen = 1;
                    if (cpd_heap_reserve(pool, s, c, me, 1u, 0u))
                        return cpd_heap_take(pool, s, c, h, 0u);
                }
            }
        }
        if (!seen)
            break;
        cpd_pause();
    }
    return 0;
}

CPD_FN void *cpd_heap_alloc_small(cupola_device_pool *pool, cpd_u32 c)
{
    cpd_u32 nb = cpd_heap_blocks(pool, c), h = cpd_hash32(cpd_warp_hash());
    cpd_u32 nslots = cpd_heap_nslots(pool, c), si = h % nslots;
    cpd_u32 *slot = &pool->hslots[pool->slot_base[c] + si];
    int bulk = nb <= 32u;
#if CPD_HEAP_PROBE
    int probes = 0;
#endif

    CPD_HEV(pool, CPD_HEV_CALLS, 1);
#ifdef CPD_HEAP_STREAM
    if (nb >= CPD_HEAP_STREAM_MIN_BLOCKS && !cpd_load32(&pool->stream_off[c])) {
        void *p = cpd_heap_stream_alloc(pool, c, h);
        if (p)
            return p;
    }
#endif
    for (;;) {
        cpd_u32 peers = cpd_heap_peers(pool, cpd_activemask(), c);
        cpd_u32 n = (cpd_u32)cpd_popc(peers), rank = (cpd_u32)cpd_popc(peers & cpd_lanemask_lt());
        cpd_u32 s, got;

        /* every peer must take the same branch (a lane that gave up on
         * whole slabs may meet lanes that did not) */
        if (n >= nb && cpd_ballot(peers, bulk) == peers) {
            /* whole slabs for these lanes, k = n / nb of them: first from
             * the warp's cache buckets (each taken by the lane that saw it,
             * which fills its bitmap and count), the rest straight from the
             * chunk map (up to k of one map word, filled by the lowest
             * lane); lane r gets block r mod nb of the slab r / nb, the
             * cached slabs first */
            cpd_u32 k = n / nb, full = nb == 32u ? 0xffffffffu : (1u << nb) - 1u;
            cpd_u32 mine = CPD_HEAP_NONE, have = 0, hk, bits, j, src, t;
            cpd_u64 got64 = 0;
            if (pool->nbuckets) {
                mine = cpd_heap_cache_pop(pool, peers, k, h);
                if (mine != CPD_HEAP_NONE) {
                    cpd_or32(&pool->hbitmaps[(cpd_u64)mine * pool->bwords], full);
                    cpd_add32(&pool->cstate[mine], ((c + 1u) << CPD_HEAP_TAG_SHIFT) | nb);
                    /* the tag before the blocks: a lane may free its block
                     * (and read its chunk's tag) at once */
                    cpd_fence();
                }
                have = cpd_ballot(peers, mine != CPD_HEAP_NONE);
            }
            hk = (cpd_u32)cpd_popc(have);
            if (rank == 0 && hk < k) {
                got64 = cpd_heap_claim_bits(pool, k - hk, h, CPD_HEAP_BULK_SPREAD);
                for (bits = (cpd_u32)got64; bits; bits &= bits - 1u) {
                    t = (cpd_u32)(got64 >> 32) * 32u + (cpd_u32)cpd_ffs(bits) - 1u;
                    cpd_or32(&pool->hbitmaps[(cpd_u64)t * pool->bwords], full);
                    cpd_add32(&pool->cstate[t], ((c + 1u) << CPD_HEAP_TAG_SHIFT) | nb);
                }
                if (got64) {
                    cpd_fence();
                    cpd_heap_live(pool, (cpd_u64)cpd_popc((cpd_u32)got64));
                }
            }
            got64 = cpd_shfl64(peers, got64, cpd_leader(peers));
            bits = (cpd_u32)got64;
            j = rank / nb;
            /* every peer shuffles: from the lane that took cached slab j */
            src = j < hk ? cpd_heap_nth_bit(have, j) : (cpd_u32)cpd_leader(peers);
            t = (cpd_u32)cpd_shfl64(peers, (cpd_u64)mine, (int)src);
            if (hk + (cpd_u32)cpd_popc(bits)) {
                if (j < hk + (cpd_u32)cpd_popc(bits))
                    CPD_HEV(pool, CPD_HEV_BULK, 1);
                if (j < hk)
                    return pool->base + ((cpd_u64)t << pool->chunk_shift) + ((cpd_u64)(rank % nb) << (4u + c));
                if (j - hk < (cpd_u32)cpd_popc(bits))
                    return pool->base +
                           ((cpd_u64)((cpd_u32)(got64 >> 32) * 32u + cpd_heap_nth_bit(bits, j - hk)) << pool->chunk_shift) +
                           ((cpd_u64)(rank % nb) << (4u + c));
                continue; /* the lanes left over go around again */
            }
            bulk = 0;
        }

        s = cpd_load32(slot);
#if CPD_HEAP_PROBE
        /* (lanes that probed apart may read one value from two slots) */
        peers = cpd_match_any64(peers, ((cpd_u64)si << 32) | s);
#else
        peers = cpd_match_any64(peers, (cpd_u64)s);
#endif
        n = (cpd_u32)cpd_popc(peers);
        rank = (cpd_u32)cpd_popc(peers & cpd_lanemask_lt());
        got = 0;
        if (s < CPD_SLOT_SPECIAL) {
            got = cpd_heap_reserve(pool, s, c, peers, n, rank);
            if (rank < got)
                return cpd_heap_take(pool, s, c, h, rank);
        } else if (s == CPD_SLOT_BUSY) {
#if CPD_HEAP_PROBE
            if (probes < CPD_HEAP_PROBE) {
                probes++;
                si = si + 1u == nslots ? 0u : si + 1u;
                slot = &pool->hslots[pool->slot_base[c] + si];
                CPD_HEV(pool, CPD_HEV_PROBES, 1);
                continue;
            }
#endif
            CPD_HEV(pool, CPD_HEV_BUSY, 1);
            cpd_pause();
            continue;
        } else if (s == CPD_SLOT_EXHAUSTED &&
                   cpd_load32(&pool->epoch) == cpd_load32(&pool->exhausted_epoch[c])) {
            void *p = cpd_heap_borrow(pool, c, h);
            cpd_u32 mask, e0, gave;
            if (p)
                return p;
            /* the last look before a NULL: the cache back to the map (the
             * lanes here split it); if any of them gave something back,
             * or anything came back meanwhile, they go round again */
            mask = cpd_activemask();
            e0 = cpd_load32(&pool->epoch);
            gave = cpd_heap_sweep(pool, c);
            if (!cpd_ballot(mask, gave != 0u) && cpd_load32(&pool->epoch) == e0) {
                cpd_count_failure(pool);
                return 0;
            }
            continue;
        }
        /* full, empty, or exhausted with news: the first lane left fills it */
        if (rank == got && cpd_cas32(slot, s, CPD_SLOT_BUSY) == s)
            cpd_heap_refill(pool, slot, s, c, h);
    }
}

#endif /* CUPOLA_ALLOC_HEAP_SLOTS_CUH */
