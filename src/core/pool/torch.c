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
 *    max_non_split_rounding (20 MiB by default) or more.  With expandable
 *    segments a block is ranked by what it can grow to (its size plus the
 *    unmapped range right after it): from the first fit, the next block of
 *    the stream is taken while it is expandable-rankable smaller, and so on.
 *  - New segments.  When no block fits: garbage collection first (below),
 *    then a segment of 2 MiB (small requests), 20 MiB (requests under
 *    10 MiB), or the request rounded up to 2 MiB.  Refused, without asking
 *    the device, when the memory in segments plus that size would pass the
 *    allowed maximum (the pool's max, or per_process_memory_fraction of the
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
 *    1 1/8 of the device's memory whose pages (2 MiB small, 20 MiB large)
 *    are mapped as needed: a new segment is the lowest place in the
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
 *    threading detail).
 *
 * Data structures: each pool's two orders are intrusive red-black trees
 * (the blocks carry their nodes; no allocation per insert); block
 * descriptors come from slabs and are recycled.  Over the device, blocks
 * are found from their address through a hash map; a replay holds them by
 * handle (cp_torch_malloc), which costs no lookup.
 */
#include "torch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptrmap.h"
#include "resource_impl.h"
#include "streamorder.h"

#define MIB CP_TORCH_MIB
#define MIN_BLOCK UINT64_C(512)
#define SMALL_SIZE MIB                 /* largest small request */
#define SMALL_BUFFER (2 * MIB)         /* small segments */
#define LARGE_BUFFER (20 * MIB)        /* segments for requests under 10 MiB */
#define MIN_LARGE_ALLOC (10 * MIB)
#define ROUND_LARGE (2 * MIB)
#define VIRTUAL_MEMORY UINT64_C(85017493504) /* the H100 80GB HBM3 the truth came from */

/* ---- red-black tree (intrusive) ------------------------------------------- */
typedef struct rbn {
    struct rbn *p, *l, *r;
    int red;
} rbn;

static void rb_rotl(rbn **root, rbn *x)
{
    rbn *y = x->r;
    x->r = y->l;
    if (y->l)
        y->l->p = x;
    y->p = x->p;
    if (!x->p)
        *root = y;
    else if (x == x->p->l)
        x->p->l = y;
    else
        x->p->r = y;
    y->l = x;
    x->p = y;
}

static void rb_rotr(rbn **root, rbn *x)
{
    rbn *y = x->l;
    x->l = y->r;
    if (y->r)
        y->r->p = x;
    y->p = x->p;
    if (!x->p)
        *root = y;
    else if (x == x->p->r)
        x->p->r = y;
    else
        x->p->l = y;
    y->r = x;
    x->p = y;
}

/* n was linked as a leaf under parent (or is the root): restore the colours. */
static void rb_fix_insert(rbn **root, rbn *n)
{
    n->red = 1;
    while (n->p && n->p->red) {
        rbn *g = n->p->p;
        if (n->p == g->l) {
            rbn *u = g->r;
            if (u && u->red) {
                n->p->red = 0;
                u->red = 0;
                g->red = 1;
                n = g;
            } else {
                if (n == n->p->r) {
                    n = n->p;
                    rb_rotl(root, n);
                }
                n->p->red = 0;
                g->red = 1;
                rb_rotr(root, g);
            }
        } else {
            rbn *u = g->l;
            if (u && u->red) {
                n->p->red = 0;
                u->red = 0;
                g->red = 1;
                n = g;
            } else {
                if (n == n->p->l) {
                    n = n->p;
                    rb_rotr(root, n);
                }
                n->p->red = 0;
                g->red = 1;
                rb_rotl(root, g);
            }
        }
    }
    (*root)->red = 0;
}

static rbn *rb_min(rbn *n)
{
    while (n && n->l)
        n = n->l;
    return n;
}

static rbn *rb_max(rbn *n)
{
    while (n && n->r)
        n = n->r;
    return n;
}

static rbn *rb_next(rbn *n)
{
    rbn *p;
    if (n->r)
        return rb_min(n->r);
    p = n->p;
    while (p && n == p->r) {
        n = p;
        p = p->p;
    }
    return p;
}

static rbn *rb_prev(rbn *n)
{
    rbn *p;
    if (n->l)
        return rb_max(n->l);
    p = n->p;
    while (p && n == p->l) {
        n = p;
        p = p->p;
    }
    return p;
}

static void rb_transplant(rbn **root, rbn *u, rbn *v)
{
    if (!u->p)
        *root = v;
    else if (u == u->p->l)
        u->p->l = v;
    else
        u->p->r = v;
    if (v)
        v->p = u->p;
}

static void rb_erase(rbn **root, rbn *z)
{
    rbn *x, *xp, *y = z;
    int yred = y->red;
    if (!z->l) {
        x = z->r;
        xp = z->p;
        rb_transplant(root, z, z->r);
    } else if (!z->r) {
        x = z->l;
        xp = z->p;
        rb_transplant(root, z, z->l);
    } else {
        y = rb_min(z->r);
        yred = y->red;
        x = y->r;
        if (y->p == z) {
            xp = y;
        } else {
            xp = y->p;
            rb_transplant(root, y, y->r);
            y->r = z->r;
            y->r->p = y;
        }
        rb_transplant(root, z, y);
        y->l = z->l;
        y->l->p = y;
        y->red = z->red;
    }
    if (yred)
        return;
    while (x != *root && (!x || !x->red)) {
        if (x == xp->l) {
            rbn *w = xp->r;
            if (w->red) {
                w->red = 0;
                xp->red = 1;
                rb_rotl(root, xp);
                w = xp->r;
            }
            if ((!w->l || !w->l->red) && (!w->r || !w->r->red)) {
                w->red = 1;
                x = xp;
                xp = x->p;
            } else {
                if (!w->r || !w->r->red) {
                    w->l->red = 0;
                    w->red = 1;
                    rb_rotr(root, w);
                    w = xp->r;
                }
                w->red = xp->red;
                xp->red = 0;
                if (w->r)
                    w->r->red = 0;
                rb_rotl(root, xp);
                x = *root;
                break;
            }
        } else {
            rbn *w = xp->l;
            if (w->red) {
                w->red = 0;
                xp->red = 1;
                rb_rotr(root, xp);
                w = xp->l;
            }
            if ((!w->r || !w->r->red) && (!w->l || !w->l->red)) {
                w->red = 1;
                x = xp;
                xp = x->p;
            } else {
                if (!w->l || !w->l->red) {
                    w->r->red = 0;
                    w->red = 1;
                    rb_rotl(root, w);
                    w = xp->l;
                }
                w->red = xp->red;
                xp->red = 0;
                if (w->l)
                    w->l->red = 0;
                rb_rotr(root, xp);
                x = *root;
                break;
            }
        }
    }
    if (x)
        x->red = 0;
}

