/*
 * cupola/alloc_heap.cuh: a general-purpose heap for kernels: 16 B up to the
 * whole pool, free from any thread, no reset needed (included by
 * device_alloc.cuh).
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

#define CPD_HEAP_TAG_SHIFT 25u
#define CPD_HEAP_ACTIVE (1u << 24)
#define CPD_HEAP_COUNT 0x00ffffffu
#define CPD_HEAP_RUN 127u
#define CPD_HEAP_NONE 0xffffffffu

/* Buckets of the free-chunk cache a take or a put looks at: the warp's and
 * the next ones. */
#define CPD_HEAP_STEAL 8u
/* ... and those one lane alone takes from (filling a slot). */
#define CPD_HEAP_TAKE 2u
/* A claim of k chunks passes over map words with fewer than min(k, this)
 * free on its passes with the hints. */
#define CPD_HEAP_ROOM 8u
/* A chunk's run_len word while a stream hands it out: this bit, and the
 * count of its blocks handed out so far (alloc_heap_stream.cuh). */
#define CPD_HEAP_STREAM_MARK 0x80000000u
/* Room in every heap's layout (cpd_layout_heap) for the variants: slots a
 * class may use (at most nchunks / 16), and streams of the classes of 64
 * blocks a slab or more (4096 / nb of them, 1 .. 64, at most nchunks / 16;
 * alloc_heap_stream.cuh). */
#define CPD_HEAP_SLOTS_ROOM 1024u
#define CPD_HEAP_STREAM_MIN_BLOCKS 64u
#define CPD_HEAP_STREAMS_ROOM 64u

/* ---- variants (the header comment says what each does) -------------------- */
#ifdef CPD_HEAP_SLOTS_WIDE
#define CPD_HEAP_SLOTS_WANT(c) ((c) < 3u ? 128u : (c) < 6u ? 256u : 1024u)
#else
#define CPD_HEAP_SLOTS_WANT(c) (32u << ((c) < 3u ? (c) : 3u))
#endif
#ifndef CPD_HEAP_PROBE
#define CPD_HEAP_PROBE 0
#endif
#ifdef CPD_HEAP_SPREAD_REFILL
#define CPD_HEAP_REFILL_SPREAD 1
#else
#define CPD_HEAP_REFILL_SPREAD 0
#endif
#ifdef CPD_HEAP_BULK_DENSE
#define CPD_HEAP_BULK_SPREAD 0
#else
#define CPD_HEAP_BULK_SPREAD 1
#endif

/* Event counters: the survey's rows carry them per allocation. */
enum {
    CPD_HEV_CALLS,       /* lanes asking for a block of a class */
    CPD_HEV_TAKE_TRIES,  /* atomicOr tries on a slab's bitmap */
    CPD_HEV_RESERVE_MISS, /* lanes whose reservation found the slab full */
    CPD_HEV_BUSY,        /* pauses at a BUSY slot */
    CPD_HEV_PROBES,      /* moves to the next slot past a BUSY one */
    CPD_HEV_REFILLS,     /* slots filled */
    CPD_HEV_REFILL_CACHED, /* ... with a chunk from the cache */
    CPD_HEV_MAP_TRIES,   /* atomicOr tries on chunk map words */
    CPD_HEV_MAP_WORDS,   /* map words looked at by claims */
    CPD_HEV_BULK,        /* lanes served whole slabs */
    CPD_HEV_BORROW,      /* last resorts */
    CPD_HEV_STREAM,      /* lanes served by a stream */
    CPD_HEV_STREAM_WAIT, /* pauses waiting for a stream's next run */
    CPD_HEV_INSTALLS,    /* runs installed in a stream */
    CPD_HEV_PREPARED,    /* ... that were prepared ahead */
    CPD_HEV_FREES        /* frees */
};
#ifdef CPD_HEAP_COUNTERS
#define CPD_HEV(pool, e, n) cpd_add64(&(pool)->hev[e], (cpd_u64)(n))
#else
#define CPD_HEV(pool, e, n) ((void)0)
#endif

