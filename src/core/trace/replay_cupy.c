/*
 * trace/replay_cupy.c: a CuPy hook log (trace_cupy.h) replayed through the
 * cupy model (pool/cupy.h), operation by operation as CuPy's pool did them:
 *   MALLOC    cp_cupy_malloc of mem_size on the arena of the line's stream
 *             (0 with single_stream or without stream keys); the GCFREE
 *             operations after it are the frees its gc.collect() caused,
 *             applied where the model calls gc.collect() (and after the
 *             malloc if the model never did: they happened all the same)
 *   OOM       a malloc CuPy refused: attempted; what the model serves is
 *             freed at once
 *   FREE      cp_cupy_free of the block the allocation got
 *   FREE_ALL  the user's free_all_blocks()
 * With opts->recorded_addresses the model's cudaMallocs take the log's
 * alloc lines while their sizes agree, and each malloc's tie between equal
 * free chunks goes to the chunk CuPy handed out.
 *
 * Exactness is checked as the replay goes (result.cupy), in the first
 * repetition only (the later ones start from the pool the first left): the
 * first operation where the model served what CuPy refused or the reverse,
 * or (logs with total_bytes) where the model's total_bytes differs from the
 * logged one after a malloc, a free_all_blocks() or a free of the model's
 * gc round (apply_free says why not after other frees); with recorded
 * addresses the first cudaMalloc whose size differs.  Blocks still in use
 * at the end are freed after the timed loop.
 */
#include <stdlib.h>
#include <string.h>

#include "trace_impl.h"
#include "trace_cupy.h"
#include "pool/cupy.h"
#include "replay.h"
#include "replay_lock.h"
#include "replay_time.h"

typedef struct gcstate {
    cp_cupy *m;
    cp_resource *r;
    const cp_trace_cupy *c;
    uint64_t *h;          /* by ordinal: the model's address, 0 when not live */
    const uint64_t *osize;
    size_t next;          /* the next GCFREE operation to apply */
    size_t end;           /* one past the last of this malloc's */
    uint64_t *live;
    cp_replay_result *out;
    int check;            /* the first repetition: the one held to the log */
} gcstate;

static void mismatch(cp_replay_result *out, size_t op, uint32_t line, int what, uint64_t model,
                     uint64_t logged)
{
    if (out->cupy_mismatch)
        return;
    out->cupy_mismatch = what;
    out->cupy_mismatch_op = op;
    out->cupy_mismatch_line = line;
    out->cupy_mismatch_model = model;
    out->cupy_mismatch_log = logged;
}

/* One of the log's frees; with check, the model's total_bytes is held to
 * the line's.  Only a gc round's frees are checked: a free never changes
 * total_bytes, so a plain free line's figure is the line's before it
 * (checked there), or, from the recording hook, another device's (it logs
 * the current device's pool, and an array freed outside its device's `with
 * Device(d)` block is freed under another); and a free applied after its
 * malloc (the model ran no gc round there) logged CuPy's figure from before
 * the malloc had its memory. */
static void apply_free(gcstate *g, size_t i, int check)
{
    const cp_cupy_op *op = &g->c->op[i];
    uint64_t *x = &g->h[op->ord];
    if (*x) {
        (void)cp_cupy_free(g->m, *x);
        *x = 0;
        *g->live -= g->osize[op->ord];
    } else {
        g->out->skipped_frees++;
    }
    /* total_bytes is the pool's reserved figure (a field read) */
    if (check && g->check && op->total != CP_CUPY_NO_TOTAL && !g->out->cupy_mismatch) {
        uint64_t tb = cp_resource_reserved_locked(g->r);
        if (tb != op->total)
            mismatch(g->out, i, op->line, CP_CUPY_MISMATCH_TOTAL, tb, op->total);
    }
}

/* gc.collect() inside a malloc: the frees the log wrote inside it. */
static void gc_frees(void *ud)
{
    gcstate *g = ud;
    for (; g->next < g->end; g->next++)
        apply_free(g, g->next, 1);
}

/* The malloc's frees its model never collected: they happened all the same. */
static void late_frees(gcstate *g)
{
    for (; g->next < g->end; g->next++)
        apply_free(g, g->next, 0);
}

