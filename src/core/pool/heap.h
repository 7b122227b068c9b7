/*
 * pool/heap.h: the block heap shared by the freelist, tlsf and caching
 * pools (internal).
 *
 * Memory comes from the upstream in chunks.  Each chunk is cut into blocks
 * that tile it; a block's descriptor lives in host memory (never in the
 * pooled memory, which may be device memory or no memory at all) and links
 * to its physical neighbours, so freeing coalesces in O(1).  What differs
 * between the pools is the index over free blocks (how a fit is found) and
 * the growth and splitting policy; they plug in through cp_heap_policy.
 *
 * Common rules:
 *  - a request is rounded by policy->round (at least to the alignment);
 *  - a fit is split when policy->split says so, the remainder staying free
 *    with the tag of the block it came from;
 *  - a freed block merges with free neighbours whose stream tags allow it
 *    (streamorder.h); once the pool has seen a second stream, a block whose
 *    free is pending is not merged into idle memory (ANY) beside it, which
 *    would keep that memory from the other streams: it goes on the list of
 *    blocks kept apart, and before the pool grows, the blocks on that list
 *    whose frees are now known complete are merged with their neighbours
 *    and the search is tried again;
 *  - requests of `big` bytes or more take an entirely free chunk that fits
 *    them within 1/32, unsplit, or get a chunk of their own; smaller ones do
 *    not split such chunks when over 8 times their size (cp_heap_keep_whole),
 *    unless the pool cannot grow or the chunk is the `initial` reservation,
 *    which serves requests of every size;
 *  - when nothing fits, entirely free chunks are returned to the upstream
 *    as far as needed to keep reserved within its peak so far (and max;
 *    the `initial` reservation only for max),
 *    then a new chunk of policy->chunk_size bytes is taken (or just the
 *    request, when that would pass max or the upstream refuses the larger
 *    size); if even that fails, any fit anywhere is taken; if none, the
 *    entirely free chunks are returned to the upstream (all of them, the
 *    `initial` reservation too, after settling stream tags) and the growth
 *    is tried once more (PyTorch's free-and-retry after a refused
 *    cudaMalloc; not when even that could not fit under max).  Exception: when
 *    two growths in a row each needed a chunk of another sub-pool that the
 *    growth before had returned (the caching pool's small and large
 *    segments, requests of the two kinds in turn), the second keeps what
 *    is idle and grows past the peak, once (heap.c, cp_heap_grow);
 *  - release_threshold is the idle bytes (entirely free chunks) that growth
 *    never returns: with UINT64_MAX a warm pool makes no upstream calls at
 *    all (PyTorch's choice, for a higher peak), and idle chunks are then fit
 *    (any fit) before the pool grows; with 0 (the default) growth returns
 *    whatever idle chunks it needs to stay within the peak.  Frees never
 *    return memory; trim does.  A pool serving a framework (the libraries
 *    in src/torch/, advise's CUPOLA_TORCH_POOL rows) keeps every idle chunk
 *    unless its spec says otherwise (cp_pool_spec_serve, pool/spec.c);
 *  - trim(keep) returns entirely free chunks while more than keep bytes are
 *    free (after settling stream tags, synchronizing the device if blocks
 *    freed on other streams have no event).
 */
#ifndef CUPOLA_POOL_COMMON_H
#define CUPOLA_POOL_COMMON_H

#include "resource_impl.h"
#include "streamorder.h"

/* Requests from this size up are "big": served by entirely free chunks that
 * fit them within 1/32, or by a chunk of their own (see cp_heap_find_whole).
 * 64 MiB: several times the largest layer-sized tensors of small models, and
 * a size at which one more upstream call per block costs little. */
#ifndef CP_HEAP_BIG
#define CP_HEAP_BIG (UINT64_C(64) << 20)
#endif

typedef struct cp_blk cp_blk;
struct cp_blk {
    uint64_t addr, size;
    cp_blk *prev, *next;   /* physical neighbours within the chunk */
    cp_blk *l, *r;         /* free index links (list or tree) */
    cp_blk *ep, *en;       /* list of entirely free chunks */
    cp_so_tag tag;         /* free blocks: who freed it */
    uint64_t up_ptr;       /* chunk head: what the upstream returned */
    uint64_t up_bytes;     /*   and its size */
    uint16_t cls;          /* index-specific (size class) */
    uint8_t is_free;
    uint8_t pool;          /* index-specific (small/large) */
    uint8_t in_empty;
    uint8_t in_apart;      /* on the apart list (ep/en: never a whole chunk) */
    uint8_t up_initial;    /* chunk head: the reservation `initial` made */
};

typedef struct cp_heap cp_heap;

