/*
 * torch.h: the model of PyTorch's CUDA caching allocator (pool/torch.c; its
 * policy is stated there), its PYTORCH_CUDA_ALLOC_CONF parser
 * (pool/torch_conf.c) and the devices it takes memory from
 * (pool/torch_dev.c).
 *
 * Besides the cp_resource every pool is, the model has entry points of its
 * own for trace replay (trace/replay_torch.c): blocks are handed out as
 * opaque handles so that a replay finds them by index, not by address, and
 * PyTorch's two-step free (free requested, then completed once the streams
 * that used the block are done) and its empty_cache() are explicit calls.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TORCH_H
#define CUPOLA_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CP_TORCH_MIB (UINT64_C(1) << 20)
#define CP_TORCH_NO_SPLIT_LIMIT UINT64_MAX /* max_split_size unset */
#define CP_TORCH_LARGE_SEGMENT (20 * CP_TORCH_MIB) /* large_segment_size's default */

/* ---- PYTORCH_CUDA_ALLOC_CONF ----------------------------------------------- */
typedef struct cp_torch_conf {
    uint64_t max_split_size;            /* bytes; CP_TORCH_NO_SPLIT_LIMIT when unset */
    uint64_t max_non_split_rounding;    /* bytes; large_segment_size by default */
    uint64_t large_segment_size;        /* bytes; 20 MiB by default: the segment of requests
                                           between 1 and 10 MiB, the page of large
                                           expandable segments */
    uint64_t roundup_divisions[16];     /* per power-of-two interval from 1 MiB (index 0:
                                           below 2 MiB) to 32 GiB and above (index 15) */
    double gc_threshold;                /* garbage_collection_threshold; 0: off */
    double memory_fraction;             /* per_process_memory_fraction; 1: no limit */
    int expandable_segments;
    int release_lock_on_cudamalloc;     /* accepted and reported: no effect on the model */
    int graph_capture_record_stream_reuse; /* the same: the model captures no graphs */
    /* host-side (the pinned-memory allocator): accepted, reported, not modelled */
    int pinned_use_host_register;
    int pinned_use_background_threads;
    uint64_t pinned_num_register_threads;
    uint64_t pinned_reserve_segment_size_mb;
    unsigned host_keys;                 /* bit i: pinned key i of cp_torch_host_keys was set */
    int set_keys;                       /* how many keys the string set */
} cp_torch_conf;

/* The options of a pool of kind "torch", as cp_pool_own holds them. */
typedef struct cp_torch_opts {
    const char *conf;       /* PYTORCH_CUDA_ALLOC_CONF (NULL: PyTorch's defaults) */
    uint64_t device_memory; /* the device memory the model assumes (0: the device's, or
                               the H100's over the virtual upstream) */
    int address_model;      /* the virtual upstream's addresses: CP_TORCH_ADDR_DRIVER, _BUMP */
} cp_torch_opts;

/* The names of the host-side keys, in the order of host_keys' bits. */
extern const char *const cp_torch_host_keys[];

/* PyTorch's defaults (what an empty or absent string gives). */
void cp_torch_conf_default(cp_torch_conf *c);
/* Parses s (PYTORCH_CUDA_ALLOC_CONF syntax) into c, starting from the
 * defaults: it accepts what PyTorch 2.11 accepts and reads each value as
 * PyTorch reads it.  CP_ERR_INVALID, where PyTorch refuses the string, with
 * a message naming the key and the value ("conf: max_split_size_mb must be
 * an integer of at least 20 (MiB), not '8'"); backend:cudaMallocAsync is
 * refused with a pointer to cupola.mempool.  A refused string leaves c at
 * the defaults. */
cp_status cp_torch_conf_parse(const char *s, size_t len, cp_torch_conf *c);
/* The divisions for a rounded size (PyTorch's interval lookup). */
uint64_t cp_torch_conf_divisions(const cp_torch_conf *c, uint64_t size);
/* The settings as a canonical conf string that parses to the same settings
 * (only keys that differ from the defaults); returns the length written
 * (snprintf's convention). */