CPD_FN cpd_u32 cpd_heap_tag(cpd_u32 st) { return st >> CPD_HEAP_TAG_SHIFT; }
CPD_FN cpd_u32 cpd_heap_count(cpd_u32 st) { return st & CPD_HEAP_COUNT; }

CPD_FN cpd_u32 cpd_heap_blocks(const cupola_device_pool *pool, cpd_u32 c)
{
    return 1u << (pool->chunk_shift - 4u - c);
}

/* The slots class c uses: hslots[slot_base[c] ..] of them. */
CPD_FN cpd_u32 cpd_heap_nslots(const cupola_device_pool *pool, cpd_u32 c)
{
    cpd_u32 room = pool->slot_base[c + 1u] - pool->slot_base[c], want = CPD_HEAP_SLOTS_WANT(c);
    return room < want ? room : want;
}

CPD_FN cpd_u32 cpd_heap_class_of(cpd_u64 bytes)
{
    cpd_u32 c = 0;
    cpd_u64 s = CPD_ALIGN;
    while (s < bytes) {
        s <<= 1;
        c++;
    }
    return c;
}

CPD_FN cpd_u32 cpd_pow2_ceil(cpd_u32 x)
{
    cpd_u32 p = 1;
    while (p < x)
        p <<= 1;
    return p;
}

/* Bit p of the result: bits p .. p+m-1 of f are all set (1 <= m <= 32). */
CPD_FN cpd_u32 cpd_runs_of(cpd_u32 f, cpd_u32 m)
{
    cpd_u32 have = 1;
    while (have < m) {
        cpd_u32 s = have <= m - have ? have : m - have;
        f &= f >> s;
        have += s;
    }
    return f;
}

/* The positions that are multiples of align (a power of two <= 32). */
CPD_FN cpd_u32 cpd_align_mask(cpd_u32 align)
{
    switch (align) {
    case 1: return 0xffffffffu;
    case 2: return 0x55555555u;
    case 4: return 0x11111111u;
    case 8: return 0x01010101u;
    case 16: return 0x00010001u;
    default: return 1u;
    }
}

CPD_FN cpd_u32 cpd_lanemask_eq(void)
{
    return cpd_lanemask_lt() + 1u;
}

/* ---- the chunk map ---------------------------------------------------------- */

/* Word w has just become full: set its hint, and take it back if the word
 * lost a bit meanwhile (its freer may have cleared the hint before this
 * thread set it). */
CPD_FN void cpd_heap_mark_full(cupola_device_pool *pool, cpd_u32 w)
{
    cpd_u32 bit = 1u << (w & 31u);
    cpd_or32(&pool->cfull[w >> 5], bit);
    cpd_fence();
    if (cpd_load32(&pool->cmap[w]) != 0xffffffffu)
        cpd_and32(&pool->cfull[w >> 5], ~bit);
}

/* Sets the bits `want` of map word w with one atomicOr (never a
 * compare-and-swap: warps claiming in one word at once all get on).  The
 * bits that were free are now this thread's: the result.  *seen gets the
 * word as it was plus want. */
CPD_FN cpd_u32 cpd_heap_set_bits(cupola_device_pool *pool, cpd_u32 w, cpd_u32 want, cpd_u32 *seen)
{
    cpd_u32 old = cpd_or32(&pool->cmap[w], want), got = want & ~old;
    if (got && (old | want) == 0xffffffffu)
        cpd_heap_mark_full(pool, w);
    *seen = old | want;
    return got;
}

/* Clears the bits `mask` of map word w (its hint with them). */
CPD_FN void cpd_heap_clear_bits(cupola_device_pool *pool, cpd_u32 w, cpd_u32 mask)
{
    if (cpd_and32(&pool->cmap[w], ~mask) == 0xffffffffu)
        cpd_and32(&pool->cfull[w >> 5], ~(1u << (w & 31u)));
}

