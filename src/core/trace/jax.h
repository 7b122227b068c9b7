/*
 * trace/jax.h: JAX's memory events, read from the two files a JAX user has
 * (jax.c): the profile jax.profiler.trace writes (an XSpace protobuf,
 * *.xplane.pb) and JSON lines written from it (docs/API.md gives the
 * Python).  Both give the MemoryAllocation / MemoryDeallocation events that
 * tsl::BFCAllocator writes (AddTraceMe in bfc_allocator.cc) of one
 * allocator; their readers (jax_load.c) turn them into rows.  jax.c holds
 * what both parsers share and the JSON lines, jax_xspace.c the profile.
 * Internal to trace/.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_JAX_H
#define CUPOLA_JAX_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "error.h"

#define CP_JAX_NONE UINT64_MAX /* a stat the event did not carry */

typedef struct cp_jax_event {
    long double ts;     /* nanoseconds (a long double holds today's ns since 1970 exactly) */
    uint64_t addr;
    uint64_t requested; /* requested_bytes */
    uint64_t chunk;     /* allocation_bytes: BFC's chunk */
    uint64_t in_use;    /* bytes_allocated: BFC's bytes_in_use after the event */
    uint64_t peak;      /* peak_bytes_in_use */
    uint32_t seq;       /* order in the file (sorting is stable) */
    uint8_t is_free;
} cp_jax_event;

typedef struct cp_jax_events {
    cp_jax_event *ev;
    size_t n, cap;
    char allocator[128]; /* the allocator read */
    int has_ts;          /* every event had a time */
    uint64_t device_memory; /* the profile's memory_size of the allocator's device
                               (/device:GPU:<n> of GPU_<n>_bfc); 0: not said */
} cp_jax_events;

/* Whether a file is an XSpace: by its name (*.xplane.pb, *.xplane.pb.gz)
 * or its first bytes (a plane: field 1, then its id or name), unless those
 * start JSON lines ('{' and a quote or a blank). */
int cp_jax_is_xspace(const unsigned char *head, size_t n, const char *path);

/* Reads the events of allocator (NULL: the GPU_<n>_bfc of the lowest n) from gz;
 * CP_ERR_INVALID "path:line: reason" (JSON) or "path: reason" (xplane) for
 * malformed input, a truncated file, or no memory events of that
 * allocator. */
cp_status cp_jax_read_lines(gzFile gz, const char *path, const char *allocator,
                            cp_jax_events *out);
cp_status cp_jax_read_xspace(gzFile gz, const char *path, const char *allocator,
                             cp_jax_events *out);
void cp_jax_events_free(cp_jax_events *e);

/* The profile file under a directory jax.profiler.trace wrote
 * (plugins/profile/<run>/<host>.xplane.pb, the last run in name order), or
 * NULL; malloc'd. */
char *cp_jax_find_profile(const char *dir);

/* ---- what the two parsers share (jax.c) -----------------------------------
 * The stats an event carries, by name; allocator names seen, found again
 * through an open-addressing table (a hostile file of a million distinct
 * names would take hours with a linear search per event); the events of
 * every allocator as read, until one is chosen. */
enum { CP_JAX_K_ALLOC_NAME, CP_JAX_K_ADDR, CP_JAX_K_REQ, CP_JAX_K_CHUNK, CP_JAX_K_INUSE,
       CP_JAX_K_PEAK, CP_JAX_K_N };
extern const char *const cp_jax_stat_names[CP_JAX_K_N];

typedef struct cp_jax_names {
    char (*s)[128];
    size_t n, cap;
    uint32_t *slot; /* index + 1 of the name hashed there, 0: empty */
    size_t nslot;   /* a power of 2, more than twice n */
} cp_jax_names;

typedef struct cp_jax_raw {
    cp_jax_events *e;
    int *alloc;     /* per event: its allocator's name index */
    size_t cap;
    cp_jax_names nm;
} cp_jax_raw;

/* The index of name s (cut at 127 bytes), added if new; -1: out of memory. */
int cp_jax_name_index(cp_jax_names *nm, const char *s, size_t len);
/* Appends an event of allocator `alloc` (a name index); CP_ERR_OOM. */
cp_status cp_jax_raw_push(cp_jax_raw *r, const cp_jax_event *ev, int alloc, const char *path);
/* Keeps the events of allocator want (NULL: the GPU_<n>_bfc of the lowest
 * n); CP_ERR_INVALID naming the allocators there are when it has none. */
cp_status cp_jax_choose(cp_jax_raw *r, const char *path, const char *want);
void cp_jax_raw_fini(cp_jax_raw *r);
/* n of a name GPU_<n>_bfc (a device's allocator), or -1 for any other. */
long long cp_jax_gpu_number(const char *s);

#endif /* CUPOLA_JAX_H */
