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
 *    remembered, so a deallocate of something the upstream never gave is
 *    ignored instead of reaching cudaFree/free, and whatever the plugin still
 *    holds after destroy is given back by cupola.
 *  - Every block the plugin returns is checked before it is handed out: it
 *    must be aligned to the pool's alignment and overlap no block that is
 *    live or whose free is held (a sorted array of intervals, binary search).
 *    A misaligned block is given back to the plugin; an overlapping one is
 *    not (deallocating it could release the live block it overlaps) and stays
 *    with the plugin until destroy.  Either way the request fails with an
 *    error naming both blocks; cupola's own state is unchanged.
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

typedef struct pl_blk {
    uint64_t addr;
    uint64_t size; /* the bytes the plugin was asked for (>= 1) */
    int held;      /* freed by the user, the free held by the stream-order layer */
} pl_blk;

typedef struct pl_held {
    uint64_t addr;
    uint64_t size;
    cp_so_tag tag;
} pl_held;

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
    uint64_t max;
    int grow, created;
    int async_up;       /* the upstream frees stream-ordered (cudaFreeAsync) */
    cp_stream *cur;     /* the stream of the operation in progress */
    cp_ptrmap up_map;   /* upstream blocks the plugin holds: address -> size */
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

static void *up_allocate(cupola_upstream *self, size_t bytes, void *stream)
{
    plugin *pl = ((pl_upstream *)self)->pl;
    void *p = NULL;
    if (!self || !pl || bytes == 0)
        return NULL;
    if (pl->created && !pl->grow)
        return NULL;
    if (pl->max && (bytes > pl->max || pl->base.reserved + pl->base.fb_bytes > pl->max - bytes))
        return NULL;
    if (!pl->up_map.slots && cp_ptrmap_init(&pl->up_map, 16) != 0)
        return NULL;
    if (cp_resource_alloc(pl->up, bytes, stream_of(pl, stream), &p) != CP_OK)
        return NULL;
    if (cp_ptrmap_put(&pl->up_map, (uint64_t)(uintptr_t)p, (void *)(uintptr_t)bytes) != 0) {
        cp_resource_free(pl->up, p, bytes, stream_of(pl, stream));
        return NULL;
    }
    pl->base.reserved += bytes;
    return p;
}

static void up_deallocate(cupola_upstream *self, void *ptr, size_t bytes, void *stream)
{
    plugin *pl = ((pl_upstream *)self)->pl;
    void *v;
    (void)bytes; /* the size remembered is the one that counts */
    if (!ptr || !pl->up_map.slots)
        return;
    v = cp_ptrmap_del(&pl->up_map, (uint64_t)(uintptr_t)ptr);
    if (!v)
        return; /* never came from the upstream: ignored, never passed on */
    cp_resource_free(pl->up, ptr, (size_t)(uintptr_t)v, stream_of(pl, stream));
    pl->base.reserved -= (uint64_t)(uintptr_t)v;
}

/* ---- the interval set of live and held blocks ------------------------------ */

