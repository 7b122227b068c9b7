/*
 * model_bump.c: a pool kind that exists only in the tests ("bump"), to hold
 * the registry to its promise: a model is its own file and one row
 * (docs/models.md).  Nothing in src/ names it.  It registers itself when its
 * object is loaded; tests/c/test_models.c links it, and so does the copy of
 * the module that spec/pool_conformance_spec.lua holds to the conformance
 * battery (build/testmod/models/cupola/core.so, make test).
 *
 * Policy, exactly:
 *  - Requests are rounded up to the alignment and cut from the current chunk
 *    at an offset that only moves up; a free gives nothing back to the
 *    offset.  A chunk is reused (its offset back to 0) only when every block
 *    cut from it has been freed, and then only by a request on a stream that
 *    may take it (streamorder.h: the frees' streams joined into one tag).
 *  - A request that fits neither the current chunk nor an emptied one takes
 *    a new chunk from the upstream: `chunk` bytes (its one option, 1 MiB by
 *    default), or the request's size when larger; `initial` is the first
 *    chunk; with grow = false no chunk after it.  A chunk that would take
 *    the pool past `max` is refused (out of memory) once the emptied chunks
 *    are given back and it still does not fit.
 *  - trim(keep) returns emptied chunks while more than keep bytes sit in
 *    them.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pool/model.h"
#include "pool/resource_impl.h"
#include "pool/streamorder.h"

typedef struct bump_opts {
    uint64_t chunk;
} bump_opts;

typedef struct bchunk {
    struct bchunk *next;
    uint64_t up_ptr, up_bytes; /* as the upstream gave it */
    uint64_t base, size, off;  /* aligned, what blocks are cut from */
    uint64_t live, live_bytes;
    cp_so_tag tag; /* the frees since it was last rewound, joined */
    int tagged;
} bchunk;

typedef struct bump {
    cp_resource base;
    cp_resource *up;
    cp_so so;
    cp_ptrmap live; /* block address -> its chunk */
    bchunk *chunks, *cur;
    uint64_t align, up_align, chunk, max;
    int grow, async;
} bump;

static void rewind_chunk(bump *b, bchunk *c)
{
    c->off = 0;
    if (c->tagged)
        cp_so_tag_release(&b->so, &c->tag);
    c->tagged = 0;
}

/* Returns the emptied chunks (all of them: keep 0) while more than keep
 * bytes sit in them. */
static void release_empty(bump *b, uint64_t keep)
{
    bchunk **pc = &b->chunks, *c;
    uint64_t idle = 0;
    int synced = 0;
    for (c = b->chunks; c; c = c->next)
        if (!c->live)
            idle += c->size;
    while ((c = *pc) != NULL && idle > keep) {
        if (c->live) {
            pc = &c->next;
            continue;
        }
        /* (memory from cudaMallocAsync: its frees may still be queued) */
        if (b->async && !synced && cp_be->device_synchronize() == CP_OK)
            synced = 1;
        if (b->async && !synced)
            return;
        idle -= c->size;
        *pc = c->next;
        if (b->cur == c)
            b->cur = NULL;
        rewind_chunk(b, c);
        cp_resource_free(b->up, (void *)(uintptr_t)c->up_ptr, (size_t)c->up_bytes, NULL);
        b->base.reserved -= c->up_bytes;
        free(c);
    }
}

static cp_status new_chunk(bump *b, uint64_t size, cp_stream *s, bchunk **out)
{
    uint64_t pad = b->align > b->up_align ? b->align - b->up_align : 0;
    bchunk *c;
    void *p = NULL;
    cp_status st;
    if (b->max && b->base.reserved + size + pad > b->max)
        release_empty(b, 0);
    if (b->max && b->base.reserved + size + pad > b->max)
        return cp_error_set(CP_ERR_OOM, "out of memory: a chunk of %llu bytes would pass the "
                            "bump pool's max of %llu (reserved %llu)", (unsigned long long)size,
                            (unsigned long long)b->max, (unsigned long long)b->base.reserved);
    c = calloc(1, sizeof *c);
    if (!c)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    st = cp_resource_alloc(b->up, (size_t)(size + pad), s, &p);
    if (st != CP_OK) {
        free(c);
        return st;
    }
    c->up_ptr = (uint64_t)(uintptr_t)p;
    c->up_bytes = size + pad;
    c->base = (c->up_ptr + b->align - 1) & ~(b->align - 1);
    c->size = c->up_ptr + c->up_bytes - c->base;
    if (b->async) {
        /* cudaMallocAsync memory is ordered on s, as if s had just freed it */
        cp_so_tag_free(&b->so, &c->tag, cp_so_sid(s), s);
        c->tagged = 1;
    }
    c->next = b->chunks;
    b->chunks = c;
    b->base.reserved += c->up_bytes;
    *out = c;
    return CP_OK;
}

