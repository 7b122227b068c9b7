/*
 * replay_time.h: what a replay does with the trace's own time (internal to
 * trace/), beside the walk over its events:
 *  - the clock (opts.trace_clock): for the replay, the pool's clock reads
 *    the trace's timestamps, so that a pool deciding by time (the vmm pool's
 *    decay window) sees the workload's seconds, as on a live GPU, and not
 *    the replay's microseconds.  Each repetition starts at the clock's
 *    reading then and moves it on by the time since the trace's first event
 *    (never back, should a trace's times go back); after the replay the
 *    clock is of its own kind again, its reading kept where it got to;
 *  - the integrals: reserved and live bytes times the trace's seconds,
 *    over each repetition's first to last event (the bytes after an event
 *    hold until the next one's time), summed over repetitions.
 * Each piece is a state with a begin (a repetition starts), a step per
 * event and an end.
 */
#ifndef CUPOLA_REPLAY_TIME_H
#define CUPOLA_REPLAY_TIME_H

#include <stddef.h>
#include <stdint.h>

#include "pool/resource.h"

typedef struct replay_clock {
    cp_resource *r;
    cp_clock *clk;      /* NULL: the pool keeps its own clock */
    int was_manual;
    double base;        /* the reading when the repetition started */
    double t0;          /* the trace's first time (microseconds) */
} replay_clock;

/* Takes over r's clock when on (the pool's lock not held). */
void replay_clock_start(replay_clock *c, cp_resource *r, int on);
/* A repetition starts at the trace's first time t0_us. */
void replay_clock_begin(replay_clock *c, double t0_us);
/* Event at t_us is next (the pool's lock held). */
static inline void replay_clock_step(replay_clock *c, double t_us)
{
    double t = c->base + (t_us - c->t0) * 1e-6;
    if (t > c->clk->t)
        c->clk->t = t;
}
/* Gives the clock back to its own kind (safe when not started; the
 * pool's lock not held). */
void replay_clock_stop(replay_clock *c);

/* The integrals, all inline (their state stays in the replay loop's
 * registers).  Times are microseconds since the repetition's first event,
 * made monotonic (a trace whose times go back counts no time there).  The
 * live integral is kept per block (minus size x its start, plus size x its
 * end), the reserved one per change of the reserved bytes: per event that
 * is one product and one comparison. */
typedef struct replay_integral {
    double t0;          /* the repetition's first time (trace microseconds) */
    double t;           /* the latest time since t0, monotonic */
    double t_res;       /* when the reserved bytes last changed */
    uint64_t reserved;
    double reserved_bus, live_bus; /* byte-microseconds */
} replay_integral;

static inline void replay_integral_init(replay_integral *g)
{
    g->t0 = g->t = g->t_res = g->reserved_bus = g->live_bus = 0.0;
    g->reserved = 0;
}

/* A repetition starts at t0_us with these reserved bytes (none live). */
static inline void replay_integral_begin(replay_integral *g, double t0_us, uint64_t reserved)
{
    g->t0 = t0_us;
    g->t = g->t_res = 0.0;
    g->reserved = reserved;
}

/* The next event's time. */
static inline void replay_integral_time(replay_integral *g, double t_us)
{
    double t = t_us - g->t0;
    if (t > g->t)
        g->t = t;
}

/* The reserved bytes now (after the event before): counted when changed.
 * Byte counts stay below 2^63 (trace.h): the signed conversion, one
 * instruction where the unsigned one branches. */
static inline void replay_integral_reserved(replay_integral *g, uint64_t reserved)
{
    if (reserved != g->reserved) {
        g->reserved_bus += (double)(int64_t)g->reserved * (g->t - g->t_res);
        g->t_res = g->t;
        g->reserved = reserved;
    }
}

/* A block of size bytes becomes live (sign +1) or is freed (-1) now. */
static inline void replay_integral_block(replay_integral *g, uint64_t size, double sign)
{
    g->live_bus -= sign * (double)(int64_t)size * g->t;
}

/* The repetition's last event is done; live bytes are still live (freed by
 * the replay after it, at no time) and the pool holds reserved. */
static inline void replay_integral_end(replay_integral *g, uint64_t live, uint64_t reserved)
{
    replay_integral_reserved(g, reserved);
    g->reserved_bus += (double)(int64_t)g->reserved * (g->t - g->t_res);
    g->t_res = g->t;
    g->live_bus += (double)(int64_t)live * g->t;
}

/* Byte-seconds so far. */
static inline void replay_integral_result(const replay_integral *g, double *reserved_bs,
                                          double *live_bs)
{
    *reserved_bs = g->reserved_bus * 1e-6;
    *live_bs = g->live_bus * 1e-6;
}

#endif /* CUPOLA_REPLAY_TIME_H */
