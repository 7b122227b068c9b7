/*
 * pool/cub.c: CUB's CachingDeviceAllocator (cub/util_allocator.cuh as the
 * CUDA Toolkit 13.0 ships it), modelled exactly, over any cupola upstream.
 *
 * Policy, exactly (CUB's, with its names):
 *  - Options: bin_growth, min_bin, max_bin, max_cached_bytes, defaults those
 *    of CUB's default constructor: 8, 3, 7 and 3 * 8^7 - 1 = 6,291,455 bytes
 *    (bins of 512 B, 4 KiB, 32 KiB, 256 KiB and 2 MiB).  An option left out
 *    takes that default even when others are given (CUB's other constructor
 *    has other defaults: pass all four to match a call of it).
 *  - A request of n bytes goes to bin k, the least k with bin_growth^k >= n
 *    (n = 0 and n = 1: k = 0), its size rounded up to bin_growth^k.  When n *
 *    bin_growth overflows 64 bits, CUB's check gives k = 64 and the size
 *    2^64 - 1 (which no upstream serves).
 *  - k > max_bin: the request is served at exactly n bytes by a new upstream
 *    allocation, never cached: freed to the upstream as soon as it is freed.
 *  - Otherwise k < min_bin becomes min_bin (the size bin_growth^min_bin,
 *    computed in 32 bits as CUB does: options that overflow it are refused).
 *    The cached blocks of bin k (all of one size) are searched oldest cached
 *    first, and the first one that the request's stream may take is reused:
 *    one whose associated stream is the request's, or (reuse = "event", the
 *    default and CUB's rule) one whose ready event has completed; with
 *    reuse = "stream" never another stream's, with reuse = "wait" any, the
 *    request's stream waiting on the block's ready event (not CUB: it never
 *    waits).  A reused block's associated stream becomes the request's.
 *  - Nothing reusable: a new upstream allocation of the bin's size.  If the
 *    upstream refuses (cudaMalloc's out of memory, or `max` passed), every
 *    cached block is freed to the upstream (all streams: CUB relies on
 *    cudaFree synchronizing; cupola waits for each block's ready event first)
 *    and the allocation is tried once more; a second refusal is out of memory.
 *  - Free: a block of a valid bin is cached when the bytes already cached
 *    plus its size stay within max_cached_bytes; its ready event is recorded
 *    on the stream it is freed on, which becomes its associated stream (CUB
 *    records on the stream it was allocated on and takes no stream at free:
 *    the same whenever a block is freed on its allocation stream, which is
 *    all CUB supports).  Otherwise the block goes back to the upstream at
 *    once (after its stream's work, as cudaFree waits for the device).
 *  - One device per pool (CUB keeps its figures per device): cached bytes
 *    are this pool's.
 *  - Ready events over the virtual upstream: replays have no device work, so
 *    every free counts as complete when a later request looks at it (no
 *    event is created); the model of a run whose streams are idle whenever
 *    CUB searches, which is what bench/cub_replay.cu enforces on the GPU.
 *    Over memory upstreams each cached block has a backend event, recorded
 *    at every free that caches it and queried as CUB queries it.
 *  - Beyond CUB: trim(keep) frees cached blocks in FreeAllCached's order
 *    (smallest bin first, oldest first within a bin) while more than keep
 *    bytes are cached; `max` is a hard limit on the bytes held from the
 *    upstream, met like a device that is full (free the cache and retry);
 *    `initial`, `release_threshold` and `grow = false` are refused (CUB has
 *    no such thing), and so is an alignment beyond the upstream's own (CUB
 *    hands out the upstream's pointers as they are).
 *  - Statistics: reserved is CUB's cached_bytes live + free; stats() adds
 *    device_allocs and device_frees (upstream calls that succeeded),
 *    device_alloc_failures, retries (free-the-cache-and-retry rounds),
 *    cached_bytes, cached_blocks and live_bytes (CUB's cached_bytes.live).
 */
