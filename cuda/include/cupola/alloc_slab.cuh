/*
 * cupola/alloc_slab.cuh: size classes in slabs with bitmaps, allocate and
 * free from any thread (included by device_alloc.cuh).
 *
 * Policy, exactly:
 *  - The pool is cut into nslabs slabs of 2^slab_shift bytes (64 KiB, less
 *    for small pools: the host side halves it down to 8 KiB while fewer than
 *    256 slabs would fit).  Size classes are 16, 32, ..., 8192 bytes; a
 *    request takes the smallest class that holds it.  Requests above 8 KiB
 *    fail (NULL, counted in `failed`): this allocator has no large-block path.
 *  - A slab serves one class from the moment a thread takes it until
 *    dp:reset; its blocks are tracked by one bit each (bitmaps) and a count
 *    of reserved blocks (slab_used).  Freed blocks are reused by the same
 *    class; slabs do not move between classes (a workload that changes
 *    sizes needs a reset to get its memory back).
 *  - Each class has `slots` active slabs (up to 32).  A warp hashes its SM
 *    and warp slot to one of them, so the warps spread over the slots while
 *    the lanes of one warp share one.  Allocation in a slab: the lanes that
 *    picked the same slab reserve with ONE atomicAdd on its count (a lane
 *    whose reservation passes the slab's block count gives it back and
 *    finds the slab full); each lane that holds a reservation then sets one
 *    free bit with atomicOr, starting at a word chosen by the warp's hash
 *    plus its rank so that lanes do not collide.  A reservation guarantees a
 *    free bit exists (a bit is set only under a reservation and cleared
 *    before the reservation is returned), so the search ends.
 *  - A thread that finds its active slab full swaps the slot to BUSY with a
 *    compare-and-swap and fills it: first with a fresh slab (one atomicAdd
 *    on `taken`), else with a slab of the class that has room (the first
 *    found at most half full, else any not full), else marks the slot
 *    EXHAUSTED.  Threads that see BUSY look through up to 32 of the class's
 *    slabs and then retry; threads that see EXHAUSTED look through every slab
 *    of the class once and fail only if none has room (and put the slab
 *    they found back into the slot).
 *  - free(p): the slab and class come from p's offset; the bit is cleared
 *    with atomicAnd and the count decremented (one atomicSub per slab for
 *    the lanes of a warp freeing into it).  A pointer outside the pool, not
 *    at a block start, or already free is ignored.
 *  - Safe by construction under any number of threads, kernels, child
 *    kernels and streams: every state change is one atomic on a word, no
 *    reset is needed between runs that free their blocks, and a thread
 *    never waits for another except while a slot is BUSY (a bounded scan,
 *    then retry), which relies on independent thread scheduling (sm_70+).
 */
#ifndef CUPOLA_ALLOC_SLAB_CUH
#define CUPOLA_ALLOC_SLAB_CUH

CPD_FN cpd_u32 cpd_slab_class_of(cpd_u64 bytes)
{
    cpd_u32 c = 0;
    cpd_u64 s = CPD_ALIGN;
    while (s < bytes) {
        s <<= 1;
        c++;
    }
    return c;
}

CPD_FN cpd_u32 cpd_slab_blocks(const cupola_device_pool *pool, cpd_u32 c)
{
    return 1u << (pool->slab_shift - 4u - c);
}

/* The lanes calling with the same pool and the same key. */
CPD_FN cpd_u32 cpd_slab_peers(const cupola_device_pool *pool, cpd_u32 key)
{
    cpd_u32 same_pool = cpd_match_any64(cpd_activemask(), (cpd_u64)(size_t)pool);
    return cpd_match_any64(same_pool, (cpd_u64)key);
}

/* A block of class c in slab s, or NULL when the slab is full. */
CPD_FN void *cpd_slab_try(cupola_device_pool *pool, cpd_u32 s, cpd_u32 c, cpd_u32 h)
{
    cpd_u32 nb = cpd_slab_blocks(pool, c);
    cpd_u32 peers = cpd_slab_peers(pool, s);
    cpd_u32 rank = (cpd_u32)cpd_popc(peers & cpd_lanemask_lt());
    cpd_u32 n = (cpd_u32)cpd_popc(peers);
    cpd_u32 old = 0, got, words, w, last_valid;

    if (rank == 0)
        old = cpd_add32(&pool->slab_used[s], n);
    old = (cpd_u32)cpd_shfl64(peers, (cpd_u64)old, cpd_leader(peers));
    got = old >= nb ? 0u : (nb - old < n ? nb - old : n);
    if (rank == 0 && got < n)
        cpd_sub32(&pool->slab_used[s], n - got);
    if (rank >= got)
        return 0;

    words = (nb + 31u) / 32u;
    last_valid = (nb % 32u) ? (1u << (nb % 32u)) - 1u : 0xffffffffu;
    w = (h + rank) % words;
    for (;;) {
        cpd_u32 *wp = &pool->bitmaps[(cpd_u64)s * pool->words + w];
        cpd_u32 valid = (w == words - 1u) ? last_valid : 0xffffffffu;
        cpd_u32 cur = cpd_load32(wp);
        while ((cur & valid) != valid) {
            cpd_u32 bit = (cpd_u32)cpd_ffs(~cur & valid) - 1u;
            cpd_u32 prev = cpd_or32(wp, 1u << bit);
            if (!(prev & (1u << bit)))
                return pool->base + ((cpd_u64)s << pool->slab_shift) +
                       ((cpd_u64)(w * 32u + bit) << (4u + c));
            cur = prev | (1u << bit);
        }
        w = (w + 1u == words) ? 0u : w + 1u;
    }
}

