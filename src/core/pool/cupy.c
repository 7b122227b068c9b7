/*
 * pool/cupy.c: CuPy's memory pool (cupy.cuda.MemoryPool, one
 * SingleDeviceMemoryPool per device; cupy/cuda/memory.pyx), modelled
 * exactly, over any cupola upstream.
 *
 * Exact for CuPy 14.1.0 to 14.2.0 (memory.pyx is the same file in both, and
 * in CuPy's main branch as read).  14.0.x kept each arena's free chunks in
 * Python sets binned by size (ties by set.pop()), not in one ordered index:
 * the model is not claimed for it.
 *
 * Policy, exactly (CuPy's, with its names):
 *  - malloc(size): mem_size = _round_size(size), the size rounded up to
 *    ALLOCATION_UNIT_SIZE (512 bytes).  size 0 never reaches the pool
 *    (CuPy hands out Memory(0)); cupola's pool API gives a request of 0 a
 *    512-byte chunk of its own, as every cupola pool gives every block an
 *    address.
 *  - One _Arena per stream identifier (the current stream's pointer; the
 *    pool API uses the cupola stream's id, the replay the log's `stream`).
 *    A chunk belongs to the arena it was made for and goes back to it when
 *    freed, whatever stream frees it: CuPy leaves ordering across streams
 *    to the program (a chunk freed while another stream still uses it may
 *    be handed out again on its own stream at once).
 *  - An arena's free chunks are one index ordered by (size, the _Chunk
 *    object's address).  get_chunk takes lower_bound((mem_size, 0)): the
 *    smallest free chunk that fits, and among chunks of that size the one
 *    whose Python object lies lowest in the host's memory.  cupola cannot
 *    know those addresses; it stands in the chunk's device address (lowest
 *    first), and with a recording (cp_cupy_malloc's want) takes the chunk
 *    CuPy took.
 *  - _Chunk.split always: a chunk larger than mem_size is cut at mem_size;
 *    the remainder (same cudaMalloc block, same arena) goes into the index
 *    without merging (insert_chunk(merge=False)).
 *  - free: the chunk goes into its arena's index merged with its free
 *    neighbours, the next ones first, then the previous ones
 *    (try_merge_chunk); neighbours are only ever chunks of the same
 *    cudaMalloc block (prev/next), so blocks never merge with each other.
 *  - A miss (no free chunk fits in the request's arena; other arenas are
 *    not looked at) is _try_malloc(mem_size):
 *      1. _try_block_total_bytes: with a limit (set_limit / CUPY_GPU_MEMORY_
 *         LIMIT; cupola's `max`), mem_size above the limit is
 *         OutOfMemoryError at once; total_bytes + mem_size above it
 *         calls free_all_blocks() and tries again, then gc.collect() and
 *         free_all_blocks() and tries again, then OutOfMemoryError.  The
 *         bytes are counted in total_bytes before cudaMalloc is called.
 *      2. cudaMalloc(mem_size) (the allocator's; cupola's upstream).  A
 *         refusal: free_all_blocks() and cudaMalloc again; refused again:
 *         gc.collect() (CuPy calls it twice), free_all_blocks(), cudaMalloc
 *         once more; refused again: total_bytes loses mem_size and
 *         OutOfMemoryError.
 *    After gc.collect() CuPy never searches the free lists again: memory
 *    the collection frees is reused only through free_all_blocks.
 *  - free_all_blocks(stream=None): for every arena (in creation order; one
 *    arena with a stream), in index order, every free chunk that was never
 *    split (no prev, no next: a whole cudaMalloc block) is cudaFree'd and
 *    leaves total_bytes; split free chunks stay.
 *  - Figures under CuPy's names: used_bytes (sum of the mem_size of chunks
 *    in use), total_bytes (bytes held from cudaMalloc, the blocked bytes of
 *    a cudaMalloc in flight included), free_bytes = total - used,
 *    n_free_blocks (entries of all indexes).  cupola's `reserved` is
 *    total_bytes; stats() adds device_allocs, device_frees,
 *    device_alloc_failures, free_all_blocks_calls, gc_rounds, ooms and
 *    tie_choices.
 *  - Beyond CuPy: trim(keep) is free_all_blocks() (keep is not a bound CuPy
 *    has: whole free blocks all go); `initial`, `grow = false` and
 *    `release_threshold` are refused (CuPy's pool has no such thing).
 */
