/*
 * replay_lock.h: the pool's lock during a replay, taken once per
 * REPLAY_BATCH events rather than once per event (its atomic exchange was a
 * third of the cost of an event), and released between batches so that
 * another thread using the pool waits at most one batch.  While it is held
 * the replay calls only the _locked entry points (resource.h).  Internal to
 * trace/; inline, since the walk ticks it on every event.
 */
#ifndef CUPOLA_REPLAY_LOCK_H
#define CUPOLA_REPLAY_LOCK_H

#include "pool/resource.h"

#define REPLAY_BATCH 256u

typedef struct replay_lock {
    cp_resource *r;
    unsigned batch; /* events since the lock was last taken */
} replay_lock;

static inline void replay_lock_take(replay_lock *l, cp_resource *r)
{
    l->r = r;
    l->batch = 0;
    cp_resource_lock(r);
}

/* Before each event: lets others in at the end of a batch. */
static inline void replay_lock_tick(replay_lock *l)
{
    if (++l->batch == REPLAY_BATCH) {
        l->batch = 0;
        cp_resource_unlock(l->r);
        cp_resource_lock(l->r);
    }
}

static inline void replay_lock_drop(replay_lock *l)
{
    cp_resource_unlock(l->r);
}

#endif /* CUPOLA_REPLAY_LOCK_H */
