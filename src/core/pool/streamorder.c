/*
 * streamorder.c: the slow paths of stream-ordered reuse (see streamorder.h
 * for the policy).  Everything here runs only when a pool is used from more
 * than one stream.
 */
#include "streamorder.h"

#include <stdlib.h>

const char *cp_reuse_name(int reuse)
{
    static const char *const names[] = {"stream", "event", "wait"};
    return reuse >= 0 && reuse <= CP_REUSE_WAIT ? names[reuse] : NULL;
}

void cp_so_init(cp_so *so, cp_reuse policy)
{
    so->policy = policy;
    so->multi = 0;
    so->have_first = 0;
    so->first_sid = 0;
    so->need_sync = 0;
    so->legacy_used = 0;
    so->legacy.e = NULL;
    so->legacy.seq = 0;
    so->legacy.refs = 1;
    so->legacy.done = 0;
    so->legacy.next = NULL;
    so->seq = 0;
    so->pool = NULL;
    so->events_created = so->events_recorded = so->syncs = so->waits = 0;
    so->open = NULL;
    so->nopen = so->capopen = so->nwanted = 0;
    so->share_idle = 1;
}

void cp_so_fini(cp_so *so)
{
    cp_so_ev *ev;
    uint32_t i;
    for (i = 0; i < so->nopen; i++)
        if (so->open[i].ev)
            cp_so_ev_put(so, so->open[i].ev);
    free(so->open);
    so->open = NULL;
    so->nopen = so->capopen = 0;
    ev = so->pool;
    if (so->legacy.e && cp_be)
        cp_be->event_destroy(so->legacy.e);
    so->legacy.e = NULL;
    while (ev) {
        cp_so_ev *next = ev->next;
        if (ev->e && cp_be)
            cp_be->event_destroy(ev->e);
        free(ev);
        ev = next;
    }
    so->pool = NULL;
}

void cp_so_ev_put(cp_so *so, cp_so_ev *ev)
{
    if (--ev->refs == 0) {
        ev->next = so->pool;
        so->pool = ev;
    }
}

static cp_so_ev *ev_get(cp_so *so)
{
    cp_so_ev *ev = so->pool;
    if (ev) {
        so->pool = ev->next;
    } else {
        ev = malloc(sizeof *ev);
        if (!ev)
            return NULL;
        /* Events without timing: recording them is cheaper on CUDA. */
        if (cp_be->event_create(&ev->e, 0) != CP_OK) {
            free(ev);
            return NULL;
        }
        so->events_created++;
    }
    ev->refs = 1;
    ev->done = 0;
    ev->open = 0;
    ev->wanted = 0;
    ev->next = NULL;
    return ev;
}

/* ---- open events (CP_REUSE_STREAM) ---- */

static cp_so_open *open_of(cp_so *so, uint64_t sid, int add)
{
    uint32_t i;
    for (i = 0; i < so->nopen; i++)
        if (so->open[i].sid == sid)
            return &so->open[i];
    if (!add)
        return NULL;
    /* Reuse the slot of a stream with nothing open (streams come and go). */
    for (i = 0; i < so->nopen; i++)
        if (!so->open[i].ev) {
            so->open[i].sid = sid;
            return &so->open[i];
        }
    if (so->nopen == so->capopen) {
        uint32_t cap = so->capopen ? 2 * so->capopen : 4;
        cp_so_open *n = realloc(so->open, cap * sizeof *n);
        if (!n)
            return NULL;
        so->open = n;
        so->capopen = cap;
    }
    so->open[so->nopen].sid = sid;
    so->open[so->nopen].ev = NULL;
    return &so->open[so->nopen++];
}

/* The open event is complete (recorded and done, or a synchronization):
 * the stream's next frees open another. */
static void open_close(cp_so *so, cp_so_open *o)
{
    cp_so_ev *ev = o->ev;
    if (ev->wanted) {
        ev->wanted = 0;
        so->nwanted--;
    }
    ev->open = 0;
    o->ev = NULL;
    cp_so_ev_put(so, ev); /* the table's reference */
}