/* The index of the first block whose address is >= addr. */
static size_t blk_lower(const plugin *pl, uint64_t addr)
{
    size_t lo = 0, hi = pl->nblk;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pl->blk[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The block [addr, addr+size) overlaps, or NULL. */
static const pl_blk *blk_overlap(const plugin *pl, uint64_t addr, uint64_t size)
{
    size_t i = blk_lower(pl, addr);
    if (i < pl->nblk && pl->blk[i].addr < addr + size)
        return &pl->blk[i];
    if (i > 0 && pl->blk[i - 1].addr + pl->blk[i - 1].size > addr)
        return &pl->blk[i - 1];
    return NULL;
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

/* Inserts a block; blk_room must have succeeded since the last insertion. */
static void blk_insert(plugin *pl, uint64_t addr, uint64_t size)
{
    size_t i = blk_lower(pl, addr);
    memmove(&pl->blk[i + 1], &pl->blk[i], (pl->nblk - i) * sizeof *pl->blk);
    pl->blk[i].addr = addr;
    pl->blk[i].size = size;
    pl->blk[i].held = 0;
    pl->nblk++;
}

static void blk_remove(plugin *pl, uint64_t addr)
{
    size_t i = blk_lower(pl, addr);
    if (i < pl->nblk && pl->blk[i].addr == addr) {
        memmove(&pl->blk[i], &pl->blk[i + 1], (pl->nblk - i - 1) * sizeof *pl->blk);
        pl->nblk--;
    }
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
    pl->a->deallocate(pl->state, (void *)(uintptr_t)h.addr, (size_t)h.size, native(s));
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

static cp_status p_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    plugin *pl = (plugin *)r;
    uint64_t size = bytes ? bytes : 1, addr = 0, sid = 0;
    const pl_blk *o;
    void *p;
    int ordered = ordered_by_plugin(pl);

    pl->cur = s;
    if (!ordered) {
        sid = cp_so_sid(s);
        note_stream(pl, sid, s);
        if (pl->nheld) {
            if (held_take(pl, size, sid, s, &addr)) {
                *out = (void *)(uintptr_t)addr;
                pl->cur = NULL;
                return CP_OK;
            }
            held_drain(pl, s);
        }
    }
    if (blk_room(pl) != 0) { /* first, so that nothing can fail after allocate */
        pl->cur = NULL;
        return cp_error_set(CP_ERR_OOM, "out of host memory for the plugin's block list");
    }
    p = pl->a->allocate(pl->state, (size_t)size, native(s));
    if (!p && pl->nheld) {
        held_flush(pl, s);
        p = pl->a->allocate(pl->state, (size_t)size, native(s));
    }
    pl->cur = NULL;
    if (!p)
        return cp_error_set(CP_ERR_OOM, "out of memory: plugin '%s' returned NULL for %llu bytes",
                            pl->name, (unsigned long long)size);
    addr = (uint64_t)(uintptr_t)p;
    if (addr % pl->align) {
        pl->cur = s;
        pl->a->deallocate(pl->state, p, (size_t)size, native(s));
        pl->cur = NULL;
        return cp_error_set(CP_ERR_INVALID, "plugin '%s' returned a block at 0x%llx that is not "
                            "aligned to the pool's alignment of %llu bytes", pl->name,
                            (unsigned long long)addr, (unsigned long long)pl->align);
    }
    if (addr > UINT64_MAX - size || (o = blk_overlap(pl, addr, size)) != NULL) {
        /* Not given back: deallocating it could release the block it overlaps. */
        if (addr > UINT64_MAX - size)
            return cp_error_set(CP_ERR_INVALID, "plugin '%s' returned a block at 0x%llx of "
                                "%llu bytes that wraps around the address space", pl->name,
                                (unsigned long long)addr, (unsigned long long)size);
        return cp_error_set(CP_ERR_INVALID, "plugin '%s' returned a block [0x%llx, +%llu) that "
                            "overlaps the %s block [0x%llx, +%llu)", pl->name,
                            (unsigned long long)addr, (unsigned long long)size,
                            o->held ? "freed (not yet reusable)" : "live",
                            (unsigned long long)o->addr, (unsigned long long)o->size);
    }
    blk_insert(pl, addr, size);
    *out = p;
    return CP_OK;
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
        uint64_t size = b->size;
        blk_remove(pl, addr);
        pl->cur = s;
        pl->a->deallocate(pl->state, p, (size_t)size, native(s));
        pl->cur = NULL;
        return CP_OK;
    }
    sid = cp_so_sid(s);
    note_stream(pl, sid, s);
    if (!pl->so.multi) {
        uint64_t size = b->size;
        blk_remove(pl, addr);
        pl->cur = s;
        pl->a->deallocate(pl->state, p, (size_t)size, native(s));
        pl->cur = NULL;
        pl->unsynced = 1;
        return CP_OK;
    }
    if (pl->nheld == pl->cheld) {
        size_t n = pl->cheld ? pl->cheld * 2 : 64;
        pl_held *v = realloc(pl->held, n * sizeof *v);
        if (!v) {
            /* Cannot hold it: wait for the stream's work and give it back. */
            uint64_t size = b->size;
            if (cp_be && s)
                cp_be->stream_synchronize(s);
            blk_remove(pl, addr);
            pl->cur = s;
            pl->a->deallocate(pl->state, p, (size_t)size, native(s));
            pl->cur = NULL;
            return CP_OK;
        }
        pl->held = v;
        pl->cheld = n;
    }
    b->held = 1;
    pl->held[pl->nheld].addr = addr;
    pl->held[pl->nheld].size = b->size;
    cp_so_tag_free(&pl->so, &pl->held[pl->nheld].tag, sid, s);
    pl->nheld++;
    return CP_OK;
}

static cp_status p_trim(cp_resource *r, size_t keep_bytes)
{
    plugin *pl = (plugin *)r;
    (void)keep_bytes; /* what the plugin keeps is the plugin's business */
    held_flush(pl, NULL);
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
    uint64_t i;
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
            pl->a->deallocate(pl->state, (void *)(uintptr_t)pl->held[pl->nheld].addr,
                              (size_t)pl->held[pl->nheld].size, NULL);
        }
        pl->a->destroy(pl->state);
        pl->state = NULL;
    }
    /* What the plugin did not give back, cupola does. */
    for (i = 0; pl->up_map.slots && i <= pl->up_map.mask; i++)
        if (pl->up_map.slots[i].key)
            cp_resource_free(pl->up, (void *)(uintptr_t)pl->up_map.slots[i].key,
                             (size_t)(uintptr_t)pl->up_map.slots[i].val, NULL);
    cp_ptrmap_fini(&pl->up_map);
    cp_so_fini(&pl->so);
    free(pl->held);
    free(pl->blk);
    cp_resource_destroy(pl->up);
    if (pl->dl)
        dlclose(pl->dl);
    free(pl);
}

static const cp_resource_ops plugin_ops = {
    "plugin", p_alloc, p_free, p_trim, NULL, p_free_info, NULL, p_destroy, NULL,
};

/* ---- loading ------------------------------------------------------------------ */

static cp_status load(plugin *pl, const cp_pool_opts *o)
{
    const char *path = o->plugin_path, *sym = o->plugin_symbol;
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

cp_status cp_plugin_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
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
    pl->max = o->max;
    pl->grow = o->grow;
    pl->async_up = o->upstream == CP_UP_ASYNC;
    cp_so_init(&pl->so, o->reuse);
    st = load(pl, o);
    if (st == CP_OK) {
        pl->state = pl->a->create(&pl->upw.pub, o->plugin_options ? o->plugin_options : "");
        if (!pl->state)
            st = cp_error_set(CP_ERR_INVALID, "plugin pool: create of '%s' returned NULL "
                              "(options \"%s\")", pl->name,
                              o->plugin_options ? o->plugin_options : "");
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
