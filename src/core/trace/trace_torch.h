/*
 * trace_torch.h: what the replay through the torch model (replay_torch.c)
 * reads of a loaded trace: PyTorch's allocator operations, in order, and
 * its device calls for replays with the recorded addresses.  Kept apart from
 * trace.h's public interface: only the replay of kind "torch" needs it.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TRACE_TORCH_H
#define CUPOLA_TRACE_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include "pool/torch.h"
#include "trace.h"

/* The operations PyTorch's allocator performed, for the torch model
 * (pool/torch.h), in order (one device's: op_device):
 *   ALLOC    malloc; ref: the row the allocation became
 *   FREE     free requested; ref: the allocation's row; flag 1: pending (the
 *            block was used on other streams: its free_completed comes later)
 *   DONE     a pending block's free completed; flag 1: "later" (PyTorch
 *            found it while already past the search of the malloc that
 *            follows, which then took a new segment or ran out)
 *   OOM      malloc PyTorch refused (the `oom` entry); size and stream
 *   RELEASE  cached segments freed outside any malloc the model would free
 *            them in: an empty_cache(); flag 1: certainly one, flag 2: one
 *            unless the next malloc releases memory itself (the model
 *            decides: cp_torch_malloc_releases)
 * How a snapshot's entries become them: snapshot_ops.c; other traces' rows are
 * ALLOC and FREE operations (builder.c). */
enum { CP_TOP_ALLOC = 0, CP_TOP_FREE, CP_TOP_DONE, CP_TOP_OOM, CP_TOP_RELEASE };

/* One operation (a CP_TOP_* kind), 16 bytes. */
typedef struct cp_trace_top {
    uint64_t size;   /* ALLOC and OOM: the size asked */
    uint32_t ord;    /* ALLOC, FREE, DONE: the allocation's ordinal */
    uint16_t stream; /* index into the trace's streams */
    uint8_t kind;
    uint8_t flag;
} cp_trace_top;

typedef struct cp_trace_torch_view {
    const cp_trace_top *top;
    const uint32_t *top_row;   /* each operation's row (trace_impl.h) */
    const double *time;        /* the rows' times (microseconds) */
    size_t ntop;
    const uint64_t *streams;   /* stream values by index */
    size_t nstreams;
    size_t nallocs;
    const cp_torch_segev *segev; /* PyTorch's device calls (snapshots) */
    size_t nsegev;
    size_t entries;            /* rows of the trace (for messages) */
} cp_trace_torch_view;

void cp_trace_torch_view_get(const cp_trace *t, cp_trace_torch_view *v);

/* The replay of a trace through the torch model (cp_trace_replay hands it
 * every replay whose pool is of kind "torch"). */
cp_status cp_trace_replay_torch(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                                cp_replay_result *out);

#endif /* CUPOLA_TRACE_TORCH_H */
