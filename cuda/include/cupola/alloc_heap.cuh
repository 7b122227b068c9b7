/*
 * cupola/alloc_heap.cuh: a general-purpose heap for kernels: 16 B up to the
 * whole pool, free from any thread, no reset needed (included by
 * device_alloc.cuh).  This header states the policy and holds its entry
 * points (allocate, free); the parts it includes hold the rest, each a
 * concern of its own:
 *   alloc_heap_variants.cuh  the variants' switches, the event counters
 *   alloc_heap_defs.cuh      a chunk's state word, size classes, bit helpers
 *   alloc_heap_map.cuh       the chunk map and its free-chunk cache
 *   alloc_heap_slab.cuh      slabs: reserve, take, drop, the partial lists
 *   alloc_heap_stream.cuh    the streams (a variant: CPD_HEAP_STREAM)
 *   alloc_heap_slots.cuh     the slot path: a block of a class, whole slabs
 *                            for a warp, refills, the sweep, the last resort
 *   alloc_heap_run.cuh       the run path: whole chunks, a warp's together
 *
 * Policy, exactly:
 *  - Chunks.  The pool's bytes are cut into nchunks chunks of
 *    2^chunk_shift bytes: 64 KiB, halved (down to 256 B) while fewer than 64
 *    would fit.  The last (capacity mod chunk) bytes are not used; a pool
 *    under 256 B has no chunk and fails every request.  One bit per chunk
 *    (cmap) says whether it is in use; one word per chunk (cstate) says
 *    what for: a slab of a size class (tag = class + 1, an `active` bit and
 *    the count of blocks reserved in it), the first chunk of a run (tag
 *    RUN, and run_len holds its length), or nothing (tag 0: free, or inside
 *    a run).  All metadata lives outside the pool's bytes.
 *  - Sizes.  A request of b bytes takes the smallest class of 16 B, 32 B,
 *    ..., chunk/2 that holds it, served from a slab; above chunk/2 it takes
 *    a run of ceil(b / chunk) whole chunks.  A block of a class is aligned
 *    to its size, a run to the chunk.  A request for more chunks than the
 *    pool has fails at once.
 *  - Claiming chunks.  Map words change by atomicOr (bits set) and
 *    atomicAnd (bits cleared), not compare-and-swap: a claim sets free bits
 *    it saw with one atomicOr and owns those that were still free (warps
 *    claiming in one word at once all get on, where compare-and-swap lets
 *    one through per round).  A search starts at the first word with room
 *    by the hints from `low` on (a word at or below the lowest with a free
 *    chunk: every release lowers it, a search that found the words below
 *    its start full raises it by compare-and-swap, so as not to undo a
 *    release's) and goes on around the map.  Single chunks for slabs come
 *    from the first word with room (a size's blocks stay together); whole
 *    slabs for a warp and single-chunk runs from the first with room of the
 *    32 words after it chosen by the warp's hash (warps asking at once
 *    spread).  A claim of k single chunks passes over words with fewer
 *    than min(k, 8) free chunks while it follows the hints (crumbs left by
 *    frees stay for smaller claims and the passes over every word).  In a
 *    word, chunks are taken from a bit chosen by the warp's hash upwards,
 *    around the word.  A run of 2..32 chunks lies inside one
 *    word, at a position aligned to the power of two >= its length when
 *    one is free, anywhere in a word otherwise (the first candidate from the
 *    warp's hash on); a try that finds some of its bits taken meanwhile
 *    gives back the others and tries another place.  A run of m > 32
 *    chunks starts at a word boundary (aligned to the power of two >= its
 *    words when it can) and sets its words in order by compare-and-swap,
 *    giving back what it took if one is taken meanwhile.  A hint bit per
 *    map word (cfull) lets a search skip full words; a search that finds
 *    nothing with the hints looks at every word before it fails.
 *  - Slabs.  A slab is one chunk serving one class; one bit per block
 *    (hbitmaps), and its count in cstate.  A block is reserved by adding to
 *    the count (one atomicAdd per warp for the lanes asking from the same
 *    slab: a lane whose place passes the slab's blocks gets none and the
 *    excess is given back), then taken by setting a free bit with atomicOr,
 *    starting at a word chosen by the warp's hash (other bits of it than
 *    those that chose its slot) and the lane's rank; the j-th lane of a
 *    warp to start in a word tries the word's (o + j)-th free bit, o from
 *    the hash (warps of one slot do not all race for its lowest bits).  A
 *    reservation checks the tag it added to: a slab that was meanwhile
 *    given back and reused for something else is treated as full.
 *  - Active slabs.  Each class has A slots (32 for 16 B, 64 for 32 B, 128
 *    for 64 B, 256 above; at most nchunks / 16, at least 1); a warp hashes
 *    its SM and warp slot to one.  When the slot's slab is full, one thread
 *    marks the slot BUSY and fills it: with a free chunk (from the warp's
 *    cache buckets for the classes the cache holds, else the map's first
 *    word with room first), else a slab of the class that has room and no
 *    slot (from the class's partial list), else, after taking back the
 *    empty active slabs of the other classes and the cached chunks, a free
 *    chunk again; with none, the slot is marked EXHAUSTED.  The slab it
 *    replaces loses its `active` bit.
 *  - Free-chunk cache.  Buckets of 32 entries (one 128-byte line each; a
 *    bucket per 16 chunks, 1 to 16384 of them: room for every chunk of a
 *    pool up to 32 GiB) hold free chunks that stay set in the map, so that
 *    warps allocating and freeing whole chunks over and over pass them on
 *    without the map's shared words; a warp's buckets are the one its hash
 *    picks and the 7 after it.  An empty slab of a class of 32 blocks or
 *    fewer and a freed single-chunk run go to the freeing warp's buckets
 *    (the first of them with one of 4 entries free: the chunk's index and
 *    +8, +16, +24 mod 32, taken by compare-and-swap; a fence first), else
 *    to the map; never once a class has found no memory, nor while a run
 *    that missed sweeps and looks again (a count the run raises first).
 *    Taking: lane r of the lanes asking looks at entry r of the warp's
 *    bucket, and of those that see a chunk the first ones from a lane
 *    chosen by the hash on take one each by atomicExch; the lanes still
 *    without look at the next bucket the same way, up to the 8th (a lone
 *    lane filling a slot looks at the first 2, four entries a load).
 *    Cached chunks count as live; a sweep (before a request fails) gives
 *    them all back to the map.
 *  - Whole slabs for a warp.  When the lanes of a warp asking for one
 *    class need at least a whole slab (classes of 32 blocks per slab or
 *    fewer), up to k = floor(n / blocks) chunks: first from the warp's
 *    cache buckets (each lane that took one fills its bitmap and count),
 *    the rest claimed by the lowest lane, up to k - cached from one map
 *    word at once; lane r gets the block r mod blocks of the r / blocks-th
 *    chunk (cached ones first); lanes left over go around again.
 *  - Runs for a warp.  The lanes of a warp asking for one chunk each take
 *    one from the warp's cache buckets where they see one, then, for those
 *    still without, up to 4 rounds in which the lowest of them claims up to
 *    one each of one map word with one atomicOr (the j-th of them the j-th
 *    chunk); lanes asking for m >= 2 chunks each take one run of n * m
 *    chunks, cut in order; a lane left without claims its own.  The count
 *    of live chunks changes once for the lanes of a warp that got runs
 *    from the map, and once for those that free runs of one length to the
 *    map together.
 *  - Free.  A block's bit is cleared with atomicAnd and the count
 *    decremented (one atomicSub per warp and slab).  A slab without its
 *    `active` bit is given back (to the cache or the chunk map) when its
 *    count reaches 0 (a compare-and-swap from exactly "class, not active,
 *    0"; whoever brings the word to that value tries it, so none is
 *    missed), and is put on its class's partial list when its count drops
 *    below its blocks.  A run is given back whole (compare-and-swap on its
 *    tag; a single chunk to the cache when there is room).  A pointer
 *    outside the pool's chunks, not at a block's start, or already free is
 *    ignored.
 *  - NULL only when the memory is not there: a request fails when its
 *    class's slot is EXHAUSTED and nothing came back since (an epoch, bumped
 *    by every chunk given back or cached and every slab put on a partial
 *    list once a class has been exhausted), no slab of the class in
 *    another slot or on the partial list has a free block, and a last
 *    sweep of the cache gave nothing back (a put racing the class's
 *    first sweep may have left a chunk there unseen); a run fails when
 *    no free chunks of the shape above exist after taking back empty active
 *    slabs and the cached chunks, while nothing is cached (a sweep's
 *    lanes split the buckets, four entries a load).
 *    Failures count in `failed`.  What stays out of reach: blocks free in a
 *    slab of another class (a slab serves one class until it is empty), and
 *    free chunks that do not line up as a run needs.
 *  - Safe from any thread, kernel, child kernel and stream: every state
 *    change is one atomic on a word; a thread waits for another only while
 *    a slot is BUSY (the filling thread runs on: independent thread
 *    scheduling, sm_70+).  On the host a warp is one lane (the warp paths
 *    run in tests/c/test_warpsim.c, with simulated warps of 32).
 *
 * Variants, chosen when a module is compiled (none by default: the policy
 * above; the survey runs them side by side through its `options`; the pool's
 * layout has room for every one of them):
 *  - CPD_HEAP_SLOTS_WIDE: 128 slots a class for 16-64 B, 256 for 128-512 B,
 *    1024 from 1 KiB (each at most nchunks / 16), where the policy has 32,
 *    64, 128, then 256: fewer refills of one slot one after another.
 *  - CPD_HEAP_PROBE=P: a warp that finds its slot BUSY tries the next P
 *    slots of its class before it pauses.
 *  - CPD_HEAP_SPREAD_REFILL: a slot's chunk from the map comes from the
 *    first word with room of the 32 after the first open one, chosen by the
 *    warp's hash (as whole slabs for a warp do), not from the first open one.
 *  - CPD_HEAP_BULK_DENSE: whole slabs for a warp from the map's first word
 *    with room, not spread by the hash.
 *  - CPD_HEAP_TAKE_LINE: a lone lane filling a slot reads each of its two
 *    buckets whole (eight loads issued together) before it takes an entry,
 *    where it reads four entries a load, one load after another.
 *  - CPD_HEAP_STREAM: classes of 64 blocks a slab or more are served from
 *    streams first (alloc_heap_stream.cuh states how).
 *  - CPD_HEAP_COUNTERS: counts of events (CPD_HEV_*) in the pool's state.
 */
