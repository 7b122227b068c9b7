/*
 * snapshot_ops.c: the torch model's operations of a snapshot (snapshot.h,
 * trace_torch.h), read from the entries around each call of PyTorch's
 * allocator.
 */
#include "snapshot_impl.h"

#include <stdlib.h>
#include <string.h>

/*
 * Built from one device's entries (d->opdev: the one read, or device 0).  A
 * call of PyTorch's allocator leaves its entry (alloc, free_requested, oom)
 * after the entries of what it did inside: the run of free_completed (of pending blocks), segment_free /
 * unmap and segment_alloc / map entries between two calls belongs to the
 * second call, or to an empty_cache() (which leaves no entry of its own)
 * between them.  So:
 *   - free_requested followed at once by its block's free_completed is a
 *     plain free; otherwise the block is pending, and its free_completed is
 *     a DONE where it stands.
 *   - A DONE is "later" when a segment_alloc / map follows it before the
 *     next call, or that call is an oom: PyTorch had already failed to find
 *     a block (or synchronized) when it completed, so the malloc must not
 *     see the block; it returns at the next malloc or synchronization.
 *   - Segment frees before a call the model could not have made: an
 *     empty_cache() where the first of them stands (flag 1).  Those before
 *     a malloc that then took a new segment or ran out may be that malloc's
 *     own (garbage collection, a retry under the limit): flag 2, the model
 *     decides. */
typedef struct tmp_op {
    cp_snap_top op;
    uint8_t seg;      /* 0: an operation; 1: segment up; 2: segment down */
} tmp_op;

static int is_call(const tmp_op *o)
{
    return !o->seg && (o->op.kind == CP_TOP_ALLOC || o->op.kind == CP_TOP_FREE ||
                       o->op.kind == CP_TOP_OOM);
}

cp_status cp_snap_torch_ops(dec *d)
{
    cp_snapshot *s = d->s;
    tmp_op *tmp = NULL;
    size_t nt = 0, i, j, nseg = 0;
    cp_ptrmap live, pend;
    cp_status st = CP_OK;

    for (i = 0; i < d->n; i++)
        nseg += d->raw[i].device == d->opdev && (d->raw[i].action == A_SEG_UP ||
                                          d->raw[i].action == A_SEG_DOWN);
    tmp = (tmp_op *)calloc(d->n ? d->n : 1, sizeof *tmp);
    s->segev = (cp_torch_segev *)malloc((nseg ? nseg : 1) * sizeof *s->segev);
    if (!tmp || !s->segev) {
        free(tmp);
        return cp_snap_oom();
    }
    if (cp_ptrmap_init(&live, 1024) != 0) {
        free(tmp);
        return cp_snap_oom();
    }
    if (cp_ptrmap_init(&pend, 64) != 0) {
        cp_ptrmap_fini(&live);
        free(tmp);
        return cp_snap_oom();
    }
    /* live / pend: address -> the allocation's row + 1 */
    for (i = 0; i < d->n && st == CP_OK; i++) {
        raw_event *e = &d->raw[i];
        tmp_op *o = &tmp[nt];
        void *v;
        if (e->device != d->opdev)
            continue;
        memset(o, 0, sizeof *o);
        o->op.entry = e->entry;
        switch (e->action) {
        case A_ALLOC:
            if (d->rawev[i] == SIZE_MAX)
                continue;
            o->op.kind = CP_TOP_ALLOC;
            o->op.ref = d->rawev[i];
            if (cp_ptrmap_put(&live, e->addr, (void *)(uintptr_t)(d->rawev[i] + 1)) != 0)
                st = cp_snap_oom();
            break;
        case A_FREE_REQ:
            v = cp_ptrmap_del(&live, e->addr);
            if (!v)
                continue;
            o->op.kind = CP_TOP_FREE;
            o->op.ref = (size_t)(uintptr_t)v - 1;
            for (j = i + 1; j < d->n && d->raw[j].device != d->opdev; j++)
                ;
            if (j < d->n && d->raw[j].action == A_FREE_DONE && d->raw[j].addr == e->addr) {
                d->raw[j].done = 1;
            } else {
                o->op.flag = 1;
                if (cp_ptrmap_put(&pend, e->addr, v) != 0)
                    st = cp_snap_oom();
            }
            break;
        case A_FREE_DONE:
            if (e->done)
                continue;
            if ((v = cp_ptrmap_del(&pend, e->addr)) != NULL) {
                o->op.kind = CP_TOP_DONE;
            } else if ((v = cp_ptrmap_del(&live, e->addr)) != NULL) {
                o->op.kind = CP_TOP_FREE; /* a free with no free_requested (older PyTorch) */
            } else {
                continue;
            }
            o->op.ref = (size_t)(uintptr_t)v - 1;
            break;
        case A_OOM:
            o->op.kind = CP_TOP_OOM;
            o->op.size = e->size;
            o->op.stream = e->stream;
            o->op.label = e->label;
            break;
        case A_SEG_UP:
        case A_SEG_DOWN:
            o->seg = e->action == A_SEG_UP ? 1 : 2;
            s->segev[s->nsegev].call = e->call;
            s->segev[s->nsegev].addr = e->addr;
            s->segev[s->nsegev].size = e->size;
            s->segev[s->nsegev].entry = e->entry;
            s->nsegev++;
            break;
        default:
            continue;
        }
        nt++;
    }
    cp_ptrmap_fini(&live);
    cp_ptrmap_fini(&pend);
    if (st != CP_OK) {
        free(tmp);
        return st;
    }
    s->top = (cp_snap_top *)malloc((nt ? nt : 1) * sizeof *s->top);
    if (!s->top) {
        free(tmp);
        return cp_snap_oom();
    }
    /* gap by gap: [a, b) are the entries between calls, b the call (or nt) */
    for (i = 0; i <= nt;) {
        size_t a = i, b = i, k, first_down = SIZE_MAX, last_down = 0;
        int up_after_down = 0, next_kind;
        while (b < nt && !is_call(&tmp[b]))
            b++;
        next_kind = b < nt ? tmp[b].op.kind : -1;
        for (k = a; k < b; k++) {
            if (tmp[k].seg == 2) {
                if (first_down == SIZE_MAX)
                    first_down = k;
                last_down = k;
            }
        }
        for (k = a; k < b; k++)
            if (tmp[k].seg == 1 && first_down != SIZE_MAX && k > last_down)
                up_after_down = 1;
        for (k = a; k < b; k++) {
            if (first_down == k) {
                cp_snap_top *r = &s->top[s->ntop++];
                memset(r, 0, sizeof *r);
                r->kind = CP_TOP_RELEASE;
                r->entry = tmp[k].op.entry;
                r->flag = (next_kind == CP_TOP_OOM ||
                           (next_kind == CP_TOP_ALLOC && up_after_down)) ? 2 : 1;
            }
            if (tmp[k].seg)
                continue;
            if (tmp[k].op.kind == CP_TOP_DONE) {
                size_t q;
                int later = next_kind == CP_TOP_OOM;
                for (q = k + 1; q < b && !later; q++)
                    later = tmp[q].seg == 1;
                tmp[k].op.flag = (uint8_t)later;
            }
            s->top[s->ntop++] = tmp[k].op;
        }
        if (b < nt)
            s->top[s->ntop++] = tmp[b].op;
        i = b + 1;
    }
    free(tmp);
    return CP_OK;
}
