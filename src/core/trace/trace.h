/*
 * trace.h: allocation traces, loaded into compact arrays and replayed
 * against any cp_resource entirely in C.
 *
 * Five formats load, each by a reader of its own (reader.h, load.c has the
 * table and the order they are recognised in), plain or gzip-compressed
 * (read transparently):
 *   rmm_csv         RMM's logging-adaptor CSV (csv.c), below
 *   cupola_record   `cupola record` files (record.c): only their device
 *                   memory becomes rows, and a cut file loads with a warning
 *   torch_snapshot  PyTorch memory snapshots, the pickle
 *                   torch.cuda.memory._dump_snapshot writes or cupola's
 *                   compact form of one (snapshot_load.c; snapshot.h says
 *                   how their entries become rows)
 *   jax_memory      JAX memory profiles: the XSpace jax.profiler.trace writes
 *                   (*.xplane.pb, or its folder) or JSON lines written from it
 *                   (jax_load.c, jax.h)
 *   cupy_hook       CuPy memory-hook logs, JSON lines (cupy_hook.c,
 *                   trace_cupy.h)
 * and a trace may also be made from events in memory (cp_trace_from_events).
 * Every row passes one builder (builder.h) and its checks.
 *
 * RMM's CSV:
 *
 *     Thread,Time,Action,Pointer,Size,Stream
 *     0,2.000,allocate,0x7f76ec000000,154389504,0x0
 *
 * Time is microseconds (a decimal number), Action is "allocate" or "free",
 * Pointer and Stream are hexadecimal (with or without 0x).  A free's Size
 * may be 0 or missing (an empty field) in some logs; the loader takes the
 * size from the matching allocate.  An allocate's Size must be in
 * 1..CP_TRACE_BYTES_MAX.
 *
 * Loading checks the whole file and fails with CP_ERR_INVALID and a message
 * naming the file, the line and the reason ("t.csv:17: size is not a
 * number"): wrong header, unknown action, bad hex, missing columns, a thread
 * above 2^32-1, a time that is not finite, a free of
 * a pointer that is not live, an allocate of a pointer already live, a size
 * or a sum of sizes beyond CP_TRACE_BYTES_MAX, a NUL byte, or a truncated
 * gzip stream.
 *
 * Replay walks the events in file order.  Each distinct trace stream gets a
 * cp_stream made for the replay (stream 0 maps to NULL, the default stream);
 * an allocate is served on its row's stream, a free is done on the stream
 * named in the free row.  An allocation the resource refuses (CP_ERR_OOM) is
 * counted in `failed`, the replay goes on, and the later free of that pointer
 * is skipped.  Time is measured with clock_gettime around the whole loop.
 *
 * Plain C: never includes lua.h.  Compiles as C and C++.
 */
#ifndef CUPOLA_TRACE_H
#define CUPOLA_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "pool/resource.h"
#include "pool/torch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_trace cp_trace;

/* The largest byte count a trace holds, in a size or in any sum of sizes
 * (live bytes, the total, peaks; PyTorch's reserved figures): each reaches
 * Lua as an integer, which is signed 64-bit, so a count above 2^63-1 would
 * read as negative.  Sizes are at most this and so are the sums, checked as
 * they grow, so two of them added in uint64 never wrap before the check.
 * A trace that would pass it fails to load, naming the row or entry; a
 * replay whose pool reserves more than it fails. */
#define CP_TRACE_BYTES_MAX ((uint64_t)INT64_MAX)

