/*
 * pool/heap.c: the block heap behind freelist, tlsf and caching (policy in
 * pool/heap.h), and the (size, address) treap two of them index with.
 */
#include "heap.h"

#include <stdlib.h>
#include <string.h>

/* ---- descriptors ---- */

cp_blk *cp_blk_refill(cp_heap *h)
{
    cp_blk_slab *sl = malloc(sizeof *sl);
    size_t i;
    if (!sl)
        return NULL;
    memset(sl, 0, sizeof *sl); /* destroy tells used from spare by size */
    sl->next = h->slabs;
    h->slabs = sl;
    for (i = 0; i < sizeof sl->blks / sizeof sl->blks[0]; i++) {
        sl->blks[i].r = h->spare;
        h->spare = &sl->blks[i];
    }
    return cp_blk_new(h);
}

/* ---- chunks ---- */

static int async_up(const cp_heap *h)
{
    return h->o.upstream == CP_UP_ASYNC;
}

/* Returns an entirely free chunk to the upstream.  cudaFree orders itself
 * after all device work; a stream-ordered free on the default stream does
 * not, so callers synchronize first for the async upstream. */
static void chunk_release(cp_heap *h, cp_blk *b)
{
    h->pol->remove(h, b);
    if (b->in_apart)
        cp_apart_unlink_from(&h->apart, b);
    cp_empty_unlink(h, b);
    cp_so_tag_release(&h->so, &b->tag);
    h->free_bytes -= b->size;
    h->base.reserved -= b->up_bytes;
    h->chunks--;
    cp_resource_free(h->up, (void *)(uintptr_t)b->up_ptr, (size_t)b->up_bytes, NULL);
    cp_blk_put(h, b);
}

static void settle(cp_heap *h);

static int release_empty(cp_heap *h, uint64_t keep)
{
    int n = 0;
    if (!h->empty || h->free_bytes <= keep)
        return 0;
    if (async_up(h) && cp_be->device_synchronize() != CP_OK)
        return 0;
    while (h->empty && h->free_bytes > keep) {
        chunk_release(h, h->empty);
        n++;
    }
    return n;
}

/* Before growing by want bytes: entirely free chunks are returned only as
 * far as needed to keep reserved within its peak so far (and within max).
 * Returning them all would cost the same peak but many more upstream calls
 * (cudaFree/cudaMalloc) in a loop whose steps repeat; returning none would
 * let cached chunks that do not fit the request raise the peak.  A nonzero
 * release_threshold keeps that many idle bytes cached whatever the peak
 * (UINT64_MAX: never return any, PyTorch's choice: no upstream calls once
 * warm, for a higher peak). */
static void make_room(cp_heap *h, uint64_t want, uint8_t pool, uint64_t sid)
{
    uint64_t res = h->base.reserved + h->base.fb_bytes;
    uint64_t cap = h->base.st.reserved_peak, idle = 0;
    uint64_t keep = h->o.release_threshold;
    int synced = 0, hard = 0;
    if (h->keep_chunks)
        return;
    if (h->o.max && h->o.max < cap) {
        cap = h->o.max;
        keep = 0; /* max is a hard limit: whatever is idle may go */
        hard = 1;
    }
    if (keep) {
        idle = h->idle_bytes;
        if (idle <= keep)
            return;
    }
    while (h->empty && res + want > cap && (!keep || idle > keep)) {
        cp_blk *b, *big = NULL;
        /* The largest first: fewest upstream calls for the room needed.
         * Only chunks whose last use is known done or ordered before this
         * request (its own stream): returning one with another stream's work
         * pending would make the upstream wait for the device, and hand the
         * same addresses straight back to this stream.  Under max, any. */
        for (b = h->empty; b; b = b->en)
            if ((!big || b->up_bytes > big->up_bytes) && (hard || !b->up_initial) &&
                (hard || b->tag.sid == sid || cp_so_settle(&h->so, &b->tag)))
                big = b;
        if (!big)
            return;
        if (async_up(h) && !synced) {
            if (cp_be->device_synchronize() != CP_OK)
                return;
            synced = 1;
        }
        res -= big->up_bytes;
        idle -= keep ? big->up_bytes : 0;
        if (big->pool != pool && big->size > h->gave_back[big->pool & 1])
            h->gave_back[big->pool & 1] = big->size;
        chunk_release(h, big);
    }
}