/* ---- blocks, segments, pools ---------------------------------------------- */
typedef struct tseg {       /* an expandable segment's address range */
    uint64_t base, size, page;
    struct tseg *next;
} tseg;

struct cp_torch_block {
    rbn node;               /* first: the trees' nodes are blocks */
    uint64_t ptr, size, requested;
    uint64_t stream;
    cp_torch_block *prev, *next; /* neighbours in the segment */
    tseg *seg;              /* expandable segment, or NULL */
    int64_t gc_base;        /* the pool's search count when cached */
    cp_stream *use;         /* device: the other stream it was freed on */
    cp_torch_pending *tok;  /* replay: the pending block's token */
    cp_torch_block *pnext;  /* pending list */
    uint32_t events;        /* outstanding events (PyTorch's event_count) */
    uint8_t allocated, mapped, small, later;
};

typedef struct tpool {
    rbn *blocks;            /* free mapped blocks by (stream, size, ptr) */
    rbn *unmapped;          /* unmapped ranges by (stream, ptr) */
    int64_t searches;       /* get_free_blocks_call_count */
    int small;
} tpool;

typedef struct tevent {     /* device: an event recorded for a pending block */
    cp_event *e;
    cp_torch_block *b;
    uint64_t sid;
    struct tevent *next;
} tevent;

typedef struct tslab {
    struct tslab *next;
    cp_torch_block b[127];
} tslab;

struct cp_torch_pending {
    cp_torch_block *b;      /* NULL once the block went back on its own */
    cp_torch_pending *next; /* free list */
};

typedef struct tokslab {
    struct tokslab *next;
    cp_torch_pending p[255];
} tokslab;

struct cp_torch {
    cp_resource base;
    cp_torch_conf conf;
    cp_torch_dev *dev;
    int is_virtual;
    int divisions;          /* some roundup_power2_divisions is above 1 */
    int has_limit;          /* PyTorch's allowed_memory_maximum is set */
    uint64_t limit;         /* that maximum */
    uint64_t device_memory; /* for expandable address ranges and the fraction */
    uint64_t total;         /* total_allocated_memory: bytes in segments / mapped */
    tpool small, large;
    cp_torch_stats st;
    tseg *segs;
    cp_torch_block *spare;
    tslab *slabs;
    cp_torch_pending *spare_tok;
    tokslab *tokslabs;
    cp_torch_block *pending;   /* freed, waiting for other streams (no event: replay) */
    cp_torch_block *later_new; /* completed, back at the malloc after next */
    cp_torch_block *later_ready;
    tevent *events, *events_tail, *spare_ev;
    cp_ptrmap live;            /* address -> block (resource entry points) */
    /* recorded addresses */
    const cp_torch_segev *rec;
    size_t nrec, rec_pos;
    size_t event_now;
    cp_torch_divergence div;
    size_t div_event;
};

static cp_torch_block *blk_of(rbn *n)
{
    return (cp_torch_block *)(void *)n;
}

static cp_torch_block *new_block(cp_torch *t)
{
    cp_torch_block *b = t->spare;
    if (!b) {
        tslab *s = (tslab *)malloc(sizeof *s);
        size_t i;
        if (!s)
            return NULL;
        s->next = t->slabs;
        t->slabs = s;
        for (i = 0; i < sizeof s->b / sizeof s->b[0]; i++) {
            s->b[i].pnext = t->spare;
            t->spare = &s->b[i];
        }
        b = t->spare;
    }
    t->spare = b->pnext;
    *b = (cp_torch_block){.mapped = 1};
    return b;
}

static void del_block(cp_torch *t, cp_torch_block *b)
{
    b->pnext = t->spare;
    t->spare = b;
}

/* (stream, size, ptr) order of the free blocks. */
static int less_size(const cp_torch_block *a, const cp_torch_block *b)
{
    if (a->stream != b->stream)
        return a->stream < b->stream;
    if (a->size != b->size)
        return a->size < b->size;
    return a->ptr < b->ptr;
}

static void blocks_insert(tpool *p, cp_torch_block *b)
{
    rbn **link = &p->blocks, *parent = NULL;
    b->gc_base = p->searches;
    while (*link) {
        parent = *link;
        link = less_size(b, blk_of(parent)) ? &parent->l : &parent->r;
    }
    b->node.p = parent;
    b->node.l = b->node.r = NULL;
    *link = &b->node;
    rb_fix_insert(&p->blocks, &b->node);
}

/* First block not below (stream, size, 0). */
static cp_torch_block *blocks_lower_bound(const tpool *p, uint64_t stream, uint64_t size)
{
    rbn *n = p->blocks, *best = NULL;
    while (n) {
        const cp_torch_block *b = blk_of(n);
        if (b->stream < stream || (b->stream == stream && b->size < size)) {
            n = n->r;
        } else {
            best = n;
            n = n->l;
        }
    }
    return best ? blk_of(best) : NULL;
}

static void unmapped_insert(tpool *p, cp_torch_block *b)
{
    rbn **link = &p->unmapped, *parent = NULL;
    while (*link) {
        const cp_torch_block *o;
        parent = *link;
        o = blk_of(parent);
        link = (b->stream < o->stream || (b->stream == o->stream && b->ptr < o->ptr))
                   ? &parent->l
                   : &parent->r;
    }
    b->node.p = parent;
    b->node.l = b->node.r = NULL;
    *link = &b->node;
    rb_fix_insert(&p->unmapped, &b->node);
}

static cp_torch_block *unmapped_lower_bound(const tpool *p, uint64_t stream)
{
    rbn *n = p->unmapped, *best = NULL;
    while (n) {
        if (blk_of(n)->stream < stream) {
            n = n->r;
        } else {
            best = n;
            n = n->l;
        }
    }
    return best ? blk_of(best) : NULL;
}

