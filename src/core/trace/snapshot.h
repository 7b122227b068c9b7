/*
 * snapshot.h: PyTorch memory snapshots (torch.cuda.memory._dump_snapshot, a
 * pickle) turned into a plain event list, whose events the snapshot readers
 * (snapshot_load.c) hand to the row builder like any reader's.
 *
 * What is read: `device_traces` (one list per device) and `segments`.
 *   - Entries with action "alloc" become allocations; "free_completed" (or,
 *     in snapshots of older PyTorch, "free") ends a block's life.  PyTorch
 *     records "free_requested" when the program frees a tensor and
 *     "free_completed" when the caching allocator may hand the memory out
 *     again (later when the block was used on other streams, record_stream):
 *     a pool being replayed may reuse the memory only from then on, so that
 *     is the free the replay does.  A "free_requested" is the free only when
 *     no "free_completed" of that block follows (snapshots cut short).
 *   - "segment_alloc", "segment_free", "segment_map", "segment_unmap" are
 *     PyTorch's own reserved memory over time; with the reserved total at
 *     the end (the sum of `segments[*].total_size`) they give PyTorch's
 *     reserved figure at every point and its peak.  Every other action
 *     ("snapshot", "oom", ...) is counted in `ignored`.
 *   - A free of a block allocated before the trace window began (PyTorch
 *     keeps the last N entries), or an allocation of an address still live,
 *     is skipped and counted in `unmatched`.
 *   - Several devices: the lists are merged by time (stable); addresses are
 *     unique across devices (unified addressing).  Each event keeps its device.
 *     cp_snapshot_read_device reads one device's entries alone.
 *   - Sizes are byte counts in 0..2^63-1 (trace.h says why): an "alloc"
 *     must have one, and above 0; a free's may be missing or 0 (the
 *     allocation's is used).  Anything else, or a sum of segment sizes
 *     beyond that range, fails the load naming device_traces[d][k].
 *   - `oom` entries (requests PyTorch refused) and `allocator_settings`
 *     (PyTorch's own view of its settings) are read for the torch model.
 *   - Frames (an entry's `frames`, innermost first; with PyTorch's default
 *     stacks C++ frames come first, then Python's): the label of an event is
 *     lines of text.  Line 1, the frame people recognise, "file.py:LINE
 *     name": their own code's innermost frame (a Python file outside the
 *     Python installation's packages and PyTorch: no "site-packages/",
 *     "dist-packages/" or "/lib/python" in its path, nor "/torch/" followed
 *     by one of PyTorch's modules, "nn/", "_...", "autograd/", ...), else the
 *     innermost Python frame, else the innermost frame outside those with a
 *     known file, else the first one that is not the unwinder's own
 *     (torch::unwind::unwind, CapturedTraceback); its path shortened to
 *     what follows "site-packages/" or to the file's name.  Line 2: the
 *     innermost Python frame, shortened alike, where it is not line 1's (a
 *     library's: the operation that allocated), else empty.  Then the
 *     whole stack, innermost first, one "path:line name" a line with the
 *     full path (at most 96 frames, then "... N more frames"; names and
 *     paths cut at 200 and 400 bytes).  Events without frames have no
 *     label.  Identical labels are stored once.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_SNAPSHOT_H
#define CUPOLA_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "pickle.h"
#include "pool/torch.h"
#include "trace_torch.h"

typedef struct cp_snap_event {
    uint64_t addr, size, stream;
    double time_us;
    uint32_t label;   /* index + 1 into labels; 0: none */
    uint16_t device;
    uint8_t is_free;
    size_t entry;     /* its index in device_traces[device], for messages */
} cp_snap_event;

/* The torch model's operations (their kinds: trace_torch.h), in order (one
 * device's: op_device); how the flags are read from the entries around each
 * call: snapshot_ops.c. */
typedef struct cp_snap_top {
    uint64_t size, stream; /* OOM */
    uint32_t label;        /* OOM: its frames' label (index + 1 into labels; 0: none) */
    size_t ref;            /* ALLOC, FREE, DONE */
    size_t entry;          /* its entry in device_traces[0] */
    uint8_t kind, flag;
} cp_snap_top;

typedef struct cp_snapshot {
    cp_snap_event *ev;
    size_t n;
    char **labels;
    size_t nlabels;
    size_t devices;        /* entries of device_traces */
    size_t ignored;        /* entries of other actions */
    size_t unmatched;      /* frees without allocation, allocations of live addresses */
    int has_segments;      /* the snapshot had a `segments` list */
    uint64_t reserved_end; /* sum of segments' total_size: PyTorch's reserved at the dump */
    uint64_t reserved_peak;/* PyTorch's largest reserved figure over the trace */
    double *seg_time;      /* PyTorch's reserved after each segment event (and at the start) */
    uint64_t *seg_reserved;
    size_t nseg;
    /* the torch model's view (device 0) */
    cp_snap_top *top;
    size_t ntop;
    cp_torch_segev *segev; /* PyTorch's device calls, in order */
    size_t nsegev;
    size_t ooms;           /* `oom` entries */
    int has_settings;      /* the snapshot had allocator_settings */
    char torch_env[256];   /* its PYTORCH_CUDA_ALLOC_CONF (cut at 255 bytes) */
    char torch_settings[1024]; /* the settings as a conf string (torch_conf.c's format) */
    uint16_t op_device;    /* the device the operations above are of */
} cp_snapshot;

/* Reads a snapshot pickle, or cupola's compact form of one (below).
 * CP_ERR_INVALID "offset N: reason" (from the pickle reader) or "snapshot:
 * reason" for a pickle of another shape. */
cp_status cp_snapshot_read(const unsigned char *buf, size_t len, cp_snapshot *out);
/* Only device `device`'s entries (device_traces[device], and the segments
 * whose `device` is it), the torch model's operations of that device;
 * CP_ERR_INVALID when the snapshot has no such device. */
cp_status cp_snapshot_read_device(const unsigned char *buf, size_t len, int device,
                                  cp_snapshot *out);
/* A pickle read from a stream (device < 0: every device, as
 * cp_snapshot_read): its memory follows the entries, not the frames
 * (pickle.h); compact snapshots come as a buffer. */
cp_status cp_snapshot_read_stream(const cp_pk_source *src, int device, cp_snapshot *out);
void cp_snapshot_fini(cp_snapshot *s);

/* cupola's compact snapshot ("CPSNAP1\n" then varints; what
 * tests/torch/compact.py writes): the entries' action, address, size and
 * stream, the segments, the settings; no frames, no times (an entry's time is
 * its index).  Sniffs the magic. */
int cp_snapshot_is_compact(const unsigned char *buf, size_t len);

#endif /* CUPOLA_SNAPSHOT_H */