#include "cub.h"
#include "model.h"
#include "resource_impl.h"

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define NBINS 65 /* 0 .. 64: CUB's overflow bin is sizeof(size_t) * 8 */
#define INVALID_BIN UINT32_MAX
#define DEF_GROWTH 8u
#define DEF_MIN 3u
#define DEF_MAX 7u

typedef struct cub_blk {
    uint64_t ptr, bytes;
    uint32_t bin;              /* INVALID_BIN: served exactly, never cached */
    uint8_t recorded;          /* ev recorded since the block was created */
    uint64_t sid;              /* associated stream (cp_so_sid) */
    cp_event *ev;              /* ready event (memory upstreams), made at first cache */
    struct cub_blk *prev, *next; /* its bin's list while cached; spare list */
} cub_blk;

typedef struct cub_bin {
    cub_blk *head, *tail; /* oldest cached first */
} cub_bin;

typedef struct cub {
    cp_resource base;
    cp_resource *up;
    cp_upstream_kind upk;
    cp_reuse reuse;
    int events;                /* memory upstream with a backend: real ready events */
    uint64_t growth, min_bin, max_bin, min_bin_bytes, max_cached;
    uint64_t max;              /* hard limit on bytes held (0: none) */
    cub_bin bins[NBINS];
    uint64_t top;              /* bins below top may be non-empty (largest_free) */
    cp_ptrmap live;            /* address -> cub_blk */
    uint64_t cached_free, cached_live, ncached;
    uint64_t up_allocs, up_frees, up_fail, retries;
    cub_blk *spare;
} cub;

/* CUB's NearestPowerOf: the least power of base at or above value, and its
 * exponent; its overflow check is kept as it is (products wrap). */
static void nearest_power(uint64_t base, uint64_t value, uint64_t *power, uint64_t *rounded)
{
    uint64_t p = 0, r = 1;
    if (value * base < value) {
        *power = 64;
        *rounded = UINT64_MAX;
        return;
    }
    while (r < value) {
        /* Where CUB's check above misses a wrap its loop would wrap too
         * (requests near 2^64 only): the overflow bin, never a hang. */
        if (__builtin_mul_overflow(r, base, &r)) {
            *power = 64;
            *rounded = UINT64_MAX;
            return;
        }
        p++;
    }
    *power = p;
    *rounded = r;
}

static uint64_t sid_of(cp_stream *s)
{
    return s && cp_be ? cp_be->stream_id(s) : 0;
}

static cub_blk *blk_new(cub *c)
{
    cub_blk *b = c->spare;
    if (b) {
        c->spare = b->next;
        memset(b, 0, sizeof *b);
        return b;
    }
    return calloc(1, sizeof *b);
}

static void blk_drop(cub *c, cub_blk *b)
{
    if (b->ev)
        cp_be->event_destroy(b->ev);
    b->ev = NULL;
    b->next = c->spare;
    c->spare = b;
}

static void bin_unlink(cub *c, cub_blk *b)
{
    cub_bin *bn = &c->bins[b->bin];
    if (b->prev)
        b->prev->next = b->next;
    else
        bn->head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        bn->tail = b->prev;
    b->prev = b->next = NULL;
    c->cached_free -= b->bytes;
    c->ncached--;
}

static void bin_append(cub *c, cub_blk *b)
{
    cub_bin *bn = &c->bins[b->bin];
    b->next = NULL;
    b->prev = bn->tail;
    if (bn->tail)
        bn->tail->next = b;
    else
        bn->head = b;
    bn->tail = b;
    c->cached_free += b->bytes;
    c->ncached++;
    if (b->bin + 1 > c->top)
        c->top = b->bin + 1;
}

/* Whether stream sid (s) may take cached block b now (CUB's is_reusable). */
static int reusable(cub *c, cub_blk *b, uint64_t sid, cp_stream *s)
{
    int done = 0;
    if (b->sid == sid)
        return 1;
    if (c->reuse == CP_REUSE_STREAM)
        return 0;
    if (!c->events)
        return 1; /* no device work behind a replay: complete */
    if (!b->recorded)
        return 0; /* its record failed: only its own stream may take it */
    if (c->reuse == CP_REUSE_WAIT)
        return cp_be->stream_wait_event(s, b->ev) == CP_OK;
    /* CUB takes any answer but "not ready" as complete. */
    if (cp_event_done(b->ev, &done) != CP_OK)
        return 1;
    return done;
}

