/*
 * timeline.h: what cupola.timeline draws, computed from a trace in C: the
 * live bytes after every event and every block as a band (first event,
 * last event, position on a compacted address axis, size, stream, label).
 *
 * The x axis is the event index (as in PyTorch's memory_viz): every event is
 * one step, so bursts of small allocations are not crushed together.  The
 * address axis is compacted: the blocks' address ranges are merged into
 * disjoint regions (a pool's chunks, PyTorch's segments), laid one after the
 * other without the gaps between them, so a block's band sits at
 * region_offset + (address - region_start).  Blocks alive at the same
 * moment never overlap on that axis, which lets the page draw them straight
 * into pixels in time linear in the blocks and the screen.
 *
 * Addresses come from the trace, or from a replay (cp_replay_result's
 * rec_addr): then the bands show where that pool put each block.  Arrays of
 * floats are float32 where the page only draws them (time, live, y) and
 * double where it prints them (size).  Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TIMELINE_H
#define CUPOLA_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

typedef struct cp_timeline {
    size_t n;              /* events */
    float *time;           /* per event: microseconds since the first event */
    float *live;           /* per event: live bytes after it */
    double t0_us;          /* time of the first event */
    uint64_t peak_live;
    size_t peak_index;     /* first event at which live reaches peak_live */
    size_t nb;             /* blocks drawn */
    uint32_t *b_start;     /* event index of the allocation */
    uint32_t *b_end;       /* event index of the free, n when never freed */
    float *b_y;            /* offset on the compacted address axis */
    double *b_size;
    double *b_addr;        /* the address (for the hover; exact below 2^53) */
    uint16_t *b_stream;    /* index into streams */
    uint32_t *b_label;     /* index + 1 into labels, 0: none */
    double height;         /* the compacted axis' extent */
    size_t nregions;
    uint64_t *streams;     /* distinct stream values */
    size_t nstreams;
    const char **labels;   /* point into the trace: valid while it lives */
    size_t nlabels;
} cp_timeline;

/* addr_by_ord: the address of allocation k (k-th allocate row), 0 for one
 * that was refused (not drawn); NULL: the trace's own pointers. */
cp_status cp_timeline_build(const cp_trace *t, const uint64_t *addr_by_ord, size_t naddr,
                            cp_timeline *out);
void cp_timeline_fini(cp_timeline *tl);

#endif /* CUPOLA_TIMELINE_H */
