/*
 * cupola/alloc_heap_slab.cuh: the heap's slabs: a block reserved by the
 * count and taken by a bit, the count dropped, an empty slab given back, a
 * slab with room listed on its class's partial list and taken from it, as
 * alloc_heap.cuh states under "Slabs" and "Free".  Part of the heap:
 * included by alloc_heap.cuh, after alloc_heap_map.cuh.
 */
#ifndef CUPOLA_ALLOC_HEAP_SLAB_CUH
#define CUPOLA_ALLOC_HEAP_SLAB_CUH

/* ---- slabs ------------------------------------------------------------------ */

CPD_FN void cpd_heap_mark_partial(cupola_device_pool *pool, cpd_u32 c, cpd_u32 s)
{
    cpd_or32(&pool->partial[(cpd_u64)c * pool->cwords + (s >> 5)], 1u << (s & 31u));
    cpd_heap_news(pool);
}

/* The slab word of s went from `before` to `now` by a decrement or by its
 * active bit being cleared: retire the slab when it is inactive and empty,
 * list it as partial when it just got room. */
CPD_FN void cpd_heap_after_drop(cupola_device_pool *pool, cpd_u32 s, cpd_u32 before, cpd_u32 now)
{
    cpd_u32 tag = cpd_heap_tag(now), nb;
    if (tag == 0u || tag > pool->nclasses || (now & CPD_HEAP_ACTIVE))
        return;
    if (cpd_heap_count(now) == 0u) {
        if (cpd_cas32(&pool->cstate[s], now, 0u) == now) {
            /* a stream's chunk loses its mark before anyone may take it */
            if (cpd_load32(&pool->run_len[s]))
                cpd_store32(&pool->run_len[s], 0u);
            if (!(cpd_heap_cached_class(pool, tag - 1u) && cpd_heap_cache_push(pool, s, cpd_hash32(cpd_warp_hash()))))
                cpd_heap_release(pool, s, 1u);
        }
        return;
    }
    nb = cpd_heap_blocks(pool, tag - 1u);
    if (cpd_heap_count(now) < nb && (cpd_heap_count(before) >= nb || (before & CPD_HEAP_ACTIVE)))
        cpd_heap_mark_partial(pool, tag - 1u, s);
}

CPD_FN void cpd_heap_drop(cupola_device_pool *pool, cpd_u32 s, cpd_u32 n)
{
    cpd_u32 before = cpd_sub32(&pool->cstate[s], n);
    cpd_heap_after_drop(pool, s, before, before - n);
}

/* The lanes in peers (rank 0 their lowest) reserve n blocks of class c in
 * slab s; lanes of rank < the result hold one. */
CPD_FN cpd_u32 cpd_heap_reserve(cupola_device_pool *pool, cpd_u32 s, cpd_u32 c, cpd_u32 peers,
                                cpd_u32 n, cpd_u32 rank)
{
    cpd_u32 nb = cpd_heap_blocks(pool, c), old = 0, got, cnt;
    if (rank == 0)
        old = cpd_add32(&pool->cstate[s], n);
    old = (cpd_u32)cpd_shfl64(peers, (cpd_u64)old, cpd_leader(peers));
    cnt = cpd_heap_count(old);
    got = (cpd_heap_tag(old) != c + 1u || cnt >= nb) ? 0u : (nb - cnt < n ? nb - cnt : n);
    if (rank == 0 && got < n) {
        CPD_HEV(pool, CPD_HEV_RESERVE_MISS, n - got);
        cpd_heap_drop(pool, s, n - got);
    }
    return got;
}

/* A reserved block of class c in slab s: sets a free bit (one exists: a
 * bit is set only under a reservation). */
CPD_FN void *cpd_heap_take(cupola_device_pool *pool, cpd_u32 s, cpd_u32 c, cpd_u32 h, cpd_u32 rank)
{
    cpd_u32 nb = cpd_heap_blocks(pool, c);
    cpd_u32 words = (nb + 31u) / 32u;
    cpd_u32 last_valid = (nb % 32u) ? (1u << (nb % 32u)) - 1u : 0xffffffffu;
    cpd_u32 *bm = pool->hbitmaps + (cpd_u64)s * pool->bwords;
    /* (not h's low bits: those chose the warp's slot, so every warp of a
     * slot would start its lanes in the same words and race for the same
     * bits; other bits of h also pick which free bit a warp's lanes try
     * first) */
    cpd_u32 w = ((h >> 16) + rank) % words, j = ((h >> 8) & 31u) + rank / words;
    for (;;) {
        cpd_u32 valid = (w == words - 1u) ? last_valid : 0xffffffffu;
        cpd_u32 cur = cpd_load32(&bm[w]);
        while ((cur & valid) != valid) {
            /* the lanes starting in one word (j before this one) try
             * different free bits of it, not all the lowest */
            cpd_u32 f = ~cur & valid;
            cpd_u32 bit = cpd_heap_nth_bit(f, j % (cpd_u32)cpd_popc(f));
            cpd_u32 prev = cpd_or32(&bm[w], 1u << bit);
            CPD_HEV(pool, CPD_HEV_TAKE_TRIES, 1);
            if (!(prev & (1u << bit)))
                return pool->base + ((cpd_u64)s << pool->chunk_shift) +
                       ((cpd_u64)(w * 32u + bit) << (4u + c));
            cur = prev | (1u << bit);
        }
        w = (w + 1u == words) ? 0u : w + 1u;
    }
}

/* Sets the active bit of s if it is a slab of class c with room and no
 * slot: 1 when this thread did. */
CPD_FN int cpd_heap_activate(cupola_device_pool *pool, cpd_u32 s, cpd_u32 c)
{
    cpd_u32 nb = cpd_heap_blocks(pool, c);
    cpd_u32 st = cpd_load32(&pool->cstate[s]);
    while (cpd_heap_tag(st) == c + 1u && !(st & CPD_HEAP_ACTIVE) && cpd_heap_count(st) < nb) {
        cpd_u32 prev = cpd_cas32(&pool->cstate[s], st, st | CPD_HEAP_ACTIVE);
        if (prev == st)
            return 1;
        st = prev;
    }
    return 0;
}

/* A slab of class c from the partial list, made active; CPD_HEAP_NONE when
 * the list has none.  Entries that no longer qualify are cleared, and put
 * back if the slab qualified again meanwhile. */
CPD_FN cpd_u32 cpd_heap_take_partial(cupola_device_pool *pool, cpd_u32 c)
{
    cpd_u32 *list = pool->partial + (cpd_u64)c * pool->cwords;
    for (cpd_u32 w = 0; w < pool->cwords; w++) {
        cpd_u32 bits = cpd_load32(&list[w]);
        while (bits) {
            cpd_u32 i = (cpd_u32)cpd_ffs(bits) - 1u, s = w * 32u + i;
            bits &= bits - 1u;
            if (cpd_heap_activate(pool, s, c))
                return s;
            cpd_and32(&list[w], ~(1u << i));
            cpd_fence();
            if (cpd_heap_activate(pool, s, c))
                return s;
        }
    }
    return CPD_HEAP_NONE;
}

#endif /* CUPOLA_ALLOC_HEAP_SLAB_CUH */