static cp_status up_alloc(cub *c, uint64_t bytes, cp_stream *s, void **out)
{
    cp_status st;
    if (c->max && (bytes > c->max || c->base.reserved > c->max - bytes)) {
        c->up_fail++;
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes more would pass the pool's "
                            "max of %llu bytes", (unsigned long long)bytes,
                            (unsigned long long)c->max);
    }
    if (bytes > SIZE_MAX) {
        c->up_fail++;
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes", (unsigned long long)bytes);
    }
    st = cp_resource_alloc(c->up, (size_t)bytes, s, out);
    if (st == CP_OK) {
        c->up_allocs++;
        c->base.reserved += bytes;
    } else if (st == CP_ERR_OOM) {
        c->up_fail++;
    }
    return st;
}

/* Gives b's memory back upstream: the caller has made sure no work on any
 * stream still uses it (or, async, orders the free on s). */
static cp_status up_free(cub *c, cub_blk *b, cp_stream *s)
{
    cp_status st = cp_resource_free(c->up, (void *)(uintptr_t)b->ptr, (size_t)b->bytes, s);
    if (st == CP_OK) {
        c->up_frees++;
        c->base.reserved -= b->bytes;
    }
    return st;
}

/* A cached block back to the upstream: after its ready event (cudaFree
 * would wait for the whole device). */
static cp_status free_cached(cub *c, cub_blk *b)
{
    cp_status st;
    bin_unlink(c, b);
    if (b->ev && b->recorded)
        (void)cp_be->event_synchronize(b->ev);
    st = up_free(c, b, NULL);
    blk_drop(c, b);
    return st;
}

/* CUB's FreeAllCached for this pool's device, while more than keep bytes
 * are cached: smallest bin first, oldest first. */
static cp_status free_all_cached(cub *c, uint64_t keep)
{
    uint64_t k;
    for (k = 0; k < c->top && c->cached_free > keep; k++) {
        while (c->bins[k].head && c->cached_free > keep) {
            cp_status st = free_cached(c, c->bins[k].head);
            if (st != CP_OK)
                return st;
        }
    }
    while (c->top && !c->bins[c->top - 1].head)
        c->top--;
    return CP_OK;
}

static cp_status cub_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cub *c = (cub *)r;
    uint64_t sid = sid_of(s), bin, rbytes;
    cub_blk *b;
    void *p = NULL;
    cp_status st;

    nearest_power(c->growth, bytes, &bin, &rbytes);
    if (bin > c->max_bin) {
        bin = INVALID_BIN;
        rbytes = bytes;
    } else {
        if (bin < c->min_bin) {
            bin = c->min_bin;
            rbytes = c->min_bin_bytes;
        }
        for (b = c->bins[bin].head; b; b = b->next) {
            if (reusable(c, b, sid, s)) {
                bin_unlink(c, b);
                b->sid = sid;
                if (cp_ptrmap_put(&c->live, b->ptr, b) != 0) {
                    bin_append(c, b);
                    return cp_error_set(CP_ERR_OOM, "out of host memory for the live blocks");
                }
                c->cached_live += b->bytes;
                *out = (void *)(uintptr_t)b->ptr;
                return CP_OK;
            }
        }
    }
    st = up_alloc(c, rbytes, s, &p);
    if (st == CP_ERR_OOM) {
        /* CUB: free every cached block of the device, then once more. */
        c->retries++;
        st = free_all_cached(c, 0);
        if (st != CP_OK)
            return st;
        st = up_alloc(c, rbytes, s, &p);
    }
    if (st != CP_OK)
        return st;
    b = blk_new(c);
    if (!b || cp_ptrmap_put(&c->live, (uint64_t)(uintptr_t)p, b) != 0) {
        cub_blk tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.ptr = (uint64_t)(uintptr_t)p;
        tmp.bytes = rbytes;
        (void)up_free(c, &tmp, s);
        if (b) {
            b->next = c->spare;
            c->spare = b;
        }
        return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's block list");
    }
    b->ptr = (uint64_t)(uintptr_t)p;
    b->bytes = rbytes;
    b->bin = (uint32_t)bin;
    b->sid = sid;
    c->cached_live += rbytes;
    *out = p;
    return CP_OK;
}

