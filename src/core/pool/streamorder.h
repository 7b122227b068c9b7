/*
 * streamorder.h: stream-ordered reuse of freed blocks, shared by every pool.
 *
 * Every free block carries a tag: the id of the stream it was freed on
 * (cp_be->stream_id, never the pointer, since stream addresses get reused)
 * and, when the pool is used from more than one stream, a pooled event
 * recorded on that stream right after the free.  A request on stream s may
 * take the block when
 *   - s is the stream it was freed on, or the block is known idle (ANY);
 *   - CP_REUSE_EVENT: the event has completed (cp_be->event_query); the
 *     block is then re-tagged ANY so the query is paid once;
 *   - CP_REUSE_WAIT: at once, after cp_be->stream_wait_event(s, event).
 * CP_REUSE_STREAM never crosses streams.
 *
 * Cost: while a pool has only ever seen one stream no event is recorded at
 * all, so the hot path is a compare of two integers.  The first operation on
 * a second stream switches the pool to multi-stream mode for good; from then
 * on, with CP_REUSE_EVENT or CP_REUSE_WAIT, each free records a pooled event
 * (no create/destroy per free).  With CP_REUSE_STREAM (the default) no block
 * ever crosses streams, and an event would serve only to know when a free
 * is complete before memory is returned or blocks of two streams are
 * merged: so frees record nothing.  A stream's frees share one "open" event
 * of that stream, recorded on demand: when the pool asks whether one of
 * them is complete (cp_so_settle) the open event is marked wanted, and it
 * is recorded at the next operation of the pool on that stream (known to
 * exist then; its frees all precede the record), after which the stream's
 * later frees open a new one.  A device synchronization completes every
 * open event.  (A two-stream replay used to pay one event record per free,
 * about 10 times the cost of an event on one stream.)  Blocks
 * freed before the switch carry the pool's "legacy" event instead, which is
 * recorded once, at the next operation on that first stream (when it is
 * known to exist: its frees all precede the record, so the one event covers
 * them all).  Until then, CP_REUSE_EVENT leaves those blocks to their stream
 * (it never blocks) and CP_REUSE_WAIT synchronizes the device once.  The
 * same holds for the rare blocks with no event at all (a failed record, or
 * an arena region freed on several streams): only a device synchronization
 * since makes them usable elsewhere.  Memory fresh from cudaMallocAsync is
 * tagged as if its stream had just freed it.
 *
 * Merging two free neighbours is allowed when the result is at least as
 * strict as both parts: equal stream ids (keep the later event, which covers
 * the earlier on an in-order stream), or, while the pool has seen one
 * stream, one part ANY (the result takes the other's tag).  Once a second
 * stream is seen, an ANY part is not merged into a part freed on a stream
 * (that would take idle memory away from the other streams): the heap keeps
 * such neighbours apart and merges them when the free is known complete
 * (pool/heap.h).  Blocks of different streams are not merged until their
 * events are known complete.
 *
 * The functions are called with the pool's lock held.
 */
#ifndef CUPOLA_STREAMORDER_H
#define CUPOLA_STREAMORDER_H

#include <stdint.h>

#include "resource.h"

#define CP_SO_ANY UINT64_MAX          /* idle: usable on any stream */
#define CP_SO_MIXED (UINT64_MAX - 1)  /* freed on several streams, no event */

typedef struct cp_so_ev {
    cp_event *e;
    uint64_t seq;          /* recording order within the pool */
    uint32_t refs;
    uint32_t done;         /* event_query said complete */
    uint8_t open;          /* CP_REUSE_STREAM: not recorded yet */
    uint8_t wanted;        /*   and asked about: record at the stream's next op */
    struct cp_so_ev *next; /* free list */
} cp_so_ev;

/* The open event of one stream (CP_REUSE_STREAM). */
typedef struct cp_so_open {
    uint64_t sid;
    cp_so_ev *ev;          /* NULL: none open */
} cp_so_open;

typedef struct cp_so_tag {
    uint64_t sid;  /* stream freed on, CP_SO_ANY or CP_SO_MIXED */
    cp_so_ev *ev;  /* NULL: none recorded (single-stream mode, or failure) */
} cp_so_tag;

typedef struct cp_so {
    cp_reuse policy;
    int multi;           /* more than one stream seen */
    int have_first;
    uint64_t first_sid;
    int need_sync;       /* event-less foreign blocks exist, not yet synced */
    int legacy_used;     /* some block carries the legacy event */
    cp_so_ev legacy;     /* frees of the single-stream time (e.NULL: unrecorded) */
    uint64_t seq;
    cp_so_ev *pool;      /* recycled events */
    uint64_t events_created, events_recorded, syncs, waits;
    cp_so_open *open;    /* per stream, CP_REUSE_STREAM */
    uint32_t nopen, capopen;
    uint32_t nwanted;    /* open events marked wanted */
    int share_idle;      /* multi-stream: keep ANY apart from pending parts
                            (1, the default; the vmm pool, whose idle pages
                            any stream can take, sets 0) */
} cp_so;