typedef struct cp_heap_policy {
    const char *kind;
    uint64_t (*round)(cp_heap *h, uint64_t bytes);
    /* size of a new chunk for a rounded request; *pool names its sub-pool */
    uint64_t (*chunk_size)(cp_heap *h, uint64_t size, uint8_t *pool);
    /* sub-pool a rounded request is served from */
    uint8_t (*pool_of)(cp_heap *h, uint64_t size);
    /* split block b (free, size >= size) for a request of size? */
    int (*split)(cp_heap *h, const cp_blk *b, uint64_t size);
    void (*insert)(cp_heap *h, cp_blk *b);
    void (*remove)(cp_heap *h, cp_blk *b);
    /* a free block of sub-pool `pool`, size >= size, usable on s (checked
     * with cp_so_usable), not removed from the index; NULL if none */
    cp_blk *(*find)(cp_heap *h, uint64_t size, uint8_t pool, uint64_t sid, cp_stream *s);
    uint64_t (*largest)(cp_heap *h);
    void (*fini)(cp_heap *h);
    /* NULL, or told of each chunk taken from the upstream (the vmm pool
     * builds the chunk's page table); an error gives the chunk back */
    cp_status (*chunk_added)(cp_heap *h, cp_blk *b);
} cp_heap_policy;

typedef struct cp_blk_slab {
    struct cp_blk_slab *next;
    cp_blk blks[255];
} cp_blk_slab;

struct cp_heap {
    cp_resource base;
    cp_resource *up;
    cp_pool_opts o;
    const cp_heap_policy *pol;
    cp_so so;
    cp_ptrmap live;        /* address -> descriptor of live blocks */
    cp_blk *spare;         /* free descriptors */
    cp_blk_slab *slabs;
    cp_blk *empty;         /* entirely free chunks */
    cp_blk *apart;         /* free blocks kept apart from a free neighbour */
    uint64_t align;
    uint64_t up_align;     /* what the upstream's addresses are aligned to; set before
                              cp_heap_init to say more than the upstream kind promises */
    uint64_t free_bytes;
    uint64_t idle_bytes;   /* upstream bytes of the entirely free chunks */
    uint64_t chunks;
    uint64_t big;          /* requests >= big get whole chunks (0: never) */
    uint64_t chunk_unit;   /* upstream requests are multiples of it (0: any; vmm: its page) */
    uint64_t initial_want; /* the chunk `initial` prefers (0: initial's size; vmm: its span),
                            * `initial` alone when the upstream refuses it */
    int desperate;         /* growth failed: any fit will do */
    int keep_chunks;       /* chunks are address space (vmm): never returned
                              before destroy, reserved is the pool's own */
    uint64_t last_addr, last_size; /* the block the last alloc handed out, or
                              the last free took back (before merging) */
    uint64_t gave_back[2]; /* per sub-pool (pool & 1): the largest chunk the
                              last growth returned to make room (0: none) */
    int turns;             /* growths in a row that needed what the one
                              before returned (heap.c, cp_heap_grow) */
};

/* Sets up h (already zeroed, base initialised by the caller with its ops)
 * and reserves o->initial.  Takes ownership of up even on failure; on
 * failure h's own memory is the caller's to free. */
cp_status cp_heap_init(cp_heap *h, cp_resource *up, const cp_pool_opts *o,
                       const cp_heap_policy *pol);

/* Slow paths of the inline alloc and free below. */
cp_status cp_heap_grow(cp_heap *h, size_t bytes, uint64_t size, uint8_t pool, uint64_t sid,
                       cp_stream *s, cp_blk **out);
cp_status cp_heap_bad_free(cp_heap *h, void *p, size_t bytes, cp_blk *b);
cp_status cp_heap_map_full(cp_heap *h, cp_blk *b);
cp_blk *cp_blk_refill(cp_heap *h);
cp_status cp_heap_trim(cp_resource *r, size_t keep_bytes);
void cp_heap_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes);
/* The calls made to the upstream: its own allocs and frees. */
void cp_heap_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees);
/* Returns everything to the upstream and frees h itself. */
void cp_heap_destroy(cp_resource *r);

/* Chunks are whole granules of 2 MiB (cudaMalloc's own granule).  A big
 * request gets exactly its granules.  Another request that would leave
 * much of its last granule unused gets room for a few more of its size
 * (layers repeat, and each would waste the same tail): the smallest k <= 8
 * whose k requests fill their granules to within 1/32, failing that the k
 * that wastes the smallest fraction. */
#define CP_HEAP_GRANULE (UINT64_C(2) << 20)
uint64_t cp_heap_chunk_for(const cp_heap *h, uint64_t size);