/* What the trace itself says, computed at load time. */
typedef struct cp_trace_info {
    size_t events;       /* rows after the header */
    size_t allocs;       /* allocate rows */
    size_t frees;        /* free rows */
    size_t streams;      /* distinct Stream values */
    size_t threads;      /* distinct Thread values */
    size_t leaked;       /* blocks still live at the end of the trace */
    uint64_t peak_live;  /* largest sum of live sizes at any moment */
    uint64_t total_bytes;/* sum of all allocation sizes */
    uint64_t max_size;   /* largest single allocation */
    double duration_us;  /* Time of the last row minus Time of the first */
    /* PyTorch snapshots (snapshot.h has the rules; 0 for CSV): */
    size_t devices;      /* device_traces lists (1 for CSV) */
    size_t ignored;      /* entries of actions that are not replayed */
    size_t unmatched;    /* frees without allocation in the window, and the like */
    int torch_reserved;  /* the snapshot had `segments`: the two figures below hold */
    uint64_t torch_reserved_end;  /* PyTorch's reserved bytes when the snapshot was taken */
    uint64_t torch_peak_reserved; /* PyTorch's largest reserved figure over the trace */
    /* JAX memory profiles (format "jax_memory"; 0 otherwise): */
    uint64_t bfc_peak_bytes_in_use; /* the largest peak_bytes_in_use the events recorded */
    uint64_t device_memory; /* the profile's memory_size of the allocator's device (an
                               XSpace says it, JSON lines do not: 0) */
    size_t reordered;    /* events moved to BFC's own order: frees written after the
                            allocation that reused their chunk (moved before it), and events
                            out of the chain of BFC's bytes_in_use (jax_load.c) */
    size_t ooms;         /* requests PyTorch refused (`oom` entries): a replay attempts
                            them, and frees at once what a pool serves */
} cp_trace_info;

/* One event, as the Lua side may want to inspect it (cp_trace_event). */
typedef struct cp_trace_row {
    int is_free;       /* 0: allocate, 1: free */
    uint64_t pointer;
    uint64_t size;
    uint64_t stream;   /* the trace's stream value */
    uint32_t thread;
    double time_us;
    uint32_t device;   /* snapshots: the device_traces index */
    const char *label; /* snapshots: the allocation's frames (snapshot.h: lines, the first
                        * "file:line name" of the frame people recognise), or NULL */
} cp_trace_row;

enum { CP_STOP_NONE = 0, CP_STOP_ANY = 1, CP_STOP_NEEDED = 2 };

typedef struct cp_replay_opts {
    int single_stream; /* nonzero: replay every row on the default stream
                          (NULL) instead of one cp_stream per trace stream */
    int repeat;        /* replay the trace this many times (<= 1: once); time
                          and figures are over all repetitions */
    int synchronize;   /* nonzero: synchronize the replay streams at the end */
    /* For timelines and progress: */
    int record;        /* nonzero: record the resource's reserved bytes after
                          every event where they changed (first repetition),
                          into the result's rec_* arrays */
    /* Called about every 65536 events with the events done and the total
     * (all repetitions); NULL: none.  Must not touch the resource. */
    void (*progress)(void *ud, uint64_t done, uint64_t total);
    void *progress_ud;
    /* Pools of kind "torch" over the virtual upstream: hand out the
     * snapshot's own segment addresses while the model's device calls match
     * PyTorch's (result: divergence). */
    int recorded_addresses;
    /* Stop at the first allocation the pool refuses, as the program PyTorch
     * raised OutOfMemoryError in would (result: stopped, stop_*).
     * CP_STOP_NEEDED: only at a request the program needed: an allocation,
     * or an `oom` entry after the trace's last allocation (the program did
     * not survive it).  A refused `oom` entry that more allocations follow
     * was a request the program survived (a library trying a smaller
     * workspace first) and does not stop the replay. */
    int stop_at_oom;
    /* nonzero: during the replay the pool's clock reads the trace's
     * timestamps (each repetition from the clock's reading when it starts),
     * so a pool that decides by time sees the workload's seconds; after it
     * the clock is of its own kind again, its reading where the trace left
     * it (replay_time.h) */
    int trace_clock;
    /* nonzero: nothing runs on the replay's streams, so every event the
     * pool records counts as complete at once (cp_streams_idle, backend.h):
     * for a pool of the replay's own over the virtual upstream */
    int idle_streams;
} cp_replay_opts;

