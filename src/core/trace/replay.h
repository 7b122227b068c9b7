/*
 * replay.h: the pieces of cp_trace_replay (trace.h), internal to trace/.
 *
 * replay.c walks the trace: it makes the replay's streams, runs each
 * repetition's events against the pool under the batched lock
 * (replay_lock.h), keeps the walk's own figures (events, live bytes and
 * their peak, refusals, skipped frees) and frees what the trace leaves live.
 * Anything else a replay does beside the walk is a hook: a set of
 * functions the walk calls at the start of a repetition, after each of its
 * events and at its end, each in a file of its own (replay_record.c: the
 * timeline and the addresses of opts.record).  A new figure or record is a
 * new hook, added to the list replay.c builds.
 */
#ifndef CUPOLA_REPLAY_H
#define CUPOLA_REPLAY_H

#include "trace_impl.h"

/* What a hook sees of the replay in progress. */
typedef struct replay_walk {
    const cp_trace *t;
    cp_resource *r;
    const cp_replay_opts *o; /* never NULL */
    cp_replay_result *out;
    int rep;                 /* the repetition, from 0 */
    size_t last_alloc;       /* the trace's last allocation row (SIZE_MAX: none) */
} replay_walk;

/* A hook.  Any function may be NULL; one that returns a status other than
 * CP_OK stops the replay with it (the result is then released). */
typedef struct replay_hook {
    void *self;
    /* A repetition starts, the pool's lock not held (inside the timed
     * region).  *follow = 0 (it starts at 1) when the hook does not want
     * this repetition's events and end: they cost the walk nothing then. */
    cp_status (*begin)(void *self, const replay_walk *w, int *follow);
    /* Event i (from 0, within the repetition) is done, the pool's lock
     * held.  addr: the block an allocation got or a free gave back; NULL for
     * an allocation the pool refused and for a free skipped because of it. */
    cp_status (*event)(void *self, const replay_walk *w, size_t i, const replay_op *op,
                       void *addr);
    /* The repetition's events are over: all of them (done = the trace's
     * events) or up to a failure; the pool's lock held. */
    cp_status (*end)(void *self, const replay_walk *w, size_t done);
} replay_hook;

/* At most this many hooks follow one replay. */
#define REPLAY_MAX_HOOKS 8

/* ---- the recorder (replay_record.c): opts.record ------------------------
 * The pool's reserved bytes after every event of the first repetition where
 * they changed (and before the first event), and the address each allocation
 * got, into the result's rec_* arrays. */
typedef struct replay_recorder {
    size_t cap; /* of rec_event and rec_reserved */
} replay_recorder;

/* Appends (event, reserved) to the result's rec_* arrays when reserved
 * changed since the last point (cap: their room, grown by doubling);
 * CP_ERR_OOM.  Also the replays of kinds torch and cupy, which walk their
 * own operations, record through it. */
cp_status replay_record_point(cp_replay_result *out, size_t *cap, uint64_t ev, uint64_t reserved);

/* Sets up the recorder and the result's address table; CP_ERR_OOM. */
cp_status replay_recorder_init(replay_recorder *rec, const cp_trace *t, cp_replay_result *out);
replay_hook replay_recorder_hook(replay_recorder *rec);

#endif /* CUPOLA_REPLAY_H */