/* For a big request: the entirely free chunk that fits it best with at most
 * 1/32 to spare, or NULL. */
cp_blk *cp_heap_find_whole(cp_heap *h, uint64_t size, uint64_t sid, cp_stream *s);

/* Should the search pass over free block b for a request of size?  Entirely
 * free chunks of big blocks are kept for big requests (small ones would
 * split them and make the next big request grow the pool by its full
 * size), unless the pool cannot grow. */
static inline int cp_heap_keep_whole(const cp_heap *h, const cp_blk *b, uint64_t size)
{
    return !b->prev && !b->next && h->big && !h->desperate && b->size >= h->big &&
           size * 8 <= b->size && !b->up_initial;
}

/* ---- segregated size classes (TLSF's mapping) ----
 * Sizes in units u of the alignment: u < 64 has one class per size; above,
 * the first level is floor(log2 u) and the second the next 6 bits, so a
 * class spans 1/64 (1.6%) of its sizes.  Two bitmaps say which classes are
 * non-empty. */
#define CP_SL_BITS 6
#define CP_SL_COUNT (1 << CP_SL_BITS)
#define CP_FL_COUNT 64

static inline unsigned cp_log2_floor(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

static inline void cp_class_of(uint64_t u, unsigned *fl, unsigned *sl)
{
    if (u < CP_SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)u;
    } else {
        unsigned f = cp_log2_floor(u);
        *fl = f - CP_SL_BITS + 1;
        *sl = (unsigned)(u >> (f - CP_SL_BITS)) & (CP_SL_COUNT - 1);
    }
}

/* Exact best fit: the class lists are kept sorted by (size, address), so
 * the best fit is the first fitting block of the request's class, else the
 * head of the next non-empty class; among equal sizes the lowest address.
 * Insertion walks its class list (short in practice: a class is 1.6%
 * wide); removal and the search are O(1) but for passed-over blocks.
 * Used by freelist and caching. */
typedef struct cp_sfit {
    unsigned shift; /* log2 of the size unit */
    uint64_t fl_map;
    uint64_t sl_map[CP_FL_COUNT];
    cp_blk *heads[CP_FL_COUNT][CP_SL_COUNT];
} cp_sfit;

void cp_sfit_insert(cp_sfit *x, cp_blk *b);
void cp_sfit_remove(cp_sfit *x, cp_blk *b);
/* Best fit for size whose tag is usable on s, passing over at most 64
 * blocks (other streams' not yet usable, whole chunks kept for big ones). */
cp_blk *cp_sfit_find(cp_heap *h, cp_sfit *x, uint64_t size, uint64_t sid, cp_stream *s);
uint64_t cp_sfit_max(const cp_sfit *x);

/* ---- descriptors and the list of entirely free chunks ---- */

/* A descriptor whose links and chunk fields are clear (cp_blk_put keeps
 * returned ones that way); the caller sets the rest. */
static inline cp_blk *cp_blk_new(cp_heap *h)
{
    cp_blk *b = h->spare;
    if (!b)
        return cp_blk_refill(h);
    h->spare = b->r;
    return b;
}

static inline void cp_blk_put(cp_heap *h, cp_blk *b)
{
    b->size = 0;
    b->up_bytes = 0;
    b->is_free = 0;
    b->in_empty = 0;
    b->in_apart = 0;
    b->up_initial = 0;
    b->tag.ev = NULL;
    b->r = h->spare;
    h->spare = b;
}

static inline void cp_empty_push(cp_heap *h, cp_blk *b)
{
    b->ep = NULL;
    b->en = h->empty;
    if (h->empty)
        h->empty->ep = b;
    h->empty = b;
    b->in_empty = 1;
    h->idle_bytes += b->up_bytes;
}

static inline void cp_empty_unlink(cp_heap *h, cp_blk *b)
{
    if (b->ep)
        b->ep->en = b->en;
    else
        h->empty = b->en;
    if (b->en)
        b->en->ep = b->ep;
    b->in_empty = 0;
    h->idle_bytes -= b->up_bytes;
}

/* The apart list (multi-stream pools): free blocks with a free neighbour
 * they could not merge with.  A block on it is never a whole chunk, so it
 * borrows the empty list's links. */
static inline void cp_apart_push(cp_heap *h, cp_blk *b)
{
    b->ep = NULL;
    b->en = h->apart;
    if (h->apart)
        h->apart->ep = b;
    h->apart = b;
    b->in_apart = 1;
}

static inline void cp_apart_unlink_from(cp_blk **head, cp_blk *b)
{
    if (b->ep)
        b->ep->en = b->en;
    else
        *head = b->en;
    if (b->en)
        b->en->ep = b->ep;
    b->ep = b->en = NULL;
    b->in_apart = 0;
}

