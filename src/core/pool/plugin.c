/*
 * pool/plugin.c: an allocator of the user's, loaded from a shared object
 * that exports a `const cupola_allocator` (<cupola/allocator.h>), as a
 * cp_resource like the built-in pools.
 *
 * Policy, exactly (cupola's part; where blocks come from is the plugin's):
 *  - Loading: dlopen(path, RTLD_NOW | RTLD_LOCAL), dlsym(symbol).  Refused
 *    with an error: a missing library or symbol, a symbol that is not a data
 *    object of at least the version-1 size, a version other than
 *    CUPOLA_ALLOCATOR_VERSION, a NULL create/destroy/allocate/deallocate, and
 *    create returning NULL.  Trailing (optional) fields are read only when the
 *    exported object is large enough to hold them (its ELF symbol size).
 *  - The upstream the plugin is given calls the pool's upstream resource
 *    (device, async, managed, pinned, virtual).  reserved is what the plugin
 *    holds through it; `max` refuses (NULL) a call that would pass it, and
 *    grow = false refuses every call after create.  Each upstream block is
 *    remembered in a sorted array of intervals, so a deallocate of something
 *    the upstream never gave (or not at its start) is ignored instead of
 *    reaching cudaFree/free; one that would give back memory under a block
 *    still live or held is kept by cupola (marked given back: no new block
 *    may lie in it) and freed at trim once nothing lies in it, or at destroy.
 *    Whatever the plugin still holds after destroy is given back by cupola.
 *  - Every block the plugin returns is checked before it is handed out, in
 *    this order (binary searches, O(log n) in the blocks and in the upstream
 *    blocks): it must overlap no block that is live or whose free is held,
 *    and lie entirely inside one upstream block the plugin holds and has not
 *    given back (with the virtual upstream, its address range; the upstream
 *    block last added or found is tried before the search).  A block that
 *    fails either is not given back to the plugin: cupola cannot tell what
 *    the plugin's deallocate would write through an address outside its
 *    memory, or release under the live block it overlaps; it stays with the
 *    plugin until destroy.  The request fails with an error naming the plugin
 *    and the block; cupola's own state is unchanged.
 *  - Alignment: a block the plugin returns that is not aligned to the pool's
 *    alignment A is given back, and cupola asks again for the bytes plus
 *    A - a, where a (at first A) is the plugin's natural alignment, lowered to
 *    the lowest set bit of each misaligned address seen; the first A-aligned
 *    address inside the block is handed out, the plugin's address and size
 *    kept in the block's record for the free.  From then on every request is
 *    padded at once (a can only fall, so at most log2(A) such retries over the
 *    pool's life).  A plugin whose blocks are aligned is asked for exactly the
 *    bytes requested and pays nothing; used counts the bytes requested.
 *  - NULL from allocate is out of memory, after one retry once the frees
 *    cupola holds (below) have been waited for and given back.
 *  - Stream order (streamorder.h), unless the plugin sets
 *    CUPOLA_ALLOCATOR_STREAM_ORDERED: while the pool has seen one stream,
 *    frees go to the plugin at once (reuse on the same stream is ordered by
 *    the stream).  The first operation on a second stream synchronizes the
 *    device once if any such free happened, since the plugin may hand those
 *    blocks to the new stream.  From then on a free records an event and is
 *    held by cupola: a later request of the same size takes a held block
 *    when the pool's `reuse` policy allows it on the request's stream
 *    (cp_so_usable: same stream, completed event, or a wait under "wait"),
 *    without a round trip through the plugin; otherwise the block goes back
 *    to the plugin once its event has completed (checked, never waited for,
 *    at each allocation, at most 64 held blocks a time), at trim, and before
 *    out of memory is reported.  So the plugin only ever sees blocks that
 *    are safe on every stream.
 *  - The plugin is called with the pool's lock held: it need not be
 *    thread-safe.  largest_free and free_bytes come from its optional stats
 *    hook (0 without one, so fragmentation reads 0).
 */
#include "model.h"
#include "plugin.h"
#include "resource_impl.h"
#include "streamorder.h"

#include <cupola/allocator.h>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_MAX 64

