/*
 * trace/replay_torch.c: a trace replayed through the torch model
 * (pool/torch.h), operation by operation as PyTorch's allocator performed
 * them (trace_torch.h; how a snapshot's entries become operations:
 * snapshot.h and snapshot.c):
 *   ALLOC    cp_torch_malloc on the operation's stream value; the handle is
 *            kept by allocation ordinal (no lookup by address)
 *   FREE     cp_torch_free, or cp_torch_free_pending for a block used on
 *            other streams (its token kept by ordinal)
 *   DONE     cp_torch_complete of the token ("later" as the snapshot says)
 *   OOM      a malloc PyTorch refused: attempted; what the model serves is
 *            freed at once
 *   RELEASE  cp_torch_empty_cache, unless (flag 2) the next malloc would
 *            release memory itself (cp_torch_malloc_releases)
 * With opts->recorded_addresses the model's device calls get PyTorch's
 * addresses while they match PyTorch's calls (pool/torch.h).  Streams are the
 * trace's own stream values (all 0 with single_stream).  Blocks still in use
 * at the end are freed after the timed loop, pending ones completed, so the
 * pool is left as empty as PyTorch's would be after freeing everything.
 * The trace's time (replay_time.h): the integrals as for every pool, each
 * operation at its row's time (one without a row of its own, at the latest
 * row before it); with opts->trace_clock the pool's clock reads the trace's
 * time at the end of each repetition (the model decides by no time, so
 * that is all a clock could show).
 */
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"
#include "trace_impl.h"
#include "trace_torch.h"
#include "replay.h"
#include "replay_lock.h"
#include "replay_time.h"

/* What the replay holds for an allocation ordinal, in one word: 0, or the
 * live block's address | H_LIVE, or the pending token's | H_PENDING (both
 * are 8-byte aligned).  Sizes are the operations' own. */
enum { H_NONE = 0, H_LIVE = 1, H_PENDING = 2, H_TAG = 3 };
typedef uintptr_t handle;
#define H_PTR(x) ((void *)((x) & ~(uintptr_t)H_TAG))

/* opts.record: the pool's reserved bytes where they changed, by the trace's
 * row (what timelines draw against), and the rows of each allocation and
 * free, to find them from the operations. */
typedef struct recorder {
    uint32_t *alloc_row, *free_row; /* by ordinal */
    size_t cap;
    size_t row;                     /* the last row an operation stood at */
} recorder;

static cp_status rec_point(cp_replay_result *out, recorder *rc, uint64_t reserved)
{
    return replay_record_point(out, &rc->cap, rc->row, reserved);
}

static cp_status rec_init(recorder *rc, const cp_trace *t)
{
    size_t i;
    memset(rc, 0, sizeof *rc);
    rc->alloc_row = (uint32_t *)calloc(t->nallocs ? t->nallocs : 1, sizeof *rc->alloc_row);
    rc->free_row = (uint32_t *)calloc(t->nallocs ? t->nallocs : 1, sizeof *rc->free_row);
    if (!rc->alloc_row || !rc->free_row)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    for (i = 0; i < t->n; i++) {
        if (t->is_free[i])
            rc->free_row[t->ord[i]] = (uint32_t)i;
        else
            rc->alloc_row[t->ord[i]] = (uint32_t)i;
    }
    return CP_OK;
}

/* The row operation op stands at. */
static void rec_row(recorder *rc, const cp_trace_top *op)
{
    if (op->kind == CP_TOP_ALLOC)
        rc->row = rc->alloc_row[op->ord];
    else if ((op->kind == CP_TOP_FREE && !op->flag) || op->kind == CP_TOP_DONE)
        rc->row = rc->free_row[op->ord];
}

/* The next malloc (ALLOC or OOM) after operation i. */
static const cp_trace_top *next_malloc(const cp_trace_torch_view *v, size_t i)
{
    for (; i < v->ntop; i++)
        if (v->top[i].kind == CP_TOP_ALLOC || v->top[i].kind == CP_TOP_OOM)
            return &v->top[i];
    return NULL;
}

