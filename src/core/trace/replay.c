/*
 * replay.c: cp_trace_replay (trace.h), the walk over a loaded trace.
 *
 * Each allocation's block is found again by its ordinal (the loader stored
 * it in the free row), by indexing an array: no hashing inside the timed
 * loop.  The pool's lock is taken per batch of events (replay_lock.h); what
 * the replay does beside the walk is in its hooks (replay.h).
 */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

#include "replay_lock.h"
#include "trace_torch.h"
#include "pool/bfc.h"
#include "pool/model.h"
#include "trace_cupy.h"
#include "pool/cupy.h"
#include "replay_time.h"

/* What the walk keeps for each allocation, by ordinal: the pool's block
 * (NULL: not live) and the trace stream it was made on. */
typedef struct replay_blocks {
    void **blk;
    uint64_t *size;
    uint32_t *stream;
} replay_blocks;

/* A request PyTorch refused (an `oom` entry), attempted on r; what r
 * serves is freed at once (it was never in use). */
static cp_status replay_oom(const cp_trace *t, cp_resource *r, cp_stream *const *sv, size_t k,
                            cp_replay_result *out, int *refused)
{
    void *p = NULL;
    cp_stream *s = sv[t->oom_stream[k]];
    cp_status st = cp_resource_alloc_locked(r, (size_t)t->oom_size[k], s, &p);
    out->oom_attempts++;
    *refused = st == CP_ERR_OOM;
    if (st == CP_ERR_OOM)
        return CP_OK;
    if (st != CP_OK)
        return st;
    out->oom_served++;
    return cp_resource_free_locked(r, p, (size_t)t->oom_size[k], s);
}

/* With CP_STOP_NEEDED: whether a refusal of `oom` entry k stops the
 * replay (no allocation follows it: the program did not survive it). */
static int needed_oom(const replay_walk *w, size_t k)
{
    return w->o->stop_at_oom == CP_STOP_NEEDED &&
           (w->last_alloc == SIZE_MAX || w->t->oom_row[k] > w->last_alloc);
}

static void stop_at_entry(cp_replay_result *out, const cp_trace *t, size_t k)
{
    out->stopped = 1;
    out->stop_oom_entry = 1;
    out->stop_event = t->oom_row[k];
    out->stop_alloc = UINT64_MAX;
    out->stop_size = t->oom_size[k];
}

/* One repetition's events, under the batched lock; *live carries the live
 * bytes from one repetition to the next. */
static cp_status walk_events(const replay_walk *w, replay_hook *const *follow, size_t nfollow,
                             cp_stream *const *sv, replay_blocks *b, uint64_t total_events,
                             uint64_t *live_io, replay_integral *integ)
{
    const cp_trace *t = w->t;
    const cp_replay_opts *o = w->o;
    cp_replay_result *out = w->out;
    cp_resource *r = w->r;
    const replay_op *op = t->ops, *end = t->ops + t->n;
    /* The loop keeps to locals: the calls below would otherwise make the
     * compiler reload every field of t and out on each row. */
    uint64_t live = *live_io, peak = out->peak_live, failed = 0, skipped = 0;
    cp_status st = CP_OK;
    replay_lock lk;
    replay_integral g = *integ; /* in registers for the loop */
    size_t h, oi = 0, next_oom = t->nooms ? t->oom_row[0] : SIZE_MAX;

    replay_lock_take(&lk, r);
    for (; op < end; op++) {
        void **slot = &b->blk[op->ord];
        void *addr;
        if (__builtin_expect((size_t)(op - t->ops) == next_oom, 0)) {
            /* the refused requests that came before this row */
            int refused = 0;
            while (oi < t->nooms && t->oom_row[oi] == (size_t)(op - t->ops) && st == CP_OK) {
                st = replay_oom(t, r, sv, oi++, out, &refused);
                if (st == CP_OK && refused && needed_oom(w, oi - 1)) {
                    stop_at_entry(out, t, oi - 1);
                    break;
                }
            }
            next_oom = oi < t->nooms ? t->oom_row[oi] : SIZE_MAX;
            if (st != CP_OK || out->stopped)
                break;
        }
        if (__builtin_expect(o->progress && ((op - t->ops) & 0xffff) == 0, 0))
            o->progress(o->progress_ud, out->events + (uint64_t)(op - t->ops), total_events);
        replay_lock_tick(&lk);
        if (!op->is_free) {
            st = cp_resource_alloc_locked(r, (size_t)op->size, sv[op->stream], slot);
            if (__builtin_expect(st != CP_OK, 0)) {
                *slot = NULL;
                if (st != CP_ERR_OOM)
                    break;
                st = CP_OK;
                failed++;
                if (o->stop_at_oom) {
                    /* the program raised here: nothing after it happened */
                    out->stopped = 1;
                    out->stop_event = (size_t)(op - t->ops);
                    out->stop_alloc = op->ord;
                    out->stop_size = op->size;
                    op++;
                    break;
                }
            } else {
                b->stream[op->ord] = op->stream;
                live += op->size;
                if (live > peak)
                    peak = live;
            }
            addr = *slot;
        } else {
            addr = *slot;
            if (__builtin_expect(!addr, 0)) {
                skipped++;
            } else {
                st = cp_resource_free_locked(r, addr, (size_t)op->size, sv[op->stream]);
                if (st != CP_OK)
                    break;
                *slot = NULL;
                live -= op->size;
            }
        }
        /* the trace's time (replay_time.h) */
        replay_integral_event(&g, t, (size_t)(op - t->ops), op, addr,
                              cp_resource_reserved_locked(r));
        if (__builtin_expect(nfollow != 0, 0)) {
            for (h = 0; h < nfollow && st == CP_OK; h++)
                if (follow[h]->event)
                    st = follow[h]->event(follow[h]->self, w, (size_t)(op - t->ops), op, addr);
            if (st != CP_OK) {
                op++; /* the event itself was done */
                break;
            }
        }
    }
    while (st == CP_OK && op == end && !out->stopped && oi < t->nooms) {
        int refused = 0;
        st = replay_oom(t, r, sv, oi++, out, &refused);
        if (st == CP_OK && refused && needed_oom(w, oi - 1))
            stop_at_entry(out, t, oi - 1);
    }
    if (st == CP_OK && op == end && t->n)
        replay_integral_end(&g);
    *integ = g;
    for (h = 0; h < nfollow && st == CP_OK && op == end; h++)
        if (follow[h]->end)
            st = follow[h]->end(follow[h]->self, w, t->n);
    replay_lock_drop(&lk);
    out->events += (uint64_t)(op - t->ops);
    out->peak_live = peak;
    out->failed += failed;
    out->skipped_frees += skipped;
    *live_io = live;
    return st;
}