#include "model.h"
#include "resource_impl.h"
#include "cupy.h"
#include "rbtree.h"

#include <stdlib.h>
#include <string.h>

#define UNIT 512u

typedef struct cupy_arena cupy_arena;

typedef struct cupy_chunk {
    cp_rbn node; /* first: a node is its chunk (the arena's index) */
    uint64_t ptr, size;
    struct cupy_chunk *prev, *next; /* neighbours in the same cudaMalloc block */
    cupy_arena *arena;
    int is_free;
} cupy_chunk;

struct cupy_arena {
    uint64_t id;
    cp_rbn *root; /* free chunks by (size, ptr) */
    uint64_t nfree;
};

struct cp_cupy {
    cp_resource base;
    cp_resource *up;
    cp_upstream_kind upk;
    uint64_t limit;            /* set_limit (0: none) */
    cupy_arena **arenas;       /* creation order (the dict's order) */
    size_t narenas, carenas;
    cupy_arena *last;          /* the arena found last */
    cp_ptrmap arena_map;       /* stream identifier + 1 -> arena */
    cupy_arena *arena_max;     /* the arena of identifier UINT64_MAX */
    cp_ptrmap live;            /* ptr -> chunk in use */
    uint64_t used, used_peak, total_peak, nfree;
    uint64_t whole_free;       /* bytes of free chunks that are whole blocks: what
                                  free_all_blocks() would give back now */
    uint64_t up_allocs, up_frees, up_fail, fab_calls, gc_rounds, ooms, ties;
    cupy_chunk *spare;
    /* recorded addresses (cp_cupy_use_recorded) */
    int rec_on, rec_take, rec_div, rec_end, rec_left;
    const uint64_t *rec_size, *rec_addr;
    size_t rec_n, rec_next, div_call;
    uint64_t div_model, div_log, own_next;
    cp_rbn *rec_blocks;        /* blocks handed out from the log, by address */
};

/* A block the pool holds at an address the log gave (the recorded
 * addresses): kept by address so that a recorded cudaMalloc overlapping one
 * the model still holds (CuPy had freed it) is seen, not only one at the
 * same start. */
typedef struct rec_block {
    cp_rbn node; /* first: a node is its block */
    uint64_t start, end;
} rec_block;

static const cp_resource_ops cupy_ops;

uint64_t cp_cupy_round(uint64_t bytes)
{
    /* _round_size; sizes within 511 of 2^64 stay out of reach of any
     * upstream, so they round down to a refusal rather than wrapping. */
    if (bytes > UINT64_MAX - (UNIT - 1))
        return UINT64_MAX & ~(uint64_t)(UNIT - 1);
    return (bytes + UNIT - 1) / UNIT * UNIT;
}

cp_cupy *cp_cupy_of(cp_resource *r)
{
    return r && r->ops == &cupy_ops ? (cp_cupy *)r : NULL;
}

static cupy_chunk *chunk_new(cp_cupy *m)
{
    cupy_chunk *c = m->spare;
    if (c) {
        m->spare = c->next;
        memset(c, 0, sizeof *c);
        return c;
    }
    return calloc(1, sizeof *c);
}

static void chunk_drop(cp_cupy *m, cupy_chunk *c)
{
    c->next = m->spare;
    m->spare = c;
}

/* ---- the index: (size, ptr) ------------------------------------------- */

static int before(const cupy_chunk *a, uint64_t size, uint64_t ptr)
{
    return a->size < size || (a->size == size && a->ptr < ptr);
}