/* Whether a chunk for size bytes could not fit under max even with every
 * entirely free chunk returned: then returning them gains nothing and loses
 * the memory they hold (an `initial` reservation emptied by one request
 * larger than the pool could ever serve). */
static int beyond_max(const cp_heap *h, uint64_t size)
{
    uint64_t unit = h->chunk_unit ? h->chunk_unit : 1;
    uint64_t need = (size + unit - 1) / unit * unit;
    uint64_t pad = h->align > h->up_align ? h->align - h->up_align : 0;
    uint64_t res = h->base.reserved + h->base.fb_bytes;
    uint64_t kept = res > h->idle_bytes ? res - h->idle_bytes : 0;
    if (!h->o.max)
        return 0;
    return need < size || need + pad < need || kept + need + pad < kept ||
           kept + need + pad > h->o.max;
}

/* Takes a chunk of at least `size` bytes from the upstream; the new block
 * is free and in the index.  want is the preferred chunk size. */
static cp_status chunk_add(cp_heap *h, uint64_t size, uint64_t want, uint8_t pool,
                           cp_stream *s, cp_blk **out)
{
    cp_blk *b;
    void *p = NULL;
    cp_status st = CP_ERR_OOM;
    uint64_t pad = h->align > h->up_align ? h->align - h->up_align : 0;
    uint64_t res = h->base.reserved + h->base.fb_bytes;
    uint64_t max = h->o.max;
    /* What the upstream is asked for is a whole number of units (vmm: its
     * pages), also when a large request is retried at the request's size. */
    uint64_t unit = h->chunk_unit ? h->chunk_unit : 1;
    uint64_t need = (size + unit - 1) / unit * unit;

    if (need < size)
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes", (unsigned long long)size);
    if (want < need)
        want = need;
    if (max && h->keep_chunks) {
        /* Chunks are address space (vmm): max limits the pages mapped under
         * them, which the policy enforces page by page.  Here only a request
         * that could never fit is refused. */
        if (need + pad > max || need + pad < need)
            return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes would pass the pool's max "
                                "of %llu", (unsigned long long)need, (unsigned long long)max);
    } else if (max) {
        if (res + need + pad > max || res + need + pad < res)
            return cp_error_set(CP_ERR_OOM, "out of memory: %llu more bytes would pass the "
                                "pool's max of %llu (reserved %llu)",
                                (unsigned long long)need, (unsigned long long)max,
                                (unsigned long long)res);
        if (res + want + pad > max) {
            want = (max - res - pad) & ~(h->align - 1);
            want -= want % unit;
        }
        if (want < need)
            want = need;
    }
    b = cp_blk_new(h);
    if (!b)
        return cp_error_set(CP_ERR_OOM, "out of host memory for block descriptors");
    if (want > need) {
        st = cp_resource_alloc(h->up, (size_t)(want + pad), s, &p);
        if (st != CP_OK && st != CP_ERR_OOM) {
            cp_blk_put(h, b);
            return st;
        }
    }
    if (st != CP_OK) {
        want = need; /* the upstream may still have room for the request alone */
        st = cp_resource_alloc(h->up, (size_t)(want + pad), s, &p);
    }
    if (st != CP_OK) {
        cp_blk_put(h, b);
        return st;
    }
    b->prev = b->next = NULL;
    if (h->pol->chunk_added) {
        b->up_ptr = (uint64_t)(uintptr_t)p;
        b->up_bytes = want + pad;
        st = h->pol->chunk_added(h, b);
        if (st != CP_OK) {
            cp_resource_free(h->up, p, (size_t)(want + pad), NULL);
            cp_blk_put(h, b);
            return st;
        }
    }
    b->up_ptr = (uint64_t)(uintptr_t)p;
    b->up_bytes = want + pad;
    b->addr = (b->up_ptr + h->align - 1) & ~(h->align - 1);
    b->size = (b->up_ptr + b->up_bytes - b->addr) & ~(h->align - 1);
    b->is_free = 1;
    b->pool = pool;
    /* Fresh memory is idle, except cudaMallocAsync's, which is ordered on s
     * exactly as if s had just freed it. */
    if (async_up(h)) {
        cp_so_tag_free(&h->so, &b->tag, cp_so_sid(s), s);
    } else {
        b->tag.sid = CP_SO_ANY;
        b->tag.ev = NULL;
    }
    h->base.reserved += b->up_bytes;
    h->free_bytes += b->size;
    h->chunks++;
    h->pol->insert(h, b);
    cp_empty_push(h, b);
    *out = b;
    return CP_OK;
}

