/*
 * pool/arena.c: a bump allocator over chunks of upstream memory: device
 * memory sub-allocated by offset, everything freed at once by reset(), the
 * cheapest allocation there is for work whose blocks die together.
 *
 * Policy, exactly:
 *  - Requests are rounded up to the alignment (default 256 bytes) and cut
 *    from the current chunk at its offset, which only moves up.  Individual
 *    frees give nothing back to the offset: a chunk's memory becomes
 *    reusable only when every block cut from it has been freed (its live
 *    count reaches 0) or on reset().
 *  - An emptied chunk is rewound (offset 0) when the next request on a
 *    stream that may use it (streamorder.h: the frees' streams are joined
 *    into one tag; frees on several streams need a device synchronization,
 *    which CP_REUSE_STREAM never does) does not fit in the current chunk;
 *    the current chunk itself is rewound first, then the emptied chunks.
 *  - When nothing fits, a new chunk becomes current: the larger of the
 *    request rounded up to 2 MiB, `initial`, and 16 MiB (grow=false: no new
 *    chunk after the first).  Emptied chunks beyond release_threshold bytes
 *    are returned to the upstream at that moment and by trim(), so the
 *    reserved figure follows the live data instead of the arena's history.
 *  - reset() synchronizes the device (the blocks' work may be queued on any
 *    stream), then empties every chunk: all blocks handed out are free and
 *    must not be freed again.
 */
#include "model.h"
#include "resource_impl.h"
#include "streamorder.h"

#include <stdlib.h>
#include <string.h>

#define GRANULE (UINT64_C(2) << 20)
#define MIN_CHUNK (UINT64_C(16) << 20)

typedef struct achunk {
    uint64_t up_ptr, up_bytes;
    uint64_t base, size, off;
    uint64_t live;       /* blocks cut from it and not freed */
    uint64_t live_bytes; /* their rounded sizes */
    cp_so_tag tag;       /* joined tag of the frees since the last rewind */
    int tagged;
} achunk;

typedef struct arena {
    cp_resource base;
    cp_resource *up;
    cp_pool_opts o;
    cp_so so;
    cp_ptrmap live;      /* block address -> its chunk */
    achunk **chunks;
    size_t n, cap;
    achunk *cur;
    uint64_t align, up_align;
} arena;

static void chunk_rewind(arena *a, achunk *c)
{
    c->off = 0;
    if (c->tagged)
        cp_so_tag_release(&a->so, &c->tag);
    c->tagged = 0;
}

/* May chunk c (live == 0) be rewound for a request on s? */
static int rewindable(arena *a, achunk *c, uint64_t sid, cp_stream *s)
{
    if (c->live)
        return 0;
    if (!c->tagged)
        return 1;
    return cp_so_usable(&a->so, &c->tag, sid, s);
}

static void chunk_drop(arena *a, size_t i)
{
    achunk *c = a->chunks[i];
    if (c->tagged)
        cp_so_tag_release(&a->so, &c->tag);
    cp_resource_free(a->up, (void *)(uintptr_t)c->up_ptr, (size_t)c->up_bytes, NULL);
    a->base.reserved -= c->up_bytes;
    a->chunks[i] = a->chunks[--a->n];
    if (a->cur == c)
        a->cur = NULL;
    free(c);
}

/* Returns emptied chunks while more than keep bytes sit in them: not the
 * current one when the pool is growing (it is rewound before a new chunk is
 * cut), the current one too for trim() (an arena with nothing live holds
 * nothing a caller asked it to keep). */
static void release_empty(arena *a, uint64_t keep, int with_cur)
{
    uint64_t idle = 0;
    size_t i;
    int synced = 0;
    for (i = 0; i < a->n; i++)
        if (!a->chunks[i]->live && (with_cur || a->chunks[i] != a->cur))
            idle += a->chunks[i]->size;
    for (i = a->n; i-- > 0 && idle > keep;) {
        achunk *c = a->chunks[i];
        if (c->live || (!with_cur && c == a->cur))
            continue;
        if (a->o.upstream == CP_UP_ASYNC && !synced) {
            if (cp_be->device_synchronize() != CP_OK)
                return;
            synced = 1;
        }
        idle -= c->size;
        chunk_drop(a, i);
    }
}