static void idx_insert(cp_cupy *m, cupy_chunk *c)
{
    cupy_arena *a = c->arena;
    cp_rbn **link = &a->root, *parent = NULL;
    while (*link) {
        parent = *link;
        link = before((cupy_chunk *)parent, c->size, c->ptr) ? &parent->r : &parent->l;
    }
    c->node.l = c->node.r = NULL;
    c->node.p = parent;
    *link = &c->node;
    cp_rb_fix_insert(&a->root, &c->node);
    c->is_free = 1;
    a->nfree++;
    m->nfree++;
    /* no two free chunks are ever neighbours (a free merges with free
     * neighbours; a split's remainder borders the chunk taken and what
     * bordered the free chunk), so whether an indexed chunk is a whole
     * block does not change while it is indexed */
    if (!c->prev && !c->next)
        m->whole_free += c->size;
}

static void idx_erase(cp_cupy *m, cupy_chunk *c)
{
    cp_rb_erase(&c->arena->root, &c->node);
    c->is_free = 0;
    c->arena->nfree--;
    m->nfree--;
    if (!c->prev && !c->next)
        m->whole_free -= c->size;
}

/* lower_bound((size, ptr)) */
static cupy_chunk *idx_lower(cupy_arena *a, uint64_t size, uint64_t ptr)
{
    cp_rbn *n = a->root, *best = NULL;
    while (n) {
        if (before((cupy_chunk *)n, size, ptr)) {
            n = n->r;
        } else {
            best = n;
            n = n->l;
        }
    }
    return (cupy_chunk *)best;
}

/* _Arena.insert_chunk(merge=True): the next neighbours, then the previous
 * ones (try_merge_chunk); the leftmost chunk survives. */
static void insert_merged(cp_cupy *m, cupy_chunk *c)
{
    while (c->next && c->next->is_free) {
        cupy_chunk *n = c->next;
        idx_erase(m, n);
        c->size += n->size;
        c->next = n->next;
        if (c->next)
            c->next->prev = c;
        chunk_drop(m, n);
    }
    while (c->prev && c->prev->is_free) {
        cupy_chunk *p = c->prev;
        idx_erase(m, p);
        p->size += c->size;
        p->next = c->next;
        if (p->next)
            p->next->prev = p;
        chunk_drop(m, c);
        c = p;
    }
    idx_insert(m, c);
}

/* The arena of a stream identifier: the last one asked, else the map
 * (keys are id + 1; the one id that wraps to 0 has a field of its own), so
 * a log of many streams costs no scan per malloc. */
static cupy_arena *arena_of(cp_cupy *m, uint64_t id)
{
    cupy_arena *a;
    if (m->last && m->last->id == id)
        return m->last;
    a = id == UINT64_MAX ? m->arena_max : cp_ptrmap_get(&m->arena_map, id + 1);
    if (a)
        return m->last = a;
    if (m->narenas == m->carenas) {
        size_t nc = m->carenas ? 2 * m->carenas : 4;
        cupy_arena **na = realloc(m->arenas, nc * sizeof *na);
        if (!na)
            return NULL;
        m->arenas = na;
        m->carenas = nc;
    }
    a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->id = id;
    if (id == UINT64_MAX) {
        m->arena_max = a;
    } else if (cp_ptrmap_put(&m->arena_map, id + 1, a) != 0) {
        free(a);
        return NULL;
    }
    m->arenas[m->narenas++] = a;
    return m->last = a;
}

/* ---- the device ------------------------------------------------------- */

/* The held recorded block with the highest start below end, or NULL. */
static rec_block *rec_below(cp_cupy *m, uint64_t end)
{
    cp_rbn *n = m->rec_blocks, *best = NULL;
    while (n) {
        if (((rec_block *)n)->start < end) {
            best = n;
            n = n->r;
        } else {
            n = n->l;
        }
    }
    return (rec_block *)best;
}

/* Whether [a, a + size) meets a block the pool holds from the log (the
 * caller checked that the range does not wrap).  Held blocks never overlap
 * each other, so the one starting last below the range's end is the only
 * one that can reach into it. */