void cp_so_init(cp_so *so, cp_reuse policy);
/* Destroys the pooled events; every tag must have been released. */
void cp_so_fini(cp_so *so);

static inline uint64_t cp_so_sid(const cp_stream *s)
{
    return s ? cp_be->stream_id(s) : 0;
}

/* Records the legacy event on the first stream, now known to be alive. */
void cp_so_record_legacy(cp_so *so, cp_stream *s);

/* Records stream sid's open event if it is wanted (s is alive: the pool
 * is being used on it). */
void cp_so_record_wanted(cp_so *so, uint64_t sid, cp_stream *s);

/* Notes that the pool is used on stream s of id sid (call at every alloc
 * and free, before anything else). */
static inline void cp_so_note(cp_so *so, uint64_t sid, cp_stream *s)
{
    if (so->have_first) {
        if (sid != so->first_sid) {
            so->multi = 1;
        } else if (so->multi && so->legacy_used && !so->legacy.e && !so->legacy.done) {
            cp_so_record_legacy(so, s);
        }
        if (__builtin_expect(so->nwanted != 0, 0))
            cp_so_record_wanted(so, sid, s);
    } else {
        so->have_first = 1;
        so->first_sid = sid;
    }
}

/* Tags a block freed on s (recording an event in multi-stream mode). */
void cp_so_tag_free_slow(cp_so *so, cp_so_tag *t, uint64_t sid, cp_stream *s);
static inline void cp_so_tag_free(cp_so *so, cp_so_tag *t, uint64_t sid, cp_stream *s)
{
    t->sid = sid;
    if (so->multi) {
        t->ev = NULL;
        cp_so_tag_free_slow(so, t, sid, s);
    } else {
        t->ev = &so->legacy;
        so->legacy_used = 1;
        /* "done" covered the legacy frees before this one (a device
         * synchronization since); this free is new and pending. */
        so->legacy.done = 0;
    }
}

/* Drops the tag's event reference (the block is being handed out). */
void cp_so_ev_put(cp_so *so, cp_so_ev *ev);
static inline void cp_so_tag_release(cp_so *so, cp_so_tag *t)
{
    if (t->ev) {
        if (t->ev != &so->legacy) /* the legacy event is the pool's own */
            cp_so_ev_put(so, t->ev);
        t->ev = NULL;
    }
}

/* Copies a tag for the remainder of a split block (one more reference). */
static inline void cp_so_tag_copy(cp_so_tag *dst, const cp_so_tag *src)
{
    *dst = *src;
    if (src->ev)
        src->ev->refs++; /* harmless on the legacy event: never put */
}

/* May a block tagged t be used on stream s (id sid) now?  May insert a wait
 * (CP_REUSE_WAIT) or re-tag t as ANY; returns 1 if usable. */
int cp_so_usable_slow(cp_so *so, cp_so_tag *t, uint64_t sid, cp_stream *s);
static inline int cp_so_usable(cp_so *so, cp_so_tag *t, uint64_t sid, cp_stream *s)
{
    if (t->sid == sid || t->sid == CP_SO_ANY)
        return 1;
    return cp_so_usable_slow(so, t, sid, s);
}

/* Can blocks tagged a and b be merged?  If so, writes the merged tag to a
 * and releases what b held; returns 1. */
int cp_so_merge_slow(cp_so *so, cp_so_tag *a, cp_so_tag *b);
static inline int cp_so_merge(cp_so *so, cp_so_tag *a, cp_so_tag *b)
{
    if (a->sid == b->sid && a->ev == b->ev && (!a->ev || a->ev == &so->legacy))
        return 1;
    return cp_so_merge_slow(so, a, b);
}

/* Re-tags t as ANY if its free is known complete (event queried, or no
 * event and the device synchronized since); returns 1 if t is ANY now.
 * cp_so_sync synchronizes the device if event-less blocks are pending
 * (trim uses it before settling: it is about to return memory anyway). */
int cp_so_settle(cp_so *so, cp_so_tag *t);
int cp_so_sync(cp_so *so);

/* Joins tag b into a for a region that cannot refuse (the arena): different
 * streams give CP_SO_MIXED. */
void cp_so_join(cp_so *so, cp_so_tag *a, cp_so_tag *b);

#endif /* CUPOLA_STREAMORDER_H */
