/*
 * host_mempool.c: CUDA's stream-ordered memory pools (cudaMemPool_t,
 * cudaMallocAsync/cudaFreeAsync) emulated for the host backend.
 *
 * Policy, exactly:
 *  - A pool reserves memory from the OS in chunks of max(2 MiB, request
 *    rounded up to 2 MiB), 256-byte aligned, never exceeding max_size
 *    (when set; the last chunk may then be smaller).  When a new chunk cannot
 *    be had, entirely unused chunks are returned first and the request is
 *    tried once more; then it fails with CP_ERR_OOM and nothing changes.
 *  - Requests are rounded up to 256 bytes (the pool's granularity); used
 *    counts the rounded sizes of live allocations, reserved the chunks held.
 *    Both keep a high-water mark, which can only be reset to the current value.
 *  - Sub-allocation is best fit over the pool's free blocks (kept in
 *    power-of-two size bins), splitting the chosen block; adjacent free
 *    blocks coalesce when their reuse constraints agree (see below).
 *  - mem_free_async(p, s) enqueues a marker on s; the block remembers
 *    (sid, ticket) of that marker: the point after which no work on s touches
 *    it.  used drops at once.  A freed block may then be handed to an
 *    allocation on stream t when
 *      1. t is s (stream order makes it safe), or
 *      2. reuse_allow_opportunistic and the marker has run (the block then
 *         becomes unconstrained), or
 *      3. reuse_follow_event_dependencies and t has waited (stream_wait_event
 *         or an inserted wait) for a position of s at or after the marker;
 *         only direct waits count, not transitive ones, or
 *      4. reuse_allow_internal_dependencies: the pool enqueues on t a wait
 *         for the marker, then hands the block out.  Blocks usable by 1-3 are
 *         preferred to those needing 4; among each, the smallest that fits.
 *    Two free blocks merge if both are unconstrained or both were freed on
 *    the same stream (the merged block keeps the later ticket).
 *  - Synchronization points (device, stream, event synchronize) return
 *    chunks that are entirely free, and whose frees have run, to the OS while
 *    reserved > release_threshold (default 0).  trim(keep) does the same
 *    down to keep.
 *  - mem_free_async finds the pool through a pointer -> block hash table, as
 *    cudaFreeAsync is not told the pool.
 *  - The default pool is a singleton created on first use that lives for the
 *    process; it is the current pool until set_current names another, and
 *    again when that pool is destroyed.  mempool_destroy returns at once;
 *    the pool's memory, live allocations included, goes back to the OS then
 *    if no queued free on it is pending, else at the first synchronization
 *    point (or exit) after those frees have run, as CUDA defers it.
 *  - location_host pools are host memory like all others; as in CUDA they
 *    cannot be the current pool nor have posix fd handles (CP_ERR_INVALID).
 *  - Several devices (CUPOLA_HOST_DEVICES): each pool belongs to
 *    props.device; each device has its own default pool and current pool.
 *    A pool's chunks are charged to its device's memory account
 *    (cp_host_mem_charge), which refuses what exceeds the device's share of
 *    the host's memory when there is more than one device.  As in CUDA, only
 *    the owning device may touch a pool's memory until set_access grants
 *    another one "r" or "rw"; access is recorded per device and checked by the
 *    host's kernels and memsets (cp_host_pool_check_access; copies need no
 *    access, as cudaMemcpyPeerAsync does not); the owning device always keeps
 *    read-write.
 *  - A pool created with handle_posix_fd takes its chunks from one memfd
 *    (memfd_create), each chunk mapped MAP_SHARED at its own offset in the
 *    file (offsets grow, never reused; a released chunk's pages are punched
 *    out), so another process that receives the fd can map the same bytes:
 *    a block exports (file offset, size), the importer maps that window.  An
 *    imported pool is only the fd; its pointers are mappings that
 *    mem_free_async unmaps once the free's marker has run (at the next
 *    synchronization point).  The file keeps the memory alive for as long as
 *    any process maps it, so an importer's buffers stay valid after the
 *    exporting process frees them or closes its pool.
 *  - All state is protected by the host backend's global lock (host_mempool.h).
 *
 * The pools' memory (blocks, chunks) and their sharing across devices and
 * processes are in files of their own (host_mempool_impl.h lists them).
 */
#include "host_mempool_impl.h"
#include "host_account.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* host.c's streams, handed down once (host_mempool.h says why). */
const cp_host_sched *S;

void cp_host_pool_bind(const cp_host_sched *sched)
{
    S = sched;
}

static cp_mempool *pools;                        /* every live pool, the defaults included */
static cp_mempool *default_pool[CP_MAX_DEVICES]; /* created on first use */
static cp_mempool *current_pool[CP_MAX_DEVICES]; /* NULL: the default */

