/*
 * replay_time.h: what a replay does with the trace's own time, beside the
 * walk (replay.h), internal to trace/:
 *  - the clock (opts.trace_clock): for the replay, the pool's clock reads
 *    the trace's timestamps, so that a pool deciding by time (the vmm pool's
 *    decay window) sees the workload's seconds, as on a live GPU, and not
 *    the replay's microseconds.  Each repetition starts at the clock's
 *    reading then and moves it on by the time since the trace's first event
 *    (never back, should a trace's times go back); after the replay,
 *    whether it succeeded or not, the clock is of its own kind again, its
 *    reading kept where it got to;
 *  - the integrals (every replay): the pool's reserved bytes and the live
 *    bytes times the trace's seconds, from each repetition's first event to
 *    its last (the bytes after an event hold until the next one's time),
 *    summed over the repetitions, into the result's reserved_byte_seconds
 *    and live_byte_seconds.  Times are made monotonic (a trace whose times
 *    go back counts no time there).  The live integral is kept per block
 *    (minus size x its start, plus size x its end), the reserved one per
 *    change of the reserved bytes: per event one product and one
 *    comparison.
 */
#ifndef CUPOLA_REPLAY_TIME_H
#define CUPOLA_REPLAY_TIME_H

#include "replay.h"

typedef struct replay_clock {
    cp_resource *r;
    cp_clock *clk;      /* NULL: not taken over */
    int was_manual;
    double base;        /* the reading when the repetition started */
    double t0;          /* the trace's first time (microseconds) */
} replay_clock;

/* Zeroes the state (stopping then does nothing). */
void replay_clock_init(replay_clock *c);
replay_hook replay_clock_hook(replay_clock *c);
/* Gives the clock back to its own kind (the pool's lock not held; safe
 * when never started). */
void replay_clock_stop(replay_clock *c);

typedef struct replay_integral {
    double t;           /* the latest event's time since the first, monotonic */
    double t_res;       /* when the reserved bytes last changed */
    uint64_t reserved, live;
    double reserved_bus, live_bus; /* byte-microseconds, all repetitions */
    /* the highest reserved figure seen after an event, and the live bytes
     * (as requested) then: what the pool held beyond the program's need at
     * its peak */
    uint64_t peak_seen, live_at_peak;
} replay_integral;

/* Unlike the clock (and the recorder), the integrals are no hook: they
 * follow every replay, and called inline from the walk they cost about 35
 * instructions an event where a hook's indirect call cost twice that. */
void replay_integral_init(replay_integral *g);
/* A repetition starts (the pool's lock not held). */
void replay_integral_begin(replay_integral *g, cp_resource *r);

/* Byte counts stay below 2^63 (trace.h): the signed conversion, one
 * instruction where the unsigned one branches. */
#define REPLAY_BYTES(x) ((double)(int64_t)(x))

/* Event i is done: addr is the block an allocation got or a free gave back
 * (NULL: refused, or skipped); reserved, the pool's bytes after it. */
static inline void replay_integral_event(replay_integral *g, const cp_trace *t, size_t i,
                                         const replay_op *op, const void *addr,
                                         uint64_t reserved)
{
    double tm = t->time[i] - t->time[0];
    if (tm > g->t)
        g->t = tm;
    if (addr) { /* a block began or ended its life now */
        if (op->is_free) {
            g->live_bus += REPLAY_BYTES(op->size) * g->t;
            g->live -= op->size;
        } else {
            g->live_bus -= REPLAY_BYTES(op->size) * g->t;
            g->live += op->size;
        }
    }
    if (reserved != g->reserved) {
        g->reserved_bus += REPLAY_BYTES(g->reserved) * (g->t - g->t_res);
        g->t_res = g->t;
        g->reserved = reserved;
        if (reserved > g->peak_seen) {
            g->peak_seen = reserved;
            g->live_at_peak = g->live;
        }
    }
}

/* The repetition's last event is done: what is still live or reserved
 * holds until its time (the walk frees the rest after it, at no time of
 * the trace's). */
void replay_integral_end(replay_integral *g);
/* Byte-seconds over the repetitions done. */
void replay_integral_result(const replay_integral *g, double *reserved_bs, double *live_bs);

#endif /* CUPOLA_REPLAY_TIME_H */
