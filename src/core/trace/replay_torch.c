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

cp_status cp_trace_replay_torch(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                                cp_replay_result *out)
{
    cp_torch *m = cp_torch_of(r);
    cp_trace_torch_view v;
    handle *h = NULL;
    cp_torch_stats st0, st1;
    cp_status st = CP_OK;
    recorder rc;
    int rep, reps = o->repeat > 1 ? o->repeat : 1;
    uint64_t total_events, live = 0, peak = 0, failed = 0, skipped = 0;
    double t0;
    size_t k;
    replay_clock rclock;
    replay_hook chook;
    replay_integral g;
    size_t last_alloc; /* SIZE_MAX: none */

    replay_clock_init(&rclock);
    replay_integral_init(&g);
    chook = replay_clock_hook(&rclock);
    cp_trace_torch_view_get(t, &v);
    total_events = (uint64_t)v.ntop * (uint64_t)reps;
    if (o->recorded_addresses && !v.nsegev)
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a PyTorch snapshot "
                            "with segment entries (%s has none)", cp_trace_path(t));
    if (o->recorded_addresses && !cp_torch_is_virtual(m))
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a torch pool over "
                            "the \"virtual\" upstream (the device gives its own addresses)");
    h = (handle *)calloc(v.nallocs ? v.nallocs : 1, sizeof *h);
    if (!h)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    memset(&rc, 0, sizeof rc);
    if (o->record) {
        out->rec_addr = (uint64_t *)calloc(v.nallocs ? v.nallocs : 1, sizeof *out->rec_addr);
        st = out->rec_addr ? rec_init(&rc, t)
                           : cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
        if (st == CP_OK)
            st = rec_point(out, &rc, cp_resource_reserved(r));
        if (st != CP_OK) {
            free(h);
            free(rc.alloc_row);
            free(rc.free_row);
            cp_replay_result_fini(out);
            return st;
        }
        out->naddr = v.nallocs;
    }
    /* the last allocation: an `oom` entry after it was one the program did
     * not survive (CP_STOP_NEEDED) */
    for (k = v.ntop; k-- > 0;)
        if (v.top[k].kind == CP_TOP_ALLOC)
            break;
    last_alloc = k;
    cp_torch_get_stats(m, &st0);
    out->torch = 1;
    t0 = replay_now();
    for (rep = 0; rep < reps && st == CP_OK; rep++) {
        const cp_trace_top *op = v.top, *end = v.top + v.ntop;
        replay_walk w = {.t = t, .r = r, .o = o, .out = out, .rep = rep};
        const uint32_t *top_row = v.top_row;
        const double *time = v.time;
        const uint64_t *reserved_now = cp_torch_reserved_now(m);
        /* a snapshot may hold operations and no row at all (segment and oom
         * entries only): no time then */
        double time0 = v.ntop && v.entries ? time[0] : 0.0;
        int follow = 1;
        if (o->trace_clock) {
            st = chook.begin(chook.self, &w, &follow);
            if (st != CP_OK)
                break;
        }
        replay_lock lk;
        replay_integral_begin(&g, r);
        replay_lock_take(&lk, r);
        int rec_addr = o->record && rep == 0;
        /* the loop keeps to locals (the calls would make the compiler
         * reload the options on every operation) */
        const uint64_t *streams = v.streams;
        int single = o->single_stream, note = o->recorded_addresses && rep == 0;
        void (*progress)(void *, uint64_t, uint64_t) = o->progress;
        if (rep == 0 && o->recorded_addresses) {
            cp_torch_use_recorded(m, v.segev, v.nsegev);
            out->recorded = 1;
        }
        /* the integrals in a copy whose address is never taken: in
         * registers, where g (passed to the calls above) would be stored
         * and reloaded around every call of the loop */
        replay_integral gi = g;
        for (; op < end; op++) {
            handle *x;
            cp_torch_block *b;
            cp_torch_pending *tok;
            uint64_t addr;
            cp_status ms;
            uint64_t stream = single ? 0 : streams[op->stream];
            if (__builtin_expect(progress && ((op - v.top) & 0xffff) == 0, 0))
                progress(o->progress_ud, out->events + (uint64_t)(op - v.top), total_events);
            if (__builtin_expect(note, 0))
                cp_torch_set_event(m, (size_t)(op - v.top));
            replay_lock_tick(&lk);
            if (__builtin_expect(v.entries != 0, 1)) {
                double tm = time[top_row[op - v.top]] - time0;
                if (tm > gi.t)
                    gi.t = tm;
            }
            switch (op->kind) {
            case CP_TOP_ALLOC:
                x = &h[op->ord];
                ms = cp_torch_malloc(m, op->size, stream, &b, &addr);
                if (__builtin_expect(ms != CP_OK, 0)) {
                    if (ms != CP_ERR_OOM) {
                        st = ms;
                        goto stop;
                    }
                    failed++;
                    *x = H_NONE;
                    if (o->stop_at_oom) {
                        out->stopped = 1;
                        out->stop_event = (size_t)(op - v.top);
                        out->stop_alloc = op->ord;
                        out->stop_size = op->size;
                        goto stop;
                    }
                    break;
                }
                *x = (uintptr_t)b | H_LIVE;
                if (__builtin_expect(rec_addr, 0))
                    out->rec_addr[op->ord] = addr;
                live += op->size;
                if (live > peak)
                    peak = live;
                gi.live_bus -= REPLAY_BYTES(op->size) * gi.t;
                break;
            case CP_TOP_FREE:
                x = &h[op->ord];
                if (__builtin_expect((*x & H_TAG) != H_LIVE, 0)) {
                    skipped++;
                    break;
                }
                live -= op->size;
                gi.live_bus += REPLAY_BYTES(op->size) * gi.t;
                if (op->flag) {
                    tok = cp_torch_free_pending(m, (cp_torch_block *)H_PTR(*x));
                    *x = tok ? (uintptr_t)tok | H_PENDING : H_NONE;
                } else {
                    cp_torch_free(m, (cp_torch_block *)H_PTR(*x));
                    *x = H_NONE;
                }
                break;
            case CP_TOP_DONE:
                x = &h[op->ord];
                if ((*x & H_TAG) == H_PENDING)
                    cp_torch_complete(m, (cp_torch_pending *)H_PTR(*x), op->flag);
                *x = H_NONE;
                break;
            case CP_TOP_OOM:
                out->oom_attempts++;
                if (cp_torch_malloc(m, op->size, stream, &b, &addr) == CP_OK) {
                    out->oom_served++;
                    cp_torch_free(m, b);
                } else if (o->stop_at_oom == CP_STOP_ANY ||
                           (o->stop_at_oom == CP_STOP_NEEDED &&
                            (last_alloc == SIZE_MAX || (size_t)(op - v.top) > last_alloc))) {
                    out->stopped = 1;
                    out->stop_oom_entry = 1;
                    out->stop_event = (size_t)(op - v.top);
                    out->stop_alloc = UINT64_MAX;
                    out->stop_size = op->size;
                    goto stop;
                }
                break;
            case CP_TOP_RELEASE: {
                const cp_trace_top *nx = op->flag == 2 ? next_malloc(&v, (size_t)(op - v.top)) : NULL;
                if (!nx ||
                    !cp_torch_malloc_releases(m, nx->size, o->single_stream ? 0 : v.streams[nx->stream]))
                    cp_torch_empty_cache(m);
                break;
            }
            default:
                break;
            }
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
                rec_row(&rc, op);
                st = rec_point(out, &rc, cp_resource_reserved_locked(r));
                if (st != CP_OK)
                    goto stop;
            }
        }
    stop:
        g = gi;
        out->events += (uint64_t)(op - v.top);
        if (op == end && st == CP_OK && v.ntop) {
            g.live = live;
            replay_integral_end(&g);
            /* the clock reads the trace's last time */
            if (o->trace_clock && follow && t->n >= 2)
                chook.event(chook.self, &w, t->n - 2, NULL, NULL);
        }
        if (out->stopped)
            reps = rep + 1;
        if (rep == 0 && o->recorded_addresses) {
            cp_torch_end_recorded(m, &out->divergence);
            out->divergence_event = cp_torch_divergence_event(m);
        }
        /* the end of the trace: what is still in use or pending goes back */
        cp_torch_get_stats(m, &st1);
        if (rep == 0)
            out->segments = (uint64_t)st1.segment[CP_TORCH_ALL].current;
        live = 0;
        for (k = 0; k < v.nallocs; k++) {
            handle *x = &h[k];
            if ((*x & H_TAG) == H_LIVE)
                cp_torch_free(m, (cp_torch_block *)H_PTR(*x));
            else if ((*x & H_TAG) == H_PENDING)
                cp_torch_complete(m, (cp_torch_pending *)H_PTR(*x), 0);
            *x = H_NONE;
        }
        replay_lock_drop(&lk);
    }
    replay_finish(&rclock, &g, o, out, t0, total_events);
    cp_torch_get_stats(m, &st1);
    out->peak_live = peak;
    out->failed = failed;
    out->skipped_frees = skipped;
    out->peak_reserved = (uint64_t)st1.reserved_bytes[CP_TORCH_ALL].peak;
    out->live_at_peak = g.live_at_peak;
    out->peak_allocated = (uint64_t)st1.allocated_bytes[CP_TORCH_ALL].peak;
    out->device_allocs = st1.num_device_alloc - st0.num_device_alloc;
    out->device_frees = st1.num_device_free - st0.num_device_free;
    out->retries = st1.num_alloc_retries - st0.num_alloc_retries;
    out->ooms = st1.num_ooms - st0.num_ooms;
    out->reserved_over_live = peak ? (double)out->peak_reserved / (double)peak : 0.0;
    /* the resource's own counters, as its entry points would have kept them */
    cp_torch_account(m, (uint64_t)(st1.allocation[CP_TORCH_ALL].allocated -
                                   st0.allocation[CP_TORCH_ALL].allocated),
                     (uint64_t)(st1.allocation[CP_TORCH_ALL].freed - st0.allocation[CP_TORCH_ALL].freed),
                     failed, peak);
    free(h);
    free(rc.alloc_row);
    free(rc.free_row);
    if (st != CP_OK)
        cp_replay_result_fini(out);
    return st;
}