/* One replay through the model: what its repetitions share. */
typedef struct torch_run {
    const cp_trace *t;
    cp_resource *r;
    const cp_replay_opts *o;
    cp_replay_result *out;
    cp_torch *m;
    cp_trace_torch_view v;
    handle *h;                /* by allocation ordinal */
    recorder rc;
    replay_clock rclock;
    replay_hook chook;
    replay_integral g;
    size_t last_alloc;        /* the last ALLOC operation (SIZE_MAX: none) */
    uint64_t total_events, peak, failed, skipped;
    int reps;
} torch_run;

/* The replay's tables, and its recording (opts.record). */
static cp_status setup(torch_run *x)
{
    const cp_trace *t = x->t;
    cp_replay_result *out = x->out;
    size_t k;
    cp_status st = CP_OK;
    if (x->o->recorded_addresses && !x->v.nsegev)
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a PyTorch snapshot "
                            "with segment entries (%s has none)", cp_trace_path(t));
    if (x->o->recorded_addresses && !cp_torch_is_virtual(x->m))
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a torch pool over "
                            "the \"virtual\" upstream (the device gives its own addresses)");
    x->h = (handle *)calloc(x->v.nallocs ? x->v.nallocs : 1, sizeof *x->h);
    if (!x->h)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    if (x->o->record) {
        out->rec_addr = (uint64_t *)calloc(x->v.nallocs ? x->v.nallocs : 1, sizeof *out->rec_addr);
        st = out->rec_addr ? rec_init(&x->rc, t)
                           : cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
        if (st == CP_OK)
            st = rec_point(out, &x->rc, cp_resource_reserved(x->r));
        if (st != CP_OK) {
            cp_replay_result_fini(out);
            return st;
        }
        out->naddr = x->v.nallocs;
    }
    /* the last allocation: an `oom` entry after it was one the program did
     * not survive (CP_STOP_NEEDED) */
    for (k = x->v.ntop; k-- > 0;)
        if (x->v.top[k].kind == CP_TOP_ALLOC)
            break;
    x->last_alloc = k;
    return CP_OK;
}

/* stop_at_oom: the program raised at operation i. */
static void stop_at(cp_replay_result *out, size_t i, const cp_trace_top *op, int oom_entry)
{
    out->stopped = 1;
    out->stop_oom_entry = oom_entry;
    out->stop_event = i;
    out->stop_alloc = oom_entry ? UINT64_MAX : op->ord;
    out->stop_size = op->size;
}

/* Operation op (the i-th) on the model: CP_OK, a failure, or, where
 * stop_at_oom stops the replay, CP_OK with out->stopped.  *live and *gi are
 * the walk's (in registers: this is inlined into it). */
static inline cp_status torch_op(torch_run *x, const cp_trace_top *op, size_t i, uint64_t stream,
                                 uint64_t *live, replay_integral *gi, int rec_addr)
{
    handle *hx;
    cp_torch_block *b;
    cp_torch_pending *tok;
    uint64_t addr;
    cp_status ms;
    switch (op->kind) {
    case CP_TOP_ALLOC:
        hx = &x->h[op->ord];
        ms = cp_torch_malloc(x->m, op->size, stream, &b, &addr);
        if (__builtin_expect(ms != CP_OK, 0)) {
            if (ms != CP_ERR_OOM)
                return ms;
            x->failed++;
            *hx = H_NONE;
            if (x->o->stop_at_oom)
                stop_at(x->out, i, op, 0);
            return CP_OK;
        }
        *hx = (uintptr_t)b | H_LIVE;
        if (__builtin_expect(rec_addr, 0))
            x->out->rec_addr[op->ord] = addr;
        *live += op->size;
        if (*live > x->peak)
            x->peak = *live;
        gi->live_bus -= REPLAY_BYTES(op->size) * gi->t;
        return CP_OK;
    case CP_TOP_FREE:
        hx = &x->h[op->ord];
        if (__builtin_expect((*hx & H_TAG) != H_LIVE, 0)) {
            x->skipped++;
            return CP_OK;
        }
        *live -= op->size;
        gi->live_bus += REPLAY_BYTES(op->size) * gi->t;
        if (op->flag) {
            tok = cp_torch_free_pending(x->m, (cp_torch_block *)H_PTR(*hx));
            *hx = tok ? (uintptr_t)tok | H_PENDING : H_NONE;
        } else {
            cp_torch_free(x->m, (cp_torch_block *)H_PTR(*hx));
            *hx = H_NONE;
        }
        return CP_OK;
    case CP_TOP_DONE:
        hx = &x->h[op->ord];
        if ((*hx & H_TAG) == H_PENDING)
            cp_torch_complete(x->m, (cp_torch_pending *)H_PTR(*hx), op->flag);
        *hx = H_NONE;
        return CP_OK;
    case CP_TOP_OOM:
        x->out->oom_attempts++;
        if (cp_torch_malloc(x->m, op->size, stream, &b, &addr) == CP_OK) {
            x->out->oom_served++;
            cp_torch_free(x->m, b);
        } else if (x->o->stop_at_oom == CP_STOP_ANY ||
                   (x->o->stop_at_oom == CP_STOP_NEEDED &&
                    (x->last_alloc == SIZE_MAX || i > x->last_alloc))) {
            stop_at(x->out, i, op, 1);
        }
        return CP_OK;
    case CP_TOP_RELEASE: {
        const cp_trace_top *nx = op->flag == 2 ? next_malloc(&x->v, i) : NULL;
        if (!nx || !cp_torch_malloc_releases(x->m, nx->size,
                                             x->o->single_stream ? 0 : x->v.streams[nx->stream]))
            cp_torch_empty_cache(x->m);
        return CP_OK;
    }
    default:
        return CP_OK;
    }
}