static cp_status bump_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    bump *b = (bump *)r;
    uint64_t sid = cp_so_sid(s), size, addr;
    bchunk *c = b->cur;
    cp_status st;

    if (bytes > UINT64_MAX / 4)
        return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes", bytes);
    size = cp_round_size(bytes, b->align);
    cp_so_note(&b->so, sid, s);
    if (!c || c->off + size > c->size) {
        for (c = b->chunks; c; c = c->next)
            if (!c->live && c->size >= size &&
                (!c->tagged || cp_so_usable(&b->so, &c->tag, sid, s)))
                break;
        if (c) {
            rewind_chunk(b, c);
        } else {
            if (!b->grow && b->chunks)
                return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes do not fit in the "
                                    "bump pool (grow=false)", bytes);
            st = new_chunk(b, size > b->chunk ? size : b->chunk, s, &c);
            if (st != CP_OK)
                return st;
        }
        b->cur = c;
    }
    addr = c->base + c->off;
    if (cp_ptrmap_put(&b->live, addr, c) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the block map");
    c->off += size;
    c->live++;
    c->live_bytes += size;
    *out = (void *)(uintptr_t)addr;
    return CP_OK;
}

static cp_status bump_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    bump *b = (bump *)r;
    uint64_t sid = cp_so_sid(s);
    bchunk *c = (bchunk *)cp_ptrmap_del(&b->live, (uint64_t)(uintptr_t)p);
    cp_so_tag t;
    if (!c)
        return cp_error_set(CP_ERR_INVALID, "free of %p: not a live block of this bump pool", p);
    cp_so_note(&b->so, sid, s);
    cp_so_tag_free(&b->so, &t, sid, s);
    if (c->tagged) {
        cp_so_join(&b->so, &c->tag, &t);
    } else {
        c->tag = t;
        c->tagged = 1;
    }
    c->live--;
    c->live_bytes -= cp_round_size(bytes, b->align);
    return CP_OK;
}

static cp_status bump_trim(cp_resource *r, size_t keep)
{
    release_empty((bump *)r, keep);
    return CP_OK;
}

static void bump_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    bump *b = (bump *)r;
    uint64_t big = 0, fb = 0;
    bchunk *c;
    for (c = b->chunks; c; c = c->next) {
        uint64_t avail = c->live ? c->size - c->off : c->size;
        fb += c->size - c->live_bytes;
        if (avail > big)
            big = avail;
    }
    *largest = big;
    *free_bytes = fb;
}

static void bump_destroy(cp_resource *r)
{
    bump *b = (bump *)r;
    bchunk *c;
    for (c = b->chunks; c; c = c->next)
        c->live = 0; /* the caller guarantees none is live */
    release_empty(b, 0);
    cp_so_fini(&b->so);
    cp_ptrmap_fini(&b->live);
    cp_resource_destroy(b->up);
    free(b);
}

static void bump_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    bump *b = (bump *)r;
    *allocs = b->up->st.allocs;
    *frees = b->up->st.frees;
}

static const cp_resource_ops bump_ops = {
    .kind = "bump",
    .alloc = bump_alloc,
    .free = bump_free,
    .trim = bump_trim,
    .free_info = bump_free_info,
    .destroy = bump_destroy,
    .device_calls = bump_device_calls,
};

static cp_status bump_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    const bump_opts *bo = (const bump_opts *)cp_pool_own_const(o);
    bump *b = calloc(1, sizeof *b);
    *out = NULL;
    if (!b) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&b->base, &bump_ops);
    b->up = up;
    b->align = o->alignment;
    b->up_align = cp_upstream_alignment(o->upstream);
    b->chunk = bo->chunk;
    b->max = o->max;
    b->grow = o->grow;
    b->async = o->upstream == CP_UP_ASYNC;
    cp_so_init(&b->so, o->reuse);
    if (cp_ptrmap_init(&b->live, 256) != 0) {
        bump_destroy(&b->base);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    if (o->initial) {
        cp_status st = new_chunk(b, cp_round_size(o->initial, b->align), NULL, &b->cur);
        if (st != CP_OK) {
            bump_destroy(&b->base);
            return st;
        }
    }
    *out = &b->base;
    return CP_OK;
}

static cp_status check_chunk(const cp_opt *d, const void *v)
{
    uint64_t c;
    memcpy(&c, v, sizeof c);
    if (c < 4096)
        return cp_error_set(CP_ERR_INVALID, "option '%s' must be at least 4096 bytes, not %llu",
                            d->name, (unsigned long long)c);
    return CP_OK;
}

static const cp_opt bump_opts_desc[] = {
    {.name = "chunk", .type = CP_OPT_SIZE, .offset = offsetof(bump_opts, chunk),
     .def = 1 << 20, .check = check_chunk},
    {.name = NULL},
};

/* The row.  A model in src/ is one name in model.c's list instead of the
 * registration below. */
static const cp_model bump_model = {
    .name = "bump",
    .create = bump_create,
    .opts = bump_opts_desc,
    .opts_size = sizeof(bump_opts),
};

__attribute__((constructor)) static void register_bump(void)
{
    if (cp_model_register(&bump_model) != CP_OK)
        abort(); /* the registry refused the row: every test of it would mislead */
}
