/*
 * host_mempool_block.c: the memory of the host's emulated native pools
 * (policy in host_mempool.c): chunks taken from the OS (or the pool's memfd)
 * and charged to the device's account, the blocks they are cut into with
 * their size bins and coalescing, and the pointer -> block map through
 * which a free finds its pool.
 */
#include "host_mempool_impl.h"
#include "host_account.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

int cp_host_pool_map_insert(hblock *b)
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

hblock *cp_host_pool_map_find(const void *p)
{
    hblock *b;
    if (!map_buckets)
        return NULL;
    for (b = map_buckets[map_hash(p, map_nbuckets)]; b; b = b->hnext)
        if (b->ptr == p)
            return b;
    return NULL;
}

hblock *cp_host_pool_map_remove(const void *p)
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

/* At exit: the map's table goes once no block is in it. */
void cp_host_pool_map_fini(void)
{
    if (map_count == 0) {
        free(map_buckets);
        map_buckets = NULL;
        map_nbuckets = 0;
    }
}

/* ---- blocks ------------------------------------------------------------------ */

int cp_host_pool_bin_of(size_t size)
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

void cp_host_pool_free_push(cp_mempool *p, hblock *b)
{
    b->free = 1;
    b->bin = cp_host_pool_bin_of(b->size);
    b->fprev = NULL;
    b->fnext = p->bins[b->bin];
    if (p->bins[b->bin])
        p->bins[b->bin]->fprev = b;
    p->bins[b->bin] = b;
    if (b->fticket)
        pend_add(p, b);
}

void cp_host_pool_free_unlink(cp_mempool *p, hblock *b)
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
void cp_host_pool_clean(cp_mempool *p, hblock *b)
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
    cp_host_pool_free_unlink(p, n);
    cp_host_pool_free_unlink(p, b); /* its size bin changes */
    b->size += n->size;
    if (n->fticket > b->fticket)
        b->fticket = n->fticket;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    free(n);
    cp_host_pool_free_push(p, b);
}

/* Merges free b with its neighbours where allowed; returns the result. */
hblock *cp_host_pool_coalesce(cp_mempool *p, hblock *b)
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
void cp_host_pool_tidy(cp_mempool *p)
{
    int any = 0;
    if (!p->opportunistic)
        return;
    for (hblock *f = p->pending, *next; f; f = next) {
        next = f->pnext; /* cp_host_pool_clean unlinks f only */
        cp_host_pool_clean(p, f);
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

void cp_host_pool_chunk_memory_free(cp_mempool *p, hchunk *c)
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

void cp_host_pool_chunk_release(cp_mempool *p, hchunk *c)
{
    hblock *b = c->first;
    while (b) {
        hblock *next = b->next;
        if (b->free)
            cp_host_pool_free_unlink(p, b);
        else
            cp_host_pool_map_remove(b->ptr);
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
    cp_host_pool_chunk_memory_free(p, c);
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
size_t cp_host_pool_release_to(cp_mempool *p, uint64_t keep)
{
    size_t released = 0;
    hchunk *c = p->chunks;
    cp_host_pool_tidy(p);
    while (c && p->reserved > keep) {
        hchunk *next = c->next;
        if (chunk_unused(c)) {
            released += c->size;
            cp_host_pool_chunk_release(p, c);
        }
        c = next;
    }
    return released;
}

hblock *cp_host_pool_chunk_add(cp_mempool *p, size_t need)
{
    size_t size =
        need <= POOL_CHUNK ? POOL_CHUNK : (need + POOL_CHUNK - 1) / POOL_CHUNK * POOL_CHUNK;
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
    cp_host_pool_free_push(p, b);
    p->reserved += size;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    return b;
}