/* Memory came back: a class that found none may look again. */
CPD_FN void cpd_heap_news(cupola_device_pool *pool)
{
    if (cpd_load32(&pool->exhausted))
        cpd_add32(&pool->epoch, 1u);
}

CPD_FN void cpd_heap_live(cupola_device_pool *pool, cpd_u64 delta)
{
    cpd_u64 now = cpd_add64(&pool->chunks_live, delta) + delta;
    if (delta < (1ull << 63) && now > cpd_load64(&pool->chunks_peak))
        cpd_max64(&pool->chunks_peak, now);
}

/* Clears the map bits of chunks [first, first + m). */
CPD_FN void cpd_heap_unmap(cupola_device_pool *pool, cpd_u32 first, cpd_u32 m)
{
    while (m) {
        cpd_u32 w = first >> 5, b = first & 31u;
        cpd_u32 n = 32u - b < m ? 32u - b : m;
        cpd_heap_clear_bits(pool, w, (n == 32u ? 0xffffffffu : ((1u << n) - 1u)) << b);
        first += n;
        m -= n;
    }
}

/* After m chunks from map word w on came back: `low` down to w, the live
 * count, the news. */
CPD_FN void cpd_heap_returned(cupola_device_pool *pool, cpd_u32 w, cpd_u64 m)
{
    if (w < cpd_load32(&pool->low))
        cpd_min32(&pool->low, w);
    cpd_heap_live(pool, 0ull - m);
    cpd_heap_news(pool);
}

/* Gives chunks [first, first + m) back to the map. */
CPD_FN void cpd_heap_release(cupola_device_pool *pool, cpd_u32 first, cpd_u32 m)
{
    cpd_heap_unmap(pool, first, m);
    cpd_heap_returned(pool, first >> 5, (cpd_u64)m);
}

/* The k (>= 1) set bits of f met first going up from bit r (< 32), around. */
CPD_FN cpd_u32 cpd_heap_pick_bits(cpd_u32 f, cpd_u32 k, cpd_u32 r)
{
    cpd_u32 up = f & (0xffffffffu << r), below = f & ~(0xffffffffu << r), out = 0;
    for (; k && up; k--) {
        out |= up & (0u - up);
        up &= up - 1u;
    }
    for (; k && below; k--) {
        out |= below & (0u - below);
        below &= below - 1u;
    }
    return out;
}

/* The position of bit j (0 = the lowest) among the set bits of f. */
CPD_FN cpd_u32 cpd_heap_nth_bit(cpd_u32 f, cpd_u32 j)
{
    for (; j; j--)
        f &= f - 1u;
    return (cpd_u32)cpd_ffs(f) - 1u;
}

/* The first map word in [w, end) whose hint does not say full, or end: one
 * load of the hints per 32 words. */
CPD_FN cpd_u32 cpd_heap_open_in(const cupola_device_pool *pool, cpd_u32 w, cpd_u32 end)
{
    while (w < end) {
        cpd_u32 open = ~cpd_load32(&pool->cfull[w >> 5]) & (0xffffffffu << (w & 31u));
        if (open) {
            w = (w & ~31u) + (cpd_u32)cpd_ffs(open) - 1u;
            return w < end ? w : end;
        }
        w = (w | 31u) + 1u;
    }
    return end;
}

CPD_FN cpd_u32 cpd_heap_next_open(const cupola_device_pool *pool, cpd_u32 w)
{
    return cpd_heap_open_in(pool, w, pool->cwords);
}

/* Where a search for chunks starts: the first word with room by the hints,
 * from `low` on (moved up to it: a search need not look at the full words
 * below again); with spread, the warp's hash picks one of the 32 words
 * from there, so that warps asking at once do not all meet in one word. */