/* What a replay through the torch model adds (kind "torch", replay_torch.c). */
typedef struct cp_replay_torch_result {
    int on;                     /* the fields below hold */
    cp_torch_divergence divergence; /* recorded addresses: where the model's
                                   device calls first differed from PyTorch's */
    size_t divergence_event;    /* the operation (0-based) running then */
    uint64_t segments;          /* segments (or mapped ranges) held at the end */
} cp_replay_torch_result;

/* What a replay through BFC adds (kind "bfc", replay.c). */
typedef struct cp_replay_bfc_result {
    int on;                     /* the fields below hold */
    uint64_t addr_mismatches;   /* recorded: allocations the model placed elsewhere */
    uint64_t first_mismatch;    /* ... the first of them (allocation ordinal, 0-based) */
    int checked_chunks;         /* the recording had BFC's chunks: the two below hold */
    uint64_t chunk_mismatches;  /* allocations whose chunk or bytes_in_use after it differ */
    uint64_t first_chunk_mismatch;
    uint64_t reordered_frees;   /* frees the recording wrote after an allocation that
                                   reused their memory, moved before it (the trace's) */
} cp_replay_bfc_result;

/* A CuPy hook log replayed through kind "cupy" (replay_cupy.c): the first
 * operation where the model disagreed with the log (0: none; a
 * CP_CUPY_MISMATCH_*), at the log's line, the model's and the log's figures
 * (sizes, or total_bytes); with recorded addresses, the first cudaMalloc
 * (from 0) whose size differed from the log's alloc line (sizes 0: that side
 * made no more calls); the log line a stop came at; CuPy's used_bytes at its
 * peak, and used_bytes and what free_all_blocks() would have given back when
 * total_bytes peaked. */
typedef struct cp_replay_cupy_result {
    int on;                     /* the fields below hold */
    int mismatch;
    size_t mismatch_op;
    uint32_t mismatch_line;
    uint64_t mismatch_model, mismatch_log;
    int diverged;
    size_t div_call;
    uint32_t div_line;
    uint64_t div_model, div_log;
    uint32_t stop_line;
    uint64_t used_peak, used_at_peak, free_all_at_peak;
} cp_replay_cupy_result;

typedef struct cp_replay_result {
    uint64_t events;            /* events replayed (all repetitions) */
    double ns_per_event;        /* wall time of the loop / events */
    double seconds;             /* wall time of the loop */
    uint64_t peak_live;         /* largest sum of live requested sizes seen */
    uint64_t peak_reserved;     /* the resource's reserved_peak during replay */
    uint64_t live_at_peak;      /* the live bytes (as requested) after the event at
                                   which the reserved bytes were highest */
    double reserved_over_live;  /* peak_reserved / peak_live (0 if no live) */
    uint64_t failed;            /* allocations refused */
    uint64_t skipped_frees;     /* frees of pointers whose allocate failed */
    /* With opts.record: reserved bytes after event rec_event[i] (0-based);
     * the first point is before event 0.  Free with cp_replay_result_fini. */
    uint64_t *rec_event;
    uint64_t *rec_reserved;
    size_t nrec;
    uint64_t *rec_addr;         /* with opts.record: the address the resource gave
                                   each allocation (by ordinal; 0: refused) */
    size_t naddr;
    uint64_t maps, unmaps;      /* pages a vmm pool mapped and unmapped during
                                   the replay (0 for other resources) */
    /* PyTorch's figures (kind "torch"; for other pools, their own nearest:
     * peak of the bytes in use, upstream calls, no retries) */
    uint64_t peak_allocated;    /* torch: rounded block sizes; others: used_peak */
    uint64_t device_allocs, device_frees, retries, ooms;
    uint64_t oom_attempts;      /* `oom` entries replayed */
    uint64_t oom_served;        /* ... that the pool served (freed at once) */
    int recorded;               /* replayed with the recorded addresses (torch,
                                   bfc, cupy: their results say how it went) */
    int stopped;                /* stop_at_oom: a refusal ended the replay */
    int stop_oom_entry;         /* ... at an `oom` entry (stop_alloc is then UINT64_MAX) */
    size_t stop_event;          /* ... at this event (0-based), */
    uint64_t stop_alloc;        /* ... the allocation with this ordinal (0-based), */
    uint64_t stop_size;         /* ... asking this many bytes */
    /* The pool's reserved bytes and the live bytes (as requested) times the
     * trace's seconds, from each repetition's first event to its last (the
     * bytes after an event hold until the next one's time), summed over
     * the repetitions: a pool that holds memory longer shows it even when
     * its peak is the same. */
    double reserved_byte_seconds, live_byte_seconds;
    /* what only one framework's model reports (`on`: it replayed) */
    cp_replay_torch_result torch;
    cp_replay_bfc_result bfc;
    cp_replay_cupy_result cupy;
} cp_replay_result;

