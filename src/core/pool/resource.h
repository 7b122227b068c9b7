/*
 * resource.h: the allocator interface of cupola's C pools (RMM's shape).
 *
 * A cp_resource hands out blocks of device-visible memory, stream-ordered:
 * alloc(bytes, stream) and free(ptr, bytes, stream).  Pools (one file each
 * in pool/: arena.c, freelist.c, tlsf.c, caching.c, vmm.c, plugin.c and the
 * models of other systems' allocators; each registers as one row of the
 * registry, model.h) sub-allocate from an upstream resource (upstream.c);
 * adaptors wrap any resource and add a limit on the bytes in use (limit.c)
 * or a log in RMM's CSV format (log.c).  The public entry points below
 * (resource.c) take the resource's lock, call its ops and keep the
 * statistics, so every allocator counts the same way and none of them
 * repeats that code.
 *
 * Plain C: never includes lua.h.  Compiles as C and C++.
 */
#ifndef CUPOLA_RESOURCE_H
#define CUPOLA_RESOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "pool/clock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_resource cp_resource;

/* Statistics of one resource, in bytes unless named otherwise. */
#define CP_STATS_EXTRA 12
typedef struct cp_stats {
    uint64_t used;          /* sum of the sizes of live blocks, as requested */
    uint64_t used_peak;
    uint64_t reserved;      /* taken from the upstream and not yet returned */
    uint64_t reserved_peak;
    uint64_t allocs;        /* successful allocations */
    uint64_t frees;
    uint64_t failed;        /* allocations answered with out of memory */
    uint64_t largest_free;  /* largest block the pool could hand out now */
    uint64_t free_bytes;    /* reserved bytes not held by live blocks */
    double fragmentation;   /* 1 - largest_free / free_bytes (0 when no free) */
    /* pools over virtual memory management (vmm); 0 for the others */
    uint64_t page_bytes;    /* the physical page (the device's granularity) */
    uint64_t pages_mapped;  /* physical pages mapped now (reserved / page_bytes) */
    uint64_t maps;          /* pages mapped since creation */
    uint64_t unmaps;        /* pages unmapped since creation */
    /* calls to the upstream (cudaMalloc / cudaFree, or maps / unmaps) since
     * creation, where the pool counts them (0 otherwise) */
    uint64_t device_allocs;
    uint64_t device_frees;
    /* a vmm pool's default policy (vmm.c); 0 with release_threshold given */
    int by_time;            /* nonzero: the pool follows it */
    double decay_window;    /* seconds a page stays idle before it may go */
    uint64_t recent_peak;   /* bytes of the most demand over that window */
    double map_budget;      /* seconds of mapping it may still spend */
    /* Figures of one kind of pool under names of its own (cub: its
     * upstream calls, retries and cache), in the order the pool gives them;
     * names are static strings. */
    struct {
        const char *name;
        uint64_t value;
    } extra[CP_STATS_EXTRA];
    int nextra;
} cp_stats;

/* How a block freed on one stream may be reused on another. */
typedef enum cp_reuse {
    CP_REUSE_STREAM = 0, /* only on the stream it was freed on */
    CP_REUSE_EVENT,      /* elsewhere once the free's event has completed */
    CP_REUSE_WAIT        /* elsewhere at once, the new stream waiting on the event */
} cp_reuse;

/* Upstreams: where a pool's memory comes from. */
typedef enum cp_upstream_kind {
    CP_UP_DEVICE = 0, /* cudaMalloc */
    CP_UP_ASYNC,      /* cudaMallocAsync from the device's current pool */
    CP_UP_MANAGED,    /* cudaMallocManaged */
    CP_UP_PINNED,     /* cudaMallocHost */
    CP_UP_VIRTUAL     /* addresses only, no memory behind them */
} cp_upstream_kind;

/* Room for one model's own options (its struct: cp_cub_opts in pool/cub.h,
 * cp_bfc_opts, cp_torch_opts, ...), inside cp_pool_opts so that a copy of
 * the options is a copy of everything. */
