/*
 * pool/torch_impl.h: the inside of the torch model (PyTorch's caching
 * allocator; pool/torch.c states its policy), shared by its files:
 *   torch.c           the policy, and the fast path: rounding, finding a free
 *                     block, splitting, freeing and merging (malloc, free)
 *   torch_segment.c   segments and expandable segments: the device's calls
 *                     (with recorded addresses), new segments, releasing
 *                     cached ones, garbage collection
 *   torch_stream.c    blocks used on other streams: pending frees, events,
 *                     synchronization, empty_cache
 *   torch_resource.c  the cp_resource glue, creation, accessors and counters
 *   torch_conf.c, torch_dev.c   the conf string and the devices (torch.h)
 * cp_tk_ names the model's functions that one file defines and another calls.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TORCH_IMPL_H
#define CUPOLA_TORCH_IMPL_H

#include "torch.h"

#include <stdlib.h>

#include "ptrmap.h"
#include "rbtree.h"
#include "resource_impl.h"

#define MIB CP_TORCH_MIB
#define MIN_BLOCK UINT64_C(512)
#define SMALL_SIZE MIB                 /* largest small request */
#define SMALL_BUFFER (2 * MIB)         /* small segments */
#define MIN_LARGE_ALLOC (10 * MIB)
#define ROUND_LARGE (2 * MIB)
#define VIRTUAL_MEMORY UINT64_C(85017493504) /* the H100 80GB HBM3 the truth came from */

/* ---- blocks, segments, pools ---------------------------------------------- */
typedef struct tseg {       /* an expandable segment's address range */
    uint64_t base, size, page;
    struct tseg *next;
} tseg;

/* new_block sets each field: a field added here gets its value there too */
struct cp_torch_block {
    cp_rbn node;            /* first: the trees' nodes are blocks */
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
_Static_assert(sizeof(void *) != 8 || sizeof(cp_torch_block) == 128,
               "a field was added: give it a value in new_block");

typedef struct tpool {
    cp_rbn *blocks;         /* free mapped blocks by (stream, size, ptr) */
    cp_rbn *unmapped;       /* unmapped ranges by (stream, ptr) */
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

/* ---- blocks and the pools' orders ------------------------------------------- */
static inline cp_torch_block *blk_of(cp_rbn *n)
{
    return (cp_torch_block *)(void *)n;
}

static inline cp_torch_block *new_block(cp_torch *t)
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
    /* Field by field: a whole-struct initialiser compiles to rep stos, which
     * costs more here than all the rest of a split. */
    b->node.p = b->node.l = b->node.r = NULL;
    b->node.red = 0;
    b->ptr = b->size = b->requested = b->stream = 0;
    b->prev = b->next = b->pnext = NULL;
    b->seg = NULL;
    b->gc_base = 0;
    b->use = NULL;
    b->tok = NULL;
    b->events = 0;
    b->allocated = b->small = b->later = 0;
    b->mapped = 1;
    return b;
}

static inline void del_block(cp_torch *t, cp_torch_block *b)
{
    b->pnext = t->spare;
    t->spare = b;
}

/* (stream, size, ptr) order of the free blocks. */
static inline int less_size(const cp_torch_block *a, const cp_torch_block *b)
{
    if (a->stream != b->stream)
        return a->stream < b->stream;
    if (a->size != b->size)
        return a->size < b->size;
    return a->ptr < b->ptr;
}

static inline void blocks_insert(tpool *p, cp_torch_block *b)
{
    cp_rbn **link = &p->blocks, *parent = NULL;
    b->gc_base = p->searches;
    while (*link) {
        parent = *link;
        link = less_size(b, blk_of(parent)) ? &parent->l : &parent->r;
    }
    b->node.p = parent;
    b->node.l = b->node.r = NULL;
    *link = &b->node;
    cp_rb_fix_insert(&p->blocks, &b->node);
}

/* First block not below (stream, size, 0). */
static inline cp_torch_block *blocks_lower_bound(const tpool *p, uint64_t stream, uint64_t size)
{
    cp_rbn *n = p->blocks, *best = NULL;
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

static inline void unmapped_insert(tpool *p, cp_torch_block *b)
{
    cp_rbn **link = &p->unmapped, *parent = NULL;
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
    cp_rb_fix_insert(&p->unmapped, &b->node);
}

static inline cp_torch_block *unmapped_lower_bound(const tpool *p, uint64_t stream)
{
    cp_rbn *n = p->unmapped, *best = NULL;
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

static inline tpool *pool_of(cp_torch *t, const cp_torch_block *b)
{
    return b->small ? &t->small : &t->large;
}

static inline void cache_remove(cp_torch *t, cp_torch_block *b)
{
    tpool *p = pool_of(t, b);
    cp_rb_erase(b->mapped ? &p->blocks : &p->unmapped, &b->node);
}

static inline int is_split(const cp_torch_block *b)
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

static inline void set_reserved(cp_torch *t)
{
    t->base.reserved =
        (uint64_t)(t->st.reserved_bytes[1].current + t->st.reserved_bytes[2].current);
}

/* ---- across the files ---------------------------------------------------------- */
/* torch.c */
void cp_tk_free_block(cp_torch *t, cp_torch_block *b);
void cp_tk_free_common(cp_torch *t, cp_torch_block *b);
uint64_t cp_tk_try_merge(cp_torch *t, cp_torch_block *dst, cp_torch_block *src);
/* torch_segment.c */
cp_torch_block *cp_tk_alloc_block(cp_torch *t, tpool *p, uint64_t stream, uint64_t size,
                                  uint64_t alloc_size, int retry);
int cp_tk_release_available(cp_torch *t, tpool *p, uint64_t stream, uint64_t size);
void cp_tk_release_cached(cp_torch *t, uint64_t keep);
void cp_tk_garbage_collect(cp_torch *t);
/* torch_stream.c */
void cp_tk_process_events(cp_torch *t);
void cp_tk_settle_later(cp_torch *t);
void cp_tk_synchronize(cp_torch *t);
void cp_tk_make_pending(cp_torch *t, cp_torch_block *b);

#endif /* CUPOLA_TORCH_IMPL_H */