/* The end of a repetition: what is still in use or pending goes back. */
static void rep_end(torch_run *x, int rep)
{
    cp_torch_stats st1;
    size_t k;
    if (rep == 0 && x->o->recorded_addresses) {
        cp_torch_end_recorded(x->m, &x->out->torch.divergence);
        x->out->torch.divergence_event = cp_torch_divergence_event(x->m);
    }
    cp_torch_get_stats(x->m, &st1);
    if (rep == 0)
        x->out->torch.segments = (uint64_t)st1.segment[CP_TORCH_ALL].current;
    for (k = 0; k < x->v.nallocs; k++) {
        handle *hx = &x->h[k];
        if ((*hx & H_TAG) == H_LIVE)
            cp_torch_free(x->m, (cp_torch_block *)H_PTR(*hx));
        else if ((*hx & H_TAG) == H_PENDING)
            cp_torch_complete(x->m, (cp_torch_pending *)H_PTR(*hx), 0);
        *hx = H_NONE;
    }
}

/* One repetition of the operations, under the batched lock. */
static cp_status repetition(torch_run *x, int rep)
{
    const cp_trace_torch_view *v = &x->v;
    const cp_replay_opts *o = x->o;
    cp_replay_result *out = x->out;
    const cp_trace_top *op = v->top, *end = v->top + v->ntop;
    replay_walk w = {.t = x->t, .r = x->r, .o = o, .out = out, .rep = rep};
    const uint32_t *top_row = v->top_row;
    const double *time = v->time;
    const uint64_t *reserved_now = cp_torch_reserved_now(x->m);
    /* a snapshot may hold operations and no row at all (segment and oom
     * entries only): no time then */
    double time0 = v->ntop && v->entries ? time[0] : 0.0;
    int follow = 1, rec_addr = o->record && rep == 0;
    /* the loop keeps to locals (the calls would make the compiler reload
     * the options on every operation) */
    const uint64_t *streams = v->streams;
    int single = o->single_stream, note = o->recorded_addresses && rep == 0;
    void (*progress)(void *, uint64_t, uint64_t) = o->progress;
    uint64_t live = 0;
    replay_integral gi;
    replay_lock lk;
    cp_status st = CP_OK;

    if (o->trace_clock && (st = x->chook.begin(x->chook.self, &w, &follow)) != CP_OK)
        return st;
    replay_integral_begin(&x->g, x->r);
    replay_lock_take(&lk, x->r);
    if (rep == 0 && o->recorded_addresses) {
        cp_torch_use_recorded(x->m, v->segev, v->nsegev);
        out->recorded = 1;
    }
    /* the integrals in a copy whose address is never taken: in registers,
     * where x->g (passed to the calls above) would be stored and reloaded
     * around every call of the loop */
    gi = x->g;
    for (; op < end; op++) {
        size_t i = (size_t)(op - v->top);
        if (__builtin_expect(progress && (i & 0xffff) == 0, 0))
            progress(o->progress_ud, out->events + (uint64_t)i, x->total_events);
        if (__builtin_expect(note, 0))
            cp_torch_set_event(x->m, i);
        replay_lock_tick(&lk);
        if (__builtin_expect(v->entries != 0, 1)) {
            double tm = time[top_row[i]] - time0;
            if (tm > gi.t)
                gi.t = tm;
        }
        st = torch_op(x, op, i, single ? 0 : streams[op->stream], &live, &gi, rec_addr);
        if (__builtin_expect(st != CP_OK || out->stopped, 0))
            break;
        if (__builtin_expect(*reserved_now != gi.reserved, 0)) {
            gi.reserved_bus += REPLAY_BYTES(gi.reserved) * (gi.t - gi.t_res);
            gi.t_res = gi.t;
            gi.reserved = *reserved_now;
            if (gi.reserved > gi.peak_seen) {
                gi.peak_seen = gi.reserved;
                gi.live_at_peak = live;
            }
        }
        if (__builtin_expect(rec_addr, 0)) {
            rec_row(&x->rc, op);
            st = rec_point(out, &x->rc, cp_resource_reserved_locked(x->r));
            if (st != CP_OK)
                break;
        }
    }
    x->g = gi;
    out->events += (uint64_t)(op - v->top);
    if (op == end && st == CP_OK && v->ntop) {
        x->g.live = live;
        replay_integral_end(&x->g);
        /* the clock reads the trace's last time */
        if (o->trace_clock && follow && x->t->n >= 2)
            x->chook.event(x->chook.self, &w, x->t->n - 2, NULL, NULL);
    }
    if (out->stopped)
        x->reps = rep + 1;
    rep_end(x, rep);
    replay_lock_drop(&lk);
    return st;
}