cp_status cp_heap_init(cp_heap *h, cp_resource *up, const cp_pool_opts *o,
                       const cp_heap_policy *pol)
{
    h->up = up;
    h->o = *o;
    h->pol = pol;
    h->align = o->alignment ? o->alignment : 256;
    if (h->up_align < cp_upstream_alignment(o->upstream))
        h->up_align = cp_upstream_alignment(o->upstream);
    cp_so_init(&h->so, o->reuse);
    if (cp_ptrmap_init(&h->live, 1024) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    if (o->initial) {
        cp_blk *b;
        uint8_t pool = 0;
        uint64_t size = pol->round(h, o->initial);
        cp_status st;
        pol->chunk_size(h, size, &pool);
        st = chunk_add(h, size, h->initial_want > size ? h->initial_want : size, pool, NULL, &b);
        if (st != CP_OK)
            return st;
        /* Reserved up front to be carved up: growth never hands it back
         * to make room (trim and max do). */
        b->up_initial = 1;
    }
    return CP_OK;
}

/* ---- alloc / free ---- */

/* Takes b off whichever apart list it is on: 1 the heap's, 2 the one being
 * worked through (*work). */
static void apart_drop(cp_heap *h, cp_blk **work, cp_blk *b)
{
    if (b->in_apart == 1)
        cp_apart_unlink_from(&h->apart, b);
    else if (b->in_apart == 2)
        cp_apart_unlink_from(work, b);
}

/* Before the pool grows: merges the blocks kept apart with the neighbours
 * they now may merge with (frees known complete: cp_so_settle, which asks a
 * stream with an unrecorded event to record it at its next operation).
 * Returns whether any merge happened. */
/* May free neighbours tagged a (left) and b (right) merge now, for a
 * request on stream sid?  Besides what streamorder allows: idle memory
 * (ANY) joins a block freed on the requesting stream itself, since that
 * stream is about to grow the pool otherwise. */
static int merge_for(cp_heap *h, cp_so_tag *a, cp_so_tag *b, uint64_t sid)
{
    cp_so_settle(&h->so, a);
    cp_so_settle(&h->so, b);
    if (a->sid == CP_SO_ANY && b->sid == sid) {
        cp_so_tag_release(&h->so, a);
        *a = *b;
        b->ev = NULL;
        return 1;
    }
    if (b->sid == CP_SO_ANY && a->sid == sid) {
        cp_so_tag_release(&h->so, b);
        return 1;
    }
    return cp_so_merge(&h->so, a, b);
}

static int coalesce_apart(cp_heap *h, uint64_t sid)
{
    cp_blk *work = h->apart, *b, *n;
    int merged_any = 0;
    h->apart = NULL;
    for (b = work; b; b = b->en)
        b->in_apart = 2;
    while ((b = work) != NULL) {
        int merged = 0;
        cp_apart_unlink_from(&work, b);
        if (!b->is_free)
            continue;
        /* leftwards first, then rightwards */
        while ((n = b->prev) && n->is_free && merge_for(h, &n->tag, &b->tag, sid)) {
            if (!merged)
                h->pol->remove(h, b);
            h->pol->remove(h, n);
            apart_drop(h, &work, n);
            n->size += b->size;
            n->next = b->next;
            if (b->next)
                b->next->prev = n;
            cp_blk_put(h, b);
            b = n;
            merged = 1;
        }
        while ((n = b->next) && n->is_free && merge_for(h, &b->tag, &n->tag, sid)) {
            if (!merged)
                h->pol->remove(h, b);
            h->pol->remove(h, n);
            apart_drop(h, &work, n);
            b->size += n->size;
            b->next = n->next;
            if (n->next)
                n->next->prev = b;
            cp_blk_put(h, n);
            merged = 1;
        }
        if (merged) {
            merged_any = 1;
            h->pol->insert(h, b);
        }
        if (!b->prev && !b->next) {
            if (!b->in_empty)
                cp_empty_push(h, b);
        } else if ((b->next && b->next->is_free) || (b->prev && b->prev->is_free)) {
            cp_apart_push(h, b);
        }
    }
    return merged_any;
}

cp_status cp_heap_grow(cp_heap *h, size_t bytes, uint64_t size, uint8_t pool, uint64_t sid,
                       cp_stream *s, cp_blk **out)
{
    uint64_t want;
    uint8_t cpool = pool;
    cp_status st;
    cp_blk *b = NULL;
    if (size < bytes)
        return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes", bytes);
    if (!h->o.grow)
        return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes do not fit in the pool "
                            "(reserved %llu, free %llu, grow=false)", bytes,
                            (unsigned long long)h->base.reserved,
                            (unsigned long long)h->free_bytes);
    if (h->apart && coalesce_apart(h, sid)) {
        b = h->big && size >= h->big ? cp_heap_find_whole(h, size, sid, s)
                                     : h->pol->find(h, size, pool, sid, s);
        if (b) {
            *out = b;
            return CP_OK;
        }
    }
    want = h->pol->chunk_size(h, size, &cpool);
    if (h->o.release_threshold && h->empty && h->big) {
        /* Idle chunks are kept cached: use them (any fit) before growing,
         * rather than hold them and grow anyway. */
        h->desperate = 1;
        b = h->pol->find(h, size, pool, sid, s);
        if (b) {
            *out = b;
            return CP_OK;
        }
        h->desperate = 0;
    }
    /* Returning idle chunks to stay within the peak pays off only if they
     * stay unneeded.  If the last growth returned a chunk of another
     * sub-pool (the caching pool's small and large segments) that would
     * have served this request, requests of the two sub-pools alternate:
     * each growth would return the segment the next one needs (two
     * upstream calls per turn, cudaFree synchronizing the device) for no
     * lower peak.  The second such growth in a row (a turn each way: one
     * could be chance) keeps what is idle and goes past the peak, once,
     * which holds both from then on.  (Within one sub-pool a chunk
     * is returned because it does not serve the request or is kept whole
     * for big ones, and returning it keeps the peak down: no change.)
     * Under max, room is made anyway. */
    if (h->gave_back[cpool & 1] < size)
        h->turns = 0;
    else if (h->turns < 2)
        h->turns++;
    if (h->turns == 2 &&
        (!h->o.max || h->base.reserved + h->base.fb_bytes + want <= h->o.max)) {
        h->gave_back[0] = h->gave_back[1] = 0;
        h->turns = 0;
    } else {
        h->gave_back[0] = h->gave_back[1] = 0;
        if (!beyond_max(h, size))
            make_room(h, want, cpool, sid);
    }
    st = chunk_add(h, size, want, cpool, s, &b);
    if (st == CP_ERR_OOM && h->big) {
        /* No more memory: any fit, in any free block, will do now (the
         * caller clears the flag once the block is handed out). */
        h->desperate = 1;
        b = h->pol->find(h, size, pool, sid, s);
        if (b)
            st = CP_OK;
        else
            h->desperate = 0;
    }
    if (st == CP_ERR_OOM && !b && !h->keep_chunks && (h->empty || h->so.multi) &&
        !beyond_max(h, size)) {
        /* Still nothing: the idle chunks (which serve no fit for this
         * request) go back to the upstream and the growth is tried once
         * more, as PyTorch frees its cached blocks and retries when
         * cudaMalloc fails.  A pool that keeps idle chunks (release_threshold)
         * so loses no request that returning them would have served.  After
         * several streams, settling first makes whole the chunks whose
         * frees are complete (as trim does).  Not when even that could not
         * fit under max (beyond_max). */
        if (h->so.multi)
            settle(h);
        if (release_empty(h, 0) > 0)
            st = chunk_add(h, size, want, cpool, s, &b);
    }
    *out = b;
    return st;
}