/* A new chunk of want bytes, or of size when that is all max or the
 * upstream allows. */
static cp_status chunk_new(arena *a, uint64_t size, uint64_t want, cp_stream *s, achunk **out)
{
    uint64_t pad = a->align > a->up_align ? a->align - a->up_align : 0;
    uint64_t res = a->base.reserved + a->base.fb_bytes;
    achunk *c;
    void *p = NULL;
    cp_status st = CP_ERR_OOM;

    if (a->o.max) {
        if (res + size + pad > a->o.max)
            return cp_error_set(CP_ERR_OOM, "out of memory: %llu more bytes would pass the "
                                "arena's max of %llu (reserved %llu)",
                                (unsigned long long)size, (unsigned long long)a->o.max,
                                (unsigned long long)res);
        if (res + want + pad > a->o.max)
            want = (a->o.max - res - pad) & ~(a->align - 1);
        if (want < size)
            want = size;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 8;
        achunk **v = realloc(a->chunks, cap * sizeof *v);
        if (!v)
            return cp_error_set(CP_ERR_OOM, "out of host memory");
        a->chunks = v;
        a->cap = cap;
    }
    c = calloc(1, sizeof *c);
    if (!c)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    if (want > size) {
        st = cp_resource_alloc(a->up, (size_t)(want + pad), s, &p);
        if (st != CP_OK && st != CP_ERR_OOM) {
            free(c);
            return st;
        }
    }
    if (st != CP_OK) {
        want = size;
        st = cp_resource_alloc(a->up, (size_t)(want + pad), s, &p);
    }
    if (st != CP_OK) {
        free(c);
        return st;
    }
    c->up_ptr = (uint64_t)(uintptr_t)p;
    c->up_bytes = want + pad;
    c->base = (c->up_ptr + a->align - 1) & ~(a->align - 1);
    c->size = c->up_ptr + c->up_bytes - c->base;
    if (a->o.upstream == CP_UP_ASYNC) {
        /* cudaMallocAsync memory is ordered on s, as if s had just freed it. */
        cp_so_tag_free(&a->so, &c->tag, cp_so_sid(s), s);
        c->tagged = 1;
    }
    a->base.reserved += c->up_bytes;
    a->chunks[a->n++] = c;
    *out = c;
    return CP_OK;
}

static cp_status ar_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    arena *a = (arena *)r;
    uint64_t size = cp_round_size(bytes, a->align), sid = cp_so_sid(s), addr;
    achunk *c = a->cur;
    cp_status st;

    cp_so_note(&a->so, sid, s);
    if (!c || c->off + size > c->size) {
        size_t i;
        c = NULL;
        if (a->cur && a->cur->size >= size && rewindable(a, a->cur, sid, s))
            c = a->cur;
        for (i = 0; !c && i < a->n; i++)
            if (a->chunks[i]->size >= size && rewindable(a, a->chunks[i], sid, s))
                c = a->chunks[i];
        if (c) {
            chunk_rewind(a, c);
        } else {
            if (!a->o.grow && a->n)
                return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes do not fit in the "
                                    "arena (grow=false; reset() or free every block)", bytes);
            uint64_t want = (size + GRANULE - 1) & ~(GRANULE - 1);
            if (want < a->o.initial)
                want = a->o.initial;
            if (want < MIN_CHUNK)
                want = MIN_CHUNK;
            release_empty(a, a->o.release_threshold, 0);
            st = chunk_new(a, size, want, s, &c);
            if (st != CP_OK)
                return st;
        }
        a->cur = c;
    }
    addr = c->base + c->off;
    if (cp_ptrmap_put(&a->live, addr, c) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the block map");
    c->off += size;
    c->live++;
    c->live_bytes += size;
    *out = (void *)(uintptr_t)addr;
    return CP_OK;
}

