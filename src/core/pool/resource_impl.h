/*
 * resource_impl.h: what lies behind a cp_resource (internal to the core).
 *
 * A resource is this header followed by its implementation's state.  The
 * public entry points (resource.c) take the lock, call the ops and keep the
 * statistics; an implementation only keeps `reserved` (bytes it holds from
 * its upstream) and answers free_info.  Implementations never lock: the
 * entry point already holds the resource's lock when an op runs.
 */
#ifndef CUPOLA_RESOURCE_IMPL_H
#define CUPOLA_RESOURCE_IMPL_H

#include <sched.h>
#include <stdatomic.h>

#include "ptrmap.h"
#include "resource.h"

typedef struct cp_resource_ops {
    const char *kind;
    cp_status (*alloc)(cp_resource *r, size_t bytes, cp_stream *s, void **out);
    cp_status (*free)(cp_resource *r, void *p, size_t bytes, cp_stream *s);
    cp_status (*trim)(cp_resource *r, size_t keep_bytes);   /* NULL: nothing to do */
    cp_status (*reset)(cp_resource *r);                     /* NULL: unsupported */
    /* largest block that could be handed out now, and free reserved bytes */
    void (*free_info)(cp_resource *r, uint64_t *largest, uint64_t *free_bytes);
    /* reserved bytes of an adaptor, read from what it wraps (NULL: r->reserved) */
    uint64_t (*reserved)(cp_resource *r);
    void (*destroy)(cp_resource *r);
    /* NULL, or the page figures of a pool over virtual memory management */
    void (*vm_info)(cp_resource *r, cp_stats *out);
    /* NULL, or the calls made to the upstream (cp_stats.device_allocs/frees) */
    void (*device_calls)(cp_resource *r, uint64_t *allocs, uint64_t *frees);
    /* NULL, or the pool's figures of its own (cp_stats.extra) */
    void (*extra_stats)(cp_resource *r, cp_stats *out);
} cp_resource_ops;

struct cp_resource {
    const cp_resource_ops *ops;
    atomic_int lock;
    uint64_t reserved;     /* kept by the implementation */
    cp_stats st;           /* kept by the entry points (reserved read at stats time) */
    /* Fallback (cp_pool_opts.fallback): requests the pool refuses are served
     * straight by this upstream and remembered here, so free finds them. */
    cp_resource *fallback;
    cp_ptrmap fb_map;      /* address -> size (as a pointer-sized integer) */
    uint64_t fb_bytes;
    uint64_t reserved_max; /* the pool's max (cp_pool_opts.max): the most reserved +
                              fb_bytes may reach (0: no limit) */
    cp_clock *clock;       /* &own_clock, or an adaptor's inner resource's */
    cp_clock own_clock;
};

/* Initialises the common header (lock, zeroed stats). */
void cp_resource_init(cp_resource *r, const cp_resource_ops *ops);

/* A spin lock: the critical sections are tens of nanoseconds, far below what
 * a futex round trip costs; contended waiters yield the core (2-core hosts). */
static inline void cp_lock_slow(atomic_int *l)
{
    unsigned spins = 0;
    for (;;) {
        if (!atomic_load_explicit(l, memory_order_relaxed) &&
            !atomic_exchange_explicit(l, 1, memory_order_acquire))
            return;
        if (++spins > 64) {
            sched_yield();
            spins = 0;
        }
    }
}

static inline void cp_lock(atomic_int *l)
{
    if (!atomic_exchange_explicit(l, 1, memory_order_acquire))
        return;
    cp_lock_slow(l);
}

static inline void cp_unlock(atomic_int *l)
{
    atomic_store_explicit(l, 0, memory_order_release);
}

/* The size a pool sets aside for a request of bytes: rounded up to align (a
 * power of two), with a request of 0 counted as 1 so that every block has an
 * address of its own.  Every pool sizes its blocks with this; they differ
 * only in the alignment they pass (the caching pool's is at least 512). */
static inline uint64_t cp_round_size(uint64_t bytes, uint64_t align)
{
    if (bytes == 0)
        bytes = 1;
    return (bytes + align - 1) & ~(align - 1);
}

/* Upstreams as resources (upstream.c). */
cp_status cp_upstream_create_internal(cp_resource **out, cp_upstream_kind kind);
/* The alignment the upstream's addresses have by construction. */
uint64_t cp_upstream_alignment(cp_upstream_kind kind);

/* reserved bytes of any resource (locks it briefly) */
uint64_t cp_resource_reserved(cp_resource *r);

/* The adaptors' (limit.c, log.c) free_info and vm_info: the figures of the
 * resource they wrap, passed through (a vmm pool's pages, a pool's figures
 * of its own and its upstream calls). */
void cp_adaptor_free_info(cp_resource *inner, uint64_t *largest, uint64_t *free_bytes);
void cp_adaptor_vm_info(cp_resource *inner, cp_stats *out);

#endif /* CUPOLA_RESOURCE_IMPL_H */
