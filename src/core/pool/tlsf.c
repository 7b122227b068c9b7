/*
 * pool/tlsf.c: two-level segregated fit (after Masmano et al.), O(1) allocate
 * and free over the block heap of pool/heap.h.
 *
 * Policy, exactly:
 *  - Requests are rounded up to the alignment (default 256 bytes); sizes are
 *    counted in units of the alignment, u.
 *  - Free blocks sit in one of 64 x 64 segregated lists: u < 64 has one
 *    exact list per size; above, the first level is floor(log2 u) and the
 *    second level the next 6 bits, so a list spans 1/64 (1.6%) of its size.
 *    Two bitmaps (first level, and second level per first level) say which
 *    lists are non-empty.  Lists are LIFO.
 *  - Allocation first looks at up to 8 blocks of the request's own list and
 *    takes the first that fits (within 1.6% of the request); failing that it
 *    takes the head of the first non-empty list above it, found with two
 *    find-first-set operations, where every block fits.  Passed over: blocks
 *    another stream may not take yet (streamorder.h), and entirely free
 *    chunks of 64 MiB or more that are over 8 times the request (kept for
 *    the big requests they were made for); at most 32 are passed over, then
 *    the pool grows rather than search on.
 *  - Requests of 64 MiB or more are big: they take an entirely free chunk
 *    that fits them within 1/32 (the best such), unsplit, or a chunk of
 *    their own.  So a big block, once freed, leaves a whole chunk to reuse
 *    or return, never a hole between live blocks.
 *  - Other fits are split when the remainder is at least one alignment unit;
 *    the remainder goes back to its list.  Free merges with free physical
 *    neighbours at once (streamorder permitting), so no two mergeable free
 *    blocks are ever adjacent.
 *  - Growth (pool/heap.h): whole 2 MiB granules, with room for up to 8
 *    requests of the size when one would waste much of its last granule;
 *    entirely free chunks are returned first as far as needed to keep
 *    reserved within its peak (none with release_threshold above what is
 *    idle: a pool serving PyTorch or CuPy, pool/spec.c); when the upstream
 *    refuses and no free block fits at all, every entirely free chunk is
 *    returned and the growth retried once.  Chunks are what reserved counts.
 */
#include "heap.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

#define SL_COUNT CP_SL_COUNT
#define FL_COUNT CP_FL_COUNT
#define SCAN_OWN 8
#define SKIP_MAX 32

typedef struct tlsf_index {
    uint64_t fl_map;
    uint64_t sl_map[FL_COUNT];
    cp_blk *heads[FL_COUNT][SL_COUNT];
} tlsf_index;

typedef struct tlsf {
    cp_heap h;
    unsigned shift;             /* log2(alignment) */
    tlsf_index ix[1];
} tlsf;

#define log2_floor cp_log2_floor
#define map_insert cp_class_of

static uint8_t t_pool_of(cp_heap *h, uint64_t size)
{
    (void)h;
    (void)size;
    return 0;
}

static uint64_t t_chunk(cp_heap *h, uint64_t size, uint8_t *pool)
{
    *pool = 0;
    return cp_heap_chunk_for(h, size);
}

static int t_split(cp_heap *h, const cp_blk *b, uint64_t size)
{
    return b->size - size >= h->align;
}

static void t_insert(cp_heap *h, cp_blk *b)
{
    tlsf_index *t = &((tlsf *)h)->ix[b->pool];
    unsigned fl, sl;
    map_insert(b->size >> ((tlsf *)h)->shift, &fl, &sl);
    b->cls = (uint16_t)(fl * SL_COUNT + sl);
    b->l = NULL;
    b->r = t->heads[fl][sl];
    if (b->r)
        b->r->l = b;
    t->heads[fl][sl] = b;
    t->fl_map |= UINT64_C(1) << fl;
    t->sl_map[fl] |= UINT64_C(1) << sl;
}