static tpool *pool_of(cp_torch *t, const cp_torch_block *b)
{
    return b->small ? &t->small : &t->large;
}

static void cache_remove(cp_torch *t, cp_torch_block *b)
{
    tpool *p = pool_of(t, b);
    rb_erase(b->mapped ? &p->blocks : &p->unmapped, &b->node);
}

static int is_split(const cp_torch_block *b)
{
    return b->prev || b->next;
}

/* ---- counters -------------------------------------------------------------- */
/* (allocated is not kept: it is current + freed, filled in when read) */
static inline void s_inc(cp_torch_stat *s, uint64_t v)
{
    int64_t c = s->current + (int64_t)v;
    s->current = c;
    s->peak = c > s->peak ? c : s->peak;
}

static inline void s_dec(cp_torch_stat *s, uint64_t v)
{
    s->current -= (int64_t)v;
    s->freed += (int64_t)v;
}

/* A counter of a pool and of both: the pool's current and freed are kept,
 * the aggregate's are their sums (filled in when read), and only the
 * aggregate's peak needs following, at each increase. */
#define INC(t, arr, small, v)                                                     \
    do {                                                                          \
        cp_torch_stat *a_ = (t)->st.arr;                                          \
        int64_t c_;                                                               \
        s_inc(&a_[(small) ? 1 : 2], (v));                                         \
        c_ = a_[1].current + a_[2].current;                                       \
        a_[0].peak = c_ > a_[0].peak ? c_ : a_[0].peak;                           \
    } while (0)
#define DEC(t, arr, small, v) s_dec(&(t)->st.arr[(small) ? 1 : 2], (v))

static void set_reserved(cp_torch *t)
{
    t->base.reserved =
        (uint64_t)(t->st.reserved_bytes[1].current + t->st.reserved_bytes[2].current);
}

/* ---- the device, with recorded addresses ---------------------------------- */
static const char *call_name(int c)
{
    static const char *const n[] = {"segment_alloc", "segment_free", "segment_map",
                                    "segment_unmap"};
    return c >= 0 && c < 4 ? n[c] : "?";
}

static void diverge(cp_torch *t, int call, uint64_t addr, uint64_t size)
{
    t->div.diverged = 1;
    t->div.at = t->rec_pos;
    t->div.model.call = (uint8_t)call;
    t->div.model.addr = addr;
    t->div.model.size = size;
    t->div.model.entry = SIZE_MAX;
    if (t->rec_pos < t->nrec) {
        t->div.torch = t->rec[t->rec_pos];
        t->div.entry = t->rec[t->rec_pos].entry;
    } else {
        memset(&t->div.torch, 0, sizeof t->div.torch);
        t->div.torch.call = 255;
        t->div.entry = SIZE_MAX;
    }
    t->div_event = t->event_now;
}

static int recording(const cp_torch *t)
{
    return t->rec && !t->div.diverged;
}

/* Checks the model's call against PyTorch's next one (addr 0: the model
 * asks for an address); returns the recorded entry when they match. */
static const cp_torch_segev *rec_match(cp_torch *t, int call, uint64_t addr, uint64_t size)
{
    const cp_torch_segev *e;
    if (!recording(t))
        return NULL;
    e = t->rec_pos < t->nrec ? &t->rec[t->rec_pos] : NULL;
    if (e && e->call == call && e->size == size && (!addr || e->addr == addr)) {
        t->rec_pos++;
        return e;
    }
    diverge(t, call, addr, size);
    return NULL;
}

static cp_status dev_malloc(cp_torch *t, uint64_t size, uint64_t *addr)
{
    const cp_torch_segev *e = rec_match(t, CP_TORCH_MALLOC, 0, size);
    if (e) {
        *addr = e->addr;
        cp_torch_dev_claim(t->dev, e->addr, size);
        return CP_OK;
    }
    return cp_torch_dev_malloc(t->dev, size, addr);
}

static void dev_free(cp_torch *t, uint64_t addr, uint64_t size)
{
    rec_match(t, CP_TORCH_FREE, addr, size);
    cp_torch_dev_free(t->dev, addr, size);
}

static cp_status dev_map(cp_torch *t, tseg *s, uint64_t addr, uint64_t size)
{
    rec_match(t, CP_TORCH_MAP, addr, size);
    return cp_torch_dev_map(t->dev, addr, size, s->page);
}

static void dev_unmap(cp_torch *t, tseg *s, uint64_t addr, uint64_t size)
{
    rec_match(t, CP_TORCH_UNMAP, addr, size);
    cp_torch_dev_unmap(t->dev, addr, size, s->page);
}

/* An expandable segment's address range: in recorded mode where PyTorch's
 * next map lands (the first map of a new range is at its start). */
static cp_status dev_reserve(cp_torch *t, uint64_t size, uint64_t page, uint64_t *addr)
{
    if (recording(t)) {
        const cp_torch_segev *e = t->rec_pos < t->nrec ? &t->rec[t->rec_pos] : NULL;
        if (e && e->call == CP_TORCH_MAP) {
            *addr = e->addr;
            cp_torch_dev_claim(t->dev, e->addr, size);
            return CP_OK;
        }
        /* what the model is about to do: map at the start of a new range */
        diverge(t, CP_TORCH_MAP, 0, page);
    }
    return cp_torch_dev_reserve(t->dev, size, page, addr);
}

