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
 * free chunks goes to the chunk CuPy handed out, while the replay does what
 * the log shows: from its first difference (below) the model's own rule.
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
    if (out->cupy.mismatch)
        return;
    out->cupy.mismatch = what;
    out->cupy.mismatch_op = op;
    out->cupy.mismatch_line = line;
    out->cupy.mismatch_model = model;
    out->cupy.mismatch_log = logged;
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
    if (check && g->check && op->total != CP_CUPY_NO_TOTAL && !g->out->cupy.mismatch) {
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

/* One replay through the model: what its repetitions share. */
typedef struct cupy_run {
    const cp_trace *t;
    cp_resource *r;
    const cp_replay_opts *o;
    cp_replay_result *out;
    cp_cupy *m;
    const cp_trace_cupy *c;
    uint64_t *h, *osize;      /* by ordinal: the model's address; the size asked */
    size_t rcap;              /* of the result's rec_* arrays */
    size_t last_malloc;       /* the last MALLOC operation (SIZE_MAX: none) */
    uint64_t live, peak, failed, user_fab;
    replay_clock rclock;
    replay_integral g;
    gcstate gs;
    int reps;
    int following;            /* the replay still does what the log shows */
} cupy_run;

/* The replay's tables, the recorded addresses, its recording (opts.record). */
static cp_status setup(cupy_run *x)
{
    const cp_trace *t = x->t;
    const cp_trace_cupy *c = x->c;
    cp_status st;
    size_t i;
    x->h = calloc(t->nallocs ? t->nallocs : 1, sizeof *x->h);
    x->osize = calloc(t->nallocs ? t->nallocs : 1, sizeof *x->osize);
    if (!x->h || !x->osize)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    for (i = 0; i < t->n; i++)
        if (!t->is_free[i])
            x->osize[t->ord[i]] = t->size[i];
    for (i = c->nop; i-- > 0;)
        if (c->op[i].kind == CP_CUPY_MALLOC)
            break;
    x->last_malloc = i;
    /* the cudaMallocs held to the log's alloc lines: taking their answers
     * with the recorded addresses, compared only without */
    st = cp_cupy_use_recorded(x->m, c->dev_size, c->dev_addr, c->ndev, x->o->recorded_addresses);
    if (st != CP_OK)
        return st;
    x->out->recorded = x->o->recorded_addresses;
    x->following = x->o->recorded_addresses;
    if (x->o->record) {
        x->out->rec_addr = calloc(t->nallocs ? t->nallocs : 1, sizeof *x->out->rec_addr);
        x->out->naddr = t->nallocs;
        st = x->out->rec_addr ? replay_record_point(x->out, &x->rcap, 0, cp_resource_reserved(x->r))
                              : cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
        if (st != CP_OK) {
            cp_replay_result_fini(x->out);
            return st;
        }
    }
    return CP_OK;
}

/* stop_at_oom: the program raised at operation i (the malloc's late frees
 * done first: they happened). */
static void stop_at(cupy_run *x, size_t i, const cp_cupy_op *op, int oom_entry)
{
    cp_replay_result *out = x->out;
    late_frees(&x->gs);
    out->stopped = 1;
    out->stop_oom_entry = oom_entry;
    out->stop_event = i;
    out->stop_alloc = oom_entry ? UINT64_MAX : op->ord;
    out->stop_size = op->size;
    out->cupy.stop_line = op->line;
}

/* A MALLOC or an OOM operation (the i-th), with the GCFREE operations after
 * it; *next: the operation after them.  CP_OK (out->stopped where
 * stop_at_oom stops), or a failure. */
static cp_status malloc_op(cupy_run *x, size_t i, int rep, size_t *next)
{
    const cp_trace_cupy *c = x->c;
    const cp_cupy_op *op = &c->op[i];
    cp_replay_result *out = x->out;
    const cp_replay_opts *o = x->o;
    int check = rep == 0;
    uint64_t addr = 0, arena = o->single_stream ? 0 : op->arena, dms, dls;
    size_t dcall;
    cp_status ms;

    x->gs.next = x->gs.end = i + 1;
    while (x->gs.end < c->nop && c->op[x->gs.end].kind == CP_CUPY_GCFREE)
        x->gs.end++;
    /* the recording's addresses and choices only while the replay does
     * what it shows: from the first difference the pool holds other
     * blocks than the run did, and the model's own rule places them (a
     * limit below the run's collected and gave back where the run did not) */
    if (x->following && (out->cupy.mismatch || cp_cupy_divergence(x->m, &dcall, &dms, &dls))) {
        cp_cupy_leave_recorded(x->m);
        x->following = 0;
    }
    ms = cp_cupy_malloc(x->m, op->size, arena, x->following && rep == 0 ? op->ptr : 0,
                        x->gs.end > x->gs.next ? gc_frees : NULL, &x->gs, &addr);
    if (ms != CP_OK && ms != CP_ERR_OOM)
        return ms;
    if (op->kind == CP_CUPY_OOM) {
        out->oom_attempts++;
        if (ms == CP_OK) {
            out->oom_served++;
            (void)cp_cupy_free(x->m, addr);
            if (check)
                mismatch(out, i, op->line, CP_CUPY_MISMATCH_SERVED, op->size, 0);
        } else if (o->stop_at_oom == CP_STOP_ANY ||
                   (o->stop_at_oom == CP_STOP_NEEDED &&
                    (x->last_malloc == SIZE_MAX || i > x->last_malloc))) {
            stop_at(x, i, op, 1);
            return CP_OK;
        }
    } else if (ms == CP_OK) {
        x->h[op->ord] = addr;
        if (__builtin_expect(o->record && rep == 0, 0))
            out->rec_addr[op->ord] = addr;
        x->live += x->osize[op->ord];
        if (x->live > x->peak)
            x->peak = x->live;
    } else {
        x->failed++;
        if (check)
            mismatch(out, i, op->line, CP_CUPY_MISMATCH_REFUSED, op->size, op->size);
        if (o->stop_at_oom) {
            stop_at(x, i, op, 0);
            return CP_OK;
        }
    }
    /* frees the model's gc.collect() did not reach happened all the same */
    late_frees(&x->gs);
    if (cp_resource_reserved_locked(x->r) > x->g.peak_seen) {
        x->g.peak_seen = cp_resource_reserved_locked(x->r);
        x->g.live_at_peak = x->live;
        if (check) {
            cp_cupy_stats s1;
            cp_cupy_get_stats(x->m, &s1);
            out->cupy.used_at_peak = s1.used_bytes;
            out->cupy.free_all_at_peak = s1.whole_free_bytes;
        }
    }
    if (check && op->total != CP_CUPY_NO_TOTAL && cp_resource_reserved_locked(x->r) != op->total)
        mismatch(out, i, op->line, CP_CUPY_MISMATCH_TOTAL, cp_resource_reserved_locked(x->r),
                 op->total);
    *next = x->gs.end;
    return CP_OK;
}

/* The end of a repetition: the first one's divergence from the alloc
 * lines; what is still in use goes back. */
static void rep_end(cupy_run *x, int rep)
{
    size_t i;
    if (rep == 0) {
        size_t call;
        uint64_t ms, ls;
        if (cp_cupy_end_recorded(x->m) && cp_cupy_divergence(x->m, &call, &ms, &ls) &&
            (ms != 0 || call < x->c->ndev)) {
            x->out->cupy.diverged = 1;
            x->out->cupy.div_call = call;
            x->out->cupy.div_model = ms;
            x->out->cupy.div_log = ls;
            x->out->cupy.div_line = call < x->c->ndev ? x->c->dev_line[call] : 0;
        }
    }
    if (x->out->stopped)
        x->reps = rep + 1;
    for (i = 0; i < x->t->nallocs; i++) {
        if (x->h[i])
            (void)cp_cupy_free(x->m, x->h[i]);
        x->h[i] = 0;
    }
    x->live = 0;
}

/* One repetition of the log's operations, under the batched lock. */
static cp_status repetition(cupy_run *x, int rep)
{
    const cp_trace_cupy *c = x->c;
    const cp_replay_opts *o = x->o;
    cp_replay_result *out = x->out;
    void (*progress)(void *, uint64_t, uint64_t) = o->progress;
    uint64_t total_events = (uint64_t)c->nop * (uint64_t)x->reps;
    int check = rep == 0;
    cp_status st = CP_OK;
    replay_lock lk;
    size_t i;

    x->gs.check = check;
    replay_integral_begin(&x->g, x->r);
    replay_lock_take(&lk, x->r);
    for (i = 0; i < c->nop; i++) {
        const cp_cupy_op *op = &c->op[i];
        size_t next = i + 1;
        if (__builtin_expect(progress && (i & 0xffff) == 0, 0))
            progress(o->progress_ud, out->events + i, total_events);
        replay_lock_tick(&lk);
        switch (op->kind) {
        case CP_CUPY_MALLOC:
        case CP_CUPY_OOM:
            st = malloc_op(x, i, rep, &next);
            break;
        case CP_CUPY_FREE:
        case CP_CUPY_GCFREE: /* (more than the malloc's gc round: in order) */
            apply_free(&x->gs, i, 0);
            break;
        case CP_CUPY_FREE_ALL:
            x->user_fab++;
            (void)cp_cupy_free_all_blocks(x->m, !op->flag, op->arena);
            if (check && op->total != CP_CUPY_NO_TOTAL &&
                cp_resource_reserved_locked(x->r) != op->total)
                mismatch(out, i, op->line, CP_CUPY_MISMATCH_TOTAL,
                         cp_resource_reserved_locked(x->r), op->total);
            break;
        default:
            break;
        }
        if (st != CP_OK)
            break;
        if (out->stopped) {
            i++;
            break;
        }
        i = next - 1;
        if (__builtin_expect(o->record && rep == 0, 0)) {
            st = replay_record_point(out, &x->rcap, op->row, cp_resource_reserved_locked(x->r));
            if (st != CP_OK) {
                i++;
                break;
            }
        }
    }
    out->events += i;
    rep_end(x, rep);
    replay_lock_drop(&lk);
    return st;
}

cp_status cp_trace_replay_cupy(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                               cp_replay_result *out)
{
    cupy_run x;
    cp_cupy_stats s0, s1;
    cp_status st;
    double t0;
    int rep;

    memset(&x, 0, sizeof x);
    x.t = t;
    x.r = r;
    x.o = o;
    x.out = out;
    x.m = cp_cupy_of(r);
    x.c = t->cupy;
    x.reps = o->repeat > 1 ? o->repeat : 1;
    replay_clock_init(&x.rclock);
    replay_integral_init(&x.g);
    /* (clock = "trace": a CuPy log has no times, and the model decides by
     * none: nothing to follow) */
    if ((st = setup(&x)) != CP_OK) {
        free(x.h);
        free(x.osize);
        return st;
    }
    cp_cupy_get_stats(x.m, &s0);
    out->cupy.on = 1;
    x.gs.m = x.m;
    x.gs.r = r;
    x.gs.c = x.c;
    x.gs.h = x.h;
    x.gs.osize = x.osize;
    x.gs.live = &x.live;
    x.gs.out = out;
    t0 = replay_now();
    for (rep = 0; rep < x.reps && st == CP_OK; rep++)
        st = repetition(&x, rep);
    replay_finish(&x.rclock, &x.g, o, out, t0, (uint64_t)x.c->nop * (uint64_t)x.reps);
    cp_cupy_get_stats(x.m, &s1);
    out->peak_live = x.peak;
    out->failed = x.failed;
    out->peak_reserved = s1.total_bytes_peak;
    out->live_at_peak = x.g.live_at_peak;
    out->peak_allocated = s1.used_bytes_peak; /* CuPy's rounded sizes */
    out->cupy.used_peak = s1.used_bytes_peak;
    out->device_allocs = s1.device_allocs - s0.device_allocs;
    out->device_frees = s1.device_frees - s0.device_frees;
    /* the pool's own free-and-retry rounds: the user's calls are not retries */
    out->retries = s1.free_all_blocks_calls - s0.free_all_blocks_calls - x.user_fab;
    out->ooms = s1.ooms - s0.ooms;
    out->reserved_over_live = x.peak ? (double)out->peak_reserved / (double)x.peak : 0.0;
    free(x.h);
    free(x.osize);
    if (st != CP_OK)
        cp_replay_result_fini(out);
    return st;
}