static int rec_overlaps(cp_cupy *m, uint64_t a, uint64_t size)
{
    rec_block *b = rec_below(m, a + size);
    return b && b->end > a;
}

static int rec_add(cp_cupy *m, uint64_t a, uint64_t size)
{
    cp_rbn **link = &m->rec_blocks, *parent = NULL;
    rec_block *b = malloc(sizeof *b);
    if (!b)
        return -1;
    b->start = a;
    b->end = a + size;
    while (*link) {
        parent = *link;
        link = ((rec_block *)parent)->start < a ? &parent->r : &parent->l;
    }
    b->node.l = b->node.r = NULL;
    b->node.p = parent;
    *link = &b->node;
    cp_rb_fix_insert(&m->rec_blocks, &b->node);
    return 0;
}

/* A block given back: the recorded one starting at a, if it is one (the
 * pool's own addresses, above the log's, are not kept). */
static void rec_drop(cp_cupy *m, uint64_t a)
{
    rec_block *b = rec_below(m, a + 1);
    if (b && b->start == a) {
        cp_rb_erase(&m->rec_blocks, &b->node);
        free(b);
    }
}

static void note_total(cp_cupy *m)
{
    if (m->base.reserved > m->total_peak)
        m->total_peak = m->base.reserved;
}

static void diverge(cp_cupy *m, uint64_t size)
{
    size_t k = m->rec_next;
    m->rec_div = 1;
    m->div_call = k;
    m->div_model = size;
    m->div_log = k < m->rec_n ? m->rec_size[k] : 0;
}

static cp_status upstream_malloc(cp_cupy *m, uint64_t size, uint64_t *out)
{
    cp_status st;
    void *p = NULL;
    if (size > SIZE_MAX) {
        m->up_fail++;
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes", (unsigned long long)size);
    }
    st = cp_resource_alloc(m->up, (size_t)size, NULL, &p);
    if (st == CP_OK) {
        m->up_allocs++;
        *out = (uint64_t)(uintptr_t)p;
    } else if (st == CP_ERR_OOM) {
        m->up_fail++;
    }
    return st;
}

/* One cudaMalloc of size bytes (already counted in total_bytes).  Beside a
 * log (cp_cupy_use_recorded), each call is held to the log's next alloc
 * line: with the recorded addresses it takes the line's answer, checking
 * only, it asks the upstream and compares. */
static cp_status device_malloc(cp_cupy *m, uint64_t size, uint64_t *out)
{
    cp_status st;
    if (m->rec_on && !m->rec_div && !m->rec_end && !m->rec_left) {
        size_t k = m->rec_next;
        if (k < m->rec_n && m->rec_size[k] == size) {
            uint64_t a = m->rec_addr[k];
            if (!m->rec_take) {
                st = upstream_malloc(m, size, out);
                if ((st == CP_OK) == (a != 0))
                    m->rec_next++;
                else if (st == CP_OK || st == CP_ERR_OOM)
                    diverge(m, size);
                return st;
            }
            if (a == 0) {
                m->rec_next++;
                m->up_fail++;
                return cp_error_set(CP_ERR_OOM, "out of memory: cudaMalloc(%llu) refused, "
                                    "as in the recording", (unsigned long long)size);
            }
            /* an address the model still holds (CuPy had freed that block,
             * the model not) cannot be this call's: a divergence */
            if (a <= UINT64_MAX - size && !rec_overlaps(m, a, size)) {
                if (rec_add(m, a, size) != 0)
                    return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's blocks");
                m->rec_next++;
                m->up_allocs++;
                *out = a;
                return CP_OK;
            }
        }
        diverge(m, size);
    }
    if (m->rec_take) {
        /* after a divergence: addresses of the pool's own, above the log's
         * (never reused); with none left below 2^64 the call is refused, as
         * a device out of addresses would refuse it, rather than wrap to
         * addresses the pool holds or to 0 */
        if (size > UINT64_MAX - m->own_next) {
            m->up_fail++;
            return cp_error_set(CP_ERR_OOM, "out of memory: no addresses left for cudaMalloc(%llu) "
                                "above the recording's", (unsigned long long)size);
        }
        *out = m->own_next;
        m->own_next += size;
        m->up_allocs++;
        return CP_OK;
    }
    return upstream_malloc(m, size, out);
}

