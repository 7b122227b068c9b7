/*
 * pool/caching.c: a caching allocator with size classes, small and large
 * segments, split and merge (the shape of CUB's and PyTorch's), over the
 * block heap of pool/heap.h.
 *
 * Policy, exactly:
 *  - Requests are rounded up to 512 bytes (or to the alignment if larger).
 *  - Rounded requests of at most 1 MiB are small: they come from small
 *    segments of 2 MiB.  Larger requests are large: they come from large
 *    segments, 20 MiB for requests under 10 MiB, else the request rounded
 *    up to 2 MiB.  Small and large blocks never mix, so long-lived small
 *    tensors cannot pin large segments.
 *  - Each of the two sub-pools orders its free blocks by (size, address)
 *    (pool/heap.h's cp_sfit): the choice is the best fit, lowest address
 *    first.  Blocks another
 *    stream may not take yet (streamorder.h; CUB's rule: another stream
 *    reuses a block once its free's event has completed) are passed over,
 *    at most 64 of them.
 *  - A small fit is split when at least 512 bytes remain; a large fit when
 *    more than 1 MiB remains (a smaller tail stays with the block, as
 *    internal waste, rather than leave an unusable sliver in a large
 *    segment).
 *  - Free merges a block with its free neighbours at once.
 *  - Where it improves on PyTorch's: requests of 64 MiB or more are big and
 *    take an entirely free large segment that fits them within 1/32,
 *    unsplit, or a segment of their own, and small requests do not split
 *    entirely free segments of 64 MiB or more that are over 8 times their
 *    size; so a big block, once freed, leaves a whole segment to reuse or
 *    return rather than a hole that the next big request cannot use.  When
 *    nothing fits, entirely free segments are returned before a new one is
 *    taken, as far as needed to keep reserved within its peak so far
 *    (PyTorch returns cached segments only after the device has refused;
 *    so does this pool when it serves PyTorch or CuPy, where its spec
 *    leaves release_threshold unset: pool/spec.c, cp_pool_spec_serve),
 *    except that small and large requests in turn do not trade segments
 *    (the second growth in a row that needs the segment of the other kind
 *    the growth before returned keeps it: pool/heap.h).  That rule follows
 *    from the pool's own history of returns, not from a size.
 *  - When the upstream refuses a segment and no free block of either
 *    sub-pool fits, every entirely free segment is returned and the growth
 *    retried once (PyTorch's free-and-retry; pool/heap.h).
 *  - The chunk reserved by `initial` is a sub-pool of its own that serves
 *    small and large requests alike (a small request is split from it when
 *    at least 512 bytes remain, a large one when more than 1 MiB remains);
 *    a request looks there after its own sub-pool's free blocks.  So a pool
 *    made with initial = max serves every size from what it reserved.
 *  - The segment sizes and the 1 MiB small/large cut are PyTorch's (the
 *    shape this pool reproduces, not values chosen on a trace).
 */
#include "heap.h"
#include "model.h"

#include <stdlib.h>

#define MIB (UINT64_C(1) << 20)
#define MIN_BLOCK UINT64_C(512)
#define SMALL_MAX MIB
#define SMALL_SEG (2 * MIB)
#define LARGE_SEG (20 * MIB)
#define LARGE_CUT (10 * MIB)
#define ROUND_LARGE (2 * MIB)

/* The sub-pools: a block's cp_blk.pool. */
#define SMALL 0
#define LARGE 1
#define INITIAL 2 /* the blocks of the chunk `initial` reserved: any size */

typedef struct caching {
    cp_heap h;
    cp_sfit ix[3]; /* indexed by SMALL, LARGE, INITIAL */
} caching;

static uint64_t c_round(cp_heap *h, uint64_t bytes)
{
    return cp_round_size(bytes, h->align > MIN_BLOCK ? h->align : MIN_BLOCK);
}