void cp_so_record_wanted(cp_so *so, uint64_t sid, cp_stream *s)
{
    cp_so_open *o = open_of(so, sid, 0);
    if (!o || !o->ev || !o->ev->wanted)
        return;
    if (cp_be->event_record(o->ev->e, s) != CP_OK) {
        /* it stays open: a device synchronization completes it */
        o->ev->wanted = 0;
        so->nwanted--;
        return;
    }
    o->ev->seq = ++so->seq;
    so->events_recorded++;
    open_close(so, o);
}

static int open_pending(const cp_so *so)
{
    uint32_t i;
    for (i = 0; i < so->nopen; i++)
        if (so->open[i].ev && so->open[i].ev->refs > 1)
            return 1;
    return 0;
}

/* After a device synchronization every open event is complete. */
static void open_all_done(cp_so *so)
{
    uint32_t i;
    for (i = 0; i < so->nopen; i++)
        if (so->open[i].ev) {
            so->open[i].ev->done = 1;
            open_close(so, &so->open[i]);
        }
}

void cp_so_tag_free_slow(cp_so *so, cp_so_tag *t, uint64_t sid, cp_stream *s)
{
    cp_so_ev *ev;
    if (so->policy == CP_REUSE_STREAM) {
        cp_so_open *o = open_of(so, sid, 1);
        if (o && !o->ev && (o->ev = ev_get(so)) != NULL) {
            o->ev->open = 1;
            o->ev->seq = ++so->seq; /* orders it among this stream's events */
        }
        if (o && o->ev) {
            o->ev->refs++;
            t->ev = o->ev;
            return;
        }
    }
    ev = ev_get(so);
    if (ev && cp_be->event_record(ev->e, s) == CP_OK) {
        ev->seq = ++so->seq;
        so->events_recorded++;
        t->ev = ev;
        return;
    }
    /* No event could be had: the block stays on its stream, and crossing
     * later costs one device synchronization (safe whatever happens to s). */
    if (ev)
        cp_so_ev_put(so, ev);
    so->need_sync = 1;
}

void cp_so_record_legacy(cp_so *so, cp_stream *s)
{
    cp_event *e = NULL;
    if (cp_be->event_create(&e, 0) != CP_OK)
        return;
    if (cp_be->event_record(e, s) != CP_OK) {
        cp_be->event_destroy(e);
        return;
    }
    so->legacy.e = e;
    so->legacy.seq = ++so->seq;
    so->events_created++;
    so->events_recorded++;
}

/* Blocks with no event (MIXED, or a failed record) and the legacy ones not
 * yet covered by a recorded event become safe everywhere after one device
 * synchronization. */
static int legacy_pending(const cp_so *so)
{
    return so->legacy_used && !so->legacy.done;
}

static int sync_once(cp_so *so)
{
    if (so->need_sync || legacy_pending(so) || open_pending(so)) {
        if (cp_be && cp_be->device_synchronize() != CP_OK)
            return 0;
        so->need_sync = 0;
        so->legacy.done = 1;
        so->syncs++;
        open_all_done(so);
    }
    return 1;
}

int cp_so_sync(cp_so *so)
{
    return sync_once(so);
}

int cp_so_settle(cp_so *so, cp_so_tag *t)
{
    int done = 0;
    if (t->sid == CP_SO_ANY)
        return 1;
    if (!t->ev) {
        if (so->need_sync)
            return 0;
    } else if (!t->ev->done) {
        if (t->ev->open) {
            /* not recorded yet: ask the stream to record it at its next op */
            if (!t->ev->wanted) {
                t->ev->wanted = 1;
                so->nwanted++;
            }
            return 0;
        }
        if (!t->ev->e || cp_event_done(t->ev->e, &done) != CP_OK || !done)
            return 0; /* (an unrecorded legacy event: not known yet) */
        t->ev->done = 1;
    }
    cp_so_tag_release(so, t);
    t->sid = CP_SO_ANY;
    return 1;
}

