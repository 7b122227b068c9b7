/*
 * pool/clock.h: the clock a resource decides by (a pool that lets memory go
 * after it has been idle for a while needs one).
 *
 * Readings are seconds since the resource was created, and never go back:
 *  - wall: CLOCK_MONOTONIC_COARSE (the kernel's tick, a few milliseconds of
 *    resolution and about a quarter of the fine clock's cost: the windows
 *    it measures are seconds long), plus an offset that starts the reading
 *    at 0 and keeps it continuous when the clock was manual for a while;
 *  - manual: whatever the owner last set, from 0; it moves only when set
 *    (a script that drives time itself, or a trace replay that gives the
 *    pool the trace's timestamps).
 * Switching between the two keeps the reading where it was.
 *
 * An adaptor (limit, log) shares the clock of the resource it wraps, so
 * setting the outer one's sets the pool's.
 *
 * Plain C: never includes lua.h.  Compiles as C and C++.
 */
#ifndef CUPOLA_CLOCK_H
#define CUPOLA_CLOCK_H

#include <time.h>

typedef enum cp_clock_kind {
    CP_CLOCK_WALL = 0,
    CP_CLOCK_MANUAL
} cp_clock_kind;

typedef struct cp_clock {
    int manual;    /* cp_clock_kind */
    double t;      /* manual: the reading */
    double offset; /* wall: added to the monotonic clock */
} cp_clock;

static inline double cp_clock_wall(void)
{
    struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double cp_clock_now(const cp_clock *c)
{
    return c->manual ? c->t : cp_clock_wall() + c->offset;
}

/* A clock of kind k reading 0 now. */
static inline void cp_clock_init(cp_clock *c, cp_clock_kind k)
{
    c->manual = k == CP_CLOCK_MANUAL;
    c->t = 0.0;
    c->offset = -cp_clock_wall();
}

/* Makes c of kind k, its reading unchanged. */
static inline void cp_clock_switch(cp_clock *c, cp_clock_kind k)
{
    double now = cp_clock_now(c);
    c->manual = k == CP_CLOCK_MANUAL;
    if (c->manual)
        c->t = now;
    else
        c->offset = now - cp_clock_wall();
}

#endif /* CUPOLA_CLOCK_H */