/* The round of the pools that take the alignment as it is (freelist, tlsf,
 * vmm); inline, so the policy's call to it is too. */
static inline uint64_t cp_heap_round(cp_heap *h, uint64_t bytes)
{
    return cp_round_size(bytes, h->align);
}

/* ---- alloc and free, specialised per pool ----
 * Each pool's ops call these with its own constant policy, so the compiler
 * turns the policy's calls into direct, inlined ones on the hot path. */

static inline cp_status cp_heap_alloc_with(cp_resource *r, size_t bytes, cp_stream *s,
                                           void **out, const cp_heap_policy *pol)
{
    cp_heap *h = (cp_heap *)r;
    uint64_t size = pol->round(h, bytes);
    uint64_t sid = cp_so_sid(s);
    uint8_t pool = pol->pool_of(h, size);
    int big = h->big && size >= h->big;
    cp_blk *b;

    cp_so_note(&h->so, sid, s);
    b = big ? cp_heap_find_whole(h, size, sid, s) : pol->find(h, size, pool, sid, s);
    if (__builtin_expect(!b || size < bytes, 0)) {
        cp_status st = cp_heap_grow(h, bytes, size, pool, sid, s, &b);
        if (st != CP_OK)
            return st;
        if (h->desperate)
            big = 0;
    }
    pol->remove(h, b);
    if (b->in_empty)
        cp_empty_unlink(h, b);
    else if (__builtin_expect(b->in_apart, 0))
        cp_apart_unlink_from(&h->apart, b);
    /* A big request keeps its whole chunk's spare tail (at most 1/32, or
     * the last granule): the chunk must stay whole to be reused or returned
     * whole. */
    if (b->size > size && !big && pol->split(h, b, size)) {
        cp_blk *rem = cp_blk_new(h);
        if (rem) {
            rem->addr = b->addr + size;
            rem->size = b->size - size;
            rem->prev = b;
            rem->next = b->next;
            if (b->next)
                b->next->prev = rem;
            b->next = rem;
            rem->is_free = 1;
            rem->pool = b->pool;
            cp_so_tag_copy(&rem->tag, &b->tag);
            b->size = size;
            pol->insert(h, rem);
        }
    }
    if (__builtin_expect(cp_ptrmap_put(&h->live, b->addr, b) != 0, 0))
        return cp_heap_map_full(h, b);
    h->desperate = 0;
    h->last_addr = b->addr;
    h->last_size = b->size;
    cp_so_tag_release(&h->so, &b->tag);
    b->is_free = 0;
    h->free_bytes -= b->size;
    *out = (void *)(uintptr_t)b->addr;
    return CP_OK;
}

static inline cp_status cp_heap_free_with(cp_resource *r, void *p, size_t bytes, cp_stream *s,
                                          const cp_heap_policy *pol)
{
    cp_heap *h = (cp_heap *)r;
    uint64_t sid = cp_so_sid(s);
    cp_blk *b = (cp_blk *)cp_ptrmap_del(&h->live, (uint64_t)(uintptr_t)p), *n;

    if (__builtin_expect(!b || bytes > b->size, 0))
        return cp_heap_bad_free(h, p, bytes, b);
    cp_so_note(&h->so, sid, s);
    h->last_addr = b->addr;
    h->last_size = b->size;
    cp_so_tag_free(&h->so, &b->tag, sid, s);
    b->is_free = 1;
    h->free_bytes += b->size;
    n = b->next;
    if (n && n->is_free && cp_so_merge(&h->so, &b->tag, &n->tag)) {
        pol->remove(h, n);
        if (__builtin_expect(n->in_apart, 0))
            cp_apart_unlink_from(&h->apart, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
        cp_blk_put(h, n);
    }
    n = b->prev;
    if (n && n->is_free && cp_so_merge(&h->so, &n->tag, &b->tag)) {
        pol->remove(h, n);
        if (__builtin_expect(n->in_apart, 0))
            cp_apart_unlink_from(&h->apart, n);
        n->size += b->size;
        n->next = b->next;
        if (b->next)
            b->next->prev = n;
        cp_blk_put(h, b);
        b = n;
    }
    pol->insert(h, b);
    if (!b->prev && !b->next)
        cp_empty_push(h, b);
    else if (__builtin_expect(h->so.multi, 0) &&
             ((b->next && b->next->is_free) || (b->prev && b->prev->is_free)))
        cp_apart_push(h, b);
    return CP_OK;
}

#endif /* CUPOLA_POOL_COMMON_H */