/* Looks through up to limit slabs of class c (from a hashed start) for a
 * block; NULL when none had room.  *found gets the slab that gave one. */
CPD_FN void *cpd_slab_scan(cupola_device_pool *pool, cpd_u32 c, cpd_u32 h, cpd_u32 limit,
                           cpd_u32 *found)
{
    cpd_u32 n = cpd_load32(&pool->class_count[c]);
    cpd_u32 nb = cpd_slab_blocks(pool, c);
    cpd_u32 *list = pool->class_slabs + (cpd_u64)c * pool->nslabs;
    if (n == 0)
        return 0;
    if (limit > n)
        limit = n;
    for (cpd_u32 k = 0, i = h % n; k < limit; k++, i = (i + 1u == n) ? 0u : i + 1u) {
        cpd_u32 s = cpd_load32(&list[i]);
        void *p;
        if (s >= CPD_SLOT_SPECIAL || cpd_load32(&pool->slab_used[s]) >= nb)
            continue;
        if ((p = cpd_slab_try(pool, s, c, h)) != 0) {
            *found = s;
            return p;
        }
    }
    return 0;
}

/* The slab to put into an active slot of class c: a fresh one, else one of
 * the class with room, else CPD_SLOT_EXHAUSTED.  Called by the one thread
 * that set the slot BUSY. */
CPD_FN cpd_u32 cpd_slab_next(cupola_device_pool *pool, cpd_u32 c, cpd_u32 h)
{
    cpd_u32 nb = cpd_slab_blocks(pool, c);
    cpd_u32 *list = pool->class_slabs + (cpd_u64)c * pool->nslabs;
    cpd_u32 n, best = CPD_SLOT_EXHAUSTED;

    if (cpd_load32(&pool->taken) < pool->nslabs) {
        cpd_u32 t = cpd_add32(&pool->taken, 1u);
        if (t < pool->nslabs) {
            cpd_u32 idx;
            cpd_store32(&pool->slab_class[t], c + 1u);
            idx = cpd_add32(&pool->class_count[c], 1u);
            cpd_fence();
            cpd_store32(&list[idx], t);
            return t;
        }
    }
    n = cpd_load32(&pool->class_count[c]);
    for (cpd_u32 k = 0, i = n ? h % n : 0; k < n; k++, i = (i + 1u == n) ? 0u : i + 1u) {
        cpd_u32 s = cpd_load32(&list[i]), u;
        if (s >= CPD_SLOT_SPECIAL)
            continue;
        u = cpd_load32(&pool->slab_used[s]);
        if (u <= nb / 2u)
            return s;
        if (u < nb && best == CPD_SLOT_EXHAUSTED)
            best = s;
    }
    return best;
}

CPD_FN void *cpd_slab_alloc(cupola_device_pool *pool, cpd_u64 bytes)
{
    cpd_u32 c, h, *slot, found = 0;
    void *p;

    if (bytes > CPD_SLAB_MAX_BYTES || pool->nslabs == 0) {
        cpd_count_failure(pool);
        return 0;
    }
    c = cpd_slab_class_of(bytes);
    h = cpd_hash32(cpd_warp_hash());
    slot = &pool->active[c * CPD_SLAB_MAX_SLOTS + h % pool->slots];
    for (;;) {
        cpd_u32 s = cpd_load32(slot);
        if (s < CPD_SLOT_SPECIAL) {
            if ((p = cpd_slab_try(pool, s, c, h)) != 0)
                return p;
        } else if (s == CPD_SLOT_BUSY) {
            if ((p = cpd_slab_scan(pool, c, h, 32u, &found)) != 0)
                return p;
            cpd_pause();
            continue;
        } else if (s == CPD_SLOT_EXHAUSTED) {
            break;
        }
        /* full or empty: this thread replaces it, or another one already is */
        if (cpd_cas32(slot, s, CPD_SLOT_BUSY) == s) {
            cpd_u32 next = cpd_slab_next(pool, c, h);
            cpd_fence();
            cpd_store32(slot, next);
            if (next == CPD_SLOT_EXHAUSTED)
                break;
        }
    }
    /* The class had no room when the slot was last filled: look at every
     * slab once (blocks may have been freed since). */
    if ((p = cpd_slab_scan(pool, c, h, 0xffffffffu, &found)) != 0) {
        cpd_cas32(slot, CPD_SLOT_EXHAUSTED, found);
        return p;
    }
    cpd_count_failure(pool);
    return 0;
}

CPD_FN void cpd_slab_free(cupola_device_pool *pool, void *ptr)
{
    cpd_u64 off = (cpd_u64)((unsigned char *)ptr - pool->base);
    cpd_u64 within;
    cpd_u32 s, cls, c, b, bit, prev, peers;

    if ((unsigned char *)ptr < pool->base || off >= ((cpd_u64)pool->nslabs << pool->slab_shift))
        return;
    s = (cpd_u32)(off >> pool->slab_shift);
    cls = cpd_load32(&pool->slab_class[s]);
    if (cls == 0)
        return;
    c = cls - 1u;
    within = off & ((1ull << pool->slab_shift) - 1ull);
    if (within & ((CPD_ALIGN << c) - 1ull))
        return;
    b = (cpd_u32)(within >> (4u + c));
    bit = 1u << (b & 31u);
    prev = cpd_and32(&pool->bitmaps[(cpd_u64)s * pool->words + (b >> 5)], ~bit);
    if (!(prev & bit))
        return;
    peers = cpd_slab_peers(pool, s);
    if (cpd_is_leader(peers))
        cpd_sub32(&pool->slab_used[s], (cpd_u32)cpd_popc(peers));
}

#endif /* CUPOLA_ALLOC_SLAB_CUH */