CPD_FN cpd_u32 cpd_heap_start(cupola_device_pool *pool, cpd_u32 h, int spread)
{
    cpd_u32 W = pool->cwords, low = cpd_load32(&pool->low), first;
    first = cpd_heap_next_open(pool, low < W ? low : 0u);
    if (first >= W)
        first = cpd_heap_next_open(pool, 0u); /* low is a hint: look below it */
    if (first >= W)
        first = 0;
    else if (first > low)
        cpd_cas32(&pool->low, low, first); /* not if a release lowered it meanwhile */
    return spread ? (first + h % 32u) % W : first;
}

/* Up to k (1..32) single chunks in one map word: in the first word from
 * the start (cpd_heap_start) on, around the map, that has a free chunk,
 * taken at the warp's hash within the word.  Word << 32 | the chunks' bits,
 * or 0 when no word had a free chunk (by the hints, then by every word). */
CPD_FN cpd_u64 cpd_heap_claim_bits(cupola_device_pool *pool, cpd_u32 k, cpd_u32 h, int spread)
{
    cpd_u32 W = pool->cwords, start;
    if (W == 0 || k == 0)
        return 0;
    start = cpd_heap_start(pool, h, spread);
    /* from start to the end, then from 0 to start; first by the hints */
    for (int pass = 0; pass < 4; pass++) {
        cpd_u32 end = pass & 1 ? start : W;
        for (cpd_u32 w = pass & 1 ? 0u : start; w < end; w++) {
            cpd_u32 cur;
            /* (the start itself cpd_heap_start just found open, unless spread) */
            if (pass < 2 && !(pass == 0 && w == start && !spread) && (w = cpd_heap_open_in(pool, w, end)) >= end)
                break;
            cur = cpd_load32(&pool->cmap[w]);
            CPD_HEV(pool, CPD_HEV_MAP_WORDS, 1);
            /* (crumbs are left to smaller claims and the last passes) */
            if (pass < 2 && (cpd_u32)cpd_popc(~cur) < (k < CPD_HEAP_ROOM ? k : CPD_HEAP_ROOM))
                continue;
            while (cur != 0xffffffffu) {
                cpd_u32 got = cpd_heap_set_bits(pool, w, cpd_heap_pick_bits(~cur, k, h & 31u), &cur);
                CPD_HEV(pool, CPD_HEV_MAP_TRIES, 1);
                if (got)
                    return ((cpd_u64)w << 32) | got;
            }
        }
    }
    return 0;
}

/* Sets m (2..32) contiguous free bits of map word w, aligned as the policy
 * says when `aligned`; the first chunk, or CPD_HEAP_NONE.  One atomicOr a
 * try: a try that finds some of its bits taken meanwhile gives back the
 * others and tries another place. */
CPD_FN cpd_u32 cpd_heap_claim_in_word(cupola_device_pool *pool, cpd_u32 w, cpd_u32 m, int aligned, cpd_u32 h)
{
    cpd_u32 mask = m == 32u ? 0xffffffffu : (1u << m) - 1u;
    cpd_u32 cur = cpd_load32(&pool->cmap[w]);
    for (;;) {
        cpd_u32 cand = cpd_runs_of(~cur, m), want, got, up;
        cpd_u32 p;
        if (aligned)
            cand &= cpd_align_mask(cpd_pow2_ceil(m));
        if (!cand)
            return CPD_HEAP_NONE;
        up = cand & (0xffffffffu << (h & 31u));
        p = (cpd_u32)cpd_ffs(up ? up : cand) - 1u;
        want = mask << p;
        got = cpd_heap_set_bits(pool, w, want, &cur);
        if (got == want)
            return w * 32u + p;
        if (got)
            cpd_heap_clear_bits(pool, w, got);
    }
}

/* Sets the first m (> 32) bits from word w on: whole words, then the low
 * bits of the last; gives back what it took if a word is taken meanwhile. */