static uint8_t c_pool_of(cp_heap *h, uint64_t size)
{
    (void)h;
    return size > SMALL_MAX;
}

static uint64_t c_chunk(cp_heap *h, uint64_t size, uint8_t *pool)
{
    uint64_t c;
    *pool = c_pool_of(h, size);
    if (!*pool)
        return SMALL_SEG;
    if (size < LARGE_CUT)
        return LARGE_SEG;
    c = (size + ROUND_LARGE - 1) & ~(ROUND_LARGE - 1);
    return c < size ? size : c;
}

static int c_split(cp_heap *h, const cp_blk *b, uint64_t size)
{
    uint64_t rem = b->size - size;
    int large = b->pool == INITIAL ? size > SMALL_MAX : b->pool == LARGE;
    (void)h;
    return large ? rem > SMALL_MAX : rem >= MIN_BLOCK;
}

static void c_insert(cp_heap *h, cp_blk *b)
{
    cp_sfit_insert(&((caching *)h)->ix[b->pool], b);
}

static void c_remove(cp_heap *h, cp_blk *b)
{
    cp_sfit_remove(&((caching *)h)->ix[b->pool], b);
}

/* Its own sub-pool first, then what `initial` reserved (reserved for every
 * size: a small request must not grow the pool past it, nor be refused under
 * a max it fills). */
static cp_blk *c_find(cp_heap *h, uint64_t size, uint8_t pool, uint64_t sid, cp_stream *s)
{
    caching *c = (caching *)h;
    cp_blk *b = cp_sfit_find(h, &c->ix[pool], size, sid, s);
    if (!b && c->ix[INITIAL].fl_map)
        b = cp_sfit_find(h, &c->ix[INITIAL], size, sid, s);
    return b;
}

static uint64_t c_largest(cp_heap *h)
{
    caching *c = (caching *)h;
    uint64_t m = 0;
    int i;
    for (i = 0; i < 3; i++)
        if (cp_sfit_max(&c->ix[i]) > m)
            m = cp_sfit_max(&c->ix[i]);
    return m;
}

static const cp_heap_policy caching_policy = {
    .kind = "caching",
    .round = c_round,
    .chunk_size = c_chunk,
    .pool_of = c_pool_of,
    .split = c_split,
    .insert = c_insert,
    .remove = c_remove,
    .find = c_find,
    .largest = c_largest,
};

static cp_status c_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    return cp_heap_alloc_with(r, bytes, s, out, &caching_policy);
}

static cp_status c_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    return cp_heap_free_with(r, p, bytes, s, &caching_policy);
}

static const cp_resource_ops caching_ops = {
    .kind = "caching",
    .alloc = c_alloc,
    .free = c_free,
    .trim = cp_heap_trim,
    .free_info = cp_heap_free_info,
    .destroy = cp_heap_destroy,
    .device_calls = cp_heap_device_calls,
};

static cp_status caching_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    caching *c = calloc(1, sizeof *c);
    cp_status st;
    *out = NULL;
    if (!c) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&c->h.base, &caching_ops);
    c->h.big = CP_HEAP_BIG;
    c->ix[SMALL].shift = c->ix[LARGE].shift = c->ix[INITIAL].shift = 9; /* multiples of 512 */
    st = cp_heap_init(&c->h, up, o, &caching_policy);
    if (st != CP_OK) {
        cp_heap_destroy(&c->h.base);
        return st;
    }
    if (c->h.empty) {
        /* the chunk `initial` reserved (the only one yet): its own sub-pool */
        cp_blk *b = c->h.empty;
        c_remove(&c->h, b);
        b->pool = INITIAL;
        c_insert(&c->h, b);
    }
    *out = &c->h.base;
    return CP_OK;
}

/* The registry's row (model.h): serving a framework it keeps its idle chunks. */
const cp_model cp_caching_model = {
    .name = "caching",
    .create = caching_create,
    .traits = CP_MODEL_KEEPS_IDLE,
};