static cp_status cub_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    cub *c = (cub *)r;
    cub_blk *b = cp_ptrmap_del(&c->live, (uint64_t)(uintptr_t)p);
    cp_status st;
    (void)bytes;
    if (!b)
        return cp_error_set(CP_ERR_INVALID, "free of %p, which is not a live block of this "
                            "cub pool", p);
    c->cached_live -= b->bytes;
    if (b->bin != INVALID_BIN && c->cached_free + b->bytes <= c->max_cached) {
        b->sid = sid_of(s);
        if (c->events) {
            if (!b->ev && cp_be->event_create(&b->ev, 0) != CP_OK)
                b->ev = NULL;
            b->recorded = b->ev && cp_be->event_record(b->ev, s) == CP_OK;
        }
        bin_append(c, b);
        return CP_OK;
    }
    /* Not cached: back to the upstream now, after the work of its stream
     * (cudaFree waits for the device; the async upstream orders on s). */
    if (c->events && c->upk != CP_UP_ASYNC)
        (void)cp_be->stream_synchronize(s);
    st = up_free(c, b, s);
    blk_drop(c, b);
    return st;
}

static cp_status cub_trim(cp_resource *r, size_t keep)
{
    return free_all_cached((cub *)r, keep);
}

static void cub_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    cub *c = (cub *)r;
    uint64_t k = c->top;
    *largest = 0;
    while (k > 0 && !c->bins[k - 1].head)
        k--;
    if (k)
        *largest = c->bins[k - 1].head->bytes;
    *free_bytes = c->cached_free;
}

static void cub_extra(cp_resource *r, cp_stats *out)
{
    cub *c = (cub *)r;
    const struct {
        const char *name;
        uint64_t v;
    } f[] = {
        {"device_allocs", c->up_allocs},   {"device_frees", c->up_frees},
        {"device_alloc_failures", c->up_fail}, {"retries", c->retries},
        {"cached_bytes", c->cached_free},  {"cached_blocks", c->ncached},
        {"live_bytes", c->cached_live},
    };
    size_t i;
    for (i = 0; i < sizeof f / sizeof f[0] && out->nextra < CP_STATS_EXTRA; i++) {
        out->extra[out->nextra].name = f[i].name;
        out->extra[out->nextra++].value = f[i].v;
    }
}

static void cub_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    cub *c = (cub *)r;
    *allocs = c->up_allocs;
    *frees = c->up_frees;
}

static void cub_destroy(cp_resource *r)
{
    cub *c = (cub *)r;
    uint64_t i;
    cub_blk *b;
    (void)free_all_cached(c, 0);
    /* live blocks: the caller promised none; return any left all the same */
    for (i = 0; c->live.slots && i <= c->live.mask; i++) {
        if (c->live.slots[i].key) {
            b = c->live.slots[i].val;
            (void)up_free(c, b, NULL);
            blk_drop(c, b);
        }
    }
    cp_ptrmap_fini(&c->live);
    while ((b = c->spare) != NULL) {
        c->spare = b->next;
        free(b);
    }
    cp_resource_destroy(c->up);
    free(c);
}

static const cp_resource_ops cub_ops = {
    .kind = "cub",
    .alloc = cub_alloc,
    .free = cub_free,
    .trim = cub_trim,
    .free_info = cub_free_info,
    .destroy = cub_destroy,
    .extra_stats = cub_extra,
    .device_calls = cub_device_calls,
};

/* growth^k in 32 bits, as CUB's IntPow computes min_bin_bytes; 0 when it
 * would wrap. */
static uint64_t pow32(uint64_t growth, uint64_t k)
{
    uint64_t v = 1;
    while (k--) {
        v *= growth;
        if (v > UINT_MAX)
            return 0;
    }
    return v;
}

