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
 */
#include "host_mempool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* host.c's streams, handed down once (host_mempool.h says why). */
static const cp_host_sched *S;

void cp_host_pool_bind(const cp_host_sched *sched)
{
    S = sched;
}

#define POOL_GRAN 256u
#define POOL_CHUNK ((size_t)2 << 20)
#define POOL_BINS 64

typedef struct hchunk hchunk;
typedef struct hblock hblock;

struct hblock {
    hblock *prev, *next;   /* address order within the chunk */
    hblock *fprev, *fnext; /* the pool's size bin, while free */
    hblock *pprev, *pnext; /* the pool's pending list, while free and constrained */
    int bin;               /* the bin it sits in, while free */
    int pending;
    hblock *hnext;         /* pointer-map chain, while allocated */
    hchunk *chunk;
    char *ptr;
    size_t size;
    int free;
    uint64_t fsid, fticket; /* the free's marker; fticket 0: unconstrained */
};

struct hchunk {
    hchunk *prev, *next;
    cp_mempool *pool;
    char *base;
    size_t size;
    uint64_t off; /* offset in the pool's memfd (shareable pools) */
    hblock *first;
    int dirty; /* a block was cleaned: merge at the next tidy */
};

struct cp_mempool {
    cp_mempool *prev, *next; /* registry of live pools */
    int is_default;
    cp_mempool_props props;
    uint64_t threshold;
    int follow_events, opportunistic, internal_deps;
    uint64_t used, used_high, reserved, reserved_high;
    hchunk *chunks;
    hblock *bins[POOL_BINS]; /* free blocks by floor(log2(size)) */
    hblock *pending;         /* free blocks whose constraint may still lift */
    int memfd;               /* shareable pools: the file behind every chunk; else -1 */
    uint64_t file_size;      /* the next chunk's offset in memfd */
    int imported;            /* only the fd of another process's pool */
    unsigned char access[CP_MAX_DEVICES]; /* cp_access per device */
};

static cp_mempool *pools;                        /* every live pool, the defaults included */
static cp_mempool *default_pool[CP_MAX_DEVICES]; /* created on first use */
static cp_mempool *current_pool[CP_MAX_DEVICES]; /* NULL: the default */

/* ---- devices and their memory accounts ------------------------------------- */

static int ndevices = 1;
static size_t dev_total;                          /* each device's share; 0: no limit */
static _Atomic size_t dev_used[CP_MAX_DEVICES];  /* bytes charged */

void cp_host_devices_init(int n, size_t total_each)
{
    ndevices = n < 1 ? 1 : n > CP_MAX_DEVICES ? CP_MAX_DEVICES : n;
    dev_total = ndevices > 1 ? total_each : 0;
}

int cp_host_device_count(void)
{
    return ndevices;
}

static int dev_index(int dev)
{
    return dev >= 0 && dev < ndevices ? dev : 0;
}

int cp_host_mem_charge(int dev, size_t bytes)
{
    dev = dev_index(dev);
    if (dev_total) {
        size_t cur = atomic_load(&dev_used[dev]);
        do {
            if (bytes > dev_total || cur > dev_total - bytes)
                return 0;
        } while (!atomic_compare_exchange_weak(&dev_used[dev], &cur, cur + bytes));
        return 1;
    }
    atomic_fetch_add(&dev_used[dev], bytes);
    return 1;
}

void cp_host_mem_uncharge(int dev, size_t bytes)
{
    atomic_fetch_sub(&dev_used[dev_index(dev)], bytes);
}

size_t cp_host_mem_used(int dev)
{
    return atomic_load(&dev_used[dev_index(dev)]);
}

size_t cp_host_mem_total(void)
{
    return dev_total;
}

static void reap_unmaps_locked(int force);
static int imported_free_locked(void *ptr, cp_stream *s, cp_status *st);

/* ---- pointer -> block map -------------------------------------------------- */

static hblock **map_buckets;
static size_t map_nbuckets, map_count;