static void device_free(cp_cupy *m, cupy_chunk *c)
{
    if (m->rec_take) {
        rec_drop(m, c->ptr);
        m->up_frees++;
        return;
    }
    if (cp_resource_free(m->up, (void *)(uintptr_t)c->ptr, (size_t)c->size, NULL) == CP_OK)
        m->up_frees++;
}

/* _Arena.free_all: whole free cudaMalloc blocks only, in index order. */
static uint64_t arena_free_all(cp_cupy *m, cupy_arena *a)
{
    uint64_t freed = 0;
    cp_rbn *n = a->root ? cp_rb_min(a->root) : NULL;
    while (n) {
        cupy_chunk *c = (cupy_chunk *)n;
        n = cp_rb_next(n);
        if (c->prev || c->next)
            continue;
        idx_erase(m, c);
        device_free(m, c);
        freed += c->size;
        chunk_drop(m, c);
    }
    return freed;
}

uint64_t cp_cupy_whole_free(const cp_cupy *m)
{
    return m->whole_free;
}

uint64_t cp_cupy_free_all_blocks(cp_cupy *m, int all, uint64_t arena)
{
    uint64_t freed = 0;
    size_t i;
    m->fab_calls++;
    for (i = 0; i < m->narenas; i++)
        if (all || m->arenas[i]->id == arena)
            freed += arena_free_all(m, m->arenas[i]);
    m->base.reserved -= freed;
    return freed;
}

/* _try_block_total_bytes */
static int block_total(cp_cupy *m, uint64_t size)
{
    uint64_t limit = m->limit ? m->limit : UINT64_MAX;
    if (m->base.reserved > limit - size)
        return 0;
    m->base.reserved += size;
    return 1;
}

static cp_status oom(cp_cupy *m, uint64_t size, const char *why)
{
    m->ooms++;
    return cp_error_set(CP_ERR_OOM, "out of memory: CuPy's pool cannot allocate %llu bytes "
                        "(total_bytes %llu, limit %llu): %s", (unsigned long long)size,
                        (unsigned long long)m->base.reserved, (unsigned long long)m->limit, why);
}

static void gc_round(cp_cupy *m, cp_cupy_gc_fn gc, void *ud)
{
    m->gc_rounds++;
    if (gc)
        gc(ud);
}

/* _try_malloc */
static cp_status try_malloc(cp_cupy *m, uint64_t size, cp_cupy_gc_fn gc, void *ud, uint64_t *out)
{
    cp_status st;
    if (m->limit && size > m->limit)
        return oom(m, size, "the request is above the limit");
    if (!block_total(m, size)) {
        cp_cupy_free_all_blocks(m, 1, 0);
        if (!block_total(m, size)) {
            gc_round(m, gc, ud);
            cp_cupy_free_all_blocks(m, 1, 0);
            if (!block_total(m, size))
                return oom(m, size, "the limit is reached");
        }
    }
    st = device_malloc(m, size, out);
    if (st == CP_ERR_OOM) {
        cp_cupy_free_all_blocks(m, 1, 0);
        st = device_malloc(m, size, out);
        if (st == CP_ERR_OOM) {
            gc_round(m, gc, ud);
            cp_cupy_free_all_blocks(m, 1, 0);
            st = device_malloc(m, size, out);
        }
    }
    if (st != CP_OK) {
        m->base.reserved -= size;
        return st == CP_ERR_OOM ? oom(m, size, "cudaMalloc refused it") : st;
    }
    /* the peak of the bytes held: a refused cudaMalloc's blocked bytes never were */
    note_total(m);
    return CP_OK;
}

