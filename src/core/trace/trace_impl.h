/*
 * trace_impl.h: a loaded trace as the row builder (builder.c) and its
 * reader leave it and the replay (replay.c and its hooks) reads it; internal
 * to trace/.
 */
#ifndef CUPOLA_TRACE_IMPL_H
#define CUPOLA_TRACE_IMPL_H

#include "trace.h"
#include "trace_torch.h"

/* One row as the replay needs it, 16 bytes: sizes of frees are those of
 * their allocate, so the replay keeps no size table of its own. */
typedef struct replay_op {
    uint64_t size;
    uint32_t ord;       /* the allocate's ordinal */
    uint16_t stream;    /* index into streams[] */
    uint16_t is_free;
} replay_op;

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
    const char *format; /* cp_trace_format's answer (the reader's name) */
    const struct cp_trace_reader *reader; /* what read it (reader.h; NULL: none) */
    int cut;            /* the file ended early and loaded: warning says where */
    char warning[640];
    /* per row where the trace has them (NULL: none) */
    uint32_t *label;    /* index + 1 into labels, 0 for none */
    uint16_t *device;
    char **labels;
    size_t nlabels;
    /* PyTorch snapshots only (NULL / 0 for others): */
    double *seg_time;   /* PyTorch's own reserved bytes over time */
    uint64_t *seg_reserved;
    size_t nseg;
    /* The torch model's operations (trace_torch.h): a snapshot's own, for
     * other traces the rows (builder.c) */
    cp_trace_top *top;
    uint32_t *top_row;  /* per operation: its row (the latest row before it
                           for those of no row), for the trace's time */
    size_t ntop;
    cp_torch_segev *segev; /* PyTorch's device calls (builder.c) */
    size_t nsegev;
    /* requests the program's allocator refused (PyTorch's `oom` entries,
     * CuPy's refused mallocs): the row before which each came, its size and
     * stream index, for the replay of any pool (builder.c adds them) */
    size_t *oom_row;
    uint64_t *oom_size;
    uint32_t *oom_stream;
    uint32_t *oom_label; /* each entry's frames (index + 1 into labels, 0: none) */
    size_t nooms, oomcap;
    /* JAX memory profiles (jax_load.c): per allocation ordinal, BFC's chunk
     * bytes (allocation_bytes); per row, its bytes_in_use after the event
     * (bytes_allocated; UINT64_MAX: not recorded) */
    uint64_t *jax_chunk;
    uint64_t *jax_in_use;
    char allocator[128];
    /* CuPy hook logs only (trace_cupy.h): the model's operations */
    struct cp_trace_cupy *cupy;
    /* a prediction at another size (scale.h): its fits and what frees
     * them (builder.c's cp_tb_scaled); NULL otherwise */
    struct cp_scale *scaled;
    void (*scaled_free)(struct cp_scale *);
    /* PyTorch's settings (snapshots with allocator_settings) */
    int has_settings;
    char torch_env[256];
    char torch_settings[1024];
};

#endif /* CUPOLA_TRACE_IMPL_H */