/* Blocks the trace never frees are returned before the next repetition
 * (and at the end, so the pool is left empty). */
static cp_status free_live(const cp_trace *t, cp_resource *r, cp_stream *const *sv,
                           replay_blocks *b, uint64_t *live)
{
    cp_status st = CP_OK;
    size_t k;
    for (k = 0; k < t->nallocs; k++) {
        if (b->blk[k]) {
            uint64_t sz = b->size[k];
            cp_status fs = cp_resource_free(r, b->blk[k], (size_t)sz, sv[b->stream[k]]);
            if (fs != CP_OK && st == CP_OK)
                st = fs;
            b->blk[k] = NULL;
            *live -= sz;
        }
    }
    return st;
}

/* What one replay holds beside the result. */
typedef struct replay_state {
    cp_stream **sv;            /* by trace stream index (NULL: the default stream) */
    replay_blocks b;
    replay_recorder rec;
    replay_clock rclock;
    replay_integral integ;
    replay_hook hooks[REPLAY_MAX_HOOKS];
    size_t nhooks;
    size_t last_alloc;         /* the trace's last allocation row (SIZE_MAX: none) */
    uint64_t total_events, live, bfc_regions0;
    uint64_t *rec_addr;        /* recorded addresses: by ordinal (and JAX's chunks) */
} replay_state;

/* The walk's tables, its hooks, the replay's streams, the pool's counters
 * before (subtracted at the end). */
static cp_status prepare(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                         cp_replay_result *out, replay_state *s)
{
    cp_stats stats;
    cp_status st;
    size_t i, k;
    if (cp_bfc_is(r)) {
        cp_bfc_stats bs;
        cp_bfc_figures(r, &bs);
        out->bfc.on = 1;
        s->bfc_regions0 = bs.regions;
        out->bfc.reordered_frees = t->info.reordered;
    }
    s->sv = calloc(t->nstreams ? t->nstreams : 1, sizeof *s->sv);
    s->b.blk = calloc(t->nallocs ? t->nallocs : 1, sizeof *s->b.blk);
    s->b.size = calloc(t->nallocs ? t->nallocs : 1, sizeof *s->b.size);
    s->b.stream = calloc(t->nallocs ? t->nallocs : 1, sizeof *s->b.stream);
    if (!s->sv || !s->b.blk || !s->b.size || !s->b.stream)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    for (i = 0; i < t->n; i++)
        if (!t->ops[i].is_free) {
            s->b.size[t->ops[i].ord] = t->ops[i].size;
            s->last_alloc = i;
        }
    if (o->record) {
        st = replay_recorder_init(&s->rec, t, out);
        if (st != CP_OK)
            return st;
        s->hooks[s->nhooks++] = replay_recorder_hook(&s->rec);
    }
    /* the trace's time (replay_time.h): the pool's clock */
    if (o->trace_clock)
        s->hooks[s->nhooks++] = replay_clock_hook(&s->rclock);
    /* Stream 0 is the default stream; every other trace stream gets its own. */
    for (k = 0; k < t->nstreams; k++) {
        if (t->streams[k] == 0 || o->single_stream || !cp_be)
            continue;
        st = cp_be->stream_create(&s->sv[k], 0, 0);
        if (st != CP_OK)
            return st;
    }
    cp_resource_stats(r, &stats);
    out->maps = stats.maps;
    out->unmaps = stats.unmaps;
    out->device_allocs = stats.device_allocs;
    out->device_frees = stats.device_frees;
    for (i = 0; i < (size_t)stats.nextra; i++)
        if (strcmp(stats.extra[i].name, "retries") == 0)
            out->retries = stats.extra[i].value; /* subtracted at the end */
    return CP_OK;
}

