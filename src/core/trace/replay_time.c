/*
 * replay_time.c: the trace's time in a replay: the clock's start and stop
 * (replay_time.h; the integrals are all inline there).
 */
#include "replay_time.h"

#include <string.h>

void replay_clock_start(replay_clock *c, cp_resource *r, int on)
{
    memset(c, 0, sizeof *c);
    if (!on)
        return;
    c->r = r;
    cp_resource_lock(r);
    c->clk = cp_resource_clock(r);
    c->was_manual = c->clk->manual;
    cp_clock_switch(c->clk, CP_CLOCK_MANUAL);
    cp_resource_unlock(r);
}

void replay_clock_begin(replay_clock *c, double t0_us)
{
    if (!c->clk)
        return;
    c->base = c->clk->t;
    c->t0 = t0_us;
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