size_t cp_torch_conf_format(const cp_torch_conf *c, char *buf, size_t n);

/* ---- PyTorch's counters ----------------------------------------------------- */
typedef struct cp_torch_stat {
    int64_t current, peak, allocated, freed;
} cp_torch_stat;

enum { CP_TORCH_ALL = 0, CP_TORCH_SMALL = 1, CP_TORCH_LARGE = 2 };

typedef struct cp_torch_stats {
    /* [all, small_pool, large_pool], as torch.cuda.memory_stats() names them */
    cp_torch_stat allocation[3], segment[3], active[3], inactive_split[3];
    cp_torch_stat allocated_bytes[3], reserved_bytes[3], active_bytes[3];
    cp_torch_stat inactive_split_bytes[3], requested_bytes[3];
    cp_torch_stat oversize_allocations, oversize_segments;
    uint64_t num_alloc_retries, num_ooms, num_sync_all_streams;
    uint64_t num_device_alloc, num_device_free;
} cp_torch_stats;

/* ---- The model's own entry points ------------------------------------------ */
typedef struct cp_torch cp_torch;
typedef struct cp_torch_block cp_torch_block;

/* The model behind a pool of kind "torch", or NULL for any other resource. */
cp_torch *cp_torch_of(cp_resource *r);
const cp_torch_conf *cp_torch_get_conf(const cp_torch *t);
void cp_torch_get_stats(cp_torch *t, cp_torch_stats *out);
/* The allowed maximum (max or the conf's fraction of device_memory; 0: none),
 * and the device memory the model assumes. */
uint64_t cp_torch_limit(const cp_torch *t);
uint64_t cp_torch_device_memory(const cp_torch *t);
/* A replay's calls, counted as the resource's entry points count theirs
 * (cp_stats: allocs, frees, failed, used_peak; reserved_peak is read from
 * the model). */
void cp_torch_account(cp_torch *t, uint64_t allocs, uint64_t frees, uint64_t failed,
                      uint64_t used_peak);
/* The reserved bytes as the model keeps them, to be read between calls
 * (under the pool's lock) without a call each time. */
const uint64_t *cp_torch_reserved_now(const cp_torch *t);
/* Over the virtual upstream (addresses only). */
int cp_torch_is_virtual(const cp_torch *t);

/* PyTorch's malloc on a stream key (the trace's stream value; streams are
 * ordered by it, as PyTorch orders cudaStream_t values).  CP_ERR_OOM when
 * PyTorch would raise OutOfMemoryError (num_ooms counted). */
cp_status cp_torch_malloc(cp_torch *t, uint64_t size, uint64_t stream, cp_torch_block **out,
                          uint64_t *addr);
/* PyTorch's free of a block used only on its own stream. */
void cp_torch_free(cp_torch *t, cp_torch_block *b);
/* PyTorch's free of a block used on other streams (record_stream): it
 * returns to the pool only at cp_torch_complete, or when the allocator
 * synchronizes first (retry, empty_cache).  The token stays valid either
 * way until cp_torch_complete takes it.  NULL when host memory runs out
 * (the block was then freed at once). */
typedef struct cp_torch_pending cp_torch_pending;
cp_torch_pending *cp_torch_free_pending(cp_torch *t, cp_torch_block *b);
/* The block's other streams are done.  later = 0: it returns to the pool
 * now; later = 1: at the malloc after next, or at the next synchronization
 * (for completions PyTorch found while already past its search: snapshot.h).
 * Takes the token. */
void cp_torch_complete(cp_torch *t, cp_torch_pending *p, int later);
/* torch.cuda.empty_cache(). */
void cp_torch_empty_cache(cp_torch *t);
/* Would malloc(size, stream) release cached memory itself (garbage
 * collection, or freeing cached blocks to retry under the limit)?  Decides
 * whether segment frees seen before a malloc in a snapshot were that
 * malloc's own or an empty_cache() before it.  Changes nothing. */
