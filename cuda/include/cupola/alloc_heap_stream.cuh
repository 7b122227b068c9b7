/*
 * cupola/alloc_heap_stream.cuh: the heap's streams, a variant of its policy
 * (compiled with -DCPD_HEAP_STREAM; included by alloc_heap.cuh after
 * alloc_heap_slab.cuh: it uses the words and functions of the parts before).
 *
 * Policy, exactly:
 *  - Which classes.  A class of 64 blocks a slab or more (16 B .. 1 KiB with
 *    64 KiB chunks) is served from its streams first; the slots of
 *    alloc_heap.cuh serve it while its streams are off.
 *  - Streams.  A class of nb blocks a slab has S = 4096 / (nb K) streams
 *    (at least 1, at most the pool's room for them: cpd_layout_heap), and a
 *    warp hashes to one.  A stream hands out the blocks of a run of K
 *    contiguous chunks (K = 256 / nb, 1 .. 16: a run holds 256 blocks or
 *    more) in address order: the lanes of a warp asking from it take n
 *    consecutive blocks with one 64-bit atomicAdd on the stream's word (the
 *    run in its high half, the blocks handed out of it in its low half);
 *    the lowest of them sets their bits (one atomicOr a bitmap word) and
 *    adds them to the count of handed blocks in the chunk's run_len word
 *    (marked CPD_HEAP_STREAM_MARK), and the lanes return after it.
 *  - A run's chunks are slabs of the class from the start: their tag, the
 *    active bit and a count of all nb blocks are set before the run is
 *    published, so a free (which drops the count) cannot empty a chunk
 *    whose blocks are still being handed out.  The warp whose handed count
 *    completes a chunk (all its bits set) takes its active bit off: from
 *    then on it is a slab like any other (given back when empty, listed as
 *    partial when it has room); the mark goes when it is given back.
 *  - The next run.  The lane that takes the first block past a run installs
 *    the next one: the run prepared for the stream (the warp that handed
 *    out the middle block of a run claims the next run then, and leaves it
 *    in the stream's hprep word), else one it claims itself: K contiguous
 *    chunks from the map's first word with room (fewer, halving down to
 *    one, when K do not line up), the lowest free ones from the bit the
 *    stream's number (mod 32) names: a class's streams meet no one there.  Lanes past the run wait until a run is
 *    published (the stream's run changes, or its count starts again).
 *  - Off.  A stream that finds no chunk for its next run turns the class's
 *    streams off, and a sweep (memory short: alloc_heap.cuh) turns every
 *    class's off: each stream's word is exchanged for OFF, the blocks of its
 *    run not handed out become free blocks of their slabs (their count
 *    dropped, their handed count made up, so a chunk completes as if they
 *    had been handed out), and the prepared runs go back to the map.  The
 *    class's lanes then go to the slots until a reset (a lane that took the
 *    first block past a run before the exchange may still publish one run,
 *    which serves the lanes already at its stream).
 *  - Density.  Blocks are handed out in address order within a run and runs
 *    come from the lowest free chunks, so a class's blocks lie together:
 *    what lies between them is only blocks freed meanwhile and the rest of
 *    the class's S current runs.
 */
#ifndef CUPOLA_ALLOC_HEAP_STREAM_CUH
#define CUPOLA_ALLOC_HEAP_STREAM_CUH

#ifndef CPD_HEAP_STREAM_RUN
#define CPD_HEAP_STREAM_RUN 256u /* a run holds at least this many blocks */
#endif
#ifndef CPD_HEAP_STREAM_SPAN
#define CPD_HEAP_STREAM_SPAN 4096u /* S * K * nb: the blocks of a class's current runs */
#endif
#define CPD_HEAP_SOFF 0xffffffffu   /* a stream word's high half: off */
#define CPD_HEAP_SCHUNK 0x07ffffffu /* a run's encoding: log2 K << 27 | first chunk + 1 */

CPD_FN cpd_u32 cpd_heap_stream_logk(cpd_u32 nb)
{
    cpd_u32 k = 0;
    while ((nb << k) < CPD_HEAP_STREAM_RUN && k < 4u)
        k++;
    return k;
}

/* The streams class c uses (0: none). */
CPD_FN cpd_u32 cpd_heap_nstreams(const cupola_device_pool *pool, cpd_u32 c, cpd_u32 nb)
{
    cpd_u32 room = pool->stream_base[c + 1u] - pool->stream_base[c];
    cpd_u32 want = CPD_HEAP_STREAM_SPAN / (nb << cpd_heap_stream_logk(nb));
    if (pool->nchunks >= CPD_HEAP_SCHUNK)
        return 0; /* (a run's first chunk + 1 must fit its 27 bits) */
    if (want < 1u)
        want = 1u;
    return room < want ? room : want;
}

CPD_FN cpd_u32 cpd_heap_run_first(cpd_u32 enc) { return (enc & CPD_HEAP_SCHUNK) - 1u; }