enum {
    CP_CUPY_MISMATCH_SERVED = 1, /* the model served a malloc CuPy refused */
    CP_CUPY_MISMATCH_REFUSED,    /* the model refused a malloc CuPy served */
    CP_CUPY_MISMATCH_TOTAL       /* total_bytes differs from the logged value */
};

/* Frees what a replay with opts.record allocated (safe on any result). */
void cp_replay_result_fini(cp_replay_result *res);

/* Loads path (plain or gzip).  CP_ERR_INVALID with "path:line: reason" for
 * malformed input, CP_ERR_BACKEND when the file cannot be opened. */
cp_status cp_trace_load(const char *path, cp_trace **out);
/* The same, of one device of a snapshot (device < 0: every device): only
 * device_traces[device]'s entries become rows, PyTorch's reserved figures
 * are that device's, and the torch model's operations are of it.
 * CP_ERR_INVALID when the file has no such device. */
cp_status cp_trace_load_device(const char *path, int device, cp_trace **out);
/* The same, of one allocator of a JAX memory profile (NULL: the first
 * GPU_<n>_bfc; ignored for other formats). */
cp_status cp_trace_load_opts(const char *path, int device, const char *allocator,
                             cp_trace **out);
/* JAX memory profiles: the allocator read (NULL for other formats). */
const char *cp_trace_allocator(const cp_trace *t);
/* JAX: row i's BFC chunk bytes (allocation_bytes; its allocation's for a
 * free) and bytes_in_use after it as recorded (UINT64_MAX: not recorded);
 * 0 when the trace is not JAX's. */
int cp_trace_jax_row(const cp_trace *t, size_t i, uint64_t *chunk, uint64_t *in_use);
void cp_trace_free(cp_trace *t);

/* One event of a trace made in memory (cp_trace_from_events). */
typedef struct cp_trace_event_in {
    int is_free;        /* 0: an allocation; 1: the free of one */
    uint64_t pointer;   /* names the block: unique among the blocks live at
                           once (an allocation's own index + 1 will do); a
                           free names its allocation's */
    uint64_t size;      /* an allocation's: 1..CP_TRACE_BYTES_MAX; a free's:
                           0 (its allocation's) */
    uint64_t stream;    /* the stream value (0: the default stream) */
    double time_us;     /* microseconds, finite */
    const char *label;  /* an allocation's frames as a snapshot's label
                           (cp_trace_row.label: lines), or NULL; copied */
    uint32_t device;    /* 0..65535 */
} cp_trace_event_in;