int cp_so_usable_slow(cp_so *so, cp_so_tag *t, uint64_t sid, cp_stream *s)
{
    (void)sid;
    if (so->policy == CP_REUSE_STREAM)
        return 0;
    if (!t->ev) {
        /* No event to go by (a failed record, or MIXED): only a device
         * synchronization orders it, which the event policy never does
         * unless one already happened since. */
        if (so->policy == CP_REUSE_EVENT ? so->need_sync : !sync_once(so))
            return 0;
        t->sid = CP_SO_ANY;
        return 1;
    }
    if (t->ev->done) {
        cp_so_tag_release(so, t);
        t->sid = CP_SO_ANY;
        return 1;
    }
    if (!t->ev->e) {
        /* The legacy event, not recorded yet: waiting for it is impossible,
         * and the event policy never blocks. */
        if (so->policy == CP_REUSE_EVENT || !sync_once(so))
            return 0;
        cp_so_tag_release(so, t);
        t->sid = CP_SO_ANY;
        return 1;
    }
    if (so->policy == CP_REUSE_EVENT) {
        int done = 0;
        if (cp_event_done(t->ev->e, &done) != CP_OK || !done)
            return 0;
        t->ev->done = 1;
        cp_so_tag_release(so, t);
        t->sid = CP_SO_ANY;
        return 1;
    }
    /* CP_REUSE_WAIT: s waits for the free's event, then may use the block.
     * A free already complete needs no wait: the block is re-tagged ANY as
     * under CP_REUSE_EVENT, so that it merges with idle neighbours again.
     * (Kept with its stream's tag, every block that crossed streams stayed
     * apart from the pieces of other streams beside it until the pool's
     * next growth found its event complete, and the pool grew meanwhile:
     * 900 MiB against 46-90 MiB under the other policies with 8 streams.) */
    {
        int done = 0;
        if (cp_event_done(t->ev->e, &done) == CP_OK && done) {
            t->ev->done = 1;
            cp_so_tag_release(so, t);
            t->sid = CP_SO_ANY;
            return 1;
        }
    }
    if (cp_be->stream_wait_event(s, t->ev->e) != CP_OK)
        return 0;
    so->waits++;
    return 1;
}

int cp_so_merge_slow(cp_so *so, cp_so_tag *a, cp_so_tag *b)
{
    /* Idle memory (ANY) next to a block freed on a stream whose free is not
     * known complete: once more than one stream uses the pool, merging
     * would give the whole idle region that stream's tag, and another
     * stream could not use it (the pool would grow instead).  They stay
     * apart until the free is complete (the heap merges them then). */
    if (so->multi && so->share_idle && (a->sid == CP_SO_ANY) != (b->sid == CP_SO_ANY))
        return 0;
    if (b->sid == CP_SO_ANY) {
        cp_so_tag_release(so, b);
        return 1;
    }
    if (a->sid == CP_SO_ANY) {
        cp_so_tag_release(so, a);
        *a = *b;
        b->ev = NULL;
        return 1;
    }
    if (a->sid != b->sid)
        return 0;
    if (!a->ev || !b->ev) {
        /* One part has no event: keep none, and let crossing streams pay a
         * device synchronization (sound whatever the order of the frees). */
        cp_so_tag_release(so, a);
        cp_so_tag_release(so, b);
        so->need_sync = 1;
        return 1;
    }
    /* Same stream: the later event covers the earlier one. */
    if (b->ev->seq > a->ev->seq) {
        cp_so_ev *tmp = a->ev;
        a->ev = b->ev;
        b->ev = tmp;
    }
    cp_so_tag_release(so, b);
    return 1;
}

void cp_so_join(cp_so *so, cp_so_tag *a, cp_so_tag *b)
{
    /* A region that cannot refuse takes the stricter tag. */
    if (b->sid == CP_SO_ANY) {
        cp_so_tag_release(so, b);
        return;
    }
    if (a->sid == CP_SO_ANY) {
        cp_so_tag_release(so, a);
        *a = *b;
        b->ev = NULL;
        return;
    }
    if (cp_so_merge(so, a, b))
        return;
    /* Different streams: only a device synchronization orders both. */
    cp_so_tag_release(so, a);
    cp_so_tag_release(so, b);
    a->sid = CP_SO_MIXED;
    so->need_sync = 1;
}