cp_status cp_cupy_malloc(cp_cupy *m, uint64_t size, uint64_t arena, uint64_t want,
                         cp_cupy_gc_fn gc, void *gc_ud, uint64_t *out)
{
    cupy_arena *a = arena_of(m, arena);
    cupy_chunk *c;
    cp_status st;
    if (!a)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's arenas");
    c = idx_lower(a, size, 0);
    if (c) {
        cp_rbn *nx = cp_rb_next(&c->node);
        if (nx && ((cupy_chunk *)nx)->size == c->size) {
            /* equal chunks: CuPy's choice is by a Python object's address */
            m->ties++;
            if (want && want != c->ptr) {
                cupy_chunk *w = idx_lower(a, c->size, want);
                if (w && w->size == c->size && w->ptr == want)
                    c = w;
            }
        }
        idx_erase(m, c);
        if (c->size > size) {
            cupy_chunk *rem = chunk_new(m);
            if (!rem) {
                idx_insert(m, c);
                return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's chunks");
            }
            rem->ptr = c->ptr + size;
            rem->size = c->size - size;
            rem->arena = a;
            rem->prev = c;
            rem->next = c->next;
            if (rem->next)
                rem->next->prev = rem;
            c->next = rem;
            c->size = size;
            idx_insert(m, rem); /* merge=False */
        }
    } else {
        uint64_t p;
        c = chunk_new(m);
        if (!c)
            return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's chunks");
        st = try_malloc(m, size, gc, gc_ud, &p);
        if (st != CP_OK) {
            chunk_drop(m, c);
            return st;
        }
        c->ptr = p;
        c->size = size;
        c->arena = a;
    }
    if (cp_ptrmap_put(&m->live, c->ptr, c) != 0) {
        insert_merged(m, c);
        return cp_error_set(CP_ERR_OOM, "out of host memory for the live chunks");
    }
    m->used += size;
    if (m->used > m->used_peak)
        m->used_peak = m->used;
    *out = c->ptr;
    return CP_OK;
}

cp_status cp_cupy_free(cp_cupy *m, uint64_t ptr)
{
    cupy_chunk *c = ptr ? cp_ptrmap_del(&m->live, ptr) : NULL;
    if (!c)
        return cp_error_set(CP_ERR_INVALID, "free of 0x%llx, which is not a live chunk of this "
                            "cupy pool", (unsigned long long)ptr);
    m->used -= c->size;
    insert_merged(m, c);
    return CP_OK;
}

void cp_cupy_get_stats(cp_cupy *m, cp_cupy_stats *o)
{
    memset(o, 0, sizeof *o);
    o->used_bytes = m->used;
    o->total_bytes = m->base.reserved;
    o->free_bytes = m->base.reserved - m->used;
    o->n_free_blocks = m->nfree;
    o->total_bytes_peak = m->total_peak;
    o->used_bytes_peak = m->used_peak;
    o->whole_free_bytes = m->whole_free;
    o->device_allocs = m->up_allocs;
    o->device_frees = m->up_frees;
    o->device_alloc_failures = m->up_fail;
    o->free_all_blocks_calls = m->fab_calls;
    o->gc_rounds = m->gc_rounds;
    o->ooms = m->ooms;
    o->tie_choices = m->ties;
}

cp_status cp_cupy_use_recorded(cp_cupy *m, const uint64_t *size, const uint64_t *addr, size_t n,
                               int take)
{
    size_t i;
    uint64_t top = 0;
    if (take && m->upk != CP_UP_VIRTUAL)
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a cupy pool over the "
                            "\"virtual\" upstream (the device gives its own addresses)");
    if (m->live.count || m->base.reserved) {
        if (!take)
            return CP_OK; /* a used pool: nothing to hold its calls to */
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a fresh cupy pool "
                            "(this one holds %llu bytes)", (unsigned long long)m->base.reserved);
    }
    for (i = 0; i < n; i++)
        if (addr[i] && addr[i] + size[i] > top && addr[i] + size[i] >= addr[i])
            top = addr[i] + size[i];
    /* the pool's own addresses start at the next GiB above the log's */
    m->own_next = top >= UINT64_MAX - (UINT64_C(1) << 31) ? UINT64_MAX : ((top >> 30) + 1) << 30;
    m->rec_on = 1;
    m->rec_take = take;
    m->rec_div = 0;
    m->rec_end = 0;
    m->rec_left = 0;
    m->rec_size = size;
    m->rec_addr = addr;
    m->rec_n = n;
    m->rec_next = 0;
    return CP_OK;
}