/* A block handed out.  Blocks never overlap in [raw, raw + rsize), and addr
 * lies inside that range, so the array sorted by raw is sorted by addr too. */
typedef struct pl_blk {
    uint64_t addr;  /* what cupola handed out: raw rounded up to the alignment */
    uint64_t size;  /* the bytes requested (>= 1) */
    uint64_t raw;   /* what the plugin returned */
    uint64_t rsize; /* the bytes the plugin was asked for (size, or padded) */
    int held;       /* freed by the user, the free held by the stream-order layer */
} pl_blk;

typedef struct pl_held {
    uint64_t addr;
    uint64_t size;
    uint64_t raw, rsize;
    cp_so_tag tag;
} pl_held;

/* An upstream block the plugin holds. */
typedef struct pl_up {
    uint64_t addr;
    uint64_t size;
    int gone; /* the plugin gave it back while a block lay in it: kept by cupola */
} pl_up;

typedef struct plugin plugin;

typedef struct pl_upstream {
    cupola_upstream pub; /* first: the plugin is given &pub */
    plugin *pl;
} pl_upstream;

struct plugin {
    cp_resource base;
    cp_resource *up;
    pl_upstream upw;
    void *dl;
    const cupola_allocator *a;
    void *state;
    unsigned flags;
    void (*stats)(void *state, size_t *largest_free, size_t *free_bytes);
    uint64_t align;
    uint64_t natural;   /* the plugin's alignment as seen so far (<= align) */
    uint64_t max;
    int grow, created;
    int async_up;       /* the upstream frees stream-ordered (cudaFreeAsync) */
    cp_stream *cur;     /* the stream of the operation in progress */
    pl_up *ups;         /* upstream blocks the plugin holds, sorted by address */
    size_t nup, cup;
    size_t up_hint;     /* 1 + the index of the upstream block last added or found; 0: none */
    pl_blk *blk;        /* live and held blocks, sorted by address */
    size_t nblk, cblk;
    pl_held *held;      /* held frees, oldest first */
    size_t nheld, cheld;
    cp_so so;
    int unsynced;       /* a single-stream free went to the plugin at once */
    char name[64];
};

/* ---- the upstream, as the plugin sees it ---------------------------------- */

static cp_stream *stream_of(plugin *pl, void *native)
{
    /* The plugin can only pass back a handle it was given: the current
     * operation's stream; anything else means the default stream. */
    if (pl->cur && cp_be && cp_be->stream_native && cp_be->stream_native(pl->cur) == native)
        return pl->cur;
    return NULL;
}

/* The index of the first of n records, stride bytes apart and sorted by the
 * uint64_t at offset off in each, whose key is >= key.  The last record is
 * tried first: upstreams and plugins mostly hand out rising addresses, so
 * an insertion is mostly an append, found without a search. */
static size_t lower_bound(const void *base, size_t n, size_t stride, size_t off, uint64_t key)
{
    const char *b = base;
    size_t lo = 0, hi = n;
#define KEY_AT(i) (*(const uint64_t *)(const void *)(b + (i) * stride + off))
    if (n == 0 || KEY_AT(n - 1) < key)
        return n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (KEY_AT(mid) < key)
            lo = mid + 1;
        else
            hi = mid;
    }
#undef KEY_AT
    return lo;
}

/* The index of the first upstream block whose address is >= addr. */
static size_t up_lower(const plugin *pl, uint64_t addr)
{
    return lower_bound(pl->ups, pl->nup, sizeof *pl->ups, offsetof(pl_up, addr), addr);
}

static int up_holds(const pl_up *u, uint64_t addr, uint64_t size)
{
    return addr >= u->addr && addr - u->addr <= u->size && size <= u->size - (addr - u->addr);
}

/* The upstream block that holds [addr, addr + size) entirely, or NULL.  The
 * block last added or found is tried first: a plugin that takes an upstream
 * block per request, or carves several from its newest chunk, costs no search. */
