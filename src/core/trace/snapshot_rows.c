/*
 * snapshot_rows.c: a snapshot's decoded entries into its rows (snapshot.h:
 * which free is the block's, what is skipped as unmatched) and PyTorch's
 * own reserved bytes over time; then the torch model's operations.
 */
#include "snapshot_impl.h"

#include <stdlib.h>
#include <string.h>

static cp_status seg_overflow(const raw_event *e)
{
    return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%u][%zu]: PyTorch's reserved "
                        "bytes pass 2^63-1", (unsigned)e->device, e->entry);
}

static int by_time(const void *a, const void *b)
{
    const raw_event *x = (const raw_event *)a, *y = (const raw_event *)b;
    if (x->time_us != y->time_us)
        return x->time_us < y->time_us ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* From the decoded entries: the rows, PyTorch's reserved bytes over time,
 * and the torch model's operations. */
cp_status cp_snap_process(dec *d)
{
    cp_snapshot *s = d->s;
    cp_ptrmap m;
    size_t i, nseg = 0;
    int64_t delta = 0, r, peak;
    cp_status st = CP_OK;

    if (s->devices > 1)
        qsort(d->raw, d->n, sizeof *d->raw, by_time);

    /* Backwards: a free_requested is the free only when no free_completed
     * of the same block follows before the address is allocated again. */
    if (cp_ptrmap_init(&m, 1024) != 0)
        return cp_snap_oom();
    for (i = d->n; i-- > 0;) {
        raw_event *e = &d->raw[i];
        if (e->action == A_FREE_DONE) {
            if (cp_ptrmap_put(&m, e->addr, (void *)1) != 0)
                st = cp_snap_oom();
        } else if (e->action == A_ALLOC) {
            cp_ptrmap_del(&m, e->addr);
        } else if (e->action == A_FREE_REQ) {
            e->use = !cp_ptrmap_get(&m, e->addr);
        }
        if (st != CP_OK)
            break;
        if ((e->action == A_SEG_UP &&
             __builtin_add_overflow(delta, (int64_t)e->size, &delta)) ||
            (e->action == A_SEG_DOWN &&
             __builtin_sub_overflow(delta, (int64_t)e->size, &delta)))
            st = seg_overflow(e);
        if (st != CP_OK)
            break;
    }
    cp_ptrmap_fini(&m);
    if (st != CP_OK)
        return st;

    /* Forwards: pair frees with live allocations; PyTorch's reserved. */
    s->ev = (cp_snap_event *)malloc((d->n ? d->n : 1) * sizeof *s->ev);
    d->rawev = (size_t *)malloc((d->n ? d->n : 1) * sizeof *d->rawev);
    if (!d->rawev)
        return cp_snap_oom();
    for (i = 0; i < d->n; i++)
        d->rawev[i] = SIZE_MAX;
    for (i = 0; i < d->n; i++)
        nseg += d->raw[i].action == A_SEG_UP || d->raw[i].action == A_SEG_DOWN;
    s->seg_time = (double *)malloc((nseg + 1) * sizeof *s->seg_time);
    s->seg_reserved = (uint64_t *)malloc((nseg + 1) * sizeof *s->seg_reserved);
    if (!s->ev || !s->seg_time || !s->seg_reserved || cp_ptrmap_init(&m, 1024) != 0)
        return cp_snap_oom();
    if (__builtin_sub_overflow((int64_t)s->reserved_end, delta, &r)) {
        cp_ptrmap_fini(&m);
        return cp_error_set(CP_ERR_INVALID, "snapshot: PyTorch's reserved bytes at the start "
                            "(the segments' total minus the trace's segment events) pass "
                            "2^63-1");
    }
    if (r < 0)
        r = 0; /* no segments list, or one that disagrees with the trace */
    peak = r;
    s->seg_time[0] = d->n ? d->raw[0].time_us : 0.0;
    s->seg_reserved[0] = (uint64_t)r;
    s->nseg = 1;
    for (i = 0; i < d->n && st == CP_OK; i++) {
        raw_event *e = &d->raw[i];
        cp_snap_event *o = &s->ev[s->n];
        switch (e->action) {
        case A_SEG_UP:
        case A_SEG_DOWN:
            /* r >= 0 and size <= 2^63-1: a subtraction cannot overflow. */
            if (e->action == A_SEG_DOWN)
                r -= (int64_t)e->size;
            else if (__builtin_add_overflow(r, (int64_t)e->size, &r)) {
                st = seg_overflow(e);
                continue;
            }
            if (r < 0)
                r = 0;
            if (r > peak)
                peak = r;
            s->seg_time[s->nseg] = e->time_us;
            s->seg_reserved[s->nseg++] = (uint64_t)r;
            continue;
        case A_ALLOC:
            if (cp_ptrmap_get(&m, e->addr)) {
                s->unmatched++;
                continue;
            }
            if (cp_ptrmap_put(&m, e->addr, (void *)1) != 0)
                st = cp_snap_oom();
            o->is_free = 0;
            d->rawev[i] = s->n;
            break;
        case A_FREE_REQ:
        case A_FREE_DONE:
            if (e->action == A_FREE_REQ && !e->use)
                continue;
            if (!cp_ptrmap_del(&m, e->addr)) {
                s->unmatched++;
                continue;
            }
            o->is_free = 1;
            break;
        default:
            continue;
        }
        o->addr = e->addr;
        o->size = e->size;
        o->stream = e->stream;
        o->time_us = e->time_us;
        o->label = e->action == A_ALLOC ? e->label : 0;
        o->device = e->device;
        o->entry = e->entry;
        s->n++;
    }
    cp_ptrmap_fini(&m);
    s->reserved_peak = (uint64_t)peak;
    if (st == CP_OK)
        st = cp_snap_torch_ops(d);
    return st;
}