#define CP_MODEL_OPTS_MAX 64
typedef union cp_model_opts {
    unsigned char bytes[CP_MODEL_OPTS_MAX];
    uint64_t u;     /* (alignment for the structs kept here) */
    double d;
    const void *p;
} cp_model_opts;

/* Everything cupola.pool{...} accepts, already validated by the binding;
 * made by cp_pool_opts_init (or zeroed, then set field by field). */
typedef struct cp_pool_opts {
    const char *kind;         /* one of cp_pool_kind_name's */
    cp_upstream_kind upstream;
    uint64_t initial;         /* bytes reserved at creation (0: none) */
    int grow;                 /* may reserve more from upstream when full */
    uint64_t max;             /* hard limit on reserved bytes (0: none) */
    uint64_t alignment;       /* power of two, >= 1; default 256 */
    uint64_t release_threshold; /* idle bytes (entirely free chunks) a pool
                                   keeps cached when it grows; 0: return idle
                                   chunks as needed to stay within the peak;
                                   UINT64_MAX: never return before trim */
    cp_reuse reuse;
    int fallback;             /* serve what the pool cannot from upstream */
    int device;               /* whose memory the upstream takes (multigpu); streams of
                                 any device may use the pool */
    int release_threshold_set; /* nonzero: the caller gave release_threshold (the
                                 vmm pool then keeps exactly that many idle bytes
                                 instead of deciding by time, vmm.c) */
    cp_clock_kind clock;      /* the pool's clock (pool/clock.h): wall or manual */
    /* The model's own options (pool/model.h): the struct of the kind
     * own_kind names, read through cp_pool_own.  A pool made while
     * own_kind is not kind (NULL: never set) gets its kind's defaults. */
    const char *own_kind;
    cp_model_opts own;
} cp_pool_opts;

/* o set to cupola.pool's defaults for kind (a static string, or one that
 * outlives o), its model's options included. */
void cp_pool_opts_init(cp_pool_opts *o, const char *kind);
/* o's model options, to read or set as its kind's struct (cp_torch_opts for
 * kind "torch", ...); where o holds none of its kind yet (a zeroed o whose
 * kind was set), they are made the kind's defaults first. */
void *cp_pool_own(cp_pool_opts *o);
/* The same to read, for the model itself (cp_pool_create made them its). */
static inline const void *cp_pool_own_const(const cp_pool_opts *o)
{
    return o->own.bytes;
}

/* A pool described in one string, "KIND[,KEY=VALUE]..." (pool/spec.c says
 * which keys and how a value is quoted): fills *o with cupola.pool's
 * defaults and the spec's values; o->kind and the string values point into
 * buf (buflen bytes; as long as the spec is enough).  CP_ERR_INVALID naming
 * the key and value that are wrong.  Ranges a kind checks itself (cub's
 * bins) are checked by cp_pool_create. */
cp_status cp_pool_spec_parse(const char *spec, cp_pool_opts *o, char *buf, size_t buflen);

/* The policy of a pool serving a framework (pool/spec.c states it): where
 * o's kind keeps its idle chunks when serving (freelist, tlsf and caching:
 * the trait CP_MODEL_KEEPS_IDLE, pool/model.h) and release_threshold was not
 * given, release_threshold = CP_SERVE_KEEP_ALL (memory once taken is kept;
 * the upstream's refusal frees the idle chunks and retries; trim returns
 * them).  Anything else is left as it is. */
#define CP_SERVE_KEEP_ALL (UINT64_MAX >> 1) /* the largest a spec or cupola.pool takes */
void cp_pool_spec_serve(cp_pool_opts *o);

/* Creates a pool; CP_ERR_INVALID for an unknown kind or impossible options,
 * CP_ERR_OOM when the initial reservation cannot be had. */
cp_status cp_pool_create(cp_resource **out, const cp_pool_opts *opts);

/* The names users choose from, in the order they are listed: the i-th
 * pool kind cp_pool_create knows (cp_model_at's, pool/model.h), upstream
 * (by cp_upstream_kind) and reuse policy (by cp_reuse); NULL past the last. */