static const pl_up *up_holding(plugin *pl, uint64_t addr, uint64_t size)
{
    size_t i;
    if (pl->up_hint && up_holds(&pl->ups[pl->up_hint - 1], addr, size))
        return &pl->ups[pl->up_hint - 1];
    i = up_lower(pl, addr + 1); /* the first block starting past addr */
    if (i == 0 || !up_holds(&pl->ups[i - 1], addr, size))
        return NULL;
    pl->up_hint = i;
    return &pl->ups[i - 1];
}

static void up_free_at(plugin *pl, size_t i, cp_stream *s)
{
    pl_up u = pl->ups[i];
    if (i + 1 < pl->nup) /* mostly the end: no call */
        memmove(&pl->ups[i], &pl->ups[i + 1], (pl->nup - i - 1) * sizeof *pl->ups);
    pl->nup--;
    pl->up_hint = 0;
    cp_resource_free(pl->up, (void *)(uintptr_t)u.addr, (size_t)u.size, s);
    pl->base.reserved -= u.size;
}

static const pl_blk *blk_overlap(const plugin *pl, uint64_t raw, uint64_t rsize);

static void *up_allocate(cupola_upstream *self, size_t bytes, void *stream)
{
    plugin *pl = self ? ((pl_upstream *)self)->pl : NULL;
    void *p = NULL;
    uint64_t a;
    size_t i;
    if (!pl || bytes == 0)
        return NULL;
    if (pl->created && !pl->grow)
        return NULL;
    if (pl->max && (bytes > pl->max || pl->base.reserved + pl->base.fb_bytes > pl->max - bytes))
        return NULL;
    if (pl->nup == pl->cup) { /* room first, so that nothing can fail after the upstream */
        size_t n = pl->cup ? pl->cup * 2 : 16;
        pl_up *v = realloc(pl->ups, n * sizeof *v);
        if (!v)
            return NULL;
        pl->ups = v;
        pl->cup = n;
    }
    if (cp_resource_alloc(pl->up, bytes, stream_of(pl, stream), &p) != CP_OK)
        return NULL;
    a = (uint64_t)(uintptr_t)p;
    i = up_lower(pl, a);
    if (i < pl->nup) /* mostly the end: no call */
        memmove(&pl->ups[i + 1], &pl->ups[i], (pl->nup - i) * sizeof *pl->ups);
    pl->ups[i].addr = a;
    pl->ups[i].size = bytes;
    pl->ups[i].gone = 0;
    pl->nup++;
    pl->up_hint = i + 1;
    pl->base.reserved += bytes;
    return p;
}

static void up_deallocate(cupola_upstream *self, void *ptr, size_t bytes, void *stream)
{
    plugin *pl = self ? ((pl_upstream *)self)->pl : NULL;
    uint64_t a = (uint64_t)(uintptr_t)ptr;
    size_t i;
    (void)bytes; /* the size remembered is the one that counts */
    if (!pl || !ptr)
        return;
    i = up_lower(pl, a);
    if (i == pl->nup || pl->ups[i].addr != a || pl->ups[i].gone)
        return; /* never came from the upstream (or given back already): ignored */
    if (blk_overlap(pl, a, pl->ups[i].size)) {
        /* A block handed out (or whose free is held) lies in it: freeing it
         * would pull memory from under the user.  Kept until trim or destroy. */
        pl->ups[i].gone = 1;
        pl->up_hint = 0;
        return;
    }
    up_free_at(pl, i, stream_of(pl, stream));
}

/* ---- the interval set of live and held blocks ------------------------------ */

/* The index of the first block whose handed-out address is >= addr. */
static size_t blk_lower(const plugin *pl, uint64_t addr)
{
    return lower_bound(pl->blk, pl->nblk, sizeof *pl->blk, offsetof(pl_blk, addr), addr);
}

/* The index of the first block whose plugin address is >= raw. */
static size_t blk_lower_raw(const plugin *pl, uint64_t raw)
{
    return lower_bound(pl->blk, pl->nblk, sizeof *pl->blk, offsetof(pl_blk, raw), raw);
}

/* The block whose plugin range [raw, raw+rsize) overlaps the one given, or
 * NULL; *at (when given) is where a block at raw would be inserted. */