/* ---- pools ------------------------------------------------------------------- */

cp_mempool *cp_host_pool_new(const cp_mempool_props *props)
{
    cp_mempool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (props)
        p->props = *props;
    p->props.device = cp_host_account_index(p->props.device);
    p->memfd = -1;
    /* as CUDA: only the owning device may touch the pool until set_access */
    memset(p->access, CP_ACCESS_NONE, sizeof p->access);
    p->access[p->props.device] = CP_ACCESS_READWRITE;
    /* CUDA's defaults: every reuse policy enabled, threshold 0 */
    p->follow_events = p->opportunistic = p->internal_deps = 1;
    p->next = pools;
    if (pools)
        pools->prev = p;
    pools = p;
    return p;
}

static cp_mempool *default_locked(int dev)
{
    dev = cp_host_account_index(dev);
    if (!default_pool[dev]) {
        cp_mempool_props props;
        memset(&props, 0, sizeof props);
        props.device = dev;
        default_pool[dev] = cp_host_pool_new(&props);
        if (default_pool[dev])
            default_pool[dev]->is_default = 1;
    }
    return default_pool[dev];
}

cp_status cp_host_pool_default_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_default: out is NULL");
    S->lock();
    *out = default_locked(dev);
    S->unlock();
    return *out ? CP_OK : cp_error_set(CP_ERR_OOM, "host backend: out of memory for a pool");
}

cp_status cp_host_pool_default(cp_mempool **out)
{
    CP_GUARD();
    return cp_host_pool_default_on(S->current_device(), out);
}

cp_status cp_host_pool_create(cp_mempool **out, const cp_mempool_props *props)
{
    CP_GUARD();
    int fd = -1;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_create: out is NULL");
    *out = NULL;
    if (props && props->location_host && props->handle_posix_fd)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "a pool of host memory cannot be exported "
                             "(posix fd handles)");
    if (props && (props->device < 0 || props->device >= cp_host_account_devices()))
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             props->device, cp_host_account_devices());
    if (props && props->handle_posix_fd) {
        fd = memfd_create("cupola-mempool", MFD_CLOEXEC);
        if (fd < 0)
            return cp_error_set(CP_ERR_BACKEND, "memfd_create: %s (a shareable pool)",
                                strerror(errno));
    }
    S->lock();
    *out = cp_host_pool_new(props);
    if (*out)
        (*out)->memfd = fd;
    S->unlock();
    if (!*out && fd >= 0)
        close(fd);
    return *out ? CP_OK : cp_error_set(CP_ERR_OOM, "host backend: out of memory for a pool");
}

/* 1 when no queued work can still touch the pool's memory. */
static int pool_quiet(const cp_mempool *p)
{
    for (const hchunk *c = p->chunks; c; c = c->next)
        for (const hblock *b = c->first; b; b = b->next)
            if (b->free && !S->done_locked(b->fsid, b->fticket))
                return 0;
    return 1;
}

/* Returns every chunk to the OS and frees the pool; its live blocks must
 * already be out of the pointer map. */
static void pool_free_all(cp_mempool *p)
{
    while (p->chunks) {
        hchunk *c = p->chunks;
        for (hblock *b = c->first; b;) {
            hblock *next = b->next;
            free(b);
            b = next;
        }
        p->chunks = c->next;
        cp_host_pool_chunk_memory_free(p, c);
        free(c);
    }
    if (p->memfd >= 0)
        close(p->memfd);
    free(p);
}

/* Destroyed pools whose memory queued work may still touch: freed at the
 * next synchronization point (or exit) once their frees have run. */
static cp_mempool *doomed;

static void reap_doomed_locked(int force)
{
    cp_mempool **pp = &doomed;
    while (*pp) {
        cp_mempool *p = *pp;
        if (force || pool_quiet(p)) {
            *pp = p->next;
            pool_free_all(p);
        } else {
            pp = &p->next;
        }
    }
}

/* As cudaMemPoolDestroy: returns at once and never waits for the device;
 * memory that pending frees may still touch is returned once they have run. */
cp_status cp_host_pool_destroy(cp_mempool *p)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_destroy: pool is NULL");
    S->lock();
    if (p->is_default) {
        S->unlock();
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the device's default pool cannot be destroyed");
    }
    if (p->prev)
        p->prev->next = p->next;
    else
        pools = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
    if (current_pool[p->props.device] == p)
        current_pool[p->props.device] = NULL;
    /* live blocks leave the map now, so a late free reports a foreign pointer */
    for (hchunk *c = p->chunks; c; c = c->next)
        for (hblock *b = c->first; b; b = b->next)
            if (!b->free)
                cp_host_pool_map_remove(b->ptr);
    if (pool_quiet(p)) {
        pool_free_all(p);
    } else {
        p->next = doomed;
        doomed = p;
    }
    S->unlock();
    return CP_OK;
}