CPD_FN cpd_u32 cpd_heap_claim_words(cupola_device_pool *pool, cpd_u32 w, cpd_u32 m)
{
    cpd_u32 k = (m + 31u) / 32u, r = m - 32u * (k - 1u), j;
    for (j = 0; j < k; j++) {
        cpd_u32 mask = (j + 1u < k || r == 32u) ? 0xffffffffu : (1u << r) - 1u;
        cpd_u32 cur = cpd_load32(&pool->cmap[w + j]);
        int ok = 0;
        while (!(cur & mask)) {
            cpd_u32 prev = cpd_cas32(&pool->cmap[w + j], cur, cur | mask);
            if (prev == cur) {
                ok = 1;
                break;
            }
            cur = prev;
        }
        if (!ok)
            break;
        if ((cur | mask) == 0xffffffffu)
            cpd_heap_mark_full(pool, w + j);
    }
    if (j == k)
        return w * 32u;
    for (cpd_u32 i = 0; i < j; i++)
        cpd_heap_clear_bits(pool, w + i, i + 1u < k || r == 32u ? 0xffffffffu : (1u << r) - 1u);
    return CPD_HEAP_NONE;
}

/* Claims m (>= 2) contiguous chunks; the first, or CPD_HEAP_NONE when the
 * map has no such place.  The search starts at cpd_heap_start (spread as
 * asked) and goes around the map. */
CPD_FN cpd_u32 cpd_heap_claim_run(cupola_device_pool *pool, cpd_u32 m, cpd_u32 h, int spread)
{
    cpd_u32 W = pool->cwords, start;
    if (m < 2u || m > pool->nchunks || W == 0)
        return CPD_HEAP_NONE;
    start = cpd_heap_start(pool, h, spread);
    if (m <= 32u) {
        /* passes (each from start to the end, then from 0 to start):
         * aligned with the hints, anywhere with the hints, anywhere in
         * every word */
        for (int pass = 0; pass < 6; pass++) {
            cpd_u32 end = pass & 1 ? start : W;
            for (cpd_u32 w = pass & 1 ? 0u : start; w < end; w++) {
                cpd_u32 got;
                if (pass < 4 && (w = cpd_heap_open_in(pool, w, end)) >= end)
                    break;
                CPD_HEV(pool, CPD_HEV_MAP_WORDS, 1);
                got = cpd_heap_claim_in_word(pool, w, m, pass < 2, h);
                if (got != CPD_HEAP_NONE)
                    return got;
            }
        }
        return CPD_HEAP_NONE;
    } else {
        cpd_u32 k = (m + 31u) / 32u, align = cpd_pow2_ceil(k);
        if (k > W)
            return CPD_HEAP_NONE;
        for (int pass = 0; pass < 2; pass++) {
            for (cpd_u32 i = 0; i < W; i++) {
                cpd_u32 w = start + i < W ? start + i : start + i - W, got, j;
                if ((pass == 0 && w % align) || w + k > W)
                    continue;
                for (j = 0; j + 1u < k && cpd_load32(&pool->cmap[w + j]) == 0u; j++)
                    ;
                if (j + 1u < k)
                    continue;
                got = cpd_heap_claim_words(pool, w, m);
                if (got != CPD_HEAP_NONE)
                    return got;
            }
        }
        return CPD_HEAP_NONE;
    }
}

/* Claims m contiguous chunks (one: the first free chunk as
 * cpd_heap_claim_bits finds it); the first, or CPD_HEAP_NONE. */
CPD_FN cpd_u32 cpd_heap_claim(cupola_device_pool *pool, cpd_u32 m, cpd_u32 h, int spread)
{
    cpd_u64 got;
    if (m != 1u)
        return cpd_heap_claim_run(pool, m, h, spread);
    got = cpd_heap_claim_bits(pool, 1u, h, spread);
    return got ? (cpd_u32)(got >> 32) * 32u + (cpd_u32)cpd_ffs((cpd_u32)got) - 1u : CPD_HEAP_NONE;
}