int cp_torch_malloc_releases(cp_torch *t, uint64_t size, uint64_t stream);
uint64_t cp_torch_block_addr(const cp_torch_block *b);

/* ---- Recorded addresses (cupola.trace.replay's addresses = "recorded") ----- */
typedef enum cp_torch_devcall {
    CP_TORCH_MALLOC = 0, /* cudaMalloc: segment_alloc */
    CP_TORCH_FREE,       /* cudaFree: segment_free */
    CP_TORCH_MAP,        /* expandable segments: segment_map */
    CP_TORCH_UNMAP       /* segment_unmap */
} cp_torch_devcall;

typedef struct cp_torch_segev {
    uint8_t call;        /* cp_torch_devcall */
    uint64_t addr, size;
    size_t entry;        /* the snapshot entry, for messages */
} cp_torch_segev;

typedef struct cp_torch_divergence {
    int diverged;
    size_t at;           /* index of the recorded call (0-based) */
    size_t entry;        /* the snapshot entry of PyTorch's call (SIZE_MAX: none left) */
    cp_torch_segev torch;/* PyTorch's call */
    cp_torch_segev model;/* the model's */
} cp_torch_divergence;

/* Replay with the recording's addresses: the virtual device answers the
 * model's calls with PyTorch's while they match (same call, same size, same
 * address where the model names one); from the first difference on, the
 * address model serves.  The array must outlive the replay. */
void cp_torch_use_recorded(cp_torch *t, const cp_torch_segev *ev, size_t n);
/* Back to the address model; *out says where the calls first differed. */
void cp_torch_end_recorded(cp_torch *t, cp_torch_divergence *out);
/* Tells the model which replay event is running (divergence messages). */
void cp_torch_set_event(cp_torch *t, size_t event);
size_t cp_torch_divergence_event(const cp_torch *t);

/* ---- Devices (torch_dev.c) -------------------------------------------------- */
typedef struct cp_torch_dev cp_torch_dev;

/* The address models of the virtual device. */
typedef enum cp_torch_addr_model {
    CP_TORCH_ADDR_DRIVER = 0, /* the driver's placement as the recordings show it */
    CP_TORCH_ADDR_BUMP        /* increasing addresses, never reused */
} cp_torch_addr_model;

cp_status cp_torch_dev_create(cp_torch_dev **out, cp_upstream_kind up, int device,
                              cp_torch_addr_model am);
void cp_torch_dev_destroy(cp_torch_dev *d);
/* cudaMalloc / cudaFree.  CP_ERR_OOM when the device refuses. */
cp_status cp_torch_dev_malloc(cp_torch_dev *d, uint64_t size, uint64_t *addr);
void cp_torch_dev_free(cp_torch_dev *d, uint64_t addr, uint64_t size);
/* Expandable segments: an address range of `size` bytes (no memory), pages
 * of `page` bytes mapped into it and unmapped again, the range given back. */
cp_status cp_torch_dev_reserve(cp_torch_dev *d, uint64_t size, uint64_t page, uint64_t *addr);
void cp_torch_dev_unreserve(cp_torch_dev *d, uint64_t addr, uint64_t size);
cp_status cp_torch_dev_map(cp_torch_dev *d, uint64_t addr, uint64_t size, uint64_t page);
void cp_torch_dev_unmap(cp_torch_dev *d, uint64_t addr, uint64_t size, uint64_t page);
/* The device's memory in bytes (0 when it has none: the virtual upstream). */
uint64_t cp_torch_dev_memory(cp_torch_dev *d);
/* Reserve an exact range the recording names (recorded mode): the address
 * model keeps it out of what it hands out. */
void cp_torch_dev_claim(cp_torch_dev *d, uint64_t addr, uint64_t size);
int cp_torch_dev_is_virtual(const cp_torch_dev *d);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_TORCH_H */
