/*
 * jax_load.c: the readers of JAX's memory profiles ("jax_memory"): the
 * XSpace jax.profiler.trace writes (*.xplane.pb, or the folder it wrote) and
 * JSON lines written from it.  jax.c and jax_xspace.c read the events of one
 * allocator (jax.h); they become rows here.
 *
 * Events in time order (stable: the file's order among equal times); a free
 * of a chunk not live is of a block allocated before the profile began,
 * skipped (counted in unmatched); an allocation at an address still live
 * means the free of the old chunk reached the profile late (another
 * thread): that free is done before it and its own event skipped
 * (reordered).
 */
#include "reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jax.h"

static int cmp_jax(const void *a, const void *b)
{
    const cp_jax_event *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* BFC's own order, where times tie or come from several threads' clocks:
 * each event's bytes_allocated is BFC's bytes_in_use after it, taken under
 * BFC's lock, so in BFC's order each is the one before it plus or minus the
 * event's chunk.  An event that breaks that chain is followed, within the
 * next RESEQ_WINDOW events, by the one that continues it: that one is moved
 * up (counted in *moved).  Recordings without the two stats stay as they
 * are. */
#define RESEQ_WINDOW 16
static void resequence(cp_jax_events *e, size_t *moved)
{
    size_t i, j;
    uint64_t run;
    for (i = 0; i < e->n; i++)
        if (e->ev[i].in_use == CP_JAX_NONE || e->ev[i].chunk == CP_JAX_NONE)
            return;
    if (e->n < 2)
        return;
    run = e->ev[0].in_use;
    for (i = 1; i < e->n; i++) {
        for (j = i; j < e->n && j <= i + RESEQ_WINDOW; j++) {
            const cp_jax_event *x = &e->ev[j];
            uint64_t want = x->is_free ? run - x->chunk : run + x->chunk;
            if (x->in_use == want)
                break;
        }
        if (j > i && j < e->n && j <= i + RESEQ_WINDOW) {
            cp_jax_event x = e->ev[j];
            memmove(&e->ev[i + 1], &e->ev[i], (j - i) * sizeof *e->ev);
            e->ev[i] = x;
            (*moved)++;
        }
        run = e->ev[i].in_use;
    }
}

static cp_status row(cp_trace_builder *b, int is_free, uint64_t addr, uint64_t size, double us)
{
    cp_tb_row r;
    memset(&r, 0, sizeof r);
    r.is_free = is_free;
    r.ptr = addr;
    r.size = size;
    r.time_us = us;
    return cp_tb_add(b, &r);
}

/* A free: done already (before the allocation that reused its chunk), of a
 * block from before the profile, or a row. */
static cp_status free_event(cp_trace_builder *b, cp_ptrmap *late, const cp_jax_event *ev,
                            double us)
{
    cp_trace *t = b->t;
    uintptr_t n = (uintptr_t)cp_ptrmap_get(late, ev->addr);
    cp_status st;
    if (n) {
        if (n == 1)
            (void)cp_ptrmap_del(late, ev->addr);
        else
            (void)cp_ptrmap_put(late, ev->addr, (void *)(n - 1));
        return CP_OK;
    }
    if (!cp_tb_live(b, ev->addr)) {
        t->info.unmatched++;
        return CP_OK;
    }
    st = row(b, 1, ev->addr, 0, us);
    if (st == CP_OK)
        t->jax_in_use[t->n - 1] = ev->in_use;
    return st;
}

/* An allocation, after the late free of its address where it is live. */
static cp_status alloc_event(cp_trace_builder *b, cp_ptrmap *late, const cp_jax_event *ev,
                             size_t i, double us)
{
    cp_trace *t = b->t;
    cp_status st;
    if (cp_tb_live(b, ev->addr)) {
        uintptr_t n = (uintptr_t)cp_ptrmap_get(late, ev->addr);
        if ((st = row(b, 1, ev->addr, 0, us)) != CP_OK)
            return st;
        t->jax_in_use[t->n - 1] = CP_JAX_NONE;
        if (cp_ptrmap_put(late, ev->addr, (void *)(n + 1)) != 0)
            return cp_tb_nomem(b);
        t->info.reordered++;
    }
    if (ev->requested == 0)
        return cp_error_set(CP_ERR_INVALID, "%s: event %zu: an allocation of 0 bytes (BFC "
                            "records none)", b->path, i + 1);
    if ((st = row(b, 0, ev->addr, ev->requested, us)) != CP_OK)
        return st;
    t->jax_in_use[t->n - 1] = ev->in_use;
    t->jax_chunk[t->ord[t->n - 1]] = ev->chunk;
    return CP_OK;
}

static cp_status rows(cp_trace_builder *b, cp_jax_events *e)
{
    cp_trace *t = b->t;
    cp_ptrmap late;
    cp_status st = CP_OK;
    size_t i;

    snprintf(t->allocator, sizeof t->allocator, "%s", e->allocator);
    t->info.device_memory = e->device_memory;
    if (e->has_ts)
        qsort(e->ev, e->n, sizeof *e->ev, cmp_jax);
    resequence(e, &t->info.reordered);
    /* rows: at most two an event (a free moved early, whose own event never
     * comes, adds one) */
    t->jax_chunk = malloc((e->n ? e->n : 1) * sizeof *t->jax_chunk);
    t->jax_in_use = malloc((e->n ? 2 * e->n : 1) * sizeof *t->jax_in_use);
    if (!t->jax_chunk || !t->jax_in_use || cp_ptrmap_init(&late, 64) != 0)
        return cp_tb_nomem(b);
    for (i = 0; i < e->n && st == CP_OK; i++) {
        const cp_jax_event *ev = &e->ev[i];
        /* microseconds from the first event (relative, so no precision is lost) */
        double us = e->has_ts ? (double)((ev->ts - e->ev[0].ts) / 1000.0L) : (double)i;
        b->line = i + 1;
        if (ev->addr == 0)
            st = cp_error_set(CP_ERR_INVALID, "%s: event %zu: address 0 (BFC never hands out "
                              "a null chunk)", b->path, i + 1);
        else if (ev->peak != CP_JAX_NONE && ev->peak > t->info.bfc_peak_bytes_in_use)
            t->info.bfc_peak_bytes_in_use = ev->peak;
        if (st == CP_OK)
            st = ev->is_free ? free_event(b, &late, ev, us) : alloc_event(b, &late, ev, i, us);
    }
    cp_ptrmap_fini(&late);
    if (st == CP_OK && t->n == 0)
        st = cp_error_set(CP_ERR_INVALID, "%s: no memory events of %s left once frees of blocks "
                          "allocated before the profile are skipped", b->path, t->allocator);
    return st;
}

static cp_status load(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p, int xspace)
{
    cp_jax_events e;
    cp_status st;
    if (p->device > 0)
        return cp_error_set(CP_ERR_INVALID, "%s: device %d: a JAX profile is read by allocator "
                            "(option 'allocator')", b->path, p->device);
    st = xspace ? cp_jax_read_xspace(gz, b->path, p->allocator, &e)
                : cp_jax_read_lines(gz, b->path, p->allocator, &e);
    if (st != CP_OK)
        return st;
    st = rows(b, &e);
    cp_jax_events_free(&e);
    return st;
}

static cp_status load_lines(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p)
{
    return load(b, gz, p, 0);
}

static cp_status load_xspace(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p)
{
    return load(b, gz, p, 1);
}

static void free_jax(cp_trace *t)
{
    free(t->jax_chunk);
    free(t->jax_in_use);
    t->jax_chunk = NULL;
    t->jax_in_use = NULL;
}

static const char *const keys[] = {"\"event\"", "\"allocator_name\"", NULL};

static int bid_lines(const cp_trace_probe *p)
{
    return p->keys_of == &cp_reader_jax_lines ? CP_BID_JAX_LINES : CP_BID_NONE;
}

const cp_trace_reader cp_reader_jax_lines = {
    .name = "jax_memory",
    .what = "a JAX memory event (key \"event\")",
    .keys = keys,
    .bid = bid_lines,
    .load = load_lines,
    .free = free_jax,
};

static int bid_xspace(const cp_trace_probe *p)
{
    if (p->folder)
        return CP_BID_XSPACE;
    return p->nhead > 0 && cp_jax_is_xspace(p->head, p->nhead, p->path) ? CP_BID_XSPACE
                                                                         : CP_BID_NONE;
}

const cp_trace_reader cp_reader_jax_xspace = {
    .name = "jax_memory",
    .what = "a JAX profile (XSpace)",
    .bid = bid_xspace,
    .folder = cp_jax_find_profile,
    .folder_what = "JAX profile in it (*.xplane.pb, or plugins/profile/<run>/*.xplane.pb)",
    .load = load_xspace,
    .free = free_jax,
};