static const pl_blk *blk_overlap_at(const plugin *pl, uint64_t raw, uint64_t rsize, size_t *at)
{
    size_t i = blk_lower_raw(pl, raw);
    if (at)
        *at = i;
    if (i < pl->nblk && pl->blk[i].raw < raw + rsize)
        return &pl->blk[i];
    if (i > 0 && pl->blk[i - 1].raw + pl->blk[i - 1].rsize > raw)
        return &pl->blk[i - 1];
    return NULL;
}

static const pl_blk *blk_overlap(const plugin *pl, uint64_t raw, uint64_t rsize)
{
    return blk_overlap_at(pl, raw, rsize, NULL);
}

static pl_blk *blk_find(plugin *pl, uint64_t addr)
{
    size_t i = blk_lower(pl, addr);
    return i < pl->nblk && pl->blk[i].addr == addr ? &pl->blk[i] : NULL;
}

/* Makes room for one more block (so that insertion cannot fail later). */
static int blk_room(plugin *pl)
{
    if (pl->nblk == pl->cblk) {
        size_t n = pl->cblk ? pl->cblk * 2 : 64;
        pl_blk *v = realloc(pl->blk, n * sizeof *v);
        if (!v)
            return -1;
        pl->blk = v;
        pl->cblk = n;
    }
    return 0;
}

/* Inserts a block at index i (from blk_overlap_at); blk_room must have
 * succeeded since the last insertion. */
static void blk_insert_at(plugin *pl, size_t i, uint64_t addr, uint64_t size, uint64_t raw,
                          uint64_t rsize)
{
    if (i < pl->nblk) /* mostly the end: no call */
        memmove(&pl->blk[i + 1], &pl->blk[i], (pl->nblk - i) * sizeof *pl->blk);
    pl->blk[i].addr = addr;
    pl->blk[i].size = size;
    pl->blk[i].raw = raw;
    pl->blk[i].rsize = rsize;
    pl->blk[i].held = 0;
    pl->nblk++;
}

static void blk_remove_at(plugin *pl, size_t i)
{
    if (i + 1 < pl->nblk) /* mostly the end: no call */
        memmove(&pl->blk[i], &pl->blk[i + 1], (pl->nblk - i - 1) * sizeof *pl->blk);
    pl->nblk--;
}

static void blk_remove(plugin *pl, uint64_t addr)
{
    size_t i = blk_lower(pl, addr);
    if (i < pl->nblk && pl->blk[i].addr == addr)
        blk_remove_at(pl, i);
}

/* ---- held frees -------------------------------------------------------------- */

static void *native(cp_stream *s)
{
    return cp_be && cp_be->stream_native ? cp_be->stream_native(s) : (void *)s;
}

/* Hands held block i back to the plugin (its free is safe everywhere). */
static void held_release(plugin *pl, size_t i, cp_stream *s)
{
    pl_held h = pl->held[i];
    cp_so_tag_release(&pl->so, &pl->held[i].tag);
    memmove(&pl->held[i], &pl->held[i + 1], (pl->nheld - i - 1) * sizeof *pl->held);
    pl->nheld--;
    blk_remove(pl, h.addr);
    pl->a->deallocate(pl->state, (void *)(uintptr_t)h.raw, (size_t)h.rsize, native(s));
}

/* Gives back the held blocks whose frees are known complete. */
static void held_drain(plugin *pl, cp_stream *s)
{
    size_t i = 0, seen = 0;
    while (i < pl->nheld && seen++ < SCAN_MAX) {
        if (cp_so_settle(&pl->so, &pl->held[i].tag))
            held_release(pl, i, s);
        else
            i++;
    }
}

/* Waits for every held free and gives them all back. */
static void held_flush(plugin *pl, cp_stream *s)
{
    if (!pl->nheld)
        return;
    if (cp_be && cp_be->device_synchronize() != CP_OK)
        return; /* nothing is known complete: keep holding them */
    pl->so.need_sync = 0;
    pl->so.syncs++;
    while (pl->nheld)
        held_release(pl, pl->nheld - 1, s);
}