#ifndef CUPOLA_ALLOC_HEAP_CUH
#define CUPOLA_ALLOC_HEAP_CUH

/* (in this order: each part uses those before it) */
#include "cupola/alloc_heap_variants.cuh"
#include "cupola/alloc_heap_defs.cuh"
#include "cupola/alloc_heap_map.cuh"
#include "cupola/alloc_heap_slab.cuh"
#ifdef CPD_HEAP_STREAM
#include "cupola/alloc_heap_stream.cuh"
#endif
#include "cupola/alloc_heap_slots.cuh"
#include "cupola/alloc_heap_run.cuh"

CPD_FN void *cpd_heap_alloc(cupola_device_pool *pool, cpd_u64 bytes)
{
    if (pool->nchunks == 0) {
        cpd_count_failure(pool);
        return 0;
    }
    if (bytes > (1ull << (pool->chunk_shift - 1u)))
        return cpd_heap_alloc_run(pool, bytes);
    return cpd_heap_alloc_small(pool, cpd_heap_class_of(bytes));
}

CPD_FN void cpd_heap_free(cupola_device_pool *pool, void *ptr)
{
    unsigned char *p = (unsigned char *)ptr;
    cpd_u64 off = (cpd_u64)(p - pool->base), within;
    cpd_u32 s, st, tag, c, b, bit, prev, peers;

    if (p < pool->base || off >= ((cpd_u64)pool->nchunks << pool->chunk_shift))
        return;
    CPD_HEV(pool, CPD_HEV_FREES, 1);
    s = (cpd_u32)(off >> pool->chunk_shift);
    within = off & ((1ull << pool->chunk_shift) - 1ull);
    st = cpd_load32(&pool->cstate[s]);
    tag = cpd_heap_tag(st);
    if (tag == CPD_HEAP_RUN) {
        cpd_u32 m;
        int pushed;
        if (within)
            return;
        /* one thread takes the tag off (a second free finds none) */
        for (;;) {
            cpd_u32 was;
            if (cpd_heap_tag(st) != CPD_HEAP_RUN)
                return;
            was = cpd_cas32(&pool->cstate[s], st, st - (CPD_HEAP_RUN << CPD_HEAP_TAG_SHIFT));
            if (was == st)
                break;
            st = was;
        }
        m = cpd_load32(&pool->run_len[s]);
        /* a single chunk to the warp's cache buckets when there is room,
         * else (and any longer run) back to the map */
        pushed = m == 1u && cpd_heap_cache_push(pool, s, cpd_hash32(cpd_warp_hash()));
        if (!pushed)
            cpd_heap_unmap(pool, s, m);
        /* the rest once for the lanes freeing runs of one length to the
         * map: their lowest map word, their chunks */
        peers = cpd_match_any64(cpd_heap_peers(pool, cpd_activemask(), CPD_HEAP_NONE), pushed ? 0ull : (cpd_u64)m);
        if (pushed)
            return;
        s = cpd_warp_min(peers, s >> 5);
        if (cpd_is_leader(peers))
            cpd_heap_returned(pool, s, (cpd_u64)cpd_popc(peers) * m);
        return;
    }
    if (tag == 0u || tag > pool->nclasses)
        return;
    c = tag - 1u;
    if (within & ((CPD_ALIGN << c) - 1ull))
        return;
    b = (cpd_u32)(within >> (4u + c));
    bit = 1u << (b & 31u);
    prev = cpd_and32(&pool->hbitmaps[(cpd_u64)s * pool->bwords + (b >> 5)], ~bit);
    if (!(prev & bit))
        return;
    peers = cpd_heap_peers(pool, cpd_activemask(), s);
    if (cpd_is_leader(peers))
        cpd_heap_drop(pool, s, (cpd_u32)cpd_popc(peers));
}

#endif /* CUPOLA_ALLOC_HEAP_CUH */