cp_status cp_trace_replay_cupy(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                               cp_replay_result *out)
{
    cp_cupy *m = cp_cupy_of(r);
    const cp_trace_cupy *c = t->cupy;
    uint64_t *h = NULL, *osize = NULL;
    cp_cupy_stats s0, s1;
    cp_status st = CP_OK;
    int rep, reps = o->repeat > 1 ? o->repeat : 1;
    uint64_t live = 0, peak = 0, failed = 0, user_fab = 0;
    size_t rcap = 0;
    double t0;
    size_t i, last_malloc = SIZE_MAX;
    replay_clock rclock;
    replay_integral g;
    gcstate gs;

    replay_clock_init(&rclock);
    replay_integral_init(&g);
    /* (clock = "trace": a CuPy log has no times, and the model decides by
     * none: nothing to follow) */
    h = calloc(t->nallocs ? t->nallocs : 1, sizeof *h);
    osize = calloc(t->nallocs ? t->nallocs : 1, sizeof *osize);
    if (!h || !osize) {
        free(h);
        free(osize);
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    }
    for (i = 0; i < t->n; i++)
        if (!t->is_free[i])
            osize[t->ord[i]] = t->size[i];
    for (i = c->nop; i-- > 0;)
        if (c->op[i].kind == CP_CUPY_MALLOC)
            break;
    last_malloc = i;
    /* the cudaMallocs held to the log's alloc lines: taking their answers
     * with the recorded addresses, compared only without */
    st = cp_cupy_use_recorded(m, c->dev_size, c->dev_addr, c->ndev, o->recorded_addresses);
    if (st != CP_OK) {
        free(h);
        free(osize);
        return st;
    }
    out->recorded = o->recorded_addresses;
    if (o->record) {
        out->rec_addr = calloc(t->nallocs ? t->nallocs : 1, sizeof *out->rec_addr);
        out->naddr = t->nallocs;
        st = out->rec_addr ? replay_record_point(out, &rcap, 0, cp_resource_reserved(r))
                           : cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
        if (st != CP_OK) {
            cp_replay_result_fini(out);
            free(h);
            free(osize);
            return st;
        }
    }
    cp_cupy_get_stats(m, &s0);
    out->cupy = 1;
    memset(&gs, 0, sizeof gs);
    gs.m = m;
    gs.r = r;
    gs.c = c;
    gs.h = h;
    gs.osize = osize;
    gs.live = &live;
    gs.out = out;
    t0 = replay_now();
    for (rep = 0; rep < reps && st == CP_OK; rep++) {
        replay_lock lk;
        int single = o->single_stream, check = rep == 0;
        gs.check = check;
        void (*progress)(void *, uint64_t, uint64_t) = o->progress;
        uint64_t total_events = (uint64_t)c->nop * (uint64_t)reps;
        replay_integral_begin(&g, r);
        replay_lock_take(&lk, r);
        for (i = 0; i < c->nop; i++) {
            const cp_cupy_op *op = &c->op[i];
            uint64_t addr = 0, arena = single ? 0 : op->arena;
            cp_status ms;
            if (__builtin_expect(progress && (i & 0xffff) == 0, 0))
                progress(o->progress_ud, out->events + i, total_events);
            replay_lock_tick(&lk);
            switch (op->kind) {
            case CP_CUPY_MALLOC:
            case CP_CUPY_OOM:
                gs.next = gs.end = i + 1;
                while (gs.end < c->nop && c->op[gs.end].kind == CP_CUPY_GCFREE)
                    gs.end++;
                ms = cp_cupy_malloc(m, op->size, arena,
                                    o->recorded_addresses && rep == 0 ? op->ptr : 0,
                                    gs.end > gs.next ? gc_frees : NULL, &gs, &addr);
                if (ms != CP_OK && ms != CP_ERR_OOM) {
                    st = ms;
                    goto stop;
                }
                if (op->kind == CP_CUPY_OOM) {
                    out->oom_attempts++;
                    if (ms == CP_OK) {
                        out->oom_served++;
                        (void)cp_cupy_free(m, addr);
                        if (check)
                            mismatch(out, i, op->line, CP_CUPY_MISMATCH_SERVED, op->size, 0);
                    } else if (o->stop_at_oom == CP_STOP_ANY ||
                               (o->stop_at_oom == CP_STOP_NEEDED &&
                                (last_malloc == SIZE_MAX || i > last_malloc))) {
                        late_frees(&gs);
                        out->stopped = 1;
                        out->stop_oom_entry = 1;
                        out->stop_event = i;
                        out->stop_alloc = UINT64_MAX;
                        out->stop_size = op->size;
                        out->cupy_stop_line = op->line;
                        i++;
                        goto stop;
                    }
                } else if (ms == CP_OK) {
                    h[op->ord] = addr;
                    if (__builtin_expect(o->record && rep == 0, 0))
                        out->rec_addr[op->ord] = addr;
                    live += osize[op->ord];
                    if (live > peak)
                        peak = live;
                } else {
                    failed++;
                    if (check)
                        mismatch(out, i, op->line, CP_CUPY_MISMATCH_REFUSED, op->size, op->size);
                    if (o->stop_at_oom) {
                        late_frees(&gs);
                        out->stopped = 1;
                        out->stop_event = i;
                        out->stop_alloc = op->ord;
                        out->stop_size = op->size;
                        out->cupy_stop_line = op->line;
                        i++;
                        goto stop;
                    }
                }
                /* frees the model's gc.collect() did not reach happened all the same */
                late_frees(&gs);
                if (cp_resource_reserved_locked(r) > g.peak_seen) {
                    g.peak_seen = cp_resource_reserved_locked(r);
                    g.live_at_peak = live;
                    if (check) {
                        cp_cupy_get_stats(m, &s1);
                        out->cupy_used_at_peak = s1.used_bytes;
                        out->cupy_free_all_at_peak = s1.whole_free_bytes;
                    }
                }
                if (check && op->total != CP_CUPY_NO_TOTAL &&
                    cp_resource_reserved_locked(r) != op->total)
                    mismatch(out, i, op->line, CP_CUPY_MISMATCH_TOTAL,
                             cp_resource_reserved_locked(r), op->total);
                i = gs.end - 1;
                break;
            case CP_CUPY_FREE:
            case CP_CUPY_GCFREE: /* (more than the malloc's gc round: in order) */
                apply_free(&gs, i, 0);
                break;
            case CP_CUPY_FREE_ALL:
                user_fab++;
                (void)cp_cupy_free_all_blocks(m, !op->flag, op->arena);
                if (check && op->total != CP_CUPY_NO_TOTAL &&
                    cp_resource_reserved_locked(r) != op->total)
                    mismatch(out, i, op->line, CP_CUPY_MISMATCH_TOTAL,
                             cp_resource_reserved_locked(r), op->total);
                break;
            default:
                break;
            }
            if (__builtin_expect(o->record && rep == 0, 0)) {
                st = replay_record_point(out, &rcap, op->row, cp_resource_reserved_locked(r));
                if (st != CP_OK) {
                    i++;
                    goto stop;
                }
            }
        }
    stop:
        out->events += i;
        if (rep == 0) {
            size_t call;
            uint64_t ms, ls;
            if (cp_cupy_end_recorded(m) && cp_cupy_divergence(m, &call, &ms, &ls) &&
                (ms != 0 || call < c->ndev)) {
                out->cupy_diverged = 1;
                out->cupy_div_call = call;
                out->cupy_div_model = ms;
                out->cupy_div_log = ls;
                out->cupy_div_line = call < c->ndev ? c->dev_line[call] : 0;
            }
        }
        if (out->stopped)
            reps = rep + 1;
        for (i = 0; i < t->nallocs; i++) {
            if (h[i])
                (void)cp_cupy_free(m, h[i]);
            h[i] = 0;
        }
        live = 0;
        replay_lock_drop(&lk);
    }
    replay_finish(&rclock, &g, o, out, t0, (uint64_t)c->nop * (uint64_t)reps);
    cp_cupy_get_stats(m, &s1);
    out->peak_live = peak;
    out->failed = failed;
    out->peak_reserved = s1.total_bytes_peak;
    out->live_at_peak = g.live_at_peak;
    out->peak_allocated = s1.used_bytes_peak; /* CuPy's rounded sizes */
    out->cupy_used_peak = s1.used_bytes_peak;
    out->device_allocs = s1.device_allocs - s0.device_allocs;
    out->device_frees = s1.device_frees - s0.device_frees;
    /* the pool's own free-and-retry rounds: the user's calls are not retries */
    out->retries = s1.free_all_blocks_calls - s0.free_all_blocks_calls - user_fab;
    out->ooms = s1.ooms - s0.ooms;
    out->reserved_over_live = peak ? (double)out->peak_reserved / (double)peak : 0.0;
    free(h);
    free(osize);
    if (st != CP_OK)
        cp_replay_result_fini(out);
    return st;
}