/* A held block of exactly `size` the policy lets stream s take now. */
static int held_take(plugin *pl, uint64_t size, uint64_t sid, cp_stream *s, uint64_t *addr)
{
    size_t i, n = pl->nheld < SCAN_MAX ? pl->nheld : SCAN_MAX;
    for (i = 0; i < n; i++) {
        pl_held *h = &pl->held[pl->nheld - 1 - i]; /* newest first: warmest */
        if (h->size == size && cp_so_usable(&pl->so, &h->tag, sid, s)) {
            pl_blk *b = blk_find(pl, h->addr);
            size_t at = (size_t)(h - pl->held);
            *addr = h->addr;
            cp_so_tag_release(&pl->so, &h->tag);
            memmove(&pl->held[at], &pl->held[at + 1], (pl->nheld - at - 1) * sizeof *pl->held);
            pl->nheld--;
            if (b)
                b->held = 0;
            return 1;
        }
    }
    return 0;
}

static int ordered_by_plugin(const plugin *pl)
{
    return (pl->flags & CUPOLA_ALLOCATOR_STREAM_ORDERED) != 0;
}

/* Notes stream s; on the switch to multi-stream mode the frees already given
 * to the plugin are waited for once. */
static void note_stream(plugin *pl, uint64_t sid, cp_stream *s)
{
    int was = pl->so.multi;
    cp_so_note(&pl->so, sid, s);
    if (!was && pl->so.multi && pl->unsynced) {
        if (cp_be && cp_be->device_synchronize() == CP_OK) {
            pl->so.syncs++;
            pl->unsynced = 0;
        }
    }
}

/* ---- the resource's ops ---------------------------------------------------- */

/* The plugin's allocate, once more after the held frees are given back. */
static void *plugin_allocate(plugin *pl, uint64_t rsize, cp_stream *s)
{
    void *p = pl->a->allocate(pl->state, (size_t)rsize, native(s));
    if (!p && pl->nheld) {
        held_flush(pl, s);
        p = pl->a->allocate(pl->state, (size_t)rsize, native(s));
    }
    return p;
}

static uint64_t low_bit(uint64_t x)
{
    return x & (~x + 1);
}

static cp_status alloc_in(plugin *pl, size_t bytes, cp_stream *s, void **out)
{
    uint64_t size = bytes ? bytes : 1, addr = 0, sid = 0, raw, rsize;
    size_t at = 0;
    const pl_blk *o;
    const pl_up *u;
    void *p;
    int ordered = ordered_by_plugin(pl);

    if (!ordered) {
        sid = cp_so_sid(s);
        note_stream(pl, sid, s);
        if (pl->nheld) {
            if (held_take(pl, size, sid, s, &addr)) {
                *out = (void *)(uintptr_t)addr;
                return CP_OK;
            }
            held_drain(pl, s);
        }
    }
    if (blk_room(pl) != 0) /* first, so that nothing can fail after allocate */
        return cp_error_set(CP_ERR_OOM, "out of host memory for the plugin's block list");
    for (;;) {
        /* padded by what the plugin's alignment may be short of the pool's */
        uint64_t pad = pl->natural < pl->align ? pl->align - pl->natural : 0;
        if (size > UINT64_MAX - pad)
            return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes plus %llu of alignment "
                                "do not fit in a request", (unsigned long long)size,
                                (unsigned long long)pad);
        rsize = size + pad;
        p = plugin_allocate(pl, rsize, s);
        if (!p)
            return cp_error_set(CP_ERR_OOM, "out of memory: plugin '%s' returned NULL for %llu "
                                "bytes", pl->name, (unsigned long long)rsize);
        raw = (uint64_t)(uintptr_t)p;
        /* Not given back on any of these: see the header. */
        if (raw > UINT64_MAX - rsize)
            return cp_error_set(CP_ERR_INVALID, "plugin '%s' returned a block at 0x%llx of "
                                "%llu bytes that wraps around the address space", pl->name,
                                (unsigned long long)raw, (unsigned long long)rsize);
        if ((o = blk_overlap_at(pl, raw, rsize, &at)) != NULL)
            return cp_error_set(CP_ERR_INVALID, "plugin '%s' returned a block [0x%llx, +%llu) that "
                                "overlaps the %s block [0x%llx, +%llu)", pl->name,
                                (unsigned long long)raw, (unsigned long long)rsize,
                                o->held ? "freed (not yet reusable)" : "live",
                                (unsigned long long)o->raw, (unsigned long long)o->rsize);
        u = up_holding(pl, raw, rsize);
        if (!u || u->gone) {
            size_t i;
            if (!pl->nup)
                return cp_error_set(CP_ERR_INVALID, "plugin '%s' returned a block [0x%llx, +%llu) "
                                    "outside the memory it holds from its upstream (it holds "
                                    "none)", pl->name, (unsigned long long)raw,
                                    (unsigned long long)rsize);
            i = up_lower(pl, raw + 1);
            if (i == 0)
                i = 1; /* none below: the lowest */
            return cp_error_set(CP_ERR_INVALID, "plugin '%s' returned a block [0x%llx, +%llu) "
                                "outside the memory it holds from its upstream (the nearest "
                                "upstream block: [0x%llx, +%llu)%s)", pl->name,
                                (unsigned long long)raw, (unsigned long long)rsize,
                                (unsigned long long)pl->ups[i - 1].addr,
                                (unsigned long long)pl->ups[i - 1].size,
                                u ? ", which it gave back" : "");
        }
        addr = (raw + pl->align - 1) & ~(pl->align - 1);
        if (addr >= raw && addr - raw <= rsize - size)
            break;
        /* Short of the alignment: give it back (it is the plugin's, inside its
         * memory, overlapping nothing) and ask again, padded. */
        pl->a->deallocate(pl->state, p, (size_t)rsize, native(s));
        pl->natural = low_bit(raw);
    }
    blk_insert_at(pl, at, addr, size, raw, rsize);
    *out = (void *)(uintptr_t)addr;
    return CP_OK;
}