static size_t map_hash(const void *p, size_t nb)
{
    uint64_t x = (uint64_t)(uintptr_t)p >> 8;
    x *= 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 32) & (nb - 1);
}

static void map_grow(void)
{
    size_t nb = map_nbuckets ? map_nbuckets * 2 : 256;
    hblock **nbk = calloc(nb, sizeof *nbk);
    if (!nbk)
        return; /* a fuller table still works */
    for (size_t i = 0; i < map_nbuckets; i++) {
        hblock *b = map_buckets[i];
        while (b) {
            hblock *next = b->hnext;
            size_t h = map_hash(b->ptr, nb);
            b->hnext = nbk[h];
            nbk[h] = b;
            b = next;
        }
    }
    free(map_buckets);
    map_buckets = nbk;
    map_nbuckets = nb;
}

static int map_insert(hblock *b)
{
    size_t h;
    if (map_count >= map_nbuckets * 2)
        map_grow();
    if (!map_buckets)
        return 0;
    h = map_hash(b->ptr, map_nbuckets);
    b->hnext = map_buckets[h];
    map_buckets[h] = b;
    map_count++;
    return 1;
}

static hblock *map_find(const void *p)
{
    hblock *b;
    if (!map_buckets)
        return NULL;
    for (b = map_buckets[map_hash(p, map_nbuckets)]; b; b = b->hnext)
        if (b->ptr == p)
            return b;
    return NULL;
}

static hblock *map_remove(const void *p)
{
    hblock **pp;
    if (!map_buckets)
        return NULL;
    for (pp = &map_buckets[map_hash(p, map_nbuckets)]; *pp; pp = &(*pp)->hnext)
        if ((*pp)->ptr == p) {
            hblock *b = *pp;
            *pp = b->hnext;
            b->hnext = NULL;
            map_count--;
            return b;
        }
    return NULL;
}

/* ---- blocks ------------------------------------------------------------------ */

static int bin_of(size_t size)
{
    return 63 - __builtin_clzll((unsigned long long)size);
}

static void pend_add(cp_mempool *p, hblock *b)
{
    if (b->pending)
        return;
    b->pending = 1;
    b->pprev = NULL;
    b->pnext = p->pending;
    if (p->pending)
        p->pending->pprev = b;
    p->pending = b;
}

static void pend_del(cp_mempool *p, hblock *b)
{
    if (!b->pending)
        return;
    if (b->pprev)
        b->pprev->pnext = b->pnext;
    else
        p->pending = b->pnext;
    if (b->pnext)
        b->pnext->pprev = b->pprev;
    b->pprev = b->pnext = NULL;
    b->pending = 0;
}

static void free_push(cp_mempool *p, hblock *b)
{
    b->free = 1;
    b->bin = bin_of(b->size);
    b->fprev = NULL;
    b->fnext = p->bins[b->bin];
    if (p->bins[b->bin])
        p->bins[b->bin]->fprev = b;
    p->bins[b->bin] = b;
    if (b->fticket)
        pend_add(p, b);
}

static void free_unlink(cp_mempool *p, hblock *b)
{
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        p->bins[b->bin] = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
    b->free = 0;
    pend_del(p, b);
}

/* Drops the constraint of a block whose free has run, where the pool lets
 * any stream reuse such a block. */
static void clean(cp_mempool *p, hblock *b)
{
    if (b->fticket && p->opportunistic && S->done_locked(b->fsid, b->fticket)) {
        b->fticket = 0;
        b->fsid = 0;
        pend_del(p, b);
    }
}

static int mergeable(const hblock *a, const hblock *b)
{
    return a->free && b->free && (a->fticket == 0) == (b->fticket == 0) &&
           (a->fticket == 0 || a->fsid == b->fsid);
}

/* Absorbs b->next into b. */
static void absorb_next(cp_mempool *p, hblock *b)
{
    hblock *n = b->next;
    free_unlink(p, n);
    free_unlink(p, b); /* its size bin changes */
    b->size += n->size;
    if (n->fticket > b->fticket)
        b->fticket = n->fticket;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    free(n);
    free_push(p, b);
}

