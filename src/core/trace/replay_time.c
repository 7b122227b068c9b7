/*
 * replay_time.c: the trace's time in a replay: the clock (a hook of the
 * walk) and the integrals (replay_time.h).
 */
#include "replay_time.h"

#include <string.h>

/* ---- the clock ---- */

void replay_clock_init(replay_clock *c)
{
    memset(c, 0, sizeof *c);
}

static cp_status clock_begin(void *self, const replay_walk *w, int *follow)
{
    replay_clock *c = self;
    if (!w->t->n) {
        *follow = 0;
        return CP_OK;
    }
    cp_resource_lock(w->r);
    if (!c->clk) {
        c->r = w->r;
        c->clk = cp_resource_clock(w->r);
        c->was_manual = c->clk->manual;
        cp_clock_switch(c->clk, CP_CLOCK_MANUAL);
    }
    /* the first event happens at the reading now */
    c->base = c->clk->t;
    c->t0 = w->t->time[0];
    cp_resource_unlock(w->r);
    return CP_OK;
}

/* Event i is done: the clock reads the next event's time. */
static cp_status clock_event(void *self, const replay_walk *w, size_t i, const replay_op *op,
                             void *addr)
{
    replay_clock *c = self;
    double t;
    (void)op;
    (void)addr;
    if (i + 1 < w->t->n) {
        t = c->base + (w->t->time[i + 1] - c->t0) * 1e-6;
        if (t > c->clk->t)
            c->clk->t = t;
    }
    return CP_OK;
}

replay_hook replay_clock_hook(replay_clock *c)
{
    replay_hook h = {.self = c, .begin = clock_begin, .event = clock_event};
    return h;
}

void replay_clock_stop(replay_clock *c)
{
    if (!c->clk)
        return;
    cp_resource_lock(c->r);
    cp_clock_switch(c->clk, c->was_manual ? CP_CLOCK_MANUAL : CP_CLOCK_WALL);
    cp_resource_unlock(c->r);
    c->clk = NULL;
}

/* ---- the integrals ---- */

void replay_integral_init(replay_integral *g)
{
    memset(g, 0, sizeof *g);
}

void replay_integral_begin(replay_integral *g, cp_resource *r)
{
    g->t = g->t_res = 0.0;
    g->live = 0; /* the walk starts each repetition with nothing live */
    g->reserved = cp_resource_reserved(r);
    if (g->reserved > g->peak_seen) {
        g->peak_seen = g->reserved;
        g->live_at_peak = 0;
    }
}

void replay_integral_end(replay_integral *g)
{
    g->reserved_bus += REPLAY_BYTES(g->reserved) * (g->t - g->t_res);
    g->t_res = g->t;
    g->live_bus += REPLAY_BYTES(g->live) * g->t;
}

void replay_integral_result(const replay_integral *g, double *reserved_bs, double *live_bs)
{
    *reserved_bs = g->reserved_bus * 1e-6;
    *live_bs = g->live_bus * 1e-6;
}
