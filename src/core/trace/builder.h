/*
 * builder.h: the one code that writes a trace's rows, internal to trace/.
 * Every reader (reader.h), and any producer of events in memory
 * (cp_trace_from_events, trace.h; a scaled trace, scale_trace.c), appends
 * its rows here, so every trace passes the same checks and gets the same
 * figures:
 *
 *   - an allocate's size is in 1..2^63-1 (CP_TRACE_BYTES_MAX), its pointer
 *     not live; a free's pointer is live (its size 0 or missing: the
 *     allocation's); the live bytes and the total of the sizes stay within
 *     2^63-1; at most 2^32 - 1 allocations;
 *   - each free gets its allocate's ordinal (the replay finds the block by
 *     index, no hashing in its loop), each stream value an index in order of
 *     appearance, threads are counted;
 *   - what PyTorch's allocator did beyond the rows, where the producer has
 *     it (a snapshot reader, a scaled trace from its base): its operations
 *     for the torch model, its device calls, its settings, written here too;
 *   - cp_tb_finish turns the rows into what the replay walks (trace_impl.h:
 *     ops, and the torch model's operations where the producer gave none)
 *     and fills the figures of cp_trace_info the rows give.
 *
 * A check that fails names where the row came from: "path:line" (the
 * builder's line, which the reader keeps), or what the reader's `where`
 * writes (a snapshot's entry).  Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TRACE_BUILDER_H
#define CUPOLA_TRACE_BUILDER_H

#include "ptrmap.h"
#include "trace_impl.h"

typedef struct cp_trace_builder {
    cp_trace *t;
    const char *path;   /* the trace's (messages name it) */
    size_t line;        /* where the current row comes from */
    /* another way to say where, into buf (NULL: "path:line") */
    void (*where)(void *ud, char *buf, size_t n);
    void *where_ud;
    cp_ptrmap live;     /* pointer -> allocate ordinal + 1 */
    cp_ptrmap streams;  /* stream value + 1 -> index + 1 */
    void *stream_max;   /* the same for the stream value UINT64_MAX */
    cp_ptrmap threads;  /* thread value + 1 -> 1 */
    cp_ptrmap labelmap; /* a label's hash | 1 -> index + 1 (cp_tb_label) */
    uint64_t live_bytes;
    uint64_t *osize;    /* the size of each allocate, by ordinal */
    size_t ocap;
    size_t labelcap;
    size_t topcap;      /* room in t->top (cp_tb_torch_op) */
} cp_trace_builder;

/* One row as a reader hands it over. */
typedef struct cp_tb_row {
    int is_free;
    uint64_t ptr;
    uint64_t size;      /* a free's: 0 (or its allocation's) */
    uint64_t stream;    /* the trace's stream value */
    uint64_t thread;    /* below 2^32 */
    double time_us;
    uint32_t label;     /* index + 1 into the trace's labels, 0: none */
    uint16_t device;
} cp_tb_row;

/* Starts building into t (its path set; everything else zero); CP_ERR_OOM. */
cp_status cp_tb_init(cp_trace_builder *b, cp_trace *t);
void cp_tb_fini(cp_trace_builder *b);

/* Appends one row after its checks; CP_ERR_INVALID naming where it came
 * from, CP_ERR_OOM. */
cp_status cp_tb_add(cp_trace_builder *b, const cp_tb_row *r);

/* The allocate ordinal + 1 of a live pointer, 0 when it is not live. */
uint32_t cp_tb_live(const cp_trace_builder *b, uint64_t ptr);
/* The index of a stream value, added when new; CP_ERR_OOM. */
cp_status cp_tb_stream(cp_trace_builder *b, uint64_t stream, uint32_t *index);
/* Whether the stream value has an index already. */
int cp_tb_stream_known(const cp_trace_builder *b, uint64_t stream);

/* The trace's labels: a label interned (index + 1 for cp_tb_row.label;
 * the text copied), or a reader's table of its own taken whole (the trace
 * frees them; no row refers to them yet). */
cp_status cp_tb_label(cp_trace_builder *b, const char *s, uint32_t *label);
void cp_tb_take_labels(cp_trace_builder *b, char **labels, size_t n);
/* Every row's device is d (a log of one device, known at its end). */
cp_status cp_tb_device_all(cp_trace_builder *b, uint16_t d);

/* A request the program's allocator refused (an `oom` entry), standing
 * before row `row` (the row count when after the last), of `size` bytes on
 * stream index `stream`: every pool's replay attempts it. */
cp_status cp_tb_oom_entry(cp_trace_builder *b, size_t row, uint64_t size, uint32_t stream,
                          uint32_t label);

/* PyTorch's own allocator operations for the torch model (trace_torch.h),
 * where the producer has them (a snapshot's, or a scaled trace's from its
 * base): cp_tb_torch_begin says so before the first (about n of them; the
 * builder then makes none from the rows), cp_tb_torch_op adds each in
 * order once the rows are in.  An operation: */
typedef struct cp_tb_top {
    uint8_t kind, flag;   /* CP_TOP_* and its flag */
    uint32_t ord;         /* ALLOC, FREE, DONE: the allocation's ordinal (the
                             operation's size is its allocate's) */
    uint64_t stream;      /* ALLOC, FREE, DONE, OOM: the stream value */
    uint64_t size;        /* OOM: the size asked */
    size_t row;           /* the row whose time it has (the latest before it
                             where it has none) */
    size_t before;        /* OOM: the row its `oom` entry stands before (the
                             row count when after the last); the builder
                             adds that entry (cp_tb_oom_entry) */
    uint32_t label;       /* OOM: its frames (index + 1 into the labels; 0:
                             none) */
} cp_tb_top;
cp_status cp_tb_torch_begin(cp_trace_builder *b, size_t n);
/* CP_ERR_INVALID for an ordinal not allocated, a row past the rows, more
 * than 65535 streams; CP_ERR_OOM. */
cp_status cp_tb_torch_op(cp_trace_builder *b, const cp_tb_top *op);
/* PyTorch's device calls (segment_alloc, segment_free, map, unmap), in
 * order: the trace takes the array (malloc'd) and frees it. */
void cp_tb_take_torch_calls(cp_trace_builder *b, cp_torch_segev *calls, size_t n);
/* PyTorch's allocator settings: PYTORCH_CUDA_ALLOC_CONF as read, and the
 * effective settings as a conf string (cp_trace_torch_conf); copied, cut
 * to the trace's room for them. */
void cp_tb_torch_settings(cp_trace_builder *b, const char *env, const char *settings);

/* A prediction at another size (scale.h): its fits, which the trace owns
 * and frees with free_fits. */
void cp_tb_scaled(cp_trace_builder *b, struct cp_scale *fits,
                  void (*free_fits)(struct cp_scale *));

/* The trace loaded although the file was cut: the warning, formatted
 * (cp_trace_warning). */
void cp_tb_cut(cp_trace_builder *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* "where: why ('detail')" (detail NULL: without it), CP_ERR_INVALID. */
cp_status cp_tb_bad(cp_trace_builder *b, const char *why, const char *detail);
/* CP_ERR_OOM "out of host memory loading path". */
cp_status cp_tb_nomem(cp_trace_builder *b);

/* The rows done: the replay's operations, the torch model's operations
 * where the reader made none, and the figures (events, streams, leaked,
 * duration, ooms).  CP_ERR_INVALID for more than 65535 streams. */
cp_status cp_tb_finish(cp_trace_builder *b);

#endif /* CUPOLA_TRACE_BUILDER_H */
