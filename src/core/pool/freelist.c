/*
 * pool/freelist.c: best fit with splitting and coalescing, over the block
 * heap of pool/heap.h.
 *
 * Policy, exactly:
 *  - Requests are rounded up to the alignment (default 256 bytes).
 *  - The free blocks are ordered by (size, address) (segregated classes
 *    1.6% wide, each list sorted; pool/heap.h's cp_sfit), so the choice is
 *    the smallest free block that fits and, among blocks of that size, the
 *    one at the lowest address (address-ordered best fit: it keeps the upper
 *    parts of chunks free, so whole chunks can be given back).
 *    Passed over: blocks another stream may not take yet (streamorder.h),
 *    and entirely free chunks of 64 MiB or more that are over 8 times the
 *    request; at most 64 of them, then the pool grows.
 *  - Requests of 64 MiB or more are big: they take the entirely free chunk
 *    that fits them best within 1/32, unsplit, or a chunk of their own.
 *  - Other fits are split when the remainder is at least one alignment
 *    unit; the remainder stays free in the tree.
 *  - Free merges the block with its free physical neighbours at once
 *    (streamorder permitting).
 *  - Growth (pool/heap.h): whole 2 MiB granules, with room for up to 8
 *    requests of the size when one would waste much of its last granule;
 *    entirely free chunks are returned first as far as needed to keep
 *    reserved within its peak.
 */
#include "heap.h"
#include "model.h"

#include <stdlib.h>


typedef struct freelist {
    cp_heap h;
    cp_sfit ix;
} freelist;

static uint64_t f_chunk(cp_heap *h, uint64_t size, uint8_t *pool)
{
    *pool = 0;
    return cp_heap_chunk_for(h, size);
}

static uint8_t f_pool_of(cp_heap *h, uint64_t size)
{
    (void)h;
    (void)size;
    return 0;
}

static int f_split(cp_heap *h, const cp_blk *b, uint64_t size)
{
    return b->size - size >= h->align;
}

static void f_insert(cp_heap *h, cp_blk *b)
{
    cp_sfit_insert(&((freelist *)h)->ix, b);
}

static void f_remove(cp_heap *h, cp_blk *b)
{
    cp_sfit_remove(&((freelist *)h)->ix, b);
}

static cp_blk *f_find(cp_heap *h, uint64_t size, uint8_t pool, uint64_t sid, cp_stream *s)
{
    (void)pool;
    return cp_sfit_find(h, &((freelist *)h)->ix, size, sid, s);
}

static uint64_t f_largest(cp_heap *h)
{
    return cp_sfit_max(&((freelist *)h)->ix);
}

static const cp_heap_policy freelist_policy = {
    .kind = "freelist",
    .round = cp_heap_round,
    .chunk_size = f_chunk,
    .pool_of = f_pool_of,
    .split = f_split,
    .insert = f_insert,
    .remove = f_remove,
    .find = f_find,
    .largest = f_largest,
};

static cp_status f_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    return cp_heap_alloc_with(r, bytes, s, out, &freelist_policy);
}

static cp_status f_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    return cp_heap_free_with(r, p, bytes, s, &freelist_policy);
}

static const cp_resource_ops freelist_ops = {
    .kind = "freelist",
    .alloc = f_alloc,
    .free = f_free,
    .trim = cp_heap_trim,
    .free_info = cp_heap_free_info,
    .destroy = cp_heap_destroy,
    .device_calls = cp_heap_device_calls,
};

static cp_status freelist_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    freelist *f = calloc(1, sizeof *f);
    cp_status st;
    *out = NULL;
    if (!f) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&f->h.base, &freelist_ops);
    f->h.big = CP_HEAP_BIG;
    f->ix.shift = cp_log2_floor(o->alignment ? o->alignment : 256);
    st = cp_heap_init(&f->h, up, o, &freelist_policy);
    if (st != CP_OK) {
        cp_heap_destroy(&f->h.base);
        return st;
    }
    *out = &f->h.base;
    return CP_OK;
}

/* The registry's row (model.h): serving a framework it keeps its idle chunks. */
const cp_model cp_freelist_model = {
    .name = "freelist",
    .create = freelist_create,
    .traits = CP_MODEL_KEEPS_IDLE,
};