/* ---- PyTorch's rules --------------------------------------------------------- */
static uint64_t round_size(const cp_torch *t, uint64_t size)
{
    uint32_t d;
    if (size < MIN_BLOCK)
        return MIN_BLOCK;
    if (!t->divisions) /* the default: 512-byte steps */
        return (size + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
    d = cp_torch_conf_divisions(&t->conf, size);
    if (d > 1 && size > MIN_BLOCK * d) {
        uint64_t floor2, step, down;
        if (!(size & (size - 1)))
            return size;
        floor2 = UINT64_C(1) << (63 - __builtin_clzll(size));
        step = floor2 >> (31 - __builtin_clz(d));
        if (step == 0)
            return floor2 << 1;
        down = size & ~(step - 1);
        return down == size ? size : down + step;
    }
    return (size + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
}

static uint64_t allocation_size(uint64_t size)
{
    if (size <= SMALL_SIZE)
        return SMALL_BUFFER;
    if (size < MIN_LARGE_ALLOC)
        return LARGE_BUFFER;
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
            rbn *nx = rb_next(&b->node);
            while (b->seg && nx && blk_of(nx)->stream == stream &&
                   expandable_size(blk_of(nx)) < expandable_size(b)) {
                b = blk_of(nx);
                nx = rb_next(nx);
            }
        } else {
            /* expandable segments turned off: only other blocks will do */
            rbn *nx = rb_next(&b->node);
            while (nx && blk_of(nx)->seg && blk_of(nx)->stream == stream)
                nx = rb_next(nx);
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
static uint64_t try_merge(cp_torch *t, cp_torch_block *dst, cp_torch_block *src)
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
    rbn *nx = rb_next((rbn *)(uintptr_t)&x->node);
    const cp_torch_block *n;
    if (!nx)
        return 1;
    n = blk_of(nx);
    return n->stream > x->stream ||
           (n->stream == x->stream && (n->size > size || (n->size == size && n->ptr > ptr)));
}

static void free_block(cp_torch *t, cp_torch_block *b)
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
    if (mp && (sub = try_merge(t, b, b->prev)) != 0) {
        dblocks--;
        dbytes -= (int64_t)sub;
    }
    if (mn && (sub = try_merge(t, b, b->next)) != 0) {
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

/* cudaFree of an unsplit cached block (release_block). */
static void release_block(cp_torch *t, cp_torch_block *b)
{
    t->st.num_device_free++;
    dev_free(t, b->ptr, b->size);
    t->total -= b->size;
    DEC(t, segment, b->small, 1);
    DEC(t, reserved_bytes, b->small, b->size);
    if (b->size >= t->conf.max_split_size)
        s_dec(&t->st.oversize_segments, 1);
    set_reserved(t);
    rb_erase(&pool_of(t, b)->blocks, &b->node);
    del_block(t, b);
}

/* Unmaps the whole pages of a free block of an expandable segment. */
static void unmap_block(cp_torch *t, cp_torch_block *b)
{
    tseg *s = b->seg;
    tpool *p = pool_of(t, b);
    uint64_t off = b->ptr - s->base, first, last, lo, hi, before, after;
    first = (off + s->page - 1) / s->page;
    last = (off + b->size) / s->page;
    if (first >= last)
        return;
    lo = s->base + first * s->page;
    hi = s->base + last * s->page;
    rb_erase(&p->blocks, &b->node);
    before = lo - b->ptr;
    after = b->ptr + b->size - hi;
    if (before) {
        cp_torch_block *f = new_block(t);
        if (f) {
            f->ptr = b->ptr;
            f->size = before;
            f->stream = b->stream;
            f->seg = s;
            f->small = b->small;
            f->prev = b->prev;
            f->next = b;
            if (b->prev)
                b->prev->next = f;
            b->prev = f;
            blocks_insert(p, f);
        }
    }
    if (after) {
        cp_torch_block *f = new_block(t);
        if (f) {
            f->ptr = hi;
            f->size = after;
            f->stream = b->stream;
            f->seg = s;
            f->small = b->small;
            f->prev = b;
            f->next = b->next;
            if (b->next)
                b->next->prev = f;
            b->next = f;
            blocks_insert(p, f);
        }
    }
    b->ptr = lo;
    b->size = hi - lo;
    b->mapped = 0;
    try_merge(t, b, b->prev);
    try_merge(t, b, b->next);
    unmapped_insert(p, b);
    t->total -= hi - lo;
    DEC(t, reserved_bytes, b->small, hi - lo);
    set_reserved(t);
    t->st.num_device_free++;
    dev_unmap(t, s, lo, hi - lo);
}

static void release_segment_range(cp_torch *t, cp_torch_block *b)
{
    tseg *s = b->seg, **pp;
    rb_erase(&pool_of(t, b)->unmapped, &b->node);
    for (pp = &t->segs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    cp_torch_dev_unreserve(t->dev, s->base, s->size);
    free(s);
    del_block(t, b);
}

/* Releases the unsplit cached blocks of a pool and unmaps the free pages of
 * its expandable segments (release_blocks).  keep: stop once reserved is at
 * most this (trim(keep); 0 for PyTorch's own calls, which release all). */
static void release_blocks(cp_torch *t, tpool *p, uint64_t keep)
{
    cp_torch_block *unmap_list = NULL, *b;
    rbn *n = rb_min(p->blocks);
    while (n) {
        rbn *nx = rb_next(n);
        b = blk_of(n);
        if (keep && t->total <= keep)
            return;
        if (b->seg) {
            b->pnext = unmap_list; /* gathered: unmapping changes the tree */
            unmap_list = b;
        } else if (!is_split(b)) {
            release_block(t, b);
        }
        n = nx;
    }
    /* in the order gathered (the tree's) */
    {
        cp_torch_block *rev = NULL;
        while (unmap_list) {
            b = unmap_list;
            unmap_list = b->pnext;
            b->pnext = rev;
            rev = b;
        }
        while (rev) {
            b = rev;
            rev = b->pnext;
            if (keep && t->total <= keep)
                continue;
            unmap_block(t, b);
            if (!b->mapped && !is_split(b))
                release_segment_range(t, b);
        }
    }
}

/* ---- pending blocks and events --------------------------------------------- */
static void pending_unlink(cp_torch *t, cp_torch_block *b)
{
    cp_torch_block **pp;
    for (pp = &t->pending; *pp; pp = &(*pp)->pnext)
        if (*pp == b) {
            *pp = b->pnext;
            return;
        }
}

static void settle(cp_torch *t, cp_torch_block *b)
{
    if (b->tok) {
        b->tok->b = NULL;
        b->tok = NULL;
    }
    b->events = 0;
    b->later = 0;
    b->use = NULL;
    free_block(t, b);
}

/* Device: PyTorch queries each stream's events in order and stops at the
 * first one not complete (process_events). */
static void process_events(cp_torch *t)
{
    tevent **pp = &t->events, *e;
    uint64_t blocked[16];
    int nblocked = 0;
    t->events_tail = NULL;
    while ((e = *pp) != NULL) {
        int done = 0, i, skip = 0;
        for (i = 0; i < nblocked; i++)
            skip |= blocked[i] == e->sid;
        if (!skip && cp_be->event_query(e->e, &done) == CP_OK && done) {
            *pp = e->next;
            if (e->b->events && --e->b->events == 0) {
                pending_unlink(t, e->b);
                settle(t, e->b);
            }
            e->next = t->spare_ev;
            t->spare_ev = e;
            continue;
        }
        if (!skip && nblocked < 16)
            blocked[nblocked++] = e->sid;
        t->events_tail = e;
        pp = &e->next;
    }
}

/* Every pending block back to its pool: the allocator synchronizes
 * (synchronize_and_free_events). */
static void synchronize_and_free(cp_torch *t)
{
    t->st.num_sync_all_streams++;
    while (t->events) {
        tevent *e = t->events;
        t->events = e->next;
        cp_be->event_synchronize(e->e);
        if (e->b->events && --e->b->events == 0) {
            pending_unlink(t, e->b);
            settle(t, e->b);
        }
        e->next = t->spare_ev;
        t->spare_ev = e;
    }
    t->events_tail = NULL;
    while (t->pending) {
        cp_torch_block *b = t->pending;
        t->pending = b->pnext;
        settle(t, b);
    }
    while (t->later_new) {
        cp_torch_block *b = t->later_new;
        t->later_new = b->pnext;
        settle(t, b);
    }
    while (t->later_ready) {
        cp_torch_block *b = t->later_ready;
        t->later_ready = b->pnext;
        settle(t, b);
    }
}

/* Completions the replay deferred come back at the start of a malloc. */
static void settle_later(cp_torch *t)
{
    while (t->later_ready) {
        cp_torch_block *b = t->later_ready;
        t->later_ready = b->pnext;
        settle(t, b);
    }
}

/* ---- segments ----------------------------------------------------------------- */
static int releasable(const cp_torch_block *b)
{
    return b && !b->allocated && !b->events && !b->use;
}

/* The lowest place in the stream's expandable ranges where free and
 * unmapped space in a row holds size (find_expandable_block); a new range
 * when none does. */
static cp_torch_block *find_expandable(cp_torch *t, tpool *p, uint64_t stream, uint64_t size,
                                       cp_status *st)
{
    cp_torch_block *u = unmapped_lower_bound(p, stream), *c;
    tseg *s;
    uint64_t page = p->small ? SMALL_BUFFER : LARGE_BUFFER, n, addr;
    *st = CP_OK;
    while (u && u->stream == stream) {
        uint64_t bytes = 0;
        cp_torch_block *x;
        c = releasable(u->prev) ? u->prev : u;
        for (x = c; bytes < size && releasable(x); x = x->next)
            bytes += x->size;
        if (bytes >= size)
            return c;
        {
            rbn *nx = rb_next(&u->node);
            u = nx ? blk_of(nx) : NULL;
        }
    }
    n = (t->device_memory + t->device_memory / 8 + page - 1) / page;
    s = (tseg *)calloc(1, sizeof *s);
    c = s ? new_block(t) : NULL;
    if (!c) {
        free(s);
        *st = cp_error_set(CP_ERR_OOM, "out of host memory");
        return NULL;
    }
    *st = dev_reserve(t, n * page, page, &addr);
    if (*st != CP_OK) {
        free(s);
        del_block(t, c);
        return NULL;
    }
    s->base = addr;
    s->size = n * page;
    s->page = page;
    s->next = t->segs;
    t->segs = s;
    c->ptr = addr;
    c->size = n * page;
    c->stream = stream;
    c->seg = s;
    c->small = (uint8_t)p->small;
    c->mapped = 0;
    unmapped_insert(p, c);
    return c;
}

/* Maps the first `size` bytes of an unmapped range (whole pages). */
static int map_block(cp_torch *t, cp_torch_block *b, uint64_t size)
{
    tseg *s = b->seg;
    tpool *p = pool_of(t, b);
    uint64_t off = b->ptr - s->base;
    uint64_t first = off / s->page, last = (off + size + s->page - 1) / s->page;
    uint64_t bytes = (last - first) * s->page;
    if (last == first || dev_map(t, s, b->ptr, bytes) != CP_OK)
        return 0;
    rb_erase(&p->unmapped, &b->node);
    b->mapped = 1;
    if (bytes < b->size) {
        cp_torch_block *r = new_block(t);
        if (r) {
            r->ptr = b->ptr + bytes;
            r->size = b->size - bytes;
            r->stream = b->stream;
            r->seg = s;
            r->small = b->small;
            r->mapped = 0;
            r->prev = b;
            r->next = b->next;
            if (b->next)
                b->next->prev = r;
            b->next = r;
            unmapped_insert(p, r);
            b->size = bytes;
        }
    }
    try_merge(t, b, b->prev);
    try_merge(t, b, b->next);
    blocks_insert(p, b);
    t->total += bytes;
    INC(t, reserved_bytes, b->small, bytes);
    set_reserved(t);
    t->st.num_device_alloc++;
    return 1;
}

static cp_torch_block *alloc_expandable(cp_torch *t, tpool *p, uint64_t stream, uint64_t size)
{
    cp_status st;
    cp_torch_block *c = find_expandable(t, p, stream, size, &st);
    if (!c)
        return NULL;
    if (!c->mapped && !map_block(t, c, c->size < size ? c->size : size))
        return NULL;
    while (c->size < size) {
        cp_torch_block *nx = c->next;
        uint64_t rest = size - c->size;
        if (!nx || !map_block(t, nx, rest < nx->size ? rest : nx->size))
            return NULL;
        c = nx;
    }
    rb_erase(&p->blocks, &c->node);
    return c;
}

/* A new segment for the request (alloc_block); NULL when refused. */
static cp_torch_block *alloc_block(cp_torch *t, tpool *p, uint64_t stream, uint64_t size,
                                   uint64_t alloc_size, int retry)
{
    cp_torch_block *b;
    uint64_t addr = 0;
    if (retry)
        t->st.num_alloc_retries++;
    if (t->has_limit && t->total + alloc_size > t->limit)
        return NULL;
    if (t->conf.expandable_segments)
        return alloc_expandable(t, p, stream, size);
    b = new_block(t);
    if (!b)
        return NULL;
    if (dev_malloc(t, alloc_size, &addr) != CP_OK) {
        del_block(t, b);
        return NULL;
    }
    t->total += alloc_size;
    b->ptr = addr;
    b->size = alloc_size;
    b->stream = stream;
    b->small = (uint8_t)p->small;
    INC(t, segment, p->small, 1);
    INC(t, reserved_bytes, p->small, alloc_size);
    if (alloc_size >= t->conf.max_split_size)
        s_inc(&t->st.oversize_segments, 1);
    set_reserved(t);
    t->st.num_device_alloc++;
    return b;
}

/* Releases cached oversize blocks of the request's pool and stream
 * (release_available_cached_blocks); 1 when enough was released. */
static int release_available(cp_torch *t, tpool *p, uint64_t stream, uint64_t size)
{
    uint64_t key = size < t->conf.max_split_size ? t->conf.max_split_size : size, released = 0;
    cp_torch_block *b;
    rbn *n;
    if (t->conf.max_split_size == CP_TORCH_NO_SPLIT_LIMIT)
        return 0;
    b = blocks_lower_bound(p, stream, key);
    if (b && b->stream == stream && !b->seg) {
        if (!is_split(b)) /* (never split: blocks this large are not) */
            release_block(t, b);
        return 1;
    }
    n = b ? rb_prev(&b->node) : rb_max(p->blocks);
    while (n && released < key) {
        rbn *pv;
        b = blk_of(n);
        if (b->size < t->conf.max_split_size || b->stream != stream)
            break;
        pv = rb_prev(n);
        if (!b->seg && !is_split(b)) {
            released += b->size;
            release_block(t, b);
        }
        n = pv;
    }
    return released >= key;
}

/* Releases every cached block it can (release_cached_blocks). */
static void release_cached(cp_torch *t, uint64_t keep)
{
    synchronize_and_free(t);
    release_blocks(t, &t->large, keep);
    release_blocks(t, &t->small, keep);
}

static void garbage_collect(cp_torch *t)
{
    uint64_t threshold = (uint64_t)(t->conf.gc_threshold * (double)t->limit);
    uint64_t target, reclaimed = 0, total_age = 0;
    int64_t count = 0;
    int freed = 1;
    rbn *n;
    if (t->total <= threshold)
        return;
    target = t->total - threshold;
    for (n = rb_min(t->large.blocks); n; n = rb_next(n))
        if (!is_split(blk_of(n))) {
            total_age += (uint64_t)(t->large.searches - blk_of(n)->gc_base);
            count++;
        }
    if (!count)
        return;
    while (reclaimed < target && freed && count > 0) {
        double age_threshold = (double)total_age / (double)count;
        freed = 0;
        n = rb_min(t->large.blocks);
        while (n) {
            rbn *nx = rb_next(n);
            cp_torch_block *b = blk_of(n);
            uint64_t age = (uint64_t)(t->large.searches - b->gc_base);
            if (!is_split(b) && !b->seg && (double)age >= age_threshold) {
                freed = 1;
                reclaimed += b->size;
                total_age -= age;
                count--;
                release_block(t, b);
            }
            n = nx;
        }
    }
}

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
        rbn *pred;
        if (!nb)
            return NULL;
        /* The rest keeps the block's node when no other block lies between
         * its key and the block's (the usual case: it saves a removal and an
         * insertion); else it goes in anew, as PyTorch inserts it. */
        pred = in_tree ? rb_prev(&b->node) : NULL;
        if (in_tree && pred &&
            !(blk_of(pred)->stream < b->stream ||
              (blk_of(pred)->stream == b->stream &&
               (blk_of(pred)->size < b->size - size ||
                (blk_of(pred)->size == b->size - size && blk_of(pred)->ptr < b->ptr + size)))))
            rb_erase(&p->blocks, &b->node), in_tree = 0;
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
            rb_erase(&p->blocks, &b->node);
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
        process_events(t);
    if (t->later_ready)
        settle_later(t);
    size = round_size(t, orig ? orig : 1);
    if (size < orig) /* rounding wrapped: larger than any device */
        size = UINT64_MAX & ~(MIN_BLOCK - 1);
    p = size <= SMALL_SIZE ? &t->small : &t->large;
    alloc_size = allocation_size(size);
    if (alloc_size < size)
        alloc_size = size;
    b = get_free_block(t, p, stream, size);
    in_tree = b != NULL;
    if (!b) {
        if (gc_on(t))
            garbage_collect(t);
        b = alloc_block(t, p, stream, size, alloc_size, 0);
        if (!b && release_available(t, p, stream, size))
            b = alloc_block(t, p, stream, size, alloc_size, 0);
        if (!b) {
            release_cached(t, 0);
            b = alloc_block(t, p, stream, size, alloc_size, 1);
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

static void free_common(cp_torch *t, cp_torch_block *b)
{
    b->allocated = 0;
    DEC(t, allocation, b->small, 1);
    DEC(t, allocated_bytes, b->small, b->size);
    if (b->size >= t->conf.max_split_size)
        s_dec(&t->st.oversize_allocations, 1);
}

void cp_torch_free(cp_torch *t, cp_torch_block *b)
{
    free_common(t, b);
    free_block(t, b);
}

static void make_pending(cp_torch *t, cp_torch_block *b)
{
    free_common(t, b);
    b->events = 1;
    b->pnext = t->pending;
    t->pending = b;
}

cp_torch_pending *cp_torch_free_pending(cp_torch *t, cp_torch_block *b)
{
    cp_torch_pending *p = t->spare_tok;
    if (!p) {
        tokslab *s = (tokslab *)malloc(sizeof *s);
        size_t i;
        if (!s) {
            cp_torch_free(t, b);
            return NULL;
        }
        s->next = t->tokslabs;
        t->tokslabs = s;
        for (i = 0; i < sizeof s->p / sizeof s->p[0]; i++) {
            s->p[i].next = t->spare_tok;
            t->spare_tok = &s->p[i];
        }
        p = t->spare_tok;
    }
    t->spare_tok = p->next;
    make_pending(t, b);
    p->b = b;
    b->tok = p;
    return p;
}

void cp_torch_complete(cp_torch *t, cp_torch_pending *p, int later)
{
    cp_torch_block *b = p->b;
    p->b = NULL;
    p->next = t->spare_tok;
    t->spare_tok = p;
    if (!b)
        return; /* it went back already (a synchronization) */
    b->tok = NULL;
    if (later) {
        /* from the pending list to the completions that come back at the
         * malloc after next (the lists share pnext) */
        pending_unlink(t, b);
        b->later = 1;
        b->pnext = t->later_new;
        t->later_new = b;
        return;
    }
    pending_unlink(t, b);
    settle(t, b);
}

void cp_torch_empty_cache(cp_torch *t)
{
    release_cached(t, 0);
}

int cp_torch_malloc_releases(cp_torch *t, uint64_t orig, uint64_t stream)
{
    uint64_t size = round_size(t, orig ? orig : 1), alloc_size;
    tpool *p = size <= SMALL_SIZE ? &t->small : &t->large;
    if (find_free(t, p, stream, size))
        return 0;
    if (gc_on(t) && t->total > (uint64_t)(t->conf.gc_threshold * (double)t->limit)) {
        rbn *n;
        for (n = rb_min(t->large.blocks); n; n = rb_next(n))
            if (!is_split(blk_of(n)) && !blk_of(n)->seg)
                return 1;
    }
    alloc_size = allocation_size(size);
    return t->has_limit && t->total + alloc_size > t->limit;
}

uint64_t cp_torch_block_addr(const cp_torch_block *b)
{
    return b->ptr;
}

/* ---- recorded addresses --------------------------------------------------- */
void cp_torch_use_recorded(cp_torch *t, const cp_torch_segev *ev, size_t n)
{
    t->rec = ev;
    t->nrec = n;
    t->rec_pos = 0;
    memset(&t->div, 0, sizeof t->div);
}

void cp_torch_end_recorded(cp_torch *t, cp_torch_divergence *out)
{
    if (t->rec && !t->div.diverged && t->rec_pos < t->nrec) {
        /* PyTorch made calls the model did not */
        t->div.diverged = 1;
        t->div.at = t->rec_pos;
        t->div.torch = t->rec[t->rec_pos];
        t->div.entry = t->rec[t->rec_pos].entry;
        t->div.model.call = 255;
        t->div.model.entry = SIZE_MAX;
        t->div_event = t->event_now;
    }
    if (out)
        *out = t->div;
    t->rec = NULL;
    t->nrec = 0;
}

void cp_torch_set_event(cp_torch *t, size_t event)
{
    t->event_now = event;
}

size_t cp_torch_divergence_event(const cp_torch *t)
{
    return t->div_event;
}

/* ---- accessors --------------------------------------------------------------- */
cp_torch *cp_torch_of(cp_resource *r);
const cp_torch_conf *cp_torch_get_conf(const cp_torch *t)
{
    return &t->conf;
}

void cp_torch_get_stats(cp_torch *t, cp_torch_stats *out)
{
    cp_torch_stat *all[] = {out->allocation, out->segment, out->active, out->inactive_split,
                            out->allocated_bytes, out->reserved_bytes, out->active_bytes,
                            out->inactive_split_bytes, out->requested_bytes};
    size_t i, k;
    *out = t->st;
    for (i = 0; i < sizeof all / sizeof all[0]; i++) {
        all[i][0].current = all[i][1].current + all[i][2].current;
        all[i][0].freed = all[i][1].freed + all[i][2].freed;
        for (k = 0; k < 3; k++)
            all[i][k].allocated = all[i][k].current + all[i][k].freed;
    }
    out->oversize_allocations.allocated =
        out->oversize_allocations.current + out->oversize_allocations.freed;
    out->oversize_segments.allocated = out->oversize_segments.current + out->oversize_segments.freed;
}

uint64_t cp_torch_limit(const cp_torch *t)
{
    return t->has_limit ? t->limit : 0;
}

void cp_torch_account(cp_torch *t, uint64_t allocs, uint64_t frees, uint64_t failed,
                      uint64_t used_peak)
{
    t->base.st.allocs += allocs;
    t->base.st.frees += frees;
    t->base.st.failed += failed;
    if (used_peak > t->base.st.used_peak)
        t->base.st.used_peak = used_peak;
    if ((uint64_t)t->st.reserved_bytes[CP_TORCH_ALL].peak > t->base.st.reserved_peak)
        t->base.st.reserved_peak = (uint64_t)t->st.reserved_bytes[CP_TORCH_ALL].peak;
}

const uint64_t *cp_torch_reserved_now(const cp_torch *t)
{
    return &t->base.reserved;
}

int cp_torch_is_virtual(const cp_torch *t)
{
    return t->is_virtual;
}

uint64_t cp_torch_device_memory(const cp_torch *t)
{
    return t->device_memory;
}

/* ---- the resource ------------------------------------------------------------ */
static cp_status t_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cp_torch *t = (cp_torch *)r;
    cp_torch_block *b;
    uint64_t addr = 0;
    cp_status st = cp_torch_malloc(t, bytes, cp_so_sid(s), &b, &addr);
    if (st != CP_OK)
        return st;
    if (cp_ptrmap_put(&t->live, addr, b) != 0) {
        cp_torch_free(t, b);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    *out = (void *)(uintptr_t)addr;
    return CP_OK;
}

static cp_status t_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    cp_torch *t = (cp_torch *)r;
    cp_torch_block *b = (cp_torch_block *)cp_ptrmap_get(&t->live, (uint64_t)(uintptr_t)p);
    (void)bytes;
    if (!b)
        return cp_error_set(CP_ERR_INVALID, "free of %p, which this torch pool did not hand out",
                            p);
    cp_ptrmap_del(&t->live, (uint64_t)(uintptr_t)p);
    if (!t->is_virtual && cp_so_sid(s) != b->stream) {
        /* Freed on another stream than its own: a use of that stream
         * (record_stream), so it waits for that stream's work. */
        tevent *e = t->spare_ev;
        cp_event *ev = NULL;
        if (e)
            t->spare_ev = e->next;
        else if ((e = (tevent *)calloc(1, sizeof *e)) == NULL)
            return cp_error_set(CP_ERR_OOM, "out of host memory");
        ev = e->e;
        if (!ev && cp_be->event_create(&ev, 0) != CP_OK) {
            free(e);
            cp_be->stream_synchronize(s); /* no event: wait for the stream instead */
            cp_torch_free(t, b);
            return CP_OK;
        }
        e->e = ev;
        if (cp_be->event_record(ev, s) != CP_OK) {
            e->next = t->spare_ev;
            t->spare_ev = e;
            cp_be->stream_synchronize(s);
            cp_torch_free(t, b);
            return CP_OK;
        }
        e->b = b;
        e->sid = cp_so_sid(s);
        e->next = NULL;
        if (t->events_tail)
            t->events_tail->next = e;
        else
            t->events = e;
        t->events_tail = e;
        make_pending(t, b);
        b->use = s;
        return CP_OK;
    }
    cp_torch_free(t, b);
    return CP_OK;
}

static cp_status t_trim(cp_resource *r, size_t keep)
{
    cp_torch *t = (cp_torch *)r;
    release_cached(t, keep);
    return CP_OK;
}

static void t_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    cp_torch *t = (cp_torch *)r;
    rbn *n;
    uint64_t big = 0;
    /* the trees are ordered by stream first: look at every stream's largest */
    for (n = rb_min(t->large.blocks); n; n = rb_next(n))
        if (blk_of(n)->size > big)
            big = blk_of(n)->size;
    for (n = rb_min(t->small.blocks); n; n = rb_next(n))
        if (blk_of(n)->size > big)
            big = blk_of(n)->size;
    *largest = big;
    *free_bytes = t->total - (uint64_t)(t->st.allocated_bytes[1].current +
                                        t->st.allocated_bytes[2].current);
}

static void t_destroy(cp_resource *r)
{
    cp_torch *t = (cp_torch *)r;
    /* Everything back: pending blocks, cached blocks, expandable ranges. */
    if (!t->is_virtual) {
        while (t->events) {
            tevent *e = t->events;
            t->events = e->next;
            cp_be->event_synchronize(e->e);
            e->next = t->spare_ev;
            t->spare_ev = e;
        }
    }
    t->events_tail = NULL;
    t->rec = NULL;
    release_cached(t, 0);
    /* live blocks (none, by the binding's contract; a replay frees its
     * own) and split pieces of segments still hold memory: give the
     * segments back wholesale */
    if (!t->is_virtual) {
        cp_ptrmap seen;
        size_t i;
        if (cp_ptrmap_init(&seen, 64) == 0) {
            for (i = 0; t->live.slots && i <= t->live.mask; i++) {
                cp_torch_block *b = (cp_torch_block *)t->live.slots[i].val;
                if (!t->live.slots[i].key || !b)
                    continue;
                while (b->prev)
                    b = b->prev;
                if (!b->seg && !cp_ptrmap_get(&seen, b->ptr)) {
                    uint64_t sz = 0;
                    cp_torch_block *x;
                    for (x = b; x; x = x->next)
                        sz += x->size;
                    cp_ptrmap_put(&seen, b->ptr, (void *)1);
                    cp_torch_dev_free(t->dev, b->ptr, sz);
                }
            }
            cp_ptrmap_fini(&seen);
        }
    }
    while (t->segs) {
        tseg *s = t->segs;
        t->segs = s->next;
        if (!t->is_virtual) {
            uint64_t off;
            for (off = 0; off < s->size; off += s->page)
                cp_torch_dev_unmap(t->dev, s->base + off, s->page, s->page);
        }
        cp_torch_dev_unreserve(t->dev, s->base, s->size);
        free(s);
    }
    while (t->spare_ev) {
        tevent *e = t->spare_ev;
        t->spare_ev = e->next;
        if (e->e)
            cp_be->event_destroy(e->e);
        free(e);
    }
    while (t->slabs) {
        tslab *s = t->slabs;
        t->slabs = s->next;
        free(s);
    }
    while (t->tokslabs) {
        tokslab *s = t->tokslabs;
        t->tokslabs = s->next;
        free(s);
    }
    cp_ptrmap_fini(&t->live);
    cp_torch_dev_destroy(t->dev);
    free(t);
}

static void t_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    cp_torch *t = (cp_torch *)r;
    *allocs = t->st.num_device_alloc;
    *frees = t->st.num_device_free;
}

static const cp_resource_ops torch_ops = {
    .kind = "torch",
    .alloc = t_alloc,
    .free = t_free,
    .trim = t_trim,
    .free_info = t_free_info,
    .destroy = t_destroy,
    .device_calls = t_device_calls,
};

cp_torch *cp_torch_of(cp_resource *r)
{
    return r && r->ops == &torch_ops ? (cp_torch *)r : NULL;
}

cp_status cp_torch_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    cp_torch *t;
    cp_status st;
    cp_upstream_kind kind = o->upstream;

    *out = NULL;
    cp_resource_destroy(up); /* the model talks to its device itself */
    t = (cp_torch *)calloc(1, sizeof *t);
    if (!t)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    cp_resource_init(&t->base, &torch_ops);
    st = cp_torch_conf_parse(o->torch_conf, o->torch_conf ? strlen(o->torch_conf) : 0, &t->conf);
    if (st == CP_OK)
        st = cp_torch_dev_create(&t->dev, kind, o->device,
                                 o->torch_bump_addresses ? CP_TORCH_ADDR_BUMP : CP_TORCH_ADDR_DRIVER);
    if (st == CP_OK && cp_ptrmap_init(&t->live, 64) != 0)
        st = cp_error_set(CP_ERR_OOM, "out of host memory");
    if (st != CP_OK) {
        cp_torch_dev_destroy(t->dev);
        cp_ptrmap_fini(&t->live);
        free(t);
        return st;
    }
    t->is_virtual = cp_torch_dev_is_virtual(t->dev);
    {
        int i;
        for (i = 0; i < 16; i++)
            t->divisions |= t->conf.roundup_divisions[i] > 1;
    }
    t->small.small = 1;
    t->device_memory = o->torch_device_memory ? o->torch_device_memory
                       : t->is_virtual        ? VIRTUAL_MEMORY
                                              : cp_torch_dev_memory(t->dev);
    if (!t->device_memory)
        t->device_memory = VIRTUAL_MEMORY;
    t->has_limit = o->max != 0;
    t->limit = o->max;
    if (t->conf.memory_fraction < 1.0) {
        uint64_t f = (uint64_t)(t->conf.memory_fraction * (double)t->device_memory);
        if (!t->has_limit || f < t->limit)
            t->limit = f;
        t->has_limit = 1;
    }
    *out = &t->base;
    (void)call_name;
    return CP_OK;
}