static int usable_now(const cp_mempool *p, const hblock *b, cp_stream *s, uint64_t sid)
{
    if (b->fticket == 0 || b->fsid == sid)
        return 1;
    if (p->opportunistic && S->done_locked(b->fsid, b->fticket))
        return 1;
    return p->follow_events && S->known_locked(s, b->fsid) >= b->fticket;
}

cp_status cp_host_pool_alloc(cp_mempool *p, void **out, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    hblock *best = NULL, *waited = NULL, *b;
    size_t need;
    uint64_t sid = S->stream_id(s);
    cp_status st;

    if (!p || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_alloc: NULL argument");
    *out = NULL;
    if (p->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "an imported pool only maps the exporter's buffers "
                             "(import them); it cannot allocate");
    if (bytes == 0)
        return CP_OK; /* as cudaMallocAsync(0): success, NULL */
    if (S->too_big(bytes))
        return cp_error_set(CP_ERR_OOM,
                            "out of memory: %zu bytes exceed the host's memory and swap", bytes);
    need = (bytes + POOL_GRAN - 1) / POOL_GRAN * POOL_GRAN;

    S->lock();
    cp_host_pool_tidy(p);
    /* Best fit: every block of a higher bin is larger than any of a lower
     * one, so the first bin holding a usable block holds the best.  Blocks
     * needing an inserted wait are the fallback, best fit too. */
    for (int bin = cp_host_pool_bin_of(need); bin < POOL_BINS && !best; bin++)
        for (hblock *f = p->bins[bin]; f; f = f->fnext) {
            if (f->size < need)
                continue;
            if (usable_now(p, f, s, sid)) {
                if (!best || f->size < best->size)
                    best = f;
            } else if (p->internal_deps) {
                if (!waited || f->size < waited->size)
                    waited = f;
            }
        }
    b = best;
    if (!b && waited) {
        st = S->enqueue_wait_locked(s, waited->fsid, waited->fticket);
        if (st != CP_OK) {
            S->unlock();
            return st;
        }
        b = waited;
    }
    if (!b) {
        b = cp_host_pool_chunk_add(p, need);
        if (!b && cp_host_pool_release_to(p, 0) > 0)
            b = cp_host_pool_chunk_add(p, need);
        if (!b) {
            S->unlock();
            if (p->props.max_size)
                return cp_error_set(CP_ERR_OOM,
                                    "out of memory: %zu bytes do not fit in the pool "
                                    "(max_size %zu, %llu reserved)",
                                    bytes, p->props.max_size, (unsigned long long)p->reserved);
            return cp_error_set(CP_ERR_OOM,
                                "out of memory: cannot reserve %zu bytes of host memory", bytes);
        }
    }
    if (b->size - need >= POOL_GRAN) {
        hblock *rest = calloc(1, sizeof *rest);
        if (rest) {
            rest->chunk = b->chunk;
            rest->ptr = b->ptr + need;
            rest->size = b->size - need;
            rest->fsid = b->fsid;
            rest->fticket = b->fticket;
            rest->prev = b;
            rest->next = b->next;
            if (b->next)
                b->next->prev = rest;
            b->next = rest;
            b->size = need; /* b leaves its bin below: it remembers which */
            cp_host_pool_free_push(p, rest);
        }
    }
    cp_host_pool_free_unlink(p, b);
    b->fsid = b->fticket = 0;
    if (!cp_host_pool_map_insert(b)) {
        cp_host_pool_free_push(p, b);
        cp_host_pool_coalesce(p, b);
        S->unlock();
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for the pointer map");
    }
    p->used += b->size;
    if (p->used > p->used_high)
        p->used_high = p->used;
    *out = b->ptr;
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_alloc_current(void **out, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    cp_mempool *p;
    int dev = cp_host_account_index(S->stream_device(s));
    S->lock();
    p = current_pool[dev] ? current_pool[dev] : default_locked(dev);
    S->unlock();
    if (!p)
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a pool");
    return cp_host_pool_alloc(p, out, bytes, s);
}

cp_status cp_host_pool_free(void *ptr, cp_stream *s)
{
    CP_GUARD();
    hblock *b;
    cp_mempool *p;
    uint64_t sid = 0, ticket = 0;
    cp_status st;

    if (!ptr)
        return CP_OK;
    S->lock();
    b = cp_host_pool_map_remove(ptr);
    if (!b && cp_host_pool_imported_free_locked(ptr, s, &st)) {
        S->unlock();
        return st;
    }
    if (!b) {
        S->unlock();
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "pointer %p was not allocated by a stream-ordered pool "
                             "(or was already freed)",
                             ptr);
    }
    st = S->enqueue_mark_locked(s, &sid, &ticket);
    if (st != CP_OK) {
        cp_host_pool_map_insert(b); /* the bucket array exists: cannot fail */
        S->unlock();
        return st;
    }
    p = b->chunk->pool;
    p->used -= b->size;
    b->fsid = sid;
    b->fticket = ticket;
    cp_host_pool_clean(p, b); /* the marker may have completed on the spot */
    cp_host_pool_free_push(p, b);
    cp_host_pool_coalesce(p, b);
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_get_attr(cp_mempool *p, cp_pool_attr a, uint64_t *v)
{
    CP_GUARD();
    cp_status st = CP_OK;
    if (!p || !v)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_attr: NULL argument");
    S->lock();
    switch (a) {
    case CP_POOL_RELEASE_THRESHOLD: *v = p->threshold; break;
    case CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES: *v = (uint64_t)p->follow_events; break;
    case CP_POOL_REUSE_ALLOW_OPPORTUNISTIC: *v = (uint64_t)p->opportunistic; break;
    case CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *v = (uint64_t)p->internal_deps; break;
    case CP_POOL_RESERVED_MEM_CURRENT: *v = p->reserved; break;
    case CP_POOL_RESERVED_MEM_HIGH: *v = p->reserved_high; break;
    case CP_POOL_USED_MEM_CURRENT: *v = p->used; break;
    case CP_POOL_USED_MEM_HIGH: *v = p->used_high; break;
    default:
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE, "unknown pool attribute %d",
                           (int)a);
    }
    S->unlock();
    return st;
}

cp_status cp_host_pool_set_attr(cp_mempool *p, cp_pool_attr a, uint64_t v)
{
    CP_GUARD();
    cp_status st = CP_OK;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_attr: pool is NULL");
    S->lock();
    switch (a) {
    case CP_POOL_RELEASE_THRESHOLD: p->threshold = v; break;
    case CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES: p->follow_events = v != 0; break;
    case CP_POOL_REUSE_ALLOW_OPPORTUNISTIC: p->opportunistic = v != 0; break;
    case CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->internal_deps = v != 0; break;
    case CP_POOL_RESERVED_MEM_HIGH:
    case CP_POOL_USED_MEM_HIGH:
        if (v != 0)
            st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                               "a pool's high-water mark can only be reset (set to 0)");
        else if (a == CP_POOL_RESERVED_MEM_HIGH)
            p->reserved_high = p->reserved;
        else
            p->used_high = p->used;
        break;
    case CP_POOL_RESERVED_MEM_CURRENT:
    case CP_POOL_USED_MEM_CURRENT:
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                           "reserved_current and used_current are read-only");
        break;
    default:
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE, "unknown pool attribute %d",
                           (int)a);
    }
    S->unlock();
    return st;
}