const char *cp_pool_kind_name(int i);
const char *cp_upstream_name(int kind);
const char *cp_reuse_name(int reuse);
/* ... and the clock (by cp_clock_kind: "wall", "manual"). */
const char *cp_clock_name(int kind);

/* The entry points.  alloc returns CP_ERR_OOM (and counts a failure) when the
 * request cannot be served; the resource stays consistent.  free must be
 * given the size that was allocated; s is the stream whose work last used
 * the block, after which the block may be reused. */
cp_status cp_resource_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out);
cp_status cp_resource_free(cp_resource *r, void *p, size_t bytes, cp_stream *s);
cp_status cp_resource_trim(cp_resource *r, size_t keep_bytes);
/* Batches (trace replay): the caller takes the resource's lock once and
 * makes many calls under it, paying the lock's atomic operation once per
 * batch instead of once per call.  The _locked calls are alloc and free
 * exactly, statistics included; no other entry point may be called on r
 * while the lock is held (it is not recursive). */
void cp_resource_lock(cp_resource *r);
void cp_resource_unlock(cp_resource *r);
cp_status cp_resource_alloc_locked(cp_resource *r, size_t bytes, cp_stream *s, void **out);
cp_status cp_resource_free_locked(cp_resource *r, void *p, size_t bytes, cp_stream *s);
cp_status cp_resource_reset(cp_resource *r); /* CP_ERR_UNSUPPORTED unless arena */
void cp_resource_stats(cp_resource *r, cp_stats *out);
const char *cp_resource_kind(const cp_resource *r);
/* Returns all memory to the upstream; the caller guarantees no live blocks
 * (the binding refuses to close a pool that has some). */
void cp_resource_destroy(cp_resource *r);

/* An upstream on its own, as a resource (RMM's shape): every block is a
 * separate upstream allocation.  The name is "device", "async", ... */
cp_status cp_upstream_create(cp_resource **out, cp_upstream_kind kind);
/* The same, taking device dev's memory (multigpu). */
cp_status cp_upstream_create_on(cp_resource **out, cp_upstream_kind kind, int dev);

/* Adaptors: each returns a new resource that owns `inner`. */
cp_status cp_limit_adaptor(cp_resource **out, cp_resource *inner, uint64_t limit);
cp_status cp_log_adaptor(cp_resource **out, cp_resource *inner, const char *csv_path);

/* ---- Out of memory that explains itself ----------------------
 * A refused cp_resource_alloc leaves a message saying what was requested and
 * the pool's free, largest free block, fragmentation, reserved and used
 * bytes; the same figures, for this thread's last refusal, come from here. */
typedef struct cp_oom_figures {
    uint64_t requested;
    uint64_t free;          /* reserved bytes not held by live blocks */
    uint64_t largest_free;
    double fragmentation;   /* 1 - largest_free / free */
    uint64_t reserved;
    uint64_t used;
    const char *kind;       /* the refusing resource's kind (static string) */
} cp_oom_figures;
void cp_resource_last_oom(cp_oom_figures *out);
/* The resource's clock (pool/clock.h), in seconds since it was created:
 * the wall clock unless cp_pool_opts.clock made it manual.  Adaptors share
 * the clock of what they wrap.  set_time sets a manual clock's reading:
 * CP_ERR_INVALID for a wall clock, a time that is not finite, or one before
 * the reading now (a clock never goes back). */
double cp_resource_time(cp_resource *r);
cp_clock_kind cp_resource_clock_kind(cp_resource *r);
cp_status cp_resource_set_time(cp_resource *r, double t);
/* The clock itself, for a caller that drives it while holding the
 * resource's lock (a replay on the trace's timestamps, trace.h); it keeps
 * the reading from going back. */
cp_clock *cp_resource_clock(cp_resource *r);

/* Reserved bytes of any resource now (cheap: no free-space walk). */
uint64_t cp_resource_reserved(cp_resource *r);
/* The same with the resource's lock already held (cp_resource_lock). */
uint64_t cp_resource_reserved_locked(cp_resource *r);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_RESOURCE_H */