/* A run for stream i of class c: 1 << logk contiguous chunks (fewer when
 * they do not line up) from the map's first word with room, set up as the
 * policy says; its encoding, or 0 when the map has no chunk. */
CPD_FN cpd_u32 cpd_heap_stream_claim(cupola_device_pool *pool, cpd_u32 i, cpd_u32 c, cpd_u32 nb, cpd_u32 logk)
{
    for (;;) {
        cpd_u32 first = cpd_heap_claim(pool, 1u << logk, i, 0), k = 1u << logk;
        if (first != CPD_HEAP_NONE) {
            for (cpd_u32 j = 0; j < k; j++) {
                cpd_store32(&pool->run_len[first + j], CPD_HEAP_STREAM_MARK);
                cpd_add32(&pool->cstate[first + j], ((c + 1u) << CPD_HEAP_TAG_SHIFT) | CPD_HEAP_ACTIVE | nb);
            }
            cpd_heap_live(pool, (cpd_u64)k);
            return (logk << 27) | (first + 1u);
        }
        if (logk == 0u)
            return 0u;
        logk--;
    }
}

/* Gives back a run no block of which was handed out (a prepared run). */
CPD_FN void cpd_heap_stream_unclaim(cupola_device_pool *pool, cpd_u32 enc, cpd_u32 c, cpd_u32 nb)
{
    cpd_u32 first = cpd_heap_run_first(enc), k = 1u << (enc >> 27);
    for (cpd_u32 i = 0; i < k; i++) {
        cpd_store32(&pool->run_len[first + i], 0u);
        cpd_sub32(&pool->cstate[first + i], ((c + 1u) << CPD_HEAP_TAG_SHIFT) | CPD_HEAP_ACTIVE | nb);
    }
    cpd_heap_release(pool, first, k);
}

/* Claims the next run of stream i ahead, unless one is there. */
CPD_FN void cpd_heap_stream_prepare(cupola_device_pool *pool, cpd_u32 i, cpd_u32 c, cpd_u32 nb, cpd_u32 logk)
{
    cpd_u32 enc;
    if (cpd_load32(&pool->hprep[i]) != 0u || (enc = cpd_heap_stream_claim(pool, i, c, nb, logk)) == 0u)
        return;
    cpd_fence();
    if (cpd_cas32(&pool->hprep[i], 0u, enc) != 0u)
        cpd_heap_stream_unclaim(pool, enc, c, nb);
}

/* Blocks [a, b) of the run enc (b <= the run's end) counted handed in
 * their chunks (a chunk this completes loses its active bit): with `bits`,
 * a warp's blocks, their bits set first; without, blocks a cut leaves free
 * (their count dropped first). */
CPD_FN void cpd_heap_stream_hand(cupola_device_pool *pool, cpd_u32 enc, cpd_u32 nb, cpd_u32 a, cpd_u32 b, int bits)
{
    cpd_u32 first = cpd_heap_run_first(enc);
    while (a < b) {
        cpd_u32 j = a / nb, t = first + j, x = a - j * nb, y = (b - j * nb < nb ? b - j * nb : nb), prev;
        cpd_u32 *bm = pool->hbitmaps + (cpd_u64)t * pool->bwords;
        a = j * nb + y;
        if (bits) {
            for (cpd_u32 u = x; u < y;) {
                cpd_u32 w = u >> 5, v = (w + 1u) * 32u < y ? (w + 1u) * 32u : y;
                cpd_or32(&bm[w], (v - u == 32u ? 0xffffffffu : ((1u << (v - u)) - 1u)) << (u & 31u));
                u = v;
            }
        } else {
            cpd_sub32(&pool->cstate[t], y - x);
        }
        prev = cpd_add32(&pool->run_len[t], y - x);
        if ((prev & ~CPD_HEAP_STREAM_MARK) + (y - x) == nb) {
            cpd_u32 before = cpd_and32(&pool->cstate[t], ~CPD_HEAP_ACTIVE);
            cpd_heap_after_drop(pool, t, before, before & ~CPD_HEAP_ACTIVE);
        }
    }
}

/* Turns stream i of class c off (the policy's "Off"); whether it had a run. */
CPD_FN int cpd_heap_stream_cut(cupola_device_pool *pool, cpd_u32 i, cpd_u32 nb)
{
    cpd_u64 old = cpd_exch64(&pool->hstream[i], (cpd_u64)CPD_HEAP_SOFF << 32);
    cpd_u32 hi = (cpd_u32)(old >> 32), lo = (cpd_u32)old, L;
    if (hi == 0u || hi == CPD_HEAP_SOFF)
        return 0;
    L = nb << (hi >> 27);
    if (lo < L)
        cpd_heap_stream_hand(pool, hi, nb, lo, L, 0);
    return 1;
}

/* Turns class c's streams off and gives their prepared runs back; how many
 * streams and runs that touched. */