static cp_status ar_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    arena *a = (arena *)r;
    uint64_t sid = cp_so_sid(s);
    achunk *c = cp_ptrmap_del(&a->live, (uint64_t)(uintptr_t)p);
    cp_so_tag t;

    if (!c)
        return cp_error_set(CP_ERR_INVALID, "free of %p: not a live block of this arena "
                            "(double free, freed after reset(), or another pool's)", p);
    cp_so_note(&a->so, sid, s);
    cp_so_tag_free(&a->so, &t, sid, s);
    if (c->tagged) {
        cp_so_join(&a->so, &c->tag, &t);
    } else {
        c->tag = t;
        c->tagged = 1;
    }
    c->live--;
    c->live_bytes -= cp_round_size(bytes, a->align);
    return CP_OK;
}

static cp_status ar_reset(cp_resource *r)
{
    arena *a = (arena *)r;
    size_t i;
    if (cp_be && cp_be->device_synchronize() != CP_OK)
        return CP_ERR_BACKEND;
    for (i = 0; i < a->n; i++) {
        achunk *c = a->chunks[i];
        chunk_rewind(a, c);
        c->live = 0;
        c->live_bytes = 0;
    }
    cp_ptrmap_fini(&a->live);
    if (cp_ptrmap_init(&a->live, 1024) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    a->so.need_sync = 0; /* everything before the synchronization is idle */
    return CP_OK;
}

static cp_status ar_trim(cp_resource *r, size_t keep)
{
    arena *a = (arena *)r;
    if (a->o.grow)
        release_empty(a, keep, 1);
    return CP_OK;
}

static void ar_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    arena *a = (arena *)r;
    uint64_t big = 0, fb = 0;
    size_t i;
    for (i = 0; i < a->n; i++) {
        achunk *c = a->chunks[i];
        uint64_t avail = c->live ? c->size - c->off : c->size;
        fb += c->size - c->live_bytes;
        if (avail > big)
            big = avail;
    }
    *largest = big;
    *free_bytes = fb;
}

static void ar_destroy(cp_resource *r)
{
    arena *a = (arena *)r;
    if (a->o.upstream == CP_UP_ASYNC && a->n)
        cp_be->device_synchronize();
    while (a->n)
        chunk_drop(a, a->n - 1);
    free(a->chunks);
    cp_so_fini(&a->so);
    cp_ptrmap_fini(&a->live);
    cp_resource_destroy(a->up);
    free(a);
}

static void ar_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    arena *a = (arena *)r;
    *allocs = a->up->st.allocs;
    *frees = a->up->st.frees;
}

static const cp_resource_ops arena_ops = {
    .kind = "arena",
    .alloc = ar_alloc,
    .free = ar_free,
    .trim = ar_trim,
    .reset = ar_reset,
    .free_info = ar_free_info,
    .destroy = ar_destroy,
    .device_calls = ar_device_calls,
};

static cp_status arena_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    arena *a = calloc(1, sizeof *a);
    *out = NULL;
    if (!a) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&a->base, &arena_ops);
    a->up = up;
    a->o = *o;
    a->align = o->alignment ? o->alignment : 256;
    a->up_align = cp_upstream_alignment(o->upstream);
    cp_so_init(&a->so, o->reuse);
    if (cp_ptrmap_init(&a->live, 1024) != 0) {
        ar_destroy(&a->base);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    if (o->initial) {
        achunk *c;
        uint64_t size = cp_round_size(o->initial, a->align);
        cp_status st = chunk_new(a, size, size, NULL, &c);
        if (st != CP_OK) {
            ar_destroy(&a->base);
            return st;
        }
        a->cur = c;
    }
    *out = &a->base;
    return CP_OK;
}

/* The registry's row (model.h). */
const cp_model cp_arena_model = {
    .name = "arena",
    .create = arena_create,
};