cp_status cp_trace_replay_torch(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                                cp_replay_result *out)
{
    torch_run x;
    cp_torch_stats st0, st1;
    cp_status st;
    double t0;
    int rep;

    memset(&x, 0, sizeof x);
    x.t = t;
    x.r = r;
    x.o = o;
    x.out = out;
    x.m = cp_torch_of(r);
    x.reps = o->repeat > 1 ? o->repeat : 1;
    replay_clock_init(&x.rclock);
    replay_integral_init(&x.g);
    x.chook = replay_clock_hook(&x.rclock);
    cp_trace_torch_view_get(t, &x.v);
    x.total_events = (uint64_t)x.v.ntop * (uint64_t)x.reps;
    if ((st = setup(&x)) != CP_OK) {
        free(x.h);
        free(x.rc.alloc_row);
        free(x.rc.free_row);
        return st;
    }
    cp_torch_get_stats(x.m, &st0);
    out->torch.on = 1;
    t0 = replay_now();
    for (rep = 0; rep < x.reps && st == CP_OK; rep++)
        st = repetition(&x, rep);
    replay_finish(&x.rclock, &x.g, o, out, t0, x.total_events);
    cp_torch_get_stats(x.m, &st1);
    out->peak_live = x.peak;
    out->failed = x.failed;
    out->skipped_frees = x.skipped;
    out->peak_reserved = (uint64_t)st1.reserved_bytes[CP_TORCH_ALL].peak;
    out->live_at_peak = x.g.live_at_peak;
    out->peak_allocated = (uint64_t)st1.allocated_bytes[CP_TORCH_ALL].peak;
    out->device_allocs = st1.num_device_alloc - st0.num_device_alloc;
    out->device_frees = st1.num_device_free - st0.num_device_free;
    out->retries = st1.num_alloc_retries - st0.num_alloc_retries;
    out->ooms = st1.num_ooms - st0.num_ooms;
    out->reserved_over_live = x.peak ? (double)out->peak_reserved / (double)x.peak : 0.0;
    /* the resource's own counters, as its entry points would have kept them */
    cp_torch_account(x.m, (uint64_t)(st1.allocation[CP_TORCH_ALL].allocated -
                                     st0.allocation[CP_TORCH_ALL].allocated),
                     (uint64_t)(st1.allocation[CP_TORCH_ALL].freed -
                                st0.allocation[CP_TORCH_ALL].freed),
                     x.failed, x.peak);
    free(x.h);
    free(x.rc.alloc_row);
    free(x.rc.free_row);
    if (st != CP_OK)
        cp_replay_result_fini(out);
    return st;
}
