/*
 * upstream.c: where pools get their memory, each a cp_resource of its own
 * (RMM's shape: a pool is a resource over an upstream resource).
 *
 *   device   cp_be->mem_alloc(CP_MEM_DEVICE)   (cudaMalloc / cudaFree)
 *   async    cp_be->mem_alloc_async on the request's stream, freed with
 *            mem_free_async on the stream given to free
 *   managed  cp_be->mem_alloc(CP_MEM_MANAGED)
 *   pinned   cp_be->mem_alloc(CP_MEM_PINNED)
 *   virtual  addresses only: a counter hands out increasing, 4 KiB-aligned
 *            addresses in an unmapped part of the address space (from 2^44 up)
 *            and never reuses them; nothing may be read or written there.  It
 *            lets traces larger than the device be replayed, and costs nothing.
 *
 * reserved is the sum of the sizes handed out and not yet returned.
 *
 * Devices: an upstream takes the memory of one device (cp_pool_opts.device):
 * device/managed/pinned through mem_alloc_on(dev); async from dev's current
 * pool, with cudaMallocAsync when the request's stream is on dev (exactly the
 * single-device path) and cudaMallocFromPoolAsync on that pool when the
 * stream belongs to another device.  Backends without the device entry
 * points (test doubles) get the device-less calls.
 */
#include "resource_impl.h"

#include <stdlib.h>

#define VIRT_BASE (UINT64_C(1) << 44)
#define VIRT_ALIGN UINT64_C(4096)

typedef struct upstream {
    cp_resource base;
    cp_upstream_kind kind;
    int dev;
    uint64_t next; /* virtual: the next address */
} upstream;

static cp_memkind memkind(cp_upstream_kind k)
{
    return k == CP_UP_MANAGED ? CP_MEM_MANAGED : k == CP_UP_PINNED ? CP_MEM_PINNED
                                                                   : CP_MEM_DEVICE;
}

static cp_status up_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    upstream *u = (upstream *)r;
    cp_status st;
    size_t n = bytes ? bytes : 1;
    switch (u->kind) {
    case CP_UP_VIRTUAL: {
        uint64_t step = (n + VIRT_ALIGN - 1) & ~(VIRT_ALIGN - 1);
        /* step > UINT64_MAX / 2 first: the subtraction below wraps for it
         * (two requests of 2^63 - 1 bytes were both handed out). */
        if (step < n || step > UINT64_MAX / 2 || u->next > UINT64_MAX / 2 - step)
            return cp_error_set(CP_ERR_OOM, "out of memory: virtual address space exhausted");
        *out = (void *)(uintptr_t)u->next;
        u->next += step;
        st = CP_OK;
        break;
    }
    case CP_UP_ASYNC:
        if (cp_be->stream_device && cp_be->stream_device(s) != u->dev) {
            cp_mempool *mp = NULL;
            st = cp_be->mempool_get_current_on(u->dev, &mp);
            if (st == CP_OK)
                st = cp_be->mempool_alloc(mp, out, n, s);
        } else {
            st = cp_be->mem_alloc_async(out, n, s);
        }
        break;
    default:
        st = cp_be->mem_alloc_on ? cp_be->mem_alloc_on(u->dev, out, n, memkind(u->kind))
                                 : cp_be->mem_alloc(out, n, memkind(u->kind));
        break;
    }
    if (st == CP_OK)
        r->reserved += bytes;
    return st;
}

static cp_status up_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    upstream *u = (upstream *)r;
    cp_status st = CP_OK;
    switch (u->kind) {
    case CP_UP_VIRTUAL:
        break;
    case CP_UP_ASYNC:
        st = cp_be->mem_free_async(p, s);
        break;
    default:
        st = cp_be->mem_free_on ? cp_be->mem_free_on(u->dev, p, memkind(u->kind))
                                : cp_be->mem_free(p, memkind(u->kind));
        break;
    }
    if (st == CP_OK)
        r->reserved -= bytes < r->reserved ? bytes : r->reserved;
    return st;
}

static void up_destroy(cp_resource *r)
{
    free(r);
}

#define UP_OPS(name) {.kind = name, .alloc = up_alloc, .free = up_free, .destroy = up_destroy}
static const cp_resource_ops up_ops[] = {
    UP_OPS("device"), UP_OPS("async"), UP_OPS("managed"), UP_OPS("pinned"), UP_OPS("virtual"),
};

cp_status cp_upstream_create_internal(cp_resource **out, cp_upstream_kind kind)
{
    return cp_upstream_create_on(out, kind, cp_be && cp_be->get_device ? cp_be->get_device() : 0);
}

cp_status cp_upstream_create_on(cp_resource **out, cp_upstream_kind kind, int dev)
{
    upstream *u;
    *out = NULL;
    if ((unsigned)kind > CP_UP_VIRTUAL)
        return cp_error_set(CP_ERR_INVALID, "unknown upstream %d", (int)kind);
    if (kind != CP_UP_VIRTUAL && !cp_be)
        return cp_error_set(CP_ERR_INVALID, "no backend selected (cp_backend_select)");
    u = malloc(sizeof *u);
    if (!u)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    cp_resource_init(&u->base, &up_ops[kind]);
    u->kind = kind;
    u->dev = dev;
    u->next = VIRT_BASE;
    *out = &u->base;
    return CP_OK;
}

cp_status cp_upstream_create(cp_resource **out, cp_upstream_kind kind)
{
    return cp_upstream_create_internal(out, kind);
}

const char *cp_upstream_name(int kind)
{
    return kind >= 0 && kind <= CP_UP_VIRTUAL ? up_ops[kind].kind : NULL;
}

uint64_t cp_upstream_alignment(cp_upstream_kind kind)
{
    /* cudaMalloc and cudaMallocAsync give at least 256-byte alignment. */
    return kind == CP_UP_VIRTUAL ? VIRT_ALIGN : 256;
}