/* Each allocation's recorded address, by ordinal: a BFC region is placed
 * where the recording's request that made it landed; a JAX recording's
 * chunk and bytes_in_use after it are checked too. */
static cp_status use_recorded(const cp_trace *t, cp_resource *r, cp_replay_result *out,
                              replay_state *s)
{
    int jax = t->jax_chunk != NULL;
    size_t i;
    s->rec_addr = calloc((t->nallocs ? t->nallocs : 1) * (jax ? 3 : 1), sizeof *s->rec_addr);
    if (!s->rec_addr)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    for (i = 0; i < t->n; i++)
        if (!t->is_free[i]) {
            s->rec_addr[t->ord[i]] = t->ptr[i];
            if (jax) {
                s->rec_addr[t->nallocs + t->ord[i]] = t->jax_chunk[t->ord[i]];
                s->rec_addr[2 * t->nallocs + t->ord[i]] = t->jax_in_use[i];
            }
        }
    cp_bfc_use_recorded(r, s->rec_addr, jax ? s->rec_addr + t->nallocs : NULL,
                        jax ? s->rec_addr + 2 * t->nallocs : NULL, t->nallocs);
    out->recorded = 1;
    out->bfc.checked_chunks = jax;
    return CP_OK;
}

/* The repetitions, each its hooks' begin, the walk, the blocks left live
 * freed; the recorded addresses' figures after the first. */
static cp_status repetitions(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                             cp_replay_result *out, replay_state *s)
{
    int rep, reps = o->repeat > 1 ? o->repeat : 1;
    cp_status st = CP_OK;
    for (rep = 0; rep < reps && st == CP_OK; rep++) {
        replay_walk w = {.t = t, .r = r, .o = o, .out = out, .rep = rep,
                         .last_alloc = s->last_alloc};
        replay_hook *follow[REPLAY_MAX_HOOKS] = {NULL};
        size_t h, nfollow = 0;
        cp_status fs;
        for (h = 0; h < s->nhooks && st == CP_OK; h++) {
            int f = 1;
            if (s->hooks[h].begin)
                st = s->hooks[h].begin(s->hooks[h].self, &w, &f);
            if (f)
                follow[nfollow++] = &s->hooks[h];
        }
        if (st != CP_OK)
            break;
        replay_integral_begin(&s->integ, r);
        st = walk_events(&w, follow, nfollow, s->sv, &s->b, s->total_events, &s->live,
                         &s->integ);
        fs = free_live(t, r, s->sv, &s->b, &s->live);
        if (st == CP_OK)
            st = fs;
        if (rep == 0 && s->rec_addr) {
            cp_bfc_recorded rr;
            cp_bfc_end_recorded(r, &rr);
            out->bfc.addr_mismatches = rr.mismatches;
            out->bfc.first_mismatch = rr.first_mismatch;
            out->bfc.chunk_mismatches = rr.chunk_mismatches;
            out->bfc.first_chunk_mismatch = rr.first_chunk_mismatch;
        }
        if (out->stopped)
            break;
    }
    return st;
}