static void t_remove(cp_heap *h, cp_blk *b)
{
    tlsf_index *t = &((tlsf *)h)->ix[b->pool];
    unsigned fl = b->cls / SL_COUNT, sl = b->cls % SL_COUNT;
    if (b->l)
        b->l->r = b->r;
    else
        t->heads[fl][sl] = b->r;
    if (b->r)
        b->r->l = b->l;
    if (!t->heads[fl][sl]) {
        t->sl_map[fl] &= ~(UINT64_C(1) << sl);
        if (!t->sl_map[fl])
            t->fl_map &= ~(UINT64_C(1) << fl);
    }
    b->l = b->r = NULL;
}

static cp_blk *t_find(cp_heap *h, uint64_t size, uint8_t pool, uint64_t sid, cp_stream *s)
{
    tlsf_index *t = &((tlsf *)h)->ix[pool];
    uint64_t u = size >> ((tlsf *)h)->shift;
    unsigned fl, sl, skipped = 0, n = 0;
    uint64_t slm, flm;
    cp_blk *b;

    /* The request's own list holds blocks within 1.6% of it: the closest fits. */
    map_insert(u, &fl, &sl);
    for (b = t->heads[fl][sl]; b && n < SCAN_OWN; b = b->r, n++)
        if (b->size >= size && cp_so_usable(&h->so, &b->tag, sid, s))
            return b;

    /* Then the first non-empty list above: every block there fits. */
    slm = sl + 1 < SL_COUNT ? t->sl_map[fl] & (~UINT64_C(0) << (sl + 1)) : 0;
    for (;;) {
        if (!slm) {
            flm = fl + 1 < FL_COUNT ? t->fl_map & (~UINT64_C(0) << (fl + 1)) : 0;
            if (!flm)
                return NULL;
            fl = (unsigned)__builtin_ctzll(flm);
            slm = t->sl_map[fl];
        }
        sl = (unsigned)__builtin_ctzll(slm);
        for (b = t->heads[fl][sl]; b; b = b->r) {
            if (cp_heap_keep_whole(h, b, size))
                continue;
            if (cp_so_usable(&h->so, &b->tag, sid, s))
                return b;
            if (++skipped >= SKIP_MAX)
                return NULL;
        }
        slm &= ~(UINT64_C(1) << sl);
    }
}

static uint64_t t_largest(cp_heap *h)
{
    uint64_t best = 0;
    int i;
    for (i = 0; i < 1; i++) {
        tlsf_index *t = &((tlsf *)h)->ix[i];
        unsigned fl, sl;
        cp_blk *b;
        if (!t->fl_map)
            continue;
        fl = log2_floor(t->fl_map);
        sl = log2_floor(t->sl_map[fl]);
        for (b = t->heads[fl][sl]; b; b = b->r)
            if (b->size > best)
                best = b->size;
    }
    return best;
}

static const cp_heap_policy tlsf_policy = {
    .kind = "tlsf",
    .round = cp_heap_round,
    .chunk_size = t_chunk,
    .pool_of = t_pool_of,
    .split = t_split,
    .insert = t_insert,
    .remove = t_remove,
    .find = t_find,
    .largest = t_largest,
};

static cp_status t_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    return cp_heap_alloc_with(r, bytes, s, out, &tlsf_policy);
}

static cp_status t_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    return cp_heap_free_with(r, p, bytes, s, &tlsf_policy);
}

static const cp_resource_ops tlsf_ops = {
    .kind = "tlsf",
    .alloc = t_alloc,
    .free = t_free,
    .trim = cp_heap_trim,
    .free_info = cp_heap_free_info,
    .destroy = cp_heap_destroy,
    .device_calls = cp_heap_device_calls,
};

static cp_status tlsf_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    tlsf *t = calloc(1, sizeof *t);
    cp_status st;
    *out = NULL;
    if (!t) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&t->h.base, &tlsf_ops);
    t->shift = log2_floor(o->alignment ? o->alignment : 256);
    t->h.big = CP_HEAP_BIG;
    st = cp_heap_init(&t->h, up, o, &tlsf_policy);
    if (st != CP_OK) {
        cp_heap_destroy(&t->h.base);
        return st;
    }
    *out = &t->h.base;
    return CP_OK;
}

/* The registry's row (model.h): serving a framework it keeps its idle chunks. */
const cp_model cp_tlsf_model = {
    .name = "tlsf",
    .create = tlsf_create,
    .traits = CP_MODEL_KEEPS_IDLE,
};