/* A trace of events in memory instead of a file (a producer that is not a
 * recorder), built by the same row builder as every reader:
 * the same checks, each failure CP_ERR_INVALID "name: event K: reason" (K
 * from 1), and the same figures in cp_trace_info (devices: the highest
 * device + 1; threads: the devices used, as for a snapshot).  name is what
 * cp_trace_path answers (copied); format what cp_trace_format does (a
 * string constant, e.g. "scaled"); ev[0..n) is read, not kept.  The trace
 * has no PyTorch figures, `oom` entries or settings; the torch model
 * allocates and frees as its rows do.  Free it with cp_trace_free. */
cp_status cp_trace_from_events(const char *name, const char *format,
                               const cp_trace_event_in *ev, size_t n, cp_trace **out);

size_t cp_trace_events(const cp_trace *t);
void cp_trace_info_get(const cp_trace *t, cp_trace_info *out);
/* Row i (0-based, < cp_trace_events); CP_ERR_INVALID when out of range. */
cp_status cp_trace_event(const cp_trace *t, size_t i, cp_trace_row *out);
const char *cp_trace_path(const cp_trace *t);
/* "rmm_csv", "torch_snapshot", "jax_memory", "cupy_hook" or "cupola_record"
 * (above); a trace made from events, the format its maker named. */
const char *cp_trace_format(const cp_trace *t);
/* A recording that loaded although it was cut (record.h): where, and how
 * many events were read; NULL for a whole file. */
const char *cp_trace_warning(const cp_trace *t);
/* PyTorch's own reserved bytes over time (snapshots): the points' count, and
 * the arrays through time/reserved (NULL and 0 for CSV). */
size_t cp_trace_torch_reserved(const cp_trace *t, const double **time, const uint64_t **reserved);
/* A snapshot's allocator settings (NULL when it had none): settings = 0,
 * PYTORCH_CUDA_ALLOC_CONF as PyTorch read it; 1, the effective settings as a
 * conf string (the pool option conf reads both). */
const char *cp_trace_torch_conf(const cp_trace *t, int settings);

/* What a CuPy hook log says beyond its rows (0 returned for other traces):
 * the pool's cudaMallocs (alloc lines) that succeeded and that the device
 * refused, mallocs of size 0, frees inside a malloc (its gc.collect()),
 * the user's free_all_blocks() lines, whether the lines carried stream,
 * malloc_preprocess and total_bytes, and the highest total_bytes logged. */
typedef struct cp_trace_cupy_info {
    size_t device_allocs, device_alloc_failures, zero_mallocs, gc_frees, free_all_blocks;
    int stream, malloc_preprocess, total_bytes;
    uint64_t peak_total_bytes;
} cp_trace_cupy_info;
int cp_trace_cupy_info_get(const cp_trace *t, cp_trace_cupy_info *out);

/* PyTorch's device calls in a snapshot (segment_alloc / free / map / unmap
 * entries of the device its operations were read for): what a replay with
 * the recorded addresses follows; 0 for CSV. */
size_t cp_trace_torch_calls(const cp_trace *t);

/* The k-th `oom` entry of a snapshot (a request PyTorch refused), k below
 * info.ooms: the row it came before (the trace's event count when it came
 * after the last), its size and stream value.  CP_ERR_INVALID out of range. */
cp_status cp_trace_oom_entry(const cp_trace *t, size_t k, size_t *row, uint64_t *size,
                             uint64_t *stream);
/* The k-th `oom` entry's frames as a label (a snapshot with frames: where
 * the run ran out), NULL where it has none or k is out of range. */
const char *cp_trace_oom_label(const cp_trace *t, size_t k);

/* Replays t against r.  The resource's statistics are read before and after;
 * peak_reserved is r's reserved_peak at the end (reset by nothing: replay a
 * fresh pool for a clean figure).  Blocks still live at the end of the trace
 * are freed after the timed loop, so the pool is left empty.  Returns CP_OK
 * even when some allocations failed (see out->failed); other errors (stream
 * creation, a non-OOM failure of the resource) stop the replay. */
cp_status cp_trace_replay(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                          cp_replay_result *out);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_TRACE_H */
