/*
 * trace_impl.h: a loaded trace as its loader (trace.c) leaves it and the
 * replay (replay.c and its hooks) reads it; internal to trace/.
 */
#ifndef CUPOLA_TRACE_IMPL_H
#define CUPOLA_TRACE_IMPL_H

#include "trace.h"
#include "trace_torch.h"

#include <string.h>

/* zlib's gzerror message without the path zlib puts before it ("f.gz:
 * unexpected end of file" -> "unexpected end of file"): the loaders'
 * messages name the path themselves. */
static inline const char *cp_gz_reason(const char *msg, const char *path)
{
    size_t n = strlen(path);
    if (msg && strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        return msg + n + 2;
    return msg;
}

/* One row as the replay needs it, 16 bytes: sizes of frees are those of
 * their allocate, so the replay keeps no size table of its own. */
typedef struct replay_op {
    uint64_t size;
    uint32_t ord;       /* the allocate's ordinal */
    uint16_t stream;    /* index into streams[] */
    uint16_t is_free;
} replay_op;

/* What a trace was read from (cp_trace.format): each reader sets its own. */
enum { TRACE_CSV = 0, TRACE_SNAPSHOT = 1, TRACE_JAX = 2, TRACE_CUPY = 3 };

struct cp_trace {
    char *path;
    replay_op *ops;     /* built once loading succeeds */
    size_t n, cap;
    uint8_t *is_free;
    uint32_t *ord;      /* allocate: its ordinal; free: the allocate's ordinal */
    uint64_t *ptr;
    uint64_t *size;
    uint32_t *stream;   /* index into streams[] */
    uint32_t *thread;
    double *time;
    size_t nallocs;
    uint64_t *streams;  /* distinct Stream values, in order of appearance */
    size_t nstreams;
    cp_trace_info info;
    int format;         /* TRACE_CSV, TRACE_SNAPSHOT, TRACE_JAX or TRACE_CUPY */
    int record;         /* format 0 read from a `cupola record` file (record.h) */
    int cut;            /* ... that ended early: warning says where */
    char warning[640];
    /* PyTorch snapshots only (NULL / 0 for CSV): */
    uint32_t *label;    /* per row: index + 1 into labels, 0 for none */
    uint16_t *device;   /* per row */
    char **labels;
    size_t nlabels;
    double *seg_time;   /* PyTorch's own reserved bytes over time */
    uint64_t *seg_reserved;
    size_t nseg;
    /* The torch model's operations (trace_torch.h); for CSV, the rows. */
    cp_trace_top *top;
    uint32_t *top_row;  /* per operation: its row (the latest row before it
                           for those of no row), for the trace's time */
    size_t ntop;
    cp_torch_segev *segev;
    size_t nsegev;
    /* requests PyTorch refused (`oom` entries): the row before which each
     * came, its size and stream index, for the replay of any pool */
    size_t *oom_row;
    uint64_t *oom_size;
    uint32_t *oom_stream;
    size_t nooms, oomcap;
    /* JAX memory profiles (jax.c): per allocation ordinal, BFC's chunk
     * bytes (allocation_bytes); per row, its bytes_in_use after the event
     * (bytes_allocated; UINT64_MAX: not recorded) */
    uint64_t *jax_chunk;
    uint64_t *jax_in_use;
    char allocator[128];
    /* CuPy hook logs only (trace_cupy.h): the model's operations */
    struct cp_trace_cupy *cupy;
    int has_settings;
    char torch_env[256];
    char torch_settings[1024];
};

/* Room for one more row in every per-row array (cap doubles, from 4096):
 * the readers that append rows share it (trace.c, cupy_hook.c); -1 when
 * out of host memory. */
int cp_trace_grow_rows(cp_trace *t);

/* A hexadecimal number of 1 to 16 digits, "0x" or not (RMM's pointers,
 * CuPy's pmem_id): 0, or -1 for anything else. */
int cp_trace_parse_hex(const char *s, uint64_t *out);

#endif /* CUPOLA_TRACE_IMPL_H */