static cp_status p_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    plugin *pl = (plugin *)r;
    cp_status st;
    pl->cur = s; /* the stream the plugin's upstream calls run on */
    st = alloc_in(pl, bytes, s, out);
    pl->cur = NULL;
    return st;
}

/* Removes block b and gives it to the plugin at once. */
static void give_back(plugin *pl, pl_blk *b, cp_stream *s)
{
    uint64_t raw = b->raw, rsize = b->rsize;
    blk_remove_at(pl, (size_t)(b - pl->blk));
    pl->cur = s;
    pl->a->deallocate(pl->state, (void *)(uintptr_t)raw, (size_t)rsize, native(s));
    pl->cur = NULL;
}

static cp_status p_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    plugin *pl = (plugin *)r;
    uint64_t addr = (uint64_t)(uintptr_t)p, sid;
    pl_blk *b = blk_find(pl, addr);
    (void)bytes;
    if (!b || b->held)
        return cp_error_set(CP_ERR_INVALID, "free of 0x%llx, which plugin pool '%s' did not "
                            "hand out (or was freed already)", (unsigned long long)addr, pl->name);
    if (ordered_by_plugin(pl)) {
        give_back(pl, b, s);
        return CP_OK;
    }
    sid = cp_so_sid(s);
    note_stream(pl, sid, s);
    if (!pl->so.multi) {
        give_back(pl, b, s);
        pl->unsynced = 1;
        return CP_OK;
    }
    if (pl->nheld == pl->cheld) {
        size_t n = pl->cheld ? pl->cheld * 2 : 64;
        pl_held *v = realloc(pl->held, n * sizeof *v);
        if (!v) {
            /* Cannot hold it: wait for the stream's work and give it back. */
            if (cp_be && s)
                cp_be->stream_synchronize(s);
            give_back(pl, b, s);
            return CP_OK;
        }
        pl->held = v;
        pl->cheld = n;
    }
    b->held = 1;
    pl->held[pl->nheld].addr = addr;
    pl->held[pl->nheld].size = b->size;
    pl->held[pl->nheld].raw = b->raw;
    pl->held[pl->nheld].rsize = b->rsize;
    cp_so_tag_free(&pl->so, &pl->held[pl->nheld].tag, sid, s);
    pl->nheld++;
    return CP_OK;
}

/* Frees the upstream blocks the plugin gave back while a block lay in them,
 * once none does. */