CPD_FN cpd_u32 cpd_heap_stream_off(cupola_device_pool *pool, cpd_u32 c)
{
    cpd_u32 nb = cpd_heap_blocks(pool, c), n = 0;
    if (!cpd_load32(&pool->stream_off[c]))
        cpd_store32(&pool->stream_off[c], 1u);
    for (cpd_u32 i = pool->stream_base[c]; i < pool->stream_base[c] + cpd_heap_nstreams(pool, c, nb); i++) {
        cpd_u32 enc = cpd_load32(&pool->hprep[i]) ? cpd_exch32(&pool->hprep[i], 0u) : 0u;
        if (enc) {
            cpd_heap_stream_unclaim(pool, enc, c, nb);
            n++;
        }
        if ((cpd_u32)(cpd_load64(&pool->hstream[i]) >> 32) != CPD_HEAP_SOFF)
            n += (cpd_u32)cpd_heap_stream_cut(pool, i, nb);
    }
    return n;
}

/* Publishes the next run of stream i (the lane that took the first block
 * past its run: the only one), or turns the class's streams off. */
CPD_FN void cpd_heap_stream_install(cupola_device_pool *pool, cpd_u32 i, cpd_u32 c, cpd_u32 nb, cpd_u32 logk)
{
    cpd_u32 enc = cpd_exch32(&pool->hprep[i], 0u);
    CPD_HEV(pool, CPD_HEV_INSTALLS, 1);
    if (enc)
        CPD_HEV(pool, CPD_HEV_PREPARED, 1);
    else
        enc = cpd_heap_stream_claim(pool, i, c, nb, logk);
    if (!enc) {
        cpd_heap_stream_off(pool, c);
        return;
    }
    /* the chunks' words before the run */
    cpd_fence();
    cpd_exch64(&pool->hstream[i], (cpd_u64)enc << 32);
}

/* A block of class c (nb >= CPD_HEAP_STREAM_MIN_BLOCKS) from the warp's
 * stream, or NULL when the class's streams are off (the slots serve it). */
CPD_FN void *cpd_heap_stream_alloc(cupola_device_pool *pool, cpd_u32 c, cpd_u32 h)
{
    cpd_u32 nb = cpd_heap_blocks(pool, c), ns = cpd_heap_nstreams(pool, c, nb), logk = cpd_heap_stream_logk(nb);
    cpd_u32 i;
    cpd_u64 *sw;
    if (ns == 0u)
        return 0;
    i = pool->stream_base[c] + (h >> 8) % ns;
    sw = &pool->hstream[i];
    for (;;) {
        cpd_u32 peers = cpd_heap_peers(pool, cpd_activemask(), c);
        cpd_u32 n = (cpd_u32)cpd_popc(peers), rank = (cpd_u32)cpd_popc(peers & cpd_lanemask_lt());
        cpd_u32 hi, lo, L, idx;
        cpd_u64 old = 0;
        if (rank == 0u)
            old = cpd_add64(sw, (cpd_u64)n);
        old = cpd_shfl64(peers, old, cpd_leader(peers));
        hi = (cpd_u32)(old >> 32);
        lo = (cpd_u32)old;
        if (hi == CPD_HEAP_SOFF)
            return 0;
        L = hi ? nb << (hi >> 27) : 0u;
        idx = lo + rank;
        if (lo < L) {
            cpd_u32 end = L - lo < n ? L : lo + n;
            if (rank == 0u)
                cpd_heap_stream_hand(pool, hi, nb, lo, end, 1);
            /* every lane's bit is set before any of them returns */
            (void)cpd_ballot(peers, 1);
            if (rank == 0u && lo <= L / 2u && L / 2u < end)
                cpd_heap_stream_prepare(pool, i, c, nb, logk);
            if (idx < L) {
                cpd_u32 t = cpd_heap_run_first(hi) + idx / nb;
                CPD_HEV(pool, CPD_HEV_STREAM, 1);
                return pool->base + ((cpd_u64)t << pool->chunk_shift) + ((cpd_u64)(idx % nb) << (4u + c));
            }
        }
        if (idx == L) {
            /* (a stream cut meanwhile stays off) */
            if (cpd_load32(&pool->stream_off[c]))
                return 0;
            cpd_heap_stream_install(pool, i, c, nb, logk);
            continue;
        }
        /* past the run: until the next is published (a new run's count
         * starts at 0, below L, even if its encoding is the old one's) */
        for (;;) {
            cpd_u64 cur = cpd_load64(sw);
            if ((cpd_u32)(cur >> 32) != hi || (cpd_u32)cur < L)
                break;
            CPD_HEV(pool, CPD_HEV_STREAM_WAIT, 1);
            cpd_pause();
        }
    }
}

/* A sweep's part: every class's streams off; how many streams and runs
 * that touched. */
CPD_FN cpd_u32 cpd_heap_stream_sweep(cupola_device_pool *pool)
{
    cpd_u32 n = 0;
    for (cpd_u32 c = 0; c < pool->nclasses; c++)
        if (cpd_heap_blocks(pool, c) >= CPD_HEAP_STREAM_MIN_BLOCKS)
            n += cpd_heap_stream_off(pool, c);
    return n;
}

#endif /* CUPOLA_ALLOC_HEAP_STREAM_CUH */
