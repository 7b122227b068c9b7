/*
 * cupola/alloc_heap_map.cuh: the heap's chunk map (one bit a chunk, the
 * full-word hints, `low`, claims of single chunks and of runs) and its
 * free-chunk cache (the warps' buckets: put, take, drain), as
 * alloc_heap.cuh states under "Claiming chunks" and "Free-chunk cache".
 * Part of the heap: included by alloc_heap.cuh, after alloc_heap_defs.cuh.
 */
#ifndef CUPOLA_ALLOC_HEAP_MAP_CUH
#define CUPOLA_ALLOC_HEAP_MAP_CUH

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

#endif /* CUPOLA_ALLOC_HEAP_MAP_CUH */