static void up_sweep(plugin *pl)
{
    size_t i = pl->nup;
    while (i-- > 0)
        if (pl->ups[i].gone && !blk_overlap(pl, pl->ups[i].addr, pl->ups[i].size))
            up_free_at(pl, i, NULL);
}

static cp_status p_trim(cp_resource *r, size_t keep_bytes)
{
    plugin *pl = (plugin *)r;
    (void)keep_bytes; /* what the plugin keeps is the plugin's business */
    held_flush(pl, NULL);
    up_sweep(pl);
    return CP_OK;
}

static void p_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    plugin *pl = (plugin *)r;
    size_t l = 0, f = 0;
    *largest = *free_bytes = 0;
    if (!pl->stats)
        return;
    pl->stats(pl->state, &l, &f);
    if (f > pl->base.reserved)
        f = (size_t)pl->base.reserved;
    if (l > f)
        l = f;
    *largest = l;
    *free_bytes = f;
}

static void p_destroy(cp_resource *r)
{
    plugin *pl = (plugin *)r;
    if (pl->state) {
        /* Finalizers do not wait for the device, except where the plugin's
         * destroy would free memory stream-ordered on the legacy stream
         * behind work of other streams (as heap.c does). */
        if (pl->async_up)
            held_flush(pl, NULL);
        while (pl->nheld) {
            cp_so_tag_release(&pl->so, &pl->held[pl->nheld - 1].tag);
            pl->nheld--;
            blk_remove(pl, pl->held[pl->nheld].addr);
            pl->a->deallocate(pl->state, (void *)(uintptr_t)pl->held[pl->nheld].raw,
                              (size_t)pl->held[pl->nheld].rsize, NULL);
        }
        pl->nblk = 0; /* nothing is handed out any more: destroy frees freely */
        pl->a->destroy(pl->state);
        pl->state = NULL;
    }
    /* What the plugin did not give back, cupola does. */
    while (pl->nup)
        up_free_at(pl, pl->nup - 1, NULL);
    free(pl->ups);
    cp_so_fini(&pl->so);
    free(pl->held);
    free(pl->blk);
    cp_resource_destroy(pl->up);
    if (pl->dl)
        dlclose(pl->dl);
    free(pl);
}

static void p_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    plugin *pl = (plugin *)r;
    *allocs = pl->up->st.allocs;
    *frees = pl->up->st.frees;
}

static const cp_resource_ops plugin_ops = {
    .kind = "plugin",
    .alloc = p_alloc,
    .free = p_free,
    .trim = p_trim,
    .free_info = p_free_info,
    .destroy = p_destroy,
    .device_calls = p_device_calls,
};

/* ---- loading ------------------------------------------------------------------ */