/* The pool's figures over the replay (its counters now minus before). */
static cp_status figures(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                         cp_replay_result *out, replay_state *s, cp_status st)
{
    cp_stats stats;
    size_t i, k;
    cp_resource_stats(r, &stats);
    if (stats.reserved_peak > CP_TRACE_BYTES_MAX && st == CP_OK) {
        /* The trace's own figures are bounded at load; the pool's rounding
         * may still take its reserved bytes past what is reported exactly. */
        st = cp_error_set(CP_ERR_INVALID, "the pool's reserved peak (%llu bytes) is above "
                          "2^63-1, the largest byte count a replay reports",
                          (unsigned long long)stats.reserved_peak);
    }
    out->peak_reserved = stats.reserved_peak;
    out->live_at_peak = s->integ.live_at_peak;
    out->maps = stats.maps - out->maps;
    out->unmaps = stats.unmaps - out->unmaps;
    /* PyTorch's figures, as near as a pool of another kind has them */
    out->peak_allocated = stats.used_peak;
    out->device_allocs = stats.device_allocs - out->device_allocs;
    out->device_frees = stats.device_frees - out->device_frees;
    out->ooms = out->oom_attempts - out->oom_served;
    /* a pool that counts retries of its own (cub) under that name */
    for (i = 0; i < (size_t)stats.nextra; i++)
        if (strcmp(stats.extra[i].name, "retries") == 0)
            out->retries = stats.extra[i].value - out->retries;
    if (out->bfc.on) {
        /* BFC's figures: the peak of its chunk bytes, the regions made */
        cp_bfc_stats bs;
        cp_bfc_figures(r, &bs);
        out->peak_allocated = bs.peak_bytes_in_use;
        out->device_allocs = bs.regions - s->bfc_regions0;
    }
    out->reserved_over_live =
        out->peak_live ? (double)out->peak_reserved / (double)out->peak_live : 0.0;
    if (o->synchronize && cp_be) {
        for (k = 0; k < t->nstreams; k++)
            cp_be->stream_synchronize(s->sv[k]);
    }
    return st;
}

static void release(const cp_trace *t, cp_resource *r, replay_state *s)
{
    size_t k;
    replay_clock_stop(&s->rclock);
    if (s->sv) {
        for (k = 0; k < t->nstreams; k++)
            if (s->sv[k])
                cp_be->stream_destroy(s->sv[k]);
    }
    free(s->sv);
    free(s->b.blk);
    free(s->b.size);
    free(s->b.stream);
    if (s->rec_addr && cp_bfc_is(r)) {
        cp_bfc_recorded rr;
        cp_bfc_end_recorded(r, &rr); /* a failure before the end of the walk */
    }
    free(s->rec_addr);
}

static cp_status replay_any(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                            cp_replay_result *out)
{
    cp_replay_opts def;
    replay_state s;
    cp_status st;
    double t0;

    memset(out, 0, sizeof *out);
    memset(&def, 0, sizeof def);
    def.repeat = 1;
    if (!o)
        o = &def;
    /* PyTorch's allocator model replays PyTorch's own operations (the
     * two-step frees, empty_cache, the recorded addresses): replay_torch.c */
    if (cp_torch_of(r))
        return cp_trace_replay_torch(t, r, o, out);
    /* CuPy's pool replays a CuPy log's own operations: replay_cupy.c */
    if (cp_cupy_of(r) && t->cupy)
        return cp_trace_replay_cupy(t, r, o, out);
    if (o->recorded_addresses && cp_cupy_of(r))
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" with a pool of kind "
                            "\"cupy\" needs a CuPy hook log (%s is a %s trace)",
                            cp_trace_path(t), cp_trace_format(t));
    if (o->recorded_addresses && !(cp_model_traits_of(r) & CP_MODEL_RECORDED)) {
        char kinds[200];
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a pool of kind %s "
                            "(the addresses are the recording's), not \"%s\"",
                            cp_model_names(kinds, sizeof kinds, CP_MODEL_RECORDED, '"', " or "),
                            cp_resource_kind(r));
    }
    /* torch's and cupy's replays (above) and bfc's regions below place them */
    if (o->recorded_addresses && !cp_bfc_is(r))
        return cp_error_set(CP_ERR_UNSUPPORTED, "addresses = \"recorded\": the replay has no "
                            "way to place kind \"%s\"'s blocks at them", cp_resource_kind(r));
    if (o->recorded_addresses && !cp_bfc_virtual(r))
        return cp_error_set(CP_ERR_INVALID, "addresses = \"recorded\" needs a bfc pool over "
                            "the \"virtual\" upstream (the device gives its own addresses)");
    memset(&s, 0, sizeof s);
    replay_clock_init(&s.rclock);
    replay_integral_init(&s.integ);
    s.last_alloc = SIZE_MAX;
    s.total_events = (uint64_t)t->n * (uint64_t)(o->repeat > 1 ? o->repeat : 1);
    st = prepare(t, r, o, out, &s);
    if (st == CP_OK && o->recorded_addresses)
        st = use_recorded(t, r, out, &s);
    if (st == CP_OK) {
        t0 = replay_now();
        st = repetitions(t, r, o, out, &s);
        replay_finish(&s.rclock, &s.integ, o, out, t0, s.total_events);
        st = figures(t, r, o, out, &s, st);
    }
    release(t, r, &s);
    if (st != CP_OK)
        cp_replay_result_fini(out);
    return st;
}

cp_status cp_trace_replay(const cp_trace *t, cp_resource *r, const cp_replay_opts *o,
                          cp_replay_result *out)
{
    int was = cp_streams_idle;
    cp_status st;
    cp_streams_idle = o && o->idle_streams;
    st = replay_any(t, r, o, out);
    cp_streams_idle = was;
    return st;
}