int cp_cupy_divergence(cp_cupy *m, size_t *call, uint64_t *model_size, uint64_t *log_size)
{
    *call = m->div_call;
    *model_size = m->div_model;
    *log_size = m->div_log;
    return m->rec_div;
}

size_t cp_cupy_recorded_used(cp_cupy *m)
{
    return m->rec_next;
}

void cp_cupy_leave_recorded(cp_cupy *m)
{
    if (m->rec_on)
        m->rec_left = 1;
}

int cp_cupy_end_recorded(cp_cupy *m)
{
    int was = m->rec_on;
    /* calls the log has and the model did not make (not counted once the
     * replay let go of the log: it compared no more) */
    if (m->rec_on && !m->rec_div && !m->rec_left && m->rec_next < m->rec_n)
        diverge(m, 0);
    /* no longer held to the log (its arrays go with the trace); with the
     * recorded addresses the pool keeps making its own, above the log's */
    if (m->rec_on && !m->rec_take)
        m->rec_on = 0;
    m->rec_end = 1;
    return was;
}

/* ---- the resource ----------------------------------------------------- */

static uint64_t sid_of(cp_stream *s)
{
    return s && cp_be ? cp_be->stream_id(s) : 0;
}

static cp_status cupy_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cp_cupy *m = (cp_cupy *)r;
    uint64_t p = 0;
    cp_status st;
    /* within 511 bytes of 2^64 no 512-byte multiple holds the request */
    if ((uint64_t)bytes > UINT64_MAX - (UNIT - 1))
        return oom(m, (uint64_t)bytes, "no 512-byte multiple holds the request");
    st = cp_cupy_malloc(m, cp_cupy_round(bytes ? bytes : 1), sid_of(s), 0, NULL, NULL, &p);
    if (st == CP_OK)
        *out = (void *)(uintptr_t)p;
    return st;
}

static cp_status cupy_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    (void)bytes;
    (void)s;
    return cp_cupy_free((cp_cupy *)r, (uint64_t)(uintptr_t)p);
}

static cp_status cupy_trim(cp_resource *r, size_t keep)
{
    (void)keep;
    cp_cupy_free_all_blocks((cp_cupy *)r, 1, 0);
    return CP_OK;
}

static void cupy_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    cp_cupy *m = (cp_cupy *)r;
    size_t i;
    *largest = 0;
    for (i = 0; i < m->narenas; i++) {
        cp_rbn *n = m->arenas[i]->root;
        if (n && ((cupy_chunk *)cp_rb_max(n))->size > *largest)
            *largest = ((cupy_chunk *)cp_rb_max(n))->size;
    }
    *free_bytes = m->base.reserved - m->used;
}

static void cupy_extra(cp_resource *r, cp_stats *out)
{
    cp_cupy_stats s;
    const struct {
        const char *name;
        uint64_t v;
    } *f, fs[] = {
        {"used_bytes", 0},      {"total_bytes", 0},   {"free_bytes", 0},
        {"n_free_blocks", 0},   {"device_alloc_failures", 0}, {"free_all_blocks_calls", 0},
        {"gc_rounds", 0},       {"ooms", 0},          {"tie_choices", 0},
    };
    uint64_t v[9];
    size_t i;
    cp_cupy_get_stats((cp_cupy *)r, &s);
    v[0] = s.used_bytes;
    v[1] = s.total_bytes;
    v[2] = s.free_bytes;
    v[3] = s.n_free_blocks;
    v[4] = s.device_alloc_failures;
    v[5] = s.free_all_blocks_calls;
    v[6] = s.gc_rounds;
    v[7] = s.ooms;
    v[8] = s.tie_choices;
    for (i = 0; i < 9 && out->nextra < CP_STATS_EXTRA; i++) {
        f = &fs[i];
        out->extra[out->nextra].name = f->name;
        out->extra[out->nextra++].value = v[i];
    }
}