/* Merges free b with its neighbours where allowed; returns the result. */
static hblock *coalesce(cp_mempool *p, hblock *b)
{
    if (b->next && mergeable(b, b->next))
        absorb_next(p, b);
    if (b->prev && mergeable(b->prev, b)) {
        b = b->prev;
        absorb_next(p, b);
    }
    return b;
}

/* Cleans the free blocks whose frees have run and merges, in the chunks
 * where something was cleaned, what became mergeable.  Two passes, because
 * merging unlinks free-list entries that the first pass walks. */
static void tidy(cp_mempool *p)
{
    int any = 0;
    if (!p->opportunistic)
        return;
    for (hblock *f = p->pending, *next; f; f = next) {
        next = f->pnext; /* clean unlinks f only */
        clean(p, f);
        if (!f->fticket)
            any = f->chunk->dirty = 1;
    }
    if (!any)
        return;
    for (hchunk *c = p->chunks; c; c = c->next) {
        if (!c->dirty)
            continue;
        c->dirty = 0;
        for (hblock *b = c->first; b; b = b->next)
            while (b->free && b->next && mergeable(b, b->next))
                absorb_next(p, b);
    }
}

/* ---- chunks ------------------------------------------------------------------ */

/* A chunk's bytes: from the OS, or from the pool's memfd when it is
 * shareable (see the header comment). */
static void *chunk_memory_get(cp_mempool *p, size_t size, uint64_t *off)
{
    void *mem = NULL;
    *off = 0;
    if (p->memfd < 0)
        return posix_memalign(&mem, POOL_GRAN, size) == 0 ? mem : NULL;
    if (ftruncate(p->memfd, (off_t)(p->file_size + size)) != 0)
        return NULL;
    mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, p->memfd, (off_t)p->file_size);
    if (mem == MAP_FAILED) {
        if (ftruncate(p->memfd, (off_t)p->file_size) != 0) {
            /* the file stays longer: offsets only grow, nothing reads the tail */
        }
        return NULL;
    }
    *off = p->file_size;
    p->file_size += size;
    return mem;
}

static void chunk_memory_free(cp_mempool *p, hchunk *c)
{
    cp_host_mem_uncharge(p->props.device, c->size);
    if (p->memfd < 0) {
        free(c->base);
        return;
    }
    munmap(c->base, c->size);
    /* importers may still map these pages: the file keeps them for them;
     * without importers the punched hole gives the memory back */
    (void)fallocate(p->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)c->off,
                    (off_t)c->size);
}