uint64_t cp_heap_chunk_for(const cp_heap *h, uint64_t size)
{
    uint64_t best = 0, k;
    double best_waste = 2.0;
    if (h->big && size >= h->big) {
        uint64_t c = (size + CP_HEAP_GRANULE - 1) & ~(CP_HEAP_GRANULE - 1);
        return c < size ? size : c;
    }
    for (k = 1; k <= 8; k++) {
        uint64_t need = k * size, c = (need + CP_HEAP_GRANULE - 1) & ~(CP_HEAP_GRANULE - 1);
        double waste;
        if (c < need)
            break;
        waste = (double)(c - need) / (double)c;
        if (waste <= 1.0 / 32)
            return c;
        if (waste < best_waste) {
            best_waste = waste;
            best = c;
        }
    }
    return best ? best : size;
}

cp_blk *cp_heap_find_whole(cp_heap *h, uint64_t size, uint64_t sid, cp_stream *s)
{
    cp_blk *b, *best = NULL;
    int n = 0, pass;
    /* First among chunks this stream may take as they are; only then ask
     * streamorder about the others, since asking may insert a stream wait. */
    for (pass = 0; pass < 2 && !best; pass++) {
        for (b = h->empty, n = 0; b && n < 64; b = b->en, n++) {
            int mine = b->tag.sid == sid || b->tag.sid == CP_SO_ANY;
            if (b->size < size || b->size - size > size / 32 || (best && b->size >= best->size))
                continue;
            if (pass == 0 ? mine : (!mine && cp_so_usable(&h->so, &b->tag, sid, s)))
                best = b;
            if (pass == 1 && best)
                break;
        }
    }
    return best;
}