/* ---- the free-chunk cache --------------------------------------------------- */

/* The t-th bucket of the warp with hash h: 32 entries, each a free chunk
 * + 1 or 0, in one 128-byte line. */
CPD_FN cpd_u32 *cpd_heap_bucket(const cupola_device_pool *pool, cpd_u32 h, cpd_u32 t)
{
    return pool->hcache + (cpd_u64)((h % pool->nbuckets + t) % pool->nbuckets) * 32u;
}

/* Whether an empty slab of class c goes to the cache: the classes a warp
 * takes whole slabs of (32 blocks or fewer). */
CPD_FN int cpd_heap_cached_class(const cupola_device_pool *pool, cpd_u32 c)
{
    return cpd_heap_blocks(pool, c) <= 32u;
}

/* Puts chunk s (free, tag 0, its map bit still set: this thread's) into the
 * bucket of the warp with hash h, at one of 4 entries (s, s + 8, ... mod
 * 32: the chunks of one map word, freed by one warp, meet no one); 1 when
 * it went in.  Never once a class has found no memory: from then on free
 * chunks go to the map, where every request looks. */
CPD_FN int cpd_heap_cache_push(cupola_device_pool *pool, cpd_u32 s, cpd_u32 h)
{
    if (pool->nbuckets == 0u || cpd_load32(&pool->exhausted) || cpd_load32(&pool->sweeping))
        return 0;
    /* the chunk's last uses (its blocks' frees, its tag) before its entry */
    cpd_fence();
    for (cpd_u32 t = 0; t < CPD_HEAP_STEAL && t < pool->nbuckets; t++) {
        cpd_u32 *b = cpd_heap_bucket(pool, h, t);
        for (cpd_u32 i = 0; i < 4u; i++) {
            cpd_u32 e = (s + 8u * i) & 31u;
            if (cpd_load32(&b[e]) == 0u && cpd_cas32(&b[e], 0u, s + 1u) == 0u) {
                /* a class that ran out meanwhile looks again (its sweep
                 * empties the cache).  No fence between the entry and
                 * this read, on the hot path: a put that races a class's
                 * first sweep can leave its chunk unseen, and the last
                 * look before a NULL (cpd_heap_alloc_small) sweeps again */
                cpd_heap_news(pool);
                return 1;
            }
        }
    }
    return 0;
}

/* Up to `want` chunks for the lanes of mask, one each: the lanes look at
 * the entries of the warp's bucket (the j-th of them entry j), of those
 * that see a chunk the first from a lane chosen by the hash on take it;
 * lanes still without look at the next buckets the same way.  This lane's
 * chunk (its map bit set, tag 0, bitmap clear, counted live), or
 * CPD_HEAP_NONE. */
CPD_FN cpd_u32 cpd_heap_cache_pop(cupola_device_pool *pool, cpd_u32 mask, cpd_u32 want, cpd_u32 h)
{
    cpd_u32 need = mask, o = (h >> 16) & 31u;
    for (cpd_u32 t = 0; t < CPD_HEAP_STEAL && t < pool->nbuckets && want; t++) {
        cpd_u32 rank = (cpd_u32)cpd_popc(need & cpd_lanemask_lt());
        cpd_u32 *e = cpd_heap_bucket(pool, h, t) + (rank & 31u);
        cpd_u32 v = cpd_load32(e), mine = CPD_HEAP_NONE, got;
        cpd_u32 seen = cpd_ballot(need, v != 0u);
        /* (ballots are by lane: the place from o among those that see one) */
        cpd_u32 q = ((cpd_u32)cpd_popc(cpd_lanemask_lt()) - o) & 31u;
        cpd_u32 rot = o ? (seen >> o) | (seen << (32u - o)) : seen;
        if (v != 0u && (cpd_u32)cpd_popc(rot & ((1u << q) - 1u)) < want && (v = cpd_exch32(e, 0u)) != 0u)
            mine = v - 1u;
        got = cpd_ballot(need, mine != CPD_HEAP_NONE);
        if (mine != CPD_HEAP_NONE)
            return mine;
        want -= (cpd_u32)cpd_popc(got) < want ? (cpd_u32)cpd_popc(got) : want;
        need &= ~got;
    }
    return CPD_HEAP_NONE;
}

