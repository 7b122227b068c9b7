/*
 * cupola/alloc_heap_run.cuh: the heap's run path, a request above half a
 * chunk or a single chunk: the lanes of a warp asking for one chunk each
 * served from the warp's cache buckets and then from one map word a round,
 * those asking for one length from one run cut in order, a lane left
 * without claiming its own, as alloc_heap.cuh states under "Runs for a
 * warp".  Part of the heap: included by alloc_heap.cuh, after
 * alloc_heap_slots.cuh (a run that misses sweeps the cache back first).
 */
#ifndef CUPOLA_ALLOC_HEAP_RUN_CUH
#define CUPOLA_ALLOC_HEAP_RUN_CUH

CPD_FN void *cpd_heap_alloc_run(cupola_device_pool *pool, cpd_u64 bytes)
{
    cpd_u64 m64 = (bytes + (1ull << pool->chunk_shift) - 1ull) >> pool->chunk_shift;
    cpd_u32 m, h, peers, n, rank, first = CPD_HEAP_NONE;
    int cached = 0;

    if (m64 > pool->nchunks || m64 == 0) {
        cpd_count_failure(pool);
        return 0;
    }
    m = (cpd_u32)m64;
    h = cpd_hash32(cpd_warp_hash());
    peers = cpd_heap_peers(pool, cpd_activemask(), m);
    n = (cpd_u32)cpd_popc(peers);
    rank = (cpd_u32)cpd_popc(peers & cpd_lanemask_lt());
    if (m == 1u) {
        /* single chunks for the lanes asking one: first from the warp's
         * cache buckets (lane r looks at entry r), then for the lanes still
         * without, a round at a time, up to all of them from one map word
         * (the lowest of them claims, the j-th of them takes the j-th) */
        cpd_u32 need = peers;
        if (pool->nbuckets) {
            first = cpd_heap_cache_pop(pool, peers, n, h);
            cached = first != CPD_HEAP_NONE;
            need = cpd_ballot(peers, !cached);
        }
        /* (the lanes in need are those without a chunk: they leave the
         * loop together or after the ballot that takes them out) */
        for (int round = 0; round < 4 && first == CPD_HEAP_NONE; round++) {
            cpd_u32 k = (cpd_u32)cpd_popc(need), rk = (cpd_u32)cpd_popc(need & cpd_lanemask_lt());
            cpd_u64 got = 0;
            if (rk == 0)
                got = cpd_heap_claim_bits(pool, k, h, 1);
            got = cpd_shfl64(need, got, cpd_leader(need));
            if (!got)
                break;
            if (rk < (cpd_u32)cpd_popc((cpd_u32)got))
                first = (cpd_u32)(got >> 32) * 32u + cpd_heap_nth_bit((cpd_u32)got, rk);
            need = cpd_ballot(need, first == CPD_HEAP_NONE);
        }
    } else if (n > 1u && (cpd_u64)n * m <= pool->nchunks) {
        /* one run for the lanes asking the same length, cut in order */
        if (rank == 0)
            first = cpd_heap_claim(pool, n * m, h, 1);
        first = (cpd_u32)cpd_shfl64(peers, (cpd_u64)first, cpd_leader(peers));
        if (first != CPD_HEAP_NONE)
            first += rank * m;
    }
    if (first == CPD_HEAP_NONE)
        first = cpd_heap_claim(pool, m, h + rank, 1);
    if (first == CPD_HEAP_NONE) {
        /* the map is short: while this run sweeps the cache back to the
         * map and looks again, free chunks go to the map, where it looks
         * (another thread's sweep may have come first: the claim looks
         * again whatever this one found) */
        cpd_add32(&pool->sweeping, 1u);
        cpd_fence();
        cpd_heap_sweep(pool, CPD_HEAP_NONE);
        first = cpd_heap_claim(pool, m, h + rank, 1);
        cpd_sub32(&pool->sweeping, 1u);
    }
    /* the live count once for the lanes that got a run from the map (every
     * peer asked m; a cached chunk is counted live already) */
    peers = cpd_ballot(peers, first != CPD_HEAP_NONE && !cached);
    if (first == CPD_HEAP_NONE) {
        cpd_count_failure(pool);
        return 0;
    }
    cpd_store32(&pool->run_len[first], m);
    cpd_add32(&pool->cstate[first], CPD_HEAP_RUN << CPD_HEAP_TAG_SHIFT);
    if (!cached && cpd_is_leader(peers))
        cpd_heap_live(pool, (cpd_u64)cpd_popc(peers) * m);
    return pool->base + ((cpd_u64)first << pool->chunk_shift);
}

#endif /* CUPOLA_ALLOC_HEAP_RUN_CUH */