cp_status cp_heap_bad_free(cp_heap *h, void *p, size_t bytes, cp_blk *b)
{
    if (!b)
        return cp_error_set(CP_ERR_INVALID, "free of %p: not a live block of this %s pool "
                            "(double free, or a block of another pool)", p, h->pol->kind);
    cp_ptrmap_put(&h->live, b->addr, b);
    return cp_error_set(CP_ERR_INVALID, "free of %p: size %zu is larger than the block "
                        "(%llu bytes)", p, bytes, (unsigned long long)b->size);
}

cp_status cp_heap_map_full(cp_heap *h, cp_blk *b)
{
    h->pol->insert(h, b); /* unsplit remainder stays apart: still consistent */
    if (!b->prev && !b->next)
        cp_empty_push(h, b);
    h->desperate = 0;
    return cp_error_set(CP_ERR_OOM, "out of host memory for the block map");
}

/* After multi-stream use, free neighbours of different streams stay apart
 * until their frees are known complete.  Settling re-tags what is complete
 * and merges what now may be, so that whole chunks appear for trim. */
static void settle(cp_heap *h)
{
    cp_blk_slab *sl;
    size_t i;
    /* everything mergeable is merged below: the apart list starts over */
    while (h->apart)
        cp_apart_unlink_from(&h->apart, h->apart);
    cp_so_sync(&h->so);
    for (sl = h->slabs; sl; sl = sl->next)
        for (i = 0; i < sizeof sl->blks / sizeof sl->blks[0]; i++)
            if (sl->blks[i].is_free)
                cp_so_settle(&h->so, &sl->blks[i].tag);
    for (sl = h->slabs; sl; sl = sl->next) {
        for (i = 0; i < sizeof sl->blks / sizeof sl->blks[0]; i++) {
            cp_blk *b = &sl->blks[i], *n;
            int merged = 0;
            if (!b->is_free)
                continue;
            while ((n = b->next) && n->is_free && cp_so_merge(&h->so, &b->tag, &n->tag)) {
                if (!merged)
                    h->pol->remove(h, b);
                merged = 1;
                h->pol->remove(h, n);
                b->size += n->size;
                b->next = n->next;
                if (n->next)
                    n->next->prev = b;
                cp_blk_put(h, n);
            }
            if (merged) {
                h->pol->insert(h, b);
                if (!b->prev && !b->next && !b->in_empty)
                    cp_empty_push(h, b);
            }
        }
    }
}

cp_status cp_heap_trim(cp_resource *r, size_t keep_bytes)
{
    cp_heap *h = (cp_heap *)r;
    if (h->so.multi)
        settle(h);
    /* A pool that may not grow keeps its chunks: it could never get them back. */
    if (h->o.grow && !h->keep_chunks)
        release_empty(h, keep_bytes);
    return CP_OK;
}

void cp_heap_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    cp_heap *h = (cp_heap *)r;
    /* (the upstream is not locked: the pool's lock covers every call to it) */
    *allocs = h->up->st.allocs;
    *frees = h->up->st.frees;
}

void cp_heap_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    cp_heap *h = (cp_heap *)r;
    *largest = h->pol->largest(h);
    *free_bytes = h->free_bytes;
}

