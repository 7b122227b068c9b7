/*
 * pool_common.h: the block heap shared by the freelist, tlsf and caching
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
 *    (streamorder.h);
 *  - when nothing fits, the chunks that are entirely free are returned to
 *    the upstream first (none of them could hold the request, and returning
 *    them keeps the reserved peak down), then a new chunk of
 *    policy->chunk_size bytes is taken (or just the request, when that
 *    would pass max or the upstream refuses the larger size);
 *  - trim(keep) returns entirely free chunks while more than keep bytes are
 *    free; release_threshold is the keep used after a growth.
 */
#ifndef CUPOLA_POOL_COMMON_H
#define CUPOLA_POOL_COMMON_H

#include "resource_impl.h"
#include "streamorder.h"

typedef struct cp_blk cp_blk;
struct cp_blk {
    uint64_t addr, size;
    cp_blk *prev, *next;   /* physical neighbours within the chunk */
    cp_blk *l, *r;         /* free index links (list or tree) */
    cp_blk *ep, *en;       /* list of entirely free chunks */
    cp_so_tag tag;         /* free blocks: who freed it */
    uint64_t up_ptr;       /* chunk head: what the upstream returned */
    uint64_t up_bytes;     /*   and its size */
    uint32_t prio;         /* treap priority */
    uint16_t cls;          /* index-specific (size class) */
    uint8_t is_free;
    uint8_t pool;          /* index-specific (small/large) */
    uint8_t in_empty;
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
    uint64_t align;
    uint64_t up_align;
    uint64_t free_bytes;
    uint64_t chunks;
    uint32_t rng;
};

/* Sets up h (already zeroed, base initialised by the caller with its ops)
 * and reserves o->initial.  Takes ownership of up even on failure; on
 * failure h's own memory is the caller's to free. */
cp_status cp_heap_init(cp_heap *h, cp_resource *up, const cp_pool_opts *o,
                       const cp_heap_policy *pol);

cp_status cp_heap_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out);
cp_status cp_heap_free(cp_resource *r, void *p, size_t bytes, cp_stream *s);
cp_status cp_heap_trim(cp_resource *r, size_t keep_bytes);
void cp_heap_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes);
/* Returns everything to the upstream and frees h itself. */
void cp_heap_destroy(cp_resource *r);

static inline uint32_t cp_heap_rand(cp_heap *h)
{
    /* xorshift32: treap priorities need only be unpredictable to the data */
    uint32_t x = h->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    h->rng = x;
    return x;
}

/* A treap of free blocks ordered by (size, addr): best fit, lowest address
 * among equals.  Used by freelist and caching. */
void cp_treap_insert(cp_blk **root, cp_blk *b);
void cp_treap_remove(cp_blk **root, cp_blk *b);
/* Smallest (size, addr) >= (size, 0) whose tag is usable on s. */
cp_blk *cp_treap_find(cp_heap *h, cp_blk *root, uint64_t size, uint64_t sid, cp_stream *s);
uint64_t cp_treap_max(const cp_blk *root);

#endif /* CUPOLA_POOL_COMMON_H */