static void chunk_release(cp_mempool *p, hchunk *c)
{
    hblock *b = c->first;
    while (b) {
        hblock *next = b->next;
        if (b->free)
            free_unlink(p, b);
        else
            map_remove(b->ptr);
        free(b);
        b = next;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        p->chunks = c->next;
    if (c->next)
        c->next->prev = c->prev;
    p->reserved -= c->size;
    chunk_memory_free(p, c);
    free(c);
}

/* A chunk whose blocks are all free, with their frees run, touches no
 * pending work (its blocks need not have merged: constrained blocks of
 * different streams do not). */
static int chunk_unused(const hchunk *c)
{
    for (const hblock *b = c->first; b; b = b->next)
        if (!b->free || !S->done_locked(b->fsid, b->fticket))
            return 0;
    return 1;
}

/* Returns unused chunks while reserved > keep; returns the bytes released. */
static size_t release_to(cp_mempool *p, uint64_t keep)
{
    size_t released = 0;
    hchunk *c = p->chunks;
    tidy(p);
    while (c && p->reserved > keep) {
        hchunk *next = c->next;
        if (chunk_unused(c)) {
            released += c->size;
            chunk_release(p, c);
        }
        c = next;
    }
    return released;
}

static hblock *chunk_add(cp_mempool *p, size_t need)
{
    size_t size = need <= POOL_CHUNK ? POOL_CHUNK : (need + POOL_CHUNK - 1) / POOL_CHUNK * POOL_CHUNK;
    hchunk *c;
    hblock *b;
    void *mem = NULL;

    if (size < need) /* rounding overflowed */
        size = need;
    if (p->props.max_size) {
        size_t room = p->reserved >= p->props.max_size ? 0 : p->props.max_size - p->reserved;
        if (size > room)
            size = room / POOL_GRAN * POOL_GRAN;
        if (size < need)
            return NULL;
    }
    if (S->too_big(size))
        return NULL;
    if (!cp_host_mem_charge(p->props.device, size))
        return NULL;
    c = calloc(1, sizeof *c);
    b = calloc(1, sizeof *b);
    if (!c || !b || !(mem = chunk_memory_get(p, size, &c->off))) {
        free(c);
        free(b);
        cp_host_mem_uncharge(p->props.device, size);
        return NULL;
    }
    c->pool = p;
    c->base = mem;
    c->size = size;
    c->first = b;
    c->next = p->chunks;
    if (p->chunks)
        p->chunks->prev = c;
    p->chunks = c;
    b->chunk = c;
    b->ptr = mem;
    b->size = size;
    free_push(p, b);
    p->reserved += size;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    return b;
}

/* ---- pools ------------------------------------------------------------------- */

static cp_mempool *pool_new(const cp_mempool_props *props)
{
    cp_mempool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (props)
        p->props = *props;
    p->props.device = dev_index(p->props.device);
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
    dev = dev_index(dev);
    if (!default_pool[dev]) {
        cp_mempool_props props;
        memset(&props, 0, sizeof props);
        props.device = dev;
        default_pool[dev] = pool_new(&props);
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
    if (props && (props->device < 0 || props->device >= ndevices))
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             props->device, ndevices);
    if (props && props->handle_posix_fd) {
        fd = memfd_create("cupola-mempool", MFD_CLOEXEC);
        if (fd < 0)
            return cp_error_set(CP_ERR_BACKEND, "memfd_create: %s (a shareable pool)",
                                strerror(errno));
    }
    S->lock();
    *out = pool_new(props);
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
        chunk_memory_free(p, c);
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
                map_remove(b->ptr);
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
    tidy(p);
    /* Best fit: every block of a higher bin is larger than any of a lower
     * one, so the first bin holding a usable block holds the best.  Blocks
     * needing an inserted wait are the fallback, best fit too. */
    for (int bin = bin_of(need); bin < POOL_BINS && !best; bin++)
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
        b = chunk_add(p, need);
        if (!b && release_to(p, 0) > 0)
            b = chunk_add(p, need);
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
            free_push(p, rest);
        }
    }
    free_unlink(p, b);
    b->fsid = b->fticket = 0;
    if (!map_insert(b)) {
        free_push(p, b);
        coalesce(p, b);
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
    int dev = dev_index(S->stream_device(s));
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
    b = map_remove(ptr);
    if (!b && imported_free_locked(ptr, s, &st)) {
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
        map_insert(b); /* the bucket array exists: cannot fail */
        S->unlock();
        return st;
    }
    p = b->chunk->pool;
    p->used -= b->size;
    b->fsid = sid;
    b->fticket = ticket;
    clean(p, b); /* the marker may have completed on the spot */
    free_push(p, b);
    coalesce(p, b);
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
    release_to(p, keep_bytes);
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
    dev = dev_index(dev);
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
    reap_unmaps_locked(0);
    for (cp_mempool *p = pools; p; p = p->next)
        if (p->reserved > p->threshold)
            release_to(p, p->threshold);
}

void cp_host_pool_shutdown(void)
{
    S->lock();
    reap_doomed_locked(1); /* every worker has stopped: nothing is pending */
    reap_unmaps_locked(1);
    for (int d = 0; d < CP_MAX_DEVICES; d++) {
        cp_mempool *p = default_pool[d];
        if (!p)
            continue;
        while (p->chunks)
            chunk_release(p, p->chunks);
        if (p->prev)
            p->prev->next = p->next;
        else
            pools = p->next;
        if (p->next)
            p->next->prev = p->prev;
        default_pool[d] = NULL;
        free(p);
    }
    if (map_count == 0) {
        free(map_buckets);
        map_buckets = NULL;
        map_nbuckets = 0;
    }
    S->unlock();
}