static cp_status load(plugin *pl, const cp_plugin_opts *o)
{
    const char *path = o->path, *sym = o->symbol;
    const ElfW(Sym) *es;
    void *esp = NULL;
    Dl_info info;
    const cupola_allocator *a;
    const char *err;
    size_t size;

    if (!path || !*path)
        return cp_error_set(CP_ERR_INVALID, "plugin pool: 'path' (or 'source') is missing");
    if (!sym || !*sym)
        return cp_error_set(CP_ERR_INVALID, "plugin pool: 'symbol' is missing");
    pl->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!pl->dl) {
        err = dlerror();
        return cp_error_set(CP_ERR_INVALID, "plugin pool: cannot load '%s': %s", path,
                            err ? err : "unknown error");
    }
    dlerror();
    a = (const cupola_allocator *)dlsym(pl->dl, sym);
    if (!a) {
        err = dlerror();
        return cp_error_set(CP_ERR_INVALID, "plugin pool: '%s' has no symbol '%s'%s%s", path, sym,
                            err ? ": " : "", err ? err : "");
    }
    if (!dladdr1((const void *)a, &info, &esp, RTLD_DL_SYMENT) || !esp)
        return cp_error_set(CP_ERR_INVALID, "plugin pool: cannot tell what '%s' in '%s' is",
                            sym, path);
    es = (const ElfW(Sym) *)esp;
    if (ELF64_ST_TYPE(es->st_info) == STT_FUNC)
        return cp_error_set(CP_ERR_INVALID, "plugin pool: '%s' in '%s' is a function, not a "
                            "const cupola_allocator", sym, path);
    size = (size_t)es->st_size;
    if (size < offsetof(cupola_allocator, deallocate) + sizeof a->deallocate)
        return cp_error_set(CP_ERR_INVALID, "plugin pool: '%s' in '%s' is %zu bytes, smaller than "
                            "a cupola_allocator (version 1)", sym, path, size);
    if (a->version != CUPOLA_ALLOCATOR_VERSION)
        return cp_error_set(CP_ERR_INVALID, "plugin pool: '%s' in '%s' has interface version %d; "
                            "this cupola speaks version %d (<cupola/allocator.h>)", sym, path,
                            a->version, CUPOLA_ALLOCATOR_VERSION);
    if (!a->create || !a->destroy || !a->allocate || !a->deallocate)
        return cp_error_set(CP_ERR_INVALID, "plugin pool: '%s' in '%s' leaves %s NULL", sym, path,
                            !a->create ? "create" : !a->destroy ? "destroy"
                                                  : !a->allocate ? "allocate" : "deallocate");
    if (size >= offsetof(cupola_allocator, flags) + sizeof a->flags)
        pl->flags = a->flags;
    if (size >= offsetof(cupola_allocator, stats) + sizeof a->stats)
        pl->stats = a->stats;
    pl->a = a;
    snprintf(pl->name, sizeof pl->name, "%s", sym);
    return CP_OK;
}

static cp_status plugin_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    const cp_plugin_opts *po = (const cp_plugin_opts *)cp_pool_own_const(o);
    plugin *pl = calloc(1, sizeof *pl);
    cp_status st;
    *out = NULL;
    if (!pl) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&pl->base, &plugin_ops);
    pl->up = up;
    pl->upw.pub.allocate = up_allocate;
    pl->upw.pub.deallocate = up_deallocate;
    pl->upw.pl = pl;
    pl->align = o->alignment ? o->alignment : 256;
    pl->natural = pl->align; /* until a block shows otherwise */
    pl->max = o->max;
    pl->grow = o->grow;
    pl->async_up = o->upstream == CP_UP_ASYNC;
    cp_so_init(&pl->so, o->reuse);
    st = load(pl, po);
    if (st == CP_OK) {
        pl->state = pl->a->create(&pl->upw.pub, po->options ? po->options : "");
        if (!pl->state)
            st = cp_error_set(CP_ERR_INVALID, "plugin pool: create of '%s' returned NULL "
                              "(options \"%s\")", pl->name, po->options ? po->options : "");
    }
    if (st != CP_OK) {
        p_destroy(&pl->base);
        return st;
    }
    pl->created = 1;
    /* what create took from the upstream is the first peak */
    pl->base.st.reserved_peak = pl->base.reserved;
    *out = &pl->base;
    return CP_OK;
}

/* ---- the registry's row (model.h) --------------------------------------------- */

static const cp_opt plugin_opts[] = {
    {.name = "path", .type = CP_OPT_STRING, .offset = offsetof(cp_plugin_opts, path),
     .flags = CP_OPT_NO_SPEC},
    /* C source instead of path: the binding compiles it (src/lua/pool.c) */
    {.name = "source", .type = CP_OPT_STRING, .flags = CP_OPT_NO_SPEC | CP_OPT_BINDING},
    {.name = "symbol", .type = CP_OPT_STRING, .offset = offsetof(cp_plugin_opts, symbol),
     .flags = CP_OPT_NO_SPEC},
    {.name = "options", .type = CP_OPT_STRING, .offset = offsetof(cp_plugin_opts, options),
     .flags = CP_OPT_NO_SPEC},
    {.name = NULL},
};

const cp_model cp_plugin_model = {
    .name = "plugin",
    .create = plugin_create,
    .opts = plugin_opts,
    .opts_size = sizeof(cp_plugin_opts),
    .no_spec = "needs a path and a symbol, which a spec does not carry",
    .traits = CP_MODEL_TOGETHER,
};
