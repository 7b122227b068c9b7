/*
 * trace/jax.h: JAX's memory events, read from the two files a JAX user has
 * (jax.c): the profile jax.profiler.trace writes (an XSpace protobuf,
 * *.xplane.pb) and JSON lines written from it (docs/API.md gives the
 * Python).  Both give the MemoryAllocation / MemoryDeallocation events that
 * tsl::BFCAllocator writes (AddTraceMe in bfc_allocator.cc) of one
 * allocator; trace.c turns them into rows.  Internal to trace/.
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
} cp_jax_events;

/* What the first bytes of a file say: 1 JSON lines, 2 an XSpace, 0 neither. */
int cp_jax_sniff(const unsigned char *head, size_t n, const char *path);

/* Reads the events of allocator (NULL: the GPU_<n>_bfc of the lowest n) from gz;
 * CP_ERR_INVALID "path:line: reason" (JSON) or "path: reason" (xplane) for
 * malformed input, a truncated file, or no memory events of that
 * allocator. */
cp_status cp_jax_read_jsonl(gzFile gz, const char *path, const char *allocator,
                            cp_jax_events *out);
cp_status cp_jax_read_xplane(gzFile gz, const char *path, const char *allocator,
                             cp_jax_events *out);
void cp_jax_events_free(cp_jax_events *e);

/* The profile file under a directory jax.profiler.trace wrote
 * (plugins/profile/<run>/<host>.xplane.pb, the last run in name order), or
 * NULL; malloc'd. */
char *cp_jax_find_profile(const char *dir);

#endif /* CUPOLA_JAX_H */