/* ---- several devices and processes (multigpu) ------------------------------ */

int cp_host_pool_device(const cp_mempool *p)
{
    return p ? p->props.device : 0;
}

cp_status cp_host_pool_set_access(cp_mempool *p, int dev, cp_access a)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_access: pool is NULL");
    if (dev < 0 || dev >= ndevices)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             dev, ndevices);
    if ((unsigned)a > CP_ACCESS_READWRITE)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE, "unknown access %d", (int)a);
    if (dev == p->props.device && a != CP_ACCESS_READWRITE)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the pool's own device (%d) always has read-write "
                             "access",
                             dev);
    S->lock();
    p->access[dev] = (unsigned char)a;
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_get_access(cp_mempool *p, int dev, cp_access *a)
{
    CP_GUARD();
    if (!p || !a)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_access: NULL argument");
    if (dev < 0 || dev >= ndevices)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             dev, ndevices);
    S->lock();
    *a = (cp_access)p->access[dev];
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_check_access(const void *ptr, int dev, int write)
{
    CP_GUARD();
    cp_status st = CP_OK;
    hblock *b;
    if (ndevices == 1 || !ptr)
        return CP_OK;
    S->lock();
    b = map_find(ptr);
    if (b) {
        cp_mempool *p = b->chunk->pool;
        cp_access a = p->props.device == dev ? CP_ACCESS_READWRITE : (cp_access)p->access[dev];
        if (a == CP_ACCESS_NONE || (write && a == CP_ACCESS_READ))
            st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_ILLEGAL_ADDRESS,
                               "device %d has %s access to this block of a pool of device %d "
                               "(mp:set_access(%d, \"rw\") grants it)",
                               dev, a == CP_ACCESS_NONE ? "no" : "read-only", p->props.device, dev);
    }
    S->unlock();
    return st;
}

cp_status cp_host_pool_export(cp_mempool *p, int *fd)
{
    CP_GUARD();
    if (!p || !fd)
        return cp_error_set(CP_ERR_INVALID, "mempool_export: NULL argument");
    *fd = -1;
    if (p->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "an imported pool cannot be exported "
                             "again");
    if (p->memfd < 0)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the pool was not created shareable "
                             "(cupola.mempool{handle=\"posix_fd\"})");
    *fd = fcntl(p->memfd, F_DUPFD_CLOEXEC, 0);
    if (*fd < 0)
        return cp_error_set(CP_ERR_BACKEND, "dup: %s (exporting a pool)", strerror(errno));
    return CP_OK;
}

cp_status cp_host_pool_import(int fd, int dev, cp_mempool **out)
{
    CP_GUARD();
    struct stat st;
    cp_mempool_props props;
    int mine;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import: out is NULL");
    *out = NULL;
    if (dev < 0 || dev >= ndevices)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             dev, ndevices);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the file descriptor is not a shareable pool's memory");
    if ((mine = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return cp_error_set(CP_ERR_BACKEND, "dup: %s (importing a pool)", strerror(errno));
    memset(&props, 0, sizeof props);
    props.device = dev;
    props.handle_posix_fd = 1;
    S->lock();
    *out = pool_new(&props);
    if (*out) {
        (*out)->memfd = mine;
        (*out)->imported = 1;
    }
    S->unlock();
    if (!*out) {
        close(mine);
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a pool");
    }
    return CP_OK;
}

/* What a block of a shareable pool exports: where it lies in the file. */
#define HOST_PTR_MAGIC "cpHstPt1"
typedef struct host_ptr_data {
    char magic[8];
    uint64_t off, size;
} host_ptr_data;

cp_status cp_host_pool_export_ptr(void *ptr, cp_ipc_data *out)
{
    CP_GUARD();
    host_ptr_data d;
    cp_status st = CP_OK;
    hblock *b;
    if (!ptr || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_export_ptr: NULL argument");
    memset(out, 0, sizeof *out);
    memset(&d, 0, sizeof d);
    S->lock();
    b = map_find(ptr);
    if (!b)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                           "%p is not a live block of a stream-ordered pool", ptr);
    else if (b->chunk->pool->memfd < 0 || b->chunk->pool->imported)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                           "the block's pool was not created shareable "
                           "(cupola.mempool{handle=\"posix_fd\"})");
    else {
        memcpy(d.magic, HOST_PTR_MAGIC, sizeof d.magic);
        d.off = b->chunk->off + (uint64_t)(b->ptr - b->chunk->base);
        d.size = b->size;
        memcpy(out->bytes, &d, sizeof d);
    }
    S->unlock();
    return st;
}