void cp_heap_destroy(cp_resource *r)
{
    cp_heap *h = (cp_heap *)r;
    cp_blk_slab *sl;
    uint64_t i;
    int synced = 0;
    /* Every chunk is returned whole: walk the heads of the descriptors in
     * use (live or free) through the slabs. */
    for (sl = h->slabs; sl; sl = sl->next) {
        for (i = 0; i < sizeof sl->blks / sizeof sl->blks[0]; i++) {
            cp_blk *b = &sl->blks[i];
            if (b->up_bytes && !b->prev && b->size) {
                if (async_up(h) && !synced) {
                    cp_be->device_synchronize();
                    synced = 1;
                }
                cp_resource_free(h->up, (void *)(uintptr_t)b->up_ptr, (size_t)b->up_bytes,
                                 NULL);
            }
            if (b->is_free)
                cp_so_tag_release(&h->so, &b->tag);
        }
    }
    if (h->pol->fini)
        h->pol->fini(h);
    while (h->slabs) {
        sl = h->slabs->next;
        free(h->slabs);
        h->slabs = sl;
    }
    cp_so_fini(&h->so);
    cp_ptrmap_fini(&h->live);
    cp_resource_destroy(h->up);
    free(h);
}

/* ---- sorted segregated fit ---- */

static int key_less(uint64_t s1, uint64_t a1, uint64_t s2, uint64_t a2)
{
    return s1 < s2 || (s1 == s2 && a1 < a2);
}

void cp_sfit_insert(cp_sfit *x, cp_blk *b)
{
    unsigned fl, sl;
    cp_blk *prev = NULL, *n;
    cp_class_of(b->size >> x->shift, &fl, &sl);
    b->cls = (uint16_t)(fl * CP_SL_COUNT + sl);
    n = x->heads[fl][sl];
    while (n && key_less(n->size, n->addr, b->size, b->addr)) {
        prev = n;
        n = n->r;
    }
    b->l = prev;
    b->r = n;
    if (n)
        n->l = b;
    if (prev)
        prev->r = b;
    else
        x->heads[fl][sl] = b;
    x->fl_map |= UINT64_C(1) << fl;
    x->sl_map[fl] |= UINT64_C(1) << sl;
}

void cp_sfit_remove(cp_sfit *x, cp_blk *b)
{
    unsigned fl = b->cls / CP_SL_COUNT, sl = b->cls % CP_SL_COUNT;
    if (b->l)
        b->l->r = b->r;
    else
        x->heads[fl][sl] = b->r;
    if (b->r)
        b->r->l = b->l;
    if (!x->heads[fl][sl]) {
        x->sl_map[fl] &= ~(UINT64_C(1) << sl);
        if (!x->sl_map[fl])
            x->fl_map &= ~(UINT64_C(1) << fl);
    }
    b->l = b->r = NULL;
}

cp_blk *cp_sfit_find(cp_heap *h, cp_sfit *x, uint64_t size, uint64_t sid, cp_stream *s)
{
    unsigned fl, sl, passed = 0;
    uint64_t slm, flm;
    cp_blk *b;

    cp_class_of(size >> x->shift, &fl, &sl);
    for (b = x->heads[fl][sl]; b; b = b->r) {
        if (b->size < size)
            continue;
        if (!cp_heap_keep_whole(h, b, size) && cp_so_usable(&h->so, &b->tag, sid, s))
            return b;
        if (++passed >= 64)
            return NULL;
    }
    slm = sl + 1 < CP_SL_COUNT ? x->sl_map[fl] & (~UINT64_C(0) << (sl + 1)) : 0;
    for (;;) {
        if (!slm) {
            flm = fl + 1 < CP_FL_COUNT ? x->fl_map & (~UINT64_C(0) << (fl + 1)) : 0;
            if (!flm)
                return NULL;
            fl = (unsigned)__builtin_ctzll(flm);
            slm = x->sl_map[fl];
        }
        sl = (unsigned)__builtin_ctzll(slm);
        for (b = x->heads[fl][sl]; b; b = b->r) {
            if (!cp_heap_keep_whole(h, b, size) && cp_so_usable(&h->so, &b->tag, sid, s))
                return b;
            if (++passed >= 64)
                return NULL;
        }
        slm &= ~(UINT64_C(1) << sl);
    }
}

uint64_t cp_sfit_max(const cp_sfit *x)
{
    unsigned fl, sl;
    const cp_blk *b;
    if (!x->fl_map)
        return 0;
    fl = cp_log2_floor(x->fl_map);
    sl = cp_log2_floor(x->sl_map[fl]);
    for (b = x->heads[fl][sl]; b->r; b = b->r)
        ;
    return b->size; /* the list is sorted: its last block is the largest */
}