/* One lane's take: the first chunk in the warp's first CPD_HEAP_TAKE
 * buckets, read four entries a load from a quarter-line chosen by the hash
 * on, around; CPD_HEAP_NONE if none.  (A lone lane reads its entries one
 * load after another: the warp-wide take can look further for the same
 * time.) */
CPD_FN cpd_u32 cpd_heap_cache_take(cupola_device_pool *pool, cpd_u32 h)
{
#ifdef CPD_HEAP_TAKE_LINE
    /* (quarter-lines in the hash's order, so that the entries' registers
     * are named by constants once the loops are unrolled) */
    for (cpd_u32 t = 0; t < CPD_HEAP_TAKE && t < pool->nbuckets; t++) {
        cpd_u32 *b = cpd_heap_bucket(pool, h, t), v[32], x;
        for (cpd_u32 q = 0; q < 8u; q++)
            cpd_load4x32(b + (((q + (h >> 16)) & 7u) << 2), v + 4u * q);
        for (cpd_u32 k = 0; k < 32u; k++)
            if (v[k] != 0u && (x = cpd_exch32(b + ((((k >> 2) + (h >> 16)) & 7u) << 2) + (k & 3u), 0u)) != 0u)
                return x - 1u;
    }
#else
    for (cpd_u32 t = 0; t < CPD_HEAP_TAKE && t < pool->nbuckets; t++) {
        cpd_u32 *b = cpd_heap_bucket(pool, h, t);
        for (cpd_u32 q = 0; q < 8u; q++) {
            cpd_u32 *e = b + (((q + (h >> 16)) & 7u) << 2), v[4], x;
            cpd_load4x32(e, v);
            for (cpd_u32 i = 0; i < 4u; i++)
                if (v[i] != 0u && (x = cpd_exch32(&e[i], 0u)) != 0u)
                    return x - 1u;
        }
    }
#endif
    return CPD_HEAP_NONE;
}

/* Gives every cached chunk back to the map; how many this lane gave.  The
 * lanes running it together split the buckets (lane j of n drains buckets
 * j, j + n, ...), each reading four entries a load. */
CPD_FN cpd_u32 cpd_heap_drain(cupola_device_pool *pool)
{
    cpd_u32 mask = cpd_activemask(), n = (cpd_u32)cpd_popc(mask);
    cpd_u32 j = (cpd_u32)cpd_popc(mask & cpd_lanemask_lt()), got = 0;
    for (cpd_u32 k = j; k < pool->nbuckets; k += n) {
        cpd_u32 *b = pool->hcache + (cpd_u64)k * 32u;
        for (cpd_u32 q = 0; q < 32u; q += 4u) {
            cpd_u32 v[4], x;
            cpd_load4x32(b + q, v);
            for (cpd_u32 i = 0; i < 4u; i++) {
                if (v[i] == 0u || (x = cpd_exch32(&b[q + i], 0u)) == 0u)
                    continue;
                cpd_heap_release(pool, x - 1u, 1u);
                got++;
            }
        }
    }
    return got;
}

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

/* The lanes calling with the same pool and the same key. */
CPD_FN cpd_u32 cpd_heap_peers(const cupola_device_pool *pool, cpd_u32 mask, cpd_u32 key)
{
    cpd_u32 same_pool = cpd_match_any64(mask, (cpd_u64)(size_t)pool);
    return cpd_match_any64(same_pool, (cpd_u64)key);
}

#ifdef CPD_HEAP_STREAM
#include "cupola/alloc_heap_stream.cuh"
#endif

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
