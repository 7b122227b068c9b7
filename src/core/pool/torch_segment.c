/*
 * pool/torch_segment.c: the torch model's segments (pool/torch.c states the
 * policy): the device's calls, answered with the recording's addresses while
 * the model's calls match PyTorch's; new segments (cudaMalloc, or pages
 * mapped into an expandable segment's range); releasing cached segments and
 * unmapping free pages (empty_cache, the retry under a limit, garbage
 * collection).
 */
#include "torch_impl.h"

#include <string.h>

/* ---- the device, with recorded addresses ---------------------------------- */
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

/* ---- releasing ------------------------------------------------------------------ */
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
    cp_rb_erase(&pool_of(t, b)->blocks, &b->node);
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
    cp_rb_erase(&p->blocks, &b->node);
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
    cp_tk_try_merge(t, b, b->prev);
    cp_tk_try_merge(t, b, b->next);
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
    cp_rb_erase(&pool_of(t, b)->unmapped, &b->node);
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
    cp_rbn *n = cp_rb_min(p->blocks);
    while (n) {
        cp_rbn *nx = cp_rb_next(n);
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

/* ---- new segments -------------------------------------------------------------- */
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
    uint64_t page = p->small ? SMALL_BUFFER : t->conf.large_segment_size, n, addr;
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
            cp_rbn *nx = cp_rb_next(&u->node);
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
    cp_rb_erase(&p->unmapped, &b->node);
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
    cp_tk_try_merge(t, b, b->prev);
    cp_tk_try_merge(t, b, b->next);
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
    cp_rb_erase(&p->blocks, &c->node);
    return c;
}

/* A new segment for the request (alloc_block); NULL when refused. */
cp_torch_block *cp_tk_alloc_block(cp_torch *t, tpool *p, uint64_t stream, uint64_t size,
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
int cp_tk_release_available(cp_torch *t, tpool *p, uint64_t stream, uint64_t size)
{
    uint64_t key = size < t->conf.max_split_size ? t->conf.max_split_size : size, released = 0;
    cp_torch_block *b;
    cp_rbn *n;
    if (t->conf.max_split_size == CP_TORCH_NO_SPLIT_LIMIT)
        return 0;
    b = blocks_lower_bound(p, stream, key);
    if (b && b->stream == stream && !b->seg) {
        if (!is_split(b)) /* (never split: blocks this large are not) */
            release_block(t, b);
        return 1;
    }
    n = b ? cp_rb_prev(&b->node) : cp_rb_max(p->blocks);
    while (n && released < key) {
        cp_rbn *pv;
        b = blk_of(n);
        if (b->size < t->conf.max_split_size || b->stream != stream)
            break;
        pv = cp_rb_prev(n);
        if (!b->seg && !is_split(b)) {
            released += b->size;
            release_block(t, b);
        }
        n = pv;
    }
    return released >= key;
}

/* Releases every cached block it can (release_cached_blocks). */
void cp_tk_release_cached(cp_torch *t, uint64_t keep)
{
    cp_tk_synchronize(t);
    release_blocks(t, &t->large, keep);
    release_blocks(t, &t->small, keep);
}

void cp_tk_garbage_collect(cp_torch *t)
{
    uint64_t threshold = (uint64_t)(t->conf.gc_threshold * (double)t->limit);
    uint64_t target, reclaimed = 0, total_age = 0;
    int64_t count = 0;
    int freed = 1;
    cp_rbn *n;
    if (t->total <= threshold)
        return;
    target = t->total - threshold;
    for (n = cp_rb_min(t->large.blocks); n; n = cp_rb_next(n))
        if (!is_split(blk_of(n))) {
            total_age += (uint64_t)(t->large.searches - blk_of(n)->gc_base);
            count++;
        }
    if (!count)
        return;
    while (reclaimed < target && freed && count > 0) {
        double age_threshold = (double)total_age / (double)count;
        freed = 0;
        n = cp_rb_min(t->large.blocks);
        while (n) {
            cp_rbn *nx = cp_rb_next(n);
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
