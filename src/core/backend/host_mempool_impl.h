/*
 * host_mempool_impl.h: what the files of the host backend's emulated native
 * pools share (policy in host_mempool.c); internal to backend/.
 *
 *   host_mempool.c        the pools and their allocation, free, attributes
 *   host_mempool_block.c  their blocks and chunks, and the pointer -> block map
 *   host_mempool_share.c  several devices and processes: access, export, import
 *
 * Everything here runs under the scheduler's lock (S->lock), which
 * host_mempool.h says why the pools share.
 */
#ifndef CUPOLA_HOST_MEMPOOL_IMPL_H
#define CUPOLA_HOST_MEMPOOL_IMPL_H

#include "host_mempool.h"

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

/* The scheduler's functions host.c handed down (cp_host_pool_bind): S, as
 * the pools have always called it. */
extern const cp_host_sched *cp_host_pool_sched;
#define S cp_host_pool_sched

/* ---- host_mempool_block.c ---- */
int cp_host_pool_map_insert(hblock *b);
hblock *cp_host_pool_map_find(const void *p);
hblock *cp_host_pool_map_remove(const void *p);
int cp_host_pool_bin_of(size_t size);
void cp_host_pool_free_push(cp_mempool *p, hblock *b);
void cp_host_pool_free_unlink(cp_mempool *p, hblock *b);
void cp_host_pool_clean(cp_mempool *p, hblock *b);
hblock *cp_host_pool_coalesce(cp_mempool *p, hblock *b);
void cp_host_pool_tidy(cp_mempool *p);
void cp_host_pool_chunk_memory_free(cp_mempool *p, hchunk *c);
void cp_host_pool_chunk_release(cp_mempool *p, hchunk *c);
size_t cp_host_pool_release_to(cp_mempool *p, uint64_t keep);
hblock *cp_host_pool_chunk_add(cp_mempool *p, size_t need);
void cp_host_pool_map_fini(void);

/* ---- host_mempool.c ---- */
cp_mempool *cp_host_pool_new(const cp_mempool_props *props);

/* ---- host_mempool_share.c ---- */
int cp_host_pool_imported_free_locked(void *ptr, cp_stream *s, cp_status *st);
void cp_host_pool_reap_unmaps_locked(int force);

#endif /* CUPOLA_HOST_MEMPOOL_IMPL_H */