static void cupy_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    cp_cupy *m = (cp_cupy *)r;
    *allocs = m->up_allocs;
    *frees = m->up_frees;
}

static void cupy_destroy(cp_resource *r)
{
    cp_cupy *m = (cp_cupy *)r;
    size_t i;
    cupy_chunk *c;
    /* live chunks: the caller promised none; give them back all the same */
    for (i = 0; m->live.slots && i <= m->live.mask; i++) {
        if (m->live.slots[i].key) {
            c = m->live.slots[i].val;
            m->used -= c->size;
            insert_merged(m, c);
        }
    }
    cp_ptrmap_fini(&m->live);
    m->live.count = 0;
    for (i = 0; i < m->narenas; i++) {
        cupy_arena *a = m->arenas[i];
        cp_rbn *n;
        /* after the merges every chunk of a block is one free chunk */
        while (a->root) {
            n = cp_rb_min(a->root);
            c = (cupy_chunk *)n;
            idx_erase(m, c);
            if (!c->prev && !c->next)
                device_free(m, c);
            chunk_drop(m, c);
        }
        free(a);
    }
    free(m->arenas);
    cp_ptrmap_fini(&m->arena_map);
    while (m->rec_blocks) {
        cp_rbn *n = m->rec_blocks;
        cp_rb_erase(&m->rec_blocks, n);
        free(n);
    }
    while ((c = m->spare) != NULL) {
        m->spare = c->next;
        free(c);
    }
    cp_resource_destroy(m->up);
    free(m);
}

static const cp_resource_ops cupy_ops = {
    .kind = "cupy",
    .alloc = cupy_alloc,
    .free = cupy_free,
    .trim = cupy_trim,
    .free_info = cupy_free_info,
    .destroy = cupy_destroy,
    .extra_stats = cupy_extra,
    .device_calls = cupy_device_calls,
};

static cp_status cupy_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    cp_cupy *m;
    cp_status st = CP_OK;
    *out = NULL;
    if (o->initial)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cupy': option 'initial' is not supported "
                          "(CuPy's pool reserves nothing at creation), not %llu",
                          (unsigned long long)o->initial);
    else if (!o->grow)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cupy': option 'grow' = false is not supported "
                          "(CuPy's pool calls cudaMalloc for what it lacks; set max, its "
                          "set_limit)");
    else if (o->release_threshold)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cupy': option 'release_threshold' is not "
                          "supported (CuPy's pool keeps every block until free_all_blocks), "
                          "not %llu", (unsigned long long)o->release_threshold);
    else if (o->alignment > UNIT || o->alignment > cp_upstream_alignment(o->upstream))
        st = cp_error_set(CP_ERR_INVALID, "kind 'cupy': option 'alignment' = %llu is more than "
                          "CuPy's 512-byte unit or the %s upstream's own alignment",
                          (unsigned long long)o->alignment, cp_upstream_name(o->upstream));
    if (st != CP_OK) {
        cp_resource_destroy(up);
        return st;
    }
    m = calloc(1, sizeof *m);
    if (!m || cp_ptrmap_init(&m->live, 64) != 0 || cp_ptrmap_init(&m->arena_map, 16) != 0) {
        if (m)
            cp_ptrmap_fini(&m->live);
        free(m);
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&m->base, &cupy_ops);
    m->up = up;
    m->upk = o->upstream;
    m->limit = o->max;
    *out = &m->base;
    return CP_OK;
}

/* The registry's row (model.h): CuPy's model decides nothing by the
 * recording's time, and replays a CuPy log's own addresses. */
const cp_model cp_cupy_model = {
    .name = "cupy",
    .create = cupy_create,
    .traits = CP_MODEL_OWN_CLOCK | CP_MODEL_RECORDED,
};