static cp_status cub_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    const cp_cub_opts *co = (const cp_cub_opts *)cp_pool_own_const(o);
    uint64_t growth = co->bin_growth, min_bin = co->min_bin, max_bin = co->max_bin;
    uint64_t max_cached = co->max_cached_bytes, mbb = 0;
    cub *c;
    cp_status st = CP_OK;

    *out = NULL;
    if (growth < 2 || growth > UINT_MAX)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'bin_growth' must be an integer "
                          "from 2 to 4294967295 (CUB's bins never grow with 1 and put every "
                          "request in the overflow bin with 0), not %llu",
                          (unsigned long long)growth);
    else if (min_bin > UINT_MAX)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'min_bin' must be an integer "
                          "from 0 to 4294967295, not %llu", (unsigned long long)min_bin);
    else if (max_bin > UINT_MAX)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'max_bin' must be an integer "
                          "from 0 to 4294967295, not %llu", (unsigned long long)max_bin);
    else if ((mbb = pow32(growth, min_bin)) == 0)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'min_bin' = %llu makes "
                          "bin_growth^min_bin (%llu^%llu) pass 2^32 - 1, and CUB computes the "
                          "smallest bin's size in 32 bits", (unsigned long long)min_bin,
                          (unsigned long long)growth, (unsigned long long)min_bin);
    else if (o->initial)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'initial' is not supported (CUB's "
                          "allocator reserves nothing at creation), not %llu",
                          (unsigned long long)o->initial);
    else if (!o->grow)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'grow' = false is not supported "
                          "(CUB's allocator always asks the upstream for what it lacks)");
    else if (o->release_threshold)
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'release_threshold' is not "
                          "supported (max_cached_bytes bounds the cache), not %llu",
                          (unsigned long long)o->release_threshold);
    else if (o->alignment > cp_upstream_alignment(o->upstream))
        st = cp_error_set(CP_ERR_INVALID, "kind 'cub': option 'alignment' = %llu is more than "
                          "the %s upstream's own %llu (CUB hands out its pointers as they are)",
                          (unsigned long long)o->alignment, cp_upstream_name(o->upstream),
                          (unsigned long long)cp_upstream_alignment(o->upstream));
    if (st != CP_OK) {
        cp_resource_destroy(up);
        return st;
    }
    c = calloc(1, sizeof *c);
    if (!c || cp_ptrmap_init(&c->live, 64) != 0) {
        free(c);
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&c->base, &cub_ops);
    c->up = up;
    c->upk = o->upstream;
    c->reuse = o->reuse;
    c->events = o->upstream != CP_UP_VIRTUAL && cp_be != NULL;
    c->growth = growth;
    c->min_bin = min_bin;
    c->max_bin = max_bin;
    c->min_bin_bytes = mbb;
    c->max_cached = max_cached;
    c->max = o->max;
    *out = &c->base;
    return CP_OK;
}

/* Its options: CUB's constructor's arguments, which go together. */
static const cp_opt cub_opts[] = {
    {.name = "bin_growth", .type = CP_OPT_U32, .offset = offsetof(cp_cub_opts, bin_growth),
     .def = DEF_GROWTH},
    {.name = "min_bin", .type = CP_OPT_U32, .offset = offsetof(cp_cub_opts, min_bin),
     .def = DEF_MIN},
    {.name = "max_bin", .type = CP_OPT_U32, .offset = offsetof(cp_cub_opts, max_bin),
     .def = DEF_MAX},
    /* 3 * 8^7 - 1: CUB's default constructor's cap */
    {.name = "max_cached_bytes", .type = CP_OPT_SIZE,
     .offset = offsetof(cp_cub_opts, max_cached_bytes), .def = 6291455},
    {.name = NULL},
};

/* The registry's row (model.h). */
const cp_model cp_cub_model = {
    .name = "cub",
    .create = cub_create,
    .opts = cub_opts,
    .opts_size = sizeof(cp_cub_opts),
    .traits = CP_MODEL_TOGETHER,
};
