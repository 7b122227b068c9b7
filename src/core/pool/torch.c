/*
 * pool/torch.c: PyTorch 2.11's CUDA caching allocator (CUDACachingAllocator,
 * "native" backend), modelled exactly: kind = "torch", with the settings of
 * PYTORCH_CUDA_ALLOC_CONF (pool/torch_conf.c) and PyTorch's counters.
 *
 * Policy, exactly (PyTorch's rules, restated):
 *  - Sizes.  A request of n bytes is rounded to 512 bytes (n < 512: 512).
 *    With roundup_power2_divisions d for n's interval (intervals are the
 *    powers of two from 1 MiB; below 2 MiB the first), if d > 1 and
 *    n > 512 d, n is rounded instead up to the next of d equal steps
 *    between the powers of two around it (a power of two stays itself; a
 *    step below one byte rounds to the next power of two).
 *  - Pools.  Rounded sizes up to 1 MiB are small, the rest large; each pool
 *    keeps its free blocks ordered by (stream, size, address) and, for
 *    expandable segments, its unmapped address ranges by (stream, address).
 *    Streams are ordered by their handle value (the trace's stream value).
 *  - Finding a block.  The first free block of the request's stream, in
 *    that order, at least as large as the request (best fit, lowest address
 *    among equals).  Refused if the request is below max_split_size and the
 *    block is not (an oversize block is never split for a smaller request),
 *    or if the request is at least max_split_size and the block is larger by
 *    max_non_split_rounding (large_segment_size by default) or more.  With expandable
 *    segments a block is ranked by what it can grow to (its size plus the
 *    unmapped range right after it): from the first fit, the next block of
 *    the stream is taken while it is expandable-rankable smaller, and so on.
 *  - New segments.  When no block fits: garbage collection first (below),
 *    then a segment of 2 MiB (small requests), large_segment_size (20 MiB
 *    by default; requests under 10 MiB), or the request rounded up to
 *    2 MiB.  Refused, without asking the device, when the memory in
 *    segments plus that size would pass the allowed maximum (the pool's max, or per_process_memory_fraction of the
 *    device's memory).  Refused: release the cached blocks of the request's
 *    pool and stream that are at least max_split_size (the smallest single
 *    one that covers the request, else from the largest down until they
 *    cover it; nothing when max_split_size is unset) and try again; refused
 *    again: synchronize (every pending block returns to its pool), release
 *    every unsplit cached block of both pools, try a last time (counted as a
 *    retry, num_alloc_retries); refused: out of memory (num_ooms).
 *  - Splitting.  The block found is split when the rest would be at least
 *    512 bytes (small pool, or expandable segments), or, in the large pool,
 *    when the request is below max_split_size and the rest is more than
 *    1 MiB.  The request gets the lower part; the rest stays free.
 *  - Freeing.  A freed block used only on its own stream goes back at once
 *    and merges with free neighbours of its segment.  One used on other
 *    streams (record_stream) waits for those streams (events) and goes back
 *    when they are done: found at the start of a later allocation, or when
 *    the allocator synchronizes.  allocated bytes drop at the free, active
 *    bytes when the block goes back.
 *  - empty_cache (p:empty_cache(), p:trim(0)): synchronize, then release
 *    every unsplit cached block of both pools (cudaFree), and unmap the free
 *    pages of expandable segments (a segment left with no page is given
 *    back).
 *  - Garbage collection (garbage_collection_threshold t, only with a limit):
 *    counting the block searches of each pool, a cached block's age is the
 *    searches since it was cached.  Before a new segment, if the memory in
 *    segments is above t x the limit, unsplit cached large blocks at least
 *    as old as the average are released, in rounds, until the excess is
 *    reclaimed or none is left.
 *  - Expandable segments.  Per stream and pool, one address range of
 *    1 1/8 of the device's memory whose pages (2 MiB small, large_segment_size
 *    large) are mapped as needed: a new segment is the lowest place in the
 *    stream's ranges where free and unmapped space in a row holds the
 *    request (a new range when none does), mapped over its unmapped part,
 *    and the block merges with its free mapped neighbours.  Every map and
 *    unmap counts as a device allocation / free.  Blocks in expandable
 *    segments split whenever 512 bytes would remain.
 *  - Counters: PyTorch's (allocation, segment, active, inactive_split and
 *    their _bytes, allocated_bytes, reserved_bytes, requested_bytes, each
 *    current / peak / allocated / freed, for all, small and large pools;
 *    num_alloc_retries, num_ooms, num_sync_all_streams, num_device_alloc,
 *    num_device_free, oversize_allocations and oversize_segments).
 *  - Not modelled: CUDA graph pools, IPC, the pinned (host) allocator
 *    (its keys are accepted and reported), release_lock_on_cudamalloc (a
 *    threading detail); and the driver's refusal of a page that is not a
 *    whole number of its 2 MiB granules (large_segment_size_mb odd, with
 *    expandable segments): PyTorch raises a CUDA error at that map, the
 *    model maps it (over the device, the map fails and the request with it).
 *
 * Data structures: each pool's two orders are intrusive red-black trees
 * (pool/rbtree.h: the blocks carry their nodes; no allocation per insert); block
 * descriptors come from slabs and are recycled.  Over the device, blocks
 * are found from their address through a hash map; a replay holds them by
 * handle (cp_torch_malloc), which costs no lookup.
 *
 * This file holds the rules and the fast path (malloc, free); the model's
 * other files are listed in torch_impl.h.
 */