/* Imported pointers: page-aligned windows onto another process's pool. */
typedef struct hmap {
    struct hmap *next;
    void *ptr;   /* what the importer was given */
    void *base;  /* the mapping */
    size_t len;
    uint64_t fsid, fticket; /* the free's marker, once freed */
} hmap;
static hmap *imported_live, *imported_freed;

cp_status cp_host_pool_import_ptr(cp_mempool *p, const cp_ipc_data *data, size_t bytes,
                                  void **out)
{
    CP_GUARD();
    host_ptr_data d;
    struct stat st;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t start, end;
    void *base;
    hmap *m;

    if (!p || !data || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import_ptr: NULL argument");
    *out = NULL;
    if (!p->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "buffers are imported into a pool imported with "
                             "cupola.mempool.import");
    memcpy(&d, data->bytes, sizeof d);
    if (memcmp(d.magic, HOST_PTR_MAGIC, sizeof d.magic) != 0)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the export data is not a host backend block");
    if (d.size == 0 || bytes == 0 || bytes > d.size)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the export describes %llu bytes, the buffer %zu",
                             (unsigned long long)d.size, bytes);
    if (fstat(p->memfd, &st) != 0 || d.off > (uint64_t)st.st_size ||
        d.size > (uint64_t)st.st_size - d.off)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the block lies outside the pool's memory (a stale or "
                             "foreign export)");
    start = d.off / (uint64_t)pg * (uint64_t)pg;
    end = (d.off + d.size + (uint64_t)pg - 1) / (uint64_t)pg * (uint64_t)pg;
    base = mmap(NULL, (size_t)(end - start), PROT_READ | PROT_WRITE, MAP_SHARED, p->memfd,
                (off_t)start);
    if (base == MAP_FAILED)
        return cp_error_set(CP_ERR_OOM, "out of memory: mmap of an imported block: %s",
                            strerror(errno));
    m = calloc(1, sizeof *m);
    if (!m) {
        munmap(base, (size_t)(end - start));
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory");
    }
    m->base = base;
    m->len = (size_t)(end - start);
    m->ptr = (char *)base + (d.off - start);
    S->lock();
    m->next = imported_live;
    imported_live = m;
    S->unlock();
    *out = m->ptr;
    return CP_OK;
}

/* mem_free_async of an imported pointer: unmapped once the marker has run. */
static int imported_free_locked(void *ptr, cp_stream *s, cp_status *st)
{
    hmap **pp, *m;
    for (pp = &imported_live; *pp && (*pp)->ptr != ptr; pp = &(*pp)->next)
        ;
    if (!(m = *pp))
        return 0;
    *st = S->enqueue_mark_locked(s, &m->fsid, &m->fticket);
    if (*st != CP_OK)
        return 1;
    *pp = m->next;
    m->next = imported_freed;
    imported_freed = m;
    return 1;
}

static void reap_unmaps_locked(int force)
{
    hmap **pp = &imported_freed;
    while (*pp) {
        hmap *m = *pp;
        if (force || S->done_locked(m->fsid, m->fticket)) {
            *pp = m->next;
            munmap(m->base, m->len);
            free(m);
        } else {
            pp = &m->next;
        }
    }
}