cp_status cp_host_pool_trim(cp_mempool *p, size_t keep_bytes)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_trim: pool is NULL");
    S->lock();
    cp_host_pool_release_to(p, keep_bytes);
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_set_current(cp_mempool *p)
{
    CP_GUARD();
    if (!p)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE, "set_current needs a pool");
    if (p->props.location_host)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "a pool of host memory cannot be the device's "
                             "current pool");
    if (p->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "an imported pool cannot be the device's current pool");
    S->lock();
    current_pool[p->props.device] = p->is_default ? NULL : p;
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_get_current_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_current: out is NULL");
    dev = cp_host_account_index(dev);
    S->lock();
    *out = current_pool[dev] ? current_pool[dev] : default_locked(dev);
    S->unlock();
    return *out ? CP_OK : cp_error_set(CP_ERR_OOM, "host backend: out of memory for a pool");
}

cp_status cp_host_pool_get_current(cp_mempool **out)
{
    CP_GUARD();
    return cp_host_pool_get_current_on(S->current_device(), out);
}

void cp_host_pool_release_locked(void)
{
    reap_doomed_locked(0);
    cp_host_pool_reap_unmaps_locked(0);
    for (cp_mempool *p = pools; p; p = p->next)
        if (p->reserved > p->threshold)
            cp_host_pool_release_to(p, p->threshold);
}

void cp_host_pool_shutdown(void)
{
    S->lock();
    reap_doomed_locked(1); /* every worker has stopped: nothing is pending */
    cp_host_pool_reap_unmaps_locked(1);
    for (int d = 0; d < CP_MAX_DEVICES; d++) {
        cp_mempool *p = default_pool[d];
        if (!p)
            continue;
        while (p->chunks)
            cp_host_pool_chunk_release(p, p->chunks);
        if (p->prev)
            p->prev->next = p->next;
        else
            pools = p->next;
        if (p->next)
            p->next->prev = p->prev;
        default_pool[d] = NULL;
        free(p);
    }
    cp_host_pool_map_fini();
    S->unlock();
}