#include "torch_impl.h"

#include <string.h>

/* ---- PyTorch's rules --------------------------------------------------------- */
static uint64_t round_size(const cp_torch *t, uint64_t size)
{
    uint64_t d;
    if (size < MIN_BLOCK)
        return MIN_BLOCK;
    if (!t->divisions) /* the default: 512-byte steps */
        return (size + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
    d = cp_torch_conf_divisions(&t->conf, size);
    /* 512 x d wraps at 2^64 as PyTorch's size_t product does */
    if (d > 1 && size > MIN_BLOCK * d) {
        uint64_t floor2, step, down;
        if (!(size & (size - 1)))
            return size;
        floor2 = UINT64_C(1) << (63 - __builtin_clzll(size));
        step = floor2 >> (63 - __builtin_clzll(d));
        if (step == 0)
            return floor2 << 1;
        down = size & ~(step - 1);
        return down == size ? size : down + step;
    }
    return (size + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
}

/* The segment for a request (get_allocation_size). */
static uint64_t allocation_size(const cp_torch *t, uint64_t size)
{
    if (size <= SMALL_SIZE)
        return SMALL_BUFFER;
    if (size < MIN_LARGE_ALLOC)
        return t->conf.large_segment_size;
    return (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

/* What an expandable block can grow to: its size and the unmapped range
 * right after it. */
static uint64_t expandable_size(const cp_torch_block *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* The block get_free_block would take, not yet removed (NULL: none). */
static cp_torch_block *find_free(cp_torch *t, tpool *p, uint64_t stream, uint64_t size)
{
    cp_torch_block *b = blocks_lower_bound(p, stream, size);
    if (!b || b->stream != stream)
        return NULL;
    if (b->seg) {
        if (t->conf.expandable_segments) {
            cp_rbn *nx = cp_rb_next(&b->node);
            while (b->seg && nx && blk_of(nx)->stream == stream &&
                   expandable_size(blk_of(nx)) < expandable_size(b)) {
                b = blk_of(nx);
                nx = cp_rb_next(nx);
            }
        } else {
            /* expandable segments turned off: only other blocks will do */
            cp_rbn *nx = cp_rb_next(&b->node);
            while (nx && blk_of(nx)->seg && blk_of(nx)->stream == stream)
                nx = cp_rb_next(nx);
            if (!nx || blk_of(nx)->stream != stream)
                return NULL;
            b = blk_of(nx);
        }
    }
    if (size < t->conf.max_split_size && b->size >= t->conf.max_split_size)
        return NULL;
    if (size >= t->conf.max_split_size && b->size >= size + t->conf.max_non_split_rounding)
        return NULL;
    return b;
}

static int gc_on(const cp_torch *t)
{
    return t->has_limit && t->conf.gc_threshold > 0.0;
}

/* The block get_free_block takes; it is left in the tree (alloc_found takes
 * it out, or leaves its rest there in place). */
static cp_torch_block *get_free_block(cp_torch *t, tpool *p, uint64_t stream, uint64_t size)
{
    if (gc_on(t))
        p->searches++;
    return find_free(t, p, stream, size);
}

/* Merges src into dst when src is free, settled and mapped alike; returns
 * the bytes taken over (0: none). */
uint64_t cp_tk_try_merge(cp_torch *t, cp_torch_block *dst, cp_torch_block *src)
{
    uint64_t sz;
    if (!src || src->allocated || src->events || src->use || dst->mapped != src->mapped)
        return 0;
    if (dst->prev == src) {
        dst->ptr = src->ptr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    sz = src->size;
    dst->size += sz;
    cache_remove(t, src);
    del_block(t, src);
    return sz;
}

/* A block whose streams are done goes back to its pool (free_block). */
static int mergeable(const cp_torch_block *dst, const cp_torch_block *src)
{
    return src && !src->allocated && !src->events && !src->use && dst->mapped == src->mapped;
}

/* Whether a free block x (in the tree) may take key k = (stream, size, ptr)
 * without moving: its successor is above k (k is above x's own key). */
static int stays(const cp_torch_block *x, uint64_t size, uint64_t ptr)
{
    cp_rbn *nx = cp_rb_next((cp_rbn *)(uintptr_t)&x->node);
    const cp_torch_block *n;
    if (!nx)
        return 1;
    n = blk_of(nx);
    return n->stream > x->stream ||
           (n->stream == x->stream && (n->size > size || (n->size == size && n->ptr > ptr)));
}

void cp_tk_free_block(cp_torch *t, cp_torch_block *b)
{
    tpool *p = pool_of(t, b);
    uint64_t orig = b->size, req = b->requested, sub;
    int64_t dblocks = 0, dbytes = 0;
    int mp = mergeable(b, b->prev), mn = mergeable(b, b->next);
    if (mp != mn) {
        /* One free neighbour x: the merged block takes x's place in the
         * tree when nothing lies between x's key and the merged one (the
         * usual case); the figures are PyTorch's, which merges x into b. */
        cp_torch_block *x = mp ? b->prev : b->next;
        uint64_t size = b->size + x->size, ptr = mp ? x->ptr : b->ptr;
        if (stays(x, size, ptr)) {
            sub = x->size;
            if (mp) {
                x->next = b->next;
                if (x->next)
                    x->next->prev = x;
            } else {
                x->prev = b->prev;
                if (x->prev)
                    x->prev->next = x;
                x->ptr = b->ptr;
            }
            x->size = size;
            x->gc_base = p->searches; /* as if inserted now */
            dblocks = -1;
            dbytes = -(int64_t)sub;
            del_block(t, b);
            b = x;
            goto merged;
        }
    }
    if (mp && (sub = cp_tk_try_merge(t, b, b->prev)) != 0) {
        dblocks--;
        dbytes -= (int64_t)sub;
    }
    if (mn && (sub = cp_tk_try_merge(t, b, b->next)) != 0) {
        dblocks--;
        dbytes -= (int64_t)sub;
    }
    blocks_insert(p, b);
merged:
    if (is_split(b)) {
        dblocks++;
        dbytes += (int64_t)b->size;
    }
    if (!b->seg) {
        if (dblocks > 0)
            INC(t, inactive_split, b->small, (uint64_t)dblocks);
        else if (dblocks < 0)
            DEC(t, inactive_split, b->small, (uint64_t)-dblocks);
        if (dbytes > 0)
            INC(t, inactive_split_bytes, b->small, (uint64_t)dbytes);
        else if (dbytes < 0)
            DEC(t, inactive_split_bytes, b->small, (uint64_t)-dbytes);
    }
    DEC(t, active, b->small, 1);
    DEC(t, active_bytes, b->small, orig);
    DEC(t, requested_bytes, b->small, req);
}

/* ---- malloc and free --------------------------------------------------------- */
static int should_split(const cp_torch *t, const cp_torch_block *b, uint64_t size)
{
    uint64_t rest = b->size - size;
    if (b->small || t->conf.expandable_segments)
        return rest >= MIN_BLOCK;
    return size < t->conf.max_split_size && rest > SMALL_SIZE;
}

/* in_tree: b is still in the pool's tree (found there). */
static cp_torch_block *alloc_found(cp_torch *t, tpool *p, cp_torch_block *b, int in_tree,
                                   uint64_t stream, uint64_t size, uint64_t orig)
{
    int was_split = is_split(b);
    if (should_split(t, b, size)) {
        cp_torch_block *rest = b, *nb = new_block(t);
        cp_rbn *pred;
        if (!nb)
            return NULL;
        /* The rest keeps the block's node when no other block lies between
         * its key and the block's (the usual case: it saves a removal and an
         * insertion); else it goes in anew, as PyTorch inserts it. */
        pred = in_tree ? cp_rb_prev(&b->node) : NULL;
        if (in_tree && pred &&
            !(blk_of(pred)->stream < b->stream ||
              (blk_of(pred)->stream == b->stream &&
               (blk_of(pred)->size < b->size - size ||
                (blk_of(pred)->size == b->size - size && blk_of(pred)->ptr < b->ptr + size)))))
            cp_rb_erase(&p->blocks, &b->node), in_tree = 0;
        nb->ptr = rest->ptr;
        nb->size = size;
        nb->stream = stream;
        nb->seg = rest->seg;
        nb->small = rest->small;
        nb->prev = rest->prev;
        if (nb->prev)
            nb->prev->next = nb;
        nb->next = rest;
        rest->prev = nb;
        rest->ptr += size;
        rest->size -= size;
        if (in_tree)
            rest->gc_base = p->searches; /* as if inserted now */
        else
            blocks_insert(p, rest);
        b = nb;
        if (!b->seg) {
            if (was_split) {
                DEC(t, inactive_split_bytes, b->small, b->size);
            } else {
                INC(t, inactive_split_bytes, b->small, rest->size);
                INC(t, inactive_split, b->small, 1);
            }
        }
    } else {
        if (in_tree)
            cp_rb_erase(&p->blocks, &b->node);
        if (was_split && !b->seg) {
            DEC(t, inactive_split_bytes, b->small, b->size);
            DEC(t, inactive_split, b->small, 1);
        }
    }
    b->allocated = 1;
    b->requested = orig;
    INC(t, allocation, b->small, 1);
    INC(t, allocated_bytes, b->small, b->size);
    INC(t, active, b->small, 1);
    INC(t, active_bytes, b->small, b->size);
    INC(t, requested_bytes, b->small, orig);
    if (b->size >= t->conf.max_split_size)
        s_inc(&t->st.oversize_allocations, 1);
    return b;
}

cp_status cp_torch_malloc(cp_torch *t, uint64_t orig, uint64_t stream, cp_torch_block **out,
                          uint64_t *addr)
{
    uint64_t size, alloc_size;
    tpool *p;
    cp_torch_block *b;
    int in_tree;

    *out = NULL;
    if (!t->is_virtual && t->events)
        cp_tk_process_events(t);
    if (t->later_ready)
        cp_tk_settle_later(t);
    size = round_size(t, orig ? orig : 1);
    if (size < orig) /* rounding wrapped: larger than any device */
        size = UINT64_MAX & ~(MIN_BLOCK - 1);
    p = size <= SMALL_SIZE ? &t->small : &t->large;
    alloc_size = allocation_size(t, size);
    if (alloc_size < size)
        alloc_size = size;
    b = get_free_block(t, p, stream, size);
    in_tree = b != NULL;
    if (!b) {
        if (gc_on(t))
            cp_tk_garbage_collect(t);
        b = cp_tk_alloc_block(t, p, stream, size, alloc_size, 0);
        if (!b && cp_tk_release_available(t, p, stream, size))
            b = cp_tk_alloc_block(t, p, stream, size, alloc_size, 0);
        if (!b) {
            cp_tk_release_cached(t, 0);
            b = cp_tk_alloc_block(t, p, stream, size, alloc_size, 1);
        }
    }
    /* completions deferred before this malloc come back at the next one */
    if (t->later_new) {
        cp_torch_block **tail = &t->later_ready;
        while (*tail)
            tail = &(*tail)->pnext;
        *tail = t->later_new;
        t->later_new = NULL;
    }
    if (!b) {
        t->st.num_ooms++;
        if (t->has_limit)
            return cp_error_set(CP_ERR_OOM, "out of memory: PyTorch's allocator would raise "
                                "OutOfMemoryError for %llu bytes (%llu bytes in segments, "
                                "%llu allowed)", (unsigned long long)size,
                                (unsigned long long)t->total, (unsigned long long)t->limit);
        return cp_error_set(CP_ERR_OOM, "out of memory: PyTorch's allocator would raise "
                            "OutOfMemoryError for %llu bytes (the device refused; %llu bytes in "
                            "segments)", (unsigned long long)size, (unsigned long long)t->total);
    }
    b = alloc_found(t, p, b, in_tree, stream, size, orig);
    if (!b)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    *out = b;
    *addr = b->ptr;
    return CP_OK;
}

void cp_tk_free_common(cp_torch *t, cp_torch_block *b)
{
    b->allocated = 0;
    DEC(t, allocation, b->small, 1);
    DEC(t, allocated_bytes, b->small, b->size);
    if (b->size >= t->conf.max_split_size)
        s_dec(&t->st.oversize_allocations, 1);
}

void cp_torch_free(cp_torch *t, cp_torch_block *b)
{
    cp_tk_free_common(t, b);
    cp_tk_free_block(t, b);
}

int cp_torch_malloc_releases(cp_torch *t, uint64_t orig, uint64_t stream)
{
    uint64_t size = round_size(t, orig ? orig : 1), alloc_size;
    tpool *p = size <= SMALL_SIZE ? &t->small : &t->large;
    if (find_free(t, p, stream, size))
        return 0;
    if (gc_on(t) && t->total > (uint64_t)(t->conf.gc_threshold * (double)t->limit)) {
        cp_rbn *n;
        for (n = cp_rb_min(t->large.blocks); n; n = cp_rb_next(n))
            if (!is_split(blk_of(n)) && !blk_of(n)->seg)
                return 1;
    }
    alloc_size = allocation_size(t, size);
    return t->has_limit && t->total + alloc_size > t->limit;
}

uint64_t cp_torch_block_addr(const cp_torch_block *b)
{
    return b->ptr;
}
